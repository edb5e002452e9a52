"""The kernel table (``kernels.yaml``) as frozen rules, loaded once per process.

A ``Rule`` says what one generation's native kernel for one ATen overload serves; ``check``
returns None when a call is inside the constraints, else what is outside them::

    >>> rules = load_rules("g2")
    >>> rules["aten::add.Tensor"].describe()
    'dtypes float32, bfloat16, float16, int32, int64, bool; ranks 0-8; any layout'
    >>> load_fallback_ops("g2") >= {"aten::sort", "aten::topk"}
    True
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

__all__ = ["Rule", "load_rules", "load_fallback_ops", "load_fallback_dtypes", "load_table", "storable_dtypes", "dtype_name"]

_PATH = Path(__file__).with_name("kernels.yaml")
_LAYOUTS = ("any", "contiguous")
_OTHERWISE = ("policy", "compose")
_DEFECTS = (None, "storage_order", "host_int64")
_ARG_CONDITIONS = {"dim": ("last",)}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Rule:
    """Constraints of one generation's native kernel for one overload."""

    op: str
    family: str
    dtypes: frozenset[torch.dtype]
    dtype_order: tuple[str, ...]
    rank_min: int
    rank_max: int
    contiguous_only: bool
    last_dim_only: bool
    otherwise: str
    defect: str | None
    #: low-precision float dtypes this kernel sums in their own precision (g1's bfloat16 sums)
    accumulate_low: frozenset[torch.dtype] = frozenset()

    def describe(self) -> str:
        """What the kernel serves, as shown in rejection messages."""
        parts = [f"dtypes {', '.join(self.dtype_order)}", f"ranks {self.rank_min}-{self.rank_max}"]
        parts.append("contiguous layout" if self.contiguous_only else "any layout")
        if self.last_dim_only:
            parts.append("dim=last")
        return "; ".join(parts)


@functools.cache
def load_table() -> dict[str, Any]:
    """The raw YAML table (parsed once)."""
    with _PATH.open() as fh:
        data = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # safe; C when available
    if not isinstance(data, dict) or "kernels" not in data:
        raise ValueError(f"{_PATH}: expected a mapping with 'kernels'")
    return data


def _dtypes(spec: Any, groups: dict[str, list[str]], where: str) -> list[str]:
    names = groups.get(spec) if isinstance(spec, str) else spec
    if not isinstance(names, list):
        raise ValueError(f"{_PATH}: {where}.dtypes: expected a list or one of the groups {sorted(groups)}")
    for name in names:
        if not isinstance(getattr(torch, name, None), torch.dtype):
            raise ValueError(f"{_PATH}: {where}.dtypes: {name!r} is not a torch dtype")
    return list(names)


def _rule(op: str, family: str, spec: dict[str, Any], groups: dict[str, list[str]], where: str) -> Rule:
    unknown = set(spec) - {"dtypes", "ranks", "layouts", "args", "otherwise", "defect", "accumulate_low"}
    if unknown:
        raise ValueError(f"{_PATH}: {where}: unknown keys {sorted(unknown)}")
    names = _dtypes(spec.get("dtypes"), groups, where)
    lo, hi = spec.get("ranks", [0, 8])
    layouts = spec.get("layouts", "any")
    otherwise = spec.get("otherwise", "policy")
    defect = spec.get("defect")
    args = spec.get("args") or {}
    if layouts not in _LAYOUTS or otherwise not in _OTHERWISE or defect not in _DEFECTS:
        raise ValueError(f"{_PATH}: {where}: layouts in {_LAYOUTS}, otherwise in {_OTHERWISE}, defect in {_DEFECTS}")
    for key, value in args.items():
        if value not in _ARG_CONDITIONS.get(key, ()):
            raise ValueError(f"{_PATH}: {where}.args.{key}: expected one of {_ARG_CONDITIONS.get(key, ())}")
    return Rule(
        op=op,
        family=family,
        dtypes=frozenset(getattr(torch, n) for n in names),
        dtype_order=tuple(names),
        rank_min=int(lo),
        rank_max=int(hi),
        contiguous_only=layouts == "contiguous",
        last_dim_only=args.get("dim") == "last",
        otherwise=otherwise,
        defect=defect,
        accumulate_low=frozenset(getattr(torch, n) for n in _dtypes(spec.get("accumulate_low", []), groups, where)),
    )


@functools.cache
def load_rules(generation: str) -> dict[str, Rule]:
    """Native kernels of ``generation``: overload name -> Rule."""
    data = load_table()
    if generation not in data["generations"]:
        raise ValueError(f"unknown refaccel generation {generation!r} (known: {sorted(data['generations'])})")
    groups = data.get("groups", {})
    rules: dict[str, Rule] = {}
    for i, entry in enumerate(data["kernels"]):
        spec = entry.get(generation)
        if spec is None:
            continue
        for op in entry["ops"]:
            if op in rules:
                raise ValueError(f"{_PATH}: kernels[{i}]: {op} listed twice for {generation}")
            rules[op] = _rule(op, entry["family"], spec, groups, f"kernels[{i}].{generation}")
    return rules


@functools.cache
def load_fallback_ops(generation: str) -> frozenset[str]:
    """Operator names (``aten::sort``, any overload) the host fallback may serve in ``generation``."""
    return frozenset(load_table()["generations"][generation].get("fallback", []))


@functools.cache
def load_fallback_dtypes(generation: str) -> frozenset[torch.dtype]:
    """Dtypes the host fallback serves in ``generation`` (other dtypes are rejected)."""
    data = load_table()
    spec = data["generations"][generation].get("fallback_dtypes", "all")
    names = _dtypes(spec, data.get("groups", {}), f"generations.{generation}.fallback_dtypes")
    return frozenset(getattr(torch, n) for n in names)


@functools.cache
def storable_dtypes() -> tuple[torch.dtype, ...]:
    """Dtypes device memory can hold (allocation and copies); others are rejected."""
    return tuple(getattr(torch, n) for n in load_table()["storable"])
