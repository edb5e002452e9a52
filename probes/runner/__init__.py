"""opmatrix.probes.runner: spawned workers, deadlines, a journal that loses nothing, resume, shards.

    from opmatrix.probes.handlers import TASK_HANDLERS
    from opmatrix.probes.runner import Task, run
    tasks = [Task(id="softmax|float32", kind="op", payload={"source": "softmax", "dtype": "float32"})]
    summary = run(tasks, backend="cpu", out_dir="out/cpu", workers=2, timeout=60, handlers=TASK_HANDLERS,
                  command="my-probe --backend cpu")
    raise SystemExit(summary.exit_code)

See :mod:`.task` for the handler contract and :mod:`.runner` for the fault rules.
"""

from .entry import engine_options, run
from .evidence import EngineOptions, WorkerIdentity
from .runner import MAX_TASK_FAULTS, RunSummary, default_max_restarts
from .shard import parse_shard, select_shard
from .task import Handler, Skip, Task, WorkerContext, WorkerPoisoned

__all__ = [
    "MAX_TASK_FAULTS",
    "EngineOptions",
    "WorkerIdentity",
    "engine_options",
    "Handler",
    "RunSummary",
    "Skip",
    "Task",
    "WorkerContext",
    "WorkerPoisoned",
    "default_max_restarts",
    "parse_shard",
    "run",
    "select_shard",
]
