"""The package layout is the architecture: imports flow one way, modules and functions stay small.

Read with ``ast`` (nothing is imported): ``schema <- backend <- probes``, ``schema <- matrix <-
{ci, reports}``, ``opmatrix/`` on top; no module over 400 lines; no function over 60 lines in
``probes/``, ``matrix/`` and ``ci/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: subpackage -> the subpackages it may import
ALLOWED = {"schema": set(), "backend": {"schema"}, "probes": {"schema", "backend"},
           "matrix": {"schema"}, "ci": {"schema", "matrix"}, "reports": {"schema", "matrix"}}
PACKAGES = [*ALLOWED, "opmatrix"]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
SHORT_FUNCTIONS = ("probes", "matrix", "ci")


def _modules() -> list[tuple[str, Path]]:
    return [(top, f) for top in PACKAGES for f in sorted((ROOT / top).rglob("*.py"))]


def _target(top: str, f: Path, node: ast.ImportFrom) -> str | None:
    """The opmatrix subpackage an ``from ... import`` names, or None for anything else."""
    if node.level:  # relative: resolve against the file's own package
        parts = list(f.relative_to(ROOT).parent.parts)
        base = parts[: len(parts) - (node.level - 1)]
        names = base + (node.module.split(".") if node.module else [])
        return names[0] if names else None
    if node.module and node.module.startswith("opmatrix."):
        return node.module.split(".")[1]
    return None


def _imports(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1] for a in node.names if a.name.startswith("opmatrix.")]
    return []


def test_imports_flow_one_way():
    """No module imports a subpackage its own may not depend on (lazy imports included)."""
    bad = []
    for top, f in _modules():
        if top == "opmatrix":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets = [_target(top, f, node)] if isinstance(node, ast.ImportFrom) else _imports(node)
            for target in targets:
                if target and target != top and target in ALLOWED and target not in ALLOWED[top]:
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} imports opmatrix.{target}")
    assert not bad, "imports against the flow:\n" + "\n".join(bad)


def test_modules_stay_under_400_lines():
    """Every module of the package is at most 400 lines: a bigger one is split by concept."""
    bad = [f"{f.relative_to(ROOT)}: {n} lines" for _, f in _modules()
           if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not bad, "modules over 400 lines:\n" + "\n".join(bad)


def test_functions_stay_under_60_lines():
    """Functions in probes/, matrix/ and ci/ are at most 60 lines."""
    bad = []
    for top, f in _modules():
        if top not in SHORT_FUNCTIONS:
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name}(): {n} lines")
    assert not bad, "functions over 60 lines:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, target", [
    ("from opmatrix.matrix import Matrix", "matrix"),
    ("from ...backend import get_adapter", "backend"),
    ("from ..runner import run", "probes"),
])
def test_the_import_reader_sees_both_spellings(tmp_path: Path, source: str, target: str):
    """The checker itself: absolute and relative imports resolve to the named subpackage."""
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _target("probes", ROOT / "probes" / "ops" / "x.py", node) == target
