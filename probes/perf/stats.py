"""Robust statistics of timing samples: median, interquartile range, bootstrap interval of the median.

The bootstrap is seeded, so the same samples always give the same interval::

    >>> summarize([1.0, 1.1, 0.9, 1.0, 1.2], confidence=0.95)["median"]
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


def bootstrap_median_ci(samples: Sequence[float], confidence: float, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median."""
    rng = random.Random(seed)
    n = len(samples)
    meds = sorted(statistics.median(rng.choices(samples, k=n)) for _ in range(RESAMPLES))
    lo = meds[int((1 - confidence) / 2 * (RESAMPLES - 1))]
    hi = meds[int((1 + confidence) / 2 * (RESAMPLES - 1))]
    med = statistics.median(samples)
    return min(lo, med), max(hi, med)


def summarize(samples: Sequence[float], confidence: float) -> dict[str, float]:
    """Median, IQR and the bootstrap interval of the median."""
    lo, hi = bootstrap_median_ci(samples, confidence)
    return {"median": statistics.median(samples), "iqr": iqr(samples), "ci_low": lo, "ci_high": hi}
