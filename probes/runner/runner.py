"""The runner: spawned workers, a deadline per unit, a journal that loses nothing, resume, reuse.

    summary = run(tasks, backend="refaccel", generation="g2", out_dir="out/refaccel-g2", timeout=60,
                  handlers=TASK_HANDLERS, command="opmatrix probe --backend refaccel --generation g2")
    summary.exit_code      # 0 done, 1 aborted at the restart cap, 130 interrupted

Each task goes to an idle worker; the worker posts each unit on its unit board before running
it (:mod:`.board`) and sends the record when done. No new unit for ``timeout`` seconds means the
running unit *hung*; a dead worker means it *crashed* (signal and stderr tail recorded); a worker
that reports a poisoned device is replaced. In every case the task is requeued with that unit
marked, so its other units still run, and with the units it finished (:mod:`.carry`) so they
are not run again; after :func:`fault_budget` faults (it grows with the units the task has run)
the units after the last faulted one are listed as not run, with the reason (never cells: the
handler decides, see :class:`~.task.Skip`); a crash may first be retried in a fresh worker
(:func:`~.plan.retry_in_fresh_worker`). Each fault costs a worker restart; past
``max_restarts`` the run aborts (a retry raises the cap by one).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from opmatrix.schema import ArtifactError, FaultOutcome
from opmatrix.schema.journal import RunIdentity
from opmatrix.schema.journalfile import parse_record

from . import zygote
from .devices import RunDevices
from .evidence import EngineOptions, WorkerIdentity
from .executor import Executor, LocalExecutor, Worker
from .header import journal_header, other_subject
from .identity import IDENTITY_FILE, cached_identity, fingerprint, store_identity
from .infra import MemoryWatch, check_infrastructure
from .journal import open_run_journal, task_key
from .messages import Done, FromWorker, Poisoned, Ready, RunTask, SetupFailed
from .plan import (
    MAX_NODE_LOSSES,
    MAX_STARTUP_FAILURES,
    MAX_TASK_FAULTS,
    Aborted,
    Job,
    RunSummary,
    confirmed,
    default_max_restarts,
    fault_budget,
    retry_in_fresh_worker,
    unit_timeout,
    worker_target,
)
from .task import Skip, Task, resolve_handler
from .worker import WorkerSpec

__all__ = ["MAX_TASK_FAULTS", "Run", "RunSummary", "default_max_restarts", "fault_budget"]


class Run:
    """One run's state; :func:`run` is its public face."""

    def __init__(self, tasks: list[Task], out_dir: Path, *, backend: str, generation: str | None, workers: int,
                 timeout: float, resume: bool, devices: list[int] | str | None, max_restarts: int, options: EngineOptions,
                 progress: bool, command: str, handlers: dict[str, str], threads: int | None,
                 run_identity: RunIdentity | None, grow_to_devices: bool = False, executor: Executor | None = None,
                 grace: float | None = None):
        self.out_dir = out_dir
        self.started = time.monotonic()
        self.backend, self.generation, self.timeout = backend, generation, timeout
        # how often the parent reads the unit boards when no message wakes it (a hang is called
        # within timeout + poll); before its first unit a task only prepares on the host (imports,
        # samples), and the first task in a fresh worker pays the handler's imports: a start's grace
        self.poll, self.grace = min(1.0, timeout / 4), max(120.0, 4 * timeout) if grace is None else grace
        self.options, self.command, self.handlers = options, command, handlers
        self.kinds = tuple(sorted({t.kind for t in tasks}))
        self.run_identity = run_identity
        self.path = out_dir / "journal.jsonl"
        self.summary = RunSummary(planned=len(tasks), journal=self.path, restarts=0)
        self.max_restarts, self.startup_failures = max_restarts, 0
        self.run_key: str | None = None  # with the first worker's identity below: what the header says
        self.first_identity: WorkerIdentity | None = None  # the first ready worker's: every other one must match it
        self.workers: dict[int, Worker] = {}
        self.executor: Executor = executor or LocalExecutor()  # where workers run (:mod:`.executor`); started by the caller
        self.devices = RunDevices(devices, capacity=self.executor.capacity(), grow=grow_to_devices)
        self.node_losses, self.watch = 0, MemoryWatch()  # a worker the OOM killer ends later is the host's fault, not its unit's
        self.pending: deque[Job] = self._open_journal(tasks, resume, workers, progress)
        self.n_workers = max(1, min(workers, len(self.pending)))
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.n_workers)
        self.fingerprint = fingerprint(backend, generation, devices=devices if isinstance(devices, list) else None,
                                       kinds=self.kinds, handlers=handlers,
                                       options={**options.model_dump(), **({"devices": devices} if isinstance(devices, str) else {})})
        cached = cached_identity(out_dir, self.fingerprint) if self.reusable and self.pending else None
        if cached is not None:  # an unchanged host-identified backend: reuse without starting a worker
            self._adopt(self._key(cached), cached)

    def _open_journal(self, tasks: list[Task], resume: bool, workers: int, progress: bool) -> deque[Job]:
        """Open (or resume) the journal, set up progress and reuse; the jobs still to run."""
        opened = open_run_journal(self.path, tasks, resume=resume, workers=workers, progress=progress)
        self.resumed_key, self.reusable, self.progress = opened.resumed_key, opened.reusable, opened.progress
        self.journal, self.summary.resumed = opened.journal, opened.resumed
        return deque(Job(t) for t in opened.todo)

    # -- workers -----------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        where = self.out_dir / "workers"
        spec = WorkerSpec(
            backend=self.backend, generation=self.generation, log_path=str(where / f"w{slot}.log"),
            board_path=str(where / f"w{slot}.unit"), carry_path=str(where / f"w{slot}.carry"), parent_pid=os.getpid(),
            handlers=self.handlers, kinds=self.kinds, device_plan=self.devices.plan, threads=self.threads,
            options=self.options, env=dict(os.environ))
        # several workers fork from one zygote: torch and OpInfo are imported once for all of them
        fork = self.summary.restarts > 0 or zygote.running() or self.n_workers > 1
        try:
            handle = self.executor.spawn(slot, spec, replacement=fork)
        except OSError as exc:  # no process could be made (no memory, no pids): a failed start, counted
            return self._failed_start(f"could not start: {exc}")
        handle.deadline = time.monotonic() + self.grace  # torch import + backend setup
        self.workers[slot] = handle

    def _fill(self) -> None:
        """Start workers up to what the remaining work can use (one first, to learn the key)."""
        busy = sum(1 for w in self.workers.values() if w.job is not None)
        target = worker_target(self.n_workers, len(self.pending) + busy, available=self.executor.available(),
                               one_first=bool(self.run_key is None and self.reusable) or self.devices.waiting)
        if target == 0 == len(self.workers) and self.pending:
            raise Aborted("no device is left to run on (every node that had one left the cluster)")
        slot = 0
        while len(self.workers) < target:
            while slot in self.workers:
                slot += 1
            self._spawn(slot)

    def _lost(self, handle: Worker, *, fault: bool) -> None:
        """Forget a worker that is gone; a fault uses up one restart of the cap."""
        self.workers.pop(handle.slot, None)
        job = handle.job
        if job is not None:  # each post bumps the board's sequence number by 2
            handle.look()
            attempt = (handle.seen - job.seq0) // 2
            # units carried over are not run again: the attempts add up (without, the longest counts)
            job.units = job.units + attempt if job.done else max(job.units, attempt)
            job.worker_units = handle.seen // 2
            job.done.update(handle.carried(job.task.id))
        handle.end()
        if fault:
            if self.summary.restarts >= self.max_restarts:
                raise Aborted(
                    f"stopped after {self.summary.restarts} worker restarts (the cap; --max-restarts): "
                    f"the backend faults on nearly every probe (last: task "
                    f"{handle.job.task.id if handle.job else '?'}, unit {handle.unit}); "
                    f"worker logs in {self.out_dir / 'workers'}"
                )
            self.summary.restarts += 1

    # -- messages ----------------------------------------------------------------------------

    def _key(self, identity: WorkerIdentity) -> str:
        return str(identity.evidence_key(self.options.op_source_hash))

    def _on_ready(self, handle: Worker, identity: WorkerIdentity) -> None:
        handle.ready = True
        handle.deadline = float("inf")
        self.startup_failures = 0
        if (why := other_subject(identity, backend=self.backend, generation=self.generation, first=self.first_identity)):
            raise Aborted(f"worker {handle.slot}: {why}")
        wanted = self.devices.ready(handle, identity)
        if wanted is not None:  # one worker per device (the parent could not know how many)
            self.n_workers = max(1, min(wanted, len(self.pending) + 1))
        key = self._key(identity)
        if self.run_key is not None:
            if key != self.run_key:
                self.progress.note(f"warning: worker {handle.slot} reports a different build: {key}")
                if self.summary.startup_seconds is None:  # a cached identity the fingerprint kept wrongly: drop it
                    (self.out_dir / IDENTITY_FILE).unlink(missing_ok=True)
            return
        self.summary.startup_seconds = round(time.monotonic() - self.started, 3)
        store_identity(self.out_dir, self.fingerprint, identity)
        self._adopt(key, identity)

    def _adopt(self, key: str, identity: WorkerIdentity) -> None:
        """Take the run's evidence key: write the header, reuse every task whose key is unchanged."""
        self.run_key, self.first_identity = key, identity
        if self.resumed_key is not None and self.resumed_key != key:
            self.progress.note(
                "warning: resuming a journal started with a different build; each record keeps its own evidence key"
            )
        if self.journal.empty:
            self.journal.append(journal_header(
                key, identity, backend=self.backend, generation=self.generation, planned=self.summary.planned,
                command=self.command, run=self.run_identity).model_dump_json())
        keep: deque[Job] = deque()
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

    def _handle(self, handle: Worker, msg: FromWorker) -> None:
        job: Job | None = handle.job
        if isinstance(msg, Ready):
            self._on_ready(handle, msg.identity)
        elif isinstance(msg, SetupFailed):
            raise Aborted(f"worker {handle.slot} could not set up backend {self.backend!r}:\n{msg.trace}")
        elif job is None or msg.task_id != job.task.id:
            return  # a late message about a task this worker no longer owns
        elif isinstance(msg, Done):
            handle.job, handle.unit, handle.deadline = None, None, float("inf")
            self._assign()  # the worker's next task first: it runs while this record is parsed and journaled
            try:  # parsed once: a model from here to the journal; one that is none is the task's error
                record = parse_record(json.loads(msg.record), f"worker {handle.slot}'s record of task {job.task.id}")
            except (ValueError, ArtifactError) as exc:
                return self._fault(job, None, Skip(FaultOutcome.error, str(exc)[-2000:]))
            self._record(job, record, worker=handle.slot)
        else:  # Poisoned or Fault: the worker exits
            skip = msg.skip() if isinstance(msg, Poisoned) else Skip(msg.outcome, msg.message)
            handle.gone = True
            self._lost(handle, fault=True)
            handle.job = None
            check_infrastructure(msg.message, None, self.out_dir, None)  # a full disk is no unit's fault
            self._fault(job, msg.unit, skip)

    def _drain(self, handle: Worker) -> None:
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

    def _failed_start(self, why: str) -> None:
        self.startup_failures += 1
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            raise Aborted(f"{self.startup_failures} workers in a row {why}")

    def _reap(self, handle: Worker) -> None:
        """A worker died without saying why: blame its unit (crash) or count a failed start."""
        if handle.slot not in self.workers or self.workers[handle.slot] is not handle:
            return
        handle.look()  # the unit it started last, announced or not before the parent's last look
        sig, message = handle.exit_fault()
        if not handle.ready:
            self._lost(handle, fault=False)
            return self._failed_start(f"died while starting:\n{message}")
        job = handle.job
        # its machine left the cluster: nothing it ran is to blame; the task runs again elsewhere
        # with the units the worker had finished (nothing lost, nothing twice), up to a limit
        lost = handle.lost_with_node and self.node_losses < MAX_NODE_LOSSES
        self.node_losses += lost
        self._lost(handle, fault=not lost)
        if job is not None and lost:
            self.progress.note(f"node lost: task {job.task.id} runs again on another worker ({message})")
            self.pending.appendleft(job)
        elif job is not None:
            check_infrastructure(message, sig, self.out_dir, self.watch)  # a full disk, the OOM killer: the run's
            self._fault(job, handle.unit, Skip(FaultOutcome.crashed, message, sig))

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
            handle.dump_stack()  # faulthandler writes the stack to the log
            tail = handle.log_tail()
            self._lost(handle, fault=True)
            if job is not None:
                limit = unit_timeout(self.handlers, job, unit, self.timeout) if unit is not None else self.grace
                what = f"no progress within {limit:g}s" + ("" if unit is not None else " of the task's start")
                self._fault(job, unit, Skip(FaultOutcome.hung, f"{what}\n{tail}".strip()))

    # -- bookkeeping ---------------------------------------------------------------------------

    def _fault(self, job: Job, unit: str | None, skip: Skip) -> None:
        """Requeue ``job`` with ``unit`` marked (or retried); past the fault limit, skip what is left."""
        what = f"{skip.outcome}{f' ({skip.signal})' if skip.signal else ''}"
        lines = skip.lines  # the first says how it ended, the last (of a worker's last output) usually why
        said = skip.headline + (f" ... {lines[-1].strip()[:160]}" if len(lines) > 1 else "")
        self.progress.note(f"{what}: task {job.task.id} unit {unit}: {said}")
        if retry_in_fresh_worker(job, unit, skip):
            self.max_restarts += 1  # the retry's restart is not the backend's: keep the cap's meaning
            self.summary.retried += 1
            self.progress.note(f"retrying unit {unit} of task {job.task.id} in a fresh worker")
            self.pending.appendleft(job)
            return
        job.faults += 1
        skip = confirmed(job, unit, skip)
        budget = fault_budget(job.units)
        if (unit is None and job.skip_rest is not None) or unit in job.skip or job.faults > 2 * budget:
            # nothing new to blame: the task itself is the fault
            self._record(job, resolve_handler(self.handlers[job.task.kind]).fault_record(job.task, skip), worker=None)
            return
        if unit is None:
            job.skip_rest = skip
        else:
            job.skip[unit] = skip
            if job.faults >= budget and job.skip_rest is None:
                # the units after the last faulted one never run: the handler lists them as not run
                why = f"not run: the task faulted {job.faults} times; last: {lines[0] if lines else ''}"
                job.skip_rest = Skip(skip.outcome, why, not_run=why)
        self.pending.appendleft(job)

    def _record(self, job: Job, record: BaseModel, worker: int | None) -> None:
        """Journal a task's record (a worker's, or a handler's fault record), stamped with what the
        runner knows: the task id resume and reuse match on, the evidence key, attempts, worker."""
        record = record.model_copy(update={"task": job.task.id, "evidence_key": job.key})
        checked = self.devices.check(job, record, self.n_workers)
        if checked is None:  # journaled once another device has run it
            self.progress.note(f"cross-check: task {job.task.id} has a wrong cell on {job.device}; probing it on "
                               "another device")
            self.pending.appendleft(job)
            return
        record = job.stamp(checked, worker)
        self.journal.append(record.model_dump_json())
        self.summary.probed += 1
        self.progress.add(record.model_dump(mode="json"), fresh=True)

    def _assign(self) -> None:
        for handle in sorted(self.workers.values(), key=lambda w: w.slot):
            if not self.pending:
                return
            if not handle.ready or handle.job is not None or handle.gone:
                continue
            # a fresh worker takes a retry first; a worker that has run tasks never takes one
            job: Job | None = None
            if handle.tasks == 0:
                job = next((j for j in self.pending if j.fresh and self.devices.fits(j, handle)), None)
            if job is None:
                job = next((j for j in self.pending if not j.fresh and self.devices.fits(j, handle)), None)
            if job is None and any(not j.fresh for j in self.pending):
                continue  # only cross-checks wait, for a worker on another device
            if job is None:  # only retries wait, for a fresh worker: make one unless one is coming
                if not any(w.tasks == 0 for w in self.workers.values()):
                    self.executor.stop_workers([self.workers.pop(handle.slot)])
                continue
            self.pending.remove(job)
            job.seq0 = handle.board_seq()  # before the worker can post the task's first unit
            if not handle.send(RunTask(job.task, dict(job.skip), job.skip_rest, dict(job.done), dict(job.retried))):
                self.pending.appendleft(job)
                handle.gone = True
                continue
            handle.tasks += 1
            job.device, job.device_uuid, job.node, job.host = handle.device, handle.device_uuid, handle.node, handle.host
            job.fresh = False
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
                waitables += [w.conn] if w.sentinel is w.conn else [w.conn, w.sentinel]
            ready = set(wait(waitables, max(0.0, wake - now)))
            for handle in list(self.workers.values()):
                if handle.conn in ready or handle.sentinel in ready:
                    self._drain(handle)
                    if handle.gone or not handle.alive():
                        self._reap(handle)
            now = time.monotonic()
            for handle in self.workers.values():
                if handle.look():  # a new unit: its deadline starts (at most ``poll`` late)
                    handle.deadline = now + unit_timeout(self.handlers, handle.job, handle.unit, self.timeout)
            self._expire(now)
            self.progress.tick()

    def shutdown(self) -> None:
        """Stop idle workers, kill busy ones, close the journal (fsync)."""
        self.executor.close(list(self.workers.values()))
        self.workers.clear()
        self.journal.close()
