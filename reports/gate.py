"""The release gate's verdict as the index shows it, read leniently from ``opmatrix gate --json``.

The gate's JSON is another subsystem's product, so this reads only what it needs and shows the
rest as it is: a verdict (``verdict``, else ``passed``), the scalar fields beside it, and the first
list of requirement results (``requirements``, ``results``, ``findings`` ...) as a table::

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

from opmatrix.schema import ArtifactError

__all__ = ["GateRow", "GateView", "gate_view", "load_gate"]

_LIST_KEYS = ("requirements", "results", "findings", "checks", "items", "failures")
_FIRST_COLUMNS = ("level", "name", "requirement", "kind", "op", "dtype", "status", "result", "passed", "verdict")
_STATUS_KEYS = ("status", "result", "verdict", "passed", "ok")
_GOOD = {"pass", "passed", "ok", "true", "met", "waived"}
_BAD = {"fail", "failed", "blocked", "false", "unmet", "missing", "error"}
#: Most requirement rows shown; the rest are counted.
MAX_ROWS = 2000


@dataclass(frozen=True)
class GateRow:
    """One requirement result: its cells in column order and a pass/fail/None tone."""

    cells: tuple[str, ...]
    tone: str | None


@dataclass(frozen=True)
class GateView:
    """The gate verdict, its scalar fields and its requirement table."""

    verdict: str
    passed: bool | None
    fields: list[tuple[str, str]] = field(default_factory=list)
    list_name: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[GateRow] = field(default_factory=list)
    hidden_rows: int = 0


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


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


def gate_view(data: Any) -> GateView:
    """Normalise a gate result of any reasonable shape into what the index shows."""
    if not isinstance(data, Mapping):
        return GateView(verdict="unreadable", passed=None, fields=[("value", _text(data))])
    passed: bool | None = data["passed"] if isinstance(data.get("passed"), bool) else None
    verdict = _text(data.get("verdict", "")).strip()
    if not verdict:
        verdict = {True: "pass", False: "blocked", None: "unknown"}[passed]
    if passed is None:
        tone = _tone(verdict)
        passed = None if tone is None else tone == "pass"
    fields = [
        (str(k), _text(v))
        for k, v in data.items()
        if k not in ("verdict", "passed") and not isinstance(v, (list, dict))
    ]
    list_name, items = "", []
    for key in (*_LIST_KEYS, *data.keys()):
        value = data.get(key)
        if isinstance(value, list) and value:
            list_name, items = str(key), value
            break
    dict_items = [i if isinstance(i, Mapping) else {"value": i} for i in items]
    columns = _columns(dict_items)
    rows = [
        GateRow(cells=tuple(_text(i.get(c, "")) for c in columns), tone=_row_tone(i))
        for i in dict_items[:MAX_ROWS]
    ]
    return GateView(
        verdict=verdict,
        passed=passed,
        fields=fields,
        list_name=list_name,
        columns=columns,
        rows=rows,
        hidden_rows=max(0, len(dict_items) - MAX_ROWS),
    )


def load_gate(path: str | os.PathLike[str]) -> GateView:
    """Read a gate result JSON file; an unreadable file is an :class:`ArtifactError` (exit 2)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError([f"{path}: no such file (expected the JSON of `opmatrix gate --json`)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError([f"{path}: cannot read: {exc}"]) from None
    except json.JSONDecodeError as exc:
        raise ArtifactError([f"{path}:{exc.lineno}: not JSON: {exc.msg}"]) from None
    return gate_view(data)
