"""Layout variants of a sample, derived by transformation (as OpInfo's ``noncontiguous()``).

A variant is built on the CPU as a view into a *base* tensor; on the device the same view is
re-created over a copy of the base with ``as_strided``, so the device sees exactly the sizes,
strides and storage offset the layout names::

    >>> import torch
    >>> v = make_variant(torch.arange(6.).view(2, 3), Layout.transposed)
    >>> v.view.stride()
    (1, 2)

Layouts that do not apply to a tensor (``channels_last`` below rank 4, ``transposed`` below
rank 2, anything on a scalar tensor) return None and the cell does not exist for that sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import torch

from opmatrix.schema import Layout

__all__ = ["Values", "Variant", "make_variant", "to_device", "transform_sample"]

#: one sample's values, ``(input, args, kwargs)`` as OpInfo's ``SampleInput`` holds them; inside,
#: any Python values: tensors (or layout :class:`Variant` s) nested in tuples, lists and dicts
Values = tuple[object, Sequence[object], Mapping[str, object]]
T = TypeVar("T")


@dataclass(frozen=True)
class Variant:
    """A layout view of a tensor and the contiguous base it views into."""

    base: torch.Tensor
    view: torch.Tensor


def _strided_base(view: torch.Tensor) -> Variant:
    """A variant whose base is the view's storage as a flat contiguous tensor."""
    numel = view.untyped_storage().nbytes() // view.element_size()
    flat = torch.empty(0, dtype=view.dtype).set_(view.untyped_storage(), 0, (numel,), (1,))
    return Variant(flat, view)


def _partial(t: torch.Tensor) -> bool:
    """Whether ``t`` views only part of its storage (an op like ``as_strided`` may read the rest)."""
    try:
        return t.storage_offset() != 0 or t.numel() * t.element_size() != t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):  # no storage to speak of (a functional wrapper)
        return False


def make_variant(t: torch.Tensor, layout: Layout) -> Variant | None:
    """The ``layout`` variant of contiguous CPU tensor ``t`` (same values), or None if n/a.

    The contiguous variant of a view into a larger storage keeps that storage: the device gets a
    copy of all of it and the same view over it (``as_strided`` samples read outside the view)."""
    if layout is Layout.contiguous:
        return _strided_base(t) if _partial(t) else Variant(t, t)
    if t.dim() == 0 or t.numel() == 0:
        return None
    if layout is Layout.noncontiguous:
        buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        buf[..., ::2] = t
        return Variant(buf, buf[..., ::2])
    if layout is Layout.transposed:
        if t.dim() < 2 or t.shape[-1] == 1 or t.shape[-2] == 1:
            return None
        base = t.transpose(-1, -2).contiguous()
        return Variant(base, base.transpose(-1, -2))
    if layout is Layout.channels_last:
        if t.dim() != 4 or t.shape[1] == 1 or t.shape[2] * t.shape[3] == 1:
            return None
        return _strided_base(t.contiguous(memory_format=torch.channels_last))
    if layout is Layout.storage_offset:
        offset = 3
        buf = torch.zeros(t.numel() + offset, dtype=t.dtype)
        buf[offset:] = t.reshape(-1)
        return Variant(buf, buf[offset:].view(t.shape))
    if layout is Layout.expanded:
        if t.shape[0] == 1:
            return None
        row = t[:1].clone()
        return Variant(row, row.expand(t.shape))
    raise AssertionError(f"unhandled layout {layout}")


def to_device(variant: Variant, device: torch.device | str) -> torch.Tensor:
    """Re-create the variant's view on ``device`` over a device copy of its base."""
    # always a copy: on the host, .to("cpu") would alias the reference's inputs, and an op that
    # writes its input would then feed the reference's leftovers to the device run
    base = variant.base.to(device, copy=True)
    v = variant.view
    if v is variant.base:
        return base
    offset = v.storage_offset() - variant.base.storage_offset()
    return base.as_strided(v.size(), v.stride(), offset)


#: types that are never containers nor tensors: returned as they are without further checks
_ATOMS = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.memory_format,
                    torch.layout, slice, type(Ellipsis)})


def map_values(obj: T, fn: Callable[..., object], leaf: tuple[type, ...] = (torch.Tensor,)) -> T:
    """Apply ``fn`` to every ``leaf`` object inside nested tuples, lists and dicts (the same structure
    comes back, each leaf replaced by what ``fn`` made of it)."""
    if type(obj) in _ATOMS:  # most values are plain scalars: one set lookup instead of four isinstance
        return obj
    if isinstance(obj, leaf):
        return cast(T, fn(obj))
    # a container's scalars and leaves are handled in place, without a call each (most samples
    # are a tensor, a tuple of tensors and scalars, a dict of scalars: the calls were most of it)
    if isinstance(obj, tuple):
        return cast(T, tuple([o if type(o) in _ATOMS else fn(o) if isinstance(o, leaf) else map_values(o, fn, leaf)
                              for o in obj]))
    if isinstance(obj, list):
        return cast(T, [o if type(o) in _ATOMS else fn(o) if isinstance(o, leaf) else map_values(o, fn, leaf)
                        for o in obj])
    if isinstance(obj, dict):
        return cast(T, {k: v if type(v) in _ATOMS else fn(v) if isinstance(v, leaf) else map_values(v, fn, leaf)
                        for k, v in obj.items()})
    return obj


def _first_tensor(obj: object) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (tuple, list)):
        for o in obj:
            t = _first_tensor(o)
            if t is not None:
                return t
    if isinstance(obj, dict):
        return _first_tensor(list(obj.values()))
    return None


def _has_unstrided(values: Values) -> bool:
    found: list[bool] = []

    def note(t: torch.Tensor) -> torch.Tensor:
        found.append(t.layout is not torch.strided or t.is_nested)
        return t

    map_values(values, note)
    return any(found)


def primary_tensor(values: Values) -> torch.Tensor | None:
    """The tensor whose rank and layout name the cell: the input, else the first tensor."""
    return _first_tensor(values)


#: the last sample prepared, with the prepared form (every layout of one sample is asked in a row)
_LAST: list[object] = [None, None]
Prepared = tuple[Values, torch.Tensor, bool]


def _prepare(values: Values) -> Prepared | None:
    """``values`` with conj/neg views resolved, its primary tensor, and whether any is unstrided."""
    if _LAST[0] is values:
        return cast("Prepared | None", _LAST[1])
    if primary_tensor(values) is None:
        prepared = None
    else:
        # conjugate / negative *views* (OpInfo makes some) carry a bit, not values: rebuilding a
        # view over the storage would drop it, so materialise them first (same values, plain tensors)
        copied: list[bool] = []

        def resolve(t: torch.Tensor) -> torch.Tensor:
            if t.is_conj() or t.is_neg():
                copied.append(True)
                return t.resolve_conj().resolve_neg()
            return t

        resolved = map_values(values, resolve)
        primary = primary_tensor(resolved)
        assert primary is not None  # resolving conj/neg bits keeps every tensor
        prepared = (resolved, primary, _has_unstrided(resolved))
        if copied:  # fresh copies per layout, as before: an in-place op must not leak into the next layout
            return prepared
    _LAST[0], _LAST[1] = values, prepared  # holding ``values`` keeps its id from being reused
    return prepared


def transform_sample(values: Values, layout: Layout) -> Values | None:
    """Apply ``layout`` to every tensor in ``values`` (input, args, kwargs).

    Returns the values with each tensor replaced by a :class:`Variant` (tensors the layout does
    not apply to stay as they are), or None when the layout does not apply to the primary tensor.
    """
    prepared = _prepare(values)
    if prepared is None:
        return None
    values, primary, unstrided = prepared
    if unstrided:  # sparse / nested tensors: moved to the device as they are
        return map_values(values, lambda t: Variant(t, t)) if layout is Layout.contiguous else None
    if layout is not Layout.contiguous and (not primary.is_contiguous() or make_variant(primary, layout) is None):
        return None

    def one(t: torch.Tensor) -> Variant:
        v = make_variant(t, layout) if t.is_contiguous() else None
        if v is not None:
            return v
        return _strided_base(t) if not t.is_contiguous() else Variant(t, t)

    return map_values(values, one)
