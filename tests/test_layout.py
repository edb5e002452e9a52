"""The package layout is the architecture: imports flow one way, modules and functions stay small.

Read with ``ast`` (nothing is imported): ``schema <- backend <- probes``, ``schema <- matrix <-
{ci, reports}``, ``opmatrix/`` on top (no subpackage imports the top-level ``opmatrix``); no
cycle between the parts of a subpackage (``probes.runner``, ``probes.ops``, ``matrix.query``, ...),
lazy imports included; the runner imports no suite; no module over 400 lines; no function over 60
lines in ``probes/``, ``matrix/`` and ``ci/``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
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


def _module_path(f: Path, node: ast.ImportFrom) -> list[str] | None:
    """The dotted path (below ``opmatrix``) a ``from ... import`` names; ``[]`` for the top-level
    ``opmatrix`` itself, None for anything outside the package."""
    if node.level:  # relative: resolve against the file's own package
        parts = list(f.relative_to(ROOT).parent.parts)
        if parts and parts[0] == "opmatrix":
            parts = parts[1:]
        base = parts[: len(parts) - (node.level - 1)]
        return base + (node.module.split(".") if node.module else [])
    if node.module == "opmatrix" or (node.module or "").startswith("opmatrix."):
        return (node.module or "").split(".")[1:]
    return None


def _target(top: str, f: Path, node: ast.ImportFrom) -> str | None:
    """The opmatrix subpackage an ``from ... import`` names (``opmatrix`` for the top level), or None."""
    path = _module_path(f, node)
    if path is None:
        return None
    return path[0] if path else "opmatrix"


def _imports(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [(a.name.split(".") + ["opmatrix"])[1] if a.name.startswith("opmatrix.") else "opmatrix"
                for a in node.names if a.name == "opmatrix" or a.name.startswith("opmatrix.")]
    return []


def _part(path: list[str]) -> str:
    """The part of a subpackage a module belongs to: ``probes.runner``, ``matrix.query``, ``cli``."""
    return ".".join(path[:2]) if path and path[0] in ALLOWED else ".".join(path[:1]) or "opmatrix"


def _type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (annotations only)."""
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _part_graph() -> dict[str, dict[str, str]]:
    """part -> {part it imports (at the top or lazily): the first place it does}."""
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for _top, f in _modules():
        own = list(f.relative_to(ROOT).with_suffix("").parts)
        own = own[1:] if own[0] == "opmatrix" else own
        src = _part([p for p in own if p != "__init__"])
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if _type_checking(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only:  # never imported at run time
                continue
            if isinstance(node, ast.ImportFrom):
                paths = [_module_path(f, node)]
            elif isinstance(node, ast.Import):
                paths = [a.name.split(".")[1:] for a in node.names
                         if a.name == "opmatrix" or a.name.startswith("opmatrix.")]
            else:
                continue
            for path in paths:
                if path is None:
                    continue
                dst = _part(path)
                if dst != src and dst.split(".")[0] == src.split(".")[0]:
                    graph[src].setdefault(dst, f"{f.relative_to(ROOT)}:{node.lineno}")
    return graph


def _cycles(graph: dict[str, dict[str, str]]) -> list[str]:
    """Each edge that lies on a cycle, with where it is made."""
    def reaches(a: str, b: str) -> bool:
        seen, todo = {a}, [a]
        while todo:
            for n in graph.get(todo.pop(), {}):
                if n == b:
                    return True
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return False
    return [f"{a} -> {b} ({where})" for a in sorted(graph) for b, where in sorted(graph[a].items()) if reaches(b, a)]


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


def test_no_subpackage_imports_the_top_level_package():
    """``import opmatrix`` / ``from opmatrix import ...`` below the top loads the CLI's package from
    a layer it sits on (lazy imports included)."""
    bad = []
    for top, f in _modules():
        if top == "opmatrix":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets = [_target(top, f, node)] if isinstance(node, ast.ImportFrom) else _imports(node)
            bad += [f"{f.relative_to(ROOT)}:{node.lineno}" for t in targets if t == "opmatrix"]
    assert not bad, "imports of the top-level opmatrix package from below it:\n" + "\n".join(bad)


def test_no_import_cycles_between_the_parts_of_a_subpackage():
    """Within a subpackage, the parts (``probes.runner``, ``probes.ops``, ``matrix.fx``, ...) import
    one another one way: a cycle hidden by a lazy import is still a cycle."""
    cycles = _cycles(_part_graph())
    assert not cycles, "import cycles (each edge on one):\n" + "\n".join(cycles)


def test_the_runner_imports_no_suite():
    """probes.runner is generic: suites hand it their handlers (probes.handlers), it never imports them."""
    suites = {p for p in _part_graph().get("probes.runner", {}) if p not in ("probes.runner",)}
    assert not suites, f"probes.runner imports {sorted(suites)}"


def test_the_cycle_reader_sees_a_lazy_cycle():
    """The checker itself: a cycle made by one lazy import is found, a one-way graph is not."""
    graph = {"probes.runner": {"probes.workloads": "task.py:172"}, "probes.workloads": {"probes.runner": "h.py:18"}}
    assert _cycles(graph) == ["probes.runner -> probes.workloads (task.py:172)",
                              "probes.workloads -> probes.runner (h.py:18)"]
    assert _cycles({"a.b": {"a.c": "x"}, "a.c": {"a.d": "y"}}) == []


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
    ("from opmatrix import __version__", "opmatrix"),
])
def test_the_import_reader_sees_both_spellings(tmp_path: Path, source: str, target: str):
    """The checker itself: absolute and relative imports resolve to the named subpackage."""
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _target("probes", ROOT / "probes" / "ops" / "x.py", node) == target


def test_the_top_level_uses_the_probes_face():
    """``opmatrix/`` reaches probes through its public face (``opmatrix.probes``): at most a few submodules by name."""
    named = set()
    for f in sorted((ROOT / "opmatrix").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opmatrix.probes."):
                named.add(node.module)
    assert len(named) <= 4, f"opmatrix/ imports probes submodules {sorted(named)}"
    import opmatrix.probes

    assert all(hasattr(opmatrix.probes, name) for name in opmatrix.probes.__all__)
