"""The torch.fx adapter: partition a traced transformer block by what the matrix says."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from opmatrix.matrix import MatrixIndex, build_matrix
from opmatrix.matrix.fx import layout_of, node_args

from .test_matrix_records import BACKEND, EVIDENCE, cells, task

LAYOUTS = ("contiguous", "noncontiguous", "transposed")


class Block(nn.Module):
    """Pre-norm attention and MLP: layer_norm, linear, chunk, matmul, softmax, gelu, add."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)
        self.ff1 = nn.Linear(16, 32)
        self.ff2 = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln(x)).chunk(3, -1)
        att = torch.matmul(q, k.transpose(-2, -1)).softmax(-1)
        x = x + self.proj(torch.matmul(att, v))
        return x + self.ff2(F.gelu(self.ff1(x)))


@pytest.fixture(scope="module")
def matrix() -> MatrixIndex:
    """A device where gelu falls back to the host and strided matmul runs as a composite."""
    f32 = "float32"
    records = [
        task("layer_norm", f32, cells("aten.layer_norm.default", f32, range(2, 5))),
        task("linear", f32, cells("aten.linear.default", f32, range(2, 5))),
        task("chunk", f32, cells("aten.chunk.default", f32, range(1, 5))),
        task("transpose", f32, cells("aten.transpose.int", f32, range(2, 5), LAYOUTS)),
        task("matmul", f32, [
            *cells("aten.matmul.default", f32, range(2, 5)),
            *cells("aten.matmul.default", f32, range(2, 5), ("noncontiguous", "transposed"), path="composite",
                   components=["aten.contiguous.default", "aten.bmm.default"]),
        ]),
        task("softmax", f32, [
            *cells("aten.softmax.int", f32, range(2, 5), conditions={"dim": "last"}),
            *cells("aten.softmax.int", f32, range(2, 5), path="fallback", conditions={"dim": "first"}),
        ]),
        task("add", f32, cells("aten.add.Tensor", f32, range(1, 5), LAYOUTS)),
        task("gelu", f32, cells("aten.gelu.default", f32, range(1, 5), path="fallback")),
    ]
    return MatrixIndex(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))


def _trace(fn: object, *example: torch.Tensor) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    return make_fx(fn, pre_dispatch=True)(*example)  # type: ignore[arg-type]


def _softmax_over(dim: int):  # type: ignore[no-untyped-def]
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.softmax(dim)

    return fn


def _placement(gm: torch.fx.GraphModule, support: object) -> tuple[list[list[str]], list[str]]:
    parts = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions()
    on_device = [sorted(n.name for n in p.nodes) for p in parts]
    placed = {name for names in on_device for name in names}
    host = [n.name for n in gm.graph.nodes if n.op == "call_function" and n.name not in placed]
    return sorted(on_device), host


def test_gelu_stays_on_the_host_and_splits_the_block(matrix: MatrixIndex):
    gm = _trace(Block(), torch.randn(2, 8, 16))
    support = matrix.operator_support(worst_path="composite")
    on_device, host = _placement(gm, support)
    assert host == ["gelu"]
    assert on_device == [
        ["add", "chunk", "getitem", "getitem_1", "getitem_2", "layer_norm", "linear", "linear_1", "linear_2",
         "matmul", "matmul_1", "softmax", "transpose"],
        ["add_1", "linear_3"],
    ]
    assert "fallback (ok)" in support.explain()["gelu"]


def test_native_only_also_keeps_strided_matmuls_on_the_host(matrix: MatrixIndex):
    gm = _trace(Block(), torch.randn(2, 8, 16))
    _, host = _placement(gm, matrix.operator_support(worst_path="native"))
    # q @ k^T reads a transposed slice, att @ v a strided slice: both composite on this device
    assert host == ["matmul", "matmul_1", "gelu"]


def test_argument_conditions_and_unprobed_cells_decide_nodes(matrix: MatrixIndex):
    support = matrix.operator_support()
    for dim, supported in ((-1, True), (0, False)):
        gm = _trace(_softmax_over(dim), torch.randn(2, 3, 4))
        (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert node_args(node) == {"self": "<tensor>", "dim": dim, "dtype": None}  # defaults filled in
        assert support.is_node_supported({}, node) is supported
    half = _trace(lambda x: x.softmax(-1), torch.randn(2, 3, 4, dtype=torch.float16))
    (node,) = [n for n in half.graph.nodes if n.op == "call_function"]
    assert support.is_node_supported({}, node) is False  # float16 was not probed: never guessed
    assert support.explain()[node.name].startswith("unknown: aten.softmax.int was not probed with dtype float16")


def test_layout_of_reads_strides():
    x = torch.randn(2, 3, 4, 5)
    assert layout_of(x) == "contiguous"
    assert layout_of(x.transpose(-1, -2)) == "transposed"
    assert layout_of(x[..., ::2]) == "noncontiguous"
    assert layout_of(x.contiguous(memory_format=torch.channels_last)) == "channels_last"
    assert layout_of(torch.randn(3, 1).expand(3, 4)) == "expanded"
    assert layout_of(torch.randn(10)[2:]) == "storage_offset"
