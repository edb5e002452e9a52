"""Time one subject inside a worker: warm-up, then repetitions of a synchronised window.

    step = workload_step(adapter, "mlp", "eager", torch.float32, seed=0)
    timed = time_windows(step, adapter, Plan(warmup=10, repetitions=15), Clock.process_cpu)

Every window is bracketed by ``adapter.synchronize()``, so an asynchronous device is timed to the
end of its work, never to the end of the host's launch. The whole measured span runs under the
adapter's fallback observer. ``slowdown`` (testing the gate) makes every window that much slower
on the chosen clock by spinning inside the timed span. On the host clock each window is followed
by :func:`calibration_loop`, timed on the same clock, so the gate can divide out the machine's
speed of the moment (see ``opmatrix.schema.perf.Calibration``).
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opmatrix.backend.base import FallbackSeen
from opmatrix.schema.perf import Clock

if TYPE_CHECKING:
    import torch

    from opmatrix.backend.base import Adapter
    from opmatrix.probes.workloads.catalog import Workload

    from .hotops import HotOp

__all__ = ["CALIBRATION_LOOP", "Plan", "Timed", "calibration_loop", "op_step", "time_windows", "workload_step"]

#: the calibration loop's identity in records: change it whenever :func:`calibration_loop` changes
CALIBRATION_LOOP = "python int LCG with list stores, 20000 iterations (v1)"


@dataclass(frozen=True)
class Plan:
    """Warm-up iterations, repetitions, and the target duration of one window."""

    warmup: int = 10
    repetitions: int = 15
    target_window_s: float = 0.02
    max_window: int = 2000
    slowdown: float = 1.0
    window: int | None = None  # fixed window (later runs reuse the first run's), else calibrated


@dataclass
class Timed:
    """Samples (seconds per iteration) on the chosen clock and on the wall clock."""

    window: int
    samples: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    calibration: list[float] = field(default_factory=list)
    fallback: FallbackSeen = field(default_factory=FallbackSeen)

    def calibration_fields(self) -> dict[str, Any] | None:
        """The record's ``timing.calibration`` (None when no loop was timed)."""
        if not self.calibration:
            return None
        return {"loop": CALIBRATION_LOOP, "python": platform.python_version(), "samples_s": self.calibration}


def clock_fn(clock: Clock) -> Callable[[], float]:
    """The timer behind a :class:`Clock`."""
    return time.process_time if clock is Clock.process_cpu else time.perf_counter


def _spin(now: Callable[[], float], seconds: float) -> None:
    end = now() + seconds
    while now() < end:
        pass


def calibration_loop(n: int = 20000) -> int:
    """Fixed pure-Python work (no torch, no backend): 1.5-2.5 ms on the 2-core CI machine, beside a 20 ms window."""
    x, slots = 1, [0] * 64
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        slots[i & 63] = x
    return x + slots[7]


def _window(step: Callable[[], Any], adapter: Adapter, n: int, now: Callable[[], float], slowdown: float) -> tuple[float, float]:
    adapter.synchronize()
    c0, w0 = now(), time.perf_counter()
    for _ in range(n):
        step()
    adapter.synchronize()
    if slowdown > 1.0:
        _spin(now, (now() - c0) * (slowdown - 1.0))
    return (now() - c0) / n, (time.perf_counter() - w0) / n


def time_windows(step: Callable[[], Any], adapter: Adapter, plan: Plan, clock: Clock) -> Timed:
    """Warm up, size the window to about ``plan.target_window_s``, then time the repetitions."""
    now = clock_fn(clock)
    for _ in range(plan.warmup):
        step()
    window = plan.window
    if window is None:
        one, _ = _window(step, adapter, 1, now, 1.0)
        window = max(1, min(plan.max_window, math.ceil(plan.target_window_s / max(one, 1e-7))))
    timed = Timed(window=window)
    with adapter.observe_fallback() as seen:
        for _ in range(plan.repetitions):
            per_iter, wall = _window(step, adapter, window, now, plan.slowdown)
            timed.samples.append(per_iter)
            timed.wall.append(wall)
            if clock is Clock.process_cpu:
                c0 = now()
                calibration_loop()
                timed.calibration.append(max(now() - c0, 1e-9))
    timed.fallback = seen
    return timed


def workload_step(adapter: Adapter, name: str, mode: str, dtype: torch.dtype, seed: int) -> tuple[Callable[[], object], Workload]:
    """A no-grad forward pass (or the workload's own ``run``) of workload ``name`` on the device."""
    import torch

    from opmatrix.probes.workloads.catalog import build

    wl = build(name, dtype=dtype, seed=seed)
    device = adapter.device()
    model = wl.model.to(device).eval()
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in wl.inputs)
    fn = torch.compile(model, backend=adapter.compile_backend()) if mode == "compile" else model

    run = getattr(wl, "run", None)  # e.g. token generation instead of one forward pass

    def step() -> object:
        with torch.no_grad():
            return run(fn, *inputs) if run is not None else fn(*inputs)

    return step, wl


def op_step(adapter: Adapter, hot: HotOp, dtype: torch.dtype, seed: int) -> Callable[[], object]:
    """One call of a hot operator on device inputs drawn from ``torch.randn`` under ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    device = adapter.device()
    inputs = [torch.randn(s, generator=gen, dtype=dtype).to(device) for s in hot.shapes]

    def step() -> object:
        return hot.call(*inputs)

    return step
