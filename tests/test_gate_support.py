"""Builders of hand-made matrices and contracts for the gate tests (no tests here).

Matrices are built from the ``opmatrix.schema`` models directly, as a probe run would write them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from opmatrix.schema import (
    Autograd,
    BackendId,
    CheckResult,
    Contract,
    DType,
    Entry,
    ErrorInfo,
    Evidence,
    ExecPath,
    FallbackEvidence,
    FallbackState,
    Layout,
    LevelRequirement,
    Matrix,
    Mode,
    Numerics,
    OperatorRequirement,
    Outcome,
    RankRange,
    Runtime,
    RuntimeCheck,
    Samples,
    Waiver,
    WaiverMatch,
)

TODAY = dt.date(2026, 12, 1)

L0_CHECKS = ("import", "driver", "enumerate")
L1_CHECKS = ("allocation", "copy_h2d_d2h", "serialization")


def entry(
    dtypes: Sequence[str] = ("float32",),
    ranks: tuple[int, int] = (2, 3),
    layouts: Sequence[str] = ("contiguous",),
    path: str = "native",
    outcome: str = "ok",
    *,
    mode: str = "eager",
    conditions: dict[str, str] | None = None,
    fallback: str = "not_observed",
    flaky: bool = False,
    autograd: bool = True,
    max_abs_err: float | None = 1e-6,
    atol: float = 1e-5,
    samples: tuple[int, int] = (4, 4),
    error: str | None = None,
) -> Entry:
    """One entry; a failing outcome gets passed=0 unless ``samples`` says otherwise."""
    probed, passed = samples
    if outcome != "ok" and samples == (4, 4):
        passed = 0
    err = None
    if error or path == "rejected":
        err = ErrorInfo(type="RuntimeError", message=error or "refaccel: not supported", actionable=True)
    return Entry(
        dtypes=[DType(d) for d in dtypes],
        ranks=RankRange(min=ranks[0], max=ranks[1]),
        layouts=[Layout(lay) for lay in layouts],
        mode=Mode(mode),
        conditions=conditions or {},
        path=ExecPath(path),
        outcome=Outcome(outcome),
        flaky=flaky,
        autograd=Autograd(path=ExecPath(path), outcome=Outcome.ok) if autograd and path != "rejected" else None,
        numerics=Numerics(atol=atol, rtol=1.3e-6, max_abs_err=max_abs_err) if path != "rejected" else None,
        fallback=FallbackEvidence(state=FallbackState(fallback), ops=["aten.sort.default"] if fallback == "observed" else []),
        samples=Samples(probed=probed, passed=passed),
        error=err,
    )


def checks(failed: Iterable[str] = (), missing: Iterable[str] = ()) -> list[RuntimeCheck]:
    """The level 0/1 runtime checks, all passing except ``failed``; ``missing`` ones left out."""
    failed, missing = set(failed), set(missing)
    out = []
    for level, names in ((0, L0_CHECKS), (1, L1_CHECKS)):
        for name in names:
            if name in missing:
                continue
            result = CheckResult.failed if name in failed else CheckResult.passed
            out.append(RuntimeCheck(name=name, level=level, result=result, evidence=f"{name} evidence"))
    return out


def matrix(operators: dict[str, list[Entry]], *, generation: str = "g2", runtime_checks: list[RuntimeCheck] | None = None) -> Matrix:
    """A refaccel matrix with the given operators and (by default) passing runtime checks."""
    return Matrix(
        backend=BackendId(name="refaccel", device_type="refaccel", dispatch_key="PrivateUse1", generation=generation),
        evidence=Evidence(opmatrix_version="0.1.0", torch_version="2.13.0", python="3.11", platform="linux"),
        runtime=Runtime(checks=checks() if runtime_checks is None else runtime_checks),
        operators=operators,
    )


def op_req(ops: Sequence[str], dtypes: Sequence[str] = ("float32",), **kw: Any) -> OperatorRequirement:
    """An operator requirement."""
    return OperatorRequirement(ops=list(ops), dtypes=[DType(d) for d in dtypes], **kw)


def contract(
    operators: Sequence[OperatorRequirement] = (),
    *,
    level: int = 2,
    extra_levels: Sequence[LevelRequirement] = (),
    waivers: Sequence[Waiver] = (),
    generation: str = "g2",
    **kw: Any,
) -> Contract:
    """A level-``level`` contract: level 0/1 checks by name plus ``operators`` at level 2."""
    reqs = [
        LevelRequirement(level=0, checks=list(L0_CHECKS)),
        LevelRequirement(level=1, checks=list(L1_CHECKS)),
        LevelRequirement(level=2, operators=list(operators)),
        *extra_levels,
    ]
    return Contract(
        release="2.1", backend="refaccel", generation=generation, level=level, requirements=reqs,
        waivers=list(waivers), **kw,
    )


def waiver(op: str, expires: dt.date = dt.date(2027, 3, 31), **match: Any) -> Waiver:
    """A waiver for cells of ``op`` (fnmatch) with extra match fields."""
    return Waiver(match=WaiverMatch(op=op, **match), reason="tracked in RA-1234", owner="kernels@example.com", expires=expires)


def g2_matrix() -> Matrix:
    """A hand-built matrix of refaccel g2 as the refaccel design describes it (acceptance ops)."""
    floats = ("float32", "bfloat16", "float16")
    strided = ("noncontiguous", "transposed")
    comp = ["aten.exp.default", "aten.sum.dim_IntList", "aten.div.Tensor"]
    softmax = [
        entry(("float32", "bfloat16"), (1, 4), conditions={"dim": "last"}),
        entry(("float32", "bfloat16"), (1, 4), path="composite", conditions={"dim": "first"}).model_copy(
            update={"components": comp}
        ),
        entry(("float32",), (2, 4), strided, path="composite"),
        entry(("float16",), (1, 4), path="fallback", fallback="observed"),
        entry(("float64",), (1, 4), path="rejected", autograd=False),
        # OpInfo's softmax "with_dtype" samples cast to float64: rejected, and not promised
        entry(("float32", "bfloat16"), (1, 4), path="rejected", conditions={"dtype": "float64"}, autograd=False),
    ]
    elementwise = [
        entry(floats, (0, 4)),
        entry(("int32", "int64", "bool"), (0, 4), autograd=False),
        entry(("float32",), (1, 4), strided, path="fallback", fallback="observed"),
        entry(("float64", "complex64"), (0, 4), path="rejected", autograd=False),
    ]
    return matrix(
        {
            "aten.add.Tensor": elementwise,
            "aten.mul.Tensor": elementwise,
            "aten.sum.default": [entry(floats, (0, 4)), entry(("float32",), (1, 4), strided)],
            "aten.sum.dim_IntList": [entry(floats, (1, 4)), entry(("float32",), (1, 4), strided)],
            "aten.mm.default": [entry(floats, (2, 2)), entry(("float32",), (2, 2), strided)],
            "aten.bmm.default": [entry(floats, (3, 3)), entry(("float32",), (3, 3), strided)],
            "aten.addmm.default": [entry(floats, (2, 2)), entry(("float32",), (2, 2), strided)],
            "aten.linear.default": [entry(floats, (2, 3)), entry(floats, (1, 1), path="fallback", fallback="observed")],
            "aten.softmax.int": softmax,
            "aten.sort.default": [entry(("float32", "int64"), (1, 3), path="fallback", fallback="observed")],
            "aten.topk.default": [entry(("float32",), (1, 3), path="fallback", fallback="observed")],
            "aten.addcmul.default": [
                entry(("float32",), (1, 3), path="rejected", autograd=False),
                entry(("float32",), (1, 3), path="decomposed", mode="compile", autograd=False),
            ],
            "aten.cumsum.default": [entry(("float32", "bfloat16"), (1, 3))],
        },
        runtime_checks=checks(),
    )


def g1_matrix() -> Matrix:
    """refaccel g1: no bf16 kernels (bf16 rejected), and mul returns wrong values on non-contiguous input."""
    g2 = g2_matrix()
    ops: dict[str, list[Entry]] = {}
    for op, entries in g2.operators.items():
        out = []
        for e in entries:
            bf16 = DType.bfloat16 in e.dtypes
            rest = [d for d in e.dtypes if d is not DType.bfloat16]
            if rest:
                out.append(e.model_copy(update={"dtypes": rest}))
            if bf16:
                out.append(
                    entry(("bfloat16",), (e.ranks.min, e.ranks.max), [str(x) for x in e.layouts], path="rejected",
                          mode=str(e.mode), conditions=dict(e.conditions), autograd=False,
                          error=f"refaccel g1: {op} has no bfloat16 kernel")
                )
        ops[op] = out
    mul = [e for e in ops["aten.mul.Tensor"] if Layout.noncontiguous not in e.layouts]
    mul.append(entry(("float32",), (1, 4), ("noncontiguous",), outcome="wrong", max_abs_err=0.75))
    mul.append(entry(("float32",), (1, 4), ("transposed",), path="fallback", fallback="observed"))
    ops["aten.mul.Tensor"] = mul
    return matrix(ops, generation="g1", runtime_checks=checks())
