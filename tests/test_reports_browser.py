"""The support site in a real browser: Debian's Chromium, headless, driven by Playwright.

Never downloads a browser: Chromium comes from apt (``make browser-deps``). When it is missing
these tests fail and say how to install it, rather than skipping and passing silently.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from opmatrix.reports import render_site
from opmatrix.reports.gate import gate_view
from opmatrix.reports.names import page_names
from opmatrix.reports.synthetic import HOSTILE, synthetic_matrix
from opmatrix.schema import Entry, ExecPath, Matrix, Mode, Outcome

from .conftest import ROOT

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("OPMATRIX_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is missing at {CHROMIUM}: the browser tests need Debian's chromium. "
            "Install it with `make browser-deps` (apt-get install chromium); never download a browser.",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python package playwright is missing: pip install -e '.[test]'", pytrace=False)
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class Watched:
    """A page plus everything that went wrong on it: console errors, page errors, dialogs."""

    def __init__(self, page: object) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))

        def on_dialog(dialog: object) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)

    def clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.dialogs == [], f"a dialog fired: {self.dialogs}"


@pytest.fixture
def page(browser: object) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watched = Watched(context.new_page())
    yield watched
    context.close()


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return synthetic_matrix(n_ops=60, seed=7, hostile=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> Path:
    out = tmp_path_factory.mktemp("browser-site")
    gate = gate_view({"verdict": "blocked", "reason": HOSTILE, "requirements": [{"id": HOSTILE, "status": "fail"}]})
    render_site(
        matrix, out, baseline=synthetic_matrix(n_ops=60, seed=8), gate=gate, command=f"opmatrix report '{HOSTILE}' --out site"
    )
    return out


def _shot(watched: Watched, name: str, full_page: bool = False) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    watched.page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)


def _shown_entries(entries: list[Entry]) -> list[Entry]:
    """The paths a square shows: eager ones, plus compile's when eager only rejects (a ``D`` square)."""
    eager = [e for e in entries if e.mode is Mode.eager]
    if not eager:
        return entries
    plain = [e for e in eager if "dtype" not in e.conditions] or eager
    if all(e.path is ExecPath.rejected and e.outcome is Outcome.ok for e in plain):
        return eager + [e for e in entries if e.mode is Mode.compile and e.outcome is Outcome.ok
                        and e.path is not ExecPath.rejected]
    return eager


def _every_entry(entries: list[Entry]) -> list[Entry]:
    """Wrong values and faults are marked whatever the mode."""
    return entries


def _grid_matches(matrix: Matrix, test: object, shown: object = _shown_entries) -> set[str]:
    """Ops with at least one grid square (op x dtype) whose ``shown`` entries satisfy ``test``."""
    out = set()
    for op, entries in matrix.operators.items():
        dtypes = {d for e in entries for d in e.dtypes}
        for d in dtypes:
            if any(test(e) for e in shown([e for e in entries if d in e.dtypes])):
                out.add(op)
    return out


def _visible_ops(watched: Watched) -> set[str]:
    return set(watched.page.eval_on_selector_all("#grid tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.op)"))


def test_index_opens_from_file_with_the_matrix_counts(page: Watched, site: Path, matrix: Matrix):
    """From file://: no console error, the coverage numbers equal the matrix's, every op has a row."""
    page.page.goto((site / "index.html").as_uri())
    expected: Counter[tuple[str, str]] = Counter()
    for entries in matrix.operators.values():
        for e in entries:
            for dtype, _r, _l, _m in e.cells():
                expected[(dtype.value, e.path.value)] += 1
    shown = page.page.eval_on_selector_all(
        "#coverage-table td[data-path]", "tds => tds.map(td => [td.dataset.dtype, td.dataset.path, td.innerText])"
    )
    assert {(d, p): int(n) for d, p, n in shown if n != "0"} == dict(expected)
    assert page.page.inner_text("#cells-total") == str(matrix.cell_count())
    assert page.page.inner_text("#n-ops") == str(len(matrix.operators))
    for path in ExecPath:
        assert page.page.inner_text(f"[data-path-total={path.value}]") == str(
            sum(n for (_d, p), n in expected.items() if p == path.value)
        )
    assert page.page.inner_text("#f-count") == f"{len(matrix.operators)} of {len(matrix.operators)} operators"
    assert page.page.is_visible("#filters")
    legend = page.page.inner_text("#legend")
    for path in ExecPath:
        assert path.value in legend
    _shot(page, "report-index.png", full_page=True)
    page.clean()


def test_filter_by_op_then_open_its_page(page: Watched, site: Path, matrix: Matrix):
    """Typing an op name filters the grid; its page shows the op's entries and cell counts."""
    page.page.goto((site / "index.html").as_uri())
    page.page.fill("#f-op", "SOFTMAX")
    wanted = {op for op in matrix.operators if "softmax" in op.lower()}
    assert wanted and _visible_ops(page) == wanted
    assert page.page.inner_text("#f-count") == f"{len(wanted)} of {len(matrix.operators)} operators"
    page.page.evaluate("document.getElementById('operators').scrollIntoView()")
    _shot(page, "report-filtered.png")
    op = sorted(wanted)[0]
    page.page.click(f'#grid tr[data-op="{op}"] th a')
    page.page.wait_for_load_state()
    assert page.page.url.endswith("/ops/" + page_names(matrix.operators)[op])
    assert page.page.inner_text("#op-name") == op
    entries = matrix.operators[op]
    assert page.page.inner_text("#op-cells") == str(sum(len(list(e.cells())) for e in entries))
    assert page.page.locator("#entries tbody tr").count() == len(entries)
    _shot(page, "report-op.png", full_page=True)
    page.page.go_back()
    page.page.fill("#f-op", "no-such-op")
    assert _visible_ops(page) == set() and page.page.is_visible("#f-empty")
    page.clean()


def test_path_dtype_fallback_and_wrong_filters(page: Watched, site: Path, matrix: Matrix):
    """Path, dtype, "fallback only" and "wrong only" keep exactly the ops that qualify."""
    page.page.goto((site / "index.html").as_uri())
    page.page.select_option("#f-path", "decomposed")
    assert _visible_ops(page) == _grid_matches(matrix, lambda e: e.path is ExecPath.decomposed)
    page.page.select_option("#f-path", "")
    page.page.check("#f-wrong")
    wrong = _grid_matches(matrix, lambda e: e.outcome is Outcome.wrong, _every_entry)
    assert wrong and _visible_ops(page) == wrong
    page.page.uncheck("#f-wrong")
    page.page.check("#f-fallback")
    fallback = _grid_matches(matrix, lambda e: e.path is ExecPath.fallback or e.fallback.state.value == "observed",
                             _every_entry)
    assert fallback and _visible_ops(page) == fallback
    page.page.uncheck("#f-fallback")
    page.page.select_option("#f-dtype", "bool")
    assert page.page.eval_on_selector_all("#grid thead th:not([hidden])", "ths => ths.length") == 2
    assert _visible_ops(page) == set(matrix.operators)
    page.page.select_option("#f-path", "rejected")
    rejected_bool = {
        op for op, es in matrix.operators.items()
        if any(e.path is ExecPath.rejected for e in _shown_entries([e for e in es if "bool" in e.dtypes]))
    }
    assert _visible_ops(page) == rejected_bool
    page.clean()


def test_hostile_strings_stay_text_in_the_browser(page: Watched, site: Path, matrix: Matrix):
    """A `<script>` in an op name or error message shows as text; no dialog ever fires."""
    hostile_op = next(op for op in matrix.operators if "<script>" in op)
    page.page.goto((site / "index.html").as_uri())
    assert page.page.eval_on_selector_all("script", "s => s.map(x => x.getAttribute('src'))") == ["static/site.js"]
    body = page.page.inner_text("body")
    # op name, runtime check, device name, gate verdict and gate requirement, and the footer command
    assert body.count(HOSTILE) >= 6, body.count(HOSTILE)
    page.page.fill("#f-op", "<script>")
    assert _visible_ops(page) == {hostile_op}
    assert page.page.inner_text("#grid tbody tr:not([hidden]) th a") == hostile_op
    page.page.click("#grid tbody tr:not([hidden]) th a")
    page.page.wait_for_load_state()
    assert page.page.inner_text("#op-name") == hostile_op
    assert HOSTILE in page.page.inner_text(".error pre")
    assert page.page.eval_on_selector_all("script", "s => s.length") == 0
    _shot(page, "report-hostile-op.png", full_page=True)
    page.clean()


def test_diff_page_opens_with_its_counts(page: Watched, site: Path):
    """diff.html opens cleanly and its section counts agree with its own rows."""
    page.page.goto((site / "diff.html").as_uri())
    for section in ("worse", "better", "new", "removed"):
        rows = page.page.eval_on_selector_all(f"#{section} tbody td.num", "tds => tds.map(t => +t.innerText)")
        assert int(page.page.inner_text(f"#n-{section}")) == sum(rows)
    _shot(page, "report-diff.png")
    page.clean()


@pytest.fixture(scope="module")
def refaccel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site of a real refaccel g2 probe (softmax, addcmul, add), from the journal fixture."""
    import gzip

    from opmatrix.matrix.build import collect_cells
    from opmatrix.matrix.compress import compress_cells
    from opmatrix.matrix.journal import read_journal
    from opmatrix.schema import TaskRecord, loads_yaml, validate_data

    data = Path(__file__).parent / "data"
    tmp = tmp_path_factory.mktemp("refaccel-site")
    journal = tmp / "journal.jsonl"
    journal.write_bytes(gzip.decompress((data / "refaccel-g2-softmax-addcmul-add.journal.jsonl.gz").read_bytes()))
    text = gzip.decompress((data / "refaccel-g2-softmax-addcmul-add.boxes.yaml.gz").read_bytes()).decode()
    old = validate_data(loads_yaml(text), Matrix, "fixture", text)
    cells = collect_cells(r for r in read_journal(journal) if isinstance(r, TaskRecord))
    render_site(old.model_copy(update={"operators": compress_cells(cells)}), tmp / "site", command="opmatrix report")
    return tmp / "site"


def _square(watched: Watched, op: str, column: int) -> str:
    return watched.page.inner_text(f'#grid tr[data-op="{op}"] td:nth-of-type({column})')


def test_refaccel_grid_tells_the_contract_at_a_glance(page: Watched, refaccel_site: Path):
    """softmax: N with a composite mark for fp32/fp16/bf16 (not R from dtype=float64 samples); addcmul: D."""
    page.page.goto((refaccel_site / "index.html").as_uri())
    heads = page.page.eval_on_selector_all("#grid thead th", "ths => ths.map(th => th.innerText.trim())")
    column = {name: i for i, name in enumerate(heads)}  # th 0 is the op column: td index = i
    for dtype in ("float32", "float16", "bfloat16"):
        square = _square(page, "aten.softmax.int", column[dtype])
        assert square.startswith("N") and "C" in square[1:], (dtype, square)
        assert _square(page, "aten.addcmul.default", column[dtype]).startswith("D")
    assert _square(page, "aten.softmax.int", column["float64"]).startswith("R")
    _shot(page, "refaccel-g2-index.png", full_page=True)
    page.page.click('#grid tr[data-op="aten.softmax.int"] th a')
    contract = page.page.inner_text("#op-contract")
    assert "native for dim=last" in contract and "composite otherwise" in contract
    assert "rejected when dtype=float64 is requested" in contract
    # a clean rejection never reads as a green "ok"
    assert page.page.eval_on_selector_all(".entries tr", "rows => rows.filter(r => r.innerText.includes('rejected')"
                                          " && r.querySelector('.outcome.ok')).length") == 0
    _shot(page, "refaccel-g2-softmax.png", full_page=True)
    page.clean()


# -- the index shows before it tells: verdict, grid, chart, then the requirements ---------------------


def _blocked_gate(matrix: Matrix) -> object:
    """A gate result as `opmatrix gate --json` writes it: one failing operator requirement, one passing."""
    from opmatrix.schema import GateResult
    from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status, Verdict

    op = sorted(matrix.operators)[0]
    bad = [CellRef(op=op, dtype="bfloat16", rank=r, layout="contiguous", path=ExecPath.rejected, outcome=Outcome.ok,
                   status=CellStatus.failed, reason="path rejected is worse than composite") for r in (1, 2)]
    result = GateResult(
        verdict=Verdict.blocked, backend=matrix.backend.name, generation=matrix.backend.generation, release="1.0",
        promised_level=2, today="2026-12-03", cell_count=matrix.cell_count(), matrix_digest=matrix.digest(),
        requirements=[
            RequirementResult(id="L2.ops.core", level=2, kind="operators", title=f"{op} [bfloat16] contiguous eager",
                              status=Status.failed, blocking=True, message="0/2 cells pass, 2 fail", cells=bad,
                              checked=2, failed=2),
            RequirementResult(id="L0.check.all", level=0, kind="check", title="runtime check *", status=Status.passed,
                              blocking=True, message="import: pass", checked=1),
        ],
    )
    return gate_view(result.model_dump(mode="json"))


@pytest.fixture(scope="module")
def judged_site(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> Path:
    from opmatrix.reports.perf import load_record_dir, perf_view

    from .test_front_numbers import _perf_dirs

    out = tmp_path_factory.mktemp("judged-site")
    now, before = _perf_dirs(tmp_path_factory.mktemp("records"))
    perf = perf_view(load_record_dir(str(now)), load_record_dir(str(before)))
    render_site(matrix, out, baseline=synthetic_matrix(n_ops=60, seed=8), gate=_blocked_gate(matrix), perf=perf,
                command="opmatrix report m.yaml --out site")
    return out


def _top(watched: Watched, selector: str) -> float:
    return float(watched.page.eval_on_selector(selector, "e => e.getBoundingClientRect().top + window.scrollY"))


def test_index_shows_the_verdict_then_the_grid_then_the_chart(page: Watched, judged_site: Path, matrix: Matrix):
    """Blocked, with the first reason in plain words, above the grid; the chart below the grid; the
    requirements last, folded, worded for people, with links that filter the grid."""
    page.page.goto((judged_site / "index.html").as_uri())
    assert page.page.inner_text("#verdict .word").strip().lower() == "blocked"
    from opmatrix.reports.verdict import short_op

    op = short_op(sorted(matrix.operators)[0])
    assert f"{op} is rejected for bfloat16" in page.page.inner_text("#verdict .reasons")
    assert "1 of 2 requirements pass" in page.page.inner_text("#verdict")
    assert _top(page, "#verdict") < _top(page, "#operators") < _top(page, "#coverage") < _top(page, "#gate")
    assert not page.page.is_visible("#requirements")  # folded until asked for
    page.page.click("#gate-details > summary")
    rows = page.page.eval_on_selector_all("#requirements tbody tr", "rs => rs.map(r => r.dataset.id)")
    assert rows == ["L2.ops.core", "L0.check.all"]
    assert "blocks the release" in page.page.inner_text('#requirements tr[data-id="L2.ops.core"]')
    page.page.click('#requirements tr[data-id="L2.ops.core"] a.oplink')
    full = sorted(matrix.operators)[0]
    assert full in _visible_ops(page) and len(_visible_ops(page)) < len(matrix.operators)
    _shot(page, "report-verdict.png")
    page.clean()


def test_coverage_chart_draws_eager_and_compiled_side_by_side(page: Watched, judged_site: Path, matrix: Matrix):
    """One panel per mode; each panel's segments add up to that mode's cells, the count every command prints."""
    from opmatrix.schema import count_matrix

    counted = count_matrix(matrix)
    page.page.goto((judged_site / "index.html").as_uri())
    panels = page.page.eval_on_selector_all(
        "#coverage svg g.panel",
        "gs => gs.map(g => [g.dataset.mode, Array.from(g.querySelectorAll('rect[data-count]'))"
        ".reduce((n, r) => n + Number(r.dataset.count), 0), g.getBoundingClientRect().left])")
    assert [m for m, _, _ in panels] == [m.value for m in counted.cells_by_mode]
    assert {m: n for m, n, _ in panels} == {m.value: n for m, n in counted.cells_by_mode.items()}
    assert len(panels) == 2 and panels[0][2] < panels[1][2]  # side by side, eager first
    assert counted.modes_text() in page.page.inner_text("#n-cells >> xpath=..")
    page.clean()


@pytest.mark.parametrize("name", ["index.html", "diff.html", "perf.html"])
def test_no_horizontal_scroll_at_800_pixels(browser: object, judged_site: Path, name: str):
    """At 800 px the page never scrolls sideways, with every folded section open (wide tables scroll in their box)."""
    context = browser.new_context(viewport={"width": 800, "height": 900})
    watched = Watched(context.new_page())
    try:
        watched.page.goto((judged_site / name).as_uri())
        watched.page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        width = watched.page.evaluate("document.documentElement.scrollWidth")
        assert width <= 800, f"{name} is {width} px wide at an 800 px window"
        _shot(watched, f"report-800-{name.replace('.html', '')}.png")
        watched.clean()
    finally:
        context.close()


def test_op_filter_follows_the_hash(page: Watched, judged_site: Path, matrix: Matrix):
    """#op= filters on load and again whenever the hash changes, without a reload."""
    page.page.goto((judged_site / "index.html").as_uri() + "#op=softmax")
    softmax = {op for op in matrix.operators if "softmax" in op.lower()}
    assert softmax and _visible_ops(page) == softmax
    page.page.evaluate("window.location.hash = '#op=' + encodeURIComponent('mm')")
    page.page.wait_for_function("document.getElementById('f-op').value === 'mm'")
    assert _visible_ops(page) == {op for op in matrix.operators if "mm" in op.lower()}
    page.page.go_back()
    page.page.wait_for_function("document.getElementById('f-op').value === 'softmax'")
    assert _visible_ops(page) == softmax
    page.clean()


def test_perf_chart_draws_an_interval_per_compared_record(page: Watched, judged_site: Path):
    """Each record with a baseline has its interval drawn around its ratio, right of 1.0 when slower."""
    page.page.goto((judged_site / "perf.html").as_uri())
    drawn = page.page.eval_on_selector_all(
        ".perf-chart g[data-point]", "gs => gs.map(g => [g.dataset.id, +g.dataset.low, +g.dataset.point, +g.dataset.high,"
        " g.querySelector('line.interval').getBBox().width])")
    assert {d[0] for d in drawn} == {"op.add.eager.float32", "op.mm.eager.float32"}
    for _, low, point, high, width in drawn:
        assert low <= point <= high and width > 0
    one = page.page.eval_on_selector(".perf-chart line.tick.one", "l => +l.getAttribute('x1')")
    mm = page.page.eval_on_selector('.perf-chart g[data-id="op.mm.eager.float32"] circle', "c => +c.getAttribute('cx')")
    assert mm > one  # slower sits right of the baseline
    assert "new: no baseline record" in page.page.inner_text('#perf-table tr[data-id="op.new.eager.float32"]')
    _shot(page, "report-perf.png")
    page.clean()


#: one-word cells that render on more than one line, and tables whose header covers their first row
_TABLES_READ = """() => {
  const broken = [];
  for (const c of document.querySelectorAll('table td, table th')) {
    const t = (c.innerText || '').trim();
    if (!t || /\\s/.test(t)) continue;
    const els = [c, ...c.querySelectorAll('*')];
    if (els.some(e => getComputedStyle(e).writingMode.startsWith('vertical'))) continue;  // the grid's rotated heads
    const s = getComputedStyle(c);
    const line = parseFloat(s.lineHeight) || 1.2 * parseFloat(s.fontSize);
    const r = document.createRange(); r.selectNodeContents(c);
    if (r.getBoundingClientRect().height > 1.6 * line) broken.push(t);  // a second line (a superscript is not one)
  }
  const covered = [];
  for (const tb of document.querySelectorAll('table')) {
    const th = tb.querySelector('thead th'), td = tb.querySelector('tbody tr td');
    if (!th || !td) continue;
    const a = th.getBoundingClientRect(), c = td.getBoundingClientRect();
    if (c.height > 0 && a.bottom > c.top + 1 && a.top < c.bottom) covered.push((td.innerText || '').slice(0, 30));
  }
  return {broken, covered};
}"""


@pytest.mark.parametrize("width", [1280, 800])
def test_tables_read_one_word_per_line_and_headers_cover_no_row(
        browser: object, judged_site: Path, refaccel_site: Path, width: int) -> None:
    """No one-word cell breaks across lines; the first row of every table is visible at scroll 0"""
    context = browser.new_context(viewport={"width": width, "height": 900})
    watched = Watched(context.new_page())
    pages = [judged_site / "index.html", judged_site / "diff.html", refaccel_site / "index.html",
             *sorted((refaccel_site / "ops").glob("*.html"))]
    try:
        seen = 0
        for path in pages:
            watched.page.goto(path.as_uri())
            found = watched.page.evaluate(_TABLES_READ)
            assert found["broken"] == [], f"{path.name} @{width}px: one-word cells broken: {found['broken'][:5]}"
            assert found["covered"] == [], f"{path.name} @{width}px: a header covers the first row: {found['covered']}"
            seen += watched.page.eval_on_selector_all("table tbody td", "tds => tds.length")
            width_now = watched.page.evaluate("document.documentElement.scrollWidth")
            assert width_now <= width, f"{path.name} is {width_now} px wide at {width} px"
        assert seen > 100  # the pages had tables to measure
        watched.clean()
    finally:
        context.close()


def test_runtime_checks_use_the_page_width(page: Watched, refaccel_site: Path) -> None:
    """The runtime checks table is not squeezed into a column beside the evidence: at 1280 px it spans
    most of the main column, and a check's result reads PASS on one line"""
    page.page.goto((refaccel_site / "index.html").as_uri())
    main = page.page.eval_on_selector("main", "m => m.getBoundingClientRect().width")
    section = page.page.eval_on_selector("#runtime", "s => s.getBoundingClientRect().width")
    assert section > 0.9 * (main - 48), (section, main)
    lines = page.page.eval_on_selector_all(
        "#runtime .checks .result", "rs => rs.map(r => new Set(Array.from(r.getClientRects()).map(b => Math.round(b.top))).size)")
    assert lines and set(lines) == {1}, lines
    page.clean()
