"""The user-facing documents: the README is a guide, the docs site is current with the code."""

from __future__ import annotations

import re
import sys
from pathlib import Path

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
