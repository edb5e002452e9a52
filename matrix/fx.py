"""Compiler legality from the matrix: a ``torch.fx`` ``OperatorSupportBase`` for partitioners.

::

    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    support = MatrixIndex.load("out/refaccel-g2/matrix.yaml").operator_support(worst_path="composite")
    gm = CapabilityBasedPartitioner(traced, support).partition_and_fuse()

For each ``call_function`` node whose target is an ATen ``OpOverload``, the cell is read from the
node's tensor inputs' ``meta["val"]`` (as ``make_fx`` and ``torch.export`` record it): dtype and
rank of the first tensor input (the probe's sample input), and the layout of *every* tensor
input -- each distinct layout must be supported, because real backends mishandle a strided
operand silently. Argument values, by schema name, go to the query for argument conditions
(``softmax(x, dim=-1)`` -> ``dim: last``). A node is supported when every such cell is known,
its outcome is ``ok`` and its path is no worse than ``worst_path``; anything not probed is not
supported (never guessed). Nodes without tensor inputs (factories) use their output;
``operator.getitem`` on a multi-output op follows that op.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch.fx.passes.operator_support import OperatorSupportBase

from opmatrix.schema import TENSOR, ExecPath

from .answer import Answer
from .keys import parse_mode

if TYPE_CHECKING:
    from .query import MatrixIndex

__all__ = ["MatrixOperatorSupport", "layout_of", "node_args", "node_cells"]


def _dense_permuted(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: the strides are a permutation of some contiguous strides."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def layout_of(t: torch.Tensor) -> str:
    """The opmatrix layout name of a tensor, from its sizes, strides and storage offset."""
    if t.is_contiguous():
        return "storage_offset" if t.storage_offset() > 0 else "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride(), strict=True)):
        return "expanded"
    if _dense_permuted(t):
        return "transposed"
    return "noncontiguous"


def _value(arg: object) -> object:
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        if isinstance(val, torch.Tensor):
            return TENSOR
        if isinstance(val, bool):
            return val
        if isinstance(val, (int, torch.SymInt)):
            try:
                return int(val)
            except (TypeError, RuntimeError):  # an unbacked symbol has no value to read
                return None
        return val
    if isinstance(arg, (list, tuple)):
        return [_value(a) for a in arg]
    return arg


def node_args(node: torch.fx.Node) -> dict[str, object]:
    """The node's argument values by schema name (tensors as :data:`~opmatrix.schema.TENSOR`).

    Arguments the call left out take their schema defaults, so that a condition such as
    ``dtype: none`` is decided rather than left open.
    """
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return {k: _value(v) for k, v in node.kwargs.items()}
    out: dict[str, object] = {}
    for formal, actual in zip(schema.arguments, node.args, strict=False):
        out[formal.name] = _value(actual)
    for name, actual in node.kwargs.items():
        out[name] = _value(actual)
    for formal in schema.arguments:
        if formal.name not in out and formal.has_default_value():
            out[formal.name] = formal.default_value
    return out


def _tensors(node: torch.fx.Node) -> list[torch.Tensor]:
    vals = [n.meta.get("val") for n in node.all_input_nodes]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    if tensors:
        return tensors
    out = node.meta.get("val")
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [v for v in outs if isinstance(v, torch.Tensor)][:1]


def node_cells(node: torch.fx.Node) -> tuple[str, int, list[str]] | None:
    """``(dtype, rank, layouts)`` the node's call is looked up under; None without tensor metadata."""
    tensors = _tensors(node)
    if not tensors:
        return None
    first = tensors[0]
    layouts = sorted({layout_of(t) for t in tensors})
    return str(first.dtype).removeprefix("torch."), first.dim(), layouts


class MatrixOperatorSupport(OperatorSupportBase):
    """Supported = every cell of the node is known, ``ok`` and no worse than ``worst_path``."""

    def __init__(self, matrix: MatrixIndex, worst_path: object = "composite", mode: object = "eager"):
        self.matrix = matrix
        self.worst_path = ExecPath(str(worst_path.value if isinstance(worst_path, ExecPath) else worst_path))
        self.mode = parse_mode(mode)
        #: node name -> the answers that decided it (for reports: why a node stayed on the host)
        self.decisions: dict[str, list[Answer]] = {}

    def answers(self, node: torch.fx.Node) -> list[Answer]:
        """The matrix answers for the node's cells (empty when it is not an ATen call)."""
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            return []
        cells = node_cells(node)
        if cells is None:
            return []
        dtype, rank, layouts = cells
        args: Mapping[str, object] = node_args(node)
        try:
            return [self.matrix.query(node.target, dtype, rank, layout, self.mode, args=args) for layout in layouts]
        except ValueError:  # a dtype opmatrix has no name for (e.g. a quantized one): not probed
            return []

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        """Whether ``node`` may be placed on the device."""
        if node.op == "call_function" and node.target is operator.getitem:
            # picking one output of a multi-output op lives wherever that op does; judging it
            # separately would cut the producer's partition off from its consumers
            source = node.args[0]
            return isinstance(source, torch.fx.Node) and self.is_node_supported(submodules, source)
        answers = self.answers(node)
        self.decisions[node.name] = answers
        return bool(answers) and all(a.at_most(self.worst_path) for a in answers)

    def explain(self) -> dict[str, str]:
        """Node name -> one line saying why it was (not) supported."""
        out = {}
        for name, answers in self.decisions.items():
            out[name] = "; ".join(a.summary() for a in answers) if answers else "not an ATen call with tensor metadata"
        return out
