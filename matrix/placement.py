"""Where will a model run? Every node of a traced graph answered from the matrix.

The graph comes from ``make_fx`` (fake tensors, no device); each ATen node gets the matrix's
answer for its cell: device (native / composite / decomposed), host (fallback), rejected, or
unknown (never probed). Host nodes between device nodes cost host<->device transfers; the device
nodes group into segments with ``CapabilityBasedPartitioner`` and the matrix's ``OperatorSupport``::

    report = place(gm, MatrixIndex.load("out/refaccel-g1/matrix.yaml"), mode="eager")
    print(report.text())
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .query import MatrixIndex
from .workloads import base_name

__all__ = ["NodePlacement", "Placement", "place"]

_DEVICE = ("native", "composite", "decomposed")
#: shape and view ops: metadata on the tensor, no kernel (allocation and views serve every dtype)
_VIEWS = frozenset({"reshape", "view", "select", "slice", "split", "split_with_sizes", "transpose", "unsqueeze",
                    "squeeze", "flatten", "chunk", "expand", "permute", "t", "alias", "detach", "unbind", "_unsafe_view",
                    "contiguous", "size", "sym_size"})


@dataclass
class NodePlacement:
    """One graph node: its op, where it runs, and the matrix's reason."""

    node: str
    op: str
    where: str  # device | host | rejected | unknown
    path: str
    detail: str
    module: str = ""
    flops: int = 0  # floating-point operations per call (torch.utils.flop_counter's formulas)


@dataclass
class Placement:
    """The placement report of one traced model."""

    workload: str
    dtype: str
    mode: str
    nodes: list[NodePlacement] = field(default_factory=list)
    transfers: int = 0
    segments: int = 0
    observed: list[str] | None = None
    comparison: dict[str, list[str]] | None = None
    #: what the prediction was compared with, in words ("the inference step of tinygpt float32 eager, ok")
    compared_with: str = ""
    #: why there is no comparison although the matrix holds a run of the workload ("" when compared)
    not_compared: str = ""
    #: never-probed overload -> the OpInfo names whose probe calls it (``--ops`` that probe accepts)
    suggestions: dict[str, list[str]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Nodes per placement."""
        return dict(Counter(n.where for n in self.nodes))

    def host_ops(self) -> list[str]:
        """Distinct ops predicted to run on the host (``aten::cumsum``)."""
        return sorted({base_name(n.op) for n in self.nodes if n.where == "host"})

    def unknown_ops(self) -> list[str]:
        """Distinct ops the matrix never probed for these cells (ops also rejected or on the host are
        listed there: every op is in exactly one list, see :meth:`op_groups`)."""
        return sorted(op for op, where in self.op_groups().items() if where == "unknown")

    def op_groups(self) -> dict[str, str]:
        """Each op of a non-device node -> the one list it is shown in: its worst placement
        (rejected, then host, then unknown)."""
        rank = {"rejected": 0, "host": 1, "unknown": 2}
        out: dict[str, str] = {}
        for n in self.nodes:
            if n.where in rank and (n.op not in out or rank[n.where] < rank[out[n.op]]):
                out[n.op] = n.where
        return out

    def probe_ops(self) -> tuple[list[str], list[str]]:
        """The ``--ops`` names that probe the never-probed ops, and the ops no OpInfo calls."""
        names: list[str] = []
        orphans: list[str] = []
        for op in self.unknown_ops():
            found = self.suggestions.get(op, [])
            if not found:
                orphans.append(op)
            for name in found:
                if name not in names:
                    names.append(name)
        return names, orphans

    def _node_lines(self, where: str, ops: list[str]) -> list[str]:
        """One line per op and reason: the nodes that share them, counted."""
        lines = []
        for op in sorted(ops):
            by_detail: dict[str, list[NodePlacement]] = {}
            for n in self.nodes:
                if n.op == op and n.where == where:
                    by_detail.setdefault(n.detail, []).append(n)
            for detail, nodes in by_detail.items():
                modules = sorted({n.module for n in nodes if n.module})
                at = f" in {_cut_list(modules, 3)}" if modules else ""
                count = f" x{len(nodes)}" if len(nodes) > 1 else ""
                lines.append(f"  {where:8} {op}{count}{at} ({_cut_list([n.node for n in nodes], 3)}): {detail}")
            others = Counter(n.where for n in self.nodes if n.op == op and n.where != where)
            if others:
                lines.append(f"           {op} also: " + ", ".join(f"{k} {v} node(s)" for k, v in sorted(others.items())))
        return lines

    def verdict(self) -> str:
        """The comparison's result in words."""
        if self.comparison is None:
            return self.not_compared
        cmp = self.comparison
        if not cmp["missed"] and not cmp["extra"]:
            if cmp["agree"]:
                return f"the prediction matches: {', '.join(cmp['agree'])} on the host, as observed"
            return "the prediction matches: no op on the host, and none was observed there"
        parts = []
        if cmp["missed"]:
            parts.append(f"observed on the host but not predicted: {', '.join(cmp['missed'])}")
        if cmp["extra"]:
            parts.append(f"predicted on the host but not observed: {', '.join(cmp['extra'])}")
        if cmp["agree"]:
            parts.append(f"both: {', '.join(cmp['agree'])}")
        return "the prediction differs: " + "; ".join(parts)

    def flop_shares(self) -> dict[str, float]:
        """Share of the graph's FLOPs per placement (empty when no node has a FLOP formula)."""
        total = sum(n.flops for n in self.nodes)
        if not total:
            return {}
        by: Counter[str] = Counter()
        for n in self.nodes:
            by[n.where] += n.flops
        return {w: f / total for w, f in by.items()}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of the whole report."""
        data = asdict(self)
        names, orphans = self.probe_ops()
        data.update(counts=self.counts(), host_ops=self.host_ops(), unknown_ops=self.unknown_ops(),
                    flops=sum(n.flops for n in self.nodes), flop_shares=self.flop_shares(),
                    probe_ops=names, no_opinfo=orphans, comparison_result=self.verdict())
        return data

    def text(self) -> str:
        """The human report."""
        c, total = self.counts(), len(self.nodes) or 1
        lines = [f"{self.workload} ({self.dtype}, {self.mode}): {len(self.nodes)} ATen compute nodes (views not counted); "
                 f"{100 * c.get('device', 0) / total:.0f}% on the device, {c.get('host', 0)} on the host, "
                 f"{c.get('rejected', 0)} rejected, {c.get('unknown', 0)} unknown; "
                 f"{self.segments} device segment(s), {self.transfers} host<->device transfer(s) per call"]
        shares = self.flop_shares()
        if shares:
            total = sum(n.flops for n in self.nodes)
            lines.append(f"  FLOPs (matmul, convolution, attention: what torch.utils.flop_counter counts): {total:,} per call; " + ", ".join(
                f"{100 * shares.get(w, 0.0):.1f}% {w}" for w in ("device", "host", "rejected", "unknown") if w in shares))
        groups = self.op_groups()
        for where in ("rejected", "host"):
            lines += self._node_lines(where, [op for op, w in groups.items() if w == where])
        unknown = self.unknown_ops()
        if unknown:
            lines.append(f"  unknown  {len(unknown)} op(s) not probed at a dtype, rank or layout the workload uses "
                         f"(the nodes' notes say which): {_cut_list(unknown, 12)}")
            names, orphans = self.probe_ops()
            if names:
                lines.append(f"           probe them with --ops {','.join(names)} (the OpInfo entries that call them)")
            if orphans:
                lines.append(f"           no OpInfo entry calls {_cut_list(orphans, 12)}: probe cannot reach them")
        if self.comparison is not None:
            observed = ", ".join(self.observed or []) or "none"
            lines.append(f"  compared with {self.compared_with or 'the observed run'}: host fallback observed: {observed}")
            lines.append(f"  result: {self.verdict()}")
        elif self.not_compared:
            lines.append(f"  not compared: {self.not_compared}")
        return "\n".join(lines)


def _cut_list(items: list[str], most: int) -> str:
    """``a, b, c`` or ``a, b, c, ... (12 in all)``: a cut list says so."""
    if len(items) <= most:
        return ", ".join(items)
    return ", ".join(items[:most]) + f", \u2026 ({len(items)} in all)"


def _where(answers: list[Any]) -> tuple[str, str, str]:
    if not answers:
        return "unknown", "unknown", "no matrix answer"
    if any(not a.known for a in answers):
        a = next(a for a in answers if not a.known)
        return "unknown", "unknown", a.reason or "never probed"
    worst = max(answers, key=lambda a: a.path)
    path = worst.path.value
    detail = worst.summary()
    if path in _DEVICE and all(a.outcome is None or a.outcome.value == "ok" for a in answers):
        return "device", path, detail
    if path == "fallback":
        return "host", path, detail
    if path == "rejected":
        return "rejected", path, detail
    return "unknown", path, detail


def _other_ranks(matrix: MatrixIndex, node: torch.fx.Node, mode: str) -> tuple[str, str, str] | None:
    """When the node's rank was never probed but other ranks of its op/dtype/layout were, and all of
    them agree on where the op runs, predict that (marked as inferred); else None."""
    from .fx import node_cells

    cells = node_cells(node)
    if cells is None:
        return None
    dtype, rank, layouts = cells
    found = {}
    for r in range(0, 9):
        if r == rank:
            continue
        try:
            answers = [matrix.query(node.target, dtype, r, lay, mode) for lay in layouts]
        except (ValueError, KeyError):
            return None
        if all(a.known for a in answers):
            found[r] = _where(answers)
    sides = {w for w, _, _ in found.values()}
    if len(sides) != 1 or "unknown" in sides:
        return None
    w, path, detail = next(iter(found.values()))
    return w, path, f"inferred from rank(s) {', '.join(map(str, sorted(found)))} (rank {rank} not probed): {detail}"


def _transfers(gm: torch.fx.GraphModule, where: dict[str, str]) -> int:
    """Values crossing between the host and the device: one per (producer, direction)."""
    crossings = set()
    for node in gm.graph.nodes:
        side = where.get(node.name)
        if side is None:
            continue
        for src in node.all_input_nodes:
            src_side = where.get(src.name, "device" if src.op in ("placeholder", "get_attr") else None)
            if src_side is None:
                continue
            if (src_side == "host") != (side == "host"):
                crossings.add((src.name, side))
    return len(crossings)


def _node_flops(node: torch.fx.Node) -> int:
    """FLOPs of one call of ``node``, from its fake-tensor metadata: the op runs once under its fake
    mode with ``FlopCounterMode``, so a composite counts the FLOPs of what it decomposes into. 0 when
    the node has no fake values (or no op of it has a FLOP formula)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils.flop_counter import FlopCounterMode

    def val(a: Any) -> Any:
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a

    args = torch.fx.node.map_aggregate(node.args, val)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, val)
    fakes = [v for v in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(v, FakeTensor)]
    if not fakes:
        return 0
    counter = FlopCounterMode(display=False)
    try:
        with fakes[0].fake_mode, counter:
            node.target(*args, **kwargs)  # type: ignore[operator]
    except Exception:  # noqa: BLE001 - an op fake tensors cannot run: no FLOP figure for it
        return 0
    return int(counter.get_total_flops())


def place(gm: torch.fx.GraphModule, matrix: MatrixIndex, *, workload: str = "model", dtype: str = "float32",
          mode: str = "eager") -> Placement:
    """Answer every ATen node of ``gm`` from ``matrix`` and group the device nodes into segments."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    support = matrix.operator_support(worst_path="decomposed" if mode == "compile" else "composite", mode=mode)
    report = Placement(workload=workload, dtype=dtype, mode=mode)
    where: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target.is_view or node.target._opname in _VIEWS:
            where[node.name] = "device"
            continue
        w, path, detail = _where(support.answers(node))
        if w == "unknown":
            w, path, detail = _other_ranks(matrix, node, mode) or (w, path, detail)
        where[node.name] = w
        stack = node.meta.get("nn_module_stack") or {}
        module = list(stack.values())[-1][0] if stack else ""
        report.nodes.append(NodePlacement(node=node.name, op=str(node.target), where=w,
                                          path=path, detail=detail, module=str(module), flops=_node_flops(node)))
    report.transfers = _transfers(gm, where)
    parts = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions()
    report.segments = len(parts)
    return report


def compare_observed(report: Placement, observed: list[str]) -> Placement:
    """Fill in the observed host fallback of the same workload and how the prediction compares."""
    from .workloads import normal_base

    seen = {normal_base(base_name(o)) for o in observed}
    said = {normal_base(b) for b in report.host_ops()}
    report.observed = sorted(observed)
    report.comparison = {"agree": sorted(seen & said), "missed": sorted(seen - said), "extra": sorted(said - seen)}
    return report
