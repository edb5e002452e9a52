"""Level 0: the backend imports, initialises against a compatible driver, enumerates, selects and
identifies its devices, and says which generic APIs reach it.

``import`` and ``driver`` run before there is a :class:`Probe` (they are what makes one), so they
take the adapter; the rest take the probe::

    verdict, probe = bootstrap(adapter, "refaccel", "g2")   # import + driver
    check_identity(probe)   # passed("2 devices; RefAccel g2 #0 uuid RA-...; driver 2.4.1 ...")
"""

from __future__ import annotations

import importlib
import time

from opmatrix.backend.base import Adapter
from opmatrix.schema import ApiService, DeviceInfo

from .apis import NOT_SERVED
from .context import Probe
from .initfail import classify_init_failure
from .spec import Facts, Verdict, failed, not_applicable, passed, unknown

__all__ = [
    "backend_module",
    "check_api_coverage",
    "check_driver",
    "check_enumerate",
    "check_identity",
    "check_import",
    "check_select",
    "initialise",
]

_BUILTIN_MODULES = ("opmatrix.backend.base", "opmatrix.backend.builtin")


def backend_module(adapter: Adapter) -> str:
    """The Python module whose import *is* the backend (torch itself for built-in device types)."""
    module = getattr(adapter, "module", None)
    if isinstance(module, str) and module:
        return module
    owner = type(adapter).__module__
    if owner in _BUILTIN_MODULES:
        return "torch"
    return owner.rsplit(".", 1)[0] if owner.endswith(".adapter") else owner


def check_import(adapter: Adapter, spent: float = 0.0) -> Verdict:
    """The backend's package imports (without initialising a device).

    ``spent``: seconds already spent importing it with the adapter (``get_adapter`` imports an
    adapter's own package), added to the time measured here.
    """
    name = backend_module(adapter)
    start = time.perf_counter() - spent
    import torch  # noqa: F401 - first: many backend packages refuse to be imported before torch

    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - whatever the import raises is the finding
        return failed(f"import {name} failed: {_chain(exc)}", _import_advice(name, exc))
    registration = getattr(adapter, "registration_problem", None)
    problem = registration() if callable(registration) else None
    if problem:  # it imported, yet no device exists: every later check would fail obscurely
        return failed(f"import {name}: {problem}", "register the device on import (docs/probing.md)")
    return passed(f"import {name}: {time.perf_counter() - start:.2f} s")


def _chain(exc: BaseException) -> str:
    """``Type: message`` of the exception and of its causes (the real failure is often inside)."""
    parts, seen = [], 0
    current: BaseException | None = exc
    while current is not None and seen < 4:
        parts.append(f"{type(current).__name__}: {str(current).strip()[:400]}")
        current, seen = current.__cause__ or current.__context__, seen + 1
    return " <- caused by ".join(parts)


def _import_advice(name: str, exc: BaseException) -> str:
    """What to do, from what failed: a missing module, or the package's own import code."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and name.startswith(exc.name.split(".")[0]):
        return f"install the package that provides {name} into this environment"
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"{name} imports {exc.name}, which is missing: install {exc.name.split('.')[0]}"
    return f"{name} is installed but its import raised: fix the error above (versions of torch and {name} must match)"


def initialise(adapter: Adapter) -> None:
    """``setup()`` plus a first allocation and sync: lazy runtimes initialise on first use."""
    import torch

    ok, why = adapter.available()
    if not ok:
        raise RuntimeError(why)
    adapter.setup()
    torch.empty(4, device=adapter.device())
    adapter.synchronize()


def check_driver(adapter: Adapter) -> Verdict:
    """The runtime finds a compatible driver and initialises; a failure is named by its cause."""
    ok, why = adapter.available()
    if not ok:
        cause = classify_init_failure(why)
        return failed(f"{cause.title}: {why}", cause.advice)
    start = time.perf_counter()
    try:
        initialise(adapter)
    except Exception as exc:  # noqa: BLE001 - whatever initialisation raises is the finding, classified below
        cause = classify_init_failure(str(exc))
        return failed(f"{cause.title}: {type(exc).__name__}: {exc}", cause.advice)
    seconds = time.perf_counter() - start
    if adapter.device_type in ("cpu", "meta"):
        return not_applicable(f"{adapter.device_type} runs on the host: no driver (set up in {seconds:.2f} s)")
    versions = {k: v for k, v in adapter.versions().items() if v}
    shown = ", ".join(f"{k} {v}" for k, v in versions.items()) or "no versions reported"
    return passed(f"initialised in {seconds:.2f} s; {shown}")


def bootstrap(
    adapter: Adapter, spec: str, generation: str | None, spent: float = 0.0
) -> tuple[Verdict, Verdict, Probe | None]:
    """Run ``import`` and ``driver``; the probe exists only when both passed (or do not apply)."""
    imported = check_import(adapter, spent)
    if imported.result.value == "fail":
        return imported, unknown("not run: the backend did not import"), None
    driver = check_driver(adapter)
    if driver.result.value == "fail":
        return imported, driver, None
    return imported, driver, Probe.from_adapter(adapter, spec, generation)


def _count(probe: Probe) -> tuple[int, str]:
    hit = probe.api("device_count")
    if hit is None:
        return len(probe.adapter.devices()), f"{type(probe.adapter).__name__}.devices"
    fn, via = hit
    return int(fn()), via


def check_enumerate(probe: Probe) -> Verdict:
    """Devices enumerate: the runtime's count matches the adapter's device list."""
    if not probe.values:
        return not_applicable("meta is a virtual device: nothing to enumerate")
    count, via = _count(probe)
    listed = probe.adapter.devices()
    indices = [d.index for d in listed]
    if count < 1:
        return failed(f"{via} says {count} devices", via=via)
    if indices != list(range(count)):
        return failed(f"{via} says {count} devices but the adapter lists indices {indices}", via=via)
    names = "; ".join(f"#{d.index} {d.name}" for d in listed)
    return passed(f"{count} device(s): {names}", via=via)


def check_select(probe: Probe) -> Verdict:
    """Every device can be selected: it becomes current and new tensors land on it."""
    import torch

    if probe.host:
        return not_applicable(f"{probe.device_type} is the single host device: nothing to select")
    setter, current = probe.api("set_device_index"), probe.api("current_device_index")
    if setter is not None and current is not None and not setter[1].startswith("torch.accelerator"):
        own_current = getattr(probe.module(), "current_device", None)
        current = (own_current, f"torch.{probe.device_type}.current_device") if callable(own_current) else None
    if setter is None or current is None:
        return unknown("neither torch.accelerator nor the backend module can set / read the current device",
                       "serve torch.accelerator.set_device_index / current_device_index")
    count, _ = _count(probe)
    problems = []
    try:
        for i in range(count):
            setter[0](i)
            now = int(current[0]())
            landed = torch.ones(2, device=probe.device_type)
            explicit = torch.ones(2, device=probe.device(i))
            if now != i or landed.device.index != i or explicit.device.index != i:
                problems.append(f"select {i}: current {now}, new tensor on {landed.device}, explicit {explicit.device}")
    except NOT_SERVED as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        setter[0](probe.index)
    if problems:
        return failed("; ".join(problems), via=setter[1])
    return passed(f"selected each of {count} device(s); current index and new tensors follow", via=setter[1])


def _identity_problems(dev: DeviceInfo, again: DeviceInfo | None) -> list[str]:
    problems = []
    if not dev.name.strip():
        problems.append(f"#{dev.index}: no name")
    if not dev.uuid:
        problems.append(f"#{dev.index}: no stable id (UUID or bus id)")
    elif again is None or again.uuid != dev.uuid:
        problems.append(f"#{dev.index}: id changed between two queries ({dev.uuid} -> {again and again.uuid})")
    return problems


def check_identity(probe: Probe) -> Verdict:
    """Each device has a name, an index, a stable id, and driver / firmware / ISA versions."""
    if not probe.values:
        return not_applicable("meta has no physical device")
    devices = probe.adapter.devices()
    versions = probe.adapter.versions()
    facts = Facts(devices=devices, capabilities={k: v for k, v in versions.items() if v})
    facts.capabilities["device_count"] = len(devices)
    if probe.host:
        shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
        verdict = passed(f"host {devices[0].name if devices else '?'}; {shown} (no UUID or driver on the host)")
        verdict.facts = facts
        return verdict
    again = {d.index: d for d in probe.adapter.devices()}
    problems = [p for d in devices for p in _identity_problems(d, again.get(d.index))]
    if not versions.get("driver"):
        problems.append("driver version not reported")
    if not (versions.get("firmware") or versions.get("isa")):
        problems.append("neither firmware nor ISA version reported")
    ids = "; ".join(f"#{d.index} {d.name} {d.uuid}" for d in devices)
    shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    verdict = (
        failed(f"{'; '.join(problems)} ({ids})", "report a stable id and the driver / firmware / ISA versions")
        if problems else passed(f"{ids}; {shown}")
    )
    verdict.facts = facts
    return verdict


#: capabilities a framework cannot work without; the rest are reported, not required
ESSENTIAL_APIS = ("device_count", "current_device_index", "set_device_index", "synchronize")


def check_api_coverage(probe: Probe) -> Verdict:
    """Which device-generic APIs reach the backend: generically, only as torch.<dev>.x, or not."""
    if not probe.values:
        return not_applicable("meta has no runtime module")
    coverage = probe.coverage()
    by_service: dict[ApiService, list[str]] = {}
    for cov in coverage:
        by_service.setdefault(cov.service, []).append(cov.api.removeprefix("torch.accelerator."))
    missing = [name for name in ESSENTIAL_APIS if probe.api(name) is None]
    parts = [f"{len(by_service.get(ApiService.generic, []))} generic"]
    for service in (ApiService.own_module, ApiService.none):
        names = by_service.get(service, [])
        if names:
            parts.append(f"{len(names)} {service.value.replace('_', ' ')}: {', '.join(names)}")
    evidence = "; ".join(parts)
    if missing:
        verdict = failed(f"essential APIs served nowhere: {', '.join(missing)}; {evidence}")
    else:
        verdict = passed(evidence)
    verdict.facts = Facts(apis=coverage)
    return verdict

