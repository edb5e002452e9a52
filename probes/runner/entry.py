"""``run(tasks, backend=..., out_dir=..., command=...)``: the runner's public face (see :mod:`.runner` for how).

``timeout``: seconds a unit may run without progress. ``resume``: continue the journal in
``out_dir`` (else it moves to ``journal.jsonl.prev`` and serves evidence-key reuse).
``devices``: ``"all"`` or indices; worker ``i`` probes ``devices[i % len(devices)]``, resolved
inside the worker (one worker per device unless ``workers``); each task record names its device,
and a wrong cell is probed again on another device (the matrix marks it device-dependent when
that one is right). ``shard=(i, n)``: only that
slice of the tasks. ``max_restarts``: default :func:`default_max_restarts`. ``options``: the
:class:`~.evidence.EngineOptions` (or their mapping, unknown keys refused): ``op_source_hash`` is
part of every evidence key; handlers see them as ``ctx.options``.
``handlers``: each task kind's :class:`~.task.Handler` (``kind -> "module:attribute"``; the suites'
are :data:`opmatrix.probes.handlers.TASK_HANDLERS`), a kind without one is refused. ``threads``: torch
threads per worker (default: cores / workers). ``run_identity``: the caller's identity of the
run, written into the journal header (what ``--resume`` must match).
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
from typing import TYPE_CHECKING

from pydantic import ValidationError

from opmatrix.schema import FaultOutcome

from .calibrate import Calibration, applied, current
from .evidence import EngineOptions
from .executor import Executor
from .infra import InfrastructureFailure, io_cause
from .plan import Aborted, RunSummary, default_max_restarts, ordered, sigterm_as_interrupt
from .runner import Run
from .shard import select_shard
from .task import Task, check_kinds

if TYPE_CHECKING:
    from opmatrix.schema.journal import RunIdentity

__all__ = ["engine_options", "run"]

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
    options: EngineOptions | Mapping[str, str] | None = None,
    progress: bool = True,
    command: str,
    handlers: Mapping[str, str],
    threads: int | None = None,
    run_identity: RunIdentity | None = None,
    executor: Executor | None = None,
) -> RunSummary:
    """Run ``tasks`` on ``backend`` in spawned workers, journaling to ``out_dir/journal.jsonl`` (see the module doc)."""
    started = time.monotonic()
    calibration = current(backend, generation, keep=False)  # docs/runner.md#calibrated-deadlines
    engine = engine_options(options)
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
            options=engine, progress=progress, command=command,
            handlers=dict(handlers), threads=threads, run_identity=run_identity, executor=executor,
        )
    except BaseException:
        if executor is not None:
            executor.close([])  # e.g. a journal that cannot be resumed: stop what start() started
        raise
    _drive(state, calibration)
    _finish(state, started, progress)
    return state.summary


def _drive(state: Run, calibration: Calibration) -> None:
    """Run the loop to its end, and say in the summary how it ended when it did not finish."""
    summary = state.summary
    again = state.command if "--resume" in state.command else f"{state.command} --resume"
    try:
        with sigterm_as_interrupt(), applied(calibration):
            state.loop()
    except Aborted as exc:
        summary.aborted = True
        summary.message = str(exc)
    except KeyboardInterrupt:
        summary.interrupted = True
        summary.message = f"interrupted; continue with: {again}"
    except (InfrastructureFailure, OSError) as exc:
        _stopped_by_machine(summary, exc, state.path, again)
    finally:
        try:
            state.shutdown()
        except OSError as exc:  # the journal's last flush failed: the disk filled meanwhile
            _stopped_by_machine(summary, exc, state.path, again)


def _stopped_by_machine(summary: RunSummary, exc: BaseException, journal: Path, again: str) -> None:
    """Record that the machine stopped the run (a full disk, the OOM killer); any other OSError is raised again."""
    what = repr(exc.filename) if isinstance(exc, OSError) and exc.filename else f"the journal {journal}"
    cause = str(exc) if isinstance(exc, InfrastructureFailure) else io_cause(exc, what) if isinstance(exc, OSError) else None
    if cause is None:
        raise exc
    summary.aborted = True
    summary.infrastructure = summary.infrastructure or cause
    summary.message = (f"stopped by the machine, not by any probe: {summary.infrastructure}; nothing was recorded "
                       f"against a unit for it; continue with: {again}")


def engine_options(options: EngineOptions | Mapping[str, str] | None) -> EngineOptions:
    """The run's engine options; a mapping with a key the runner does not know is refused by name."""
    if options is None or isinstance(options, EngineOptions):
        return options or EngineOptions()
    try:
        return EngineOptions.model_validate(dict(options))
    except ValidationError as exc:
        bad = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors())
        known = ", ".join(EngineOptions.model_fields)
        raise ValueError(f"run options: {bad} refused (known: {known})") from None


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
