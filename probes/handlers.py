"""Each suite's task kinds: ``kind -> "module:attribute"`` of its :class:`~opmatrix.probes.runner.task.Handler`.

The runner knows no suite: a probe run passes it this table (workers import a handler when they
first meet its kind, the runner only to record a task that faulted every time)::

    run(tasks, backend="cpu", out_dir="out", handlers=TASK_HANDLERS, command="...")
"""

from __future__ import annotations

__all__ = ["TASK_HANDLERS"]

TASK_HANDLERS: dict[str, str] = {
    "op": "opmatrix.probes.ops.handler:HANDLER",
    "runtime": "opmatrix.probes.runtime.checks:HANDLER",
    "workload": "opmatrix.probes.workloads.kind:HANDLER",
}
