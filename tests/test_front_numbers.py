"""One set of numbers: the CLI, the demo and the site count through count_matrix, labelled by mode;
an unchanged failure is not "better"; the gate's verdict reads in plain words."""

from __future__ import annotations

from opmatrix.matrix.frame import coverage_text
from opmatrix.matrix.workloads import diff_workloads
from opmatrix.reports.chart import coverage_chart
from opmatrix.reports.summary import coverage
from opmatrix.reports.synthetic import synthetic_matrix
from opmatrix.reports.verdict import plain_reasons, verdict_view
from opmatrix.schema import (
    CheckResult,
    DType,
    ExecPath,
    GateResult,
    Layout,
    Mode,
    Outcome,
    WorkloadResult,
    count_matrix,
)
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status, Verdict
from opmatrix.schema.workloads import StepResult


def test_site_coverage_chart_and_demo_text_share_count_matrix():
    m = synthetic_matrix(n_ops=40, seed=3)
    counted, cov = count_matrix(m), coverage(m)
    assert cov.total == counted.cells == m.cell_count()
    for path in ExecPath:
        assert cov.path_total(path) == counted.cells_by_path[path]
    assert set(cov.by_mode) == {Mode.eager, Mode.compile} and cov.modes_text == counted.modes_text()
    assert counted.modes_text().startswith("all modes: eager ")
    chart = coverage_chart(cov)
    assert [p.mode for p in chart.panels] == ["eager", "compile"]
    for panel in chart.panels:
        assert panel.total == counted.cells_by_mode[Mode(panel.mode)]
        for bar in panel.bars:
            assert sum(s.count for s in bar.segments) == counted.count(mode=Mode(panel.mode), dtype=DType(bar.dtype))
    text = coverage_text(m)
    assert f"{counted.cells} cells ({counted.modes_text()})" in text.splitlines()[0]
    assert f"cells per dtype and path, compile ({counted.cells_by_mode[Mode.compile]} cells):" in text
    assert counted.line().endswith(counted.modes_text()) or "; not ok:" in counted.line()


def _wl(outcome: str, failed_steps: int) -> WorkloadResult:
    steps = {"to_device": StepResult(result=CheckResult.passed)}
    names = ["inference", "training", "state_dict"]
    for name in names[:failed_steps]:
        steps[name] = StepResult(result=CheckResult.failed, outcome=Outcome.error, evidence="error")
    for name in names[failed_steps:]:
        steps[name] = StepResult(result=CheckResult.passed)
    return WorkloadResult(workload="cnn", dtype="bfloat16", mode="compile", outcome=outcome, steps=steps)


def test_an_unchanged_failure_is_not_better():
    changes = diff_workloads([_wl("error", 2)], [_wl("error", 1)])
    assert changes["better"] == [] and changes["worse"] == []
    assert diff_workloads([_wl("error", 1)], [_wl("ok", 0)])["better"] == ["cnn/bfloat16/compile: error -> ok"]
    assert diff_workloads([_wl("error", 1)], [_wl("error", 2)])["worse"]  # more failed steps is still worse


def _cell(op: str, dtype: str, layout: str = "contiguous", **kw: object) -> CellRef:
    base = dict(op=op, dtype=DType(dtype), rank=2, layout=Layout(layout), path=ExecPath.rejected, outcome=Outcome.ok,
                status=CellStatus.failed, reason="path rejected is worse than composite")
    return CellRef(**{**base, **kw})


def test_failing_cells_group_into_plain_sentences():
    cells = [_cell("aten.mm.default", "bfloat16"), _cell("aten.addmm.default", "bfloat16"),
             _cell("aten.bmm.default", "bfloat16"), _cell("aten.bmm.default", "float32"),
             _cell("aten.mul.Tensor", "float32", "transposed", path=ExecPath.native, outcome=Outcome.wrong),
             _cell("aten.add.Tensor", "float32", status=CellStatus.passed)]
    req = RequirementResult(id="L2.x", level=2, kind="operators", title="t", status=Status.failed, blocking=True,
                            message="1/6 cells pass", cells=cells)
    assert plain_reasons(req) == ["addmm, mm are rejected for bfloat16", "bmm is rejected for bfloat16, float32",
                                  "mul.Tensor gives wrong values for float32 transposed input"]
    result = GateResult(verdict=Verdict.blocked, backend="refaccel", generation="g1", release="0.1", promised_level=2,
                        today="2026-12-03", cell_count=6, requirements=[req])
    view = verdict_view(result)
    assert view.word == "Blocked" and view.passed == 0 and view.total == 1
    assert view.reasons[0] == "L2.x: mul.Tensor gives wrong values for float32 transposed input"  # wrong values first


def test_cut_text_ends_with_an_ellipsis():
    from opmatrix.schema.text import ELLIPSIS, cut

    assert cut("short", 10) == "short"
    long = "aten::bmm.out is not supported on refaccel:0 " * 5
    out = cut(long, 60)
    assert len(out) <= 60 and out.endswith(ELLIPSIS)


def test_workload_summary_lines_say_when_they_cut():
    from opmatrix.probes.workloads.cli import summary_lines

    run = _wl("error", 0).model_copy(update={"error": "refaccel: " + "x" * 300})
    (_, line) = summary_lines([run])
    assert line.endswith("\u2026)") and "x" * 300 not in line


def test_repeated_workload_reasons_are_said_once():
    from opmatrix.ci.workloads import grouped_problems

    why = "rejected: refaccel: aten::bmm.out is not supported on refaccel:0 " + "(details) " * 40
    found = [(d, f"{step} fail: {why}") for d in ("float32", "float16") for step in ("inference", "training")]
    found.append(("bfloat16", "not in the matrix (probe with --suites workloads)"))
    lines = grouped_problems("tinygpt", "eager", found)
    assert len(lines) == 2
    assert lines[0].startswith("tinygpt float32, float16 eager: inference, training fail: rejected: refaccel: aten::bmm")
    assert lines[0].endswith("\u2026") and len(lines[0]) < 330
    assert lines[1] == "tinygpt bfloat16 eager: not in the matrix (probe with --suites workloads)"


def _perf_dirs(tmp_path):
    from opmatrix.schema import dump_model

    from .test_perf import _record, _samples

    now, before = tmp_path / "now", tmp_path / "before"
    now.mkdir()
    before.mkdir()
    dump_model(_record(_samples(1e-4, seed=1), rid="op.add.eager.float32"), before / "add.yaml")
    dump_model(_record(_samples(1e-4, seed=2), rid="op.add.eager.float32"), now / "add.yaml")
    dump_model(_record(_samples(1e-4, seed=3), rid="op.mm.eager.float32"), before / "mm.yaml")
    dump_model(_record(_samples(1.3e-4, seed=4), rid="op.mm.eager.float32"), now / "mm.yaml")
    dump_model(_record(_samples(2e-4, seed=5), rid="op.new.eager.float32"), now / "new.yaml")
    return now, before


def test_perf_page_draws_each_records_interval_against_its_baseline(tmp_path, example_matrix_path):
    from opmatrix.ci.perf import compare_records
    from opmatrix.reports.perf import load_record_dir, perf_view
    from opmatrix.schema.perf import PerfRequirement

    from .conftest import run_cli

    now, before = _perf_dirs(tmp_path)
    view = perf_view(load_record_dir(str(now)), load_record_dir(str(before)))
    rows = {r.id: r for r in view.rows}
    assert rows["op.mm.eager.float32"].low > 1.2 and rows["op.mm.eager.float32"].verdict.startswith("slower")
    assert rows["op.add.eager.float32"].low < 1.0 < rows["op.add.eager.float32"].high
    assert rows["op.new.eager.float32"].point is None and rows["op.new.eager.float32"].note.startswith("new")
    # the same interval the gate judges
    gate_says = compare_records(load_record_dir(str(now))["op.mm.eager.float32"],
                                load_record_dir(str(before))["op.mm.eager.float32"], PerfRequirement())[1]
    assert f"[{rows['op.mm.eager.float32'].low:.3f}, {rows['op.mm.eager.float32'].high:.3f}]" in gate_says
    done = run_cli("report", str(example_matrix_path), "--records", str(now), "--baseline-records", str(before),
                   "--out", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "site" / "perf.html").read_text()
    assert html.count('class="interval') == 2 and 'class="interval slower"' in html and "<svg" in html
    assert '<a href="perf.html">Performance</a>' in (tmp_path / "site" / "index.html").read_text()
    bad = run_cli("report", str(example_matrix_path), "--baseline-records", str(before), "--out", str(tmp_path / "s2"))
    assert bad.returncode == 2 and "--baseline-records needs --records" in bad.stderr
    assert not (tmp_path / "s2").exists()
