"""Robust statistics of timing samples: median, interquartile range, bootstrap interval of the median.

The bootstrap is seeded, so the same samples always give the same interval::

    >>> summarize([[1.0, 1.1, 0.9], [1.0, 1.2]], confidence=0.95)["median"]
    1.0
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

__all__ = ["bootstrap_median_ci", "iqr", "summarize"]

#: bootstrap resamples (2000 keeps the 95% bounds stable to about a percent of the spread)
RESAMPLES = 2000


def iqr(samples: Sequence[float]) -> float:
    """Interquartile range (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[2] - q[0]


def _resample(rng: random.Random, groups: Sequence[Sequence[float]]) -> list[float]:
    picked = rng.choices(groups, k=len(groups))
    return [x for g in picked for x in rng.choices(g, k=len(g))]


def bootstrap_median_ci(groups: Sequence[Sequence[float]], confidence: float, seed: int = 0) -> tuple[float, float]:
    """Two-level percentile bootstrap interval of the median: runs, then samples within each run.

    With one run this is the plain bootstrap; with several, differences between runs (a machine
    whose load changed) widen the interval instead of hiding in it.
    """
    rng = random.Random(seed)
    meds = sorted(statistics.median(_resample(rng, groups)) for _ in range(RESAMPLES))
    lo = meds[int((1 - confidence) / 2 * (RESAMPLES - 1))]
    hi = meds[int((1 + confidence) / 2 * (RESAMPLES - 1))]
    med = statistics.median([x for g in groups for x in g])
    return min(lo, med), max(hi, med)


def summarize(groups: Sequence[Sequence[float]], confidence: float) -> dict[str, float]:
    """Median, IQR and the bootstrap interval of the median over the samples of every run."""
    flat = [x for g in groups for x in g]
    lo, hi = bootstrap_median_ci(groups, confidence)
    return {"median": statistics.median(flat), "iqr": iqr(flat), "ci_low": lo, "ci_high": hi}
