"""`headstudy lanes [-j N] [TARGET ...]`: `dvc repro` in N lanes, N stages at a time (default: the
machine's cores), each stale stage as soon as the stages it depends on are done.

TARGET is what `dvc repro` takes (default dvc.yaml: the study of this folder; or
studies/NAME/dvc.yaml). Each stage runs as `dvc repro --single-item STAGE`: DVC decides whether it
runs, runs it and writes its lock entry, and each training uses the study's own `threads`, so the
lane count changes no result. The lock files end as a plain `PYTHONHASHSEED=0 dvc repro` writes
them, byte for byte. A failing stage stops new ones from starting, lets those running finish, and
ends the command with one line naming it; Ctrl-C or SIGTERM stops the stages' commands (a training
keeps its checkpoint) and DVC records each finished stage; the same command again continues.
How it works: execution/lanes.py."""

from __future__ import annotations

import sys
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


def main(args: list[str]) -> None:
    count, targets = parse(args)
    code = lanes.run(Path.cwd(), targets, count)
    if code:
        sys.exit(code)
