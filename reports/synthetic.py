"""A synthetic matrix the size of a full CPU run over all of OpInfo, for benchmarks and tests.

Real probes of ~700 OpInfo operators x 11 dtypes take hours; the report's size and speed only
depend on the shape of the matrix, so this builds one of that shape, deterministically from a
seed, with every path, wrong and faulted outcomes, conditions, compile-mode entries, component
ops, fallback evidence and long error messages; ``hostile=True`` puts markup into an op name, an
error message, a runtime check, a device name and a skipped task::

    >>> m = synthetic_matrix(n_ops=20, seed=1)
    >>> len(m.operators)
    20
"""

from __future__ import annotations

import random

from opmatrix.schema import (
    DEFAULT_DTYPES,
    Autograd,
    BackendId,
    CheckResult,
    DeviceInfo,
    DType,
    Entry,
    ErrorInfo,
    Evidence,
    ExecPath,
    FallbackEvidence,
    FallbackState,
    Layout,
    Matrix,
    Mode,
    Numerics,
    OpSource,
    Outcome,
    RankRange,
    ReferenceKind,
    Runtime,
    RuntimeCheck,
    Samples,
)

__all__ = ["HOSTILE", "synthetic_matrix"]

#: A string that must always render as text.
HOSTILE = "<script>alert(1)</script>\"'</textarea>"

_GROUPS = {
    "float": ["float32", "float64", "float16", "bfloat16", "complex64"],
    "int": ["int64", "int32", "int16", "int8", "uint8"],
    "bool": ["bool"],
}
_BASES = ["add", "mul", "softmax", "mm", "sum", "sort", "topk", "cumsum", "linear", "conv", "norm", "pow", "where"]
_OVERLOADS = ["default", "Tensor", "Scalar", "int", "dim", "out"]
_MAIN_LAYOUTS = [Layout.contiguous, Layout.noncontiguous, Layout.transposed, Layout.storage_offset, Layout.expanded]
# weights of the paths a dtype group takes on a CPU-like backend: mostly native
_PATH_WEIGHTS = [(ExecPath.native, 70), (ExecPath.composite, 12), (ExecPath.decomposed, 3),
                 (ExecPath.fallback, 5), (ExecPath.rejected, 10)]


def _entry(rng: random.Random, op: str, dtypes: list[str], path: ExecPath, **extra: object) -> Entry:
    probed = rng.randint(4, 60)
    wrong = path is not ExecPath.rejected and rng.random() < 0.03
    fault = not wrong and rng.random() < 0.01
    outcome = Outcome.wrong if wrong else (rng.choice([Outcome.crashed, Outcome.hung, Outcome.oom]) if fault else Outcome.ok)
    fields: dict[str, object] = dict(
        dtypes=[DType(d) for d in dtypes],
        ranks=RankRange(min=rng.choice([0, 0, 1]), max=rng.choice([4, 5, 6])),
        layouts=list(_MAIN_LAYOUTS),
        path=path,
        outcome=outcome,
        samples=Samples(probed=probed, passed=0 if wrong or fault else probed),
        fallback=FallbackEvidence(state=FallbackState.not_observed, source="profiler"),
    )
    if path is not ExecPath.rejected:
        err = rng.random() * 1e-3
        fields["numerics"] = Numerics(
            atol=1e-5, rtol=1.3e-6, max_abs_err=err * (100 if wrong else 1), max_rel_err=err,
            reference=ReferenceKind.cpu_upcast if "float16" in dtypes else ReferenceKind.cpu_same_dtype,
        )
        fields["autograd"] = Autograd(path=path, outcome=Outcome.ok, max_abs_err=err)
    if path in (ExecPath.composite, ExecPath.decomposed, ExecPath.fallback):
        fields["components"] = [f"aten.{rng.choice(_BASES)}.default" for _ in range(rng.randint(2, 4))]
    if path is ExecPath.fallback:
        fields["fallback"] = FallbackEvidence(
            state=FallbackState.observed, ops=[f"aten.{rng.choice(_BASES)}.out"], source="profiler host copies"
        )
    if path is ExecPath.rejected or fault:
        fields["error"] = ErrorInfo(
            type="RuntimeError" if not fault else "ProbeFault",
            message=f'"{op}" not implemented for \'{dtypes[0]}\' on this device; supported dtypes are '
            "float32, float64 and bfloat16 (see the backend's operator registration)",
            actionable=not fault,
            signal="SIGSEGV" if outcome is Outcome.crashed else None,
        )
    fields.update(extra)
    return Entry.model_validate(fields)


def _op_entries(rng: random.Random, op: str, dtypes: list[str]) -> list[Entry]:
    entries: list[Entry] = []
    paths, weights = zip(*_PATH_WEIGHTS, strict=True)
    for group in _GROUPS.values():
        members = [d for d in group if d in dtypes]
        if not members:
            continue
        # low-precision dtypes often behave differently: split them off sometimes
        split = [members] if len(members) < 3 or rng.random() < 0.6 else [members[:2], members[2:]]
        for part in split:
            path = rng.choices(paths, weights)[0]
            if path is ExecPath.native and rng.random() < 0.25:
                entries.append(_entry(rng, op, part, ExecPath.native, conditions={"dim": "last"}))
                entries.append(_entry(rng, op, part, ExecPath.composite, conditions={"dim": "first"},
                                      components=["aten.transpose.int", "aten.contiguous.default"]))
            else:
                entries.append(_entry(rng, op, part, path))
            if "float32" in part and rng.random() < 0.5:
                entries.append(_entry(rng, op, part, path, layouts=[Layout.channels_last],
                                      ranks=RankRange(min=4, max=4)))
            if rng.random() < 0.3:
                entries.append(_entry(rng, op, part, ExecPath.native, mode=Mode.compile))
    return entries


def synthetic_matrix(
    n_ops: int = 700,
    dtypes: tuple[str, ...] = DEFAULT_DTYPES,
    seed: int = 0,
    hostile: bool = False,
) -> Matrix:
    """A deterministic matrix of ``n_ops`` operators over ``dtypes``; ``hostile`` adds hostile text."""
    rng = random.Random(seed)
    ops: dict[str, list[Entry]] = {}
    for i in range(n_ops):
        op = f"aten.{_BASES[i % len(_BASES)]}_{i:03d}.{_OVERLOADS[i % len(_OVERLOADS)]}"
        ops[op] = _op_entries(rng, op, list(dtypes))
    if hostile:
        op = "aten." + HOSTILE.replace(" ", "") + ".default"
        ops[op] = [
            _entry(rng, op, ["float32"], ExecPath.rejected,
                   error=ErrorInfo(type="RuntimeError", message=HOSTILE, actionable=False), note=HOSTILE)
        ]
    checks = [
        RuntimeCheck(name="import", level=0, result=CheckResult.passed, evidence=HOSTILE if hostile else "import ok"),
        RuntimeCheck(name="driver", level=0, result=CheckResult.passed, evidence="driver 2.4.1 (needs >= 2.0)"),
        RuntimeCheck(name="allocation", level=1, result=CheckResult.passed, evidence="1 GiB in 4 MiB blocks"),
        RuntimeCheck(name="fork_after_init", level=1, result=CheckResult.failed, evidence="child hung",
                     advice="use the spawn start method"),
    ]
    return Matrix(
        backend=BackendId(name="synthetic", device_type="cpu", dispatch_key="CPU", generation="s1"),
        evidence=Evidence(
            opmatrix_version="0.1.0", torch_version="2.13.0+cpu", python="3.11.7", platform="Linux-x86_64",
            op_source=OpSource(name="opinfo", entries=n_ops, hash=f"synthetic-{seed}"),
            command=f"synthetic_matrix(n_ops={n_ops}, seed={seed})",
            started="2026-11-29T00:00:00Z", finished="2026-11-29T03:00:00Z",
        ),
        runtime=Runtime(
            devices=[DeviceInfo(index=0, name="Synthetic CPU" + (HOSTILE if hostile else ""), properties={"cores": 2})],
            claimed_dtypes=[DType(d) for d in dtypes],
            checks=checks,
        ),
        operators=ops,
        skipped={f"{next(iter(ops))}|complex32": "no OpInfo sample for this dtype" + (HOSTILE if hostile else "")},
        not_run={f"{next(iter(ops))}|float32 3/transposed/eager":
                 "not run: sample 3 crashed the worker in unit 3/contiguous/eager" + (HOSTILE if hostile else "")},
    )
