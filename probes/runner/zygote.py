"""How workers start: forked from a warm zygote where nothing in it can hold device state, else spawned.

Every worker imports torch, OpInfo's ``op_db`` and the compiler stack before its first task:
about 4 s of CPU each, paid again by every replacement after a crash. With a CPU-only torch
build (its version carries the ``+cpu`` label) none of those imports can touch an accelerator
runtime, so workers come from multiprocessing's *forkserver*: one server process imports them
once (:mod:`.preload`) and forks a worker per request. The seeds' rule holds: the server is
spawned, never initialises a device (it does not import the backend under test, and defers
torch's device-backend autoload to each worker, see :mod:`.preload`), and each worker sets its
backend up itself after the fork. Any other torch build (CUDA, ROCm, a vendor's) could
initialise its runtime while OpInfo's import asks about devices, so its workers are spawned,
as are all workers where the platform has no forkserver or ``OPMATRIX_WORKER_START=spawn``.

The server starts with a run's first worker and is stopped when the run ends (:func:`stop`), so
each run's workers see that run's environment and preloads: torch for every run, and for runs of
operator probes also OpInfo and the compiler stack (:mod:`opmatrix.probes.ops.warm`). Should the
parent die, the server exits with it, and the workers with the server.
"""

from __future__ import annotations

import importlib.metadata
import multiprocessing as mp
import os
from multiprocessing.context import BaseContext

__all__ = ["PRELOAD", "context", "start_method", "stop"]

#: the module the forkserver imports before it forks any worker
PRELOAD = "opmatrix.probes.runner.preload"
#: what a task kind's workers import besides torch, imported by the server too
WARM = {"op": "opmatrix.probes.ops.warm"}
_ENV = "OPMATRIX_WORKER_START"


def _cpu_only_torch() -> bool:
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    return version.partition("+")[2].startswith("cpu")


def start_method() -> str:
    """``forkserver`` where workers may fork from a warm server (see the module doc), else ``spawn``."""
    wanted = os.environ.get(_ENV, "").strip().lower()
    if wanted == "spawn" or "forkserver" not in mp.get_all_start_methods() or not _cpu_only_torch():
        return "spawn"
    return "forkserver"


def context(kinds: tuple[str, ...] = ()) -> BaseContext:
    """The multiprocessing context a run's workers start in (``kinds``: its task kinds)."""
    ctx = mp.get_context(start_method())
    if ctx.get_start_method() == "forkserver":  # read when the server starts: once per run
        ctx.set_forkserver_preload([PRELOAD, *(WARM[k] for k in kinds if k in WARM)])
    return ctx


def stop() -> None:
    """Stop the run's forkserver, if one runs (its workers are gone by then), and reap it."""
    from multiprocessing import forkserver

    stop_server = getattr(forkserver._forkserver, "_stop", None)  # the stdlib's own tests stop it so
    if stop_server is not None:
        stop_server()
