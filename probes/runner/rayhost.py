"""What runs on a Ray node for the Ray executor (:mod:`.raypool`): one slot of the local pool.

The actor spawns the same worker process as the local pool (:func:`~.pool.spawn_worker`: never
forked, per the fork rules of docs/levels.md), with its unit board and carry file on the node's
own disk, relays the runner's messages to it and answers with the worker's; when the worker
dies it reports how (signal, last words), the unit on its board and the units it had finished,
exactly as the local runner reads them. When the actor itself dies (killed from outside, its
process gone) the driver runs :func:`remains` on the same node: it reads the dead actor's unit
board and carry file once its worker is gone, so the unit running at the death is named exactly
(as the local pool names a crashed worker's unit), at no cost per unit. Imported on every node;
never imports Ray itself except to name its node.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from typing import Any

from .board import UnitBoard
from .carry import read_carried
from .messages import FromWorker, RunTask, Stop
from .worker import WorkerSpec

__all__ = ["Died", "Place", "WorkerHost", "remains"]


@dataclass(frozen=True)
class Died:
    """The worker process on the actor's node died: how, and what its board and carry file held."""

    signal: str | None
    message: str
    board: tuple[int, str, str | None]
    carried: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Place:
    """Where an actor keeps its worker's files on its node, and the worker's pid (for :func:`remains`)."""

    dir: str
    board_path: str
    carry_path: str
    pid: int


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def remains(place: Place, task_id: str) -> tuple[tuple[int, str, str | None], dict[str, bytes]]:
    """On the node of an actor that died: its worker's last unit board and the units of ``task_id``
    it finished, read once the worker is gone (it dies with the actor: its death signal is armed
    against it); then the node-local files are removed."""
    end = time.monotonic() + 10
    while _running(place.pid) and time.monotonic() < end:
        time.sleep(0.02)
    try:
        board = UnitBoard(place.board_path)
        seq, task, unit = board.read()
        board.close()
        carried = read_carried(place.carry_path, task_id) if os.path.exists(place.carry_path) else {}
    finally:
        shutil.rmtree(place.dir, ignore_errors=True)
    return (seq, task or "", unit), carried


class WorkerHost:
    """On a Ray node: one slot of the local pool (its worker process, unit board, carry file).

    Wrapped with ``ray.remote`` by :class:`RayExecutor`; its methods run in the actor process.
    """

    def __init__(self, slot: int, spec: WorkerSpec):
        self.slot = slot
        self.dir = tempfile.mkdtemp(prefix=f"opmatrix-w{slot}-")
        self.spec = replace(
            spec,
            log_path=os.path.join(self.dir, f"w{slot}.log"),
            board_path=os.path.join(self.dir, f"w{slot}.unit"),
            carry_path=os.path.join(self.dir, f"w{slot}.carry"),
            parent_pid=os.getpid(),
            env={**os.environ, **spec.env},  # the node's own paths and device visibility, the driver's settings
        )
        self.handle: Any = None
        self.sent: set[tuple[str, str]] = set()

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def start(self) -> tuple[FromWorker | Died, Place]:
        """Spawn the worker (never forked: the fork rules of docs/levels.md) and wait for its first
        word; also where its files are (read by :func:`remains` should the actor die)."""
        from .pool import spawn_worker

        self.handle = spawn_worker(self.slot, self.spec)
        place = Place(self.dir, self.spec.board_path, self.spec.carry_path, int(self.handle.process.pid or 0))
        return self._next(), place

    def run(self, msg: RunTask) -> tuple[FromWorker | Died, tuple[int, str, str | None]]:
        """Run one task in the worker; its answer (or how it died) and the board after it."""
        if not self.handle.send(msg):
            return self._died(), self.handle.board.read()
        answer = self._next()
        return answer, self.handle.board.read()

    def look(self) -> tuple[tuple[int, str, str | None], dict[str, bytes]]:
        """The unit board now, and the units of its task finished since the last look."""
        board = self.handle.board.read()
        return board, self._new_carried(board[1])

    def hang_report(self) -> tuple[str, tuple[int, str, str | None], dict[str, bytes]]:
        """The hung worker's stack (faulthandler, into its log), board and finished units; then it is killed."""
        self.handle.dump_stack()
        board = self.handle.board.read()
        carried = self._new_carried(board[1])
        tail = self.handle.log_tail()
        self.handle.kill()
        return tail, board, carried

    def stop(self) -> None:
        """Stop the worker (it exits without teardown) and remove the node-local files."""
        if self.handle is not None and self.handle.send(Stop()):
            self.handle.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _new_carried(self, task_id: str) -> dict[str, bytes]:
        carry = self.handle.carry
        if not task_id or carry is None:
            return {}
        found = read_carried(carry, task_id)
        new = {u: p for u, p in found.items() if (task_id, u) not in self.sent}
        self.sent.update((task_id, u) for u in new)
        return new

    def _next(self) -> FromWorker | Died:
        handle = self.handle
        while True:
            ready = wait([handle.conn, handle.process.sentinel])
            if handle.conn in ready:
                try:
                    msg: FromWorker = handle.conn.recv()
                    return msg
                except (EOFError, OSError):
                    pass
            if not handle.process.is_alive():
                return self._died()

    def _died(self) -> Died:
        from .pool import exit_fault

        board = self.handle.board.read()
        signal, message = exit_fault(self.handle)
        return Died(signal, message, board, self._new_carried(board[1]))
