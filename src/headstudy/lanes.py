"""`headstudy lanes [-j N] [TARGET ...]`: `dvc repro` in N lanes, N stages at a time (default: the
machine's cores), each stale stage as soon as the stages it depends on are done.

TARGET is what `dvc repro` takes (default dvc.yaml: the study of this folder; or
studies/NAME/dvc.yaml). Each stage runs as `dvc repro --single-item STAGE`: DVC decides whether it
runs, runs it and writes its lock entry, and each training uses the study's own `threads`, so the
lane count changes no result. The lock files end as a plain `PYTHONHASHSEED=0 dvc repro` writes
them, byte for byte. A failing stage stops new ones from starting, lets those running finish, and
ends the command with one line naming it; Ctrl-C or SIGTERM stops the stages' commands (a training
keeps its checkpoint) and DVC records each finished stage; the same command again continues. Done,
it ends on the answer of each target's report (its headline box), whether or not the report reran.
How it works: execution/lanes.py."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

from headstudy.common.errors import ConfigError
from headstudy.execution import jobs, lanes


def parse(args: list[str]) -> tuple[int, list[str]]:
    """The lane count and the targets of `-j N` / `--jobs N` / `-jN` and TARGET ..."""
    count, targets, rest = jobs.cores(), [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-j", "--jobs"):
            if not rest:
                raise ConfigError(f"{arg} takes a number of lanes")
            value = rest.pop(0)
        elif arg.startswith("-j") and len(arg) > 2 or arg.startswith("--jobs="):
            value = arg.split("=", 1)[1] if arg.startswith("--jobs=") else arg[2:]
        elif arg.startswith("-"):
            raise ConfigError(f"{arg} is not an option of lanes; the options are -j N (lanes) and targets")
        else:
            targets.append(arg)
            continue
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"the number of lanes must be a whole number of 1 or more, got {value!r}")
        count = int(value)
    return count, targets or ["dvc.yaml"]


def answer(target: str) -> list[str]:
    """What a pipeline's report answers, its headline box, for the lanes' last lines: the report
    stage may have been up to date and said nothing (a study retrained bit for bit)."""
    results = Path(target).parent / "reports" / "results.md"
    if Path(target).name != "dvc.yaml" or not results.is_file():
        return []
    from headstudy.analysis.rendering.render import headline_of

    found = headline_of(results.read_text())
    width = shutil.get_terminal_size().columns
    wrapped = [
        part
        for line in found
        for part in textwrap.wrap(line, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
    ]
    return [f"lanes: the answer, from {results}:", *wrapped] if found else []


def main(args: list[str]) -> None:
    count, targets = parse(args)
    code = lanes.run(Path.cwd(), targets, count)
    if code:
        sys.exit(code)
    for target in targets:
        for line in answer(target):
            print(line, flush=True)
