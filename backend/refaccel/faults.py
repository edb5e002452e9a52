"""Fault injection: make a chosen op crash, abort, hang, run out of memory or poison the context.

Faults come from ``OPMATRIX_REFACCEL_FAULT`` (read at install; comma-separated ``mode:op``) or
from the API; ``op`` is a full overload (``aten::mul.Tensor``) or an operator (``aten::mul``)::

    OPMATRIX_REFACCEL_FAULT=crash:aten::mul.Tensor python probe.py    # SIGSEGV inside the call
    >>> inject_fault("poison", "aten::add.Tensor")  # every later call fails: not run here  # doctest: +SKIP

Modes, by how far the fault reaches (its *scope*): ``fail`` (the call fails with a runtime error;
everything else still works: operation), ``poison-stream`` (the call fails and the stream it ran
on is unusable; a new stream works), ``poison`` (the call fails and the context is unusable until
the process restarts), ``poison-device`` (the call fails and the device is unusable for this
process and every new one until the run's reset hook resets it: :mod:`.devicestate`), ``crash``
(SIGSEGV), ``abort`` (SIGABRT), ``hang`` (sleeps forever), ``oom`` (``torch.OutOfMemoryError``;
the device stays usable). Initialisation faults are separate: see
``runtime`` and ``OPMATRIX_REFACCEL_DRIVER``.

One device of a node can be made to compute wrong results (a bad chip among good ones of the same
generation): ``OPMATRIX_REFACCEL_BAD_DEVICE=1:aten::mul`` makes every native ``aten::mul`` on
``refaccel:1`` return results off by 1%, while ``refaccel:0`` stays right (``1:*`` for every op). ``OPMATRIX_REFACCEL_SLOWDOWN=aten::mm:1.3`` makes a
kernel 30% slower (the performance gate must catch it).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch

from . import runtime

__all__ = ["MODES", "RefaccelLaunchError", "ACTIVE", "BAD", "SLOW", "check_bad_device", "check_slowdown", "miscompute", "check_spec", "inject_fault", "clear_faults", "load_from_env", "slowed", "trigger"]

MODES = ("crash", "abort", "hang", "oom", "fail", "poison-stream", "poison", "poison-device")
#: op name -> mode; read by every kernel (an empty dict costs one truth test per call)
ACTIVE: dict[str, str] = {}
#: device index -> op names (or ``*``) whose native results that device gets wrong
BAD: dict[int, set[str]] = {}
BAD_ENV = "OPMATRIX_REFACCEL_BAD_DEVICE"
#: op name -> slowdown factor (``OPMATRIX_REFACCEL_SLOWDOWN=aten::mm:1.3``): tests the perf gate
SLOW: dict[str, float] = {}


class RefaccelLaunchError(RuntimeError):
    """A kernel failed on the device; the device, its streams and its context stay usable."""

    status = "REFACCEL_ERROR_LAUNCH_FAILED (719)"


def _normalise(op: str) -> str:
    op = op.strip()
    return op if "::" in op else f"aten::{op}"


def inject_fault(mode: str, op: str) -> None:
    """Make every later call of ``op`` on the device fail in ``mode``."""
    if mode not in MODES:
        raise ValueError(f"unknown refaccel fault mode {mode!r} (known: {', '.join(MODES)})")
    ACTIVE[_normalise(op)] = mode


def clear_faults() -> None:
    """Remove injected faults (a poisoned context stays poisoned)."""
    ACTIVE.clear()


def load_from_env() -> None:
    """Inject the faults named by ``OPMATRIX_REFACCEL_FAULT`` (``mode:op[,mode:op...]``)."""
    spec = os.environ.get("OPMATRIX_REFACCEL_FAULT", "").strip()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        mode, sep, op = item.partition(":")
        if not sep or not op:
            raise ValueError(f"OPMATRIX_REFACCEL_FAULT: expected mode:op (e.g. crash:aten::mul.Tensor), got {item!r}")
        inject_fault(mode, op)
    _load_slowdown()
    _load_bad_device()


def _parse_bad(spec: str) -> tuple[dict[int, set[str]], list[str]]:
    found: dict[int, set[str]] = {}
    problems = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        index, sep, op = item.partition(":")
        if not sep or not index.strip().isdigit() or not op.strip():
            problems.append(f"{BAD_ENV}: expected index:op (e.g. 1:aten::mul or 1:*), got {item!r}")
            continue
        name = op.strip()
        if name != "*" and not _op_exists(name):
            problems.append(f"{BAD_ENV}: {name!r} in {item!r} matches no operator overload; name one like "
                            "aten::mul.Tensor, an operator like aten::mul, or * for every op")
            continue
        found.setdefault(int(index), set()).add(name if name == "*" else _normalise(name))
    return found, problems


def check_bad_device(spec: str) -> list[str]:
    """Problems with an ``OPMATRIX_REFACCEL_BAD_DEVICE`` value; empty when it is valid."""
    return _parse_bad(spec)[1]


def _load_bad_device() -> None:
    found, problems = _parse_bad(os.environ.get(BAD_ENV, ""))
    if problems:
        raise ValueError(problems[0])
    BAD.clear()
    BAD.update(found)


def miscompute(name: str, base: str, result: Any) -> Any:
    """A bad device's native result: floating outputs off by 1% (a wrong kernel, device unharmed)."""
    if not isinstance(result, torch.Tensor) or result.device.type != "refaccel":
        return result
    ops = BAD.get(result.device.index or 0)
    if not ops or not ("*" in ops or name in ops or base in ops):
        return result
    if result.is_floating_point() or result.is_complex():
        from .memory import host_view

        view = host_view(result)
        view.mul_(1.01).add_(0.01)
    return result

def _parse_slowdown(spec: str) -> tuple[dict[str, float], list[str]]:
    found: dict[str, float] = {}
    problems = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        op, sep, factor = item.rpartition(":")
        try:
            value = float(factor)
        except ValueError:
            value = 0.0
        if not sep or not op or not 1.0 <= value < float("inf"):
            problems.append(f"OPMATRIX_REFACCEL_SLOWDOWN: expected op:factor >= 1 (e.g. aten::mm:1.3), got {item!r}")
        elif not _op_exists(op):
            problems.append(f"OPMATRIX_REFACCEL_SLOWDOWN: {op!r} in {item!r} matches no operator overload")
        else:
            found[_normalise(op)] = value
    return found, problems


def check_slowdown(spec: str) -> list[str]:
    """Problems with an ``OPMATRIX_REFACCEL_SLOWDOWN`` value; empty when it is valid."""
    return _parse_slowdown(spec)[1]


def _load_slowdown() -> None:
    found, problems = _parse_slowdown(os.environ.get("OPMATRIX_REFACCEL_SLOWDOWN", "").strip())
    if problems:
        raise ValueError(problems[0])
    SLOW.update(found)


def slowed(name: str, base: str, run: Any) -> Any:
    """Run ``run()``; when ``name`` is slowed, spin until the call took ``factor`` times as long."""
    factor = SLOW.get(name) or SLOW.get(base)
    if not factor:
        return run()
    # process CPU time: the work a host-executed kernel does (the clock its perf records use)
    t0 = time.process_time()
    out = run()
    end = t0 + (time.process_time() - t0) * factor
    while time.process_time() < end:
        pass
    return out


def _op_exists(op: str) -> bool:
    namespace, _, rest = _normalise(op).partition("::")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), name, None) if name else None
    if packet is None or not hasattr(packet, "overloads"):
        return False
    return not overload or overload in packet.overloads() or (overload == "default" and "default" in packet.overloads())


def check_spec(spec: str) -> list[str]:
    """Problems with an ``OPMATRIX_REFACCEL_FAULT`` value (unknown mode, an op that matches no
    overload), without injecting anything; empty when it is valid."""
    problems = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        mode, sep, op = item.partition(":")
        if not sep or not op:
            problems.append(f"OPMATRIX_REFACCEL_FAULT: expected mode:op (e.g. crash:aten::mul.Tensor), got {item!r}")
        elif mode not in MODES:
            problems.append(f"OPMATRIX_REFACCEL_FAULT: unknown fault mode {mode!r} in {item!r} "
                            f"(choose from {', '.join(MODES)})")
        elif not _op_exists(op):
            problems.append(f"OPMATRIX_REFACCEL_FAULT: {op!r} in {item!r} matches no operator overload; name one "
                            "like aten::mul.Tensor or an operator like aten::mul")
    return problems


def trigger(name: str, base: str) -> None:
    """Fire the fault injected for this call, if any (called by kernels when ``ACTIVE``)."""
    mode = ACTIVE.get(name) or ACTIVE.get(base)
    if mode is None:
        return
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)  # the signal is delivered asynchronously; never return normally
    elif mode == "abort":
        os.abort()
    elif mode == "hang":
        while True:
            time.sleep(3600)
    elif mode == "oom":
        raise torch.OutOfMemoryError(
            f"refaccel: out of memory on refaccel:0 while running {name} (injected fault: the kernel's "
            "workspace could not be allocated)"
        )
    elif mode in ("fail", "poison-stream", "poison-device"):
        _fail_scoped(mode, name)
    elif mode == "poison":
        runtime.poison(f"uncorrectable device fault in {name} (injected)")
        raise runtime.RefaccelPoisonedError(
            f"refaccel: uncorrectable device fault while running {name}; the device context is poisoned and "
            "every later call fails until the process restarts"
        )


def _fail_scoped(mode: str, name: str) -> None:
    """The call fails; ``poison-stream`` / ``poison-device`` first leave its stream / device unusable."""
    from .basics import current_device
    from .streams import current_stream

    index = current_device()
    cause = RuntimeError(f"firmware record: uncorrectable error in {name} on refaccel:{index} (injected)")
    if mode == "fail":
        raise RefaccelLaunchError(f"refaccel: kernel launch failed while running {name} on refaccel:{index} "
                                  "(injected fault); the device stays usable") from cause
    if mode == "poison-stream":
        stream_id = current_stream(index).stream_id
        runtime.poison_stream(index, stream_id, f"fault in {name} (injected)")
        raise runtime.RefaccelStreamError(f"refaccel: fault while running {name} on stream {stream_id} of "
                                          f"refaccel:{index}; that stream is unusable, a new stream works") from cause
    runtime.poison_device(index, f"uncorrectable device fault in {name} (injected)")
    raise runtime.RefaccelDeviceError(f"refaccel: uncorrectable device fault while running {name}; refaccel:{index} "
                                      "is unavailable to every process until it is reset") from cause
