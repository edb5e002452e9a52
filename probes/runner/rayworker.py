"""The driver's side of one Ray actor of the Ray executor (:mod:`.raypool`): a worker for the runner.

A :class:`RayWorker` is what the runner sees of an actor (:class:`~.executor.Worker`, like a local
worker process). A relay thread calls the actor and puts its answers on a local pipe; while a
task runs it mirrors the actor's unit board and finished units. When the actor ends without an
answer it decides how: its node left the cluster (Ray says so, after the node's health checks
failed: nothing is blamed and the task runs again elsewhere), or it died on a live node (the dead
actor's board and carry file are read on that node by :func:`~.rayhost.remains`, so its unit is
blamed exactly and every unit it finished is kept).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from multiprocessing import get_context
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from .messages import Done, FromWorker, Ready, Stop, ToWorker
from .rayhost import Died, Place

if TYPE_CHECKING:
    from .plan import Job

__all__ = ["IN_DOUBT", "RayWorker"]

#: seconds the driver waits for Ray to say what became of an actor it cannot reach (the cluster
#: declares a node whose raylet died dead after its health checks fail: about 15 s by default)
IN_DOUBT = 120.0


class RayWorker:
    """The driver's side of one actor: a :class:`~.executor.Worker` for the runner.

    A relay thread calls the actor and puts its answers on a local pipe (``conn``), so the
    runner waits on it as on a local worker; while a task runs it mirrors the actor's unit board
    and finished units every ``poll`` seconds.
    """

    def __init__(self, slot: int, actor: Any, ray: Any, *, poll: float, node: str, device: str | None,
                 reader: Any = None):
        self.slot = slot
        self.actor, self.ray, self.poll = actor, ray, poll
        self.reader = reader  # remains() as a Ray task pinned to the actor's node
        self.place: Place | None = None
        self.node = node
        self.host = ""  # the host name its Ready reports
        ctx = get_context("spawn")
        self.conn, self._out = ctx.Pipe(duplex=False)
        self.seen = 0
        self.ready = False
        self.job: Job | None = None
        self.unit: str | None = None
        self.deadline = float("inf")
        self.gone = False
        self.tasks = 0
        self.device: str | None = device
        self.device_uuid: str | None = None
        self._inbox: queue.Queue[ToWorker | None] = queue.Queue()
        self._board: tuple[int, str, str | None] = (0, "", None)
        self._carried: dict[str, dict[str, bytes]] = {}
        self._fault: tuple[str | None, str] | None = None
        self._tail = ""
        self._node_lost = False
        self._dead = False
        self._thread = threading.Thread(target=self._relay, daemon=True, name=f"opmatrix-ray-w{slot}")
        self._thread.start()

    # -- the runner's view -----------------------------------------------------------------------

    @property
    def sentinel(self) -> Connection:
        return self.conn  # the relay closes its end when the actor is gone: EOF wakes the runner

    @property
    def lost_with_node(self) -> bool:
        return self._node_lost

    def alive(self) -> bool:
        return not self._dead

    def look(self) -> bool:
        if self.job is None:
            return False
        seq, task_id, unit = self._board
        if seq == self.seen or task_id != self.job.task.id:
            return False
        self.seen, self.unit = seq, unit
        return True

    def board_seq(self) -> int:
        return self._board[0]

    def carried(self, task_id: str) -> dict[str, bytes]:
        return dict(self._carried.get(task_id, {}))

    def send(self, msg: ToWorker) -> bool:
        if self._dead:
            return False
        self._inbox.put(msg)
        return True

    def kill(self) -> None:
        """Kill the actor (its worker dies with it: the death signal is armed against the actor)."""
        self._dead = True
        with contextlib.suppress(Exception):
            self.ray.kill(self.actor, no_restart=True)
        self._inbox.put(None)
        self.conn.close()

    def end(self) -> None:
        self.kill()

    def dump_stack(self) -> None:
        """Ask the actor for the hung worker's stack, board and finished units (it kills the worker)."""
        try:
            tail, board, carried = self.ray.get(self.actor.hang_report.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - the actor itself is stuck or gone: the mirror stands
            return
        self._tail = tail
        self._mirror(board, carried)

    def log_tail(self, limit: int = 1500) -> str:
        return self._tail[-limit:]

    def exit_fault(self) -> tuple[str | None, str]:
        return self._fault or (None, "the Ray actor ended without saying why")

    # -- the relay thread ------------------------------------------------------------------------

    def _mirror(self, board: tuple[int, str, str | None], carried: dict[str, bytes]) -> None:
        if board[1] and carried:
            self._carried.setdefault(board[1], {}).update(carried)
        self._board = board

    def _forward(self, msg: FromWorker) -> None:
        with contextlib.suppress(OSError, ValueError):  # the runner closed its end (it killed us)
            self._out.send(msg)

    def _relay(self) -> None:
        ray = self.ray
        try:
            first, self.place = ray.get(self.actor.start.remote())
            if isinstance(first, Died):
                self._fault = (first.signal, first.message)
                return
            if isinstance(first, Ready):
                first = Ready(first.slot, first.identity.model_copy(update={"node": self.node}))
            self._forward(first)
            if not isinstance(first, Ready):
                return
            while True:
                msg = self._inbox.get()
                if msg is None or isinstance(msg, Stop):
                    with contextlib.suppress(Exception):
                        ray.get(self.actor.stop.remote(), timeout=5)
                    return
                ref = self.actor.run.remote(msg)
                while not ray.wait([ref], timeout=self.poll)[0]:
                    if self._dead:
                        return
                    with contextlib.suppress(ray.exceptions.GetTimeoutError):
                        self._mirror(*ray.get(self.actor.look.remote(), timeout=max(5.0, 4 * self.poll)))
                answer, board = ray.get(ref)
                if isinstance(answer, Died):
                    self._mirror(answer.board, answer.carried)
                    self._fault = (answer.signal, answer.message)
                    return
                self._board = board
                self._forward(answer)
                if not isinstance(answer, Done):  # Fault / Poisoned: the worker has exited
                    return
        except Exception as exc:  # noqa: BLE001 - the actor died, or Ray failed: the runner blames or requeues
            if not self._dead:
                self._actor_died(exc)
        finally:
            self._dead = True
            with contextlib.suppress(OSError):
                self._out.close()

    def _actor_died(self, exc: BaseException) -> None:
        """Say how the actor ended: its node left the cluster (nothing to blame), or it died on a
        live node (its worker's last unit is to blame, read from the node: :func:`~.rayhost.remains`)."""
        final = self._final_word(exc)
        text = str(final if final is not None else exc)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = next((line for line in lines if "died because" in line or "dead" in line.lower()),
                     lines[0] if lines else type(exc).__name__)
        where = f"node {self.node[:12]}"
        if final is None:  # unreachable for IN_DOUBT seconds, or reachable again after a call was lost
            self._node_lost = True
            self._fault = (None, f"lost contact with the Ray actor running this worker ({where}): {first}")
            with contextlib.suppress(Exception):
                self.ray.kill(self.actor, no_restart=True)
            return
        self._node_lost = "node has died" in text or "node died" in text or not _node_alive(self.ray, self.node, wait=3.0)
        if self._node_lost:
            self._fault = (None, f"the Ray node running this worker left the cluster ({where}): {first}")
            return
        self._read_remains()
        self._fault = (None, f"the Ray actor running the worker died on {where}: {first}")

    def _final_word(self, exc: BaseException) -> BaseException | None:
        """What Ray finally says of an actor it reported *unavailable* (a node whose raylet died is
        declared dead only after its health checks fail); None when it stays unreachable for
        ``IN_DOUBT`` seconds or answers again (a call was lost: its task may or may not have run)."""
        ray = self.ray
        unavailable = ray.exceptions.ActorUnavailableError
        end = time.monotonic() + IN_DOUBT
        self.deadline = max(self.deadline, end + 10)  # the unit is not hung: its actor is in doubt
        while isinstance(exc, unavailable):
            if time.monotonic() > end or self._dead:
                return None
            if not _node_alive(ray, self.node, wait=0.0):
                return exc
            try:
                ray.get(self.actor.look.remote(), timeout=2)
                return None
            except ray.exceptions.GetTimeoutError:
                continue
            except Exception as later:  # noqa: BLE001 - the actor's fate, as Ray reports it now
                exc = later
            time.sleep(0.5)
        return exc

    def _read_remains(self) -> None:
        """The dead actor's board and finished units, read on its node (the mirror stands if that fails)."""
        if self.reader is None or self.place is None or self.job is None:
            return
        with contextlib.suppress(Exception):  # the node went too, or is unreachable: the last look stands
            task_id = self.job.task.id
            board, carried = self.ray.get(self.reader.remote(self.place, task_id), timeout=60)
            self._carried.setdefault(task_id, {}).update(carried)
            if board[0] >= self._board[0]:
                self._board = board


def _node_alive(ray: Any, node: str, wait: float) -> bool:
    """Whether the cluster still counts ``node`` alive (asked for up to ``wait`` seconds: a node
    whose raylet was killed is declared dead after the cluster's health checks)."""
    end = time.monotonic() + wait
    while True:
        try:
            alive = any(n.get("NodeID") == node and n.get("Alive") for n in ray.nodes())
        except Exception:  # noqa: BLE001 - the cluster itself is gone
            return False
        if not alive or time.monotonic() >= end:
            return alive
        time.sleep(0.5)
