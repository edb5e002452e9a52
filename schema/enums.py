"""Closed vocabularies shared by every opmatrix artifact.

Each enum is a ``str`` enum so that it reads and writes as plain YAML scalars::

    >>> ExecPath("composite") < ExecPath.fallback     # ordered best to worst
    True
"""

from __future__ import annotations

import enum

_RANKS: dict[type, dict[object, int]] = {}


class TextEnum(str, enum.Enum):
    """A string enum that prints as its value (``str(Layout.contiguous) == "contiguous"``)."""

    def __str__(self) -> str:
        return self.value


class _Ordered(TextEnum):
    """A string enum whose declaration order is its quality order (first = best)."""

    @property
    def rank(self) -> int:
        ranks = _RANKS.get(type(self))
        if ranks is None:  # built once per enum: comparisons sit on the hot path of queries
            ranks = _RANKS[type(self)] = {m: i for i, m in enumerate(type(self))}
        return ranks[self]

    def __lt__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.rank < other.rank  # type: ignore[attr-defined, no-any-return]

    def __le__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.rank <= other.rank  # type: ignore[attr-defined, no-any-return]

    def __gt__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.rank > other.rank  # type: ignore[attr-defined, no-any-return]

    def __ge__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.rank >= other.rank  # type: ignore[attr-defined, no-any-return]

    def __hash__(self) -> int:
        return hash(self.value)


class ExecPath(_Ordered):
    """How one call executed on the device, best to worst (docs/levels.md#execution-paths)."""

    native = "native"  # a kernel registered for the backend's dispatch key ran
    composite = "composite"  # a composite implementation ran as ops the backend executes
    decomposed = "decomposed"  # eager unavailable; the backend's compile path runs it
    fallback = "fallback"  # the call or one of its component ops ran on the host
    rejected = "rejected"  # the call failed cleanly with an actionable error
    #: a crashed or hung call whose kernel the dispatcher's registrations do not name (never
    #: ``rejected``: a fault is not a clean, actionable error)
    unknown = "unknown"


class Outcome(_Ordered):
    """What a probed cell produced, separate from its path; ``ok`` is best."""

    ok = "ok"  # ran (or was cleanly rejected) and matched the reference
    wrong = "wrong"  # ran, numerics outside tolerance: the worst silent failure
    error = "error"  # an unexpected exception that is not a clean rejection
    oom = "oom"  # device memory exhausted (not "unsupported")
    hung = "hung"  # the deadline passed
    crashed = "crashed"  # the process died (signal recorded)
    poisoned = "poisoned"  # the device/context was unusable afterwards

    @property
    def is_fault(self) -> bool:
        """A fault is an outcome where the probe itself broke (not a numerics verdict)."""
        return self._value_ in FaultOutcome._value2member_map_

    @property
    def fault(self) -> FaultOutcome | None:
        """This outcome as a :class:`FaultOutcome`, or None when it is not a fault."""
        return FaultOutcome._value2member_map_.get(self._value_)  # type: ignore[return-value]


class FaultOutcome(TextEnum):
    """The outcomes where the probe itself broke (a subset of ``Outcome``, same values)."""

    error = "error"  # an unexpected exception that is not a clean rejection
    oom = "oom"  # device memory exhausted
    hung = "hung"  # the deadline passed
    crashed = "crashed"  # the process died
    poisoned = "poisoned"  # the device was unusable afterwards


class FaultScope(_Ordered):
    """How far a fault reached, decided by what still worked afterwards (narrowest first).

    After a fault the probe tries, in order: the same stream, a new stream, another device in
    this process, a fresh process on the same device (and on another device). The first that
    works bounds the scope: the same stream works -> ``operation``; a new stream -> ``stream``;
    a fresh process on the same device -> ``context``; only another device -> ``device``;
    nothing on the node -> ``node``; ``unknown`` when the checks could not tell.
    """

    operation = "operation"
    stream = "stream"
    context = "context"
    device = "device"
    node = "node"
    unknown = "unknown"


#: faults after which the worker process is replaced; a run with any of them exits 1
PROCESS_FAULTS = frozenset({FaultOutcome.crashed, FaultOutcome.hung, FaultOutcome.poisoned})


class Layout(TextEnum):
    """Memory layout of a probe's tensor inputs, derived from a contiguous base sample.

    - ``contiguous``: row-major, dense, offset 0.
    - ``noncontiguous``: every other element of a doubled buffer (``SampleInput.noncontiguous``).
    - ``transposed``: the last two dims swapped (or dims reversed for rank > 2), then viewed back.
    - ``channels_last``: 4-D NHWC memory format (rank 4 only).
    - ``storage_offset``: a view starting part-way into its storage.
    - ``expanded``: a broadcast view with zero strides (inputs that are read only).
    """

    contiguous = "contiguous"
    noncontiguous = "noncontiguous"
    transposed = "transposed"
    channels_last = "channels_last"
    storage_offset = "storage_offset"
    expanded = "expanded"


class Mode(TextEnum):
    """How the op was invoked: eager dispatch, or through the backend's ``torch.compile``."""

    eager = "eager"
    compile = "compile"


class Shapes(TextEnum):
    """How a compiled cell was compiled: shapes specialised (``dynamic=False``) or symbolic
    (``dynamic=True``, run at two sizes)."""

    static = "static"
    dynamic = "dynamic"


class Accumulation(TextEnum):
    """The precision a low-precision reduction or matmul accumulates in, measured on a designed
    input (see :mod:`opmatrix.probes.ops.accumulation`)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    unknown = "unknown"


class CellSource(TextEnum):
    """Where a cell's inputs came from when not OpInfo's own samples."""

    rank_extension = "rank extension"  # OpInfo's sample extended to a declared rank (probe --ranks)


class FallbackState(TextEnum):
    """Three-state fallback evidence: seen, checked and not seen, or no way to tell."""

    observed = "observed"
    not_observed = "not_observed"
    unknown = "unknown"


class ReferenceKind(TextEnum):
    """What the device result was compared against."""

    cpu_same_dtype = "cpu_same_dtype"  # CPU, same dtype
    cpu_upcast = "cpu_upcast"  # CPU in higher precision (low-precision floats)
    none = "none"  # nothing to compare (rejected, faulted, or no output)


class CheckResult(TextEnum):
    """Result of one runtime check (levels 0 and 1)."""

    passed = "pass"
    failed = "fail"
    not_applicable = "not_applicable"
    unknown = "unknown"


class ApiService(TextEnum):
    """Whether a device-generic PyTorch API reaches the backend."""

    generic = "generic"  # served through the generic API (torch.accelerator, torch.Stream ...)
    own_module = "own_module"  # only through the backend's own module (torch.<device>.x)
    none = "none"  # not served at all
    unknown = "unknown"


class FallbackPolicy(TextEnum):
    """Whether a contract accepts host fallback."""

    allowed = "allowed"
    forbidden = "forbidden"
    #: eager fallback is accepted, but a performance record that observed one is not (level 6)
    forbidden_in_perf = "forbidden_in_perf"


class FlakyPolicy(TextEnum):
    """Whether flaky cells block a release."""

    block = "block"
    allow = "allow"


#: Dtype names as ``str(torch.dtype)`` minus the ``torch.`` prefix.
DTYPES: tuple[str, ...] = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex128",
    "complex64",
    "complex32",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
)


class DType(TextEnum):
    """A tensor element type, named as torch names it (``torch.bfloat16`` -> ``bfloat16``)."""

    float64 = "float64"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    complex128 = "complex128"
    complex64 = "complex64"
    complex32 = "complex32"
    int64 = "int64"
    int32 = "int32"
    int16 = "int16"
    int8 = "int8"
    uint64 = "uint64"
    uint32 = "uint32"
    uint16 = "uint16"
    uint8 = "uint8"
    bool = "bool"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e5m2 = "float8_e5m2"
    float8_e4m3fnuz = "float8_e4m3fnuz"
    float8_e5m2fnuz = "float8_e5m2fnuz"


#: Default dtypes probed when the user gives none.
DEFAULT_DTYPES: tuple[str, ...] = (
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "complex64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
