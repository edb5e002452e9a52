"""``opmatrix explain``: where will this model run on the backend a matrix describes?

    opmatrix explain out/refaccel-g1/matrix.yaml tinygpt --dtype float32 --mode eager
    opmatrix explain out/refaccel-g1/matrix.yaml mypkg.models:make --json

The model (a catalog workload or ``pkg.mod:factory``) is traced with ``make_fx`` on fake tensors
(no device needed); :func:`opmatrix.matrix.placement.place` answers each node from the matrix.
When the matrix holds a run of the same workload, the prediction is compared with the observed
host fallback. Python API::

    import opmatrix
    report = opmatrix.explain(opmatrix.ExplainOptions(matrix="out/refaccel-g1/matrix.yaml", model="tinygpt"))
    report.host_ops(), report.transfers
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opmatrix.schema import ExitCode, WorkloadStep
from opmatrix.schema.yamlload import dumps_json

if TYPE_CHECKING:
    from opmatrix.matrix.placement import Placement
    from opmatrix.options import ExplainOptions

__all__ = ["command", "explain", "placement", "trace"]

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def trace(name: str, dtype: str = "float32", mode: str = "eager") -> Any:
    """The workload's forward pass as an ATen ``GraphModule`` traced on fake tensors."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from opmatrix.probes import TORCH_DTYPES
    from opmatrix.probes import build_workload as build

    wl = build(name, TORCH_DTYPES[dtype])
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
        from opmatrix.probes import opinfo_names

        report.suggestions = opinfo_names(report.unknown_ops())
    run = next((w for w in matrix.model.workloads if w.key() == (name, dtype, mode)), None)
    if run is None:
        return report
    step = run.steps.get(WorkloadStep.inference)  # explain traces the forward pass: compare with that step
    what = f"the {name} run in this matrix ({dtype}, {mode})"
    if step is None or step.outcome.is_fault or step.rejected:
        said = run.error or (step.evidence if step is not None else "")
        why = f"{run.headline()}: {_first_line(said)}" if said else f"outcome {run.headline()}"
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


def placement(options: ExplainOptions) -> Placement:
    """The :class:`~opmatrix.matrix.placement.Placement` the options ask for, every option checked first
    (dtype, workload name, a factory that does not import or returns no ``nn.Module``): UsageError."""
    from opmatrix.probes import WORKLOADS, BadFactory, check_factory
    from opmatrix.schema import UsageError

    dtype = _DTYPES.get(options.dtype, options.dtype)
    if options.model not in WORKLOADS and ":" not in options.model:
        raise UsageError(f"WORKLOAD: unknown workload {options.model!r}; known: {', '.join(WORKLOADS)} "
                         "(or pkg.mod:factory)")
    if ":" in options.model:
        check_factory(options.model, "WORKLOAD")
    try:
        return explain(options.matrix, options.model, dtype, options.mode)  # type: ignore[no-any-return]
    except BadFactory as exc:
        raise UsageError(f"WORKLOAD: {exc}") from None


def command(options: ExplainOptions) -> int:
    """Run ``opmatrix explain``: print the placement (or ``--json``); exit 2 for bad input."""
    report = placement(options)
    print(dumps_json(report.to_json(), indent=1) if options.json else report.text())
    return ExitCode.OK
