"""The HTML support site: counts that add up, safe text, deterministic files, diff and gate pages."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from opmatrix.reports import render_site
from opmatrix.reports.gate import gate_view
from opmatrix.reports.names import page_names
from opmatrix.reports.summary import coverage
from opmatrix.reports.synthetic import HOSTILE, synthetic_matrix
from opmatrix.schema import Entry, ErrorInfo, ExecPath, FallbackEvidence, FallbackState, Matrix, load_matrix

from .conftest import EXAMPLES, run_cli

PATHS = ["native", "composite", "decomposed", "fallback", "rejected"]


def _cell_counts(matrix: Matrix) -> Counter[tuple[str, str]]:
    """(dtype, path) -> cells, by expanding every entry (independent of the report's arithmetic)."""
    counts: Counter[tuple[str, str]] = Counter()
    for entries in matrix.operators.values():
        for entry in entries:
            for dtype, _rank, _layout, _mode in entry.cells():
                counts[(dtype.value, entry.path.value)] += 1
    return counts


def _shown_counts(index_html: str) -> dict[tuple[str, str], int]:
    found = re.findall(r'<td class="num" data-dtype="([^"]+)" data-path="([^"]+)">(\d+)</td>', index_html)
    return {(d, p): int(n) for d, p, n in found}


@pytest.fixture(scope="module")
def hostile_matrix() -> Matrix:
    return synthetic_matrix(n_ops=40, seed=3, hostile=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, hostile_matrix: Matrix) -> Path:
    out = tmp_path_factory.mktemp("site")
    render_site(hostile_matrix, out, baseline=synthetic_matrix(n_ops=40, seed=4), command="opmatrix report m.yaml --out site")
    return out


def test_coverage_counts_equal_the_expanded_cells(hostile_matrix: Matrix):
    """The coverage numbers are the matrix's cells, per dtype and path, adding up to cell_count()."""
    cov = coverage(hostile_matrix)
    expected = _cell_counts(hostile_matrix)
    got = Counter({(d.value, p.value): cov.count(d, p) for d in cov.dtypes for p in ExecPath if cov.count(d, p)})
    assert got == expected
    assert cov.total == hostile_matrix.cell_count()


def test_index_shows_the_matrix_counts_and_every_path(site: Path, hostile_matrix: Matrix):
    """The index's coverage table is the matrix's counts; the five paths are all named."""
    html = (site / "index.html").read_text()
    shown = {k: v for k, v in _shown_counts(html).items() if v}
    assert shown == dict(_cell_counts(hostile_matrix))
    assert f'<td class="num" id="cells-total">{hostile_matrix.cell_count()}</td>' in html
    for path in PATHS:
        assert f'<span class="swatch p-{path}">' in html, path
    assert html.count("<tr data-op=") == len(hostile_matrix.operators)


def test_hostile_strings_render_as_text(site: Path):
    """An op name and an error message carrying markup never reach a page as markup."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 40
    for page in pages:
        text = page.read_text()
        assert "<script>alert" not in text, page
        assert "</textarea>" not in text, page
        assert len(re.findall(r"<script\b", text)) <= 1, page  # only our own site.js
    index = (site / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&lt;/textarea&gt;" in index
    hostile_pages = [p for p in (site / "ops").iterdir() if "script" in p.name]
    assert len(hostile_pages) == 1
    assert re.fullmatch(r"[A-Za-z0-9._-]+\.html", hostile_pages[0].name)
    op_page = hostile_pages[0].read_text()
    assert "<pre>&lt;script&gt;alert(1)&lt;/script&gt;" in op_page


def test_page_names_are_safe_unique_and_stable():
    """Page names keep readable names, hash the rest, and never collide, even ignoring case."""
    names = ["aten.add.Tensor", "aten.add.tensor", "aten.<script>.x", "aten./etc/passwd", "..", "a" * 300, "aten.a b"]
    pages = page_names(names)
    assert pages["aten.<script>.x"] != pages["aten./etc/passwd"]
    assert len({p.casefold() for p in pages.values()}) == len(names)
    for page in pages.values():
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.html", page) and len(page) < 120, page
    assert page_names(["aten.softmax.int"]) == {"aten.softmax.int": "aten.softmax.int.html"}
    assert page_names(reversed(names)) == pages


def test_output_is_deterministic_and_written_only_when_changed(tmp_path: Path):
    """A second render writes nothing; pages carry the regenerating command; stale pages go."""
    matrix = synthetic_matrix(n_ops=12, seed=5)
    first = render_site(matrix, tmp_path, command="opmatrix report m.yaml --out site")
    assert first.written
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    second = render_site(matrix, tmp_path, command="opmatrix report m.yaml --out site")
    assert second.written == [] and second.unchanged == len(before)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()} == before
    for page in tmp_path.rglob("*.html"):
        assert "<!-- Generated by: opmatrix report m.yaml --out site. Regenerate it with the same command" in page.read_text()
    fewer = Matrix.model_validate({**matrix.model_dump(), "operators": dict(list(matrix.operators.items())[:5])})
    third = render_site(fewer, tmp_path, command="x")
    assert len(third.removed) == 7 and len(list((tmp_path / "ops").glob("*.html"))) == 5


def test_only_evidence_timestamps(site: Path, hostile_matrix: Matrix):
    """Nothing clock-like appears in the site except the evidence block's own timestamps."""
    stamps = set()
    for page in site.rglob("*.html"):
        stamps |= set(re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d)?Z?", page.read_text()))
    assert stamps == {hostile_matrix.evidence.started, hostile_matrix.evidence.finished}


def test_site_needs_no_network(site: Path):
    """No page or asset loads anything from a remote address."""
    for path in site.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), path
            assert "@import" not in text and "url(http" not in text, path


def _with(matrix: Matrix, op: str, **changes: object) -> Matrix:
    entries = [e.model_copy(update=changes) for e in matrix.operators[op]]
    return matrix.model_copy(update={"operators": {**matrix.operators, op: entries}})


def test_diff_page_lists_better_worse_new_and_removed(tmp_path: Path, example_matrix_path: Path):
    """Going native -> fallback is worse, rejected -> native better; added and dropped ops show up."""
    base = load_matrix(example_matrix_path)
    op = "aten.softmax.int"
    entries = list(base.operators[op])
    worse = entries[0].model_copy(
        update={"path": ExecPath.fallback, "fallback": FallbackEvidence(state=FallbackState.observed, ops=["aten._softmax.default"])}
    )
    better = entries[3].model_copy(update={"path": ExecPath.native, "error": None})
    current = base.model_copy(
        update={"operators": {op: [worse, entries[1], entries[2], better], "aten.mm.default": [entries[1]]}}
    )
    base = base.model_copy(update={"operators": {**base.operators, "aten.add.Tensor": [entries[2]]}})
    render_site(current, tmp_path, baseline=base)
    html = (tmp_path / "diff.html").read_text()
    assert '<b id="n-worse">8</b>' in html  # 2 dtypes x 4 ranks x 1 layout
    assert '<b id="n-better">5</b>' in html
    assert '<b id="n-new">8</b>' in html
    assert '<b id="n-removed">0</b>' in html and '<b id="n-not_probed">16</b>' in html  # add.Tensor: not probed now
    worse_section = html.split('id="worse"')[1].split("</section>")[0]
    # both sides split the cell by dim alike, so the dim=last group is compared on its own
    assert (
        '<td>dim=last</td><td class="num">8</td><td><span class="badge p-native"><b>N</b> native</span></td>'
        '<td><span class="badge p-fallback"><b>F</b> fallback</span></td>'
    ) in worse_section
    assert '<td class="nw">2\u20135</td>' in worse_section
    assert '<a href="diff.html">Changes</a>' in (tmp_path / "index.html").read_text()
    render_site(current, tmp_path)
    assert not (tmp_path / "diff.html").exists()


@pytest.mark.parametrize(
    ("data", "verdict", "passed", "rows"),
    [
        ({"verdict": "blocked", "requirements": [{"name": "level 2", "status": "fail", "detail": {"ops": 3}}]}, "blocked", False, 1),
        ({"passed": True, "results": [{"requirement": "r", "passed": True}, {"requirement": "s", "passed": True}]}, "pass", True, 2),
        ({"verdict": "PASS"}, "PASS", True, 0),
        ({}, "unknown", None, 0),
        (["not", "a", "mapping"], "unreadable", None, 0),
    ],
)
def test_gate_view_reads_any_reasonable_shape(data: object, verdict: str, passed: bool | None, rows: int):
    view = gate_view(data)
    assert (view.verdict, view.passed, len(view.rows)) == (verdict, passed, rows)


def _belongs_to(matrix: Matrix) -> dict[str, object]:
    """The fields that tie a gate result to the matrix it judged (report --gate checks them)."""
    return {"backend": matrix.backend.name, "generation": matrix.backend.generation, "matrix_digest": matrix.digest()}


def test_gate_verdict_on_the_index(tmp_path: Path, example_matrix_path: Path):
    """`--gate RESULT.json` puts the verdict and the requirement table on the index, as text."""
    gate = {"verdict": "blocked", "level": 2, "requirements": [{"name": HOSTILE, "status": "fail", "message": "float64 rejected"}],
            **_belongs_to(load_matrix(example_matrix_path))}
    (tmp_path / "gate.json").write_text(json.dumps(gate))
    proc = run_cli("report", str(example_matrix_path), "--gate", str(tmp_path / "gate.json"), "--out", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "s" / "index.html")
    html = (tmp_path / "s" / "index.html").read_text()
    assert 'class="gate fail"' in html and '<span class="verdict">blocked</span>' in html
    assert '<tr class="tone-fail"><td>2</td>' not in html  # level is a scalar field, not a column
    assert "<td>float64 rejected</td>" in html and "<script>alert" not in html


def test_gate_result_of_opmatrix_gate_shape(tmp_path: Path, example_matrix_path: Path):
    """The shape `opmatrix gate --json` writes: requirements first, nested cell lists counted, others folded."""
    cells = [{"op": "aten.softmax.int", "dtype": "float32", "rank": r, "status": "fail"} for r in range(5000)]
    gate = {
        "verdict": "blocked", "release": "0.2", "promised_level": 2, "improvement_yaml": "- level: 2\n  operators: []\n",
        "blocking": ["L2.ops.softmax: aten.softmax.int float32 rank 0: path rejected is worse than composite"] * 900,
        "requirements": [
            {"id": "L2.ops.softmax", "level": 2, "kind": "ops", "title": "softmax", "status": "fail", "blocking": True,
             "message": "6/8 cells pass", "cells": cells, "checked": 8, "failed": 2},
            {"id": "L0.check.all", "level": 0, "kind": "check", "status": "pass", "cells": [], "checked": 3, "failed": 0},
        ],
        "checks": [{"name": "identity", "status": "pass", "message": "matrix and contract are for refaccel g2"}],
        "waivers": [],
    }
    view = gate_view(gate)
    assert [t.name for t in view.tables] == ["requirements", "checks", "blocking"]
    main = view.tables[0]
    assert main.columns[:8] == ["id", "level", "kind", "title", "status", "blocking", "message", "cells"]
    assert main.rows[0].cells[7] == "5000 items" and main.rows[0].tone == "fail" and main.rows[1].tone == "pass"
    assert view.tables[2].total == 900 and len(view.tables[2].rows) == 200
    (tmp_path / "gate.json").write_text(json.dumps({**gate, **_belongs_to(load_matrix(example_matrix_path))}))
    site = tmp_path / "site"
    assert run_cli("report", str(example_matrix_path), "--gate", str(tmp_path / "gate.json"), "--out", str(site)).returncode == 0
    html = (site / "index.html").read_text()
    assert "<summary>blocking (900)</summary>" in html and "… and 700 more in the gate's JSON." in html
    assert "<dt>improvement yaml</dt><dd><details><summary>3 lines</summary><pre>- level: 2\n  operators: []\n</pre>" in html
    assert len(html) < 200_000


def test_cli_rejects_bad_inputs_with_exit_2(tmp_path: Path, example_matrix_path: Path):
    """A broken matrix or gate file is invalid input: exit 2 and a message naming the file."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nbackend: {name: x}\n")
    proc = run_cli("report", str(bad), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and str(bad) in proc.stderr
    gate = tmp_path / "gate.json"
    gate.write_text("{not json")
    proc = run_cli("report", str(example_matrix_path), "--gate", str(gate), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{gate}:1: not JSON: Expecting property name enclosed in double quotes"


def test_full_size_index_stays_under_3_mb(tmp_path: Path):
    """The index of a matrix the size of all of OpInfo x 11 dtypes stays under 3 MB."""
    render_site(synthetic_matrix(n_ops=700), tmp_path)
    assert (tmp_path / "index.html").stat().st_size < 3_000_000


def test_example_matrix_site(tmp_path: Path):
    """The seed example renders: its rejected float64 cells show the error text on the op page."""
    matrix = load_matrix(EXAMPLES / "softmax-matrix.yaml")
    render_site(matrix, tmp_path)
    page = (tmp_path / "ops" / "aten.softmax.int.html").read_text()
    assert "does not support dtype float64" in page
    assert '<span id="op-cells">37</span>' in page
    assert isinstance(matrix.operators["aten.softmax.int"][3].error, ErrorInfo)
    assert all(isinstance(e, Entry) for e in matrix.operators["aten.softmax.int"])


def test_regenerate_comment_cannot_be_closed_early(tmp_path: Path, example_matrix_path: Path):
    """A command line holding `-->` stays inside the page's header comment."""
    render_site(load_matrix(example_matrix_path), tmp_path, command="opmatrix report 'a --> <script>alert(1)</script>' --out s")
    html = (tmp_path / "index.html").read_text()
    comment = html.split("<!--", 1)[1].split("-->", 1)[0]
    assert comment.startswith(" Generated by: opmatrix report 'a --&gt; <script>alert(1)</script>' --out s.")
    assert comment.endswith("do not edit by hand. ")


def test_grid_square_shows_the_majority_path_and_the_others(example_matrix_path: Path):
    """softmax float32, contiguous (the main group): 4 native (dim=last) tie 4 composite (dim=first), the worse wins."""
    from opmatrix.reports.summary import grid_rows
    from opmatrix.schema import DType, Mode

    matrix = load_matrix(example_matrix_path)
    (row,) = grid_rows(matrix, [DType.float32, DType.float64, DType.int8], {"aten.softmax.int": "p.html"})
    f32, f64, i8 = row.cells
    assert (f32.primary, f32.others, f32.paths) == (ExecPath.composite, (ExecPath.native,), "native composite")
    assert "native \u00b7 ranks 2\u20135 \u00b7 contiguous \u00b7 dim=last" in f32.title
    assert (f64.primary, f64.others, f64.fallback, f64.wrong) == (ExecPath.rejected, (), False, False)
    assert i8 is None
    entries = matrix.operators["aten.softmax.int"]
    tie = [entries[0], entries[0].model_copy(update={"path": ExecPath.fallback, "conditions": {"dim": "first"}})]
    compiled = [e.model_copy(update={"mode": Mode.compile}) for e in tie]
    m2 = matrix.model_copy(update={"operators": {"aten.softmax.int": compiled}})
    (row,) = grid_rows(m2, [DType.float32], {"aten.softmax.int": "p.html"})
    assert row.cells[0].primary is ExecPath.fallback and row.cells[0].fallback
    assert "(compile mode only)" in row.cells[0].title


def _compat_report(backend: str) -> dict:
    def run(torch: str, mm: str) -> dict:
        return {"torch": torch, "python": "3.11.7", "environment": f"/envs/torch{torch}/bin/python",
                "checks": [{"name": "install", "ok": True, "seconds": 3.2, "detail": "import ok"},
                           {"name": "doctor", "ok": True, "seconds": 9.0, "detail": "clean"}],
                "cells": {"aten.add.Tensor float32 rank 2": "native/ok", "aten.mm.default float32 rank 2": mm}}
    return {"schema_version": 1, "kind": "compat-report", "backend": backend, "ops": ["add", "mm"],
            "measured_at": "2026-11-30T23:00:00+00:00",
            "runs": [run("2.13.0", "fallback/ok"), run("2.9.0", "native/ok")]}


def test_compat_page_lists_the_window_and_what_changed(tmp_path: Path):
    """--compat adds a page: every version's checks, oldest first, and the cells that changed."""
    import yaml

    from opmatrix.schema import dump_model

    matrix_path, report_path = tmp_path / "m.yaml", tmp_path / "compat.yaml"
    dump_model(synthetic_matrix(n_ops=4, seed=1), matrix_path)
    report_path.write_text(yaml.safe_dump(_compat_report("synthetic")))
    res = run_cli("report", str(matrix_path), "--compat", str(report_path), "--out", str(tmp_path / "site"))
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "site" / "compat.html").read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert text.index("2.9.0") < text.index("2.13.0")  # oldest first
    assert "torch 2.9.0 → 2.13.0" in text or "torch 2.9.0 &rarr; 2.13.0" in page
    assert "aten.mm.default float32 rank 2 native/ok fallback/ok" in text and "1 unchanged" in text
    assert 'href="compat.html"' in (tmp_path / "site" / "index.html").read_text()
    report_path.write_text(yaml.safe_dump(_compat_report("cpu")))  # another backend's report: refused
    res = run_cli("report", str(matrix_path), "--compat", str(report_path), "--out", str(tmp_path / "site2"))
    assert res.returncode == 2 and "compat report for backend 'cpu'" in res.stderr
    assert not (tmp_path / "site2").exists()


def test_units_not_run_are_listed_with_their_reason(site: Path, hostile_matrix: Matrix):
    """Units an earlier fault ruled out are not cells, and the index says how many and why."""
    index = (site / "index.html").read_text()
    assert hostile_matrix.not_run and f'<b id="n-not-run">{len(hostile_matrix.not_run)}</b>' in index
    assert 'id="not-run"' in index and "crashed the worker in unit 3/contiguous/eager" in index


def _sample_generation_reason() -> str:
    """The reason the probe records for OpInfo bmm.triton_optimized at int32: its sample generation
    raises after two samples (torch 2.13), from the real OpInfo through the probe's own code."""
    import torch

    from opmatrix.probes.ops.source import generate_samples, select_ops

    (entry,) = [e for e in select_ops(["bmm"]) if e.full_name == "bmm.triton_optimized"]
    said: list[str] = []
    generate_samples(entry, torch.int32, partial=said)
    assert said and said[0].startswith("OpInfo's sample generation raised after 2 samples (RuntimeError"), said
    return f"not run: {said[0]}"


def test_units_not_run_say_their_true_cause_everywhere(tmp_path: Path):
    """Units that OpInfo's sample generation never yielded are not blamed on a fault: the site (no
    alarm), the probe's and gate's lines and a query of the op say the same reason; a fault's units
    are an alarm and say which unit faulted."""
    from opmatrix.matrix.notrun import NotRunCause, not_run_groups, not_run_lines
    from opmatrix.probes.ops.faults import SkipPlan
    from opmatrix.probes.runner.task import Skip
    from opmatrix.schema import UnitId

    base = synthetic_matrix(n_ops=4, seed=3)
    reason = _sample_generation_reason()
    samples_only = base.model_copy(update={"not_run": {f"bmm.triton_optimized|{d} samples after #1": reason
                                                       for d in ("int32", "int64")}})
    render_site(samples_only, tmp_path / "s", command="opmatrix report m.yaml --out s")
    index = (tmp_path / "s" / "index.html").read_text()
    assert '<li class=""><b id="n-not-run">2</b>' in index  # counted, not an alarm
    assert "earlier fault" not in index and "OpInfo&#39;s sample generation raised after 2 samples" in index
    lines = not_run_lines(samples_only.not_run)
    assert lines[0] == "2 units not run (OpInfo's sample generation raised before yielding them: 2): no cells, never counted as probed"
    assert lines[1].startswith("  - 2 units of bmm.triton_optimized (int32, int64): OpInfo's sample generation raised after 2")

    plan = SkipPlan.from_runner({"0/contiguous/eager": Skip("crashed", "SIGSEGV")}, None)
    for uid in ("0/contiguous/eager", "0/transposed/eager"):
        plan.decide(UnitId.parse(uid))
    faulted = {f"mul|float32 {k}": v for k, v in plan.not_run.items()}
    groups = not_run_groups({**samples_only.not_run, **faulted})
    assert [g.cause for g in groups] == [NotRunCause.fault, NotRunCause.samples]  # the fault leads
    render_site(base.model_copy(update={"not_run": faulted}), tmp_path / "f", command="opmatrix report m.yaml --out f")
    index = (tmp_path / "f" / "index.html").read_text()
    assert '<li class="alarm"><b id="n-not-run">1</b>' in index and "crashed the worker in unit 0/contiguous/eager" in index


def test_a_faulted_entry_shows_its_scope_checks_and_cause(tmp_path: Path, example_matrix_path: Path):
    """The op page shows a faulted entry's fault scope, the checks it rests on and the cause chain."""
    from opmatrix.schema import FaultScope, Outcome

    base = load_matrix(example_matrix_path)
    op = "aten.softmax.int"
    entries = list(base.operators[op])
    error = ErrorInfo(type="poisoned", message="device unusable after RefaccelStreamError", actionable=False,
                      fault_scope=FaultScope.stream, scope_evidence=["same stream: fails (x)", "new stream: works"],
                      cause=["RefaccelStreamError: stream 0 unusable [status 712]", "RuntimeError: firmware record"])
    faulted = entries[0].model_copy(update={"outcome": Outcome.poisoned, "error": error, "numerics": None})
    render_site(base.model_copy(update={"operators": {op: [faulted, *entries[1:]]}}), tmp_path)
    page = (tmp_path / "ops" / f"{op}.html").read_text()
    assert '<span class="flag">scope stream</span>' in page
    assert "fault scope: <strong>stream</strong> · checked after the fault: same stream: fails (x); new stream: works" in page
    assert "cause chain: RefaccelStreamError: stream 0 unusable [status 712] ← RuntimeError: firmware record" in page
