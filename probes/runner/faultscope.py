"""How far a fault reached, decided by what still works afterwards.

After a fault the device is tried again, narrowest first, and the first thing that works bounds
the fault's :class:`~opmatrix.schema.FaultScope`::

    the same stream works                         -> operation
    a new stream works                            -> stream
    a fresh process on the same device works      -> context
    only another device works (here or afresh)    -> device
    nothing on this node works                    -> node

Each check is the bring-up check every backend has first (allocate, copy to the device and back,
:func:`opmatrix.backend.base.bringup_check`), never an arithmetic op that may be the one that
faulted. The checks made and what they found are the evidence. A fresh process is a child
running :func:`main` (``python -m opmatrix.probes.runner.faultscope BACKEND GENERATION INDEX``) with a
deadline; a device found unusable in a fresh process is reset with the adapter's reset hook
(:meth:`~opmatrix.backend.base.Adapter.reset_device`) so that the run can go on, and the reset is
part of the evidence.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from opmatrix.backend.base import Adapter, bringup_check
from opmatrix.schema import FaultScope

__all__ = ["CHILD_S", "ScopeFinding", "after_error", "after_restart", "cause_chain", "fresh_process", "main", "observe"]

#: deadline of a fresh-process check (importing torch and the backend, one bring-up check)
CHILD_S = 120.0


@dataclass(frozen=True)
class ScopeFinding:
    """A fault's scope and the checks (with results) it rests on."""

    scope: FaultScope
    evidence: tuple[str, ...]


def _said(what: str, problem: str | None) -> str:
    return f"{what}: works" if problem is None else f"{what}: fails ({problem[:200]})"


def after_error(adapter: Adapter) -> ScopeFinding:
    """A call raised in this process: ``operation`` when the same stream still works; when even
    the check that passed before the probe fails, wider (:func:`observe` decides, in the worker)."""
    if adapter.is_host:
        return ScopeFinding(FaultScope.operation, ("the host: a failed call leaves nothing behind",))
    problem = adapter.health_check()
    if problem is None:
        return ScopeFinding(FaultScope.operation, (_said("same stream (bring-up check after the fault)", None),))
    if adapter.health_baseline() is not None:
        return ScopeFinding(FaultScope.unknown, (f"the bring-up check failed before any probe too ({problem[:200]})",))
    return ScopeFinding(FaultScope.unknown, (_said("same stream", problem),))


def _on_new_stream(adapter: Adapter) -> tuple[bool, str | None]:
    """(whether the backend offers streams, the bring-up check's problem on a new one)."""
    try:
        scope = adapter.new_stream()
    except Exception as exc:  # noqa: BLE001 - creating a stream failed: that is the finding
        return True, f"creating a stream failed: {type(exc).__name__}: {str(exc)[:200]}"
    if scope is None:
        return False, "no stream objects"
    with scope:
        return True, bringup_check(adapter.device())


def _other_devices(adapter: Adapter) -> list[int]:
    try:
        return [d.index for d in adapter.devices() if d.index != adapter.device_index]
    except Exception:  # noqa: BLE001 - a runtime that cannot list devices now has none to offer
        return []


def observe(adapter: Adapter, backend: str | None, keepalive: Callable[[], None] = lambda: None) -> ScopeFinding:
    """The full ladder, run in the process that saw the fault (``keepalive`` is called between
    checks and while a child runs: the runner's deadline for the unit must not pass meanwhile)."""
    if adapter.is_host:
        return ScopeFinding(FaultScope.unknown, ("the host: no device to check apart from this process",))
    evidence: list[str] = []
    problem = adapter.health_check()
    evidence.append(_said("same stream", problem))
    if problem is None:
        return ScopeFinding(FaultScope.operation, tuple(evidence))
    keepalive()
    offered, fresh = _on_new_stream(adapter)
    evidence.append(_said("new stream", fresh) if offered
                    else "new stream: not checked (the backend offers no stream objects)")
    if offered and fresh is None:
        return ScopeFinding(FaultScope.stream, tuple(evidence))
    others = _other_devices(adapter)
    here = None
    if others:
        here = bringup_check(adapter.device(others[0]))
        evidence.append(_said(f"device {others[0]} in this process", here))
    spec = backend or adapter.name
    same = fresh_process(spec, adapter, adapter.device_index, keepalive)
    evidence.append(_said(f"a fresh process on device {adapter.device_index}", same))
    if same is None:
        return ScopeFinding(FaultScope.context, tuple(evidence))
    if same.startswith(NO_ANSWER):  # a slow machine, not a finding: neither context nor device is shown
        return ScopeFinding(FaultScope.unknown, (*evidence, "a fresh process gave no answer in time: the machine "
                                                 "was too loaded to tell a context fault from a device fault"))
    if not others:
        return ScopeFinding(FaultScope.device, (*evidence, "no other device on this node to compare"))
    if here is not None:
        away = fresh_process(spec, adapter, others[0], keepalive)
        evidence.append(_said(f"a fresh process on device {others[0]}", away))
        if away is not None:
            return ScopeFinding(FaultScope.node, tuple(evidence))
    reset = adapter.reset_device(adapter.device_index)
    evidence.append(f"reset hook: {reset}" if reset else "reset hook: the backend offers none")
    return ScopeFinding(FaultScope.device, tuple(evidence))


def cause_chain(exc: BaseException, limit: int = 6) -> list[str]:
    """The exception and what caused it (``__cause__``, else ``__context__``), outermost first,
    each with the runtime's own status or code where the exception carries one."""
    chain: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < limit:
        seen.add(id(current))
        status = next((getattr(current, a) for a in ("status", "code", "errno", "error_code")
                       if getattr(current, a, None) not in (None, "")), None)
        text = str(current).strip().splitlines()[0][:240] if str(current).strip() else ""
        chain.append(f"{type(current).__name__}: {text}" + (f" [status {status}]" if status is not None else ""))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain


def after_restart(adapter: Adapter, device: int | None) -> ScopeFinding:
    """A fault that ended its process (crash, hang): this worker is a fresh process; its
    bring-up check before any probe says whether the same device works afresh."""
    if adapter.is_host:
        return ScopeFinding(FaultScope.unknown, ("the host: the process ended, nothing else to check",))
    if device is not None and device != adapter.device_index:
        return ScopeFinding(FaultScope.unknown, (f"the process ended; this worker runs on device "
                                                 f"{adapter.device_index}, not {device}",))
    problem = adapter.health_baseline()
    said = _said(f"the process ended; a fresh process on device {adapter.device_index}", problem)
    return ScopeFinding(FaultScope.context if problem is None else FaultScope.unknown, (said,))


#: how a fresh process that never answered is reported (a timeout, not a failed check)
NO_ANSWER = "no answer within"


def fresh_process(spec: str, adapter: Adapter, index: int, keepalive: Callable[[], None] = lambda: None) -> str | None:
    """The bring-up check on device ``index`` in a new process; None when it passes."""
    cmd = [sys.executable, "-m", "opmatrix.probes.runner.faultscope", spec, adapter.generation or "-", str(index)]
    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=dict(os.environ), start_new_session=True)
    except OSError as exc:
        return f"could not start a process: {exc}"
    from .calibrate import current

    limit = max(CHILD_S, current().child_deadline())  # the machine measured at run start, not a constant
    end = time.monotonic() + limit
    while True:
        try:
            out, _ = child.communicate(timeout=2.0)
            break
        except subprocess.TimeoutExpired:
            keepalive()
            if time.monotonic() > end:
                child.kill()
                child.communicate()
                return f"{NO_ANSWER} {limit:.0f} s"
    lines = [line for line in (out or "").splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit {child.returncode}, no output"
    return None if child.returncode == 0 and last == "ok" else last.removeprefix("problem: ")


def main(argv: list[str] | None = None) -> int:
    """Child side of :func:`fresh_process`: set up the backend on one device, run the check."""
    from opmatrix.backend.registry import get_adapter

    spec, generation, index = (argv if argv is not None else sys.argv[1:])[:3]
    try:
        adapter = get_adapter(spec, None if generation == "-" else generation)
        adapter.register()
        adapter.select_device(int(index))
        adapter.setup()
        problem = adapter.health_check()
    except Exception as exc:  # noqa: BLE001 - the device cannot even be set up afresh: that is the finding
        problem = f"setup failed: {type(exc).__name__}: {str(exc)[:200]}"
    print("ok" if problem is None else f"problem: {problem}", flush=True)
    return 0 if problem is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
