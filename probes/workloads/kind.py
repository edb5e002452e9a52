"""The runner's ``workload`` task kind (payload ``{"workload", "dtype", "mode", "seed"}``).

The runner resolves :data:`HANDLER` too (deadlines, fault records): this module is light, the
steps (torch, the models) are imported when a task runs (:mod:`.handler`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opmatrix.probes.runner import Skip, Task, WorkerContext
from opmatrix.probes.runner.plan import COMPILE_TIMEOUT_FACTOR
from opmatrix.schema.workloads import WorkloadRecord

__all__ = ["HANDLER", "WorkloadHandler"]


class WorkloadHandler:
    """Workload tasks: one workload x dtype x mode."""

    warm: str | None = None

    def handle(self, ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip],
               skip_rest: Skip | None) -> WorkloadRecord:
        from .handler import handle

        return handle(ctx, task, progress, skip, skip_rest)

    def fault_record(self, task: Task, skip: Skip) -> WorkloadRecord:
        """The workload faulted its worker every time: the fault as its outcome."""
        from .handler import fault_result

        return fault_result(task, skip.outcome, f"{skip.outcome}: {skip.message}".strip(), skip.scope)

    def unit_timeout(self, task: Task, unit: str, timeout: float) -> float:
        """Every step of a compile-mode task runs compiled code (its first call compiles)."""
        return timeout * COMPILE_TIMEOUT_FACTOR if task.payload.get("mode") == "compile" else timeout


HANDLER = WorkloadHandler()
