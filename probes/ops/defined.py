"""Defined properties only: outputs an operator does not define uniquely are compared by what it does.

Sorting 8,000 equal values has 8,000! right answers for its indices; a device that sorts a
contiguous copy returns another order than the CPU, and both are right. So an index output is
judged by the values it selects (and by being a permutation where the op promises one), never by
the CPU's tie order; a stable sort's indices, which are defined, are compared exactly::

    out, ref, problem = canonical(unit.overload, unit.cpu_values, out, ref_out)
    # sort: output 1 (indices) of both replaced by input.gather(dim, indices); problem is None
    # unless the device's indices repeat an element along dim

The rules are data, in ``defined.yaml`` beside this file (which ops, which output, which argument
is ``dim``), as tolerances are in ``tolerances.yaml``.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from .layouts import Values

__all__ = ["Canonical", "canonical", "canonical_gradients", "rule_for"]


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, list[dict[str, Any]]]:
    data = yaml.safe_load(Path(__file__).with_name("defined.yaml").read_text(encoding="utf-8")) or {}
    return {"select": list(data.get("select") or []), "unordered": list(data.get("unordered") or [])}


@functools.lru_cache(maxsize=4096)
def rule_for(op_name: str) -> tuple[str, dict[str, Any]] | None:
    """The kind (``select`` or ``unordered``) and rule that covers ``op_name``, or None."""
    for kind, rules in _table().items():
        for rule in rules:
            if fnmatch.fnmatchcase(op_name, rule["op"]):
                return kind, rule
    return None


@dataclass(frozen=True)
class Canonical:
    """Both outputs in a form that holds only what the op defines, and what the device broke
    that the comparison cannot see (repeated indices), or None."""

    out: object
    ref: object
    problem: str | None = None
    #: the outputs were rewritten (the tie order was not compared)
    rewritten: bool = False


def _arg(values: Values, pos: int | None, name: str, default: object) -> object:
    _, args, kwargs = values
    if name in kwargs:
        return kwargs[name]
    if pos is not None and pos < len(args):
        return args[pos]
    return default


def _select(x: torch.Tensor, idx: torch.Tensor, dim: int) -> torch.Tensor:
    """The elements of ``x`` that ``idx`` selects along ``dim`` (an index of a reduction that
    dropped ``dim`` is put back first). Raises when an index is out of range."""
    if x.dim() == 0:
        return x.reshape(1).gather(0, idx.reshape(1)).reshape(idx.shape)
    d = dim % x.dim()
    reduced = idx.dim() < x.dim()
    picked = x.gather(d, idx.unsqueeze(d) if reduced else idx)
    return picked.squeeze(d) if reduced else picked


def _repeats(idx: torch.Tensor, dim: int) -> int:
    """How many indices along ``dim`` repeat one before them (0 for a permutation)."""
    if idx.dim() == 0 or idx.shape[dim % idx.dim()] < 2:
        return 0
    s = idx.sort(dim=dim).values
    return int((s.diff(dim=dim) == 0).sum().item())


def _sorted(t: object, dim: int) -> object:
    if isinstance(t, torch.Tensor) and t.dim() > 0 and t.numel():
        return t.sort(dim=dim).values
    return t


def _swap(seq: object, i: int, value: object) -> object:
    if isinstance(seq, (tuple, list)):
        items = list(seq)
        items[i] = value
        return type(seq)(items) if isinstance(seq, list) else tuple(items)
    return value if i == 0 else seq


def _item(seq: object, i: int) -> object:
    if isinstance(seq, (tuple, list)):
        return seq[i] if i < len(seq) else None
    return seq if i == 0 else None


def _canonical_select(rule: dict[str, Any], values: Values, out: object, ref: object) -> Canonical:
    x = values[0]
    pos, name, default = rule["dim"]
    dim = _arg(values, pos, name, default)
    i = int(rule["indices"])
    a, e = _item(out, i), _item(ref, i)
    if not (isinstance(x, torch.Tensor) and isinstance(dim, int) and isinstance(a, torch.Tensor)
            and isinstance(e, torch.Tensor)) or a.dtype != e.dtype or a.shape != e.shape:
        return Canonical(out, ref)  # nothing to select from, or a mismatch the comparison names
    exact = rule.get("exact_when")
    if exact and _arg(values, None, exact[0], None) == exact[1]:
        return Canonical(out, ref)
    try:
        picked_a = _select(x, a, dim)
    except (IndexError, RuntimeError) as exc:
        return Canonical(out, ref, f"output {i}: indices select no element along dim {dim} ({str(exc)[:80]})")
    picked_e = _select(x, e, dim)
    problem = None
    if rule.get("distinct") and a.dim() and (n := _repeats(a, dim)):
        problem = f"output {i}: {n} indices along dim {dim} repeat an element (they must be distinct)"
    out, ref = _swap(out, i, picked_a), _swap(ref, i, picked_e)
    unordered = rule.get("unordered_when")
    if unordered and _arg(values, unordered[0], unordered[1], None) == unordered[2]:
        d = dim % max(x.dim(), 1)
        out = type(out)(_sorted(t, d) for t in out) if isinstance(out, (tuple, list)) else _sorted(out, d)
        ref = type(ref)(_sorted(t, d) for t in ref) if isinstance(ref, (tuple, list)) else _sorted(ref, d)
    return Canonical(out, ref, problem, rewritten=True)


def _unordered_form(rule: dict[str, Any], res: object) -> object:
    """``res`` with its elements sorted, its inverse mapped back to values, its counts in that order."""
    first = _item(res, int(rule["output"]))
    if not isinstance(first, torch.Tensor) or first.dim() != 1:
        return res
    ordered, perm = first.sort()
    res = _swap(res, int(rule["output"]), ordered)
    inverse = _item(res, int(rule["inverse"]))
    if isinstance(inverse, torch.Tensor) and inverse.numel():
        res = _swap(res, int(rule["inverse"]), first[inverse])
    counts = _item(res, int(rule["counts"]))
    if isinstance(counts, torch.Tensor) and counts.shape == first.shape:
        res = _swap(res, int(rule["counts"]), counts[perm])
    return res


def canonical(op_name: str, values: Values, out: object, ref: object) -> Canonical:
    """The device's outputs ``out`` and the reference ``ref`` (CPU copies, for the unit's CPU
    ``values``) reduced to what ``op_name`` defines; unchanged for every op without a rule."""
    found = rule_for(op_name)
    if found is None or ref is None:
        return Canonical(out, ref)
    kind, rule = found
    if kind == "select":
        return _canonical_select(rule, values, out, ref)
    pos, name, value = rule["when"]
    if _arg(values, pos, name, True) != value:
        return Canonical(out, ref)
    try:
        return Canonical(_unordered_form(rule, out), _unordered_form(rule, ref), rewritten=True)
    except (IndexError, RuntimeError) as exc:
        return Canonical(out, ref, f"output {rule['inverse']}: the inverse maps to no element ({str(exc)[:80]})")


def _tie_sums(x: torch.Tensor, g: torch.Tensor, dim: int) -> torch.Tensor:
    """``g`` with each element replaced by the sum of ``g`` over the elements of its slice along
    ``dim`` whose input value equals its own (a tie group): what a gradient through a selection
    defines, whichever tied element the device selected."""
    if x.dim() == 0 or x.numel() == 0:
        return g
    d = dim % x.dim()
    xs, perm = x.movedim(d, -1).sort(dim=-1, stable=True)
    gs = g.movedim(d, -1).gather(-1, perm)
    n = xs.shape[-1]
    flat_x, flat_g = xs.reshape(-1, n), gs.reshape(-1, n).to(torch.float64 if not g.is_complex() else g.dtype)
    starts = torch.ones_like(flat_x, dtype=torch.long)
    starts[:, 1:] = (flat_x[:, 1:] != flat_x[:, :-1]).long()
    runs = starts.cumsum(-1) - 1 + torch.arange(flat_x.shape[0]).unsqueeze(-1) * n
    sums = torch.zeros(flat_x.numel(), dtype=flat_g.dtype).index_add_(0, runs.flatten(), flat_g.flatten())
    summed = sums[runs].reshape(gs.shape)
    back = torch.empty_like(summed).scatter_(-1, perm, summed)
    return back.movedim(-1, d).to(g.dtype)


def canonical_gradients(op_name: str, values: Values, mask: tuple[bool, ...] | None, got: list[object],
                        expected: list[object]) -> tuple[list[object], list[object]]:
    """The device's and the CPU's gradients reduced to what a selection defines: the input's
    gradient summed over each tie group (the CPU's and the device's tie order may send a gradient
    to different equal elements). Unchanged for ops without a ``select`` rule, a stable sort, or
    when the input carries no gradient."""
    found = rule_for(op_name)
    x = values[0]
    if (found is None or found[0] != "select" or not mask or not mask[0] or not got or not expected
            or not isinstance(x, torch.Tensor)):
        return got, expected
    rule = found[1]
    exact = rule.get("exact_when")
    dim = _arg(values, rule["dim"][0], rule["dim"][1], rule["dim"][2])
    if (exact and _arg(values, None, exact[0], None) == exact[1]) or not isinstance(dim, int):
        return got, expected
    a, e = got[0], expected[0]
    if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or a.shape != x.shape or e.shape != x.shape:
        return got, expected
    return [_tie_sums(x, a, dim), *got[1:]], [_tie_sums(x, e, dim), *expected[1:]]
