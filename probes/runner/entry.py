"""``run(tasks, backend=..., out_dir=..., command=...)``: the runner's public face (see :mod:`.runner` for how).

``timeout``: seconds a unit may run without progress. ``resume``: continue the journal in
``out_dir`` (else it moves to ``journal.jsonl.prev`` and serves evidence-key reuse).
``devices``: ``"all"`` or indices; worker ``i`` probes ``devices[i % len(devices)]``, resolved
inside the worker (one worker per device unless ``workers``); each task record names its device,
and a wrong cell is probed again on another device (the matrix marks it device-dependent when
that one is right). ``shard=(i, n)``: only that
slice of the tasks. ``max_restarts``: default :func:`default_max_restarts`. ``options`` reach
handlers as ``ctx.options``; ``options["op_source_hash"]`` is part of every evidence key.
``handlers``: each task kind's :class:`~.task.Handler` (``kind -> "module:attribute"``; the suites'
are :data:`opmatrix.probes.handlers.TASK_HANDLERS`), a kind without one is refused. ``threads``: torch
threads per worker (default: cores / workers). ``header``: journal header fields that
override what the runner fills in (e.g. ``evidence`` with ``op_source``, ``runtime``).
``executor``: where workers run (:mod:`.executor`; default this host's processes, or
:class:`~.raypool.RayExecutor`: one Ray actor per device of a cluster). ``command``: the command
line the run stands for, as the journal header and the matrix's evidence record it and as an
interrupted run says to resume it: a caller's own (``ProbeOptions.command_line()``), never
read from ``sys.argv``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opmatrix.schema import FaultOutcome

from .calibrate import applied, current
from .executor import Executor
from .plan import Aborted, RunSummary, default_max_restarts, ordered, sigterm_as_interrupt
from .runner import Run
from .shard import select_shard
from .task import Task, check_kinds

__all__ = ["run"]

_FAULTS = frozenset(f.value for f in FaultOutcome)  # the outcomes a summary counts as faults


def run(
    tasks: Iterable[Task],
    *,
    backend: str,
    out_dir: str | os.PathLike[str],
    generation: str | None = None,
    workers: int | None = None,
    timeout: float = 60.0,
    resume: bool = False,
    devices: Sequence[int | str] | str | None = None,
    shard: tuple[int, int] | None = None,
    max_restarts: int | None = None,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
    command: str,
    handlers: Mapping[str, str],
    threads: int | None = None,
    header: Mapping[str, Any] | None = None,
    executor: Executor | None = None,
) -> RunSummary:
    """Run ``tasks`` on ``backend`` in spawned workers, journaling to ``out_dir/journal.jsonl`` (see the module doc)."""
    started = time.monotonic()
    calibration = current(backend, generation, keep=False)  # docs/runner.md#calibrated-deadlines
    planned = ordered(tasks)
    check_kinds(planned, handlers)
    if shard is not None:
        planned = select_shard(planned, *shard)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if executor is not None:
        executor.start(str(out))  # e.g. connect to (or start) a Ray cluster: how many devices it has
    plan, n = _workers(devices, workers, executor)
    try:
        state = Run(
            planned, out, backend=backend, generation=generation, workers=n, timeout=calibration.unit_timeout(timeout),
            resume=resume, grace=calibration.worker_grace(timeout),
            devices=plan, grow_to_devices=plan == "all" and workers is None,
            max_restarts=default_max_restarts(n, len(planned)) if max_restarts is None else max_restarts,
            options=dict(options or {}), progress=progress, command=command,
            handlers=dict(handlers), threads=threads, header=dict(header or {}), executor=executor,
        )
    except BaseException:
        if executor is not None:
            executor.close([])  # e.g. a journal that cannot be resumed: stop what start() started
        raise
    summary = state.summary
    try:
        with sigterm_as_interrupt(), applied(calibration):
            state.loop()
    except Aborted as exc:
        summary.aborted = True
        summary.message = str(exc)
    except KeyboardInterrupt:
        summary.interrupted = True
        again = state.command if "--resume" in state.command else f"{state.command} --resume"
        summary.message = f"interrupted; continue with: {again}"
    finally:
        state.shutdown()
    _finish(state, started, progress)
    return summary


def _workers(devices: Sequence[int | str] | str | None, workers: int | None,
             executor: Executor | None) -> tuple[list[int] | str | None, int]:
    """The device plan (indices or "all") and the number of workers: ``workers``, else one per
    device (the executor's, or ``--devices``; ``all``: one until the first worker says how many)."""
    plan: list[int] | str | None = None
    if isinstance(devices, str):
        plan = "all" if devices.strip() == "all" else [int(d) for d in devices.split(",") if d.strip()]
    elif devices:
        plan = [int(d) for d in devices]
    capacity = executor.capacity() if executor is not None else None
    return plan, workers or capacity or (len(plan) if isinstance(plan, list) else 1 if plan == "all" else os.cpu_count() or 1)


def _finish(state: Run, started: float, progress: bool) -> None:
    """Count what the run recorded into its summary and say how it ended."""
    summary = state.summary
    summary.recorded = summary.resumed + summary.reused + summary.probed
    summary.faults = {
        o: n for o, n in state.progress.outcomes.items() if o in _FAULTS
    }
    summary.paths = dict(state.progress.paths)
    summary.seconds = time.monotonic() - started
    state.progress.tick(final=True)
    tail = (
        f"{summary.recorded}/{summary.planned} tasks recorded in {state.path} ({summary.reused} reused, "
        f"{summary.resumed} resumed, {summary.restarts} worker restarts"
        f"{f' ({summary.retried} to retry a crash in a fresh worker)' if summary.retried else ''}, "
        f"{summary.faulted} faulted cells)"
    )
    if summary.aborted:
        state.progress.note(f"aborted: {summary.message}")
    elif summary.interrupted:
        state.progress.note(summary.message)
    if progress or summary.message:
        state.progress.note(tail)
