"""`headstudy COMMAND [hydra overrides]`: one command per DVC stage, plus `count`."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "prepare": "prepare the corpus and tokenizer (DVC stage)",
    "train": "train one model (DVC stage)",
    "evaluate": "test perplexity of one trained model (DVC stage)",
    "baselines": "unigram and bigram baselines on the test split (DVC stage)",
    "inspect": "per-head attention scores and ablations of the trained models (DVC stage)",
    "report": "render reports/ from the metrics (DVC stage)",
    "count": "print the model's parameter count as JSON",
    "reproduce": "retrain a tracked MLflow run and check it is bit-identical",
}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        lines = [f"  {name:<10} {text}" for name, text in COMMANDS.items()]
        print("usage: headstudy COMMAND [key=value ...]\n" + "\n".join(lines), file=sys.stderr)
        sys.exit(2)
    command, rest = args[0], args[1:]
    from headstudy.core.config import ConfigError

    try:
        importlib.import_module(f"headstudy.{command}").main(rest)
    except (ConfigError, FileNotFoundError, LookupError) as error:
        print(f"headstudy {command}: error: {error}", file=sys.stderr)
        sys.exit(2)
