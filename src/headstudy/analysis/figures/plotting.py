"""What every figure of the project shares: files only (no screen), plain tick labels, the
legend below the plot, and one way to write a figure to its PNG file."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no screen needed
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

PLAIN = FuncFormatter(lambda value, _: f"{value:g}")
MILLIONS = FuncFormatter(lambda value, _: f"{value / 1e6:g}")
PERCENT = FuncFormatter(lambda value, _: f"{value:+g}%" if value else "0%")


def plain_log_y(axes, axis: str = "y") -> None:
    """Log scale with plain tick labels (20, 30, 50), never 2x10^1; over many decades only the
    powers of ten, so that the labels never run into each other."""
    getattr(axes, f"set_{axis}scale")("log")
    scale = getattr(axes, f"{axis}axis")
    low, high = sorted(getattr(axes, f"get_{axis}lim")())
    decades = np.log10(high / low) if low > 0 else 0
    subs = (1.0,) if decades > 3 else (1.0, 3.0) if decades > 1.5 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
    scale.set_major_locator(LogLocator(subs=subs))
    scale.set_major_formatter(PLAIN)
    scale.set_minor_formatter(NullFormatter())


def save_figure(figure, path: Path, layout: bool = True, dpi: int = 120, **options) -> Path:
    """Write the figure to path (its folder made if need be) and close it: tight_layout first
    unless layout=False (a figure that lays itself out); options go to savefig."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        figure.tight_layout()
    figure.savefig(path, dpi=dpi, **options)
    plt.close(figure)
    return path


def legend_below(axes, columns: int = 2) -> None:
    """The legend under the plot, where it can hide no data."""
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=columns, frameon=False)
