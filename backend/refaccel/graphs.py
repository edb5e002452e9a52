"""Graph capture and replay (``torch.refaccel.Graph`` / ``torch.refaccel.graph``), as CUDA graphs.

Inside ``with torch.refaccel.graph(g):`` every device call is recorded with its arguments and
the tensors it returned; ``g.replay()`` runs the recorded calls again on the same tensors (static
buffers: write new inputs into the captured input tensors, read results from the captured
outputs). Recorded calls run once during capture too, so the outputs hold values at once::

    >>> x = torch.ones(3, device="refaccel")
    >>> g = torch.refaccel.Graph()
    >>> with torch.refaccel.graph(g):
    ...     y = x * 2 + 1
    >>> _ = x.copy_(torch.full((3,), 2.0)); g.replay()
    >>> y.cpu().tolist()     # the replay computed 2 * 2 + 1 on the new values
    [5.0, 5.0, 5.0]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from . import runtime

__all__ = ["Graph", "graph"]


class Graph:
    """A captured sequence of device calls over static tensors."""

    def __init__(self) -> None:
        self._calls: list[tuple[Any, tuple[Any, ...], dict[str, Any], list[torch.Tensor]]] = []
        self.captured = False

    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Keep one call of the capture (``out``: what it returned)."""
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self._calls.append((func, args, kwargs, outs))

    def replay(self) -> None:
        """Run the captured calls again; results land in the captured output tensors."""
        if not self.captured:
            raise RuntimeError("refaccel: replay() of a graph that was never captured")
        runtime.ensure_ready()
        for func, args, kwargs, outs in self._calls:
            fresh = [t for t in tree_leaves(func(*args, **kwargs)) if isinstance(t, torch.Tensor)]
            for old, new in zip(outs, fresh, strict=False):
                if new is not old and old.data_ptr() != new.data_ptr():
                    old.copy_(new)

    def reset(self) -> None:
        """Forget the capture."""
        self._calls.clear()
        self.captured = False


class _Capture(TorchDispatchMode):
    def __init__(self, target: Graph):
        super().__init__()
        self.target = target

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.target.record(func, args, kwargs, out)
        return out


@contextlib.contextmanager
def graph(target: Graph) -> Iterator[Graph]:
    """Capture the device calls made inside the block into ``target``."""
    runtime.ensure_ready()
    target.reset()
    with _Capture(target):
        yield target
    target.captured = True
