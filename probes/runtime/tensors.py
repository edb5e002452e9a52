"""Level 1 tensor semantics, each for every claimed dtype: allocation, copies, views, conversion,
scalar extraction. The host (CPU, same dtype) is the reference; values 0..6 are exact in every
dtype, so any difference is a defect, not rounding::

    check_views(probe)   # passed("12 claimed dtypes x 5 views: strides, offsets, values survive ...")
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from .apis import NOT_SERVED
from .context import Probe, same_values, sample
from .spec import Verdict, failed, not_applicable, passed

if TYPE_CHECKING:
    import torch

__all__ = [
    "check_allocation",
    "check_conversion",
    "check_copy_d2d",
    "check_copy_h2d_d2h",
    "check_copy_non_blocking",
    "check_item",
    "check_views",
    "each_dtype",
]


def each_dtype(probe: Probe, test: Callable[[torch.dtype], str | None], what: str) -> Verdict:
    """Run ``test`` per dtype (None = held, else the problem); one verdict naming every failure."""
    problems = []
    for dtype in probe.dtypes:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                problem = test(dtype)
        except NOT_SERVED as exc:
            problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        if problem:
            problems.append(f"{str(dtype).removeprefix('torch.')}: {problem}")
    scope = probe.dtype_scope()
    if problems:
        return failed(f"{len(problems)} of {scope} fail: " + "; ".join(problems))
    return passed(f"{scope}: {what}")


def _fill(dtype: torch.dtype) -> bool | int:
    return True if str(dtype) == "torch.bool" else 3


def check_allocation(probe: Probe) -> Verdict:
    """empty / zeros / full allocate with the right shape, dtype and device; repeated alloc/free."""
    import torch

    dev = probe.device()

    def test(dtype: torch.dtype) -> str | None:
        shape = (2, 3, 4)
        for name, make in (
            ("empty", lambda: torch.empty(shape, dtype=dtype, device=dev)),
            ("zeros", lambda: torch.zeros(shape, dtype=dtype, device=dev)),
            ("full", lambda: torch.full(shape, _fill(dtype), dtype=dtype, device=dev)),
        ):
            t = make()
            if t.shape != shape or t.dtype != dtype or t.device.type != dev.type:
                return f"{name} gave {tuple(t.shape)} {t.dtype} on {t.device}"
        if probe.values:
            if not same_values(torch.zeros(shape, dtype=dtype, device=dev).cpu(), torch.zeros(shape, dtype=dtype)):
                return "zeros read back non-zero"
            want = torch.full(shape, _fill(dtype), dtype=dtype)
            if not same_values(torch.full(shape, _fill(dtype), dtype=dtype, device=dev).cpu(), want):
                return "full read back other values"
        return None

    verdict = each_dtype(probe, test, "empty / zeros / full allocate with the right shape, dtype and values")
    if verdict.result.value != "pass":
        return verdict
    # allocate and free under light stress: 4 rounds of 32 x 64 KiB
    for _ in range(4):
        blocks = [torch.full((16384,), float(i), device=dev) for i in range(32)]
        del blocks
    probe.sync()
    last = torch.full((16384,), 7.0, device=dev)
    if probe.values and float(last.cpu()[-1]) != 7.0:
        return failed("after 128 alloc / free cycles of 64 KiB a new tensor read back wrong values")
    verdict.evidence += "; 128 alloc / free cycles of 64 KiB"
    return verdict


def check_copy_h2d_d2h(probe: Probe) -> Verdict:
    """Host -> device and device -> host copies (``.to``, ``.cpu``, ``copy_``) keep every value."""
    import torch

    if not probe.values:
        return not_applicable("meta tensors have no data to copy")
    dev = probe.device()

    def test(dtype: torch.dtype) -> str | None:
        host = sample(dtype)
        on_dev = host.to(dev)
        if on_dev.device.type != dev.type:
            return f".to({dev}) gave a tensor on {on_dev.device}"
        if not same_values(on_dev.cpu(), host):
            return ".to(device).cpu() changed values"
        into = torch.empty(host.shape, dtype=dtype, device=dev).copy_(host)
        back = torch.empty_like(host).copy_(into)
        if not same_values(back, host):
            return "copy_ host -> device -> host changed values"
        return None

    return each_dtype(probe, test, "values survive .to(device), .cpu() and copy_ both ways")


def check_copy_d2d(probe: Probe) -> Verdict:
    """Device -> device copies (clone, copy_, and across devices when there are several)."""
    import torch

    if not probe.values:
        return not_applicable("meta tensors have no data to copy")
    dev = probe.device()
    count = len(probe.adapter.devices()) if not probe.host else 1
    other = probe.device((probe.index + 1) % count) if count > 1 else None

    def test(dtype: torch.dtype) -> str | None:
        host = sample(dtype)
        src = host.to(dev)
        if not same_values(src.clone().cpu(), host):
            return "clone changed values"
        if not same_values(torch.empty_like(src).copy_(src).cpu(), host):
            return "copy_ on the device changed values"
        if other is not None:
            peer = src.to(other)
            if peer.device != other or not same_values(peer.cpu(), host) or not same_values(peer.to(dev).cpu(), host):
                return f"copy {dev} -> {other} -> {dev} changed values or landed on {peer.device}"
        return None

    where = f"and {dev} <-> {other}" if other is not None else "(one device: no peer copy)"
    return each_dtype(probe, test, f"clone / copy_ on {dev} {where} keep values")


def check_copy_non_blocking(probe: Probe) -> Verdict:
    """``non_blocking=True`` copies both ways are complete and right after a synchronize."""
    import torch

    if probe.host:
        return not_applicable(f"{probe.device_type} copies run on the host: nothing is asynchronous")
    dev = probe.device()
    pinned = True
    try:
        torch.ones(2).pin_memory()
    except NOT_SERVED:
        pinned = False

    def test(dtype: torch.dtype) -> str | None:
        host = sample(dtype)
        src = host.pin_memory() if pinned else host
        on_dev = src.to(dev, non_blocking=True)
        back = on_dev.to("cpu", non_blocking=True)
        probe.sync()
        if not same_values(back, host):
            return "non_blocking round trip changed values after synchronize"
        return None

    what = "pinned" if pinned else "pageable (pin_memory not served)"
    return each_dtype(probe, test, f"{what} non_blocking copies both ways are right after synchronize")


#: name -> view function; each yields a different stride / offset pattern from a (4, 6) base
VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transpose": lambda t: t.t(),
    "offset_slice": lambda t: t[1:, 2:],
    "step_slice": lambda t: t[:, ::2],
    "as_strided": lambda t: t.as_strided((2, 2), (3, 1), 5),
    "expand": lambda t: t[1:2].expand(3, 6),
}


def _view_problem(probe: Probe, dtype: torch.dtype, name: str, view: Callable[[torch.Tensor], torch.Tensor]) -> str | None:
    dev = probe.device()
    base = sample(dtype, (4, 6))
    hv = view(base)
    moved = hv.to(dev)
    # .to(another device) copies with preserve_format, like clone; .to(its own device) is a no-op
    want_strides = hv.stride() if dev == hv.device else hv.clone().stride()
    if moved.stride() != want_strides:
        return f"{name}: .to(device) strides {moved.stride()}, expected {want_strides}"
    dv = view(base.to(dev))
    if (dv.shape, dv.stride(), dv.storage_offset()) != (hv.shape, hv.stride(), hv.storage_offset()):
        return (f"{name}: device view {tuple(dv.shape)}/{dv.stride()}/+{dv.storage_offset()}, host "
                f"{tuple(hv.shape)}/{hv.stride()}/+{hv.storage_offset()}")
    if not probe.values:
        return None
    if not same_values(moved.cpu(), hv):
        return f"{name}: .to(device).cpu() changed values"
    back = dv.cpu()
    if not same_values(back, hv) or back.stride() != (hv.stride() if dev == hv.device else hv.clone().stride()):
        return f"{name}: device view .cpu() gave other values or strides {back.stride()}"
    return None


def check_views(probe: Probe) -> Verdict:
    """Views keep strides and storage offsets through ``.to(device)`` and ``.cpu()``; writes go through."""
    def test(dtype: torch.dtype) -> str | None:
        for name, view in VIEWS.items():
            problem = _view_problem(probe, dtype, name, view)
            if problem:
                return problem
        if not probe.values:
            return None
        base, on_dev = sample(dtype, (4, 6)), sample(dtype, (4, 6)).to(probe.device())
        base[1:, 2:].t().zero_()
        on_dev[1:, 2:].t().zero_()
        if not same_values(on_dev.cpu(), base):
            return "zero_() through a transposed offset view did not reach the base as on the host"
        return None

    return each_dtype(probe, test, f"{len(VIEWS)} views keep shape / strides / offset and values; writes through views")


def check_conversion(probe: Probe) -> Verdict:
    """``.to(dtype)`` on the device between every pair of claimed dtypes matches the host."""
    if not probe.values:
        return not_applicable("meta conversions have no values to compare")
    dev = probe.device()
    targets = probe.dtypes

    def test(dtype: torch.dtype) -> str | None:
        host = sample(dtype)
        on_dev = host.to(dev)
        bad = [str(t).removeprefix("torch.") for t in targets if not same_values(on_dev.to(t).cpu(), host.to(t))]
        return f"to {', '.join(bad)} differs from the host" if bad else None

    n = len(targets)
    return each_dtype(probe, test, f"{n * n} conversions match the host")


def check_item(probe: Probe) -> Verdict:
    """``.item()`` of a device element and of a 0-d device tensor equals the host value."""
    import torch

    if not probe.values:
        return not_applicable("meta tensors have no values to extract")
    dev = probe.device()

    def test(dtype: torch.dtype) -> str | None:
        host = sample(dtype)
        on_dev = host.to(dev)
        for index in ((0, 0, 1), (1, 2, 3)):
            got, want = on_dev[index].item(), host[index].item()
            if got != want or type(got) is not type(want):
                return f"element {index}: .item() gave {got!r}, host {want!r}"
        scalar = torch.tensor(_fill(dtype), dtype=dtype, device=dev).item()
        want = torch.tensor(_fill(dtype), dtype=dtype).item()
        return None if scalar == want else f"0-d tensor .item() gave {scalar!r}, host {want!r}"

    return each_dtype(probe, test, ".item() returns the host value and Python type")
