"""Every study's pipeline, studies/NAME/dvc.yaml, generated from its entry in studies/pipelines.yaml
and the template of its kind, so that studies of one kind cannot drift apart by a copy's edit.

    python tools/study_pipelines.py           # write each study's dvc.yaml that differs from its generation
    python tools/study_pipelines.py --check   # write nothing; exit 1 naming each one that differs

An entry is the study's folder under studies/ (`spotlight-hard/lr-check` for a nested one) and the
few things that set it apart from the other studies of its kind; the template gives the rest: the
stages, their deps (each stage's file in configs/, the data it reads and ../../fingerprints/COMMAND.txt,
with as many ../ as the folder is deep), their outputs and the comments. The kinds and their keys:

- every kind: `kind`, and `note`, a sentence added to the file's opening comment.
- `training` (configure, train over variant x seed, and evaluate with `evaluate: true`):
  `track_curves: false` leaves the training curves out of the outputs.
- `perplexity` (configure, train and evaluate over variant x seed, report; `dvc plots show` draws
  every variant's validation curve in one chart): `plots`, the report's figures that it also shows
  (default comparisons.png); `inspect: true` or the reason for an inspect stage, which needs
  `report_figures`, the report's figures named one by one, because inspect writes into
  reports/figures; `unlisted_metrics`, the reason why reports/metrics is a plain output and not
  in `dvc metrics show`.
- `lr-grid` (configure, train over variant x lr x seed, report): `plots`, by default its two figures.
- `task` (configure, prepare over clues, train and score over variant x clues x seed): `lr: true`
  adds lr to the matrix; `ablate: true`, `answers: true` add those stages; `report: true` adds the
  spotlight report, with `plots` (default: its two figures).
- `diagnosis` (configure, diagnose over variant x lr x seed x arm, the cliff report): `plots`, by
  default the cliff's four figures.

`report_deps` (every kind with a report) are further deps of the report stage, before its
fingerprint: folder-relative paths as dvc.yaml writes them, each with the reason as its comment
(or null); `configure_deps` (a perplexity study) the same for the configure stage. `plots`,
`report_deps` and `configure_deps` take a list, or a mapping of each item to its comment.

A bad entry is refused before anything is written, in one line that names the entry and the key.
This module is not part of the headstudy package: no stage imports it, and no fingerprint covers it."""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = "studies/pipelines.yaml"
# Pipelines under studies/ that no template generates, each with the reason. The project's own
# dvc.yaml is not under studies/ and stays hand-written: its fingerprint, prepare and baselines
# stages are the project's alone, and every study reads their outputs.
HAND_WRITTEN: dict[str, str] = {}
WIDTH = 100

# The matrix keys: the list of params.yaml each one walks, its prefix in a model's name, the order
# of the matrix (as every study has written it) and the order in a name.
LISTS = {"variant": "variants", "clues": "clues", "lr": "lrs", "seed": "seeds", "arm": "arms"}
PREFIX = {"variant": "h", "lr": "lr", "clues": "k", "seed": "s", "arm": ""}
MATRIX_ORDER = ("variant", "clues", "lr", "seed", "arm")
NAME_ORDER = ("variant", "lr", "clues", "seed", "arm")

NOT_METRICS = "Plain outputs, not DVC metrics: `dvc metrics show` lists the report's reports/metrics/."
HEADLINE = "The study's answer in `dvc metrics show`: a file per number with its CI (analysis/rendering/headline.py)."
KEPT = {"cache": False}
PERSISTED = {"cache": False, "persist": True}


class EntryError(ValueError):
    """A bad entry of studies/pipelines.yaml: the message is one line naming the entry and key."""

    def __init__(self, entry: str | None, key: str | None, problem: str):
        where = "".join([f": entry {entry!r}" if entry else "", f", key {key!r}" if key else ""])
        super().__init__(f"{ENTRIES}{where}: {problem}")


class UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping (an entry pasted twice,
    a key repeated in an entry) is refused instead of the last one silently winning."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"{key!r} given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


# Each kind's keys besides `kind` and `note`: (type, default).
FLAG, TEXT, FLAG_OR_TEXT, NAMES, NOTED = "flag", "text", "flag_or_text", "names", "noted"
LR_GRID_PLOTS = {
    "validation_curves.png": "`dvc plots show`: every variant's validation curve at every rate, in one figure.",
    "learning_rates.png": "Each rate against the final validation perplexity it gave, per variant.",
}
KINDS = {
    "training": {"evaluate": (FLAG, False), "track_curves": (FLAG, True)},
    "perplexity": {
        "plots": (NOTED, {"comparisons.png": None}),
        "inspect": (FLAG_OR_TEXT, False),
        "report_figures": (NAMES, None),
        "unlisted_metrics": (TEXT, None),
        "configure_deps": (NOTED, {}),
        "report_deps": (NOTED, {}),
    },
    "lr-grid": {"plots": (NOTED, LR_GRID_PLOTS), "report_deps": (NOTED, {})},
    "task": {
        "lr": (FLAG, False),
        "ablate": (FLAG, False),
        "answers": (FLAG, False),
        "report": (FLAG, False),
        "plots": (NOTED, {"accuracy_by_clues.png": None, "clue_attention.png": None}),
        "report_deps": (NOTED, {}),
    },
    "diagnosis": {
        "plots": (NOTED, {f"{name}.png": None for name in ("grad_norm", "attention_entropy", "max_logit", "loss")}),
        "report_deps": (NOTED, {}),
    },
}
FOLDER = re.compile(r"[a-z0-9][a-z0-9._-]*")


def checked_value(name: str, key: str, kind: str, value):
    """The value of one key, as the template takes it, or EntryError."""
    if kind == FLAG or (kind == FLAG_OR_TEXT and isinstance(value, bool)):
        if not isinstance(value, bool):
            raise EntryError(name, key, f"must be true or false, got {value!r}")
        return value
    if kind in (TEXT, FLAG_OR_TEXT):
        if not isinstance(value, str) or not value.strip() or "\n" in value.strip():
            raise EntryError(
                name, key, f"must be one line of text{' or true/false' if kind != TEXT else ''}, got {value!r}"
            )
        return " ".join(value.split())
    if kind == NAMES:
        if not isinstance(value, list) or not value:
            raise EntryError(name, key, f"must be a list of names, got {value!r}")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (str, int)) or not str(item).strip():
                raise EntryError(name, key, f"{item!r} is not a name (a variant or a file name)")
            if key == "report_figures" and "/" in str(item):
                raise EntryError(name, key, f"{item!r}: a figure is a file name in reports/figures/, without a folder")
        return [str(item) for item in value]
    # NOTED: a list of paths, or a mapping of each path to its comment.
    if isinstance(value, list):
        value = dict.fromkeys(value)
    if not isinstance(value, dict):
        raise EntryError(name, key, f"must be a list, or a mapping of each item to its comment, got {value!r}")
    noted = {}
    for item, comment in value.items():
        if not isinstance(item, str) or not item.strip() or item.strip() != item:
            raise EntryError(name, key, f"{item!r} is not a path")
        if key == "plots" and "/" in item:
            raise EntryError(name, key, f"{item!r}: a plot is a file name in reports/figures/, without a folder")
        if comment is not None and (not isinstance(comment, str) or not comment.strip()):
            raise EntryError(name, key, f"the comment of {item!r} must be text or null, got {comment!r}")
        noted[item] = None if comment is None else " ".join(comment.split())
    return noted


def checked_entry(name, entry, root: Path = ROOT) -> dict:
    """The entry with every key of its kind, defaults filled in, or EntryError."""
    if not isinstance(name, str) or not all(FOLDER.fullmatch(part) for part in name.split("/")):
        raise EntryError(str(name), None, "an entry is a folder under studies/: lower-case names joined by /")
    if not isinstance(entry, dict):
        raise EntryError(name, None, f"must be a mapping of keys, got {entry!r}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise EntryError(name, "kind", f"{kind!r} is not a kind of study; the kinds are {', '.join(KINDS)}")
    keys = KINDS[kind]
    checked = {"name": name, "kind": kind, "note": None}
    for key, value in entry.items():
        if key == "kind":
            continue
        if key == "note":
            checked["note"] = checked_value(name, key, TEXT, value)
        elif key not in keys:
            raise EntryError(name, key, f"not a key of a {kind} study; its keys are note, {', '.join(keys)}")
        else:
            checked[key] = checked_value(name, key, keys[key][0], value)
    for key, (_, default) in keys.items():
        checked.setdefault(key, default)
    if kind == "perplexity" and checked["inspect"] is not False and not checked["report_figures"]:
        raise EntryError(
            name,
            "report_figures",
            "missing: with an inspect stage, which writes reports/figures/heads, the report names its figures",
        )
    if kind == "task" and not checked["report"]:
        for key in ("plots", "report_deps"):
            if key in entry:
                raise EntryError(name, key, "only with `report: true`: without a report stage nothing has it")
    if not (root / "studies" / name / "params.yaml").is_file():
        raise EntryError(name, None, f"studies/{name}/params.yaml not found: write the study's params.yaml first")
    return checked


def read_entries(root: Path = ROOT) -> dict[str, dict]:
    """Every entry of studies/pipelines.yaml, checked, or EntryError for the first bad one."""
    path = root / ENTRIES
    try:
        entries = yaml.load(path.read_text(), Loader=UniqueKeys)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}: " if mark else ""
        raise EntryError(None, None, f"{where}{' '.join(str(error.problem).split())}") from error
    except (OSError, yaml.YAMLError) as error:
        raise EntryError(None, None, f"cannot read it: {' '.join(str(error).split())}") from error
    if not isinstance(entries, dict) or not entries:
        raise EntryError(None, None, "must be a mapping of each study's folder under studies/ to its entry")
    return {name: checked_entry(name, entry, root) for name, entry in entries.items()}


# The text: a few helpers, the stages every kind shares, then one template per kind.


def comment(text: str, indent: int) -> list[str]:
    """Text as YAML comment lines, wrapped to WIDTH columns."""
    prefix = " " * indent + "# "
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=prefix, break_on_hyphens=False)


def scalar(text: str) -> str:
    """A string as a YAML flow item: bare where YAML reads it back as that string, quoted where not."""
    bare = re.fullmatch(r"[A-Za-z0-9_./-]+", text) and yaml.safe_load(f"[{text}]") == [text]
    return text if bare else json.dumps(text)


def outputs(key: str, items: list[tuple[str, dict, str | None]], indent: int = 4) -> list[str]:
    """An `outs:` or `metrics:` list: each item's path with its flags (none: a plain path) and comment."""
    lines = [" " * indent + f"{key}:"]
    for path, flags, note in items:
        lines += comment(note, indent + 2) if note else []
        lines.append(" " * (indent + 2) + f"- {path}" + (":" if flags else ""))
        lines += [" " * (indent + 6) + f"{flag}: {json.dumps(value)}" for flag, value in flags.items()]
    return lines


def deps(items: list[str] | dict[str, str | None]) -> list[str]:
    items = dict.fromkeys(items) if isinstance(items, list) else items
    lines = ["    deps:"]
    for path, note in items.items():
        lines += comment(note, 6) if note else []
        lines.append(f"      - {path}")
    return lines


def model_name(axes: tuple[str, ...]) -> str:
    """The name of one model, or run, of the matrix: h${item.variant}-lr${item.lr}-s${item.seed}."""
    return "-".join(f"{PREFIX[axis]}${{item.{axis}}}" for axis in NAME_ORDER if axis in axes)


def configure(up: str, reads: dict[str, str | None] | None = None) -> list[str]:
    return [
        "  configure:",
        "    cmd: headstudy configure",
        "    params:",
        "      - params.yaml:",
        *deps({f"{up}conf": None, **(reads or {}), f"{up}fingerprints/configure.txt": None}),
        *outputs("outs", [("configs", PERSISTED, None)]),
    ]


def per_model(
    stage: str,
    axes: tuple[str, ...],
    reads: list[str],
    outs: list[tuple[str, dict, str | None]],
    up: str,
    about: str | None = None,
    outs_about: str | None = None,
    folder: str = "train",
) -> list[str]:
    """A stage run once per cell of the matrix over axes, from its config configs/FOLDER/NAME.yaml.
    NAME in reads and outs stands for the cell's model name."""
    name = model_name(axes)
    config = f"configs/{folder}/{name}.yaml"
    return [
        *(comment(about, 2) if about else []),
        f"  {stage}:",
        "    matrix:",
        *[f"      {axis}: ${{study.{LISTS[axis]}}}" for axis in MATRIX_ORDER if axis in axes],
        f"    cmd: headstudy {stage} --config {config}",
        *deps([config, *(read.replace("NAME", name) for read in reads), f"{up}fingerprints/{stage}.txt"]),
        *(comment(outs_about, 4) if outs_about else []),
        *outputs("outs", [(path.replace("NAME", name), flags, note) for path, flags, note in outs]),
    ]


def report(
    entry: dict,
    command: str,
    reads: list[str],
    outs: list[str | tuple[str, str]],
    up: str,
    headline: bool = True,
) -> list[str]:
    """The report stage, named after its command's kind: its own deps, the entry's report_deps,
    its fingerprint. Every output persists: a report that refuses leaves the last one in place.
    An out is a path, or (path, its comment). With headline, reports/metrics is the study's answer
    for `dvc metrics show`, unless the entry gives a reason for it to be a plain output."""
    own = ["configs/report.yaml", *reads]
    for path in entry["report_deps"]:
        if path in own:
            raise EntryError(entry["name"], "report_deps", f"{path} is already a dep of every such report")
    kept = [(out, PERSISTED, None) if isinstance(out, str) else (out[0], PERSISTED, out[1]) for out in outs]
    lines = [
        f"  {'spotlight' if command == 'spotlight' else 'report'}:",
        f"    cmd: headstudy {command} --config configs/report.yaml",
        *deps({**dict.fromkeys(own), **entry["report_deps"], f"{up}fingerprints/{command}.txt": None}),
    ]
    if not headline:
        return [*lines, *outputs("outs", kept)]
    if entry.get("unlisted_metrics"):
        return [*lines, *outputs("outs", [*kept, ("reports/metrics", PERSISTED, entry["unlisted_metrics"])])]
    metrics = outputs("metrics", [("reports/metrics", PERSISTED, None)])
    return [*lines, *outputs("outs", kept), *comment(HEADLINE, 4), *metrics]


def plots(entry: dict, chart: list[str] | None = None) -> list[str]:
    lines = ["plots:", *(chart or [])]
    for figure, note in entry["plots"].items():
        lines += comment(note, 2) if note else []
        lines.append(f"  - reports/figures/{figure}")
    return lines


def header(entry: dict, here: list[str], projects: list[str]) -> list[str]:
    """The opening comment: generated from what, what stays in the folder, what is the project's."""
    name = entry["name"]
    part = " (a part of ../dvc.yaml's study; ../README.md)" if "/" in name else ""
    stays = ", ".join(here[:-1]) + f" and {here[-1]}" if len(here) > 1 else here[0]
    theirs = f"; {' and '.join(projects)} {'are' if len(projects) > 1 else 'is'} the project's" if projects else ""
    paragraphs = [
        f"Generated by tools/study_pipelines.py from the entry `{name}` in studies/pipelines.yaml (kind: "
        f"{entry['kind']}). Edit the entry, or the template, and rerun the tool, not this file: "
        "tests/test_study_templates.py fails on any difference.",
        f"Runs from this folder{part}: its {stays} stay here{theirs}. Deps follow the same rule as the "
        "project's dvc.yaml: each stage depends on its file in configs/ and on exactly the code its "
        "command imports (tests/test_dvc_graph.py checks it).",
    ]
    paragraphs += [entry["note"]] if entry["note"] else []
    return [line for paragraph in paragraphs for line in comment(paragraph, 0)]


def curves_out(axes: tuple[str, ...]) -> tuple[str, dict, None]:
    return (f"metrics/curves/{model_name(axes)}.csv", KEPT, None)


def training(entry: dict, up: str) -> list[list[str]]:
    """Configure, train over variant x seed, and optionally evaluate: no report of its own."""
    axes = ("variant", "seed")
    train = [("models/NAME", {}, None), *([curves_out(axes)] if entry["track_curves"] else [])]
    stages = [configure(up, entry.get("configure_deps")), per_model("train", axes, [f"{up}data/prepared"], train, up)]
    if entry["evaluate"]:
        stages.append(evaluate(axes, up))
    return stages


def evaluate(axes: tuple[str, ...], up: str) -> list[str]:
    outs = [("metrics/NAME.json", KEPT, None)]
    return per_model("evaluate", axes, [f"{up}data/prepared", "models/NAME"], outs, up, outs_about=NOT_METRICS)


def perplexity(entry: dict, up: str) -> list[list[str]]:
    """Configure, train and evaluate over variant x seed, an optional inspect, and the report."""
    stages = training({**entry, "evaluate": True, "track_curves": True}, up)
    reads = ["metrics"]
    if entry["inspect"] is not False:
        about = "Which position each head attends to, and the spotlight coverage"
        about += f": {entry['inspect']}" if isinstance(entry["inspect"], str) else "."
        stages.append(
            [
                *comment(about, 2),
                "  inspect:",
                "    cmd: headstudy inspect --config configs/inspect.yaml",
                *deps(["configs/inspect.yaml", f"{up}data/prepared", "models", f"{up}fingerprints/inspect.txt"]),
                *outputs("outs", [("reports/heads.json", KEPT, None), ("reports/figures/heads", KEPT, None)]),
            ]
        )
        reads.append("reports/heads.json")
    reads += [f"{up}data/prepared/stats.json", f"{up}metrics/baselines.json"]
    figures = [f"reports/figures/{name}" for name in entry["report_figures"] or []] or ["reports/figures"]
    curves = (
        "reports/validation_curves.csv",
        "Each variant's validation perplexity (geometric mean over seeds), named as the report names it, "
        "for `dvc plots show`.",
    )
    outs = ["reports/results.md", "reports/results.html", *figures, "reports/summary.json", curves]
    stages.append(report(entry, "report", reads, outs, up))
    chart = [
        *comment("`dvc plots show`: the variants' validation curves in one chart, not one chart per model.", 2),
        "  - reports/validation_curves.csv:",
        "      template: variants",
        "      x: tokens",
        "      y: perplexity",
        "      x_label: training tokens",
        "      y_label: validation perplexity",
    ]
    stages.append(plots(entry, chart))
    return stages


def lr_grid(entry: dict, up: str) -> list[list[str]]:
    """Configure, train over variant x lr x seed, and the report that selects each variant's rate."""
    axes = ("variant", "lr", "seed")
    train = [("models/NAME", {}, None), curves_out(axes)]
    outs = ["reports/results.md", "reports/results.html", "reports/figures", "reports/summary.json"]
    return [
        configure(up),
        per_model("train", axes, [f"{up}data/prepared"], train, up),
        report(entry, "report", ["metrics/curves"], outs, up),
        plots(entry),
    ]


def task(entry: dict, up: str) -> list[list[str]]:
    """Configure, prepare the task per clue count, train and score over variant x clues (x lr) x
    seed, optionally ablate and answers, and optionally the spotlight report."""
    axes = ("variant", "clues", "lr", "seed") if entry["lr"] else ("variant", "clues", "seed")
    model = ["data/k${item.clues}", "models/NAME"]
    stages = [
        configure(up),
        [
            *comment(
                "The task with k clues, generated from data.seed: the same stream for every k but its answers.", 2
            ),
            "  prepare:",
            "    matrix:",
            "      clues: ${study.clues}",
            "    cmd: headstudy prepare --config configs/prepare/k${item.clues}.yaml",
            *deps(["configs/prepare/k${item.clues}.yaml", f"{up}fingerprints/prepare.txt"]),
            *outputs("outs", [("data/k${item.clues}", {}, None)]),
        ],
        per_model("train", axes, ["data/k${item.clues}"], [("models/NAME", {}, None), curves_out(axes)], up),
        per_model(
            "score",
            axes,
            model,
            [("metrics/NAME.json", KEPT, None), ("metrics/attention/NAME.json", KEPT, None)],
            up,
            about="Accuracy at the answer positions and the heads' attention on each clue.",
            outs_about=NOT_METRICS,
        ),
    ]
    if entry["ablate"]:
        about = "The causal check: each head zeroed in turn, and how far each clue's digit falls."
        stages.append(per_model("ablate", axes, model, [("metrics/ablation/NAME.json", KEPT, None)], up, about))
    if entry["answers"]:
        about = "Which answers it gets wrong: those where one clue is recent and another old, against the others."
        stages.append(per_model("answers", axes, model, [("metrics/answers/NAME.json", KEPT, None)], up, about))
    if entry["report"]:
        outs = ["reports/results.md", "reports/results.html", "reports/figures", "reports/summary.json"]
        stages += [report(entry, "spotlight", ["metrics"], outs, up), plots(entry)]
    return stages


def diagnosis(entry: dict, up: str) -> list[list[str]]:
    """Configure, diagnose over variant x lr x seed x arm (every step watched), and the cliff report."""
    axes = ("variant", "lr", "seed", "arm")
    about = (
        "One training as the train stage runs it, watched every step; the arm may clip its gradients. "
        "About as long as a training of the train stage (8 minutes on the reference machine)."
    )
    runs = [(f"metrics/diagnostics/NAME.{suffix}", KEPT, None) for suffix in ("csv", "json")]
    outs = ["reports/results.md", "reports/summary.json", "reports/figures"]
    return [
        configure(up),
        per_model("diagnose", axes, [f"{up}data/prepared"], runs, up, about, folder="diagnose"),
        report(entry, "cliff", ["metrics/diagnostics"], outs, up, headline=False),
        plots(entry),
    ]


TEMPLATES = {"training": training, "perplexity": perplexity, "lr-grid": lr_grid, "task": task, "diagnosis": diagnosis}


def folders_kept(entry: dict) -> tuple[list[str], list[str]]:
    """What the header says stays in the study's folder, and what of the project's it reads."""
    kind = entry["kind"]
    reported = kind in ("perplexity", "lr-grid", "diagnosis") or (kind == "task" and entry["report"])
    here = ["configs", *(["data"] if kind == "task" else []), *(["models"] if kind != "diagnosis" else [])]
    if kind != "training" or entry["evaluate"] or entry["track_curves"]:
        here.append("metrics")
    here += ["report"] if reported else []
    projects = [] if kind == "task" else ["the prepared data"]
    projects += ["the baselines"] if kind == "perplexity" else []
    return here, projects


def generate(entry: dict) -> str:
    """The text of the study's dvc.yaml."""
    up = "../" * (entry["name"].count("/") + 2)
    blocks = TEMPLATES[entry["kind"]](entry, up)
    stages = [block for block in blocks if block[0] != "plots:"]
    lines = [*header(entry, *folders_kept(entry)), "stages:"]
    for number, block in enumerate(stages):
        lines += ([""] if number else []) + block
    for block in blocks:
        if block[0] == "plots:":
            lines += ["", *block]
    return "\n".join(lines) + "\n"


SAME = "the same pipeline, other comments or layout"


def differences(old: str, new: str) -> list[str]:
    """Where two dvc.yaml texts define different pipelines, as PyYAML reads them: the top-level
    keys, and for stages each stage's keys (cmd, deps, outs, params, metrics, matrix, ...)."""
    try:
        old = yaml.safe_load(old) or {}
    except yaml.YAMLError:
        return ["everything (the file was no YAML)"]
    new = yaml.safe_load(new)
    if not isinstance(old, dict):
        return ["everything (the file was no mapping)"]
    found = [key for key in sorted({*old, *new} - {"stages"}) if old.get(key) != new.get(key)]
    old_stages, new_stages = old.get("stages") or {}, new.get("stages") or {}
    if list(old_stages) != list(new_stages):
        found.append(f"stages: {list(old_stages)} against {list(new_stages)}")
    for stage in [stage for stage in old_stages if stage in new_stages]:
        a, b = old_stages[stage], new_stages[stage]
        found += [f"stages.{stage}.{key}" for key in sorted({*a, *b}) if a.get(key) != b.get(key)]
    return found


def study_pipelines(root: Path = ROOT) -> list[str]:
    """The folders under studies/ that hold a dvc.yaml."""
    return sorted(path.parent.relative_to(root / "studies").as_posix() for path in (root / "studies").rglob("dvc.yaml"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/study_pipelines.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file differs from its generation"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the project's root (default: this tool's)")
    args = parser.parse_args(argv)
    try:  # every entry checked and generated before anything is written
        entries = read_entries(args.root)
        texts = {name: generate(entry) for name, entry in entries.items()}
    except EntryError as error:
        print(f"study_pipelines: error: {error}", file=sys.stderr)
        return 2
    stale = []
    for name, text in texts.items():
        path = args.root / "studies" / name / "dvc.yaml"
        before = path.read_text() if path.is_file() else None
        if before == text:
            continue
        changed = None if before is None else differences(before, text)
        said = "a new pipeline" if changed is None else f"changes {', '.join(changed)}" if changed else SAME
        stale.append(f"studies/{name}/dvc.yaml: {said}")
        if not args.check:
            path.write_text(text)
            print(f"wrote studies/{name}/dvc.yaml: {said}")
    orphans = [name for name in study_pipelines(args.root) if name not in entries and name not in HAND_WRITTEN]
    for name in orphans:
        print(f"studies/{name}/dvc.yaml has no entry in {ENTRIES}: add one", file=sys.stderr)
    if args.check:
        print(
            "\n".join(f"differs from its generation: {line}" for line in stale)
            or f"each of the {len(texts)} studies' pipelines is its generation"
        )
        return 1 if stale or orphans else 0
    print(f"{len(stale)} of {len(texts)} studies' pipelines written, the others were their generation already")
    return 1 if orphans else 0


if __name__ == "__main__":
    sys.exit(main())
