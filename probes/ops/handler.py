"""The runner's ``op`` task kind: one OpInfo at one dtype (payload ``{"source", "dtype", "options"}``).

:data:`HANDLER` runs a task through the engine (:func:`.engine.handle`) in a worker and, when a
task faults with every unit skipped, builds the record the runner writes for it. The runner
resolves it too (deadlines, fault records): this module imports the engine (torch, OpInfo) only
when a task runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opmatrix.probes.runner import Skip, Task, WorkerContext
from opmatrix.probes.runner.plan import COMPILE_TIMEOUT_FACTOR
from opmatrix.schema import DType, ErrorInfo, Outcome, TaskId, TaskRecord, UnitId

__all__ = ["HANDLER", "OpHandler"]


class OpHandler:
    """Operator probe tasks, ``source|dtype``."""

    #: OpInfo and the compile check's front end, imported once by the zygote
    warm: str | None = "opmatrix.probes.ops.warm"

    def handle(self, ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip],
               skip_rest: Skip | None) -> TaskRecord:
        from . import engine  # the worker's imports, not the runner's

        return engine.handle(ctx, task, progress, skip, skip_rest)

    def unit_timeout(self, task: Task, unit: str, timeout: float) -> float:
        """A unit's compile steps (``3/contiguous/compile``, ``3/contiguous/dynamic``) compile: they
        get the compile factor."""
        try:
            step = UnitId.parse(unit).step
        except ValueError:  # not a unit of this engine's: the plain deadline
            return timeout
        return timeout * COMPILE_TIMEOUT_FACTOR if step in ("compile", "dynamic") else timeout

    def fault_record(self, task: Task, skip: Skip) -> TaskRecord:
        """The task itself faulted: the fault on the task, source and dtype from its payload (else its id)."""
        source, dtype = task.payload.get("source"), task.payload.get("dtype")
        if source is None or dtype is None:
            source, dtype = TaskId.parse(task.id)  # an op task id is always source|dtype
        text = f"{skip.outcome}: {skip.message}".strip()
        return TaskRecord(task=task.id, source=str(source), dtype=DType(dtype), outcome=Outcome(skip.outcome.value),
                          error=ErrorInfo(type=skip.outcome.value, message=text[-2000:], actionable=False,
                                          signal=skip.signal))


HANDLER = OpHandler()
