"""Stage `fingerprint`: for every stage command, the fingerprint of the code it runs
(fingerprints/COMMAND.txt), which the stages depend on instead of the source files.

It depends on the whole package and reruns on any edit, in a second; it rewrites a file only
when the code in it changed, so a comment, a docstring or a reformat reruns no other stage,
while a change of arithmetic reruns every stage whose code it is."""

from __future__ import annotations

from pathlib import Path

from headstudy.common.code import fingerprint_text
from headstudy.common.errors import ConfigError
from headstudy.common.files import write_atomically

FOLDER = Path("fingerprints")
# The project's own source, beside dvc.yaml: the stage's dependency, which in a copy of the
# project (a test's, or `dvc exp run --temp`'s) need not be the installed package.
SOURCE = Path("src")
# The commands that run as DVC stages from their own file of configs/, which configure writes.
CONFIGURED_STAGES = (
    "prepare",
    "baselines",
    "train",
    "evaluate",
    "inspect",
    "report",
    "score",
    "ablate",
    "answers",
    "spotlight",
    "diagnose",
    "cliff",
)
# Every command that runs as a DVC stage.
COMMANDS = ("configure", *CONFIGURED_STAGES)


def write_fingerprints(folder: Path = FOLDER, source: Path = SOURCE) -> None:
    if not (source / "headstudy").is_dir():
        raise ConfigError(f"{source / 'headstudy'} not found: run the fingerprint stage from the project's root")
    for command in COMMANDS:
        write_atomically(folder / f"{command}.txt", fingerprint_text(command, source.resolve()))
    print(f"fingerprint: the code of {len(COMMANDS)} stage commands in {folder}/")


def main(args: list[str]) -> None:
    if args:
        raise ConfigError(f"fingerprint takes no arguments (got {' '.join(args)})")
    write_fingerprints()
