"""The support matrix: what a backend really supports, per operator overload, with evidence.

A matrix maps ATen overload names to entries. An entry is a set of probed cells with identical
results, compressed into dtypes x a rank range x layouts, as in the seed's example::

    operators:
      aten.softmax.int:
      - dtypes: [bfloat16, float32]
        ranks: {min: 2, max: 5}
        layouts: [contiguous]
        mode: eager
        conditions: {dim: last}
        path: native
        outcome: ok
        ...

Expanding every entry gives back exactly the cells that were probed; a cell in no entry was not
probed (a query for it answers ``unknown``). Which devices produced a cell: :mod:`.devices`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .base import Message, Model, RankRange, printable
from .devices import DEVICE_DEPENDENT, DeviceName, DeviceOutcome
from .distributed import Distributed
from .enums import (
    Accumulation,
    CellSource,
    DType,
    ExecPath,
    FallbackState,
    FaultScope,
    Layout,
    Mode,
    Outcome,
    ReferenceKind,
    Shapes,
)
from .integrity import PARSED_DIGEST, Integrity, content_digest
from .runinfo import ApiCoverage, BackendId, DeviceInfo, Evidence, OpSource, Runtime, RuntimeCheck
from .workloads import WorkloadList

#: validation context flag set by the validated-model cache: the entry's source bytes passed the
#: digest check when the entry was written, so a read recomputes the counts but not the digest
DIGEST_VERIFIED = "opmatrix.digest_verified"

__all__ = [
    "SCHEMA_VERSION",
    "ApiCoverage",
    "Autograd",
    "BackendId",
    "CellResult",
    "DeviceInfo",
    "Entry",
    "EntryPart",
    "ErrorInfo",
    "Evidence",
    "FallbackEvidence",
    "Matrix",
    "Numerics",
    "OpSource",
    "Runtime",
    "RuntimeCheck",
    "Samples",
]

SCHEMA_VERSION = 1



class Numerics(Model):
    """Tolerances applied and the largest errors seen against the reference."""

    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    max_abs_err: float | None = Field(default=None, ge=0)
    max_rel_err: float | None = Field(default=None, ge=0)
    #: how many output values were outside tolerance (a ``wrong`` cell), when counted
    mismatched: int | None = Field(default=None, ge=0)
    reference: ReferenceKind = ReferenceKind.cpu_same_dtype
    #: low-precision reductions and matmuls: the precision the sum was accumulated in
    accumulation: Accumulation | None = None
    accumulation_evidence: Message | None = Field(default=None, description="the designed input and what it gave")


class ErrorInfo(Model):
    """An exception (or a signal) met while probing."""

    type: Message
    message: Message
    actionable: bool = Field(description="names the op and the dtype or device")
    signal: str | None = None
    fault_scope: FaultScope | None = Field(
        default=None, description="how far a fault reached (what still worked afterwards); None: no fault"
    )
    scope_evidence: list[Message] = Field(
        default_factory=list, description="the checks made after the fault, in order, with their results"
    )
    cause: list[Message] = Field(
        default_factory=list, description="the exception chain below the message, outermost first, with the runtime's status codes"
    )


class FallbackEvidence(Model):
    """Three-state host-fallback evidence, with the ops seen running on the host."""

    state: FallbackState = FallbackState.unknown
    ops: list[str] = Field(default_factory=list)
    source: str | None = Field(default=None, description="which signal: counter, warning, profiler ...")
    copies_per_call: int | None = Field(
        default=None, ge=0, description="most host<->device copies seen inside one call (profiler call tree)"
    )
    bytes_per_call: int | None = Field(default=None, ge=0, description="most bytes those copies moved in one call")

    @field_validator("ops")
    @classmethod
    def _op_names(cls, ops: list[str]) -> list[str]:
        return [printable(op, "fallback op") for op in ops]


class Samples(Model):
    """How many samples were probed and passed; per-path counts when they took different paths."""

    probed: int = Field(ge=0)
    passed: int = Field(ge=0)
    by_path: dict[ExecPath, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _passed_le_probed(self) -> Samples:
        if self.passed > self.probed:
            raise ValueError(f"passed ({self.passed}) exceeds probed ({self.probed})")
        return self


class Autograd(Model):
    """First-order backward of the cell."""

    path: ExecPath
    outcome: Outcome
    max_abs_err: float | None = Field(default=None, ge=0)


def operator_name(name: str) -> str:
    """``name`` if it can be an operator's name in a matrix (printable, no spaces, not empty)."""
    if not name or any(ch.isspace() or not ch.isprintable() for ch in name) or len(name) > 200:
        raise ValueError(f"operator name {name!r} is not an ATen overload name like aten.add.Tensor")
    return name


class CellResult(Model):
    """The result of one cell: everything an entry says besides which cells it covers."""

    path: ExecPath
    outcome: Outcome
    conditions: dict[str, str] = Field(
        default_factory=dict, description="argument features this result holds for, e.g. dim: last"
    )
    mixed: bool = Field(default=False, description="samples took different paths; no feature separates them")
    flaky: bool = Field(default=False, description="repeated probes disagreed")
    autograd: Autograd | None = None
    numerics: Numerics | None = None
    components: list[str] = Field(default_factory=list, description="ops a composite ran as")
    fallback: FallbackEvidence = Field(default_factory=FallbackEvidence)
    samples: Samples
    shapes: Shapes | None = Field(default=None, description="compile cells: compiled for static or dynamic shapes")
    source: CellSource | None = Field(default=None, description="inputs not OpInfo's own samples (rank extension)")

    error: ErrorInfo | None = None
    note: Message | None = None
    devices: list[DeviceName] = Field(default_factory=list, description="the devices that produced these cells")
    device_dependent: list[DeviceOutcome] = Field(default_factory=list, description=DEVICE_DEPENDENT)

    @field_validator("components")
    @classmethod
    def _component_names(cls, ops: list[str]) -> list[str]:
        return [printable(op, "component op") for op in ops]

    @model_validator(mode="after")
    def _ok_within_tolerance(self) -> CellResult:
        """An infinite error is a difference (a device that returns inf where the CPU does not):
        never an ``ok`` result's."""
        err = self.numerics.max_abs_err if self.numerics is not None else None
        if self.outcome is Outcome.ok and err is not None and math.isinf(err):
            raise ValueError("numerics.max_abs_err is infinite, yet the outcome is ok")
        grad = self.autograd
        if grad is not None and grad.outcome is Outcome.ok and grad.max_abs_err is not None and math.isinf(grad.max_abs_err):
            raise ValueError("autograd.max_abs_err is infinite, yet the backward's outcome is ok")
        return self


class EntryPart(Model):
    """One exact box of a contract-level entry, with what may differ between its boxes.

    An entry with ``parts`` is the union of its parts; each part expands (with the entry's
    shared fields) back to exactly the box entry it was made from: see :meth:`Entry.boxes`.
    """

    dtypes: list[DType] = Field(min_length=1)
    ranks: RankRange
    layouts: list[Layout] = Field(min_length=1)
    conditions: dict[str, str] = Field(default_factory=dict)
    flaky: bool = False
    autograd: Autograd | None = None
    numerics: Numerics | None = None
    samples: Samples
    source: CellSource | None = None
    error: ErrorInfo | None = None
    note: Message | None = None


#: the fields an :class:`EntryPart` gives its box (the rest come from the entry)
PART_FIELDS = tuple(EntryPart.model_fields)


class Entry(CellResult):
    """Cells with identical results: dtypes x ranks x layouts in one mode.

    A *contract-level* entry groups boxes that share mode, path, outcome, components and
    fallback (one entry per operator, path and condition group): its ``dtypes``/``layouts`` are
    the union and ``ranks`` the hull of its ``parts``, its results the aggregate, and
    ``numerics_by_dtype`` the tolerances and largest errors per dtype. Exact cells: ``boxes()``.
    """

    dtypes: list[DType] = Field(min_length=1)
    ranks: RankRange
    layouts: list[Layout] = Field(min_length=1)
    mode: Mode = Mode.eager
    numerics_by_dtype: dict[DType, Numerics] = Field(
        default_factory=dict, description="per-dtype tolerances and largest errors of a contract-level entry"
    )
    parts: list[EntryPart] = Field(
        default_factory=list, description="the exact boxes of a contract-level entry; empty: the entry is one box"
    )

    def boxes(self) -> list[Entry]:
        """The exact box entries (one per part; the entry itself when it has no parts)."""
        if not self.parts:
            return [self]
        base: dict[str, object] = {"parts": [], "numerics_by_dtype": {}}
        return [self.model_copy(update={**base, **{f: getattr(p, f) for f in PART_FIELDS}}) for p in self.parts]

    @field_validator("dtypes", "layouts")
    @classmethod
    def _unique(cls, values: list) -> list:  # type: ignore[type-arg]
        if len(set(values)) != len(values):
            raise ValueError("values must be unique")
        return values

    def cells(self) -> Iterator[tuple[DType, int, Layout, Mode]]:
        """Every (dtype, rank, layout, mode) cell the entry covers."""
        if self.parts:
            for box in self.boxes():
                yield from box.cells()
            return
        for dtype in self.dtypes:
            for rank in self.ranks.ranks():
                for layout in self.layouts:
                    yield dtype, rank, layout, self.mode

    def covers(self, dtype: DType, rank: int, layout: Layout, mode: Mode) -> bool:
        """Whether the cell (dtype, rank, layout, mode) is one of this entry's."""
        if self.parts:
            return any(box.covers(dtype, rank, layout, mode) for box in self.boxes())
        return mode == self.mode and rank in self.ranks and dtype in self.dtypes and layout in self.layouts


class Matrix(Model):
    """A backend's support matrix: identity, evidence, runtime data and operator entries."""

    schema_version: Literal[1] = 1
    integrity: Integrity | None = Field(
        default=None, description="the matrix's own cell and operator counts and content digest (see seal())"
    )
    backend: BackendId
    evidence: Evidence
    runtime: Runtime = Field(default_factory=Runtime)
    operators: dict[str, list[Entry]] = Field(default_factory=dict)
    skipped: dict[str, str] = Field(default_factory=dict, description="probe tasks (source|dtype) that yielded no "
                                    "cell, with the reason: never silently absent")
    not_run: dict[str, str] = Field(default_factory=dict, description="units that never ran ('source|dtype unit'), "
                                    "with the reason: not cells, never counted as probed")
    distributed: Distributed | None = Field(default=None, description="level-5 cases (probe --suites distributed)")
    workloads: WorkloadList = Field(default_factory=list, description="levels 3/4: workload runs (opmatrix probe --suites workloads)")

    @field_validator("skipped")
    @classmethod
    def _task_names(cls, skipped: dict[str, str]) -> dict[str, str]:
        for name in skipped:
            printable(name, "skipped task")
        return skipped

    @field_validator("operators")
    @classmethod
    def _op_names(cls, ops: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
        for name in ops:
            operator_name(name)
        return ops

    @model_validator(mode="after")
    def _proves_itself(self, info: ValidationInfo) -> Matrix:
        seal = self.integrity
        if seal is None:
            return self
        cells, ops = self.cell_count(), len(self.operators)
        if (cells, ops) != (seal.cells, seal.operators):
            raise ValueError(
                f"truncated or edited: integrity says {seal.cells} cells in {seal.operators} operators, the file holds "
                f"{cells} in {ops}; regenerate it with the command in its header (or restore the original)"
            )
        context = info.context if isinstance(info.context, dict) else {}
        if context.get(DIGEST_VERIFIED) is True:
            return self  # the validated-model cache: the entry's content was re-hashed against the YAML's seal
        if context.get(PARSED_DIGEST) == seal.digest:
            return self  # the document is the very content that was sealed
        if self.digest() != seal.digest:
            raise ValueError(
                "edited after it was written: its content no longer matches integrity.digest; regenerate it with "
                "the command in its header (or restore the original)"
            )
        return self

    def digest(self) -> str:
        """``sha256:<hex>`` of the content: every field but ``integrity``."""
        data = self.model_dump(mode="json", exclude={"integrity"}, exclude_defaults=True)
        data["schema_version"] = self.schema_version
        return content_digest(data)

    def seal(self) -> Matrix:
        """This matrix with its ``integrity`` block filled in (what every writer stores)."""
        block = Integrity(cells=self.cell_count(), operators=len(self.operators), digest=self.digest())
        return self.model_copy(update={"integrity": block})

    def cell_count(self) -> int:
        """Number of probed cells (the expansion of every entry)."""
        return sum(
            len(box.dtypes) * len(box.layouts) * (box.ranks.max - box.ranks.min + 1)
            for entries in self.operators.values()
            for e in entries
            for box in (e.parts or (e,))  # a part's box has the part's dtypes, ranks and layouts
        )

    def boxes(self) -> dict[str, list[Entry]]:
        """Operator -> its exact box entries (contract-level entries expanded into their parts)."""
        return {op: [box for e in entries for box in e.boxes()] for op, entries in self.operators.items()}
