"""Comparing two performance records: the ratio of their medians and its bootstrap interval.

Shared by the gate (level 6 judges the interval against the contract's threshold) and the site
(the performance page draws it), so both show the same numbers::

    now, before, how = comparison_groups(record, baseline)
    point, lo, hi = ratio_ci(now, before, 0.95)
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from pathlib import Path

from opmatrix.schema import ArtifactError, load_model
from opmatrix.schema.perf import PerfRecord

__all__ = ["RESAMPLES", "comparison_groups", "incomparable", "load_records", "median_ratio", "ratio_ci"]

RESAMPLES = 2000


def _resample(rng: random.Random, groups: Sequence[Sequence[float]]) -> list[float]:
    picked = rng.choices(groups, k=len(groups))
    return [x for g in picked for x in rng.choices(g, k=len(g))]


def median_ratio(now: Sequence[Sequence[float]], before: Sequence[Sequence[float]]) -> float:
    return statistics.median([x for g in now for x in g]) / max(statistics.median([x for g in before for x in g]), 1e-12)


def ratio_ci(
    now: Sequence[Sequence[float]], before: Sequence[Sequence[float]], confidence: float, seed: int = 0
) -> tuple[float, float, float]:
    """``median(now) / median(before)`` and its two-level bootstrap interval (runs, then samples)."""
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(_resample(rng, now)) / max(statistics.median(_resample(rng, before)), 1e-12)
        for _ in range(RESAMPLES)
    )
    point = median_ratio(now, before)
    lo = ratios[int((1 - confidence) / 2 * (RESAMPLES - 1))]
    hi = ratios[int((1 + confidence) / 2 * (RESAMPLES - 1))]
    return point, min(lo, point), max(hi, point)


def incomparable(now: PerfRecord, before: PerfRecord) -> str | None:
    pairs = {
        "clock": (now.timing.clock, before.timing.clock),
        "threads": (now.threads, before.threads),
        "precision": (now.precision, before.precision),
        "batch": (now.batch, before.batch),
        "device": (now.hardware.device_name, before.hardware.device_name),
        "inputs": (now.input.shapes, before.input.shapes),
    }
    diff = [f"{k} {b} -> {a}" for k, (a, b) in pairs.items() if a != b]
    return ", ".join(diff) if diff else None


def comparison_groups(now: PerfRecord, before: PerfRecord) -> tuple[list[list[float]], list[list[float]], str]:
    """The samples to compare and how: machine-normalised when both records timed the same calibration loop."""
    a, b = now.timing.calibration, before.timing.calibration
    raw_now, raw_before = now.timing.run_groups(), before.timing.run_groups()
    if a is not None and b is not None and (a.loop, a.python) == (b.loop, b.python):
        raw = median_ratio(raw_now, raw_before)
        return (now.timing.normalised_groups(), before.timing.normalised_groups(),
                f" (normalised by the calibration loop timed beside every window; raw {raw:.3f}x)")
    if a is None and b is None:
        return raw_now, raw_before, ""
    which = "the baseline has" if b is None else "this record has" if a is None else "the two records timed"
    detail = "no calibration loop" if a is None or b is None else "different calibration loops or interpreters"
    return raw_now, raw_before, f" (raw times: {which} {detail}, so the machine's speed is not divided out)"


def load_records(directory: str | Path) -> dict[str, PerfRecord]:
    """Every performance record (``*.yaml`` with ``kind: perf-record``) in ``directory``, by id."""
    root = Path(directory)
    if not root.is_dir():
        raise ArtifactError([f"{root}: not a directory of performance records (write one with `opmatrix bench --out`)"])
    records: dict[str, PerfRecord] = {}
    for path in sorted(root.glob("*.yaml")):
        rec = load_model(path, PerfRecord)
        if rec.id in records:
            raise ArtifactError([f"{path}: record id {rec.id!r} appears twice in {root}; keep one"])
        records[rec.id] = rec
    return records
