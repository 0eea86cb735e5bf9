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
# Every command that runs as a DVC stage.
COMMANDS = ("configure", "prepare", "baselines", "train", "evaluate", "inspect", "report", "score", "spotlight")


def write_fingerprints(folder: Path = FOLDER) -> None:
    for command in COMMANDS:
        write_atomically(folder / f"{command}.txt", fingerprint_text(command))
    print(f"fingerprint: the code of {len(COMMANDS)} stage commands in {folder}/")


def main(args: list[str]) -> None:
    if args:
        raise ConfigError(f"fingerprint takes no arguments (got {' '.join(args)})")
    write_fingerprints()
