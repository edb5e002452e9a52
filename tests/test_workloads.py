"""Levels 3/4: the workload catalog, the workload task on the cpu backend, the gate, diff and placement."""

from __future__ import annotations

import pytest
import torch

from opmatrix.ci.workloads import evaluate_workloads, judge_run
from opmatrix.matrix import MatrixIndex, build_matrix
from opmatrix.matrix.placement import compare_observed, place
from opmatrix.matrix.workloads import diff_workloads, predict_fallback
from opmatrix.probes.workloads.catalog import WORKLOADS, build, resolve_names
from opmatrix.schema import CheckResult, Outcome, WorkloadRequirement, WorkloadResult
from opmatrix.schema.workloads import HostFallback, StepResult

from .test_matrix_records import BACKEND, EVIDENCE, cells, task


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_catalog_workloads_build_seeded_and_run_on_the_cpu(name: str):
    a, b = build(name, torch.float32, seed=3), build(name, torch.float32, seed=3)
    out_a = a.run(a.model, *a.inputs) if a.run else a.model(*a.inputs)
    out_b = b.run(b.model, *b.inputs) if b.run else b.model(*b.inputs)
    assert torch.equal(out_a, out_b), "same seed, different result"
    assert a.input_desc and a.rtol > 0 and a.loss_fn is not None
    low = build(name, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in low.model.parameters())


def test_resolve_names_rejects_unknown_names():
    assert resolve_names("all") == list(WORKLOADS)
    assert resolve_names("mlp,pkg.mod:make") == ["mlp", "pkg.mod:make"]
    with pytest.raises(ValueError, match="unknown workload 'resnet'"):
        resolve_names("resnet")


def _run(name="tinygpt", ops=(), inference=CheckResult.passed, **kw) -> WorkloadResult:
    steps = {"to_device": StepResult(result=CheckResult.passed),
             "inference": StepResult(result=inference, evidence="max abs error 3 > atol", host_fallback=list(ops))}
    return WorkloadResult(workload=name, dtype="float32", outcome="ok" if inference is CheckResult.passed else "wrong",
                          steps=steps, host_fallback=HostFallback(state="observed" if ops else "not_observed",
                                                                  ops=list(ops)), **kw)


def test_gate_counts_host_fallback_ops_outside_the_allowed_patterns():
    req = WorkloadRequirement(names=["tinygpt"], max_host_fallback_ops=0, allow_host_fallback=["aten::gelu*"])
    assert judge_run(req, _run(ops=["aten::gelu.out"])) == []
    problems = judge_run(req, _run(ops=["aten::gelu.out", "aten::cumsum.out"]))
    assert len(problems) == 1 and "aten::cumsum.out" in problems[0] and "gelu" not in problems[0]
    assert judge_run(req, _run(inference=CheckResult.failed))[0].startswith("inference fail")


@pytest.mark.parametrize("outcome", ["ok", "error"])
def test_gate_judges_a_failed_step_by_its_step_and_only_when_required(outcome: str):
    """A compiled run whose training step failed (cleanly refused: outcome ok, ``rejected``; or an
    error): a requirement that does not promise training passes it, one that does names the step,
    and a worker fault always blocks."""
    data = _run(mode="compile").model_dump()
    data["steps"]["training"] = {"result": "fail", "outcome": outcome, "evidence": "rejected: no kernel",
                                 "rejected": outcome == "ok"}
    run = WorkloadResult.model_validate({**data, "outcome": outcome})
    assert judge_run(WorkloadRequirement(names=["tinygpt"], mode="compile", steps=["to_device", "inference"]), run) == []
    assert judge_run(WorkloadRequirement(names=["tinygpt"], mode="compile"), run) == []
    assert run.headline() == "ok"  # the word is the default requirement's verdict, not the worst step's
    problems = judge_run(WorkloadRequirement(names=["tinygpt"], mode="compile", steps=["training"]), run)
    assert len(problems) == 1 and problems[0].startswith("training fail: rejected")
    crashed = WorkloadResult.model_validate({**data, "outcome": "crashed"})
    assert judge_run(WorkloadRequirement(names=["tinygpt"], mode="compile", steps=["inference"]), crashed)[0].startswith("crashed")


@pytest.mark.parametrize(("inference", "word"), [({"result": "fail", "outcome": "ok", "rejected": True}, "rejected"),
                                                 ({"result": "fail", "outcome": "wrong"}, "wrong"),
                                                 ({"result": "fail", "outcome": "error"}, "error")])
def test_headline_word_is_what_the_gate_says_of_the_run(inference: dict[str, object], word: str):
    """A gated step (inference) that did not pass gives the word, and the default requirement blocks it"""
    data = _run().model_dump()
    data["steps"]["inference"] = {**inference, "evidence": "no kernel"}
    run = WorkloadResult.model_validate({**data, "outcome": inference["outcome"]})
    assert run.headline() == word
    assert judge_run(WorkloadRequirement(names=["tinygpt"]), run) != []


def test_a_cleanly_refused_step_is_rejected_not_an_error():
    """A step's clean refusal (the adapter's classify_exception says rejected: a message naming
    what is unsupported) is no fault, as for an operator cell: result fail, outcome ok,
    ``rejected``; a message that names nothing ("internal error 0x1f") stays an error."""
    from opmatrix.backend import get_adapter
    from opmatrix.probes.workloads.steps import guarded

    adapter = get_adapter("cpu")

    def refuse() -> StepResult:
        raise RuntimeError("aten::_native_batch_norm_legit is not supported inside compiled graphs")

    def broken() -> StepResult:
        raise RuntimeError("internal error 0x1f")

    refused, failed = guarded(adapter, refuse), guarded(adapter, broken)
    assert (refused.result, refused.outcome, refused.rejected) == (CheckResult.failed, Outcome.ok, True), refused
    assert refused.evidence.startswith("rejected: RuntimeError: aten::_native_batch_norm_legit is not supported")
    assert (failed.result, failed.outcome, failed.rejected) == (CheckResult.failed, Outcome.error, False), failed


def test_gate_workload_missing_from_the_matrix_is_unknown_not_passed():
    matrix = build_matrix([], backend=BACKEND, evidence=EVIDENCE)
    [result] = evaluate_workloads(WorkloadRequirement(names=["mlp"]), rid="L3.w", level=3, blocking=True, matrix=matrix)
    assert result.status.value == "unknown" and result.blocks and "--suites workloads" in result.message


def test_matrix_predicts_observed_fallback_from_operator_entries():
    records = [task("cumsum", "int64", cells("aten.cumsum.default", "int64", range(1, 3), path="fallback")),
               task("add", "int64", cells("aten.add.Tensor", "int64", range(1, 3)))]
    ops = build_matrix(records, backend=BACKEND, evidence=EVIDENCE).operators
    [r] = predict_fallback([_run(ops=["aten::cumsum.out", "aten::gelu.out"])], ops)
    assert r.host_fallback.predicted == ["aten::cumsum.out"]
    assert predict_fallback([_run(ops=["aten::cumsum.out"])], {})[0].host_fallback.predicted is None


def test_diff_reports_a_workload_regression_and_new_host_fallback():
    changes = diff_workloads([_run(), _run("mlp")], [_run(inference=CheckResult.failed), _run("mlp", ops=["aten::sort"])])
    assert any(line.startswith("tinygpt/float32/eager: ok -> wrong") for line in changes["worse"])
    assert any("mlp" in line and "aten::sort" in line for line in changes["worse"])


def test_placement_puts_fallback_ops_on_the_host_and_counts_transfers():
    records = [task("cumsum", "int64", cells("aten.cumsum.default", "int64", range(1, 3), path="fallback")),
               task("add", "int64", cells("aten.add.Tensor", "int64", range(1, 3))),
               task("mul", "int64", cells("aten.mul.Tensor", "int64", range(1, 3)))]
    matrix = MatrixIndex(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x + 1).cumsum(1) * 2

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, tracing_mode="fake", pre_dispatch=True)(torch.ones(2, 3, dtype=torch.int64))
    report = place(gm, matrix, workload="fn", dtype="int64")
    assert report.host_ops() == ["aten::cumsum"]
    assert report.transfers == 2  # add's output to the host, cumsum's back to the device
    assert report.segments == 2
    compare_observed(report, ["aten::cumsum.out"])
    assert report.comparison == {"agree": ["aten::cumsum"], "missed": [], "extra": []}
    assert "cumsum" in report.text()


@pytest.mark.slow
def test_probe_runs_a_workload_on_the_cpu_backend_in_the_isolated_runner(tmp_path):
    from opmatrix.cli import main
    from opmatrix.schema import load_matrix

    rc = main(["probe", "--backend", "cpu", "--suites", "workloads", "--workloads", "mlp", "--workload-dtypes", "float32",
               "--workload-modes", "eager", "--out", str(tmp_path), "--quiet", "--workers", "1"])
    assert rc == 0
    [run] = load_matrix(tmp_path / "matrix.yaml").workloads
    assert run.key() == ("mlp", "float32", "eager") and run.outcome.value == "ok"
    assert {k.value for k, v in run.steps.items() if v.result is CheckResult.passed} == {
        "to_device", "inference", "training", "state_dict"}


@pytest.mark.slow
def test_cpu_workload_compiles_with_inductor(tmp_path, monkeypatch):
    """--compile-backend replaces the adapter's (aot_eager on cpu): inductor's own kernels, compiled
    == eager, and the record says which backend ran; a second process compiling the same workload
    reuses inductor's on-disk cache (an empty cache folder for this test: the worker fills it)."""
    from opmatrix.cli import main
    from opmatrix.schema import load_matrix

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    out = tmp_path / "out"  # the cache folder is not the probe's: --out must be empty or opmatrix's
    rc = main(["probe", "--backend", "cpu", "--suites", "workloads", "--workloads", "mlp", "--workload-dtypes", "float32",
               "--workload-modes", "compile", "--compile-backend", "inductor", "--out", str(out), "--quiet",
               "--workers", "1"])
    assert rc == 0
    [run] = load_matrix(out / "matrix.yaml").workloads
    assert run.outcome.value == "ok" and run.compile is not None and run.compile.backend == "inductor"
    assert run.compile.speedup is not None and run.compile.compile_seconds > 0
    cache = run.compile.cache
    assert cache is not None and cache.result.value == "pass" and cache.hits >= 1 and cache.misses == 0, cache
    assert "a second process reused the first process's cache" in cache.evidence


def test_the_compile_cache_check_says_when_a_backend_keeps_none():
    from types import SimpleNamespace

    from opmatrix.probes.workloads.cache import second_process

    ctx = SimpleNamespace(backend="cpu", device=None, adapter=SimpleNamespace(generation=None))
    payload = {"workload": "mlp", "dtype": "float32", "seed": 0}
    assert second_process(ctx, payload, "aot_eager").result.value == "not_applicable"
    other = second_process(ctx, payload, "openxla")
    assert other.result.value == "unknown" and "openxla" in other.evidence


def tiny_factory():
    """A user workload: (model, inputs) without a loss function."""
    return torch.nn.Linear(4, 2), (torch.randn(3, 4),)


def test_user_factory_builds_a_workload_in_the_asked_dtype():
    wl = build("tests.test_workloads:tiny_factory", torch.float16)
    assert wl.model.weight.dtype == torch.float16 and wl.inputs[0].dtype == torch.float16
    assert wl.loss_fn is None and wl.batch == 3 and "tests.test_workloads:tiny_factory" in wl.input_desc


def test_explain_traces_a_catalog_workload_without_a_device(tmp_path):
    from opmatrix.explanation import explain
    from opmatrix.schema import dump_model

    records = [task("gelu", "float32", cells("aten.gelu.default", "float32", range(1, 4), path="fallback")),
               task("linear", "float32", cells("aten.linear.default", "float32", range(1, 4)))]
    dump_model(build_matrix(records, backend=BACKEND, evidence=EVIDENCE), tmp_path / "m.yaml")
    report = explain(str(tmp_path / "m.yaml"), "mlp")
    assert report.host_ops() == ["aten::gelu"]
    assert report.transfers >= 2 and report.segments >= 2
    assert "aten.layer_norm.default" in report.unknown_ops()  # never probed: said, not guessed
    assert report.comparison is None  # the matrix holds no run of mlp
    # FLOPs per node from the fake tensors: the linears carry them all (2 x batch x in x out each)
    linears = [n for n in report.nodes if n.op == "aten.linear.default"]
    assert linears and all(n.flops > 0 and n.flops % 2 == 0 for n in linears)
    assert sum(n.flops for n in linears) == sum(n.flops for n in report.nodes)
    assert report.flop_shares() == {"device": 1.0, "host": 0.0, "unknown": 0.0}
    assert "100.0% device" in report.text() and report.to_json()["flops"] == sum(n.flops for n in linears)


def test_suites_default_aliases_and_errors():
    from opmatrix.probes.options import ProbeOptions
    from opmatrix.schema import UsageError

    def suites(**kw):
        return ProbeOptions(backend="cpu", **kw).chosen_suites()

    assert suites() == {"runtime", "ops"}
    assert suites(workloads=("mlp",), no_runtime=True) == {"ops", "workloads"}
    assert suites(suites=("ops", "workloads"), runtime_only=True) == {"runtime"}
    with pytest.raises(UsageError, match="unknown value 'workload'"):
        suites(suites=("workload",))


def test_summary_names_the_step_that_gave_the_runs_outcome():
    """A run whose inference was refused and whose state_dict step raised reads ``rejected`` (the gate
    blocks it for inference, a step every requirement asks for unless told otherwise) and shows the
    refusal; a run whose only failing step is one the gate does not ask for reads ``ok`` and names it."""
    from opmatrix.probes.workloads.cli import summary_lines

    data = _run(mode="eager").model_dump()
    data["steps"]["inference"] = {"result": "fail", "outcome": "ok", "rejected": True,
                                  "evidence": "rejected: NotImplementedError: convolution_overrideable not implemented"}
    data["steps"]["state_dict"] = {"result": "fail", "outcome": "error",
                                   "evidence": "error: AttributeError: no attribute 'device'"}
    line = summary_lines([WorkloadResult.model_validate({**data, "outcome": "error"})])[1]
    assert "eager: rejected (inference: rejected: NotImplementedError" in line, line
    data["steps"]["inference"] = {"result": "pass", "outcome": "ok"}
    line = summary_lines([WorkloadResult.model_validate({**data, "outcome": "error"})])[1]
    assert "eager: ok (state_dict: error: AttributeError" in line, line
