"""Stage `answers`: which test answers of a generated task one trained model gets wrong, split by
answer type: those where one needed clue is among the last 2 tokens before the query and another
10 or more back (one recency slope cannot serve both), and the others (analysis/measures/answer_types.py).

The model and the answer key are read and checked as the score stage reads them. metrics/answers/NAME.json
holds the whole-answer accuracy of each type, their counts, and, within conflict answers, the
accuracy of the recent clue's digit and of the old clue's."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from headstudy.analysis.measures.answer_types import accuracy_by_answer_type
from headstudy.common.files import write_json
from headstudy.execution import guards, jobs
from headstudy.formats.prepared import load_tokens, prepared_vocab_size
from headstudy.formats.queries import load_queries, load_task
from headstudy.formats.trained import load_trained


def answers(config: DictConfig) -> dict:
    guards.refuse_pipeline_outputs(config, "metrics")
    torch.set_num_threads(jobs.torch_threads(config.threads))
    model, run = load_trained(config)
    prepared = Path(config.paths.prepared)
    task = load_task(prepared)
    test = load_tokens(prepared, "test")
    key = load_queries(prepared, test, prepared_vocab_size(prepared))
    result = {key: run[key] for key in ("name", "variant", "heads", "seed")}
    result.update(accuracy_by_answer_type(model, test, key, task, config.data.batch_size))
    write_json(Path(config.paths.metrics) / "answers" / f"{run['name']}.json", result)
    conflict, other = result["conflict"], result["other"]

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    print(
        f"answers: {run['name']}: accuracy {share(conflict['accuracy'])} on {conflict['answers']} answers with a "
        f"clue at most {result['recent']} and one at least {result['old']} tokens back (recent digit "
        f"{share(conflict['recent_digit'])}, old digit {share(conflict['old_digit'])}), {share(other['accuracy'])} "
        f"on the other {other['answers']}"
    )
    return result


def main(config: DictConfig) -> None:
    answers(config)
