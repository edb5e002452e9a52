"""The release gate's verdict as the index shows it, read leniently from ``opmatrix gate --json``.

A file that validates as :class:`opmatrix.schema.GateResult` gives its verdict from the typed
fields; anything else is read leniently (``verdict``, else ``passed``). The view shows the
scalar fields beside the verdict, and every
list as a table, requirement results (``requirements``, ``results`` ...) first; nested lists are
counted and long texts cut, so a gate result of any size keeps the index small::

    >>> gate_view({"verdict": "blocked", "requirements": [{"name": "level 2", "status": "fail"}]}).verdict
    'blocked'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from opmatrix.schema import ArtifactError, GateResult, Matrix
from opmatrix.schema.yamlload import loads_json

from .verdict import VerdictView, verdict_view

__all__ = ["GateRow", "GateTable", "GateView", "check_gate_pair", "gate_view", "load_gate"]

_LIST_KEYS = ("requirements", "results", "checks", "findings", "blocking", "items", "failures")
_FIRST_COLUMNS = ("id", "level", "name", "requirement", "kind", "title", "op", "dtype", "status", "result", "passed",
                  "verdict", "blocking", "message")
_STATUS_KEYS = ("status", "result", "verdict", "passed", "ok")
_GOOD = {"pass", "passed", "ok", "true", "met", "waived"}
_BAD = {"fail", "failed", "blocked", "false", "unmet", "missing", "error"}
#: Most rows shown per table, and the longest text shown per cell; the rest are counted / cut.
MAX_ROWS = 200
MAX_TEXT = 300


@dataclass(frozen=True)
class GateRow:
    """One item of a list: its cells in column order and a pass/fail/None tone."""

    cells: tuple[str, ...]
    tone: str | None


@dataclass(frozen=True)
class GateTable:
    """One list of the gate result (requirements, checks, blocking reasons ...) as a table."""

    name: str
    columns: list[str]
    rows: list[GateRow]
    total: int

    @property
    def hidden_rows(self) -> int:
        """Items not shown."""
        return self.total - len(self.rows)


@dataclass(frozen=True)
class GateView:
    """The gate verdict, its scalar fields and its lists as tables (the first one is the main one)."""

    verdict: str
    passed: bool | None
    fields: list[tuple[str, str]] = field(default_factory=list)
    tables: list[GateTable] = field(default_factory=list)
    #: the verdict in plain words, for a result of ``opmatrix gate --json`` (None for other shapes)
    plain: VerdictView | None = None

    @property
    def rows(self) -> list[GateRow]:
        """Rows of the main table."""
        return self.tables[0].rows if self.tables else []


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None or value == [] or value == {}:
        text = ""
    elif isinstance(value, (int, float)):
        text = str(value)
    elif isinstance(value, list) and value and not all(isinstance(v, (str, int, float)) for v in value):
        text = f"{len(value)} items"  # e.g. every cell a requirement covered: counted, not dumped
    elif isinstance(value, Mapping):
        text = ", ".join(f"{k}={_text(v)}" for k, v in value.items() if v not in (None, "", [], {}))
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _tone(value: Any) -> str | None:
    word = _text(value).strip().lower()
    if word in _GOOD:
        return "pass"
    if word in _BAD:
        return "fail"
    return None


def _row_tone(item: Mapping[str, Any]) -> str | None:
    for key in _STATUS_KEYS:
        if key in item:
            return _tone(item[key])
    return None


def _columns(items: list[Mapping[str, Any]]) -> list[str]:
    seen: list[str] = []
    for item in items:
        for key in item:
            if key not in seen:
                seen.append(str(key))
    first = [c for c in _FIRST_COLUMNS if c in seen]
    return first + [c for c in seen if c not in first]


def _table(name: str, items: list[Any]) -> GateTable:
    dict_items = [i if isinstance(i, Mapping) else {name: i} for i in items]
    columns = _columns(dict_items)
    rows = [
        GateRow(cells=tuple(_text(i.get(c, "")) for c in columns), tone=_row_tone(i))
        for i in dict_items[:MAX_ROWS]
    ]
    return GateTable(name=name, columns=columns, rows=rows, total=len(dict_items))


def _typed(data: Mapping[str, Any]) -> GateResult | None:
    try:
        return GateResult.model_validate(data)
    except ValidationError:
        return None


def _verdict(data: Mapping[str, Any], result: GateResult | None = None) -> tuple[str, bool | None]:
    """The verdict and whether it passed: typed fields of a :class:`GateResult`, else read leniently."""
    if result is not None:
        return str(result.verdict), result.passed
    passed: bool | None = data["passed"] if isinstance(data.get("passed"), bool) else None
    verdict = _text(data.get("verdict", "")).strip()
    if not verdict:
        verdict = {True: "pass", False: "blocked", None: "unknown"}[passed]
    if passed is None:
        tone = _tone(verdict)
        passed = None if tone is None else tone == "pass"
    return verdict, passed


def gate_view(data: Any) -> GateView:
    """Normalise a gate result of any reasonable shape into what the index shows."""
    if not isinstance(data, Mapping):
        return GateView(verdict="unreadable", passed=None, fields=[("value", _text(data))])
    return _view(data, _typed(data))


def _view(data: Mapping[str, Any], result: GateResult | None) -> GateView:
    """The view of ``data``, which validated as ``result`` (or None: read leniently)."""
    verdict, passed = _verdict(data, result)
    fields = [
        (str(k), _text(v, limit=20 * MAX_TEXT))
        for k, v in data.items()
        if k not in ("verdict", "passed") and not isinstance(v, (list, Mapping))
    ]
    keys = [k for k in _LIST_KEYS if k in data] + [str(k) for k in data if k not in _LIST_KEYS]
    tables = [_table(k, data[k]) for k in keys if isinstance(data[k], list) and data[k]]
    plain = verdict_view(result) if result is not None else None
    return GateView(verdict=verdict, passed=passed, fields=fields, tables=tables, plain=plain)


def check_gate_pair(data: Any, matrix: Matrix, path: str | os.PathLike[str]) -> None:
    """Refuse a gate result that is not this matrix's: backend, generation and matrix digest must match."""
    if not isinstance(data, Mapping):
        raise ArtifactError([f"{path}: not a gate result (expected the JSON object of `opmatrix gate --json`)"])
    want = {"backend": matrix.backend.name, "generation": matrix.backend.generation, "matrix_digest": matrix.digest()}
    missing = [k for k in want if k not in data]
    if missing:
        raise ArtifactError([f"{path}: not a gate result of this matrix: it lacks {', '.join(missing)}; "
                             "write it with `opmatrix gate --matrix MATRIX ... --json FILE` for the matrix reported"])
    wrong = [f"{k} {data[k]!r} (the matrix: {v!r})" for k, v in want.items() if data[k] != v]
    if wrong:
        raise ArtifactError([f"{path}: the gate result belongs to another matrix: {'; '.join(wrong)}; run "
                             "`opmatrix gate` on this matrix again, or report the matrix it judged"])


def load_gate(path: str | os.PathLike[str], matrix: Matrix | None = None) -> GateView:
    """Read a gate result JSON file; an unreadable file is an :class:`ArtifactError` (exit 2).

    With ``matrix``, the result must be that matrix's (:func:`check_gate_pair`)."""
    try:
        data = loads_json(Path(path).read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        raise ArtifactError([f"{path}: no such file (expected the JSON of `opmatrix gate --json`)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError([f"{path}: cannot read: {exc}"]) from None
    except json.JSONDecodeError as exc:
        raise ArtifactError([f"{path}:{exc.lineno}: not JSON: {exc.msg}"]) from None
    if matrix is not None:
        check_gate_pair(data, matrix, path)
    if not isinstance(data, Mapping):
        return gate_view(data)
    typed = _typed(data)  # validated once: the view and the consistency check share it
    view = _view(data, typed)
    wrong = typed.contradictions() if typed is not None else None
    if wrong is None and typed is None and view.passed and data.get("blocking"):
        wrong = "the verdict is pass, yet it lists blocking reasons"
    if wrong is not None:
        raise ArtifactError([f"{path}: the gate result contradicts itself: {wrong}; it was edited or cut: run "
                             "`opmatrix gate ... --json` again"])
    return view
