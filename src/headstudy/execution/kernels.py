"""Which of PyTorch's CPU kernels a stage computes with: the machine's own choice (`default`), or
all three of PyTorch's CPU kernel selectors pinned to AVX2 (`avx2`): its own vector kernels
(ATEN_CPU_CAPABILITY), MKL's (MKL_CBWR) and oneDNN's (ONEDNN_MAX_CPU_ISA).

On a CPU with AVX-512 the pinned kernels round the same arithmetic differently in the last bits,
deterministically run to run (docs/tracking.md's pinned-kernel table), so one machine can train
each seed twice, with two roundings: a stand-in for another CPU kind. Each selector is read
once, when torch first computes, so the choice is made before torch is imported, and a stage
checks that it is in force before it computes anything."""

from __future__ import annotations

import os
import sys

from headstudy.common.errors import ConfigError

PINNED = {
    "default": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
# What torch.backends.cpu.get_cpu_capability() says under each pinned choice.
CAPABILITY = {"avx2": "AVX2"}


def chosen(config) -> str:
    """The config's `kernels`, absent in every config written before the choice existed: `default`."""
    return config.get("kernels") or "default"


def missing_settings(choice: str) -> dict[str, str]:
    return {key: value for key, value in PINNED[choice].items() if os.environ.get(key) != value}


def select(choice: str) -> None:
    """Put the choice in force for this process: set before torch is imported, or, where torch is
    already imported, by starting this same command again with them set."""
    missing = missing_settings(choice)
    if not missing:
        return
    os.environ.update(missing)
    if "torch" in sys.modules:
        sys.stdout.flush()
        os.execve(sys.executable, sys.orig_argv, os.environ)


def check_in_force(choice: str) -> None:
    """Refuse to compute under other kernels than the config chose: the weights would round otherwise."""
    import torch

    missing = missing_settings(choice)
    capability = torch.backends.cpu.get_cpu_capability()
    expected = CAPABILITY.get(choice)
    if missing or (expected and capability != expected):
        settings = " ".join(f"{key}={value}" for key, value in PINNED[choice].items())
        raise ConfigError(
            f"kernels={choice} needs {settings} set before torch is imported (`headstudy` sets them); "
            f"this process computes with {capability} kernels"
        )
