"""Names that cross packages, typed once: operator overloads, cell keys, fault outcomes.

An operator overload has two spellings, the matrix's (``aten.softmax.int``, as ``str`` of a
``torch.ops`` overload) and the dispatcher's (``aten::softmax.int``). :class:`OpName` parses
both and prints either, like torchgen's ``OperatorName``, with one rule for the default overload:

- the matrix spelling always writes it: ``aten.relu.default``;
- the dispatcher spelling never does (the dispatcher refuses ``aten::relu.default``): ``aten::relu``;
- reading, a dispatcher name without an overload is the default one; a dotted name without one
  (``aten.relu``, as ``str`` of an ``OpOverloadPacket``) is a user's shorthand, accepted only
  where a person types a name (:meth:`OpName.parse` with ``shorthand=True``: queries), never in
  what opmatrix writes and reads back.

::

    >>> op = OpName.parse("aten::softmax.int")
    >>> str(op), op.qualified, op.event_name
    ('aten.softmax.int', 'aten::softmax.int', 'aten::softmax')
    >>> OpName.parse(str(op)) == op
    True
    >>> OpName.parse("aten::relu").overload, str(OpName.parse("aten::relu"))
    ('default', 'aten.relu.default')
    >>> str(OpName.parse("aten.mm", shorthand=True))
    'aten.mm.default'

A sample that calls several operators is filed under its OpInfo instead (``opinfo.`` and the
OpInfo's name, which may hold dots: ``opinfo.linalg.pinv.singular``); such a name has no
overload and is no dispatcher operator::

    >>> OpName.parse("opinfo.linalg.pinv.singular").is_opinfo
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from .enums import PROCESS_FAULTS, DType, FaultOutcome, Layout, Mode

__all__ = ["CellKey", "FaultOutcome", "OpName", "PROCESS_FAULTS", "TaskId", "UnitId"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: the pseudo-namespace of a cell named after its OpInfo (a sample that calls several operators)
OPINFO = "opinfo"
#: the overload a packet's name alone means
DEFAULT = "default"


@dataclass(frozen=True, order=True)
class OpName:
    """One operator overload, ``namespace::name.overload``, or an OpInfo's cell (``opinfo.name``,
    ``overload`` empty)."""

    namespace: str
    name: str
    overload: str = DEFAULT

    @classmethod
    def parse(cls, text: str, *, shorthand: bool = False) -> OpName:
        """``aten.softmax.int``, ``aten::softmax.int``, ``aten::relu`` (the default overload) or
        ``opinfo.<OpInfo name>``; with ``shorthand``, also ``aten.relu`` (the default overload).

        Raises ``ValueError`` naming the expected forms when ``text`` is none of them.
        """
        raw = str(text).strip()
        if raw.startswith((f"{OPINFO}.", f"{OPINFO}::")):
            return cls.opinfo(raw.removeprefix(f"{OPINFO}::").removeprefix(f"{OPINFO}."))
        if "::" in raw:
            namespace, _, rest = raw.partition("::")
            name, _, overload = rest.partition(".")
            overload = overload or DEFAULT
        else:
            parts = raw.split(".")
            if shorthand and len(parts) == 2:
                parts.append(DEFAULT)
            if len(parts) != 3:
                raise ValueError(f"operator name {raw!r}: expected namespace.name.overload (aten.softmax.int) "
                                 "or namespace::name[.overload] (aten::softmax.int)")
            namespace, name, overload = parts
        for part in (namespace, name, overload):
            if not _IDENT.match(part):
                raise ValueError(f"operator name {raw!r}: {part!r} is not an identifier")
        return cls(namespace, name, overload)

    @classmethod
    def of_schema(cls, name: str, overload_name: str) -> OpName:
        """From a ``torch.FunctionSchema``'s ``name`` (``aten::softmax``) and ``overload_name``
        (``int``; empty for the default overload)."""
        namespace, sep, op = name.partition("::")
        if not sep or not _IDENT.match(namespace) or not _IDENT.match(op):
            raise ValueError(f"operator schema name {name!r}: expected namespace::name")
        return cls(namespace, op, overload_name or DEFAULT)

    @classmethod
    def opinfo(cls, full_name: str) -> OpName:
        """The cell name of a sample of OpInfo ``full_name`` (``linalg.pinv.singular``) that calls
        several operators."""
        if not full_name or not all(_IDENT.match(part) for part in full_name.split(".")):
            raise ValueError(f"OpInfo name {full_name!r}: expected dot-separated identifiers")
        return cls(OPINFO, full_name, "")

    @property
    def is_opinfo(self) -> bool:
        """Whether this names an OpInfo's cell (several operators), not one operator overload."""
        return self.namespace == OPINFO

    def __str__(self) -> str:
        """The matrix's spelling: ``aten.softmax.int``, ``aten.relu.default``, ``opinfo.linalg.pinv``."""
        if self.is_opinfo:
            return f"{OPINFO}.{self.name}"
        return f"{self.namespace}.{self.name}.{self.overload}"

    @property
    def qualified(self) -> str:
        """The dispatcher's spelling: ``aten::softmax.int``, ``aten::relu`` for the default overload."""
        suffix = "" if self.overload in (DEFAULT, "") else f".{self.overload}"
        return f"{self.namespace}::{self.name}{suffix}"

    @property
    def event_name(self) -> str:
        """The profiler's spelling (no overload): ``aten::softmax``."""
        return f"{self.namespace}::{self.name}"

    @property
    def short(self) -> str:
        """For people: ``add.Tensor`` for ``aten.add.Tensor``, ``mm`` for ``aten.mm.default`` (the
        ``aten`` namespace and the default overload left out); an OpInfo's cell name as it is."""
        if self.is_opinfo:
            return str(self)
        parts = [self.name] if self.namespace == "aten" else [self.namespace, self.name]
        return ".".join(parts if self.overload == DEFAULT else [*parts, self.overload])

    def with_overload(self, overload: str) -> OpName:
        """Another overload of the same operator (``aten.abs.default`` -> ``aten.abs.out``)."""
        return OpName(self.namespace, self.name, overload or DEFAULT)


class CellKey(NamedTuple):
    """One cell of a matrix: (operator overload, dtype, rank, layout, mode).

    A tuple, so it hashes and compares as fast as one; the string enums compare equal to their
    values, so a key built from plain strings finds the same cell.
    """

    op: str
    dtype: DType
    rank: int
    layout: Layout
    mode: Mode


class TaskId(NamedTuple):
    """One operator probe task: an OpInfo at a dtype, ``softmax.with_dtype|float32`` in a journal
    (the separator never occurs in OpInfo names or dtypes)."""

    source: str
    dtype: str

    def __str__(self) -> str:
        return f"{self.source}|{self.dtype}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        source, sep, dtype = str(text).rpartition("|")
        if not sep or not source or not dtype:
            raise ValueError(f"task id {text!r}: expected source|dtype (softmax|float32)")
        return cls(source, dtype)


#: the steps a unit of an operator task runs, in order
UNIT_STEPS = ("eager", "backward", "compile", "dynamic", "accumulation")


class UnitId(NamedTuple):
    """One unit of an operator task: a sample (``3``, or ``3.1`` for its first argument variant)
    in a layout, at one step; ``3.1/transposed/eager`` on the progress board, in ``skip`` and in a
    record's ``not_run``."""

    sample: str
    layout: Layout
    step: str

    def __str__(self) -> str:
        return f"{self.sample}/{self.layout.value}/{self.step}"

    @classmethod
    def parse(cls, text: str) -> UnitId:
        parts = str(text).split("/")
        if len(parts) != 3 or parts[2] not in UNIT_STEPS or not parts[0]:
            raise ValueError(f"unit id {text!r}: expected sample/layout/step with a step in {', '.join(UNIT_STEPS)}")
        try:
            layout = Layout(parts[1])
        except ValueError:
            raise ValueError(f"unit id {text!r}: unknown layout {parts[1]!r}") from None
        return cls(parts[0], layout, parts[2])
