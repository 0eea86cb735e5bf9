"""The one lock of headstudy: an exclusive `flock` on a file, among this machine's processes.

Every lock of the project is this one (the MLflow store's while it is created and migrated, a
study's parent run while stages look it up, a model's training), so they all behave alike: a
lock file that cannot be made is one line at once, and a lock held by another process is waited
for at most `timeout_s` seconds (0: refused at once), then one line. `flock` is what the
`filelock` package takes on Unix, so a holder that uses either excludes the other."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from headstudy.common.errors import ConfigError

# How often a waiter tries again: short beside any lock's hold, long beside a system call.
POLL_S = 0.05


@contextmanager
def exclusive(
    path: Path,
    timeout_s: float,
    unmade: Callable[[str], str],
    held: Callable[[], str],
    remove: bool = False,
) -> Iterator[None]:
    """Hold the lock file `path` (its folder made if new) for the block. A file that cannot be
    made raises ConfigError(unmade(reason)); another holder past timeout_s, ConfigError(held()).
    remove: delete the lock file when the block ends, for a lock that is refused, never waited
    for (a waiter would hold a file no longer there)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError as error:
        raise ConfigError(unmade(error.strerror or str(error))) from None
    with handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ConfigError(held()) from None
                time.sleep(POLL_S)
        try:
            yield
        finally:
            if remove:
                path.unlink(missing_ok=True)
            fcntl.flock(handle, fcntl.LOCK_UN)
