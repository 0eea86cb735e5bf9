"""Commit, without retraining, the stages that a refactor of the weights' path left stale, once
tools/prove_refactor.py has proven on this machine that BASE's code and the working tree's code
write identical outputs.

    python tools/commit_refactor.py BASE [DVC_FILE ...]   # default: dvc.yaml and every studies/**/dvc.yaml

First the proof runs (its output is printed for the commit message). Then, in each pipeline, a
stage is committed only if `dvc status` finds nothing changed but fingerprints/*.txt of a command
whose code the proof ran or whose code did not change, and dependencies or outputs that are not in
this workspace (a model whose DVC cache is on another machine keeps the md5 its lock records). Any
other change (a config, params, conf/, an output present and different) is refused: run that
stage with `dvc repro` first (configure, fingerprint, prepare are cheap), or retrain. After
`dvc commit`, every output of every committed stage must have the md5 that the lock recorded
before; otherwise the lock is restored and the commit fails."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml
from dvc.repo import Repo

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prove_refactor  # noqa: E402

ROOT = prove_refactor.ROOT
ABSENT = ("deleted", "not in cache")


def is_absent(path: Path) -> bool:
    """Not in this workspace: missing, or a folder that holds nothing but the .gitignore files DVC
    writes for outputs (models/ of a clone whose models were trained elsewhere)."""
    path = Path(path)
    return not path.exists() or (path.is_dir() and all(f.name == ".gitignore" for f in path.rglob("*") if f.is_file()))


def pipelines() -> list[Path]:
    return [Path("dvc.yaml"), *sorted(path.relative_to(ROOT) for path in (ROOT / "studies").rglob("dvc.yaml"))]


def outs_of(lock: dict, stage: str) -> dict[str, str]:
    return {out["path"]: out.get("md5", "") for out in lock["stages"].get(stage, {}).get("outs", [])}


def refusals(status: dict, allowed_fingerprints: set[str]) -> list[str]:
    """Why a stale stage may not be committed without running it: one line per change."""
    found = []
    for stage, changes in status.items():
        for change in changes:
            if not isinstance(change, dict):
                found.append(f"{stage}: {change}")
                continue
            for path, state in change.get("changed deps", {}).items():
                fingerprint = Path(path).name if Path(path).parent.name == "fingerprints" else None
                if state not in ABSENT and fingerprint not in allowed_fingerprints and not is_absent(ROOT / path):
                    found.append(f"{stage}: {path} {state}")
            for path, state in change.get("changed outs", {}).items():
                if state not in ABSENT:
                    found.append(f"{stage}: output {path} {state}")
            found += [f"{stage}: {key}" for key in change if key not in ("changed deps", "changed outs")]
    return found


def keep_recorded_hash_of_missing_deps() -> None:
    """`allow_missing` keeps the recorded md5 of a dependency that is not in the workspace only
    when DVC raises DependencyDoesNotExistError for it; for a folder that is another stage's
    output (a model that evaluate reads) DVC 3.67 reaches os.stat first, so say it the DVC way."""
    from dvc.dependency.base import Dependency, DependencyDoesNotExistError

    save = Dependency.save

    def save_if_present(self, *args, **kwargs):
        if is_absent(Path(self.fs_path)):
            raise DependencyDoesNotExistError(self)
        return save(self, *args, **kwargs)

    Dependency.save = save_if_present
    # The run cache hashes every dependency again, missing ones included; it only speeds up
    # reruns on this machine, so a commit without retraining does not feed it.
    from dvc.stage.cache import StageCache

    StageCache.save = lambda *_: None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit before the change")
    parser.add_argument("dvc_files", nargs="*", type=Path, help="the pipelines (default: every one)")
    args = parser.parse_args(argv)
    identical, changed = prove_refactor.prove(args.base)
    if not identical:
        print("commit_refactor: the proof failed: this change is arithmetic; retrain (dvc repro)", file=sys.stderr)
        return 1
    unproven = sorted(set(changed) - set(prove_refactor.PROVEN_COMMANDS))
    allowed = {f"{command}.txt" for command in prove_refactor.COMMANDS if command not in unproven}
    plan: dict[Path, list[str]] = {}
    problems = []
    for dvc_file in args.dvc_files or pipelines():
        status = json.loads(
            subprocess.run(
                ["dvc", "status", "--json", str(dvc_file)], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout
            or "{}"
        )
        problems += refusals(status, allowed)
        plan[dvc_file] = [qualified.split(":", 1)[-1] for qualified in status]
    if problems:
        print("commit_refactor: error: not committed; these changes need a run, not a commit:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        if unproven:
            print(f"  (the proof runs no {', '.join(unproven)}, whose code changed)", file=sys.stderr)
        return 1
    keep_recorded_hash_of_missing_deps()
    committed = 0
    for dvc_file, stages in plan.items():
        if not stages:
            continue
        lock_path = ROOT / dvc_file.with_suffix(".lock")
        before_text = lock_path.read_text()
        before = yaml.safe_load(before_text)
        # The whole pipeline in one commit, so that DVC collects its stages once: 996 stages took
        # 30 minutes one commit each, under one minute this way (with every pipeline's status). A
        # stage that `dvc status` found up to date is written back as it was: the check below
        # holds for every stage of the pipeline.
        with Repo(str(ROOT)) as repo:
            repo.commit(str(dvc_file), force=True, allow_missing=True)
        after = yaml.safe_load(lock_path.read_text())
        moved = [
            f"{stage}: {path}"
            for stage in before["stages"]
            for path, md5 in outs_of(after, stage).items()
            if outs_of(before, stage).get(path) != md5
        ]
        if moved or set(after["stages"]) != set(before["stages"]):
            lock_path.write_text(before_text)
            print(f"commit_refactor: error: outputs differ from {lock_path}: {moved}; restored", file=sys.stderr)
            return 1
        committed += len(stages)
        print(f"  {dvc_file}: {len(stages)} stages committed, every output's md5 as recorded")
    print(f"Committed {committed} stages under the proof above (outputs not here keep their recorded md5).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
