"""Geometry of the coverage chart: one horizontal stacked bar per dtype, a segment per path.

Computed here, drawn by the ``coverage_chart`` template macro as inline SVG (no script, no
network). Segment widths are proportional to the dtype's cell counts, so every bar spans the full
width and the chart reads as "share of cells per path"; the numbers sit in the table beside it::

    >>> bars = chart_bars(cov)                       # doctest: +SKIP
    >>> [(s.path, s.count) for s in bars[0].segments] # doctest: +SKIP
    [('native', 120), ('rejected', 12)]
"""

from __future__ import annotations

from dataclasses import dataclass

from .summary import PATH_SYMBOL, PATHS, Coverage

__all__ = ["Bar", "Chart", "Segment", "coverage_chart"]

LABEL_W = 120
BAR_W = 520
BAR_H = 18
GAP = 8
TOTAL_W = 80
#: Narrowest segment that still gets its path letter printed inside.
LETTER_MIN_W = 14


@dataclass(frozen=True)
class Segment:
    """One path's share of one dtype's bar."""

    path: str
    symbol: str
    count: int
    x: float
    width: float
    percent: float

    @property
    def show_letter(self) -> bool:
        """Whether the letter fits inside the segment."""
        return self.width >= LETTER_MIN_W


@dataclass(frozen=True)
class Bar:
    """One dtype's bar."""

    dtype: str
    total: int
    y: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Chart:
    """The whole chart with its size."""

    width: int
    height: int
    label_w: int
    bar_w: int
    bar_h: int
    bars: tuple[Bar, ...]


def coverage_chart(cov: Coverage) -> Chart:
    """Lay out one bar per dtype (in column order) from the coverage counts."""
    bars = []
    for i, dtype in enumerate(cov.dtypes):
        total = cov.dtype_total(dtype)
        x = float(LABEL_W)
        segments = []
        for path in PATHS:
            n = cov.count(dtype, path)
            if not n:
                continue
            width = BAR_W * n / total
            segments.append(
                Segment(
                    path=path.value,
                    symbol=PATH_SYMBOL[path],
                    count=n,
                    x=round(x, 2),
                    width=round(width, 2),
                    percent=round(100 * n / total, 1),
                )
            )
            x += width
        bars.append(Bar(dtype=dtype.value, total=total, y=i * (BAR_H + GAP), segments=tuple(segments)))
    height = max(1, len(bars) * (BAR_H + GAP) - GAP)
    return Chart(
        width=LABEL_W + BAR_W + TOTAL_W,
        height=height,
        label_w=LABEL_W,
        bar_w=BAR_W,
        bar_h=BAR_H,
        bars=tuple(bars),
    )
