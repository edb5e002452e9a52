"""The runner: spawned workers, a deadline per unit, a journal that loses nothing, resume, reuse.

    summary = run(tasks, backend="refaccel", generation="g2", out_dir="out/refaccel-g2", timeout=60)
    summary.exit_code      # 0 done, 1 aborted at the restart cap, 130 interrupted

Each task goes to an idle worker; the worker posts each unit on its unit board before running
it (:mod:`.board`) and sends the record when done. No new unit for ``timeout`` seconds means the
running unit *hung*; a dead worker means it *crashed* (signal and stderr tail recorded); a worker
that reports a poisoned device is replaced. In every case the task is requeued with that unit
marked, so its other units still run; after :func:`fault_budget` faults (it grows with the units
the task has run) the units after the last faulted one are listed as not run, with the reason
(never cells: the handler decides, see :class:`~.task.Skip`). Each fault costs a worker
restart; past ``max_restarts`` the run aborts.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from .identity import IDENTITY_FILE, cached_identity, fingerprint, store_identity
from .journal import Journal, JournalState, load_reusable, open_for_resume, rotate, task_key
from .pool import WorkerHandle, exit_fault, spawn_worker
from .progress import Progress
from .shard import select_shard
from .task import HANDLERS, Skip, Task, fault_record
from .worker import WorkerSpec

__all__ = ["MAX_TASK_FAULTS", "RunSummary", "default_max_restarts", "fault_budget", "run"]

#: faults any task may cause before its remaining units are listed as not run
MAX_TASK_FAULTS = 3
#: one more fault allowed per this many units the task has run (a task of 100 units with 8
#: bad inputs still records the other 92)
UNITS_PER_EXTRA_FAULT = 10


def fault_budget(units: int) -> int:
    """Faults a task may cause before its remaining units are not run: grows with its units."""
    return MAX_TASK_FAULTS + units // UNITS_PER_EXTRA_FAULT
#: consecutive workers that die before becoming ready before the run gives up
MAX_STARTUP_FAILURES = 3


def default_max_restarts(workers: int, tasks: int) -> int:
    """Worker replacements allowed: ``max(10, 2 * workers) + tasks // 4``.

    A backend where a quarter of the tasks crash once still completes; one where every task
    crashes (three restarts per task) is stopped after about a twelfth of its tasks.
    """
    return max(10, 2 * workers) + tasks // 4


@dataclass
class RunSummary:
    """What a run did; ``faults``/``paths`` count cells over every record in the journal.

    ``recorded = resumed + reused + probed``; ``startup_seconds`` is how long the first worker
    took to import torch and set the backend up (None when none became ready).
    """

    planned: int
    recorded: int = 0
    probed: int = 0
    reused: int = 0
    resumed: int = 0
    restarts: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    paths: dict[str, int] = field(default_factory=dict)
    aborted: bool = False
    interrupted: bool = False
    message: str = ""
    seconds: float = 0.0
    startup_seconds: float | None = None
    journal: Path | None = None

    @property
    def faulted(self) -> int:
        """Cells (or cell-less tasks) that ended in a fault."""
        return sum(self.faults.values())

    @property
    def exit_code(self) -> int:
        """130 interrupted, 1 aborted (restart cap / workers cannot start), else 0."""
        return 130 if self.interrupted else 1 if self.aborted else 0


@dataclass
class _Job:
    """A planned task with what earlier attempts learned about it."""

    task: Task
    key: str = ""
    skip: dict[str, Skip] = field(default_factory=dict)
    skip_rest: Skip | None = None
    faults: int = 0
    attempts: int = 0
    started: float = 0.0
    units: int = 0  # most units one attempt announced (the fault budget grows with it)
    seq0: int = 0  # the worker board's sequence number when this attempt started


class _Aborted(Exception):
    """Stop the run: the restart cap is reached or workers cannot start."""


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C so a terminated run also leaves a consistent journal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _ordered(tasks: Iterable[Task]) -> list[Task]:
    tasks = sorted(tasks, key=lambda t: (t.order, t.id))
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise ValueError(f"task id {t.id!r} is planned twice; task ids must be unique")
        seen.add(t.id)
    return tasks


class _Run:
    """One run's state; :func:`run` is its public face."""

    def __init__(
        self,
        tasks: list[Task],
        out_dir: Path,
        *,
        backend: str,
        generation: str | None,
        workers: int,
        timeout: float,
        resume: bool,
        devices: list[int] | None,
        max_restarts: int,
        options: dict[str, Any],
        progress: bool,
        command: str,
        handlers: dict[str, str],
        threads: int | None,
        header: dict[str, Any],
    ):
        self.out_dir = out_dir
        self.started = time.monotonic()
        self.backend, self.generation = backend, generation
        self.timeout = timeout
        # how often the parent reads the unit boards when no message wakes it: a new unit's
        # deadline starts at most this late, so a hang is called within timeout + poll
        self.poll = min(1.0, timeout / 4)
        # before its first unit a task only prepares on the host (imports, samples), and the
        # first task in a fresh worker pays the handler's imports: the same grace as a start
        self.grace = max(120.0, 4 * timeout)
        self.devices = devices
        self.options = options
        self.command = command
        self.handlers = handlers
        self.kinds = tuple(sorted({t.kind for t in tasks}))
        self.header_extra = header
        self.path = out_dir / "journal.jsonl"
        self.summary = RunSummary(planned=len(tasks), journal=self.path, restarts=0)
        self.max_restarts = max_restarts
        self.startup_failures = 0
        self.run_key: str | None = None
        self.workers: dict[int, WorkerHandle] = {}

        state = open_for_resume(self.path) if resume else JournalState()
        if not resume:
            rotate(self.path)
        self.resumed_header = state.header
        self.reusable, past_seconds = load_reusable(out_dir)
        self.progress = Progress(
            len(tasks),
            enabled=progress,
            expected={t.id: past_seconds[t.id] for t in tasks if t.id in past_seconds},
            workers=max(1, min(workers, len(tasks))),
        )
        self.journal = Journal(self.path)
        planned_ids = {t.id for t in tasks}
        for task_id, line in state.records.items():
            if task_id in planned_ids:
                self.summary.resumed += 1
                self.progress.add(json.loads(line), fresh=False)
        # longest first where an earlier run timed the task (a long task started last idles the
        # other workers); tasks never timed go first, in plan order
        todo = [t for t in tasks if t.id not in state.records]
        todo.sort(key=lambda t: -past_seconds.get(t.id, float("inf")))
        self.pending: deque[_Job] = deque(_Job(t) for t in todo)
        self.n_workers = max(1, min(workers, len(self.pending)))
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.n_workers)
        self.fingerprint = fingerprint(
            backend, generation, devices=devices, kinds=self.kinds, handlers=handlers, options=options
        )
        cached = cached_identity(out_dir, self.fingerprint) if self.reusable and self.pending else None
        if cached is not None:  # an unchanged host-identified backend: reuse without starting a worker
            self._adopt(self._key(cached), cached)

    # -- workers -----------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        device = self.devices[slot % len(self.devices)] if self.devices else None
        spec = WorkerSpec(
            backend=self.backend,
            generation=self.generation,
            log_path=str(self.out_dir / "workers" / f"w{slot}.log"),
            board_path=str(self.out_dir / "workers" / f"w{slot}.unit"),
            parent_pid=os.getpid(),
            handlers=self.handlers,
            kinds=self.kinds,
            device=device,
            threads=self.threads,
            options=self.options,
        )
        handle = spawn_worker(slot, spec)
        handle.deadline = time.monotonic() + self.grace  # torch import + backend setup
        self.workers[slot] = handle

    def _fill(self) -> None:
        """Start workers up to what the remaining work can use (one first, to learn the key)."""
        busy = sum(1 for w in self.workers.values() if w.job is not None)
        target = min(self.n_workers, len(self.pending) + busy)
        if self.run_key is None and self.reusable:
            target = min(target, 1)  # a re-run may need no probing at all: learn the key first
        slot = 0
        while len(self.workers) < target:
            while slot in self.workers:
                slot += 1
            self._spawn(slot)

    def _lost(self, handle: WorkerHandle, *, fault: bool) -> None:
        """Forget a worker that is gone; a fault uses up one restart of the cap."""
        self.workers.pop(handle.slot, None)
        job = handle.job
        if job is not None:  # each post bumps the board's sequence number by 2
            handle.look()
            job.units = max(job.units, (handle.seen - job.seq0) // 2)
        if handle.process.is_alive():
            handle.kill()
        else:
            handle.process.join(5)
            handle.release()
        if fault:
            if self.summary.restarts >= self.max_restarts:
                raise _Aborted(
                    f"stopped after {self.summary.restarts} worker restarts (the cap; --max-restarts): "
                    f"the backend faults on nearly every probe (last: task "
                    f"{handle.job.task.id if handle.job else '?'}, unit {handle.unit}); "
                    f"worker logs in {self.out_dir / 'workers'}"
                )
            self.summary.restarts += 1

    # -- messages ----------------------------------------------------------------------------

    def _key(self, identity: Mapping[str, Any]) -> str:
        return (
            f"torch={identity['torch']}|{identity['adapter']}|ops={self.options.get('op_source_hash', '')}"
            f"|code={identity.get('code', '')}"
        )

    def _on_ready(self, handle: WorkerHandle, identity: dict[str, Any]) -> None:
        handle.ready = True
        handle.deadline = float("inf")
        self.startup_failures = 0
        key = self._key(identity)
        if self.run_key is not None:
            if key != self.run_key:
                self.progress.note(f"warning: worker {handle.slot} reports a different build: {key}")
                if self.summary.startup_seconds is None:  # the identity came from the cache: the fingerprint
                    # missed a change, so never trust it again here
                    (self.out_dir / IDENTITY_FILE).unlink(missing_ok=True)
            return
        self.summary.startup_seconds = round(time.monotonic() - self.started, 3)
        store_identity(self.out_dir, self.fingerprint, identity)
        self._adopt(key, identity)

    def _adopt(self, key: str, identity: Mapping[str, Any]) -> None:
        """Take the run's evidence key: write the header, reuse every task whose key is unchanged."""
        self.run_key = key
        if self.resumed_header and self.resumed_header.get("evidence_key") != key:
            self.progress.note(
                "warning: resuming a journal started with a different build; each record keeps its own evidence key"
            )
        if self.journal.empty:
            self.journal.append(self._header(key, identity))
        keep: deque[_Job] = deque()
        for job in self.pending:
            job.key = task_key(key, job.task)
            line = self.reusable.get(job.key)
            if line is not None and json.loads(line).get("task") == job.task.id:
                self.journal.append(line)
                self.summary.reused += 1
                self.progress.add(json.loads(line), fresh=False)
            else:
                keep.append(job)
        self.pending = keep

    def _header(self, key: str, identity: Mapping[str, Any]) -> str:
        """The journal's first line: the run, the backend identity, and the evidence block for merge."""
        import platform

        from opmatrix import __version__
        from opmatrix.schema import Evidence, JournalHeader

        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        versions = identity.get("versions") or {}
        evidence = Evidence(
            opmatrix_version=__version__,
            torch_version=identity["torch_version"],
            torch_git=identity["torch_git"],
            python=platform.python_version(),
            platform=platform.platform(),
            command=self.command,
            started=started,
            **{k: versions.get(k) for k in ("driver", "firmware", "isa", "stepping", "backend_version")},
        )
        fields: dict[str, Any] = {
            "backend": self.backend,
            "generation": self.generation,
            "planned": self.summary.planned,
            "command": self.command,
            "evidence_key": key,
            "started": started,
            "evidence": evidence,
            "device_type": identity.get("device_type"),
            "dispatch_key": identity.get("dispatch_key"),
        }
        fields.update(self.header_extra)
        return JournalHeader(**fields).model_dump_json()

    def _handle(self, handle: WorkerHandle, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        job: _Job | None = handle.job
        if kind == "ready":
            self._on_ready(handle, msg[2])
        elif kind == "setup_failed":
            raise _Aborted(f"worker {handle.slot} could not set up backend {self.backend!r}:\n{msg[2]}")
        elif job is None or msg[1] != job.task.id:
            return  # a late message about a task this worker no longer owns
        elif kind == "done":
            handle.job, handle.unit, handle.deadline = None, None, float("inf")
            self._record(job, json.loads(msg[2]), worker=handle.slot)
        elif kind in ("poisoned", "fault"):
            skip = Skip("poisoned", msg[3]) if kind == "poisoned" else Skip(msg[3], msg[4])
            handle.gone = True
            self._lost(handle, fault=True)
            handle.job = None
            self._fault(job, msg[2], skip)

    def _drain(self, handle: WorkerHandle) -> None:
        """Handle every message the worker sent; mark it gone at end of file."""
        while not handle.gone:
            try:
                if not handle.conn.poll():
                    return
                msg = handle.conn.recv()
            except (EOFError, OSError):
                handle.gone = True
                return
            self._handle(handle, msg)

    def _reap(self, handle: WorkerHandle) -> None:
        """A worker died without saying why: blame its unit (crash) or count a failed start."""
        if handle.slot not in self.workers or self.workers[handle.slot] is not handle:
            return
        handle.look()  # the unit it started last, announced or not before the parent's last look
        sig, message = exit_fault(handle)
        if not handle.ready:
            self.startup_failures += 1
            self._lost(handle, fault=False)
            if self.startup_failures >= MAX_STARTUP_FAILURES:
                raise _Aborted(f"{self.startup_failures} workers in a row died while starting:\n{message}")
            return
        job = handle.job
        self._lost(handle, fault=True)
        if job is not None:
            self._fault(job, handle.unit, Skip("crashed", message, sig))

    def _expire(self, now: float) -> None:
        """Kill workers past their deadline: the running unit hung (or the worker never started).

        The loop read every board at ``now`` just before, so a worker that moved on has a fresh deadline.
        """
        for handle in [w for w in self.workers.values() if w.deadline < now]:
            if not handle.ready:
                handle.kill()
                self._reap(handle)
                continue
            job, unit = handle.job, handle.unit
            try:
                os.kill(handle.process.pid or 0, signal.SIGUSR1)  # faulthandler dumps the stack to the log
                time.sleep(0.2)
            except ProcessLookupError:
                pass
            tail = handle.log_tail()
            self._lost(handle, fault=True)
            if job is not None:
                limit = self.timeout if unit is not None else self.grace
                what = f"no progress within {limit:g}s" + ("" if unit is not None else " of the task's start")
                self._fault(job, unit, Skip("hung", f"{what}\n{tail}".strip()))

    # -- bookkeeping ---------------------------------------------------------------------------

    def _fault(self, job: _Job, unit: str | None, skip: Skip) -> None:
        """Requeue ``job`` with ``unit`` marked; past the fault limit, skip what is left."""
        job.faults += 1
        what = f"{skip.outcome}{f' ({skip.signal})' if skip.signal else ''}"
        first = next((line for line in skip.message.splitlines() if line.strip()), "")
        self.progress.note(f"{what}: task {job.task.id} unit {unit}: {first[:160]}")
        budget = fault_budget(job.units)
        if (unit is None and job.skip_rest is not None) or unit in job.skip or job.faults > 2 * budget:
            # nothing new to blame: the task itself is the fault
            self._record(job, json.loads(fault_record(job.task, skip).model_dump_json()), worker=None)
            return
        if unit is None:
            job.skip_rest = skip
        else:
            job.skip[unit] = skip
            if job.faults >= budget and job.skip_rest is None:
                # the units after the last faulted one never run: the handler lists them as not run
                job.skip_rest = Skip(skip.outcome, f"not run: the task faulted {job.faults} times; last: {first}")
        self.pending.appendleft(job)

    def _record(self, job: _Job, record: dict[str, Any], worker: int | None) -> None:
        record["task"] = job.task.id  # the runner's id is what resume and reuse match on
        record["evidence_key"] = job.key
        if record.get("kind") == "task":
            record["attempts"] = max(job.attempts, 1)
            record["worker"] = worker
            if not record.get("seconds") or job.attempts > 1:
                # a task that faulted ran over several workers: its time is all of them (the
                # handler knows only its last attempt), which is what scheduling needs next time
                record["seconds"] = round(time.monotonic() - job.started, 3)
        self.journal.append(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
        self.summary.probed += 1
        self.progress.add(record, fresh=True)

    def _assign(self) -> None:
        for handle in sorted(self.workers.values(), key=lambda w: w.slot):
            if not self.pending:
                return
            if not handle.ready or handle.job is not None or handle.gone:
                continue
            job = self.pending.popleft()
            job.seq0 = handle.board.read()[0]  # before the worker can post the task's first unit
            if not handle.send(("task", job.task, dict(job.skip), job.skip_rest)):
                self.pending.appendleft(job)
                handle.gone = True
                continue
            job.attempts += 1
            job.started = job.started or time.monotonic()
            handle.job, handle.unit = job, None
            handle.deadline = time.monotonic() + self.grace

    # -- the loop ------------------------------------------------------------------------------

    def loop(self) -> None:
        """Hand out tasks until every planned task is recorded."""
        while True:
            self._fill()
            self._assign()
            if not self.pending and not any(w.job is not None for w in self.workers.values()):
                return
            now = time.monotonic()
            wake = min([w.deadline for w in self.workers.values()] + [now + self.poll])
            waitables: list[Any] = []
            for w in self.workers.values():
                waitables += [w.conn, w.process.sentinel]
            ready = set(wait(waitables, max(0.0, wake - now)))
            for handle in list(self.workers.values()):
                if handle.conn in ready or handle.process.sentinel in ready:
                    self._drain(handle)
                    if handle.gone or not handle.process.is_alive():
                        self._reap(handle)
            now = time.monotonic()
            for handle in self.workers.values():
                if handle.look():  # a new unit: its deadline starts (at most ``poll`` late)
                    handle.deadline = now + self.timeout
            self._expire(now)
            self.progress.tick()

    def shutdown(self) -> None:
        """Stop idle workers, kill busy ones, close the journal (fsync)."""
        idle = [w for w in self.workers.values() if w.job is None and w.ready and w.send(("stop",))]
        for handle in self.workers.values():
            if handle not in idle:
                handle.kill()
        end = time.monotonic() + 2.0
        for handle in idle:  # all were asked at once: they exit in parallel
            handle.stop(max(0.0, end - time.monotonic()))
        self.workers.clear()
        self.journal.close()


def run(
    tasks: Iterable[Task],
    *,
    backend: str,
    out_dir: str | os.PathLike[str],
    generation: str | None = None,
    workers: int | None = None,
    timeout: float = 60.0,
    resume: bool = False,
    devices: Sequence[int | str] | None = None,
    shard: tuple[int, int] | None = None,
    max_restarts: int | None = None,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
    command: str | None = None,
    handlers: Mapping[str, str] | None = None,
    threads: int | None = None,
    header: Mapping[str, Any] | None = None,
) -> RunSummary:
    """Run ``tasks`` on ``backend`` in spawned workers, journaling to ``out_dir/journal.jsonl``.

    ``timeout``: seconds a unit may run without progress. ``resume``: continue the journal in
    ``out_dir`` (else it moves to ``journal.jsonl.prev`` and serves evidence-key reuse).
    ``devices``: worker ``i`` probes ``devices[i % len(devices)]``. ``shard=(i, n)``: only that
    slice of the tasks. ``max_restarts``: default :func:`default_max_restarts`. ``options`` reach
    handlers as ``ctx.options``; ``options["op_source_hash"]`` is part of every evidence key.
    ``handlers`` adds or overrides task kinds (``kind -> "module:function"``). ``threads``: torch
    threads per worker (default: cores / workers). ``header``: journal header fields that
    override what the runner fills in (e.g. ``evidence`` with ``op_source``, ``runtime``).
    """
    started = time.monotonic()
    planned = _ordered(tasks)
    if shard is not None:
        planned = select_shard(planned, *shard)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = workers or os.cpu_count() or 1
    state = _Run(
        planned,
        out,
        backend=backend,
        generation=generation,
        workers=n,
        timeout=timeout,
        resume=resume,
        devices=[int(d) for d in devices] if devices else None,
        max_restarts=default_max_restarts(n, len(planned)) if max_restarts is None else max_restarts,
        options=dict(options or {}),
        progress=progress,
        command=command or shlex.join(sys.argv),
        handlers={**HANDLERS, **(handlers or {})},
        threads=threads,
        header=dict(header or {}),
    )
    summary = state.summary
    try:
        with _sigterm_as_interrupt():
            state.loop()
    except _Aborted as exc:
        summary.aborted = True
        summary.message = str(exc)
    except KeyboardInterrupt:
        summary.interrupted = True
        again = state.command if "--resume" in state.command else f"{state.command} --resume"
        summary.message = f"interrupted; continue with: {again}"
    finally:
        state.shutdown()
    summary.recorded = summary.resumed + summary.reused + summary.probed
    summary.faults = {
        o: n for o, n in state.progress.outcomes.items() if o in ("error", "oom", "hung", "crashed", "poisoned")
    }
    summary.paths = dict(state.progress.paths)
    summary.seconds = time.monotonic() - started
    state.progress.tick(final=True)
    tail = (
        f"{summary.recorded}/{summary.planned} tasks recorded in {state.path} ({summary.reused} reused, "
        f"{summary.resumed} resumed, {summary.restarts} worker restarts, {summary.faulted} faulted cells)"
    )
    if summary.aborted:
        state.progress.note(f"aborted: {summary.message}")
    elif summary.interrupted:
        state.progress.note(summary.message)
    if progress or summary.message:
        state.progress.note(tail)
    return summary
