"""Worker handles on the parent side: spawn, message, kill, and read a dead worker's last words.

Each worker slot ``i`` logs to ``DIR/workers/w<i>.log`` (appended across replacements); the
parent remembers where the current incarnation started so a crash message holds only its tail.
Each incarnation gets a fresh unit board, ``DIR/workers/w<i>.unit``, and carry file,
``DIR/workers/w<i>.carry`` (:mod:`.carry`), both removed when it is gone.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

from .board import UnitBoard
from .carry import read_carried
from .messages import Stop, ToWorker
from .task import warm_modules
from .worker import WorkerSpec, worker_main
from .zygote import ProcessContext, context, give_up, stop

if TYPE_CHECKING:
    from .plan import Job

__all__ = ["WorkerHandle", "close_pool", "exit_fault", "last_words", "spawn_worker", "stop_workers"]

# spawned, or forked from a zygote that never initialises a device (.zygote); never forked from the
# parent. Not daemonic: a worker may start helpers of its own (compile pools); run() stops every
# worker itself


@dataclass
class WorkerHandle:
    """One live worker process and what it is doing."""

    slot: int
    process: BaseProcess
    conn: Connection
    log: Path
    log_offset: int
    board: UnitBoard
    seen: int = 0  # the board's sequence number when the parent last looked
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    job: Job | None = None  # the job being run
    unit: str | None = None
    deadline: float = float("inf")
    gone: bool = False  # told to exit (poisoned / fault message) or found dead
    carry: Path | None = None  # its carry file: the units the current task finished
    tasks: int = 0  # tasks handed to this incarnation (0: fresh, nothing has run in it)
    device: str | None = None  # the device it probes, as torch names it (``--devices``; from its Ready)
    device_uuid: str | None = None
    node: str = ""  # the machine: always this host
    host: str = ""  # its host name, as its Ready reported it

    def look(self) -> bool:
        """Read the board: True when the worker started a new unit of its current task (``unit``)."""
        if self.job is None:
            return False
        seq, task_id, unit = self.board.read()
        if seq == self.seen or task_id != self.job.task.id:
            return False
        self.seen, self.unit = seq, unit
        return True

    @property
    def sentinel(self) -> int:
        """The process sentinel: ready when the worker has exited."""
        return self.process.sentinel

    @property
    def lost_with_node(self) -> bool:
        """Never: a local worker's host is the runner's own."""
        return False

    def alive(self) -> bool:
        return self.process.is_alive()

    def board_seq(self) -> int:
        """The board's sequence number now (a new task's units count from it)."""
        return self.board.read()[0]

    def carried(self, task_id: str) -> dict[str, bytes]:
        """The units of ``task_id`` this incarnation checkpointed."""
        return read_carried(self.carry, task_id) if self.carry is not None else {}

    def end(self) -> None:
        """Forget a worker that is gone: kill it when it still runs, else reap it."""
        if self.process.is_alive():
            self.kill()
        else:
            self.process.join(5)
            self.release()

    def dump_stack(self) -> None:
        """SIGUSR1: faulthandler writes the hung worker's stack to its log."""
        try:
            os.kill(self.process.pid or 0, signal.SIGUSR1)
            time.sleep(0.2)
        except ProcessLookupError:
            pass

    def exit_fault(self) -> tuple[str | None, str]:
        return exit_fault(self)

    def release(self) -> None:
        """Close the pipe and remove the board of a worker that has exited."""
        self.conn.close()
        self.board.close(remove=True)
        if self.carry is not None:
            self.carry.unlink(missing_ok=True)

    def send(self, msg: ToWorker) -> bool:
        """Send a message; False when the worker's end is already closed."""
        try:
            self.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the worker and its process group (helpers it started die with it)."""
        pid = self.process.pid
        if pid is not None and self.process.is_alive():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()  # not yet its own group leader
        self.process.join(5)
        self.release()

    def stop(self, grace: float = 2.0) -> None:
        """Wait for a worker that was sent ``("stop",)`` to exit; kill it when it does not within
        ``grace`` seconds."""
        self.process.join(grace)
        if self.process.is_alive():
            self.kill()
        else:
            self.release()

    def log_tail(self, limit: int = 1500) -> str:
        """What this incarnation last wrote to stderr/stdout: its last Python stack if any, else the tail."""
        try:
            with self.log.open("rb") as fh:
                fh.seek(self.log_offset)
                data = fh.read()
        except OSError:
            return ""
        return last_words(data.decode("utf-8", errors="replace"), limit)


def last_words(text: str, limit: int = 1500) -> str:
    """The part of a worker log that explains its end, innermost frames first.

    faulthandler writes ``Fatal Python error: Segmentation fault`` (or, on the parent's SIGUSR1
    before a hang kill, a bare stack) most recent call first; keep that block with the few lines
    before it (a C++ ``terminate called ...`` for instance) and drop the extension module list.
    """
    start = text.rfind("Fatal Python error")
    if start < 0:
        stack = text.rfind("(most recent call first)")
        start = text.rfind("\n", 0, stack) + 1 if stack >= 0 else -1
    if start < 0:
        return text[-limit:].strip()
    before = text[:start].rstrip("\n").splitlines()[-5:]
    block = text[start:].split("\nExtension modules:")[0]
    return "\n".join([*before, block]).strip()[:limit]


def spawn_worker(slot: int, spec: WorkerSpec, *, replacement: bool = False) -> WorkerHandle:
    """Start a worker process for ``slot`` with ``spec`` (a ``replacement`` may fork from the zygote)."""
    log = Path(spec.log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    offset = log.stat().st_size if log.exists() else 0
    board = UnitBoard(spec.board_path, create=True)  # zeroed: nothing of an earlier incarnation's units
    carry = Path(spec.carry_path) if spec.carry_path else None
    if carry is not None:
        carry.write_bytes(b"")
    ctx = context(warm_modules(spec.handlers, spec.kinds), replacement=replacement)
    try:
        process, parent_end = _start(slot, spec, ctx)
    except (OSError, EOFError):  # the zygote died (its imports raised) or could not start (its socket)
        if ctx.get_start_method() == "spawn":
            raise
        give_up()  # this worker and every later one is spawned
        process, parent_end = _start(slot, spec, context(warm_modules(spec.handlers, spec.kinds)))
    return WorkerHandle(slot=slot, process=process, conn=parent_end, log=log, log_offset=offset, board=board,
                        carry=carry)


def _start(slot: int, spec: WorkerSpec, ctx: ProcessContext) -> tuple[BaseProcess, Connection]:
    parent_end, child_end = ctx.Pipe(duplex=True)
    process = ctx.Process(target=worker_main, args=(slot, child_end, spec), name=f"opmatrix-w{slot}")
    try:
        process.start()
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    return process, parent_end


def exit_fault(handle: WorkerHandle) -> tuple[str | None, str]:
    """(signal name or None, message) describing how a worker process ended."""
    handle.process.join(5)
    code = handle.process.exitcode
    tail = handle.log_tail()
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = f"worker died by {name}"
        if name == "SIGKILL":
            why += " (killed from outside: host out of memory?)"
        return name, f"{why}; its last output:\n{tail}" if tail else why
    why = f"worker exited with code {code}"
    return None, f"{why}; its last output:\n{tail}" if tail else why


def stop_workers(handles: list[WorkerHandle]) -> None:
    """Ask idle workers to stop (they exit in parallel, 2 s at most), kill busy ones."""
    idle = [w for w in handles if w.job is None and w.ready and w.send(Stop())]
    for handle in handles:
        if handle not in idle:
            handle.kill()
    end = time.monotonic() + 2.0
    for handle in idle:
        handle.stop(max(0.0, end - time.monotonic()))


def close_pool(handles: list[WorkerHandle]) -> None:
    """The run's end: stop its workers (:func:`stop_workers`), then the zygote they were forked from."""
    stop_workers(handles)
    stop()
