"""refaccel's own c10d backend: collectives on refaccel tensors, staged through host memory over gloo.

A young accelerator often ships its collectives library late; until then its c10d backend copies
device tensors to the host, runs gloo, and copies the results back. That is a host fallback, and
it is counted (calls and bytes) like refaccel's operator fallback::

    register_c10d()                                    # "refaccel_c10d", devices=["refaccel"]
    dist.init_process_group("refaccel_c10d", store=store, rank=r, world_size=2)
    dist.all_reduce(torch.ones(4, device="refaccel"))  # staged: c10d_staging_counts()["all_reduce"] == 1

Generation gaps are data (:data:`GAPS`): g1's library has no bfloat16 all_reduce and says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .install import installed_generation

__all__ = ["GAPS", "NAME", "StagedProcessGroup", "c10d_staging_counts", "register_c10d"]

NAME = "refaccel_c10d"

#: generation -> (collective, dtype) pairs its c10d library does not implement.
GAPS: dict[str, frozenset[tuple[str, torch.dtype]]] = {
    "g1": frozenset({("all_reduce", torch.bfloat16)}),
    "g2": frozenset(),
}

_STAGED: dict[str, int] = {}


def c10d_staging_counts() -> dict[str, int]:
    """Collectives staged through host memory in this process (and ``bytes``), by name."""
    return dict(_STAGED)


class _StagedWork(dist.Work):  # type: ignore[misc]
    """Wraps the host (gloo) work; ``wait`` copies the host results back to the device tensors."""

    def __init__(self, inner: Any, copy_back: Callable[[], None], result: list[torch.Tensor] | None = None):
        super().__init__()
        self._inner, self._copy_back, self._done, self._result = inner, copy_back, False, result or []

    def is_completed(self) -> bool:
        return bool(self._inner.is_completed())

    def wait(self, timeout: dt.timedelta | None = None) -> bool:
        self._inner.wait() if timeout is None else self._inner.wait(timeout)
        if not self._done:
            self._copy_back()
            self._done = True
        return True

    def get_future(self) -> torch.futures.Future:
        """A completed future holding the device results (DDP's reducer reads its value)."""
        self.wait()
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._result)
        return fut


def _host(tensors: list[torch.Tensor], name: str) -> list[torch.Tensor]:
    gen = installed_generation() or "g2"
    for t in tensors:
        if (name, t.dtype) in GAPS.get(gen, frozenset()):
            raise RuntimeError(f"refaccel c10d ({gen}) does not support {name} for {t.dtype}: the collectives "
                               "library of this generation lacks it; use float32 or a newer generation")
    if any(t.device.type != "cpu" for t in tensors):
        _STAGED[name] = _STAGED.get(name, 0) + 1
        _STAGED["bytes"] = _STAGED.get("bytes", 0) + sum(t.numel() * t.element_size() for t in tensors)
    return [t.cpu() for t in tensors]


def _back(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], None]:
    def copy() -> None:
        for dev, host in pairs:
            dev.copy_(host)
    return copy


class StagedProcessGroup(dist.ProcessGroup):  # type: ignore[misc]
    """A process group for refaccel tensors whose collectives run on host copies over gloo."""

    def __init__(self, store: Any, rank: int, size: int, timeout: dt.timedelta):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        # c10d keeps a group's name on its backends: host tensors go to gloo directly
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return NAME

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        host = _host(tensors, "all_reduce")
        return _StagedWork(self._gloo.allreduce(host, opts), _back(list(zip(tensors, host, strict=True))), tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        host = _host(tensors, "broadcast")
        return _StagedWork(self._gloo.broadcast(host, opts), _back(list(zip(tensors, host, strict=True))), tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        host_in = _host(inputs, "all_gather")
        host_out = [[o.cpu() for o in outs] for outs in outputs]
        pairs = [(d, h) for outs, houts in zip(outputs, host_out, strict=True) for d, h in zip(outs, houts, strict=True)]
        return _StagedWork(self._gloo.allgather(host_out, host_in, opts), _back(pairs))

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        host_in = [_host(ins, "reduce_scatter") for ins in inputs]
        host_out = [o.cpu() for o in outputs]
        return _StagedWork(self._gloo.reduce_scatter(host_out, host_in, opts), _back(list(zip(outputs, host_out, strict=True))))

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, out_splits: list[int],
                      in_splits: list[int], opts: Any = None) -> Any:
        (host_in,) = _host([input], "all_to_all")
        host_out = output.cpu()
        work = self._gloo.alltoall_base(host_out, host_in, out_splits, in_splits, opts)
        return _StagedWork(work, _back([(output, host_out)]))

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        host_in = [_host(ins, "scatter") for ins in inputs]
        host_out = _host(outputs, "scatter")
        return _StagedWork(self._gloo.scatter(host_out, host_in, opts), _back(list(zip(outputs, host_out, strict=True))))

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        host_in = _host(inputs, "gather")
        host_out = [_host(outs, "gather") for outs in outputs]
        pairs = [(d, h) for outs, houts in zip(outputs, host_out, strict=True) for d, h in zip(outs, houts, strict=True)]
        return _StagedWork(self._gloo.gather(host_out, host_in, opts), _back(pairs))

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> Any:
        return _StagedWork(self._gloo.send(_host(tensors, "send"), dst, tag), lambda: None)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> Any:
        host = _host(tensors, "recv")
        return _StagedWork(self._gloo.recv(host, src, tag), _back(list(zip(tensors, host, strict=True))))

    def barrier(self, opts: Any = None) -> Any:
        return _StagedWork(self._gloo.barrier(opts) if opts is not None else self._gloo.barrier(), lambda: None)


def register_c10d() -> str:
    """Register :data:`NAME` with ``torch.distributed`` for refaccel tensors (idempotent); returns it."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, devices=["refaccel"], extended_api=True)
    return NAME


def _create(opts: Any, backend_options: Any) -> StagedProcessGroup:
    pg = StagedProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    pg._set_group_name(opts.group_id)  # the name DeviceMesh and DCP look groups up by
    return pg
