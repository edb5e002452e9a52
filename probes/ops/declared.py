"""What a contract declares beyond OpInfo's samples, wired into a task: the declared ranks
(:mod:`.ranks`) and the accumulation mode of low-precision reductions (:mod:`.accumulation`).

    samples, masks, first, why = with_declared_ranks(entry, samples, masks, opts)
    stamp_accumulation(st, entry, dtype_name, results, plan, progress)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from opmatrix.probes.runner import Skip
from opmatrix.schema import Accumulation, Layout, Mode, UnitId

from .accumulation import design_of, measure
from .ranks import extend_samples

if TYPE_CHECKING:
    from torch.testing._internal.opinfo.core import SampleInput

    from .cells import SampleResult
    from .faults import SkipPlan
    from .source import OpEntry
    from .state import EngineState, ProbeOptions

__all__ = ["ACCUMULATION_UNIT", "stamp_accumulation", "with_declared_ranks"]

#: the unit of the designed accumulation call (the runner blames a crash there on it)
ACCUMULATION_UNIT = UnitId("designed", Layout.contiguous, "accumulation")


def with_declared_ranks(entry: OpEntry, samples: list[SampleInput], masks: list[tuple[bool, ...] | None],
                        opts: ProbeOptions) -> tuple[list[SampleInput], list[tuple[bool, ...] | None], int, str | None]:
    """OpInfo's samples followed by their extensions to ``opts.ranks`` (each with its source's
    gradient mask), the index of the first extended one, and why none were made (or None)."""
    if opts.ranks is None:
        return samples, masks, len(samples), None
    extended, why = extend_samples(entry, samples, opts.ranks)
    grown = [s for s, _ in extended]
    return samples + grown, masks + [masks[i] if i < len(masks) else None for _, i in extended], len(samples), why


def stamp_accumulation(st: EngineState, entry: OpEntry, dtype_name: str, results: list[SampleResult],
                       plan: SkipPlan, progress: Callable[[str], None]) -> None:
    """Measure the (op, dtype)'s accumulation mode and record it on the eager cells that ran and
    were compared (their numerics)."""
    dtype = getattr(torch, dtype_name)
    if design_of(entry) is None or not any(r.rtol is not None and r.mode is Mode.eager for r in results):
        return
    decision = plan.decide(ACCUMULATION_UNIT)
    if decision == "not_run":
        return
    if isinstance(decision, Skip):
        found: tuple[Accumulation, str] | None = (
            Accumulation.unknown, f"the designed call {decision.outcome} the worker: {decision.headline}")
    else:
        progress(str(ACCUMULATION_UNIT))
        found = measure(st.adapter, entry, dtype)
    if found is None:
        return
    for r in results:
        if r.mode is Mode.eager and r.rtol is not None and (r.dtype or dtype_name) == dtype_name:
            r.accumulation, r.accumulation_evidence = found
