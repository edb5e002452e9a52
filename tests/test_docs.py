"""The user-facing documents: the README is a guide, the docs site is current with the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opmatrix.cli import build_parser
from opmatrix.clidoc import DOC_PATH, _subcommands, cli_reference

from .conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def test_cli_reference_is_current() -> None:
    committed = (ROOT / DOC_PATH).read_text(encoding="utf-8")
    assert committed == cli_reference(), (
        f"{DOC_PATH} differs from the parser: run `python -m opmatrix.clidoc --write` and commit it")


def test_cli_reference_covers_every_verb_and_option() -> None:
    text = cli_reference()
    for name, _, sub in _subcommands(build_parser()):
        assert f"## opmatrix {name}\n" in text
        for action in sub._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert f"`{opt}" in text, f"opmatrix {name} {opt} missing from the reference"


def test_readme_is_a_guide() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    history = re.compile(r"`[0-9a-f]{7,40}`|\.\./|[Ss]top \d+|[Ii]ssue \d+")
    found = [line for line in text.splitlines() if history.search(line)]
    assert not found, f"commit hashes, history or paths outside the repository: {found[:3]}"


def test_readme_links_exist() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_verb_appears_in_readme_and_docs() -> None:
    readme = README.read_text(encoding="utf-8")
    docs = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))
    for name, _, _ in _subcommands(build_parser()):
        assert f"opmatrix {name}" in readme, f"README never shows opmatrix {name}"
        assert f"opmatrix {name}" in docs, f"docs/ never shows opmatrix {name}"


def test_docs_nav_names_existing_pages() -> None:
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert "index.md" in nav and "cli.md" in nav
    assert [p for p in nav if not (DOCS / p).exists()] == []


def test_benchdoc_appends_rows_to_its_own_table(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import benchdoc
    finally:
        sys.path.remove(str(ROOT / "bench"))
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n", encoding="utf-8")
    benchdoc.record("alpha", {"x": "1 s"}, doc=doc)
    benchdoc.record("beta", {"y": "2 | 3"}, doc=doc)
    benchdoc.record("alpha", {"x": "0.9 s"}, doc=doc)
    lines = doc.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["# Benchmarks", "", "intro"]
    alpha = lines.index("<!-- bench:alpha -->")
    beta = lines.index("<!-- bench:beta -->")
    alpha_rows = [ln for ln in lines[alpha:beta] if ln.startswith("| 2")]
    assert [r.rsplit("|", 2)[1].strip() for r in alpha_rows] == ["x: 1 s", "x: 0.9 s"]
    beta_rows = [ln for ln in lines[beta:] if ln.startswith("| 2")]
    assert len(beta_rows) == 1 and "y: 2 \\| 3" in beta_rows[0]
    with pytest.raises(ValueError):
        benchdoc.record("no spaces allowed", {}, doc=doc)


def test_contract_field_examples_are_generated_and_show_each_field() -> None:
    """docs/matrix.md and docs/gate.md carry the block `python -m opmatrix.entrydoc --write` made."""
    from opmatrix.entrydoc import BEGIN, END, REGENERATE

    matrix = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
    gate = (ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    for page in (matrix, gate):
        block = page.split(BEGIN, 1)[1].split(END, 1)[0]
        assert REGENERATE in block
    block = matrix.split(BEGIN, 1)[1].split(END, 1)[0]
    for field in ("source: rank extension", "shapes: dynamic", "accumulation: float32", "Works: eager native"):
        assert field in block, field
    block = gate.split(BEGIN, 1)[1].split(END, 1)[0]
    for field in ("ranks: {min: 2, max: 5}", "dynamic_shapes: true", "fallback: forbidden_in_perf",
                  "accumulation: float32", "L2.ops.sum: pass"):
        assert field in block, field


def _offline_docs() -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import offline_docs
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return offline_docs


def test_offline_check_finds_remote_loads_but_not_links(tmp_path: Path) -> None:
    """a web font, a CDN script or a remote CSS import is found; a plain link or a data: URI is not"""
    (tmp_path / "a.html").write_text(
        '<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>'
        '<script src="//cdn.example.org/x.js"></script><a href="https://example.org/">a link</a>', encoding="utf-8")
    (tmp_path / "s.css").write_text(
        "@import url('https://fonts.googleapis.com/css?family=Roboto');"
        ".i{background:url(\"data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg'/>\")}", encoding="utf-8")
    found = list(_offline_docs().remote_loads(tmp_path))
    assert found == [("a.html", "https://fonts.gstatic.com"), ("a.html", "//cdn.example.org/x.js"),
                     ("s.css", "https://fonts.googleapis.com/css?family=Roboto")]


@pytest.mark.slow
def test_docs_site_builds_strictly_and_loads_nothing_remote(tmp_path: Path) -> None:
    """mkdocs --strict builds the docs, and no page fetches a font, script or style from another host"""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "install" / "index.html").exists()
    assert list(_offline_docs().remote_loads(tmp_path / "site")) == []


def test_readme_tour_probes_gates_and_reports_one_matrix() -> None:
    """The tour (as bench/bench_tour.py reads it) is a short probe, then gate --json, then report
    --gate of that JSON, all on the matrix the probe wrote, against a contract that exists"""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_tour
    finally:
        sys.path.remove(str(ROOT / "bench"))
    probe, gate, report = bench_tour.tour_commands()
    assert [c[1] for c in (probe, gate, report)] == ["probe", "gate", "report"]
    out = probe[probe.index("--out") + 1]
    matrix = f"{out}/matrix.yaml"
    assert len(probe[probe.index("--ops") + 1].split(",")) <= 4 and "--dtypes" in probe  # quick and telling
    assert gate[gate.index("--matrix") + 1] == matrix and (ROOT / gate[gate.index("--contract") + 1]).is_file()
    assert report[2] == matrix and report[report.index("--gate") + 1] == gate[gate.index("--json") + 1]
