"""The backend adapter: everything the probes need to know about one device backend.

An adapter says which device and dispatch key to probe, how to initialise the backend inside a
worker, how to synchronise, how to tell a clean rejection from a fault, which fallback evidence
it can give, whether the device is still healthy after a fault, and which ``torch.compile``
backend runs graphs on it::

    adapter = get_adapter("refaccel", generation="g2")
    adapter.setup()                       # inside each spawned worker, never in the parent
    x = torch.ones(3, device=adapter.device())
    with adapter.observe_fallback() as seen:
        torch.sort(x)
    seen.state, seen.ops                  # FallbackState.observed, ['aten::sort.stable']

Subclasses override only what differs; the defaults are the generic signals that work on any
backend (registrations, the profiler's call tree, host copies inside a call).
"""

from __future__ import annotations

import contextlib
import functools
import platform
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from opmatrix.schema import BackendId, DeviceInfo, FallbackState

from .initmodes import InitFailureMode

__all__ = ["REFUSALS", "Adapter", "FallbackSeen", "Refusal", "Rejection", "bringup_check", "dtype_named",
           "refusal_of"]


@dataclass
class FallbackSeen:
    """What an adapter's fallback signal saw during one call (filled in on exit)."""

    state: FallbackState = FallbackState.unknown
    ops: list[str] = field(default_factory=list)
    source: str | None = None


@dataclass(frozen=True)
class Rejection:
    """How an exception from a device call is classified."""

    outcome: str  # "rejected", "oom", "error"
    reason: str = ""


@dataclass(frozen=True)
class Refusal:
    """A message pattern that names what a backend does not support: a clean rejection."""

    pattern: str  # a regular expression, searched in the lower-cased message
    names: str  # what the message names (for the docs and tests)


#: the words of a kernel stating what it needs (then a layout or a rank: :data:`REFUSALS`)
_NEEDS = (r"\b(?:requires?|expects?|expected|must be|must have|needs?|only accepts?|accepts? only|only takes?"
          r"|takes? only|supports? only)\s+")

#: messages that name what is unsupported (a dtype, layout, rank, argument or a missing kernel):
#: any exception type whose message matches one is a clean rejection, when nothing ran on the
#: device first and the device stays healthy (``TORCH_CHECK`` raises RuntimeError with these)
REFUSALS: tuple[Refusal, ...] = (
    Refusal(r"could not run '", "an op with no kernel for the backend's dispatch key"),
    Refusal(r"not implemented for '", "a dtype an op has no kernel for (\"not implemented for 'Half'\")"),
    Refusal(r"\b(?:is|are|has|have)?\s*(?:not|n't)\s+(?:yet\s+|currently\s+|been\s+)*implemented\b",
            "an op or argument the backend does not implement (\"not yet implemented\")"),
    Refusal(r"\bno implementation\b", "an op or argument the backend does not implement"),
    Refusal(r"(?:\bnot|n't)\s+(?:yet\s+|currently\s+)?supported\b", "a dtype, layout, rank or argument"),
    Refusal(r"\b(?:does|do)\s*(?:not|n't)\s+(?:yet\s+|currently\s+)?support\b", "a dtype, layout, rank or argument"),
    Refusal(r"\b(?:cannot|can't|can not)\s+handle\b", "a dtype, layout, rank or argument"),
    Refusal(r"\bunsupported\b", "a dtype, layout, rank or argument"),
    Refusal(r"\bonly supports?\b", "the dtypes, layouts or ranks a kernel takes (\"only supports float\")"),
    Refusal(r"\bcannot hold\b", "a dtype device memory cannot store"),
    Refusal(r"\bno kernel\b", "an op with no kernel"),
    Refusal(r"\bnot available for\b", "an op or dtype the backend lacks"),
    # a kernel that states what it needs, in a vendor's words, of the memory layout or the rank
    # ("TA_E_LAYOUT: mul kernel requires contiguous input", "expects a 2-D input, got 3-D")
    Refusal(r"(?:" + _NEEDS + r"|\b(?:to be|should be)\s+|\bonly\s+)(?:an?\s+|only\s+)?"
            r"(?:contiguous|channels[_ ]last|nhwc|nchw|dense|row[- ]major)\b",
            "the memory layout a kernel needs (\"requires contiguous input\")"),
    Refusal(_NEEDS + r"(?:an?\s+|only\s+|up to\s+|at most\s+)?(?:\d+\s*-?\s*d\b|\d+-dimensional|\d+\s+dim(?:ension)?s\b"
            r"|rank\s*(?:[<>]=?|==?)?\s*\d)", "the ranks a kernel takes (\"expects a 2-D input\")"),
)
#: messages that name a broken backend, never a refusal, whatever else they say
NOT_REFUSALS: tuple[str, ...] = (
    r"internal assert",
    # Python's own operator errors name Python objects, not what a backend supports
    r"not supported between instances of", r"unsupported operand type",
)
#: messages of a runtime that failed doing the work: naming the dtype of the kernel it was
#: running ("stream synchronize failed while launching Float kernel") refuses nothing
RUNTIME_FAILURES: tuple[str, ...] = (
    r"\bsynchroni[sz]", r"\btimed? ?out\b", r"\bout of memory\b", r"\billegal (?:memory|address|instruction)",
    r"\blaunch(?:ing)?\b.{0,60}\bfail", r"\bfail\w*\b.{0,60}\blaunch", r"\bsegmentation\b", r"\bcorrupt",
    r"\bdevice (?:lost|removed|reset)\b",
)
#: exception types of a bug in Python code (the backend's or a binding's): a dtype they name is
#: a value they mishandled, not one a kernel refuses
PYTHON_BUGS: tuple[type[BaseException], ...] = (AssertionError, TypeError, LookupError, AttributeError, NameError)


def refusal_of(exc: BaseException) -> str | None:
    """What ``exc`` says is unsupported (the matching :data:`REFUSALS` entry), or None when it
    names nothing actionable (``internal error 0x1f``). ``NotImplementedError`` is a refusal
    by type."""
    return _refusal_in(str(exc).lower(), isinstance(exc, NotImplementedError))


@functools.lru_cache(maxsize=4096)
def _refusal_in(text: str, not_implemented: bool) -> str | None:
    """:func:`refusal_of` on a message's text: a pure function of it, so remembered (a probe meets
    the same refusal for every sample and layout of a task; the patterns were 3% of a probe)."""
    if any(re.search(p, text) for p in NOT_REFUSALS):
        return None
    for refusal in REFUSALS:
        if re.search(refusal.pattern, text):
            return refusal.names
    return "not implemented" if not_implemented else None


#: the names a message may use for a dtype besides ``float64`` / ``torch.float64``: c10's
#: ScalarType names (what ``TORCH_CHECK(..., t.scalar_type())`` prints) and common short forms
_DTYPE_WORDS: dict[str, tuple[str, ...]] = {
    "float32": ("Float", "fp32", "f32"), "float64": ("Double", "fp64", "f64", "double"),
    "float16": ("Half", "fp16", "f16", "half"), "bfloat16": ("BFloat16", "bf16"),
    "complex32": ("ComplexHalf", "chalf"), "complex64": ("ComplexFloat", "cfloat"),
    "complex128": ("ComplexDouble", "cdouble"), "int8": ("Char", "i8"), "int16": ("Short", "i16"),
    "int32": ("Int", "i32"), "int64": ("Long", "i64"), "uint8": ("Byte", "u8"), "bool": ("Bool",),
    "uint16": ("UInt16", "u16"), "uint32": ("UInt32", "u32"), "uint64": ("UInt64", "u64"),
}


def dtype_named(exc: BaseException, dtype: str) -> str | None:
    """The word by which ``exc``'s message names ``dtype`` (``Double``, ``torch.float64``,
    ``fp64``), or None. A vendor's refusal is in its own words ("QX_E_DTYPE: abs kernel only
    accepts Float, got Double", "no device memory layout for element type ComplexDouble"): no
    phrase table holds them all, but a refusal of a dtype names it. ScalarType names are matched
    with their case (``Int``, not "int"; also ``kInt``, ``DT_INT32``-style ``DT_INT``), the others
    in any case (``DT_INT32``), all as whole words, never as a shape (``f32[5]``) nor as an
    attribute's value (``dtype=Float``)."""
    if not dtype:
        return None
    return _dtype_in(str(exc), dtype, isinstance(exc, PYTHON_BUGS))


@functools.lru_cache(maxsize=8192)
def _dtype_in(text: str, dtype: str, python_bug: bool) -> str | None:
    """:func:`dtype_named` on a message's text (a pure function of it, so remembered)."""
    if python_bug or any(re.search(p, text.lower()) for p in (*NOT_REFUSALS, *RUNTIME_FAILURES)):
        return None
    # a whole word; C++ enumerators and runtime type tags prefix it: ``kDouble``, ``DT_DOUBLE``.
    # A word followed by ``[`` is a shape in XLA/HLO notation (``f32[5,5,0]``, ``xla_shape=f32[5]``):
    # it describes a tensor in a lowering or broadcasting failure, it does not refuse its dtype;
    # a word after ``=`` is an attribute in a dump of a failed node (``dim=0, dtype=Float``)
    bound = r"(?<![A-Za-z0-9_=])(?:{}){}(?![A-Za-z0-9_\[])"
    if re.search(bound.format("(?i:dt_)?", re.escape(dtype)), text, re.IGNORECASE):
        return dtype
    for word in _DTYPE_WORDS.get(dtype, ()):
        if word[0].isupper():  # a ScalarType name: with its case, or upper case after DT_
            found = re.search(bound.format("k?", re.escape(word)), text) or \
                re.search(bound.format("DT_", re.escape(word.upper())), text)
        else:
            found = re.search(bound.format("(?i:dt_)?", re.escape(word)), text, re.IGNORECASE)
        if found:
            return word
    return None


#: the bytes the bring-up check writes and reads back: every value of a byte, twice
_PATTERN = bytes(range(256)) * 2


def bringup_check(device: Any) -> str | None:
    """Allocate on ``device``, copy bytes host->device->host and compare them on the host.

    The opset every backend must have before any other (empty, copy to and from the device):
    a clean rejection or a fault of any other op never makes this fail. The bytes go as uint8;
    a device whose memory refuses uint8 gets the same bytes as float32 (else its health could
    never be measured, and a device that breaks later never be called poisoned).
    """
    problem = _round_trip(device, "uint8")
    if problem is not None and _round_trip(device, "float32") is None:
        return None
    return problem


def _round_trip(device: Any, dtype_name: str) -> str | None:
    import torch

    dtype = getattr(torch, dtype_name)
    try:
        host = torch.frombuffer(bytearray(_PATTERN), dtype=dtype)
        dev = torch.empty(host.numel(), dtype=dtype, device=device)
        dev.copy_(host)
        back = torch.empty(host.numel(), dtype=dtype)
        back.copy_(dev)
        got = bytes(back.numpy().tobytes())
    except Exception as exc:  # noqa: BLE001 - any failure here means the device is unusable
        return (f"bring-up check (allocate {dtype_name}, copy to and from {device}) failed: "
                f"{type(exc).__name__}: {str(exc)[:300]}")
    if got != _PATTERN:
        bad = next(i for i, (a, b) in enumerate(zip(got, _PATTERN, strict=True)) if a != b) if len(got) == len(_PATTERN) else -1
        return f"bring-up check: bytes copied to {device} and back differ (first at offset {bad})"
    return None


class Adapter:
    """Base adapter: generic behaviour for a backend reachable as ``torch.device(device_type)``."""

    #: opmatrix's name for the backend (``--backend NAME``)
    name: str = "generic"
    device_type: str = "cpu"
    dispatch_key: str = "CPU"
    #: whether the adapter has verified behaviour on real hardware (shown in docs / doctor)
    verified: bool = True
    #: the device is the host itself: nothing can fall back to it, so no call tree is recorded
    is_host: bool = False

    def __init__(self, generation: str | None = None, device_index: int = 0):
        self.generation = generation
        self.device_index = device_index

    # -- lifecycle ---------------------------------------------------------------------------

    def register(self) -> None:
        """Make the device type known to torch *without* initialising the runtime.

        Discovery and initialisation are separate contracts (docs/levels.md#runtime-bring-up-order): after ``register()``,
        ``torch.<device_type>.device_count()`` must work and a ``fork`` must still be safe. The
        built-in device types need nothing; backends that register on import override this.
        """

    def setup(self) -> None:
        """Import and initialise the backend in this process (called in each worker)."""

    def available(self) -> tuple[bool, str]:
        """Whether the backend can be used here, and why not."""
        return True, ""

    def device(self, index: int | None = None) -> Any:
        """The ``torch.device`` probes run on."""
        import torch

        idx = self.device_index if index is None else index
        if self.device_type in ("cpu", "meta"):
            return torch.device(self.device_type)
        return torch.device(self.device_type, idx)

    def select_device(self, index: int) -> None:
        """Make ``index`` the device this process probes (``--devices``)."""
        self.device_index = index

    def synchronize(self) -> None:
        """Wait for queued device work (errors may surface here)."""
        import torch

        mod = getattr(torch, self.device_type, None)
        sync = getattr(mod, "synchronize", None)
        if callable(sync):
            sync()

    def new_stream(self) -> Any:
        """A context manager in which this device's current stream is a new stream (to tell a
        poisoned stream from a poisoned context), or None when the backend offers no streams
        (``torch.<device_type>.Stream`` and ``.stream``)."""
        import torch

        mod = getattr(torch, self.device_type, None)
        make, use = getattr(mod, "Stream", None), getattr(mod, "stream", None)
        if self.is_host or not callable(make) or not callable(use):
            return None
        return use(make(self.device()))

    def init_failure_modes(self) -> tuple[InitFailureMode, ...]:
        """How to make initialisation fail on purpose (:mod:`.initmodes`); none by default."""
        return ()

    def reset_device(self, index: int) -> str | None:
        """The run's reset hook: reset a device a fault left unusable (what an operator's device
        reset does) and say what was done; None when the backend offers no reset."""
        return None

    # -- identity ----------------------------------------------------------------------------

    def identity(self) -> BackendId:
        """The backend identity recorded in the matrix."""
        return BackendId(
            name=self.name, device_type=self.device_type, dispatch_key=self.dispatch_key, generation=self.generation
        )

    def versions(self) -> dict[str, str | None]:
        """driver / firmware / isa / stepping / backend_version where known."""
        return {"driver": None, "firmware": None, "isa": None, "stepping": None, "backend_version": None}

    def devices(self) -> list[DeviceInfo]:
        """Devices as the runtime identifies them."""
        return [DeviceInfo(index=0, name=platform.processor() or platform.machine(), uuid=None)]

    def claimed_dtypes(self) -> list[str] | None:
        """Dtypes the runtime claims to support, or None when it does not say."""
        return None

    def generations(self) -> list[str] | None:
        """The device generations this adapter knows (``--generation`` is checked against them),
        or None when it takes any value."""
        return None

    def discovery(self) -> tuple[int | None, str | None]:
        """(device count, why the backend cannot be used here) by fork-safe discovery in this
        process, before any worker starts and without initialising a device; (None, None) when
        the adapter cannot tell without a worker. ``--devices`` is checked against the count, and
        a reason refuses the run up front (a CUDA backend on a CPU-only torch)."""
        return None, None

    def preflight(self) -> list[str]:
        """Problems with this run's configuration found before any worker starts (environment
        settings the adapter reads, e.g. fault-injection specs); each names the fix."""
        return []

    def evidence_key(self) -> str:
        """What must be unchanged for cached cells to be reused (backend/driver identity)."""
        v = self.versions()
        return "|".join(f"{k}={v[k]}" for k in sorted(v)) + f"|gen={self.generation}"

    # -- observation -------------------------------------------------------------------------

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        """Record host fallback during the block; the base adapter cannot tell (``unknown``)."""
        yield FallbackSeen()

    def classify_exception(self, exc: BaseException) -> Rejection:
        """Narrowly decide whether ``exc`` is a clean rejection, an OOM, or an unexpected error."""
        import torch

        if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
                isinstance(exc, RuntimeError) and re.search(r"\bout of memory\b", str(exc), re.IGNORECASE)):
            # torch's own OOM, Python's (a numpy-backed kernel), a runtime's in its own words
            return Rejection("oom", "device memory exhausted")
        names = refusal_of(exc)
        if names is not None:
            return Rejection("rejected", names)
        return Rejection("error", type(exc).__name__)

    def health_check(self) -> str | None:
        """None when the device still works; otherwise what failed.

        Uses only the bring-up opset every backend has before anything else (see
        :func:`bringup_check`): never an arithmetic op, which may be the very op that faulted.
        Adapters may add their own check (``super().health_check()`` first).
        """
        return bringup_check(self.device())

    def health_baseline(self) -> str | None:
        """The health check's result before any probe ran (measured once, then remembered).

        A device is poisoned only with positive evidence: this baseline passed and
        :meth:`health_check` fails after a fault. Workers measure it right after ``setup()``.
        """
        if not hasattr(self, "_baseline"):
            self._baseline = self.health_check()
        return self._baseline

    def refresh_baseline(self) -> None:
        """Measure the baseline again when it failed: another process's fault may have left the
        device unusable while this one started, and a reset since (the run's reset hook) makes it
        usable again; a passing baseline is kept (it is the evidence "poisoned" rests on)."""
        if getattr(self, "_baseline", None) is not None:
            self._baseline = self.health_check()

    def poisoned_after_fault(self) -> str | None:
        """What shows the device unusable after a fault, or None (no positive evidence).

        None when the health check passes now, and also when it never passed (its failure then
        says nothing about the fault that was just seen).
        """
        if self.health_baseline() is not None:
            return None
        problem = self.health_check()
        return None if problem is None else f"{problem} (the same check passed before the fault)"

    def compile_backend(self) -> Any:
        """The ``torch.compile`` backend that runs graphs on this device (None: cannot compile)."""
        return "inductor"
