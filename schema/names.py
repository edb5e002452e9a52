"""Names that cross packages, typed once: operator overloads, cell keys, fault outcomes.

An operator overload has two spellings, the matrix's (``aten.softmax.int``, as ``str`` of a
``torch.ops`` overload) and the dispatcher's (``aten::softmax.int``; the default overload is
just ``aten::relu``). :class:`OpName` parses both and prints either, like torchgen's
``OperatorName``::

    >>> op = OpName.parse("aten::softmax.int")
    >>> str(op), op.qualified, op.event_name
    ('aten.softmax.int', 'aten::softmax.int', 'aten::softmax')
    >>> OpName.parse(str(op)) == op
    True
    >>> OpName.parse("aten::relu").overload
    'default'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from .enums import PROCESS_FAULTS, DType, FaultOutcome, Layout, Mode

__all__ = ["CellKey", "FaultOutcome", "OpName", "PROCESS_FAULTS", "TaskId", "UnitId"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, order=True)
class OpName:
    """One operator overload: ``namespace::name.overload``."""

    namespace: str
    name: str
    overload: str = "default"

    @classmethod
    def parse(cls, text: str) -> OpName:
        """``aten.softmax.int``, ``aten::softmax.int`` or ``aten::relu`` (default overload).

        Raises ``ValueError`` naming the expected forms when ``text`` is neither.
        """
        raw = str(text).strip()
        if "::" in raw:
            namespace, _, rest = raw.partition("::")
            name, _, overload = rest.partition(".")
            overload = overload or "default"
        else:
            parts = raw.split(".")
            if len(parts) != 3:
                raise ValueError(f"operator name {raw!r}: expected namespace.name.overload (aten.softmax.int) "
                                 "or namespace::name[.overload] (aten::softmax.int)")
            namespace, name, overload = parts
        for part in (namespace, name, overload):
            if not _IDENT.match(part):
                raise ValueError(f"operator name {raw!r}: {part!r} is not an identifier")
        return cls(namespace, name, overload)

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}.{self.overload}"

    @property
    def qualified(self) -> str:
        """The dispatcher's spelling: ``aten::softmax.int``, ``aten::relu`` for the default overload."""
        suffix = "" if self.overload == "default" else f".{self.overload}"
        return f"{self.namespace}::{self.name}{suffix}"

    @property
    def event_name(self) -> str:
        """The profiler's spelling (no overload): ``aten::softmax``."""
        return f"{self.namespace}::{self.name}"


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
UNIT_STEPS = ("eager", "backward", "compile")


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
