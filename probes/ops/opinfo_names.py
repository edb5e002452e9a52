"""Which OpInfo entry exercises an ATen operator: the ``--ops`` names to probe a missing overload.

``opmatrix explain`` finds nodes the matrix never probed (``aten.gelu.default``); the probe takes
OpInfo names (``nn.functional.gelu``). An OpInfo names the ATen operator it tests (``aten_name``,
and its aliases); internal overloads reached through a public one (``_softmax`` through
``softmax``, ``_native_batch_norm_legit_no_training`` through ``batch_norm``) are found by
dropping leading underscores, a ``native_`` prefix and trailing ``_word`` parts until a name
matches::

    >>> opinfo_names(["aten.gelu.default", "aten._softmax.default"])  # imports OpInfo (seconds): not run  # doctest: +SKIP
    {'aten.gelu.default': ['nn.functional.gelu'], 'aten._softmax.default': ['softmax']}

The table is built from ``op_db`` once per torch install and cached beside OpInfo's name index.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from opmatrix.schema import OpName
from opmatrix.schema.files import read_cache_json, say_cache_miss, write_cache_entry

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["aten_base", "candidate_names", "opinfo_names"]


def aten_base(overload: str) -> str:
    """``gelu`` for ``aten.gelu.default`` or ``aten::gelu`` (an :class:`OpName`'s name), and for
    the partial spellings ``aten.gelu``, ``gelu.default`` or ``gelu``."""
    try:
        return OpName.parse(overload).name
    except ValueError:
        parts = overload.split(".")  # a partial name: no namespace, or no overload
        return parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]


def candidate_names(base: str) -> list[str]:
    """The names to look for, most specific first (``_native_batch_norm_legit`` ... ``batch_norm``)."""
    out: list[str] = []

    def add(name: str) -> None:
        if name and name not in out:
            out.append(name)

    add(base)
    stripped = base.lstrip("_")
    add(stripped)
    if stripped.startswith("native_"):
        stripped = stripped[len("native_"):]
        add(stripped)
    words = stripped.split("_")
    for n in range(len(words) - 1, 0, -1):
        add("_".join(words[:n]))
    return out


def _build() -> dict[str, list[str]]:
    """ATen name -> the OpInfo names (without variant) that declare it, plain OpInfos before masked ones."""
    from torch.testing._internal.common_methods_invocations import op_db

    table: dict[str, list[str]] = {}
    for info in op_db:
        names = {str(info.aten_name or ""), str(info.name).split(".")[-1]}
        names |= {str(a.name).split(".")[-1] for a in getattr(info, "aliases", ()) or ()}
        for name in names:
            if name and str(info.name) not in table.setdefault(name, []):
                table[name].append(str(info.name))
    for infos in table.values():
        infos.sort(key=lambda n: (n.startswith(("masked.", "_refs.", "special.")), n.count("."), n))
    return table


def _cache_path() -> Path | None:
    from .source import _index_path

    names = _index_path()
    return None if names is None else names.with_name(names.name.replace("names-", "aten-", 1))


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, list[str]]:
    path = _cache_path()
    if path is not None:
        data = read_cache_json(path)  # a FIFO, a link, a huge or torn file: a miss, said once
        if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
            return {str(k): [str(x) for x in v] for k, v in data.items()}
        if data is not None:
            say_cache_miss(path, "is not a table of ATen names (empty or of another shape)")
    table = _build()
    if path is not None:
        write_cache_entry(path, json.dumps(table, sort_keys=True))
    return table


def opinfo_names(overloads: Iterable[str]) -> dict[str, list[str]]:
    """Each overload -> the OpInfo names whose probe calls it (empty when no OpInfo does)."""
    table = _table()
    out: dict[str, list[str]] = {}
    for overload in overloads:
        found: list[str] = []
        for name in candidate_names(aten_base(overload)):
            if name in table:
                found = table[name][:1]  # the primary entry: one --ops name per overload
                break
        out[overload] = found
    return out
