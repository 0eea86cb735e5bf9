"""What training in bfloat16 mixed precision changes in the results: the models of a study
trained with trainer.precision=bf16-mixed against the default study's float32 models of the same variants,
seeds, learning rates and budget, read from the committed metrics and curves.

    python benchmarks/precision_check.py --bf16 FOLDER [--float32 .]

For each model: final validation and test perplexity in both precisions and their log-ratio
(bf16 over float32). Beside them, the two sizes the change is judged against: the 4-vs-1 effect
(paired log-ratio of test perplexity over the seeds both precisions have, in each precision) and
the seed-to-seed spread (sd over the float32 study's seeds of each variant's log test perplexity).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import yaml

from headstudy.analysis.rendering.inputs import read_curve, read_json
from headstudy.analysis.statistics import paired_difference
from headstudy.common.errors import ConfigError


def study_models(folder: Path) -> dict[tuple[str, int], dict]:
    """(variant, seed) -> test and final validation perplexity of every model of the study in folder."""
    study = yaml.safe_load((folder / "params.yaml").read_text())["study"]
    models = {}
    for variant in map(str, study["variants"]):
        for seed in study["seeds"]:
            name = f"h{variant}-s{seed}"
            metrics = read_json(folder / "metrics" / f"{name}.json")
            curve = read_curve(folder / "metrics" / "curves" / f"{name}.csv")
            models[(variant, seed)] = {"test_ppl": metrics["test_ppl"], "val_ppl": float(curve["val_ppl"].iloc[-1])}
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--float32", type=Path, default=Path("."), help="the float32 study's folder")
    parser.add_argument("--bf16", type=Path, required=True, help="the bf16-mixed study's folder")
    args = parser.parse_args()
    try:
        float32, bf16 = study_models(args.float32), study_models(args.bf16)
    except (ConfigError, OSError) as error:
        parser.error(str(error))
    missing = sorted(set(bf16) - set(float32))
    if missing:
        parser.error(f"{args.float32} has no float32 model of {', '.join(f'h{v}-s{s}' for v, s in missing)}")

    rows = [
        {
            "model": f"h{variant}-s{seed}",
            **{
                f"{key}_{precision}": models[(variant, seed)][key]
                for precision, models in (("float32", float32), ("bf16", bf16))
                for key in ("val_ppl", "test_ppl")
            },
            **{
                f"{key}_log_ratio": math.log(bf16[(variant, seed)][key] / float32[(variant, seed)][key])
                for key in ("val_ppl", "test_ppl")
            },
        }
        for variant, seed in sorted(bf16)
    ]
    variants = [str(v) for v in yaml.safe_load((args.bf16 / "params.yaml").read_text())["study"]["variants"]]
    seeds = sorted({seed for _, seed in bf16})
    effect = {
        precision: paired_difference(
            {s: models[(variants[0], s)]["test_ppl"] for s in seeds},
            {s: models[(variants[-1], s)]["test_ppl"] for s in seeds},
            variants[0],
            variants[-1],
        )
        for precision, models in (("float32", float32), ("bf16", bf16))
    }
    spread = {
        variant: statistics.stdev(math.log(m["test_ppl"]) for (v, _), m in float32.items() if v == variant)
        for variant in variants
    }
    summary = {
        "models": rows,
        "largest_test_change": max(abs(row["test_ppl_log_ratio"]) for row in rows),
        "effect": {
            precision: {
                "contrast": f"{variants[-1]} vs {variants[0]}",
                "seeds": seeds,
                "log_ratio": e["log_ratio"],
                "ci95": e["log_ratio_ci95"],
            }
            for precision, e in effect.items()
        },
        "seed_sd_log_test_ppl_float32": spread,
    }
    print(json.dumps(summary, indent=2))
    print("\n| model | val ppl float32 | val ppl bf16 | log ratio | test ppl float32 | test ppl bf16 | log ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['model']} | {row['val_ppl_float32']:.3f} | {row['val_ppl_bf16']:.3f} "
            f"| {row['val_ppl_log_ratio']:+.4f} | {row['test_ppl_float32']:.3f} | {row['test_ppl_bf16']:.3f} "
            f"| {row['test_ppl_log_ratio']:+.4f} |"
        )
    for precision, e in summary["effect"].items():
        low, high = e["ci95"]
        print(f"{e['contrast']}, {precision}, seeds {seeds}: {e['log_ratio']:+.4f} per token [{low:+.4f}, {high:+.4f}]")
    print(
        "seed-to-seed sd of log test perplexity (float32): " + ", ".join(f"{v}: {sd:.4f}" for v, sd in spread.items())
    )


if __name__ == "__main__":
    main()
