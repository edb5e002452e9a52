"""Level 1 state that must round-trip: saved tensors (serialization) and random-number state.

``torch.save`` of device tensors must load back with ``weights_only=True`` onto the device and
onto the host (``map_location``), keeping values, dtypes and view relationships; the generator
must reproduce a sequence after ``manual_seed`` and after ``get_rng_state`` / ``set_rng_state``::

    check_rng(probe)   # passed("manual_seed reproduces; set_rng_state replays ...", via="torch.Generator")
"""

from __future__ import annotations

import io
import pickle
import warnings
from typing import TYPE_CHECKING, Any

from .apis import NOT_SERVED
from .context import Probe, same_values, sample
from .spec import Verdict, failed, not_applicable, passed, unknown

if TYPE_CHECKING:
    import torch

__all__ = ["check_rng", "check_serialization"]


def _round_trip(state: dict[str, Any], map_location: torch.device | str) -> dict[str, Any]:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True, map_location=map_location)
    return dict(loaded)


def check_serialization(probe: Probe) -> Verdict:
    """``torch.save`` / ``torch.load(weights_only=True, map_location=...)`` round trip of device tensors."""
    if not probe.values:
        return not_applicable("meta tensors have no data to serialise")
    dev = probe.device()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hosts = {str(d).removeprefix("torch."): sample(d) for d in probe.dtypes}
        state = {name: t.to(dev) for name, t in hosts.items()}
    base_name = next(iter(state), None)
    if base_name is None:
        return unknown("no dtype to serialise")
    state["view"] = state[base_name][1:, ::2]
    problems = []
    for target in (dev, "cpu"):
        try:
            loaded = _round_trip(state, target)
        except (*NOT_SERVED, pickle.UnpicklingError, EOFError) as exc:
            problems.append(f"map_location={target}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
            continue
        want_type = "cpu" if isinstance(target, str) else target.type
        for name, host in hosts.items():
            got = loaded[name]
            if got.device.type != want_type or not same_values(got.cpu(), host):
                problems.append(f"map_location={target}: {name} came back on {got.device} or with other values")
        view = loaded["view"]
        want_view = hosts[base_name][1:, ::2]
        if view.stride() != want_view.stride() or view.storage_offset() != want_view.storage_offset():
            problems.append(f"map_location={target}: view came back with strides {view.stride()} "
                            f"offset {view.storage_offset()}, saved {want_view.stride()} +{want_view.storage_offset()}")
        elif not same_values(view.cpu(), want_view):
            problems.append(f"map_location={target}: view values differ")
    if problems:
        return failed("; ".join(problems), "register the device's storage for serialization "
                      "(torch.serialization / _register_device_module) and keep views' storage sharing")
    return passed(f"{len(hosts)} dtypes and a strided view: save -> load(weights_only=True) onto {dev} and cpu")


def _rng_api(probe: Probe) -> tuple[Any, Any, Any, str] | None:
    """(manual_seed, get_state, set_state, via) through torch.Generator or the own module."""
    import torch

    hit = probe.api("Generator")
    if hit is None:
        return None
    make, via = hit
    if via == "torch.Generator":
        gen = make()
        return gen.manual_seed, gen.get_state, gen.set_state, via
    mod = make()
    return mod.manual_seed, mod.get_rng_state, mod.set_rng_state, via if mod is not torch else "torch"


def check_rng(probe: Probe) -> Verdict:
    """manual_seed reproduces a sequence; get_rng_state / set_rng_state replays it; draws advance."""
    import torch

    if not probe.values:
        return not_applicable("meta random tensors have no values")
    dev = probe.device()
    api = _rng_api(probe)
    if probe.host:
        api = (torch.manual_seed, torch.get_rng_state, torch.set_rng_state, "torch (host generator)")
    if api is None:
        return unknown("no generator reaches the device (torch.Generator(device) and torch.<dev>.manual_seed / "
                       "get_rng_state / set_rng_state are not served)", "serve a device generator")
    seed, get_state, set_state, via = api
    gen = None
    if via == "torch.Generator":
        gen = seed.__self__

    def draw() -> Any:
        return torch.rand(64, device=dev, generator=gen).cpu()

    try:
        seed(1234)
        first = draw()
        seed(1234)
        again = draw()
        state = get_state()
        later = draw()
        set_state(state)
        replay = draw()
    except NOT_SERVED as exc:
        return failed(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}", via=via)
    problems = []
    if not same_values(first, again):
        problems.append("manual_seed(1234) twice gave different sequences")
    if not same_values(later, replay):
        problems.append("set_rng_state did not replay the sequence drawn after get_rng_state")
    if same_values(first, later):
        problems.append("the generator did not advance (two draws were equal)")
    if problems:
        return failed("; ".join(problems), via=via)
    return passed("manual_seed reproduces; set_rng_state replays; draws advance", via=via)
