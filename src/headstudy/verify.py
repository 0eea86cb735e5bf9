"""`headstudy verify [STUDY] [-n N | MODEL ...]`: retrain some of a study's committed models on this
machine, and say whether each of the study's conclusions still holds with them in place.

STUDY is the study's folder or its dvc.yaml (default: the project's own, the default study). The
models are N of the study's own (default: one per variant, the first seeds; `-n N` takes N, round
the variants), or the named ones (`h1-s5`). They are retrained by `headstudy lanes` (so by
`dvc repro`) in a scratch clone of the committed project, with its own empty DVC cache and MLflow
store, so nothing committed or cached here is touched; the scratch is removed at the end. Then,
per model: bit for bit or not (DVC's md5 of the model folder, as the lock records it), the
relative difference in test perplexity, and the first validation step where the curves differ;
and each of the study's stated conclusions (analysis/conclusions.py) recomputed with the
retrained models in place of the committed ones: holds or changes, with the numbers.
Exit status 0 when every conclusion holds, 1 when one changes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from headstudy.analysis.conclusions import conclusions, verdicts
from headstudy.analysis.rendering.inputs import read_curve
from headstudy.bookkeeping.machines import this_machine
from headstudy.common.errors import ConfigError
from headstudy.common.files import read_json
from headstudy.formats.machines import machine_kind, read_record
from headstudy.formats.names import model_name
from headstudy.settings.compose import project_root, read_params

USAGE = "headstudy verify [STUDY] [-n N | MODEL ...]"


def parse(args: list[str]) -> tuple[str, int | None, list[str]]:
    study, count, names, rest = ".", None, [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-n":
            if not rest or not rest[0].isdigit() or int(rest[0]) < 1:
                raise ConfigError(f"-n takes a number of models >= 1; usage: {USAGE}")
            count = int(rest.pop(0))
        elif arg.startswith("-"):
            raise ConfigError(f"{arg} is not an option of verify; usage: {USAGE}")
        elif arg.startswith("h") and "-s" in arg and "/" not in arg:
            names.append(arg)
        else:
            study = arg
    if count is not None and names:
        raise ConfigError(f"-n and model names exclude each other; usage: {USAGE}")
    return study, count, names


def study_folder(study: str, root: Path) -> Path:
    """The study's folder relative to the project root."""
    path = Path(study).resolve()
    path = path.parent if path.name == "dvc.yaml" else path
    if not (path / "dvc.yaml").is_file() or not (path / "params.yaml").is_file():
        raise ConfigError(f"{study}: expected a study's folder (or its dvc.yaml) with a dvc.yaml and a params.yaml")
    try:
        return path.relative_to(root.resolve())
    except ValueError:
        raise ConfigError(f"{study} is outside the project in {root}") from None


def stated_collapse(report: dict) -> float | None:
    """The test perplexity above which the study says a model collapsed (report.roundings' or
    report.share's collapse_above), or None where it states none: then it counts no collapses."""
    shares = report.get("share") or []
    for stated in [report.get("roundings") or {}, *(shares if isinstance(shares, list) else [shares])]:
        if stated.get("collapse_above") is not None:
            return float(stated["collapse_above"])
    return None


def chosen_models(study: dict, count: int | None, names: list[str]) -> list[tuple[str, int]]:
    variants, seeds = [str(v) for v in study["variants"]], list(study["seeds"])
    every = {model_name(variant, seed): (variant, seed) for variant in variants for seed in seeds}
    if names:
        unknown = [name for name in names if name not in every]
        if unknown:
            raise ConfigError(f"{', '.join(unknown)}: not a model of this study (its models: {', '.join(every)})")
        return [every[name] for name in names]
    count = len(variants) if count is None else min(count, len(every))
    round_robin = [(variant, seed) for seed in seeds for variant in variants]
    return round_robin[:count]


def read_ppl(folder: Path, name: str) -> float | None:
    path = folder / "metrics" / f"{name}.json"
    return read_json(path)["test_ppl"] if path.is_file() else None


def curve_points(folder: Path, name: str) -> list[tuple[int, float]]:
    path = folder / "metrics" / "curves" / f"{name}.csv"
    if not path.is_file():
        return []
    curve = read_curve(path)
    return list(zip(curve["step"].astype(int), curve["val_ppl"].astype(float), strict=True))


def model_md5(folder: Path, name: str) -> str | None:
    lock = yaml.safe_load((folder / "dvc.lock").read_text()) if (folder / "dvc.lock").is_file() else {}
    for stage in (lock or {}).get("stages", {}).values():
        for out in stage.get("outs", []):
            if out["path"] == f"models/{name}":
                return out.get("md5")
    return None


def parting_step(committed: list[tuple[int, float]], retrained: list[tuple[int, float]]) -> str:
    """The first validation step where the two curves differ at all, and where by more than 1%."""
    differ = [step for (step, a), (_, b) in zip(committed, retrained, strict=False) if a != b]
    apart = [step for (step, a), (_, b) in zip(committed, retrained, strict=False) if abs(b / a - 1) > 0.01]
    if not committed or not retrained:
        return "no curve"
    if not differ:
        return "identical"
    return f"differ from step {differ[0]}" + (f", by over 1% from step {apart[0]}" if apart else ", never by 1%")


def perplexities(folder: Path, variants: list[str], seeds: list[int]) -> dict[str, dict[int, float]]:
    found = {variant: {} for variant in variants}
    for variant in variants:
        for seed in seeds:
            value = read_ppl(folder, model_name(variant, seed))
            if value is not None:
                found[variant][seed] = value
    return found


def scratch_clone(root: Path, scratch: Path) -> Path:
    """The committed project, with this workspace's prepared data (DVC checks it against the lock and
    prepares it again where it differs), a DVC cache and an MLflow store of its own."""
    project = scratch / "project"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(root), str(project)], check=True)
    prepared = root / "data" / "prepared"
    if prepared.is_dir():
        shutil.copytree(prepared, project / "data" / "prepared")
    return project


def retrain(project: Path, folder: Path, models: list[tuple[str, int]]) -> None:
    targets = [f"{folder / 'dvc.yaml'}:evaluate@{variant}-{seed}" for variant, seed in models]
    env = {key: value for key, value in os.environ.items() if key not in ("MLFLOW_TRACKING_URI", "DVC_CACHE_DIR")}
    print(f"verify: retraining {len(models)} model(s) by `headstudy lanes` in {project}", flush=True)
    done = subprocess.run([str(Path(sys.executable).parent / "headstudy"), "lanes", *targets], cwd=project, env=env)
    if done.returncode:
        raise ConfigError(f"the retraining in {project} failed (exit {done.returncode}); nothing here was changed")


def verify(root: Path, study: str, count: int | None, names: list[str]) -> bool:
    folder = study_folder(study, root)
    params = read_params(root / folder / "params.yaml", required=True)
    plan, report = params["study"], params.get("report") or {}
    variants = [str(v) for v in plan["variants"]]
    partners = plan.get("partners") or {}
    partner_variants = [str(v) for v in partners.get("variants", [])]
    compare = [[str(a), str(b)] for a, b in report.get("compare") or [[variants[0], v] for v in variants[1:]]]
    collapse_above = stated_collapse(report)
    models = chosen_models(plan, count, names)
    record = read_record(root / folder)
    here = machine_kind(this_machine(threads=1))
    scratch = Path(tempfile.mkdtemp(prefix="headstudy-verify-"))
    try:
        project = scratch_clone(root, scratch)
        copy = project / folder
        seeds = list(plan["seeds"])
        before = perplexities(copy, variants, seeds)
        if partner_variants:
            before |= perplexities((copy / partners["folder"]).resolve(), partner_variants, seeds)
        committed = {
            model_name(v, s): (model_md5(copy, model_name(v, s)), curve_points(copy, model_name(v, s)))
            for v, s in models
        }
        retrain(project, folder, models)
        after = {variant: dict(values) for variant, values in before.items()}
        print(f"\nverify: {folder.as_posix() if str(folder) != '.' else 'the default study'} on {here}")
        print("| model | trained on | bit for bit | committed test ppl | retrained | relative difference | curves |")
        print("|---|---|---|---|---|---|---|")
        for variant, seed in models:
            name = model_name(variant, seed)
            md5, curve = committed[name]
            value = read_ppl(copy, name)
            after[variant][seed] = value
            kinds = {machine_kind(m) for m in (record["models"].get(name) or {}).get("machines", [])}
            old = before[variant].get(seed)
            difference = "" if old is None else f"{value / old - 1:+.2e}"
            same = "yes" if md5 is not None and model_md5(copy, name) == md5 else "no"
            shown = "none" if old is None else f"{old:.6f}"
            print(
                f"| {name} | {', '.join(sorted(kinds)) or 'not on record'} | {same} | {shown} "
                f"| {value:.6f} | {difference} | {parting_step(curve, curve_points(copy, name))} |"
            )
        results = verdicts(conclusions(before, compare, collapse_above), conclusions(after, compare, collapse_above))
        print("\n| conclusion | committed | retrained | verdict |\n|---|---|---|---|")
        for result in results:
            verdict = "holds" if result["holds"] else "changes"
            print(f"| {result['statement']} | {result['committed']} | {result['retrained']} | {verdict} |")
        held = sum(result["holds"] for result in results)
        print(f"\nverify: {held} of {len(results)} conclusions hold with the retrained models in place")
        return held == len(results)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(args: list[str]) -> None:
    def stopped(signum, _frame):
        raise SystemExit(128 + signum)  # through verify's finally: the scratch clone is removed

    signal.signal(signal.SIGTERM, stopped)
    study, count, names = parse(args)
    if not verify(project_root(), study, count, names):
        sys.exit(1)
