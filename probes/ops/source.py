"""The op source: PyTorch's OpInfo database, selected by name, with deterministic samples.

Each OpInfo is addressed by its full name (``softmax``, ``softmax.with_dtype``)::

    >>> [o.full_name for o in select_ops(["softmax"])]                    # doctest: +SKIP
    ['softmax', 'softmax.with_dtype']

Samples are generated once per (OpInfo, dtype) on the CPU with a fixed seed; rank and layout
variants are derived from them by transformation (``layouts.py``), never generated again.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["OpEntry", "UnknownOp", "all_ops", "generate_samples", "select_ops", "source_hash", "values_undefined"]


class UnknownOp(ValueError):
    """An ``--ops`` name that matches no OpInfo; the message suggests the closest names."""


@dataclass(frozen=True)
class OpEntry:
    """One OpInfo, by its full name."""

    full_name: str
    info: Any  # torch.testing._internal.opinfo.core.OpInfo

    @property
    def name(self) -> str:
        return str(self.info.name)


@functools.lru_cache(maxsize=1)
def all_ops() -> tuple[OpEntry, ...]:
    """Every OpInfo of ``op_db`` (importing it takes a few seconds, once per process)."""
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for info in op_db:
        full = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        out.append(OpEntry(full, info))
    return tuple(out)


def select_ops(patterns: Sequence[str] | None) -> list[OpEntry]:
    """OpInfos whose name or full name matches one of ``patterns`` (fnmatch); all when None.

    A plain name selects the OpInfo and its variants (``softmax`` -> ``softmax``,
    ``softmax.with_dtype``). A pattern that matches nothing raises :class:`UnknownOp`.
    """
    ops = all_ops()
    if not patterns:
        return list(ops)
    chosen: dict[str, OpEntry] = {}
    for pattern in patterns:
        hits = [o for o in ops if fnmatch.fnmatchcase(o.full_name, pattern) or fnmatch.fnmatchcase(o.name, pattern)]
        if not hits:
            names = sorted({o.full_name for o in ops})
            close = difflib.get_close_matches(pattern, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownOp(f"--ops: {pattern!r} matches no OpInfo{hint}")
        for o in hits:
            chosen[o.full_name] = o
    return [chosen[k] for k in sorted(chosen)]


def source_hash(entries: Iterable[OpEntry]) -> str:
    """Identity of the op source: torch build plus the selected OpInfo names."""
    import torch

    h = hashlib.sha256()
    h.update(torch.__version__.encode())
    h.update(str(getattr(torch.version, "git_version", "")).encode())
    for e in entries:
        h.update(e.full_name.encode() + b"\0")
    return h.hexdigest()[:16]


def generate_samples(entry: OpEntry, dtype: Any, *, seed: int = 0, limit: int | None = None) -> list[Any]:
    """CPU samples of ``entry`` at ``dtype``, reproducible (seeded once per call)."""
    import random

    import torch

    # seed once per (op, dtype): OpInfo's default re-seeds before every sample (126 us each)
    torch.manual_seed(seed)
    random.seed(seed)
    samples = []
    for i, s in enumerate(entry.info.sample_inputs("cpu", dtype, requires_grad=False, set_seed=False)):
        if limit is not None and i >= limit:
            break
        samples.append(s)
    return samples


def _skip_reason(decorator: Any) -> str | None:
    """The reason string a ``unittest.skip(reason)`` decorator closes over, if it is one."""
    cells = getattr(decorator, "__closure__", None) or ()
    reasons = [c.cell_contents for c in cells if isinstance(c.cell_contents, str)]
    return reasons[0] if reasons else None


def values_undefined(entry: OpEntry, dtype: Any) -> str | None:
    """Why OpInfo says this op's outputs cannot be compared with the CPU's, on any device.

    PyTorch's ``test_compare_cpu`` (device vs CPU, the comparison opmatrix makes) is skipped for
    ops whose values are random (``svd_lowrank``, ``fractional_max_pool2d``, ``rrelu``) or
    undefined for some inputs (shifts past the bit width, overflowing casts, ``unique`` order).
    Those skips, when they hold for every device and this dtype, are read here: the probe then
    compares shapes and dtypes only and says why. A skip that holds only under a condition
    ("when dropout_p > 0") is left to the sample (see the engine).
    """
    for info in getattr(entry.info, "decorators", None) or ():
        if getattr(info, "cls_name", None) != "TestCommon" or getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if getattr(info, "device_type", None) is not None or not getattr(info, "active_if", True):
            continue
        dtypes = getattr(info, "dtypes", None)
        if dtypes is not None and dtype not in dtypes:
            continue
        for decorator in getattr(info, "decorators", ()):
            reason = _skip_reason(decorator)
            if reason and ("non-deterministic" in reason or "undefined" in reason) and "when" not in reason:
                return f"values not compared: OpInfo skips the CPU comparison ({reason})"
    return None
