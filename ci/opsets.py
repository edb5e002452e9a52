"""Resolve a requirement's ``ops`` into operator overload names.

``ops`` mixes fnmatch patterns over the matrix's overload names with named sets::

    resolve_ops(["aten.mm.*", "aten.softmax.int", "tag:core"], probed)
    # -> OpSelection(ops=[...every probed mm overload, aten.softmax.int, 193 core overloads...],
    #                unmatched=[])

- a name without wildcards is required as written, probed or not (then it is "not probed");
- a pattern with wildcards selects the probed overloads it matches; matching none is itself a
  finding (the pattern names nothing that was probed);
- ``tag:NAME`` selects every ATen overload carrying ``torch.Tag.NAME`` (``tag:core`` = PyTorch's
  core ATen opset), probed or not. torch is imported only when a tag is used.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from opmatrix.schema import ArtifactError, OpName

__all__ = ["OpSelection", "is_pattern", "resolve_ops", "tagged_overloads"]

_WILDCARDS = frozenset("*?[")


def is_pattern(text: str) -> bool:
    """Whether ``text`` is an fnmatch pattern rather than one overload name."""
    return any(ch in _WILDCARDS for ch in text)


@functools.cache
def tagged_overloads(tag: str) -> frozenset[str]:
    """Every ATen overload (``aten.add.Tensor``) carrying ``torch.Tag.<tag>``."""
    import torch

    want = getattr(torch.Tag, tag, None)
    if not isinstance(want, torch.Tag):
        known = ", ".join(sorted(name for name in dir(torch.Tag) if not name.startswith("_") and name != "name"))
        raise ArtifactError([f"ops: unknown operator set 'tag:{tag}'; torch.Tag has: {known}"])
    out = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = OpName.of_schema(schema.name, schema.overload_name)
        try:
            op = getattr(getattr(torch.ops.aten, name.name), name.overload)
        except (AttributeError, RuntimeError):  # schemas without a Python binding
            continue
        if want in op.tags:
            out.add(str(name))
    return frozenset(out)


@dataclass(frozen=True)
class OpSelection:
    """The overloads a requirement selects, and its patterns that selected nothing probed."""

    ops: tuple[str, ...]
    unmatched: tuple[str, ...]


def resolve_ops(patterns: Iterable[str], probed: Iterable[str]) -> OpSelection:
    """Resolve op names, fnmatch patterns and ``tag:`` sets against the probed overload names."""
    probed_sorted = sorted(probed)
    ops: set[str] = set()
    unmatched: list[str] = []
    for pattern in patterns:
        if pattern.startswith("tag:"):
            ops |= tagged_overloads(pattern[len("tag:") :])
        elif is_pattern(pattern):
            hits = fnmatch.filter(probed_sorted, pattern)
            if hits:
                ops.update(hits)
            else:
                unmatched.append(pattern)
        else:
            ops.add(pattern)
    return OpSelection(tuple(sorted(ops)), tuple(unmatched))
