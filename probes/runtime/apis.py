"""Which device-generic PyTorch APIs reach a backend: generically, only through its own module, or not.

A framework written against ``torch.accelerator``, ``torch.Stream`` / ``torch.Event`` or
``torch.get_device_module`` works on a backend only where those reach it; a pure-Python backend
often serves them only as ``torch.<device>.x``. Each API is *tried* (never inferred from
``hasattr``), and the checks then use the best path found::

    torch.accelerator.memory_allocated   own_module  generic: RuntimeError: device_allocator INTERNAL ASSERT ...
    torch.Stream                         generic     torch.Stream(device=refaccel:0)

The table below is data: (capability, how to call it generically, the own module's attribute).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opmatrix.schema import ApiCoverage, ApiService

if TYPE_CHECKING:
    from .context import Probe

__all__ = ["ACCELERATOR_FUNCS", "survey"]

#: exceptions that mean "this path does not serve the API" (anything else is a bug worth seeing)
NOT_SERVED = (RuntimeError, NotImplementedError, AttributeError, TypeError, ValueError, AssertionError)

#: capability -> (torch.accelerator function, own-module attribute, whether it takes the device index)
ACCELERATOR_FUNCS: dict[str, tuple[str, str, bool]] = {
    "device_count": ("device_count", "device_count", False),
    "current_device_index": ("current_device_index", "current_device", False),
    "set_device_index": ("set_device_index", "set_device", True),
    "synchronize": ("synchronize", "synchronize", True),
    "current_stream": ("current_stream", "current_stream", True),
    "memory_allocated": ("memory_allocated", "memory_allocated", True),
    "memory_reserved": ("memory_reserved", "memory_reserved", True),
    "max_memory_allocated": ("max_memory_allocated", "max_memory_allocated", True),
    "reset_peak_memory_stats": ("reset_peak_memory_stats", "reset_peak_memory_stats", True),
    "memory_stats": ("memory_stats", "memory_stats", True),
    "empty_cache": ("empty_cache", "empty_cache", False),
    "get_memory_info": ("get_memory_info", "mem_get_info", True),
    "get_device_capability": ("get_device_capability", "get_device_capability", True),
}

#: entry points a framework expects on ``torch.get_device_module(device_type)``
MODULE_ENTRY_POINTS = (
    "is_available", "device_count", "current_device", "set_device", "synchronize", "manual_seed",
    "get_rng_state", "set_rng_state", "Stream", "Event", "current_stream", "memory_allocated",
    "empty_cache",
)

Entry = tuple[ApiCoverage, Callable[..., Any] | None, str | None]


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}"


def _try(call: Callable[[], Any]) -> str | None:
    """None when ``call`` works, else why not."""
    try:
        call()
    except NOT_SERVED as exc:
        return _short(exc)
    return None


def _accelerator_matches(probe: Probe) -> str | None:
    """None when ``torch.accelerator`` is this backend, else why its functions cannot apply."""
    import torch

    acc = torch.accelerator.current_accelerator()
    if acc is None:
        return "torch.accelerator.current_accelerator() is None"
    if acc.type != probe.device_type:
        return f"torch.accelerator.current_accelerator() is {acc.type}, not {probe.device_type}"
    return None


def _switch_problem(setter: Callable[..., Any], getter: Callable[[], Any], probe: Probe) -> str | None:
    """Selecting each device must show in the current index (a guard may ignore it).

    Every index is selected in turn, ending on the probe's own: a getter that always answers one
    constant (a Python device guard reports 0) is caught from any device, not only from device 0.
    """
    count = len(probe.adapter.devices())
    if count < 2:
        return None
    order = [i for i in range(count) if i != probe.index] + [probe.index]
    try:
        for index in order:
            setter(index)
            now = int(getter())
            if now != index:
                setter(probe.index)
                return f"selecting device {index} left the current index at {now}"
    except NOT_SERVED as exc:
        return _short(exc)
    return None


def _any_setter(probe: Probe) -> Callable[[int], Any]:
    """A way to select a device: the backend module's ``set_device``, else torch.accelerator's."""
    import torch

    own = getattr(probe.module(), "set_device", None)
    return own if callable(own) else torch.accelerator.set_device_index


def _function(
    probe: Probe, cap: str, generic_name: str, own_name: str, takes_index: bool, generic_bar: str | None = None
) -> Entry:
    """``torch.accelerator.<generic_name>``, else ``torch.<dev>.<own_name>``; the callable takes
    the same arguments as the API it calls (no argument: the probe's device). ``generic_bar``
    says why the generic path cannot count even if it answers (it answers about something else)."""
    import torch

    api = f"torch.accelerator.{generic_name}"
    idx = probe.index
    why_not = generic_bar or _accelerator_matches(probe)
    if why_not is None:
        fn = getattr(torch.accelerator, generic_name, None)
        if fn is None:
            why_not = f"this torch has no {api}"
        else:

            def generic(*args: Any, _fn: Callable[..., Any] = fn) -> Any:
                if args:
                    return _fn(*args)
                return _fn(idx) if takes_index else _fn()

            why_not = _try(generic)
            if why_not is None and cap == "set_device_index":
                why_not = _switch_problem(generic, torch.accelerator.current_device_index, probe)
            if why_not is None and cap == "current_device_index":
                why_not = _switch_problem(_any_setter(probe), generic, probe)
            if why_not is None:
                return ApiCoverage(api=api, service=ApiService.generic, detail="served"), generic, api
    mod = probe.module()
    own = getattr(mod, own_name, None)
    own_api = f"torch.{probe.device_type}.{own_name}"
    if callable(own):
        problem = _try(lambda: own(idx) if own_name == "set_device" else own())
        if problem is None and cap == "set_device_index":
            problem = _switch_problem(own, getattr(mod, "current_device", lambda: None), probe)
        if problem is None:
            detail = f"{own_api}; generic: {why_not}"
            return ApiCoverage(api=api, service=ApiService.own_module, detail=detail), own, own_api
        why_not = f"{why_not}; {own_api}: {problem}"
    return ApiCoverage(api=api, service=ApiService.none, detail=why_not), None, None


def _stream_problem(make: Callable[..., Any]) -> str | None:
    """None when ``make()`` gives real, distinct streams that synchronise and answer query()."""
    first, second = make(), make()
    first.synchronize()
    first.query()
    if getattr(first, "stream_id", None) == getattr(second, "stream_id", 0):
        return f"every new stream is stream {getattr(first, 'stream_id', '?')}: the device guard creates no streams"
    return None


def _event_problem(make: Callable[..., Any], stream: Callable[..., Any] | None) -> str | None:
    """None when an event records on a stream of the same family, synchronises and answers query()."""
    if stream is None:
        return "no stream of the same family to record on"
    event = make()
    event.record(stream())
    event.synchronize()
    event.query()
    return None


def _stream_like(probe: Probe, kind: str, streams: Entry | None = None) -> Entry:
    """``torch.Stream`` / ``torch.Event`` on this device, else ``torch.<dev>.Stream`` / ``Event``.

    An event counts as served by a family (generic or own module) only together with that
    family's streams: an event that cannot order real streams orders nothing.
    """
    import torch

    api = f"torch.{kind}"
    dev = probe.device()

    def make_generic(**kwargs: Any) -> Any:
        return getattr(torch, kind)(device=dev, **kwargs)

    own_cls = getattr(probe.module(), kind, None)
    generic_stream = own_stream = None
    if streams is not None and streams[0].service is ApiService.generic:
        generic_stream = streams[1]
    elif streams is not None and streams[0].service is ApiService.own_module:
        own_stream = streams[1]

    def problem_of(make: Callable[..., Any], stream: Callable[..., Any] | None) -> str | None:
        try:
            return _stream_problem(make) if kind == "Stream" else _event_problem(make, stream)
        except NOT_SERVED as exc:
            return _short(exc)

    why_not = problem_of(make_generic, generic_stream)
    if why_not is None:
        return ApiCoverage(api=api, service=ApiService.generic, detail=f"torch.{kind}(device={dev})"), make_generic, api
    own_api = f"torch.{probe.device_type}.{kind}"
    if own_cls is not None:
        problem = problem_of(own_cls, own_stream)
        if problem is None:
            return ApiCoverage(api=api, service=ApiService.own_module, detail=f"{own_api}; generic: {why_not}"), own_cls, own_api
        why_not = f"{why_not}; {own_api}: {problem}"
    return ApiCoverage(api=api, service=ApiService.none, detail=why_not), None, None


def _device_module(probe: Probe) -> Entry:
    import torch

    api = "torch.get_device_module"
    try:
        mod = torch.get_device_module(probe.device_type)
    except NOT_SERVED as exc:
        return ApiCoverage(api=api, service=ApiService.none, detail=_short(exc)), None, None
    missing = [name for name in MODULE_ENTRY_POINTS if not hasattr(mod, name)]
    name = getattr(mod, "__name__", f"torch.{probe.device_type}")
    detail = f"{name}: {len(MODULE_ENTRY_POINTS) - len(missing)}/{len(MODULE_ENTRY_POINTS)} entry points"
    if missing:
        detail += f", lacks {', '.join(missing)}"
    return ApiCoverage(api=api, service=ApiService.generic, detail=detail), lambda: mod, api


def _generator(probe: Probe) -> Entry:
    import torch

    api = "torch.Generator"
    dev = probe.device()

    def make() -> Any:
        gen = torch.Generator(device=dev)
        gen.manual_seed(0)
        return gen

    why_not = _try(make)
    if why_not is None:
        return ApiCoverage(api=api, service=ApiService.generic, detail=f"torch.Generator(device={dev})"), make, api
    mod = probe.module()
    own = [n for n in ("manual_seed", "get_rng_state", "set_rng_state") if callable(getattr(mod, n, None))]
    if len(own) == 3:
        detail = f"torch.{probe.device_type}.manual_seed / get_rng_state / set_rng_state; generic: {why_not}"
        return ApiCoverage(api=api, service=ApiService.own_module, detail=detail), lambda: mod, f"torch.{probe.device_type}"
    return ApiCoverage(api=api, service=ApiService.none, detail=why_not), None, None


#: torch device type -> the profiler activity that records its device-side work
_PROFILER_ACTIVITY = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU"}


def _profiler(probe: Probe) -> Entry:
    import torch

    api = "torch.profiler device activity"
    name = _PROFILER_ACTIVITY.get(probe.device_type)
    if name is None and probe.adapter.dispatch_key == "PrivateUse1":
        name = "PrivateUse1"
    activity = getattr(torch.profiler.ProfilerActivity, name, None) if name else None
    supported = torch.profiler.supported_activities()
    if name is None or activity is None or activity not in supported:
        listed = ", ".join(sorted(a.name for a in supported))
        detail = f"no supported ProfilerActivity for {probe.device_type} (supported: {listed})"
        return ApiCoverage(api=api, service=ApiService.none, detail=detail), None, None
    kinds = _profiled_device_types(probe, list({torch.profiler.ProfilerActivity.CPU, activity}))
    want = "CPU" if name == "CPU" else name.upper()
    if not any(want in k.upper() for k in kinds):
        detail = f"ProfilerActivity.{name} is listed, but profiling device work recorded events on {sorted(kinds)} only"
        return ApiCoverage(api=api, service=ApiService.none, detail=detail), None, None
    return ApiCoverage(api=api, service=ApiService.generic, detail=f"ProfilerActivity.{name}: device events recorded"), None, api


def _profiled_device_types(probe: Probe, activities: list[Any]) -> set[str]:
    """Device types of the events the profiler records around a small device computation."""
    import torch

    x = torch.ones(64, device=probe.device())
    try:
        with torch.profiler.profile(activities=activities) as prof:
            (x * 2).sum()
            probe.sync()
    except NOT_SERVED:
        return set()
    return {str(e.device_type).rsplit(".", 1)[-1] for e in prof.events()}


def survey(probe: Probe) -> dict[str, Entry]:
    """Try every device-generic API on ``probe``'s backend; capability -> (coverage, callable, via)."""
    table: dict[str, Entry] = {}
    for cap, (generic_name, own_name, takes_index) in ACCELERATOR_FUNCS.items():
        table[cap] = _function(probe, cap, generic_name, own_name, takes_index)
    table["Stream"] = _stream_like(probe, "Stream")
    table["Event"] = _stream_like(probe, "Event", table["Stream"])
    if table["current_stream"][0].service is ApiService.generic and table["Stream"][0].service is not ApiService.generic:
        # it answers, but only ever with the guard's stream: not the streams this backend runs
        bar = "answers, but torch.Stream does not reach this backend (its current stream is not the device's)"
        table["current_stream"] = _function(probe, "current_stream", "current_stream", "current_stream", True, bar)
    table["device_module"] = _device_module(probe)
    table["Generator"] = _generator(probe)
    table["profiler"] = _profiler(probe)
    with contextlib.suppress(*NOT_SERVED):
        probe.sync()  # leave the device idle after the survey's calls
    return table
