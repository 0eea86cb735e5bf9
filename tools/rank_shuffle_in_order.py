"""The rank-shuffle test of the fair null, restricted to the shuffles that keep every set's heads
in distance order (exploratory, not a stage): ranks are defined within each model, so a model's
own heads are always in distance order and a shuffled set need not be. Run in a study's folder
after its inspect stage, e.g. for 4 heads at the pre-stated threshold:

    python tools/rank_shuffle_in_order.py 4 0.2

Exact over every shuffle (5 models of 4 heads: 120**3); slow beyond that.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from headstudy.analysis.measures.attention import captured_windows, heads_in_rank_order, rank_choice_misses
from headstudy.formats.prepared import load_tokens
from headstudy.formats.runconfig import read_config
from headstudy.formats.trained import load_trained


def covered_by_rank_choice(variant: str, threshold: float) -> tuple[np.ndarray, list[list[int]], list[dict]]:
    """Cells covered by every union of one head per rank (any model per rank), as inspect counts them."""
    torch.set_num_threads(1)
    config = read_config("configs/inspect.yaml")
    measured = [model for model in json.loads(Path("reports/heads.json").read_text())["models"]]
    measured = [model for model in measured if model["variant"] == variant]
    models = [
        load_trained(OmegaConf.merge(entry.training, {"name": entry.name, "paths": config.paths}))[0]
        for entry in config.models
        if str(entry.training.variant) == variant
    ]
    by_rank = [heads_in_rank_order(model["head_scores"], 0) for model in measured]
    distances = [{row["head"]: row["distance"] for row in model["head_scores"]} for model in measured]
    test = load_tokens(Path(config.paths.prepared), "test")
    misses, cells = np.zeros((len(models),) * len(by_rank[0]), dtype=np.int64), 0
    for weights in captured_windows(models, test, config.inspect.batch_size):
        rows = torch.cat([per_model[0] for per_model in weights], dim=1)
        cells += weights[0][0][:, 0].numel()
        misses += rank_choice_misses(~(rows > threshold), by_rank)
    return cells - misses, by_rank, distances


def main(variant: str, threshold: float) -> None:
    covered, by_rank, distances = covered_by_rank_choice(variant, threshold)
    models, heads = covered.shape[0], covered.ndim
    own = np.arange(models)
    observed = covered[(own,) * heads].sum()
    counts = {"all": [0, 0], "in order": [0, 0]}
    for assignment in itertools.product(itertools.permutations(range(models)), repeat=heads - 1):
        chosen = [own, *map(np.array, assignment)]  # chosen[rank][set]: the model giving that rank's head
        total = sum(covered[tuple(chosen[rank][j] for rank in range(heads))] for j in range(models))

        def distance(rank: int, j: int) -> float:
            model = chosen[rank][j]
            return distances[model][by_rank[model][rank]]

        in_order = all(distance(r, j) < distance(r + 1, j) for j in range(models) for r in range(heads - 1))
        for kind in ("all", "in order") if in_order else ("all",):
            counts[kind][0] += total >= observed
            counts[kind][1] += 1
    print(
        f"{variant} at {threshold:g}: every shuffle p = {counts['all'][0]}/{counts['all'][1]}; the shuffles that "
        f"keep each set in distance order p = {counts['in order'][0]}/{counts['in order'][1]}"
    )


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
