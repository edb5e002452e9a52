"""The refaccel runtime: device identity, lazy initialisation, driver modes, fork rules, poison.

Discovery and initialisation are separate contracts (docs/levels.md#runtime-bring-up-order). ``device_count()`` and
``describe_devices()`` read configuration only and never initialise, so a parent may fork
safely after asking. The first device call initialises the runtime in this process
(``ensure_ready``); a child forked after that refuses every device call and recommends spawn::

    >>> from opmatrix.backend.refaccel import runtime
    >>> runtime.device_count()        # no initialisation
    2
    >>> runtime.ensure_ready()        # what every kernel does first (cheap once initialised)

Initialisation fails with a distinct message per cause, chosen by ``OPMATRIX_REFACCEL_DRIVER``:
``incompatible`` (driver too old), ``busy`` (owned by another tenant), ``missing`` (no driver)
and ``reset`` (device in reset).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass

from . import devicestate

__all__ = [
    "DeviceSpec",
    "RefaccelInitError",
    "RefaccelForkError",
    "RefaccelPoisonedError",
    "RefaccelStreamError",
    "RefaccelDeviceError",
    "device_count",
    "describe_devices",
    "ensure_ready",
    "generation",
    "is_initialized",
    "check_device",
    "poison",
    "poison_device",
    "poison_stream",
    "reset_device",
    "versions",
]

DEVICE_COUNT = 2
#: ``OPMATRIX_REFACCEL_DEVICES=N`` exposes N devices instead (1..16): a node of one generation
DEVICES_ENV = "OPMATRIX_REFACCEL_DEVICES"
#: seconds every successful initialisation waits, as a real driver that is slow to bring a device up
#: (firmware load, context creation) does: a slow but healthy backend (docs/runner.md#calibrated-deadlines)
INIT_DELAY_ENV = "OPMATRIX_REFACCEL_INIT_DELAY"
MAX_DEVICES = 16
RUNTIME_VERSION = "2.4.0"
MIN_DRIVER = "2.0"
_UUID_NAMESPACE = uuid.UUID("5d2f6a3e-8a31-4f0e-9d43-0b7f6c1e2a10")


@dataclass(frozen=True)
class DeviceSpec:
    """One simulated device: what the runtime reports about it."""

    index: int
    name: str
    generation: str
    memory_bytes: int
    uuid: str
    isa: str
    firmware: str


#: per generation: marketing name, memory capacity per device, ISA and firmware strings
_GENERATIONS = {
    "g1": ("RefAccel R1", 2 << 30, "rax1.0", "r1-fw 3.4.2"),
    "g2": ("RefAccel R2", 4 << 30, "rax2.1", "r2-fw 5.1.0"),
}

#: driver modes: (driver version reported, init error message or None)
_DRIVER_MODES = {
    "ok": "2.3.1",
    "incompatible": "1.2.0",
    "busy": "2.3.1",
    "missing": None,
    "reset": "2.3.1",
}


class RefaccelInitError(RuntimeError):
    """The runtime could not initialise; the message names the cause (driver, tenant, reset)."""


class RefaccelForkError(RuntimeError):
    """A device call in a child forked after the parent initialised refaccel."""


class RefaccelPoisonedError(RuntimeError):
    """The device context is unusable after a fault; only a new process recovers.

    ``status`` is the runtime's own status code (what a vendor's driver reports), kept so a fault
    record can show the cause below the message."""

    status = "REFACCEL_ERROR_CONTEXT_LOST (999)"


class RefaccelStreamError(RuntimeError):
    """Work on a stream that an earlier fault left unusable; other streams still work."""

    status = "REFACCEL_ERROR_STREAM_POISONED (712)"


class RefaccelDeviceError(RuntimeError):
    """A device left unusable by a fault (for every process) until it is reset."""

    status = "REFACCEL_ERROR_DEVICE_UNAVAILABLE (46)"


class RefaccelDriverError(RuntimeError):
    """What the driver reported below a runtime error (kept as its ``__cause__``), with its status code."""

    def __init__(self, message: str, status: str):
        super().__init__(f"{message}: {status}")
        self.status = status


class _State:
    """Process-wide runtime state; ``ready`` is the one flag the hot path reads."""

    def __init__(self) -> None:
        self.ready = False
        self.initialized_pid: int | None = None
        self.forked_from: int | None = None
        self.poisoned: str | None = None
        #: (device index, stream id) -> why: streams an earlier fault left unusable
        self.bad_streams: dict[tuple[int, int], str] = {}
        self.lock = threading.Lock()


_STATE = _State()
_GENERATION = ["g2"]


def set_generation(gen: str) -> None:
    """Select the simulated generation (done once by ``install``)."""
    if gen not in _GENERATIONS:
        raise ValueError(f"unknown refaccel generation {gen!r} (known: {', '.join(sorted(_GENERATIONS))})")
    _GENERATION[0] = gen


def generation() -> str:
    """The installed generation, ``g1`` or ``g2``."""
    return _GENERATION[0]


def driver_mode() -> str:
    """The simulated driver condition (``OPMATRIX_REFACCEL_DRIVER``; default ``ok``)."""
    mode = os.environ.get("OPMATRIX_REFACCEL_DRIVER", "ok").strip().lower() or "ok"
    return mode if mode in _DRIVER_MODES else "ok"


def driver_problem() -> str | None:
    """Why ``OPMATRIX_REFACCEL_DRIVER`` names no driver condition (checked before any worker starts)."""
    text = os.environ.get("OPMATRIX_REFACCEL_DRIVER", "").strip().lower()
    if not text or text in _DRIVER_MODES:
        return None
    return (f"OPMATRIX_REFACCEL_DRIVER: unknown driver condition {text!r} (choose from {', '.join(_DRIVER_MODES)}, "
            "or unset it for ok)")


def configured_devices() -> tuple[int, str | None]:
    """(device count, problem): ``$OPMATRIX_REFACCEL_DEVICES`` or 2; a bad value is named, 2 is used."""
    text = os.environ.get(DEVICES_ENV, "").strip()
    if not text:
        return DEVICE_COUNT, None
    if not text.isdigit() or not 1 <= int(text) <= MAX_DEVICES:
        return DEVICE_COUNT, f"{DEVICES_ENV}: expected a device count from 1 to {MAX_DEVICES}, got {text!r}"
    return int(text), None


def device_count() -> int:
    """Number of devices, from configuration only: never initialises (fork-safe discovery)."""
    return 0 if driver_mode() == "missing" else configured_devices()[0]


def describe_devices() -> list[DeviceSpec]:
    """Identity of every device (name, generation, capacity, stable UUID); never initialises."""
    name, memory, isa, firmware = _GENERATIONS[generation()]
    return [
        DeviceSpec(
            index=i,
            name=f"{name} #{i}",
            generation=generation(),
            memory_bytes=memory,
            uuid="RA-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{generation()}/{i}")),
            isa=isa,
            firmware=firmware,
        )
        for i in range(device_count())
    ]


def versions() -> dict[str, str | None]:
    """Driver, firmware, ISA and runtime version strings (driver None when no driver is found)."""
    _, _, isa, firmware = _GENERATIONS[generation()]
    return {
        "driver": _DRIVER_MODES[driver_mode()],
        "firmware": firmware,
        "isa": isa,
        "stepping": "A1" if generation() == "g2" else "B0",
        "backend_version": RUNTIME_VERSION,
    }


def _init_failure() -> str | None:
    mode = driver_mode()
    if mode == "incompatible":
        return (
            f"refaccel driver {_DRIVER_MODES[mode]} is older than the minimum {MIN_DRIVER} required by this "
            f"runtime ({RUNTIME_VERSION}); upgrade the refaccel driver package"
        )
    if mode == "busy":
        spec = describe_devices()[0]
        return (
            f"refaccel:0 ({spec.uuid}) is busy: the device partition is owned by another tenant "
            "(exclusive-process mode); wait for it to be released or select another partition"
        )
    if mode == "missing":
        return "refaccel kernel driver not loaded: /dev/refaccel0 not found; install or load the refaccel driver"
    if mode == "reset":
        return "refaccel:0 is in reset (firmware recovery in progress); retry after the reset completes"
    return None


def init_delay() -> float:
    """Seconds a successful initialisation takes (``OPMATRIX_REFACCEL_INIT_DELAY``; 0 by default)."""
    text = os.environ.get(INIT_DELAY_ENV, "").strip()
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        raise RefaccelInitError(f"{INIT_DELAY_ENV}={text!r} is not a number of seconds") from None


def is_initialized() -> bool:
    """Whether this process initialised the runtime (a forked child reports False)."""
    return _STATE.initialized_pid is not None and _STATE.forked_from is None


def initialize() -> None:
    """Initialise the runtime in this process, or raise ``RefaccelInitError`` naming the cause."""
    with _STATE.lock:
        if _STATE.forked_from is not None:
            raise RefaccelForkError(_fork_message())
        if _STATE.initialized_pid is not None:
            return
        problem = _init_failure()
        if problem:
            raise RefaccelInitError(problem)
        delay = init_delay()
        if delay > 0:
            time.sleep(delay)
        _STATE.initialized_pid = os.getpid()
        _STATE.ready = _STATE.poisoned is None and not _STATE.bad_streams and not devicestate.any_poisoned()


def _fork_message() -> str:
    return (
        f"refaccel: this process was forked after refaccel was initialised in its parent (pid "
        f"{_STATE.forked_from}); device state (contexts, allocator, streams) cannot be used across fork. "
        "Use the 'spawn' or 'forkserver' multiprocessing start method and initialise refaccel in the child."
    )


def ensure_ready() -> None:
    """Raise unless device calls may run here; initialises lazily on the first call."""
    if _STATE.ready:
        return
    if _STATE.forked_from is not None:
        raise RefaccelForkError(_fork_message())
    if _STATE.poisoned is not None:
        raise RefaccelPoisonedError(
            f"refaccel: device context is poisoned ({_STATE.poisoned}); every later call fails until the "
            "process restarts"
        )
    initialize()


def check_tensors(tensors: list) -> None:  # type: ignore[type-arg]
    """:func:`check_device` for every device the call's tensors live on (slow path only)."""
    ensure_ready()
    for index in sorted({t.device.index or 0 for t in tensors}):
        check_device(index)


def check_device(index: int, streams: bool = True) -> None:
    """Raise when device ``index`` (or its current stream) is unusable after a fault (slow path:
    kernels call it only while ``ready`` is False)."""
    ensure_ready()
    why = devicestate.poisoned(index)
    if why is not None:
        raise RefaccelDeviceError(
            f"refaccel:{index} is unavailable ({why}); every process fails on it until the device is reset"
        )
    if streams and _STATE.bad_streams:
        from .streams import current_stream

        stream_id = current_stream(index).stream_id
        why = _STATE.bad_streams.get((index, stream_id))
        if why is not None:
            raise RefaccelStreamError(
                f"refaccel: stream {stream_id} on refaccel:{index} is unusable ({why}); create a new stream"
            )


def poison_stream(index: int, stream_id: int, reason: str) -> None:
    """Mark one stream unusable: later work on it raises ``RefaccelStreamError``."""
    _STATE.bad_streams[(index, stream_id)] = reason
    _STATE.ready = False


def poison_device(index: int, reason: str) -> None:
    """Mark a device unusable for this process and every new one until :func:`reset_device`."""
    devicestate.mark(index, reason)
    _STATE.ready = False


def reset_device(index: int) -> str:
    """Reset a device a fault left unusable (what an operator's reset does); says what it did."""
    was = devicestate.clear(index)
    _STATE.ready = _STATE.initialized_pid is not None and _STATE.poisoned is None and not _STATE.bad_streams
    return f"refaccel:{index} reset (it was unavailable: {was})" if was else f"refaccel:{index} needed no reset"


def poison(reason: str) -> None:
    """Mark the context unusable: every later device call raises ``RefaccelPoisonedError``."""
    _STATE.poisoned = reason
    _STATE.ready = False


def poisoned() -> str | None:
    """Why the context is poisoned, or None."""
    return _STATE.poisoned


def _after_fork_in_child() -> None:
    if _STATE.initialized_pid is not None:
        _STATE.forked_from = _STATE.initialized_pid
        _STATE.ready = False
    _STATE.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
