"""Deterministic charts: one style for every report, PNGs whose bytes depend only on the data.

matplotlib is imported lazily (it costs ~0.3 s) and always with the non-interactive Agg backend.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mfukit.core.files import write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110
PALETTE = ["#1f5fa8", "#e07b1f", "#2e9a4d", "#c23b3b", "#7a52b3", "#8c6d31", "#d45fa8", "#6b6b6b"]


def figure(width_in: float = 7.0, height_in: float = 3.6) -> tuple[Figure, Any]:
    """A new figure and axes in the house style."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    axes = fig.add_subplot()
    axes.set_prop_cycle(color=PALETTE)
    axes.grid(True, alpha=0.3, linewidth=0.6)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return fig, axes


def png_bytes(fig: Figure) -> bytes:
    """The PNG of ``fig`` without timestamps or software tags, so equal data gives equal bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def save_png(fig: Figure, path: Path) -> bytes:
    """Write ``fig`` to ``path`` atomically and return the bytes written."""
    data = png_bytes(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data)
    return data
