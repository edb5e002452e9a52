"""What a finished unit added to its task, kept so that a later attempt restores it (see
:mod:`opmatrix.probes.runner.carry`): a named, versioned batch, never a bare tuple.

    blob = dump_batch({"0/contiguous/eager": UnitDone(results, 0, 0, True, 1, False)})
    load_batch(blob)          # {"0/contiguous/eager": UnitDone(...)}; ValueError for another format

A batch written by another opmatrix (another :data:`FORMAT`) is refused with a message naming
both formats: its units then simply run again.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

from .cells import SampleResult

__all__ = ["FORMAT", "CheckpointBatch", "UnitDone", "dump_batch", "load_batch"]

#: the checkpoint format; a change to :class:`UnitDone` changes it
FORMAT = 1


@dataclass(frozen=True)
class UnitDone:
    """One finished unit: its results, and what it added to the task's counters."""

    results: list[SampleResult]
    invalid: int  # samples the unit found invalid
    failed: int  # device calls that raised
    representative: bool  # the task's representative sample is done
    grads: int  # backward checks spent from the (sample, layout) budget
    compiled: bool  # the unit's compile check ran


@dataclass(frozen=True)
class CheckpointBatch:
    """Units checkpointed together (one pickle per batch: a unit each cost 20-30 us)."""

    units: dict[str, UnitDone] = field(default_factory=dict)
    format: int = FORMAT


def dump_batch(units: dict[str, UnitDone]) -> bytes:
    return pickle.dumps(CheckpointBatch(dict(units)), protocol=5)


def load_batch(blob: bytes) -> dict[str, UnitDone]:
    """The units of a batch :func:`dump_batch` wrote; ValueError for anything else."""
    batch = pickle.loads(blob)
    if not isinstance(batch, CheckpointBatch):
        raise ValueError(f"checkpoint: a {type(batch).__name__}, not an op checkpoint batch (format {FORMAT}): "
                         "written by another opmatrix version")
    if batch.format != FORMAT:
        raise ValueError(f"checkpoint: format {batch.format}, this opmatrix reads format {FORMAT}")
    return batch.units
