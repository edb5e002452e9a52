"""The Ray executor: each worker is a Ray actor that owns one device on a node that has it.

``opmatrix probe --executor ray`` runs the tasks the runner plans on a Ray cluster (``--ray-address
auto|HOST:PORT``; by default a local Ray instance is started for the run and stopped after it).
With :mod:`.rayworker` (the driver's side of an actor) and :mod:`.rayhost` (the node's side) it
is the only code that talks to Ray; the runner sees each actor as a :class:`~.executor.Worker`,
exactly like a local worker process, so scheduling, deadlines, blame, the fault budget, carried
units, retries and the journal (written by the driver alone) are the runner's, unchanged.

An actor (:class:`WorkerHost`) is placed on a node that has the device kind's Ray resource
(``GPU`` for cuda, else a custom resource named after the device type, e.g. ``refaccel``;
``--ray-resource`` overrides), pinned to that node, and holds one unit of it; the driver gives it
a device index on that node. On its node the actor runs one slot of the local pool: it spawns
the same worker process (:func:`~.pool.spawn_worker`), with the same unit board and carry file on
the node's disk, and relays the messages. So on the node, blame is exact as locally: a worker
that crashes is reported with its signal, its last words, the unit on its board and the units it
had finished. When the actor itself dies (killed from outside) the driver reads the dead actor's
board and carry file on its node (:func:`~.rayhost.remains`, once the worker died with it): the
unit running at the death is blamed, exactly, and every unit it finished is kept. The driver
also mirrors the board and the finished units while a task runs (each ``poll``), which is what
it has when the node itself is gone. A unit past its deadline makes the driver ask the actor for
the worker's stack, then kill the actor (``hung``). An actor whose node left the cluster is no
fault of the unit: its task runs again elsewhere with the units it had finished (nothing lost,
nothing recorded twice: only the driver writes the journal, once per task).

::

    executor = RayExecutor(address=None, resource=None, backend="refaccel", generation="g2")
    summary = run(tasks, backend="refaccel", out_dir="out/r", executor=executor, command="...")
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import replace
from multiprocessing import get_context
from typing import Any

from opmatrix.schema.io import UsageError

from .executor import Worker
from .messages import Stop
from .rayhost import WorkerHost, remains
from .rayworker import RayWorker
from .worker import WorkerSpec

__all__ = ["INSTALL", "RayExecutor", "RayNoDevice", "RayWorker", "device_resource", "ray_missing"]

#: how to get Ray (the ``ray`` extra pins the version opmatrix is tested with)
INSTALL = 'pip install "opmatrix[ray]"'
#: environment variables the driver hands to workers on every node (fault injection, device
#: counts, torch settings); each node's own environment (paths, device visibility) stays
FORWARDED = ("OPMATRIX_", "TORCH_", "PJRT_", "XLA_", "KINETO_")


#: the token of the local instances this process starts (see RayExecutor._own_token)
_LOCAL_TOKEN: dict[str, str] = {}


def ray_missing() -> str | None:
    """None when Ray can be imported; else what to do."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return f"--executor ray needs Ray, an optional dependency: {INSTALL}"
    return None


def device_resource(device_type: str) -> str:
    """The Ray resource a node declares per device: ``GPU`` for cuda, else the device type."""
    return "GPU" if device_type == "cuda" else device_type


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
        self.reader: Any = None
        self._alive, self._asked = 0, 0.0
        self._env_before: dict[str, str | None] = {}  # what _own_token changed in os.environ, to put back

    def _own_token(self) -> None:
        """Give a local instance a token of this run's own, in the environment only.

        Ray 2.60's ``ray.init()`` of a new local instance turns token authentication on and, with
        no token anywhere, writes one to ``~/.ray/auth_token``; from then on every ``ray start`` on
        the machine enables token auth and its other nodes and drivers fail ("InvalidAuthToken")
        unless they set ``RAY_AUTH_MODE=token``. With ``RAY_AUTH_TOKEN`` set, Ray finds a token and
        writes none. A user's own setting (``RAY_AUTH_MODE``, a token or token file) decides alone."""
        keys = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
        if any(os.environ.get(k) for k in keys) or os.path.exists(os.path.expanduser("~/.ray/auth_token")):
            return
        self._env_before = {k: os.environ.get(k) for k in keys}
        # one token per process: Ray's token loader keeps the first it read, and a later local
        # instance in this process (started with a new one) would refuse this driver
        os.environ["RAY_AUTH_TOKEN"] = _LOCAL_TOKEN.setdefault("token", secrets.token_hex(32))

    def _restore_env(self) -> None:
        for key, value in self._env_before.items():  # ray.init also set RAY_AUTH_MODE=token in this process
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._env_before = {}

    def start(self, out_dir: str) -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            self.connected = True
            if self.address in (None, "", "local"):
                resources: dict[str, float] = {} if self.resource == "GPU" else {self.resource: float(self._local_devices())}
                self._own_token()
                try:
                    ray.init(address="local", resources=resources, include_dashboard=False, log_to_driver=False,
                             configure_logging=False, _node_ip_address="127.0.0.1")
                except BaseException:
                    self._restore_env()
                    raise
                self.started_local = True
            else:
                try:
                    ray.init(address=self.address, log_to_driver=False, configure_logging=False)
                except Exception as exc:  # noqa: BLE001 - any failure to join is the address's
                    raise RayNoDevice(f"--ray-address {self.address}: cannot join the Ray cluster: "
                                      f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                                      ) from None
        self.places = self._places()
        self._alive, self._asked = len(self.places), time.monotonic()
        if not self.places:
            where = "the local Ray instance" if self.started_local else f"the Ray cluster at {self.address}"
            self.close([])  # the run never starts: what start() started stops, the environment is put back
            raise RayNoDevice(
                f"--executor ray: no node of {where} has the resource {self.resource!r} (one unit per device); "
                f"start the nodes with e.g. ray start --resources '{{\"{self.resource}\": 2}}', or name the "
                "resource with --ray-resource"
            )
        self.host = ray.remote(WorkerHost)
        self.reader = ray.remote(remains)

    def capacity(self) -> int:
        """Devices the cluster has for this run: one worker each."""
        return len(self.places)

    def available(self) -> int:
        """Devices of the nodes alive now (asked of the cluster at most once a second)."""
        now = time.monotonic()
        if now - self._asked > 1.0:
            with contextlib.suppress(Exception):  # the cluster did not answer: the last count stands
                self._alive = len(self._places())
            self._asked = now
        return self._alive

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
        placement = {"num_gpus": 1} if gpu else {"resources": {self.resource: 1}}
        actor = self.host.options(
            num_cpus=0, max_restarts=0,
            max_concurrency=4,  # run() blocks one thread; look() and hang_report() answer on others
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False), **placement,
        ).remote(slot, spec)
        reader = self.reader.options(num_cpus=0, max_retries=0,
                                     scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
        return RayWorker(slot, actor, self.ray, poll=self.poll, node=node, device=None, reader=reader)

    def stop_workers(self, handles: list[Worker]) -> None:
        for handle in handles:
            if isinstance(handle, RayWorker):
                if handle.job is None and handle.ready and handle.send(Stop()):
                    handle._thread.join(5)
                handle.kill()

    def close(self, handles: list[Worker]) -> None:
        self.stop_workers(handles)
        if self.connected and self.ray is not None and self.ray.is_initialized():
            self.ray.shutdown()  # a local instance it started stops with it
        self._restore_env()


class RayNoDevice(UsageError):
    """The cluster cannot be reached, or has no node with the device's resource (exit 2)."""

