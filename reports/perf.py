"""The performance page: each record's median, and its interval against the baseline, as a chart.

One row per performance record (``opmatrix bench --out DIR``); with baseline records, each row
draws ``median(now) / median(baseline)`` and its bootstrap interval (the numbers the level-6 gate
judges: :mod:`opmatrix.matrix.perfstats`) around a line at 1.0, the baseline's own speed::

    view = perf_view(load_records("out/perf"), load_records("prev/perf"))
    [(r.id, r.point, r.low, r.high) for r in view.rows]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from opmatrix.matrix.perfstats import comparison_groups, incomparable, load_records, ratio_ci
from opmatrix.schema import ArtifactError
from opmatrix.schema.perf import PerfRecord

__all__ = ["PerfRow", "PerfView", "load_record_dir", "perf_view"]

CONFIDENCE = 0.95
LABEL_W = 300
PLOT_W = 380
ROW_H = 22
TEXT_W = 170


@dataclass(frozen=True)
class PerfRow:
    """One record: its median, and where it stands against its baseline record."""

    id: str
    subject: str
    median_ms: float
    fallback: str
    point: float | None = None
    low: float | None = None
    high: float | None = None
    note: str = ""
    # geometry of the row's interval (None: nothing to draw)
    x_point: float | None = None
    x_low: float | None = None
    x_high: float | None = None

    @property
    def verdict(self) -> str:
        """``faster``, ``slower``, ``same within noise`` or why there is no comparison."""
        if self.point is None or self.low is None or self.high is None:
            return self.note
        if self.high < 1.0:
            return "faster (the whole interval is below the baseline)"
        if self.low > 1.0:
            return "slower (the whole interval is above the baseline)"
        return "no change told apart from noise (the interval holds 1.0)"


@dataclass(frozen=True)
class PerfView:
    """Every record's row and the chart's scale."""

    rows: list[PerfRow] = field(default_factory=list)
    has_baseline: bool = False
    lo: float = 0.8
    hi: float = 1.25
    width: int = LABEL_W + PLOT_W + TEXT_W
    height: int = ROW_H
    label_w: int = LABEL_W
    plot_w: int = PLOT_W
    row_h: int = ROW_H

    def x(self, ratio: float) -> float:
        """Where ``ratio`` sits on the plot."""
        return round(self.label_w + self.plot_w * (ratio - self.lo) / (self.hi - self.lo), 2)

    @property
    def ticks(self) -> list[tuple[float, str]]:
        """(x, label) of the axis ticks, 1.0 included."""
        step = 0.05 if self.hi - self.lo <= 0.6 else 0.25
        out, t = [], round(self.lo / step) * step
        while t <= self.hi + 1e-9:
            if t >= self.lo - 1e-9:
                out.append((self.x(t), f"{t:.2f}x"))
            t = round(t + step, 6)
        return out


def load_record_dir(path: str) -> dict[str, PerfRecord]:
    """Every performance record in ``path``, by id; exit 2 (ArtifactError) for a bad folder or file."""
    records = load_records(path)
    if not records:
        raise ArtifactError([f"{path}: no performance record (*.yaml) in it"])
    return records


def perf_view(records: Mapping[str, PerfRecord], baseline: Mapping[str, PerfRecord] | None = None) -> PerfView:
    """The rows of the performance page, and the chart's scale (it holds every interval and 1.0)."""
    rows = []
    for rid in sorted(records):
        rec = records[rid]
        subject = f"{rec.subject.kind.value} {rec.subject.name} {rec.subject.mode} {rec.precision}"
        base = (baseline or {}).get(rid)
        point = low = high = None
        note = ""
        if baseline is None:
            note = "no baseline given"
        elif base is None:
            note = "new: no baseline record of this id"
        elif (why := incomparable(rec, base)) is not None:
            note = f"not comparable with the baseline ({why})"
        else:
            now, before, how = comparison_groups(rec, base)
            point, low, high = ratio_ci(now, before, CONFIDENCE)
            note = how.strip(" ()")
        rows.append(PerfRow(id=rid, subject=subject, median_ms=rec.timing.median_s * 1e3, fallback=rec.fallback.state.value,
                            point=point, low=low, high=high, note=note))
    spans = [v for r in rows for v in (r.low, r.high) if v is not None]
    lo = min([0.9, *spans]) - 0.05
    hi = max([1.1, *spans]) + 0.05
    view = PerfView(rows=[], has_baseline=baseline is not None, lo=lo, hi=hi, height=ROW_H * (len(rows) + 1))
    placed = [PerfRow(**{**r.__dict__, "x_point": view.x(r.point) if r.point is not None else None,
                         "x_low": view.x(r.low) if r.low is not None else None,
                         "x_high": view.x(r.high) if r.high is not None else None}) for r in rows]
    return PerfView(rows=placed, has_baseline=view.has_baseline, lo=lo, hi=hi, height=view.height)
