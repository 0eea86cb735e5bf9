"""Three tiny trainings started together on a new MLflow store, ROUNDS times in a row: how many
rounds had all three finish. A correctness count, not a timing (the dataset row that
each training inserted raced, and one training died with a UNIQUE constraint failure).

    python benchmarks/start_together.py [--rounds 20] [--trainings 3]

A small corpus of generated words is prepared once. In each round every training gets ready
(imports, config, model) in a folder of its own, then all wait for one file to appear, so that
they reach the new store within a millisecond of each other, as `dvc repro -s` in two lanes does.
A round counts as finished when every process exits 0 and the store holds one FINISHED run per
training, each with the prepared data as its dataset.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]

AT_THE_SIGNAL = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from headstudy.settings.compose import compose_config
    from headstudy.train import train
    config = compose_config(sys.argv[1:])
    Path("ready").touch()
    while not Path("../go").exists():
        time.sleep(0.001)
    train(config)
""")

TINY_TRAINING = [
    "model=tiny",
    "threads=1",
    "data.batch_size=8",
    "trainer.max_steps=4",
    "trainer.val_every_steps=2",
    "trainer.loss_points=2",
]


def by_hand_environment() -> dict[str, str]:
    """This environment for `headstudy` run by hand: no DVC stage, no store given (each run names
    its own), the project's conf/, and `headstudy` beside this Python, the venv activated or not
    (`.venv/bin/python benchmarks/...`)."""
    env = {key: value for key, value in os.environ.items() if key not in ("DVC_STAGE", "MLFLOW_TRACKING_URI")}
    env["HEADSTUDY_CONF"] = str(ROOT / "conf")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def prepare_corpus(folder: Path, env: dict[str, str]) -> list[str]:
    """A corpus of 2,000 lines of words drawn from 300, prepared with a 512-token BPE."""
    generator = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(generator.choice(letters) for _ in range(generator.randint(2, 8))) for _ in range(300)]
    (folder / "corpus").mkdir()
    lines = (" ".join(generator.choice(words) for _ in range(generator.randint(5, 20))) for _ in range(2000))
    (folder / "corpus" / "words.txt").write_text("\n".join(lines) + "\n")
    overrides = [
        "data=textdir",
        f"data.dir={folder / 'corpus'}",
        "data.vocab_size=512",
        f"paths.prepared={folder / 'prepared'}",
    ]
    subprocess.run(["headstudy", "prepare", *overrides], cwd=folder, env=env, check=True, capture_output=True)
    return overrides


def one_round(folder: Path, trainings: int, corpus: list[str], env: dict[str, str]) -> tuple[bool, str]:
    """Whether every training of one round finished and was recorded whole; else why not."""
    store = f"sqlite:///{folder / 'mlflow.db'}"
    env = {**env, "MLFLOW_TRACKING_URI": store}
    processes = []
    for seed in range(trainings):
        (folder / f"seed{seed}").mkdir()
        command = [sys.executable, "-c", AT_THE_SIGNAL, *TINY_TRAINING, *corpus, f"seed={seed}"]
        processes.append(
            subprocess.Popen(
                command,
                cwd=folder / f"seed{seed}",
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    deadline = time.monotonic() + 600
    while not all((folder / f"seed{seed}" / "ready").exists() for seed in range(trainings)):
        if any(process.poll() is not None for process in processes) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    (folder / "go").touch()
    outputs = [process.communicate(timeout=900)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        if process.returncode != 0:
            return False, f"exit {process.returncode}: {output.strip().splitlines()[-1] if output.strip() else ''}"
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("headstudy-by-hand")
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    finished = [run for run in runs if run.info.status == "FINISHED" and run.inputs.dataset_inputs]
    if len(finished) != trainings:
        return False, f"{len(finished)} of {trainings} runs FINISHED with their dataset"
    return True, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--trainings", type=int, default=3)
    args = parser.parse_args()
    env = by_hand_environment()
    with tempfile.TemporaryDirectory(prefix="headstudy-start-together-") as scratch:
        corpus = prepare_corpus(Path(scratch), env)
        finished = 0
        for number in range(1, args.rounds + 1):
            folder = Path(scratch) / f"round{number}"
            folder.mkdir()
            started = time.monotonic()
            whole, why = one_round(folder, args.trainings, corpus, env)
            finished += whole
            outcome = "all finished" if whole else f"FAILED: {why}"
            print(f"round {number}: {outcome} ({time.monotonic() - started:.0f} s)", flush=True)
    print(
        f"{finished} of {args.rounds} rounds: all {args.trainings} trainings started together on a new store finished"
    )
    sys.exit(0 if finished == args.rounds else 1)


if __name__ == "__main__":
    main()
