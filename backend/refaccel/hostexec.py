"""Run one ATen call on host memory: how every refaccel kernel (and the fallback) computes.

Device tensor arguments become CPU views of the same bytes (``memory.host_view``), so in-place
ops write device memory directly; ``out=`` arguments get fresh CPU outputs that are copied back
(resizing the device tensor when PyTorch would); new results are copied into fresh device
tensors. ``run`` returns what the op's schema promises: in-place / out results are the caller's
device tensors themselves::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> x = y = torch.ones(2, device="refaccel")
    >>> run(torch.ops.aten.add.Tensor, (x, y), {})          # x, y on refaccel:0
    tensor(..., device='refaccel:0')
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import memory, rng

__all__ = ["OpInfo", "op_info", "run", "device_tensors", "to_device", "DEVICE_TYPE"]

DEVICE_TYPE = "refaccel"
_Tensor = torch.Tensor


@dataclass(frozen=True)
class OpInfo:
    """What the engine needs from an overload's schema (computed once per overload)."""

    name: str  # aten::add.Tensor
    base: str  # aten::add
    out_args: frozenset[str]  # kwarg-only written arguments (out=)
    dim_pos: int | None  # position of an int ``dim`` argument
    generator_pos: int | None  # position of a ``generator`` argument


@functools.cache
def op_info(op: torch._ops.OpOverload) -> OpInfo:
    """Schema facts of ``op``."""
    schema = op._schema
    name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    outs = frozenset(
        a.name for a in schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
    )
    dim_pos = next((i for i, a in enumerate(schema.arguments) if a.name == "dim" and str(a.type) == "int"), None)
    gen_pos = next((i for i, a in enumerate(schema.arguments) if a.name == "generator"), None)
    return OpInfo(name, schema.name, outs, dim_pos, gen_pos)


def device_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[_Tensor]:
    """Every refaccel tensor among the arguments (lists flattened), in order."""
    found: list[_Tensor] = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, _Tensor):
            if value.device.type == DEVICE_TYPE:
                found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, _Tensor) and v.device.type == DEVICE_TYPE)
    return found


def _storage_order_view(t: _Tensor) -> _Tensor:
    """The g1 ``storage_order`` defect: a non-contiguous input read as if it were contiguous."""
    host = memory.host_view(t)
    if t.is_contiguous():
        return host
    need = (t.storage_offset() + t.numel()) * t.element_size()
    if need > t.untyped_storage().nbytes():
        return host
    return host.as_strided(t.size(), memory.contiguous_strides(t.size()), t.storage_offset())


def to_device(cpu: _Tensor, index: int) -> _Tensor:
    """A new device tensor on ``refaccel:index`` holding a copy of ``cpu`` (keeps dense strides)."""
    if cpu.is_contiguous() or (cpu.dim() == 4 and cpu.is_contiguous(memory_format=torch.channels_last)):
        stride = cpu.stride()
    else:
        stride = tuple(memory.contiguous_strides(cpu.size()))
    dev = memory.empty_strided(cpu.size(), stride, cpu.dtype, index)
    memory.host_view(dev).copy_(cpu)
    return dev


class _Call:
    """Argument conversion state of one call (methods, not closures: no reference cycle keeps
    device tensors alive after the call; they are freed as soon as the caller drops them)."""

    __slots__ = ("to_host", "fresh_outs", "view", "index")

    def __init__(self, defect: str | None, index: int | None):
        self.to_host: dict[int, _Tensor] = {}
        self.fresh_outs: list[tuple[_Tensor, _Tensor]] = []
        self.view = _storage_order_view if defect == "storage_order" else memory.host_view
        self.index = index

    def convert(self, value: Any, is_out: bool = False) -> Any:
        if isinstance(value, _Tensor):
            if value.device.type != DEVICE_TYPE:
                return value
            if self.index is None:
                self.index = value.device.index or 0
            if is_out:
                host = torch.empty(0, dtype=value.dtype)
                self.fresh_outs.append((value, host))
            else:
                host = self.view(value)
            self.to_host[id(host)] = value
            return host
        if isinstance(value, (list, tuple)):
            return type(value)(self.convert(v, is_out) for v in value)
        return value

    def back(self, value: Any) -> Any:
        if isinstance(value, _Tensor):
            original = self.to_host.get(id(value))
            return original if original is not None else to_device(value, self.index or 0)
        if isinstance(value, (list, tuple)):
            return type(value)(self.back(v) for v in value)
        return value


def run(
    op: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    defect: str | None = None,
    index: int | None = None,
    compute: Callable[..., Any] | None = None,
) -> Any:
    """Compute ``op(*args, **kwargs)`` with the CPU kernel on host views (or with ``compute``, the
    generation's own arithmetic for it, see :mod:`.accumulate`); return device results."""
    info = op_info(op)  # type: ignore[arg-type]
    if defect == "host_int64" and any(t.dtype == torch.int64 for t in device_tensors(args, kwargs)):
        return _through_host(op, args, kwargs)
    call = _Call(defect, index)
    host_args = [call.convert(a) for a in args]
    host_kwargs = {k: call.convert(v, k in info.out_args) for k, v in kwargs.items()}
    device = host_kwargs.get("device")
    if isinstance(device, torch.device):
        if call.index is None:
            call.index = device.index or 0
        host_kwargs["device"] = torch.device("cpu")
    if info.generator_pos is not None:
        _use_device_generator(info, host_args, host_kwargs, call.index or 0)
    result = (compute or op)(*host_args, **host_kwargs)
    for dev_out, host_out in call.fresh_outs:
        if dev_out.shape != host_out.shape:
            dev_out.resize_(host_out.shape)
        memory.host_view(dev_out).copy_(host_out)
    return call.back(result)


def _through_host(op: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The g1 ``host_int64`` defect: the kernel copies its inputs to the host through the
    dispatcher (``.cpu()``), computes there and copies the result back; no fallback counter sees
    it (only the copies nested inside the call show it)."""
    device = device_tensors(args, kwargs)[0].device
    pairs: list[tuple[_Tensor, _Tensor]] = []

    def host(v: Any) -> Any:
        if isinstance(v, _Tensor) and v.device.type == DEVICE_TYPE:
            pairs.append((v, v.cpu()))
            return pairs[-1][1]
        return type(v)(host(x) for x in v) if isinstance(v, (list, tuple)) else v

    result = op(*[host(a) for a in args], **{k: host(v) for k, v in kwargs.items()})
    outs = op_info(op).out_args  # type: ignore[arg-type]
    for name in outs:
        dev, cpu = kwargs[name], next(h for d, h in pairs if d is kwargs[name])
        if dev.shape != cpu.shape:
            dev.resize_(cpu.shape)
        dev.copy_(cpu)
    if outs:
        return kwargs[next(iter(outs))] if len(outs) == 1 else tuple(kwargs[n] for n in sorted(outs))
    return result.to(device) if isinstance(result, _Tensor) else result


def _use_device_generator(info: OpInfo, args: list[Any], kwargs: dict[str, Any], index: int) -> None:
    pos = info.generator_pos
    assert pos is not None
    if pos < len(args):
        if args[pos] is None:
            args[pos] = rng.generator(index)
    elif kwargs.get("generator") is None:
        kwargs["generator"] = rng.generator(index)
