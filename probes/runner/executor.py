"""Where workers run: the runner's executor interface, and the local pool that implements it.

The runner (:mod:`.runner`) decides everything about a run: which task goes to which worker,
deadlines, blame, the fault budget, carried units, retries, the journal. An *executor* only starts
workers and gives the runner a handle per worker; the handle speaks the same messages
(:mod:`.messages`) and shows the same unit board (which task and unit runs now) and carried units
(:mod:`.carry`) wherever the worker runs::

    executor = LocalExecutor()                      # worker processes on this host (:mod:`.pool`)
    handle = executor.spawn(0, spec, replacement=False)
    handle.send(RunTask(task)); wait([handle.conn]); handle.conn.recv()

Two implementations: :class:`LocalExecutor` (spawned processes, the default) and
:class:`~.raypool.RayExecutor` (a Ray actor per device, on the nodes of a Ray cluster that have
that device); only :mod:`.raypool` and its two halves of an actor (:mod:`.rayworker`, :mod:`.rayhost`) talk to Ray.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol

from .messages import ToWorker
from .worker import WorkerSpec

if TYPE_CHECKING:
    from .plan import Job

__all__ = ["Executor", "LocalExecutor", "Worker"]


class Worker(Protocol):
    """One worker as the runner sees it (:class:`~.pool.WorkerHandle` is the local one)."""

    slot: int
    conn: Connection  # messages from the worker; readable (or at EOF) when one is waiting or it ended
    seen: int
    ready: bool
    job: Job | None  # the job it runs
    unit: str | None
    deadline: float
    gone: bool
    tasks: int
    device: str | None
    device_uuid: str | None
    node: str  # where the worker runs ("" on this host; a Ray node id)
    host: str  # the host name its Ready reported ("" until then)

    @property
    def sentinel(self) -> Any:
        """Something ``multiprocessing.connection.wait`` wakes on when the worker ends."""
        ...

    def alive(self) -> bool: ...

    def look(self) -> bool:
        """Read the unit board: True when the worker started a new unit of its job (``unit``)."""
        ...

    def board_seq(self) -> int: ...

    def carried(self, task_id: str) -> dict[str, bytes]:
        """The units of ``task_id`` this worker finished (its checkpoints)."""
        ...

    def send(self, msg: ToWorker) -> bool: ...

    def kill(self) -> None: ...

    def end(self) -> None:
        """Forget a worker that is gone: kill it when it still runs, else reap it."""
        ...

    def dump_stack(self) -> None:
        """Ask a hung worker for its Python stack (into its log) before it is killed."""
        ...

    def log_tail(self, limit: int = 1500) -> str: ...

    def exit_fault(self) -> tuple[str | None, str]:
        """(signal name or None, message) saying how the worker ended."""
        ...

    @property
    def lost_with_node(self) -> bool:
        """The worker ended because its machine left the cluster: nothing it ran is to blame."""
        ...


class Executor(Protocol):
    """Starts workers and stops them; everything else is the runner's."""

    name: str

    def start(self, out_dir: str) -> None:
        """Before the first worker (a Ray executor connects to its cluster here)."""
        ...

    def capacity(self) -> int | None:
        """Devices the executor places workers on (one worker each), or None: the runner decides."""
        ...

    def available(self) -> int | None:
        """Devices on which a worker can run now (a Ray node may leave mid-run), or None: no limit."""
        ...

    def spawn(self, slot: int, spec: WorkerSpec, *, replacement: bool) -> Worker: ...

    def stop_workers(self, handles: list[Worker]) -> None: ...

    def close(self, handles: list[Worker]) -> None:
        """The run's end: stop every worker and whatever the executor started."""
        ...


class LocalExecutor:
    """Worker processes on this host: spawned, or forked from the run's zygote (:mod:`.pool`)."""

    name = "local"

    def start(self, out_dir: str) -> None:
        return None

    def capacity(self) -> int | None:
        return None

    def available(self) -> int | None:
        return None

    def spawn(self, slot: int, spec: WorkerSpec, *, replacement: bool) -> Worker:
        from .pool import spawn_worker

        return spawn_worker(slot, spec, replacement=replacement)

    def stop_workers(self, handles: list[Worker]) -> None:
        from .pool import WorkerHandle, stop_workers

        stop_workers([h for h in handles if isinstance(h, WorkerHandle)])

    def close(self, handles: list[Worker]) -> None:
        from .pool import WorkerHandle, close_pool

        close_pool([h for h in handles if isinstance(h, WorkerHandle)])
