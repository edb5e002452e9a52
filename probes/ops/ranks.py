"""Rank extension: OpInfo's samples at the ranks a contract declares (``probe --ranks 2-5``).

OpInfo's samples have the ranks their authors chose (softmax: 0 to 3). A contract that declares
ranks 2 through 5 would stay ``unknown`` at 4 and 5 on every backend; ``--ranks`` extends each
sample with leading dimensions by its operator family's rule (``extensions.yaml``, data, not
branches)::

    >>> rule_for(entry_of("softmax")).rule, rule_for(entry_of("mm"))  # needs OpInfo entries: not run  # doctest: +SKIP
    ('kept_axis', None)

The extended samples are ordinary samples from then on: every layout, the CPU reference computed
on the same extended input, their cells marked ``source: rank extension``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

from opmatrix.probes.options import parse_ranks

from .layouts import map_values, primary_tensor
from .values import tensors_in

if TYPE_CHECKING:
    from torch.testing._internal.opinfo.core import SampleInput

    from .layouts import Values
    from .source import OpEntry

__all__ = ["RankRule", "extend_samples", "parse_ranks", "rank_rules", "rule_for"]

_PATH = Path(__file__).with_name("extensions.yaml")
_RULES = ("batch", "kept_axis")
#: samples extended to each declared rank (the highest-rank ones: they carry the most structure)
PER_RANK = 3


@dataclass(frozen=True)
class RankRule:
    """One operator family's way of adding leading dimensions."""

    family: str
    rule: str
    opinfo_classes: tuple[str, ...]
    ops: tuple[str, ...]


@functools.cache
def load_extensions() -> dict[str, Any]:
    """The parsed ``extensions.yaml``."""
    with _PATH.open() as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("rank_extension"), dict):
        raise ValueError(f"{_PATH}: expected a mapping with rank_extension and accumulation")
    return data


@functools.cache
def rank_rules() -> tuple[RankRule, ...]:
    """The families of ``extensions.yaml``'s ``rank_extension``, in file order."""
    out = []
    for family, spec in load_extensions()["rank_extension"].items():
        if spec.get("rule") not in _RULES:
            raise ValueError(f"{_PATH}: rank_extension.{family}.rule: expected one of {_RULES}")
        out.append(RankRule(family, spec["rule"], tuple(spec.get("opinfo_classes") or ()), tuple(spec.get("ops") or ())))
    return tuple(out)


def rule_for(entry: OpEntry) -> RankRule | None:
    """The rank rule of an OpInfo (by class, then by name), or None: no rule applies."""
    classes = {c.__name__ for c in type(entry.info).__mro__}
    for rule in rank_rules():
        if classes & set(rule.opinfo_classes) or entry.info.name in rule.ops:
            return rule
    return None


def _grow(t: torch.Tensor, extra: int) -> torch.Tensor:
    """``t`` with ``extra`` leading dimensions of size 2; each slice is ``t``'s values rotated by a
    different amount (same value domain, different values per batch element)."""
    slices = [t.reshape(-1).roll(k).reshape(t.shape) for k in range(2 ** extra)]
    return torch.stack(slices).reshape(*(2,) * extra, *t.shape).clone()


def _negative_dims(value: object, ndim: int) -> object:
    """An integer ``dim`` (or a list of them) counted from the end of an ``ndim``-rank input."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value - ndim if value >= 0 else value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return type(value)(v - ndim if v >= 0 else v for v in value)
    return value


def _dim_args(op: Any, values: Values, ndim: int) -> Values:
    """``values`` with every argument named ``dim``/``dims``/``axis`` counted from the end."""
    inp, args, kwargs = values
    names = ("dim", "dims", "axis")
    kwargs = {k: _negative_dims(v, ndim) if k in names else v for k, v in kwargs.items()}
    try:
        schema = op._schema.arguments if hasattr(op, "_schema") else None
    except AttributeError:
        schema = None
    positional = list(args)
    if schema is None:  # an OpInfo's Python callable: the common ``fn(input, dim, ...)`` spelling
        if positional and isinstance(positional[0], (int, list, tuple)) and not isinstance(positional[0], bool):
            positional[0] = _negative_dims(positional[0], ndim)
    else:
        for i, a in enumerate(schema[1:]):
            if a.name in names and i < len(positional):
                positional[i] = _negative_dims(positional[i], ndim)
    return inp, tuple(positional), kwargs


def extend_values(rule: RankRule, values: Values, target: int, op: Any = None) -> Values | None:
    """``values`` with its input at rank ``target`` by ``rule``, or None when it does not apply."""
    primary = primary_tensor(values)
    if primary is None or primary.dim() >= target:
        return None
    ndim, extra = primary.dim(), target - primary.dim()
    tensors = tensors_in(values)
    if any(t.dim() > ndim for t in tensors) or any(not t.layout == torch.strided for t in tensors):
        return None  # an operand of higher rank than the input (it broadcasts the input): not this rule's
    if rule.rule == "kept_axis":
        if ndim == 0:
            return None
        values = _dim_args(op, values, ndim)
    return map_values(values, lambda t: _grow(t, extra) if t.dim() == ndim else t)


def extend_samples(entry: OpEntry, samples: list[SampleInput], ranks: tuple[int, int],
                   overload: Any = None) -> tuple[list[tuple[SampleInput, int]], str | None]:
    """Extended samples for the declared ``ranks`` that OpInfo's samples do not reach, each with
    the index of the sample it came from; or why the op is not extended."""
    from torch.testing._internal.opinfo.core import SampleInput

    rule = rule_for(entry)
    if rule is None:
        return [], (f"ranks {ranks[0]}-{ranks[1]} not extended: no rank rule covers {entry.info.name} "
                    f"(rules: probes/ops/extensions.yaml)")
    have = {p.dim() for s in samples if (p := primary_tensor((s.input, tuple(s.args), dict(s.kwargs)))) is not None}
    out: list[tuple[SampleInput, int]] = []
    order = sorted(range(len(samples)), key=lambda i: -_rank(samples[i]))
    for target in range(ranks[0], ranks[1] + 1):
        if target in have:
            continue
        made = 0
        for i in order:
            s = samples[i]
            values = extend_values(rule, (s.input, tuple(s.args), dict(s.kwargs)), target, overload or entry.info.op)
            if values is None:
                continue
            grown = SampleInput(values[0], args=tuple(values[1]), kwargs=dict(values[2]))
            grown.output_process_fn_grad = getattr(s, "output_process_fn_grad", None) or (lambda x: x)
            out.append((grown, i))
            made += 1
            if made >= PER_RANK:
                break
    if not out and any(t not in have for t in range(ranks[0], ranks[1] + 1)):
        return [], f"ranks {ranks[0]}-{ranks[1]} not extended: the {rule.family} rule applies to none of its samples"
    return out, None


def _rank(s: SampleInput) -> int:
    p = primary_tensor((s.input, tuple(s.args), dict(s.kwargs)))
    return p.dim() if p is not None else -1
