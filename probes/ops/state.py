"""What the engine keeps per worker (:class:`EngineState`) and what it probes (:class:`ProbeOptions`).

    st = engine_state(ctx)         # built once per worker, kept in ctx.cache
    st.adapter, st.ops["softmax"], st.backend_fallback
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from opmatrix.backend import Adapter
from opmatrix.schema import Layout, OpName

from . import observe
from .source import OpEntry, all_ops

if TYPE_CHECKING:

    from opmatrix.probes.runner import WorkerContext
    from opmatrix.schema import ExecPath

__all__ = ["EngineState", "InlineContext", "ProbeOptions", "engine_state"]


@dataclass
class ProbeOptions:
    """What to probe for each task."""

    layouts: tuple[Layout, ...] = tuple(Layout)
    autograd: bool = True
    #: off | auto (eager-unavailable cells, plus compiled == eager for one sample per op at
    #: ``representative_dtype``) | all (that check at every dtype)
    compile: str = "auto"
    representative_dtype: str = "float32"
    max_samples: int | None = None
    autograd_per_cell: int = 2
    retry_wrong: bool = True
    #: the torch.compile backend of compile-mode cells (None: the adapter's)
    compile_backend: str | None = None
    #: probe --ranks LO-HI: OpInfo's samples extended to the declared ranks (:mod:`.ranks`)
    ranks: tuple[int, int] | None = None
    #: the dynamic-shape compile check beside the static one (once per op and dtype; :mod:`.dynamic`)
    dynamic: bool = True

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ProbeOptions:
        """Options from the runner's JSON payload (unknown keys ignored)."""
        d = dict(d or {})
        if "layouts" in d and d["layouts"] is not None:
            d["layouts"] = tuple(Layout(v) for v in d["layouts"])
        else:
            d.pop("layouts", None)
        if d.get("ranks") is not None:
            from .ranks import parse_ranks

            d["ranks"] = parse_ranks(d["ranks"]) if isinstance(d["ranks"], str) else tuple(d["ranks"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


#: one cell's calls as the engine counts them: (overload, dtype, rank, layout, sorted argument features)
CallKey = tuple[OpName, torch.dtype, int, Layout, tuple[tuple[str, str], ...]]


@dataclass
class EngineState:
    """Per-worker state: the adapter, the OpInfo table, the overload cache, registrations."""

    adapter: Adapter
    ops: dict[str, OpEntry]
    overloads: observe.OverloadCache = field(default_factory=observe.OverloadCache)
    backend_fallback: bool = False
    #: whether the adapter has a fallback counter of its own (learned from its first call)
    counter: bool = False
    #: profiled calls per cell key (see :func:`wants_trace`)
    traced: dict[CallKey, int] = field(default_factory=dict)

    #: on the host adapter, a composite cell key's path once its leaf ops were recorded twice
    host_paths: dict[CallKey, tuple[ExecPath, list[str], str | None]] = field(default_factory=dict)
    #: recorded composite calls per cell key on the host adapter
    host_recorded: dict[CallKey, int] = field(default_factory=dict)

    def learn_host_path(self, key: CallKey, path: ExecPath, components: list[str], note: str | None,
                        per_cell: int = 2) -> None:
        """On the host adapter, keep a composite cell key's classification after ``per_cell``
        recorded calls: there is no fallback to find on the host, so its path is the dispatcher's
        choice for that key, and the leaf ops (a Python dispatch mode, the dearest part of a host
        call) are recorded for the first calls of each cell only. Other adapters record every
        composite call: a fallback may hide behind any one of them."""
        if not self.adapter.is_host:
            return
        done = self.host_recorded[key] = self.host_recorded.get(key, 0) + 1
        if done >= per_cell:
            self.host_paths[key] = (path, list(components), note)

    def wants_trace(self, key: CallKey, per_cell: int = 2) -> bool:
        """Whether to profile this call: always without an adapter counter; with one, the first
        ``per_cell`` calls of each cell key (the counter then covers the rest, cross-checked)."""
        if self.adapter.is_host:  # the host itself: there is no host<->device copy to see
            return False
        if not self.counter:
            return True
        done = self.traced.get(key, 0)
        self.traced[key] = done + 1
        return done < per_cell


def engine_state(ctx: WorkerContext | InlineContext) -> EngineState:
    """The worker's engine state, built on first use (also measures the health baseline)."""
    cache = ctx.cache
    st = cache.get("op_engine")
    if st is None:
        st = EngineState(ctx.adapter, {o.full_name: o for o in all_ops()})
        st.backend_fallback = observe.has_backend_fallback(ctx.adapter.dispatch_key)
        ctx.adapter.health_baseline()  # before any probe: "poisoned" needs it to have passed
        cache["op_engine"] = st
    assert isinstance(st, EngineState)
    return st


class InlineContext:
    """A worker context for in-process use (tests, the naive benchmark loop)."""

    def __init__(self, adapter: Adapter):
        self.adapter = adapter
        self.cache: dict[str, Any] = {}
        self.options: dict[str, Any] = {}
