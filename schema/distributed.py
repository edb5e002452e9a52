"""Level-5 evidence: what real ``torch.distributed`` process groups did on a backend, case by case.

A matrix's optional ``distributed`` section lists one record per probed case; each case ran in
its own process group on 127.0.0.1 with a deadline::

    distributed:
      c10d_backend: gloo
      cases:
      - id: all_reduce.sum.float32.sync.w2
        kind: collective
        collective: all_reduce
        op: sum
        dtype: float32
        world_size: 2
        outcome: ok
        path: native
        seconds: 0.02
      - id: failure.rank_killed.w2
        kind: failure
        outcome: ok            # the survivor saw the missing rank within the timeout
        detect_seconds: 0.4
        poison_scope: communicator

A contract's level-5 requirement (:class:`DistributedRequirement`) names the collectives x dtypes,
DDP parity, checkpoint round trip and rank-failure detection it promises.
"""

from __future__ import annotations

import enum

from pydantic import ConfigDict, Field

from .base import Message, Model
from .enums import DType, ExecPath

__all__ = [
    "CaseKind",
    "DistCase",
    "DistOutcome",
    "Distributed",
    "DistributedRequirement",
    "PoisonScope",
]

Scalar = str | int | float | bool | None


class CaseKind(str, enum.Enum):
    """What a distributed case exercises."""

    collective = "collective"  # one collective (or send/recv, barrier) checked exactly
    topology = "topology"  # world size, ranks, local ranks, device per rank
    ddp = "ddp"  # DistributedDataParallel training parity
    checkpoint = "checkpoint"  # torch.distributed.checkpoint save/load and resume
    failure = "failure"  # a rank killed, a rank that never joins: detection and poison scope


class DistOutcome(str, enum.Enum):
    """How a distributed case ended (declaration order = best first)."""

    ok = "ok"  # every rank ran and checked exactly (failure cases: the fault was detected in time)
    unsupported = "unsupported"  # the c10d backend refused cleanly (e.g. an op it does not implement)
    wrong = "wrong"  # ran, a result differed from the host computation
    error = "error"  # an unexpected exception
    hung = "hung"  # the probe's deadline passed (a failure not detected is a hang)
    crashed = "crashed"  # a rank process died unexpectedly


class PoisonScope(str, enum.Enum):
    """After a failure, what was unusable (seeds: a fault may poison an operation ... a job)."""

    none = "none"  # not a failure case, or nothing observed
    operation = "operation"  # only the failed call: the same process group works again
    communicator = "communicator"  # the process group is broken; a new one on the device works
    device = "device"  # device operations fail afterwards
    job = "job"  # the surviving process could not continue at all


class DistCase(Model):
    """One probed distributed case and its evidence."""

    id: str = Field(min_length=1)
    kind: CaseKind
    c10d_backend: str = Field(min_length=1, description="e.g. gloo, or the backend's own c10d backend")
    world_size: int = Field(ge=1)
    collective: str | None = Field(default=None, description="all_reduce, broadcast, ... for collective cases")
    op: str | None = Field(default=None, description="reduce op (sum, max, avg) where it applies")
    dtype: DType | None = None
    async_op: bool = False
    outcome: DistOutcome
    path: ExecPath = Field(default=ExecPath.native, description="fallback when staged through host memory")
    seconds: float | None = Field(default=None, ge=0, description="wall time of the case on the slowest rank")
    detect_seconds: float | None = Field(default=None, ge=0, description="failure cases: time to the error")
    timeout_seconds: float | None = Field(default=None, ge=0, description="the process group's configured timeout")
    poison_scope: PoisonScope = PoisonScope.none
    error: Message | None = Field(default=None, description="error text (first rank that raised)")
    evidence: dict[str, Scalar] = Field(default_factory=dict)


class Distributed(Model):
    """The matrix's distributed section: the c10d backend used and every probed case."""

    c10d_backend: str
    cases: list[DistCase] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict, description="cases not run, with the reason")

    def case(self, case_id: str) -> DistCase | None:
        """The case called ``case_id``, if it was probed."""
        return next((c for c in self.cases if c.id == case_id), None)


class DistributedRequirement(Model):
    """What a level-5 contract promises about distributed execution."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    collectives: list[str] = Field(default_factory=list, description="e.g. all_reduce.sum, broadcast, barrier")
    dtypes: list[DType] = Field(default_factory=list)
    world_sizes: list[int] = Field(default_factory=lambda: [2])
    async_op: bool = Field(default=False, description="the async_op=True variants must pass too")
    worst_path: ExecPath = ExecPath.fallback
    ddp: bool = False
    checkpoint: bool = False
    rank_failure_seconds: float | None = Field(
        default=None, gt=0, description="a killed rank must be detected by the survivor within this many seconds"
    )
    never_joins_timeout: bool = Field(default=False, description="a rank that never joins gives a timeout error")
    name: str | None = None
