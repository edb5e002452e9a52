"""Where will a model run? Every node of a traced graph answered from the matrix.

The graph comes from ``make_fx`` (fake tensors, no device); each ATen node gets the matrix's
answer for its cell: device (native / composite / decomposed), host (fallback), rejected, or
unknown (never probed). Host nodes between device nodes cost host<->device transfers; the device
nodes group into segments with ``CapabilityBasedPartitioner`` and the matrix's ``OperatorSupport``::

    report = place(gm, Matrix.load("out/refaccel-g1/matrix.yaml"), mode="eager")
    print(report.text())
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .query import Matrix
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

    def counts(self) -> dict[str, int]:
        """Nodes per placement."""
        return dict(Counter(n.where for n in self.nodes))

    def host_ops(self) -> list[str]:
        """Distinct ops predicted to run on the host (``aten::cumsum``)."""
        return sorted({base_name(n.op) for n in self.nodes if n.where == "host"})

    def unknown_ops(self) -> list[str]:
        """Distinct ops the matrix never probed for these cells."""
        return sorted({n.op for n in self.nodes if n.where == "unknown"})

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
        data.update(counts=self.counts(), host_ops=self.host_ops(), unknown_ops=self.unknown_ops(),
                    flops=sum(n.flops for n in self.nodes), flop_shares=self.flop_shares())
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
        for n in self.nodes:
            if n.where in ("host", "rejected"):
                at = f" in {n.module}" if n.module else ""
                lines.append(f"  {n.where:8} {n.op}{at} ({n.node}): {n.detail}")
        if self.unknown_ops():
            ops = self.unknown_ops()
            names = sorted({o.split(".")[1] for o in ops})
            lines.append(f"  unknown  {len(ops)} op(s) never probed: {', '.join(ops[:12])}"
                         f"{' ...' if len(ops) > 12 else ''} (probe with --ops {','.join(names[:12])})")
        if self.comparison is not None:
            cmp = self.comparison
            lines.append(f"  observed host fallback of the same workload: {', '.join(self.observed or []) or 'none'}")
            lines.append(f"  prediction vs observation: agree {cmp['agree'] or '-'}; observed but not predicted "
                         f"{cmp['missed'] or '-'}; predicted but not observed {cmp['extra'] or '-'}")
        return "\n".join(lines)


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


def _other_ranks(matrix: Matrix, node: torch.fx.Node, mode: str) -> tuple[str, str, str] | None:
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


def place(gm: torch.fx.GraphModule, matrix: Matrix, *, workload: str = "model", dtype: str = "float32",
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
