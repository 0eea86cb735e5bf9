"""Stage `report`: the seed's table from every model of the study, how sure it is (95% CIs
over seeds, the paired difference), the n-gram baselines, and the figures; as markdown,
as self-contained HTML, and as summary.json."""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import pandas as pd
import yaml

from headstudy.core import tracking
from headstudy.reporting import figures
from headstudy.core.files import write_atomically
from headstudy.reporting.statistics import mean_ci95, paired_difference, verdict

PARAMS_FILE = Path("params.yaml")
METRICS_DIR = Path("metrics")
REPORTS_DIR = Path("reports")


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `dvc repro` to produce it")
    return json.loads(path.read_text())


def study_metrics(heads: list[int], seeds: list[int]) -> pd.DataFrame:
    """One row per (heads, seed) of the study; models outside it are left out."""
    return pd.DataFrame([
        read_json(METRICS_DIR / f"h{h}-s{s}.json") for h in heads for s in seeds
    ])


def study_curves(heads: list[int], seeds: list[int]) -> pd.DataFrame:
    frames = []
    for h in heads:
        for s in seeds:
            frames.append(pd.read_csv(METRICS_DIR / "curves" / f"h{h}-s{s}.csv").assign(heads=h, seed=s))
    return pd.concat(frames, ignore_index=True)


def summarise(metrics: pd.DataFrame) -> list[dict]:
    rows = []
    for heads, group in metrics.groupby("heads", sort=True):
        group = group.sort_values("seed")
        mean, low, high = mean_ci95(group["test_ppl"])
        rows.append({
            "heads": int(heads),
            "params": int(group["params"].iloc[0]),
            "seeds": group["seed"].astype(int).tolist(),
            "test_ppl": group["test_ppl"].tolist(),
            "test_ppl_mean": mean,
            "test_ppl_ci95": [low, high],
            "word_ppl_mean": float(group["test_word_ppl"].mean()),
            "mlflow_run_ids": group["mlflow_run_id"].tolist(),
        })
    return rows


def compare(rows: list[dict], heads_a: int, heads_b: int) -> dict | None:
    """The paired comparison, or None when the study lacks one of the two head counts."""
    by_heads = {row["heads"]: dict(zip(row["seeds"], row["test_ppl"])) for row in rows}
    if heads_a not in by_heads or heads_b not in by_heads:
        return None
    return paired_difference(by_heads[heads_a], by_heads[heads_b], heads_a, heads_b)


def model_label(heads: int) -> str:
    return "One attention head" if heads == 1 else f"{heads} attention heads"


def interval(low: float, high: float, digits: int = 1) -> str:
    return "n/a (one seed)" if math.isnan(low) else f"[{low:.{digits}f}, {high:.{digits}f}]"


def results_table(rows: list[dict], baselines: dict) -> pd.DataFrame:
    bigram = baselines["bigram"]["test_ppl"]
    table = pd.DataFrame({
        "Model": [model_label(r["heads"]) + ("" if r["test_ppl_mean"] < bigram else " (does NOT beat the bigram)")
                  for r in rows],
        "Parameters": [f"{r['params']:,}" for r in rows],
        "Perplexity": [f"{r['test_ppl_mean']:.1f}" for r in rows],
        "95% CI": [interval(*r["test_ppl_ci95"]) for r in rows],
        "Per-word perplexity": [f"{r['word_ppl_mean']:.1f}" for r in rows],
        "Seeds": [", ".join(map(str, r["seeds"])) for r in rows],
    })
    vocab = baselines["vocab_size"]
    for name, params in (("unigram", vocab - 1), ("bigram", vocab * (vocab - 1))):
        result = baselines[name]
        table.loc[len(table)] = [
            f"{name.capitalize()} baseline (add-{result['add_k']:g})", f"{params:,}",
            f"{result['test_ppl']:.1f}", "", f"{result['test_word_ppl']:.1f}", "",
        ]
    return table


def comparison_table(comparison: dict, rows: list[dict], claim: dict) -> pd.DataFrame:
    by_heads = {r["heads"]: r for r in rows}
    a, b = comparison["heads_a"], comparison["heads_b"]
    claim_diff = claim["ppl_b"] - claim["ppl_a"]
    low, high = comparison["diff_ci95"]
    rel_low, rel_high = comparison["relative_ci95"]
    return pd.DataFrame({
        "": [f"{model_label(a)}: perplexity", f"{model_label(b)}: perplexity",
             f"Difference ({b} − {a}), paired over seeds", "Relative change"],
        "This study": [
            f"{by_heads[a]['test_ppl_mean']:.1f}", f"{by_heads[b]['test_ppl_mean']:.1f}",
            f"{comparison['diff_mean']:+.2f}, 95% CI {interval(low, high, 2)}",
            f"{comparison['relative']:+.1%}, 95% CI "
            + ("n/a" if math.isnan(rel_low) else f"[{rel_low:+.1%}, {rel_high:+.1%}]"),
        ],
        "Course chapter": [
            f"{claim['ppl_a']:.1f}", f"{claim['ppl_b']:.1f}", f"{claim_diff:+.1f}",
            f"{claim_diff / claim['ppl_a']:+.1%}",
        ],
    })


def comparison_blocks(comparison: dict | None, rows: list[dict], settings: dict) -> list[tuple[str, object]]:
    if comparison is None:
        heads_a, heads_b = settings["compare"]
        return [("text", f"No comparison: report.compare asks for {heads_a} and {heads_b} heads, "
                         "and study.heads lacks one of them.")]
    return [
        ("text", verdict(comparison)),
        ("table", comparison_table(comparison, rows, settings["seed_claim"])),
        ("text", "The course chapter's corpus is not known, so its perplexities are not comparable "
                 "with ours in level; its direction and its relative change are."),
    ]


def heads_table(heads: dict) -> pd.DataFrame:
    def cell(row, key, digits=2):
        return f"{row[key]['mean']:.{digits}f} ± {row[key]['sd']:.{digits}f}"

    return pd.DataFrame({
        "Model": [model_label(r["heads"]) for r in heads["rows"]],
        "Head": [f"layer {r['layer']}, head {r['head']}" for r in heads["rows"]],
        "Role": [r["role"] for r in heads["rows"]],
        "Previous token": [cell(r, "previous_token") for r in heads["rows"]],
        "Self": [cell(r, "self") for r in heads["rows"]],
        "First position": [cell(r, "first_position") for r in heads["rows"]],
        "Distance (tokens)": [cell(r, "distance", 1) for r in heads["rows"]],
        "Entropy (uniform), nats": [f"{cell(r, 'entropy')} ({r['uniform_entropy']['mean']:.2f})"
                                    for r in heads["rows"]],
        "Perplexity rise when zeroed": [cell(r, "ablation_delta_ppl", 1) for r in heads["rows"]],
    })


def heads_blocks(heads: dict) -> list[tuple[str, object]]:
    rules = "; ".join(f"{name}: {rule['score'].replace('_', '-')} score above {rule['above']}"
                      for name, rule in heads["roles"].items())
    seeds = ", ".join(map(str, heads["rows"][0]["seeds"])) if heads["rows"] else ""
    maps = [Path(p) for p in heads["figures"]["attention_maps"].values()]
    return [
        ("heading", "Inside the heads"),
        ("text", "Measured on the whole test split, over every query position after the first: "
                 "the mean attention weight on the previous token, on the token itself and on the "
                 "first position of the window; the mean distance attended, in tokens; the entropy "
                 "of the attention, beside that of uniform attention over the visible positions; "
                 "and the rise in test perplexity when the head's output is zeroed (for the 1-head "
                 f"model that removes attention altogether). Mean ± sd over seeds {seeds}."),
        ("table", heads_table(heads)),
        ("text", f"A head is named for a role only when its score passes the threshold set in "
                 f"conf/inspect/ ({rules}); otherwise it is called mixed."),
        ("text", heads["claim"]["sentence"] if heads["claim"] else
                 "No spotlight comparison: it needs a 1-head model and a multi-head model in the study."),
        ("text", f"Attention maps of the sentence \"{heads['sentence']}\" (row: the token attending; "
                 "column: the token attended to):"),
        ("figures", maps),
        ("figure", Path(heads["figures"]["head_scores"])),
    ]


def blocks(rows, baselines, comparison, settings, stats, figure_paths, heads) -> list[tuple[str, object]]:
    test = stats["splits"]["test"]
    tokens_per_word = (test["tokens"] - 1) / (test["words"] + test["lines"])
    laggards = [model_label(r["heads"]) for r in rows if r["test_ppl_mean"] >= baselines["bigram"]["test_ppl"]]
    return [
        ("title", "Does attention with four heads beat one head at the same width?"),
        ("text", f"Test split of the corpus `{stats['corpus']}`, {test['tokens'] - 1:,} tokens predicted. "
                 "Perplexity is per BPE token (lower is better): the mean over seeds, with a 95% "
                 "Student-t confidence interval across seeds."),
        ("table", results_table(rows, baselines)),
        ("heading", "The comparison"),
        *comparison_blocks(comparison, rows, settings),
        ("text", ("Every transformer beats the bigram baseline." if not laggards else
                  f"Warning: the bigram baseline beats {' and '.join(laggards).lower()}: a "
                  "transformer that cannot beat a bigram is undertrained or broken.")),
        ("text", f"Per-word perplexity is exp(total NLL / words), counting one end-of-line per "
                 f"line as the PTB convention does: {test['words']:,} words + {test['lines']:,} "
                 f"lines. It equals the per-token perplexity to the power tokens/words, "
                 f"{tokens_per_word:.3f} here, so both rank models the same way."),
        ("heading", "Figures"),
        *[("figure", path) for path in figure_paths],
        *heads_blocks(heads),
    ]


def to_markdown(parts, base: Path) -> str:
    out = []
    for kind, content in parts:
        out.append({
            "title": lambda c: f"# {c}",
            "heading": lambda c: f"## {c}",
            "text": lambda c: c,
            "table": lambda c: c.to_markdown(index=False, disable_numparse=True),
            "figure": lambda c: markdown_image(c, base),
            "figures": lambda c: " ".join(markdown_image(path, base) for path in c),
        }[kind](content))
    return "\n\n".join(out) + "\n"


def markdown_image(path: Path, base: Path) -> str:
    return f"![{path.stem.replace('_', ' ')}]({path.relative_to(base).as_posix()})"


def html_image(path: Path, width: str = "100%") -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{path.stem}" style="width:{width}" src="data:image/png;base64,{data}">'


def to_html(parts) -> str:
    body = []
    for kind, content in parts:
        if kind == "figure":
            body.append(html_image(content))
        elif kind == "figures":
            body.append("<div>" + "".join(html_image(p, f"{98 / len(content):.0f}%") for p in content) + "</div>")
        elif kind == "table":
            body.append(content.to_html(index=False, border=0))
        else:
            tag = {"title": "h1", "heading": "h2", "text": "p"}[kind]
            body.append(f"<{tag}>{html.escape(content)}</{tag}>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}"
             "table{border-collapse:collapse}td,th{padding:.3em .8em;border-bottom:1px solid #ccc}"
             "img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>headstudy results</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def nan_to_null(value):
    """JSON has no NaN: an interval that one seed cannot give is null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: nan_to_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [nan_to_null(item) for item in value]
    return value


def main(overrides: list[str]) -> None:
    params = yaml.safe_load(PARAMS_FILE.read_text())
    study, settings = params["study"], params["report"]
    metrics = study_metrics(study["heads"], study["seeds"])
    rows = summarise(metrics)
    baselines = read_json(METRICS_DIR / "baselines.json")
    stats = read_json(Path("data/prepared/stats.json"))
    baselines["vocab_size"] = stats["vocab_size"]
    heads_a, heads_b = settings["compare"]
    comparison = compare(rows, heads_a, heads_b)

    figure_dir = REPORTS_DIR / "figures"
    figure_paths = [
        figures.validation_curves(study_curves(study["heads"], study["seeds"]),
                                  figure_dir / "validation_curves.png"),
        figures.test_perplexity(rows, baselines, figure_dir / "test_perplexity.png"),
    ]
    heads = read_json(REPORTS_DIR / "heads.json")
    parts = blocks(rows, baselines, comparison, settings, stats, figure_paths, heads)
    summary = {"rows": rows, "baselines": {k: baselines[k] for k in ("unigram", "bigram")},
               "comparison": comparison}
    write_atomically(REPORTS_DIR / "summary.json", json.dumps(nan_to_null(summary), indent=2) + "\n")
    write_atomically(REPORTS_DIR / "results.md", to_markdown(parts, REPORTS_DIR))
    write_atomically(REPORTS_DIR / "results.html", to_html(parts))
    for run_id in metrics["mlflow_run_id"]:
        for path in figure_paths:
            tracking.log_artifact(run_id, path, "report")
    print(results_table(rows, baselines).to_string(index=False))
    print(verdict(comparison) if comparison else "no comparison: see reports/results.md")
