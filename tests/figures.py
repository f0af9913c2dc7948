"""Reading back what a plot drew: the plot tests check a matplotlib ``Figure``'s content (panels, titles, labels,
series and their data, bars, tick labels) instead of the size of the PNG it was saved to."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels of the PNG at ``path`` (from its header; fails on a file that is not a PNG)."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def saved_as(fig: Any, path: Path, dpi: int) -> bool:
    """Whether ``path`` is a PNG of ``fig``'s size at ``dpi``."""
    width, height = fig.get_size_inches()
    return png_size(path) == (round(width * dpi), round(height * dpi))


def lines(ax: Any) -> dict[str, tuple[list[float], list[float]]]:
    """Each labelled line of ``ax``: label -> (x data, y data)."""
    return {line.get_label(): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
            for line in ax.get_lines() if not line.get_label().startswith("_")}


def legend(ax: Any) -> list[str]:
    """The texts of ``ax``'s legend (empty without one)."""
    found = ax.get_legend()
    return [t.get_text() for t in found.get_texts()] if found else []


def bars(ax: Any) -> dict[str, list[float]]:
    """Each bar series of ``ax`` (a ``bar`` call's container): label -> bar heights, in drawing order."""
    from matplotlib.container import BarContainer

    return {c.get_label(): [float(p.get_height()) for p in c.patches] for c in ax.containers
            if isinstance(c, BarContainer)}


def tick_labels(ax: Any, axis: str = "x") -> list[str]:
    """The tick label texts of ``ax``'s x (or y) axis."""
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]
