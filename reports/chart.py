"""Geometry of the coverage chart: one horizontal stacked bar per dtype and mode, a segment per path.

Computed here, drawn by the index template as inline SVG (no script, no network). Eager and
compiled cells stand side by side, one panel per mode with the dtypes as rows. Segment widths
are proportional to the dtype's cell counts in that mode, so every bar spans its panel and reads
as "share of cells per path"; the number after a bar is its cells, and the table beside the chart
has every count::

    >>> bars = chart_bars(cov)  # needs a coverage table: not run  # doctest: +SKIP
    >>> [(s.path, s.count) for s in bars[0].segments]  # needs a coverage table: not run  # doctest: +SKIP
    [('native', 120), ('rejected', 12)]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from opmatrix.schema import DType, ExecPath, Mode

from .summary import PATH_SYMBOL, PATHS, Coverage

__all__ = ["Bar", "Chart", "Panel", "Segment", "coverage_chart"]

LABEL_W = 90
BAR_W = 240
BAR_H = 18
GAP = 8
TOTAL_W = 56
HEAD_H = 22
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
class Panel:
    """One mode's bars (eager or compile), drawn from ``x``."""

    mode: str
    x: int
    total: int
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Chart:
    """The whole chart with its size: a label column, then one panel per mode."""

    width: int
    height: int
    label_w: int
    bar_w: int
    bar_h: int
    head_h: int
    dtypes: tuple[str, ...]
    panels: tuple[Panel, ...]

    @property
    def bars(self) -> tuple[Bar, ...]:
        """Every bar of every panel."""
        return tuple(b for p in self.panels for b in p.bars)


def _bar(dtype: DType, counts: Counter[ExecPath], x0: float, y: int) -> Bar:
    total = sum(counts.values())
    x = x0
    segments = []
    for path in PATHS:
        n = counts[path]
        if not n:
            continue
        width = BAR_W * n / total
        segments.append(Segment(path=path.value, symbol=PATH_SYMBOL[path], count=n, x=round(x, 2),
                                width=round(width, 2), percent=round(100 * n / total, 1)))
        x += width
    return Bar(dtype=dtype.value, total=total, y=y, segments=tuple(segments))


def coverage_chart(cov: Coverage) -> Chart:
    """Lay out one panel per mode, one bar per dtype (in column order), from the coverage counts."""
    panels = []
    for i, mode in enumerate(m for m in Mode if m in cov.by_mode):
        x0 = LABEL_W + i * (BAR_W + TOTAL_W)
        bars = tuple(_bar(d, cov.by_mode[mode][d], float(x0), HEAD_H + j * (BAR_H + GAP))
                     for j, d in enumerate(cov.dtypes))
        panels.append(Panel(mode=mode.value, x=x0, total=sum(b.total for b in bars), bars=bars))
    height = HEAD_H + max(1, len(cov.dtypes) * (BAR_H + GAP) - GAP)
    return Chart(width=LABEL_W + max(1, len(panels)) * (BAR_W + TOTAL_W), height=height, label_w=LABEL_W,
                 bar_w=BAR_W, bar_h=BAR_H, head_h=HEAD_H, dtypes=tuple(d.value for d in cov.dtypes),
                 panels=tuple(panels))
