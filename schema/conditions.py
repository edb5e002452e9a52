"""Argument conditions: the simple argument features that can separate the paths of one cell.

The seed's ``aten.softmax.int`` entry says "native for last-axis contiguous, composite otherwise":
the condition there is ``dim: last``. The probes compute every feature below for each sample,
and when one feature separates samples that took different paths it is recorded with each group.
A query evaluates the same features from the argument values it is given::

    >>> features_of({"dim": -1}, rank=3)
    {'dim': 'last'}
    >>> matches({"dim": "last"}, {"dim": 2}, rank=3)
    True

Features are plain data (argument name -> value label) so that they serialise as YAML maps. The
vocabulary is closed and small on purpose:

- ``dim`` / ``axis``: ``last`` when the integer names the last axis (``-1`` or ``rank - 1``),
  ``first`` for axis 0 of a rank >= 2 tensor, ``middle`` otherwise; lists of dims are
  ``last`` when they include the last axis only.
- any argument that is sometimes a tensor and sometimes a Python number: ``tensor`` / ``scalar``.
- booleans: ``true`` / ``false``.
- ``None`` -> ``none``.
- ``dtype`` (an explicit output dtype): its name, e.g. ``float64``; always recorded when given,
  and ``none`` when a query does not pass it.
- ``input``: ``empty`` when the op's input tensor has no elements, else ``nonempty``. Recorded
  only to keep a fault that happens on empty inputs alone (torch_xla's ``roll`` dies on them) off
  the samples that ran: the cell splits into an ``input: empty`` group and an ``input: nonempty``
  one. A query by argument values cannot evaluate it and answers for both groups.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ALWAYS_RECORDED", "ArgValue", "DEFAULT_LABELS", "INPUT", "TENSOR", "features_of", "matches", "describe"]

#: Marker the probes use for a tensor-valued argument (tensors never reach the schema).
TENSOR = "<tensor>"

ArgValue = object

_DIM_NAMES = frozenset({"dim", "axis", "dims"})


def _dim_label(value: object, rank: int | None) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if rank is None:
            return "last" if value == -1 else None
        if rank == 0:
            return "last"
        norm = value % rank if -rank <= value < rank else value
        if norm == rank - 1:
            return "last"
        return "first" if norm == 0 else "middle"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        labels = {_dim_label(v, rank) for v in value}
        return "last" if labels == {"last"} else "multi"
    return None


#: arguments whose value is recorded as a condition whenever it is given (not only when it
#: separates paths): an explicit output ``dtype`` changes what the op computes
ALWAYS_RECORDED = frozenset({"dtype"})
#: the input-emptiness feature (``empty`` / ``nonempty``): separates faults only, never paths
INPUT = "input"
#: labels of optional arguments when a query does not pass them
DEFAULT_LABELS = {"dtype": "none"}


def _label(name: str, value: object, rank: int | None) -> str | None:
    if name in _DIM_NAMES:
        return _dim_label(value, rank)
    if name in ALWAYS_RECORDED:
        return "none" if value is None else str(value).removeprefix("torch.")
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == TENSOR:
        return "tensor"
    if isinstance(value, (int, float, complex)):
        return "scalar"
    return None


def features_of(args: Mapping[str, ArgValue], rank: int | None = None) -> dict[str, str]:
    """Feature labels for named argument values (tensors given as :data:`TENSOR`)."""
    out: dict[str, str] = {}
    for name, value in args.items():
        label = _label(name, value, rank)
        if label is not None:
            out[name] = label
    return out


def matches(condition: Mapping[str, str], args: Mapping[str, ArgValue], rank: int | None) -> bool | None:
    """Whether ``args`` satisfy ``condition``: True, False, or None when an argument is missing."""
    feats = features_of(args, rank)
    for name, want in condition.items():
        got = feats.get(name, DEFAULT_LABELS.get(name))
        if got is None:
            return None
        if got != want:
            return False
    return True


def describe(condition: Mapping[str, str]) -> str:
    """Human text for a condition, e.g. ``dim=last, alpha=scalar``; ``any`` when empty."""
    return ", ".join(f"{k}={v}" for k, v in sorted(condition.items())) or "any"
