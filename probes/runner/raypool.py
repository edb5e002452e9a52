"""The Ray executor: each worker is a Ray actor that owns one device on a node that has it.

``opmatrix probe --executor ray`` runs the tasks the runner plans on a Ray cluster (``--ray-address
auto|HOST:PORT``; by default a local Ray instance is started for the run and stopped after it).
This is the only module that talks to Ray; the runner sees each actor as a :class:`~.executor.Worker`,
exactly like a local worker process, so scheduling, deadlines, blame, the fault budget, carried
units, retries and the journal (written by the driver alone) are the runner's, unchanged.

An actor (:class:`WorkerHost`) is placed on a node that has the device kind's Ray resource
(``GPU`` for cuda, else a custom resource named after the device type, e.g. ``refaccel``;
``--ray-resource`` overrides), pinned to that node, and holds one unit of it; the driver gives it
a device index on that node. On its node the actor runs one slot of the local pool: it spawns
the same worker process (:func:`~.pool.spawn_worker`), with the same unit board and carry file on
the node's disk, and relays the messages. So on the node, blame is exact as locally: a worker
that crashes is reported with its signal, its last words, the unit on its board and the units it
had finished. The driver mirrors the board and the finished units while a task runs (each
``poll``), so even when the actor itself dies (killed, its node lost) the blame and the carried
units are the last ones seen. A unit past its deadline makes the driver ask the actor for the
worker's stack, then kill the actor (``hung``). An actor whose node left the cluster is no fault
of the unit: its task runs again elsewhere with the units it had finished (nothing lost, nothing
recorded twice: only the driver writes the journal, once per task).

::

    executor = RayExecutor(address=None, resource=None, backend="refaccel", generation="g2")
    summary = run(tasks, backend="refaccel", out_dir="out/r", executor=executor, command="...")
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import replace
from multiprocessing import get_context
from multiprocessing.connection import Connection
from typing import Any

from opmatrix.schema.io import UsageError

from .messages import Done, FromWorker, Ready, Stop, ToWorker
from .rayhost import Died, WorkerHost
from .worker import WorkerSpec

__all__ = ["INSTALL", "RayExecutor", "RayNoDevice", "RayWorker", "device_resource", "ray_missing"]

#: how to get Ray (the ``ray`` extra pins the version opmatrix is tested with)
INSTALL = 'pip install "opmatrix[ray]"'
#: environment variables the driver hands to workers on every node (fault injection, device
#: counts, torch settings); each node's own environment (paths, device visibility) stays
FORWARDED = ("OPMATRIX_", "TORCH_", "PJRT_", "XLA_", "KINETO_")


def ray_missing() -> str | None:
    """None when Ray can be imported; else what to do."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return f"--executor ray needs Ray, an optional dependency: {INSTALL}"
    return None


def device_resource(device_type: str) -> str:
    """The Ray resource a node declares per device: ``GPU`` for cuda, else the device type."""
    return "GPU" if device_type == "cuda" else device_type


class RayWorker:
    """The driver's side of one actor: a :class:`~.executor.Worker` for the runner.

    A relay thread calls the actor and puts its answers on a local pipe (``conn``), so the
    runner waits on it as on a local worker; while a task runs it mirrors the actor's unit board
    and finished units every ``poll`` seconds.
    """

    def __init__(self, slot: int, actor: Any, ray: Any, *, poll: float, node: str, device: str | None):
        self.slot = slot
        self.actor, self.ray, self.poll = actor, ray, poll
        self.node = node
        ctx = get_context("spawn")
        self.conn, self._out = ctx.Pipe(duplex=False)
        self.seen = 0
        self.ready = False
        self.job: Any = None
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
            first = ray.get(self.actor.start.remote())
            if isinstance(first, Died):
                self._fault = (first.signal, first.message)
                return
            if isinstance(first, Ready):
                first.identity["node"] = self.node
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
        ray = self.ray
        text = str(exc)
        first = next((line.strip() for line in text.splitlines() if "actor" in line.lower() and "dead" in line.lower()),
                     text.strip().splitlines()[0] if text.strip() else type(exc).__name__)
        self._node_lost = "node has died" in text or "node died" in text or not _node_alive(ray, self.node, wait=3.0)
        where = f"node {self.node[:12]}"
        if self._node_lost:
            self._fault = (None, f"the Ray node running this worker left the cluster ({where}): {first}")
        else:
            self._fault = (None, f"the Ray actor running the worker died on {where}: {first}")


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


def _count_devices(backend: str, generation: str | None) -> int:
    """In a spawned child (the driver never touches the device runtime): the devices of this node."""
    from opmatrix.backend.registry import get_adapter

    adapter = get_adapter(backend, generation)
    return len(adapter.devices())


class RayExecutor:
    """Workers as Ray actors, one per device of the nodes that have the device's resource."""

    name = "ray"

    def __init__(self, *, address: str | None, resource: str | None, backend: str, generation: str | None,
                 device_type: str, poll: float = 0.5):
        self.address = address
        self.resource = resource or device_resource(device_type)
        self.backend, self.generation = backend, generation
        self.poll = poll
        self.ray: Any = None
        self.started_local = False
        self.connected = False  # this executor called ray.init (a caller's own Ray session is left alone)
        self.places: list[tuple[str, int]] = []  # (node id, device index) of every device in the cluster
        self.assigned: dict[int, tuple[str, int]] = {}
        self.host: Any = None

    def start(self, out_dir: str) -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            self.connected = True
            if self.address in (None, "", "local"):
                resources: dict[str, float] = {} if self.resource == "GPU" else {self.resource: float(self._local_devices())}
                ray.init(address="local", resources=resources, include_dashboard=False, log_to_driver=False,
                         configure_logging=False, _node_ip_address="127.0.0.1")
                self.started_local = True
            else:
                try:
                    ray.init(address=self.address, log_to_driver=False, configure_logging=False)
                except Exception as exc:  # noqa: BLE001 - any failure to join is the address's
                    raise RayNoDevice(f"--ray-address {self.address}: cannot join the Ray cluster: "
                                      f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                                      ) from None
        self.places = self._places()
        if not self.places:
            where = "the local Ray instance" if self.started_local else f"the Ray cluster at {self.address}"
            raise RayNoDevice(
                f"--executor ray: no node of {where} has the resource {self.resource!r} (one unit per device); "
                f"start the nodes with e.g. ray start --resources '{{\"{self.resource}\": 2}}', or name the "
                "resource with --ray-resource"
            )
        self.host = ray.remote(WorkerHost)

    def capacity(self) -> int:
        """Devices the cluster has for this run: one worker each."""
        return len(self.places)

    def _local_devices(self) -> int:
        ctx = get_context("spawn")
        with ctx.Pool(1) as pool:
            return int(pool.apply(_count_devices, (self.backend, self.generation)))

    def _places(self) -> list[tuple[str, int]]:
        places = []
        for node in sorted(self.ray.nodes(), key=lambda n: str(n.get("NodeID"))):
            count = int((node.get("Resources") or {}).get(self.resource, 0))
            if node.get("Alive") and count > 0:
                places += [(str(node["NodeID"]), i) for i in range(count)]
        return places

    def _place(self, slot: int) -> tuple[str, int]:
        """The slot's device: the same one again (a replacement), unless its node is gone."""
        alive = set(self._places())
        mine = self.assigned.get(slot)
        if mine is not None and mine in alive:
            return mine
        taken = set(self.assigned.values()) & alive
        free = [p for p in sorted(alive) if p not in taken]
        place = free[0] if free else sorted(alive)[slot % len(alive)] if alive else self.places[slot % len(self.places)]
        self.assigned[slot] = place
        return place

    def spawn(self, slot: int, spec: WorkerSpec, *, replacement: bool) -> RayWorker:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node, index = self._place(slot)
        gpu = self.resource == "GPU"
        forwarded = {k: v for k, v in spec.env.items() if k.startswith(FORWARDED)}
        # a GPU actor sees only its GPU (Ray sets CUDA_VISIBLE_DEVICES): device 0 there
        spec = replace(spec, device=0 if gpu else index, device_plan=None, env=forwarded)
        options: dict[str, Any] = {
            "num_cpus": 0,
            "max_restarts": 0,
            "max_concurrency": 4,  # run() blocks one thread; look() and hang_report() answer on others
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        }
        if gpu:
            options["num_gpus"] = 1
        else:
            options["resources"] = {self.resource: 1}
        actor = self.host.options(**options).remote(slot, spec)
        return RayWorker(slot, actor, self.ray, poll=self.poll, node=node, device=None)

    def stop_workers(self, handles: list[Any]) -> None:
        for handle in handles:
            if isinstance(handle, RayWorker):
                if handle.job is None and handle.ready and handle.send(Stop()):
                    handle._thread.join(5)
                handle.kill()

    def close(self, handles: list[Any]) -> None:
        self.stop_workers(handles)
        if self.connected and self.ray is not None and self.ray.is_initialized():
            self.ray.shutdown()  # a local instance it started stops with it


class RayNoDevice(UsageError):
    """The cluster cannot be reached, or has no node with the device's resource (exit 2)."""

