"""Roll-up rules for several results of one cell, and the compression key."""

from __future__ import annotations

import itertools

import pytest

from opmatrix.matrix.rollup import RESULT_KEY_FIELDS, aggregate, normalise, result_key, rollup
from opmatrix.schema import Autograd, CellResult, ErrorInfo, ExecPath, FallbackEvidence, Outcome, Samples

from .test_matrix_records import result


def test_worst_path_wins_and_the_counts_show_the_split():
    r = rollup([result("native", probed=3), result("composite", probed=1), result("native", probed=2)])
    assert r.path is ExecPath.composite
    assert r.mixed
    assert r.samples == Samples(probed=6, passed=6, by_path={ExecPath.native: 5, ExecPath.composite: 1})


def test_mixed_inputs_merge_their_per_path_counts():
    a = CellResult(path=ExecPath.fallback, outcome=Outcome.ok, mixed=True,
                   samples=Samples(probed=4, passed=4, by_path={ExecPath.native: 3, ExecPath.fallback: 1}))
    r = rollup([a, result("native", probed=2)])
    assert r.samples.by_path == {ExecPath.native: 5, ExecPath.fallback: 1}


def test_wrong_outranks_ok_and_faults_are_kept():
    assert rollup([result("native"), result("native", "wrong", passed=1)]).outcome is Outcome.wrong
    crash = ErrorInfo(type="WorkerCrashed", message="SIGABRT", actionable=False, signal="SIGABRT")
    r = rollup([result("native", "wrong"), result("native", "crashed", error=crash), result("rejected")])
    assert (r.outcome, r.path, r.error) == (Outcome.crashed, ExecPath.rejected, crash)


def test_partial_support_is_kept_as_passed_over_probed():
    r = rollup([result("native", probed=5, passed=5), result("native", "wrong", probed=3, passed=1)])
    assert (r.samples.passed, r.samples.probed) == (6, 8)


def test_composite_whose_component_fell_back_is_fallback():
    seen = FallbackEvidence(state="observed", ops=["aten::sort.stable"], source="counter")
    r = normalise(result("composite", components=["aten.sort.stable", "aten.gather.default"], fallback=seen))
    assert r.path is ExecPath.fallback
    assert r.components == ["aten.sort.stable", "aten.gather.default"] and r.fallback.ops == ["aten::sort.stable"]
    unnamed = normalise(result("composite", fallback=FallbackEvidence(state="observed")))
    assert unnamed.path is ExecPath.fallback and "which one was not recorded" in (unnamed.note or "")
    assert normalise(result("composite")).path is ExecPath.composite
    # applied inside a roll-up too
    assert rollup([result("native"), result("composite", fallback=seen)]).path is ExecPath.fallback


def test_errors_max_components_and_fallback_ops_union_flaky_ors():
    a = result("composite", err=1e-6, components=["aten.exp.default", "aten.div.Tensor"], flaky=True,
               autograd=Autograd(path="native", outcome="ok", max_abs_err=1e-7),
               fallback=FallbackEvidence(state="not_observed", source="counter"))
    b = result("composite", err=3e-6, components=["aten.mul.Tensor"],
               autograd=Autograd(path="fallback", outcome="ok", max_abs_err=2e-7),
               fallback=FallbackEvidence(state="unknown", source="profiler"))
    r = rollup([a, b])
    assert r.numerics is not None and r.numerics.max_abs_err == 3e-6
    assert r.components == ["aten.div.Tensor", "aten.exp.default", "aten.mul.Tensor"]
    assert r.flaky and not r.mixed
    assert r.autograd == Autograd(path="fallback", outcome="ok", max_abs_err=2e-7)
    assert r.fallback == FallbackEvidence(state="unknown", source="counter; profiler")
    # identical component lists keep their execution order
    assert rollup([a, a]).components == ["aten.exp.default", "aten.div.Tensor"]


def test_rollup_does_not_depend_on_input_order():
    e1 = ErrorInfo(type="RuntimeError", message="one", actionable=True)
    e2 = ErrorInfo(type="RuntimeError", message="two", actionable=True)
    inputs = [result("native", err=1e-6), result("rejected", error=e2), result("rejected", error=e1, note="n"),
              result("composite", "wrong", components=["b", "a"])]
    outs = {rollup(list(p)).model_dump_json() for p in itertools.permutations(inputs)}
    assert len(outs) == 1


def test_rollup_refuses_results_of_different_condition_groups():
    with pytest.raises(ValueError, match="different conditions"):
        rollup([result(conditions={"dim": "last"}), result(conditions={"dim": "first"})])


def test_the_compression_key_covers_every_result_field():
    """A new CellResult field must be added to result_key, or compression would merge it away."""
    assert set(CellResult.model_fields) == RESULT_KEY_FIELDS


def test_key_ignores_only_errors_and_samples():
    assert result_key(result(err=1e-6, probed=3)) == result_key(result(err=5e-6, probed=9))
    assert result_key(result()) != result_key(result(flaky=True))
    assert result_key(result()) != result_key(result(conditions={"dim": "last"}))


def test_aggregate_takes_max_error_and_sums_samples():
    r = aggregate([result(err=1e-6, probed=3, passed=2), result(err=4e-6, probed=5)])
    assert r.numerics is not None and r.numerics.max_abs_err == 4e-6
    assert (r.samples.probed, r.samples.passed) == (8, 7)


def test_notes_rolled_up_say_each_part_once() -> None:
    """Two cells' notes that share a part ("composed in Python ...", then the same with a retry
    note): the rolled-up note says the shared part once."""
    from opmatrix.matrix.rollup import _join_notes

    shared = "composed in Python from several ATen ops"
    assert _join_notes([shared, f"{shared}; eager ran without a fault in a fresh worker", None]) == (
        f"{shared}; eager ran without a fault in a fresh worker")
    assert _join_notes([None, ""]) is None
