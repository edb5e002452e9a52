"""How workers start: spawned, and after a crash forked from a warm zygote where that is safe.

Every worker imports torch, OpInfo's ``op_db`` and the compiler stack before its first task:
about 4 s of CPU, paid again by every replacement after a crash (a backend that crashes on many
inputs pays it hundreds of times). With a CPU-only torch build (its version carries the ``+cpu``
label) none of those imports can touch an accelerator runtime, so once a run has replaced a
worker, the replacements come from multiprocessing's *forkserver*: one server process imports
them once (:mod:`.preload`) and forks a worker per request. The seeds' rule holds: the server is
spawned, never initialises a device (it does not import the backend under test, and defers
torch's device-backend autoload to each worker, see :mod:`.preload`), and each worker sets its
backend up itself after the fork. Any other torch build (CUDA, ROCm, a vendor's) could
initialise its runtime while OpInfo's import asks about devices, so all its workers are
spawned, as everywhere without a forkserver or with ``OPMATRIX_WORKER_START=spawn``
(``fork`` forks every worker from the zygote, the first ones too).

Why not the first worker of a one-worker run: a forked worker writes to the pages it shares with
the zygote (every object it touches has its reference count changed), and copying them cost
about 0.5 s more than spawning on a 10-operator probe; the imports sit on the critical path
either way. A replacement, by contrast, forks in a fraction of a second instead of importing for
4 s, and so do the first workers of a run with several (the runner asks for them as
replacements): one import for all of them instead of one each, 2 s of CPU less per extra worker
on the 40 names of the speed bench, which a loaded machine feels. The server freezes what it
imported (``gc.freeze``), so a forked worker's collections leave those pages alone.

A first run (OpInfo's name index not yet cached) starts the server before it plans
(:func:`start_early`) and asks it for the index (:func:`ask`: a child forked from the server,
once its imports are done, sends it back), so the orchestrator never imports torch; the run's
first workers fork from the server too (a first run with every cache empty went from 1.63x to
about 1.06x a warm one on a 10-operator probe).

A server whose imports raise dies before it forks anything; multiprocessing would start it
again for the next request, to fail the same way, so the run gives it up (:func:`give_up`) and
spawns that worker and every later one until it ends.

Otherwise the server starts with the first worker that needs it and is stopped when the run ends
(:func:`stop`), so each run's workers see that run's environment and preloads: torch for every
run, and the modules the run's task kinds name (their handlers' ``warm``: for operator probes
OpInfo and the compile check's front end). Should the parent die, the server exits with it, and the
workers with the server.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import multiprocessing as mp
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from typing import Any, cast

__all__ = ["PRELOAD", "ask", "context", "give_up", "running", "short_socket_dir", "start_early", "start_method", "stop"]

#: the module the forkserver imports before it forks any worker
PRELOAD = "opmatrix.probes.runner.preload"
_ENV = "OPMATRIX_WORKER_START"


def _cpu_only_torch() -> bool:
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    return version.partition("+")[2].startswith("cpu")


_BROKEN: list[bool] = [False]  # the run's zygote failed (give_up): its other workers are spawned


#: the contexts :func:`start_method` names (typeshed types ``mp.get_context(str)`` as their base)
ProcessContext = ForkContext | ForkServerContext | SpawnContext


def start_method(replacement: bool = True) -> str:
    """``forkserver`` for a worker that may fork from the zygote (see the module doc), else ``spawn``."""
    wanted = os.environ.get(_ENV, "").strip().lower()
    if wanted == "spawn" or _BROKEN[0] or "forkserver" not in mp.get_all_start_methods() or not _cpu_only_torch():
        return "spawn"
    return "forkserver" if replacement or wanted == "fork" else "spawn"


_OURS: list[bool] = [False]  # whether the forkserver running in this process is the run's zygote


#: longest folder under which multiprocessing's socket path (``pymp-XXXXXXXX/listener-XXXXXXXX``)
#: still fits AF_UNIX's 108 bytes with room to spare
_SOCKET_DIR_MAX = 70


def short_socket_dir() -> str:
    """The folder multiprocessing binds its sockets in, made short and private when TMPDIR is long.

    The forkserver listens on a Unix socket under ``TMPDIR``; with a long TMPDIR (a CI workspace
    path of 200 characters) binding it fails ("AF_UNIX path too long") at the first worker
    replacement. Then a private folder (mode 0700, removed at exit) under ``/tmp``, ``/var/tmp`` or
    ``/dev/shm`` serves instead; workers still write everything else under TMPDIR.
    """
    import shutil
    import tempfile
    from multiprocessing import process, util

    config: dict[str, Any] = getattr(process.current_process(), "_config", {})
    current = config.get("tempdir") or tempfile.gettempdir()
    if len(os.fsencode(current)) <= _SOCKET_DIR_MAX:
        return str(current)
    for base in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            folder = tempfile.mkdtemp(prefix="opm-", dir=base)
        except OSError:
            continue
        util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
        config["tempdir"] = folder
        return folder
    return str(current)  # nowhere short to go: a failed bind makes the run spawn its workers (pool)


def context(warm: tuple[str, ...] = (), *, replacement: bool = False) -> ProcessContext:
    """The multiprocessing context a worker starts in; ``warm``: the modules its tasks import
    besides torch (the server imports them once, before it forks)."""
    ctx = cast(ProcessContext, mp.get_context(start_method(replacement)))
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        short_socket_dir()

        if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:  # the next start is ours
            ctx.set_forkserver_preload([PRELOAD, *warm])
            _OURS[0] = True
    return ctx


def start_early(warm: tuple[str, ...]) -> bool:
    """Start the zygote now, so that its imports overlap the caller's own work (a first run asks
    it for OpInfo's name index before it can plan); the run's first workers then fork from it too.
    False when workers are spawned here (no zygote was started)."""
    ctx = context(warm, replacement=True)
    if ctx.get_start_method() == "forkserver" and _OURS[0]:
        from multiprocessing import forkserver

        forkserver.ensure_running()
    return running()


def running() -> bool:
    """Whether the run's zygote is up (or importing): forking from it beats spawning then."""
    from multiprocessing import forkserver

    return _OURS[0] and getattr(forkserver._forkserver, "_forkserver_pid", None) is not None


def _answer(conn: Connection, fn: Callable[..., object], args: tuple[object, ...]) -> None:
    try:
        conn.send((True, fn(*args)))
    except Exception as exc:  # noqa: BLE001 - the asker falls back to doing it itself
        with contextlib.suppress(OSError):  # the asker may be gone (interrupted)
            conn.send((False, repr(exc)))
    finally:
        conn.close()


def ask(fn: Callable[..., object], *args: object) -> tuple[bool, object]:
    """``(True, fn(*args))`` computed in a child forked from the run's zygote once its imports are
    done (the fork request waits for them), or ``(False, why)`` when no zygote runs or it failed:
    the caller then does the work itself. ``fn`` and its result must pickle."""
    if not running():
        return False, "no zygote runs"
    ctx = mp.get_context("forkserver")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(send, fn, args), name="opmatrix-zygote-ask")
    try:
        child.start()
        send.close()
        answer: tuple[bool, object] = receive.recv()
    except (OSError, EOFError) as exc:  # the zygote died while importing, or the child did
        answer = False, f"the zygote did not answer: {exc!r}"
    except BaseException:  # interrupted: a request still queued would fork a child with no one to answer
        stop()
        raise
    finally:
        send.close()
        receive.close()
        if child.pid is not None:
            child.join()
    return answer


def give_up() -> None:
    """The zygote failed (its imports raised, so it died before it could fork, or a fork request
    failed): spawn every worker from now until the run's end (:func:`stop`). It is not killed
    here: workers it forked before (their death signal is armed against it) keep running."""
    _BROKEN[0] = True


def stop() -> None:
    """Stop the run's forkserver, if one runs (its workers are gone by then), and reap it.

    Killed, not asked: it holds nothing to flush, and an interpreter that imported torch and
    OpInfo took 1.8 s to tear itself down, which the run's end waited for."""
    from multiprocessing import forkserver

    _BROKEN[0] = False  # the next run may try a zygote again
    server = forkserver._forkserver
    stop_server = getattr(server, "_stop", None)  # the stdlib's own tests stop it so
    if stop_server is None or not _OURS[0]:
        return  # none was started for the run (a forkserver the caller runs for itself is left alone)
    _OURS[0] = False
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    stop_server()  # closes its pipe and socket, reaps it
