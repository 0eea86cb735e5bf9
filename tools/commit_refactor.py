"""Step 3 of CONTRIBUTING.md's refactor protocol: `dvc commit` of a study's stages whose code
changed but whose outputs did not, kept only if the proof holds.

The proof stages (--proof) must have their outputs in the workspace, retrained on the new code
(`dvc repro -s STAGE`). `dvc commit` hashes every output that is present, and an output that is
not (a model whose DVC cache is on another machine) keeps the md5 its lock records. Then every
output of every committed stage must have the md5 that the last commit's lock records; any
difference restores the lock as it was and fails: the change is not a refactor, so retrain
(`dvc repro`).

    python tools/commit_refactor.py studies/lr-tuning/dvc.yaml \\
        --proof 'train@1-0.003-0' --proof 'train@4-0.006-0' --commit 'train@*'

It prints the proof for the commit message."""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
from pathlib import Path

import yaml
from dvc.repo import Repo


def outs_of(lock: dict, stage: str) -> dict[str, str]:
    return {out["path"]: out.get("md5", "") for out in lock["stages"].get(stage, {}).get("outs", [])}


def keep_recorded_hash_of_missing_deps() -> None:
    """`allow_missing` keeps the recorded md5 of a dependency that is not in the workspace only
    when DVC raises DependencyDoesNotExistError for it; for a folder that is another stage's
    output (a model that evaluate reads) DVC 3.67 reaches os.stat first, so say it the DVC way."""
    from dvc.dependency.base import Dependency, DependencyDoesNotExistError

    save = Dependency.save

    def save_if_present(self, *args, **kwargs):
        if not Path(self.fs_path).exists():
            raise DependencyDoesNotExistError(self)
        return save(self, *args, **kwargs)

    Dependency.save = save_if_present
    # The run cache hashes every dependency again, missing ones included; it only speeds up
    # reruns on this machine, so a commit without retraining does not feed it.
    from dvc.stage.cache import StageCache

    StageCache.save = lambda *_: None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dvc_file", type=Path)
    parser.add_argument("--proof", action="append", required=True, help="a stage whose outputs were retrained here")
    parser.add_argument("--commit", action="append", required=True, help="stage names to commit (glob)")
    args = parser.parse_args(argv)
    lock_path = args.dvc_file.with_suffix(".lock")
    committed_text = subprocess.run(
        ["git", "show", f"HEAD:{lock_path}"], check=True, capture_output=True, text=True
    ).stdout
    committed = yaml.safe_load(committed_text)
    targets = [name for name in committed["stages"] if any(fnmatch.fnmatch(name, glob) for glob in args.commit)]
    missing_proofs = [stage for stage in args.proof if stage not in targets]
    if not targets or missing_proofs:
        print(
            f"commit_refactor: error: --proof {missing_proofs} not among the stages to commit {targets}",
            file=sys.stderr,
        )
        return 1
    for stage in args.proof:
        absent = [path for path in outs_of(committed, stage) if not (args.dvc_file.parent / path).exists()]
        if absent:
            print(
                f"commit_refactor: error: proof stage {stage} has no {absent} here: retrain it first", file=sys.stderr
            )
            return 1
    before_text = lock_path.read_text()
    keep_recorded_hash_of_missing_deps()
    with Repo(".") as repo:
        for name in targets:
            repo.commit(f"{args.dvc_file}:{name}", force=True, allow_missing=True)
    after = yaml.safe_load(lock_path.read_text())
    changed = {
        f"{stage}: {path}"
        for stage in targets
        for path, md5 in outs_of(after, stage).items()
        if outs_of(committed, stage).get(path) != md5
    }
    if changed:
        lock_path.write_text(before_text)
        print(
            f"commit_refactor: error: outputs differ from the committed lock: {sorted(changed)}; {lock_path} is "
            "restored. This change is no refactor: retrain the study (dvc repro)",
            file=sys.stderr,
        )
        return 1
    print(f"Proof: {len(args.proof)} stages retrained on this code, outputs identical to the committed {lock_path}:")
    for stage in args.proof:
        print("  " + stage + ": " + ", ".join(f"{path} {md5}" for path, md5 in sorted(outs_of(after, stage).items())))
    print(f"Committed {len(targets)} stages of {args.dvc_file} (outputs not here keep their recorded md5).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
