"""Child processes with deadlines: the building blocks of the fork / spawn suite.

:func:`run_forked` forks this process and runs a function in the child; :func:`run_started`
starts a ``multiprocessing`` child (spawn or forkserver) that runs :func:`child_main`. Both return
a :class:`ChildResult` that says how the child ended: with a value, with an exception message,
by a signal, by an exit code, or not at all before the deadline (then it is killed)::

    res = run_forked(lambda: work(adapter), deadline=10)
    res.status, res.value, res.message     # ("raised", None, "RuntimeError: ... use spawn")
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from opmatrix.backend.base import Adapter
    from opmatrix.probes.runner.zygote import ProcessContext

__all__ = ["TIMED_OUT", "ChildResult", "child_main", "describe_exit", "run_forked", "run_started", "work"]

#: what :func:`work` returns on a healthy device
WORK_RESULT = 56.0
#: the deadlines (seconds) that children of this process ran past: a case whose children timed out
#: is retried once in a fresh process, then judged against the machine's load (see ``.casehost``)
TIMED_OUT: list[float] = []


@dataclass
class ChildResult:
    """How a child ended: ``ok`` (value), ``raised`` (message), ``signal``, ``exit`` (code) or ``hung``."""

    status: str
    value: Any = None
    message: str = ""
    code: int | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        """One phrase for evidence text."""
        if self.status == "ok":
            return f"returned {self.value!r} in {self.seconds:.2f} s"
        if self.status == "raised":
            return f"raised {self.message}"
        if self.status == "hung":
            return f"did not finish within {self.seconds:.0f} s (killed)"
        return describe_exit(self.code)


def describe_exit(code: int | None) -> str:
    """``exit code 3`` / ``killed by SIGSEGV``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def work(adapter: Adapter) -> float:
    """A round trip through the device with the bring-up opset only (allocate, copy in, copy out;
    no arithmetic op, which a minimal backend may lack); 56.0 on a healthy device."""
    import torch

    host = torch.arange(8, dtype=torch.float32)
    dev = torch.empty(8, dtype=torch.float32, device=adapter.device())
    dev.copy_(host)
    adapter.synchronize()
    back = torch.empty(8, dtype=torch.float32)
    back.copy_(dev)
    return float((back * 2).sum())  # on the host: the device's only job was to keep the bytes


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"


def run_forked(fn: Callable[[], Any], deadline: float, clean_exit: bool = False) -> ChildResult:
    """Fork; run ``fn`` in the child and send back its value or error; wait at most ``deadline`` s.

    ``clean_exit`` makes the child run its ``atexit`` handlers (the backend's shutdown) before
    leaving, as a normal interpreter exit would; otherwise it leaves with ``os._exit`` at once.
    """
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child: never return into the caller's frames
        os.close(read_fd)
        try:
            payload = {"status": "ok", "value": fn()}
        except BaseException as exc:  # noqa: BLE001 - the child reports anything, then exits
            payload = {"status": "raised", "message": _error_text(exc)}
        try:
            os.write(write_fd, json.dumps(payload, default=repr).encode())
            os.close(write_fd)
            if clean_exit:
                atexit._run_exitfuncs()
        finally:
            os._exit(0)
    os.close(write_fd)
    data = b""
    open_pipe = True
    status: int | None = None
    while time.monotonic() - start < deadline:
        if open_pipe:
            ready, _, _ = select.select([read_fd], [], [], 0.05)
            if ready:
                chunk = os.read(read_fd, 65536)
                data += chunk
                open_pipe = bool(chunk)
        else:
            time.sleep(0.02)
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
            break
    os.close(read_fd)
    seconds = time.monotonic() - start
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        TIMED_OUT.append(deadline)
        return ChildResult("hung", seconds=deadline)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return ChildResult("signal" if code < 0 else "exit", code=code, seconds=seconds,
                           message=_payload_message(data))
    payload = json.loads(data.decode() or "{}")
    if payload.get("status") == "ok":
        return ChildResult("ok", value=payload.get("value"), code=0, seconds=seconds)
    if payload.get("status") == "raised":
        return ChildResult("raised", message=str(payload.get("message")), code=0, seconds=seconds)
    return ChildResult("exit", code=0, seconds=seconds, message="exited without a result")


def _payload_message(data: bytes) -> str:
    try:
        return str(json.loads(data.decode()).get("message", ""))
    except ValueError:
        return ""


def child_main(spec: str, generation: str | None, conn: Connection, mode: str) -> None:
    """Target of spawned / forkserver children: initialise the backend, work, report, then ``mode``.

    ``mode``: ``ok`` reports and returns; ``crash`` reports and then dies of SIGSEGV (no core file).
    """
    from opmatrix.backend.registry import get_adapter

    try:
        adapter = get_adapter(spec, generation)
        adapter.setup()
        value = work(adapter)
        devices = adapter.devices()
        uuid = devices[0].uuid if devices else None
        conn.send({"status": "ok", "value": value, "uuid": uuid, "pid": os.getpid()})
    except Exception as exc:  # noqa: BLE001 - anything the child meets is reported to the parent
        conn.send({"status": "raised", "message": _error_text(exc)})
    conn.close()
    if mode == "crash":
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGSEGV)


def run_started(method: str, spec: str, generation: str | None, deadline: float, mode: str = "ok") -> ChildResult:
    """Start a ``method`` (spawn / forkserver) child running :func:`child_main`; wait for it."""
    import multiprocessing as mp

    ctx = cast("ProcessContext", mp.get_context(method))
    if method == "forkserver":
        ctx.set_forkserver_preload(["torch"])
    recv, send = ctx.Pipe(duplex=False)
    start = time.monotonic()
    proc = ctx.Process(target=child_main, args=(spec, generation, send, mode), daemon=True)
    proc.start()
    send.close()
    payload: dict[str, Any] = {}
    if recv.poll(deadline):
        try:
            payload = recv.recv()
        except EOFError:
            payload = {}
    proc.join(max(0.1, deadline - (time.monotonic() - start)))
    seconds = time.monotonic() - start
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        TIMED_OUT.append(deadline)
        return ChildResult("hung", seconds=deadline)
    code = proc.exitcode
    if payload.get("status") == "raised":
        return ChildResult("raised", message=str(payload["message"]), code=code, seconds=seconds)
    if code != 0 and mode != "crash":
        return ChildResult("signal" if code < 0 else "exit", code=code, seconds=seconds)
    if payload.get("status") == "ok":
        res = ChildResult("ok", value=payload, code=code, seconds=seconds)
        return res
    return ChildResult("signal" if code < 0 else "exit", code=code, seconds=seconds, message="no result sent")
