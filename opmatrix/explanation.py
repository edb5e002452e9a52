"""``opmatrix explain``: where will this model run on the backend a matrix describes?

    opmatrix explain out/refaccel-g1/matrix.yaml tinygpt --dtype float32 --mode eager
    opmatrix explain out/refaccel-g1/matrix.yaml mypkg.models:make --json

The model (a catalog workload or ``pkg.mod:factory``) is traced with ``make_fx`` on fake tensors
(no device needed); :func:`opmatrix.matrix.placement.place` answers each node from the matrix.
When the matrix holds a run of the same workload, the prediction is compared with the observed
host fallback. Python API::

    from opmatrix.explanation import explain
    report = explain("out/refaccel-g1/matrix.yaml", "tinygpt")
    report.host_ops(), report.transfers
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "explain", "trace", "command"]

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def add_parser(sub: Any) -> None:
    """The ``explain`` verb's arguments."""
    p = sub.add_parser("explain", help="predict where a model runs (host fallback, transfers) from a matrix")
    p.add_argument("matrix", metavar="MATRIX")
    p.add_argument("model", metavar="WORKLOAD", help="a catalog workload (mlp, tinygpt, ...) or pkg.mod:factory")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (fp32/bf16/fp16)")
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def trace(name: str, dtype: str = "float32", mode: str = "eager") -> Any:
    """The workload's forward pass as an ATen ``GraphModule`` traced on fake tensors."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from opmatrix.probes.workloads.catalog import DTYPES, build

    wl = build(name, DTYPES[dtype])
    decomp: Any = None
    if mode == "compile":
        from torch._decomp import core_aten_decompositions

        decomp = dict(core_aten_decompositions())  # a mapping of overload -> decomposition

    from torch.nn.utils.stateless import _reparametrize_module

    state = {**dict(wl.model.named_parameters()), **dict(wl.model.named_buffers())}

    def fwd(state: dict[str, Any], *inputs: Any) -> Any:  # parameters as inputs: all of them become fake
        with torch.no_grad(), _reparametrize_module(wl.model, state):
            return wl.run(wl.model, *inputs) if wl.run is not None else wl.model(*inputs)

    return make_fx(fwd, tracing_mode="fake", decomposition_table=decomp, pre_dispatch=mode == "eager")(state, *wl.inputs)


def explain(matrix_path: str, name: str, dtype: str = "float32", mode: str = "eager") -> Any:
    """The :class:`~opmatrix.matrix.placement.Placement` of workload ``name`` against a matrix file."""
    from opmatrix.matrix.placement import compare_observed, place
    from opmatrix.matrix.query import MatrixIndex

    dtype = _DTYPES.get(dtype, dtype)
    matrix = MatrixIndex.load(matrix_path)
    report = place(trace(name, dtype, mode), matrix, workload=name, dtype=dtype, mode=mode)
    if report.unknown_ops():
        from opmatrix.probes.ops.opinfo_names import opinfo_names

        report.suggestions = opinfo_names(report.unknown_ops())
    run = next((w for w in matrix.model.workloads if w.key() == (name, dtype, mode)), None)
    if run is None:
        return report
    step = run.steps.get("inference")  # explain traces the forward pass: compare with that step
    what = f"the {name} run in this matrix ({dtype}, {mode})"
    if step is None or step.outcome.is_fault:
        said = run.error or (step.evidence if step is not None else "")
        why = f"{run.outcome.value}: {_first_line(said)}" if said else f"outcome {run.outcome.value}"
        report.not_compared = (f"{what} did not complete its inference step ({why}), so nothing it observed "
                               "can confirm or refute the prediction")
    elif run.host_fallback.state.value == "unknown":
        report.not_compared = f"{what} could not observe host fallback (the adapter has no signal for it)"
    else:
        report.compared_with = f"{what}, inference step"
        compare_observed(report, step.host_fallback)
    return report


def _first_line(text: str, most: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= most else line[: most - 1] + "\u2026"


def command(args: argparse.Namespace) -> int:
    """Run ``opmatrix explain``; exit 2 for an unknown workload or dtype."""
    from opmatrix.probes.workloads.catalog import DTYPES, WORKLOADS
    from opmatrix.schema import UsageError

    dtype = _DTYPES.get(args.dtype, args.dtype)
    if dtype not in DTYPES:
        raise UsageError(f"--dtype: {args.dtype!r} is not one of {', '.join(DTYPES)}")
    if args.model not in WORKLOADS and ":" not in args.model:
        raise UsageError(f"explain: unknown workload {args.model!r}; known: {', '.join(WORKLOADS)} (or pkg.mod:factory)")
    report = explain(args.matrix, args.model, dtype, args.mode)
    print(json.dumps(report.to_json(), indent=1) if args.json else report.text())
    return 0
