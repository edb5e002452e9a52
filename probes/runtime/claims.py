"""Dtype claims checked both ways (OpInfo's ``test_dtypes``).

``torch.accelerator.get_device_capability()["supported_dtypes"]`` promises the dtypes "for which
tensors can be allocated on the accelerator and type conversion across supported dtypes are
supported". A claimed dtype that cannot allocate, copy or convert is a finding; so is one that
does all of that but is not claimed (callers then avoid a dtype that works)::

    claimed but broken: float8_e5m2 (full: RuntimeError ...); works but not claimed: float64
"""

from __future__ import annotations

import textwrap
import warnings
from typing import TYPE_CHECKING

from opmatrix.schema.enums import DEFAULT_DTYPES, DTYPES

from .apis import NOT_SERVED
from .context import Probe, same_values, sample
from .spec import Facts, Verdict, failed, not_applicable, passed, unknown

if TYPE_CHECKING:
    import torch

__all__ = ["check_dtype_claims", "dtype_works"]


def dtype_works(probe: Probe, dtype: torch.dtype) -> str | None:
    """None when ``dtype`` allocates, copies both ways and converts to / from float32 on the device."""
    import torch

    dev = probe.device()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            host = sample(dtype)
            on_dev = host.to(dev)
            if not same_values(on_dev.cpu(), host):
                return "copy round trip changed values"
            full = torch.full((3,), True if dtype is torch.bool else 3, dtype=dtype, device=dev)
            if full.dtype != dtype:
                return f"full gave {full.dtype}"
            if not same_values(on_dev.to(torch.float32).cpu(), host.to(torch.float32)):
                return "conversion to float32 differs from the host"
            ones = torch.ones(3, device=dev).to(dtype)
            if not same_values(ones.cpu(), torch.ones(3).to(dtype)):
                return "conversion from float32 differs from the host"
    except NOT_SERVED as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    return None


def raw_dtype_works(probe: Probe, dtype: torch.dtype) -> str | None:
    """For a claimed dtype with no values opmatrix can make (quantized, sub-byte, bit containers):
    None when it allocates and its bytes copy to the device and back unchanged; else which step
    failed and how."""
    import torch

    dev = probe.device()
    step = "allocation"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            on_dev = torch.empty(8, dtype=dtype, device=dev)
            step = "copy host->device"
            host = torch.empty(8, dtype=dtype)
            on_dev.copy_(host)
            step = "copy device->host"
            back = on_dev.cpu()
            if back.dtype != dtype or back.shape != host.shape:
                return f"copy device->host gave {back.dtype} {tuple(back.shape)}"
    except Exception as exc:  # noqa: BLE001 - whatever the step raised is how it fails
        return f"{step}: {type(exc).__name__}: {textwrap.shorten(str(exc), 160, placeholder=' ...')}"
    return None


def check_dtype_claims(probe: Probe) -> Verdict:
    """Claimed dtypes work and working dtypes are claimed."""
    import torch

    if not probe.values:
        return not_applicable("meta allocates every dtype without data: claims cannot be tested")
    names = [n for n in DTYPES if (n in DEFAULT_DTYPES or n in (probe.claimed or [])) and hasattr(torch, n)]
    results = {n: dtype_works(probe, getattr(torch, n)) for n in names}
    works = [n for n, problem in results.items() if problem is None]
    if probe.claimed is None:
        if probe.host:
            return not_applicable(f"the host claims no dtype set (it is the reference); works: {', '.join(works)}")
        return unknown(f"the runtime claims no dtypes ({probe.claim_via or 'get_device_capability not served'}); "
                       f"works: {', '.join(works)}",
                       "serve torch.accelerator.get_device_capability()['supported_dtypes']")
    claimed = set(probe.claimed)
    broken = [f"{n} ({results[n]})" for n in names if n in claimed and results[n] is not None]
    unclaimed = [n for n in works if n not in claimed]
    others = sorted(n for n in claimed - set(DTYPES) if isinstance(getattr(torch, n, None), torch.dtype))
    raw = {n: raw_dtype_works(probe, getattr(torch, n)) for n in others}
    broken += [f"{n} ({raw[n]})" for n in others if raw[n] is not None]
    unknown_names = sorted(claimed - set(DTYPES) - set(others))
    facts = Facts(claimed_dtypes=[n for n in probe.claimed if n in DTYPES])
    parts = []
    if broken:
        parts.append(f"claimed but broken: {'; '.join(broken)}")
    if unclaimed:
        parts.append(f"works but not claimed: {', '.join(unclaimed)}")
    if unknown_names:
        parts.append(f"claims dtypes torch does not have: {', '.join(unknown_names)}")
    raw_ok = [n for n in others if raw[n] is None]
    also = f"; {', '.join(raw_ok)} allocate and copy both ways (no values to compare)" if raw_ok else ""
    if parts:
        verdict = failed(f"{'; '.join(parts)}{also} (claims via {probe.claim_via})",
                         "make supported_dtypes list exactly the dtypes that allocate and convert")
    else:
        verdict = passed(f"claims {', '.join(sorted(claimed))} via {probe.claim_via}; "
                         f"{len(names)} dtypes tried, exactly the claimed ones work{also}", via=probe.claim_via)
    verdict.facts = facts
    return verdict
