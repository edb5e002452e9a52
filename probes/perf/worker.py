"""One measurement in its own process: ``python -m opmatrix.probes.perf.worker SPEC_JSON``.

The parent (:mod:`.bench`) spawns this with a deadline; it sets up the backend, measures one
subject and prints the record as one JSON line after :data:`MARK`. A crash, hang or error costs
that subject only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from opmatrix.schema.perf import Clock

from .environment import environment_fields
from .measure import Plan, op_step, time_windows, workload_step
from .stats import summarize

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from opmatrix.backend.base import Adapter

__all__ = ["MARK", "HOST_EXECUTED", "measure_spec"]

MARK = "OPMATRIX-PERF-RECORD "
#: backends whose "device" work runs on the host CPU: timed by the process's CPU clock, which
#: excludes the time a shared machine's other processes held the cores, beside a calibration loop
#: for what they still inflate (wall time for every asynchronous device)
HOST_EXECUTED = frozenset({"cpu", "refaccel"})
CONFIDENCE = 0.95


def _subject(adapter: Adapter, spec: dict[str, Any], dtype: torch.dtype) -> tuple[Callable[[], object], dict[str, Any]]:
    """The step to time and the record fields that describe the subject and its inputs."""
    if spec["kind"] == "workload":
        step, wl = workload_step(adapter, spec["name"], spec["mode"], dtype, spec["seed"])
        shapes = [list(x.shape) for x in wl.inputs if hasattr(x, "shape")]
        return step, {
            "subject": {"kind": "workload", "name": wl.name, "mode": spec["mode"], "description": wl.input_desc},
            "input": {"shapes": shapes, "dtype": spec["dtype"], "generator": "torch.randn (standard normal)",
                      "seed": spec["seed"], "description": wl.input_desc},
            "batch": wl.batch,
        }
    from .hotops import HOT_OPS

    hot = HOT_OPS[spec["name"]]
    return op_step(adapter, hot, dtype, spec["seed"]), {
        "subject": {"kind": "op", "name": hot.aten, "mode": "eager", "description": spec["name"]},
        "input": {"shapes": [list(s) for s in hot.shapes], "dtype": spec["dtype"],
                  "generator": "torch.randn (standard normal)", "seed": spec["seed"]},
        "batch": hot.shapes[0][0],
    }


def _compiler(adapter: Adapter, mode: str) -> dict[str, Any]:
    if mode != "compile":
        return {"name": "eager", "backend": None, "options": {}}
    backend = adapter.compile_backend()
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
    return {"name": "torch.compile", "backend": name,
            "options": {"mode": "default", "dynamic": "false", "fullgraph": "false"}}


def _injected(slowdown: float) -> str | None:
    parts = [f"every window x{slowdown:g} (--slowdown)"] if slowdown > 1.0 else []
    env = os.environ.get("OPMATRIX_REFACCEL_SLOWDOWN", "").strip()
    if env:
        parts.append(f"OPMATRIX_REFACCEL_SLOWDOWN={env}")
    return "; ".join(parts) or None


def measure_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure the subject ``spec`` describes and return the record's data."""
    import torch

    from opmatrix.backend import get_adapter

    torch.set_num_threads(spec["threads"])
    adapter = get_adapter(spec["backend"], generation=spec.get("generation"))
    adapter.setup()
    dtype = getattr(torch, spec["dtype"])
    step, fields = _subject(adapter, spec, dtype)
    clock = Clock.process_cpu if adapter.name in HOST_EXECUTED else Clock.wall
    plan = Plan(warmup=spec["warmup"], repetitions=spec["repetitions"], target_window_s=spec["target_window_s"],
                slowdown=spec["slowdown"], window=spec.get("window"))
    started = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    timed = time_windows(step, adapter, plan, clock)
    stats = summarize([timed.samples], CONFIDENCE)
    seen = timed.fallback
    mode = fields["subject"]["mode"]
    return {
        "kind": "perf-record",
        "id": f"{spec['kind']}.{spec['name']}.{mode}.{spec['dtype']}",
        **fields,
        "precision": spec["dtype"],
        "concurrency": 1,
        "backend": adapter.name,
        "generation": adapter.generation,
        **environment_fields(adapter),
        "compiler": _compiler(adapter, mode),
        "threads": torch.get_num_threads(),
        "timing": {
            "clock": clock.value, "warmup": plan.warmup, "window": timed.window, "repetitions": plan.repetitions,
            "runs": 1,
            "samples_s": timed.samples, "median_s": stats["median"], "iqr_s": stats["iqr"],
            "ci_low_s": stats["ci_low"], "ci_high_s": stats["ci_high"], "confidence": CONFIDENCE,
            "wall_median_s": sorted(timed.wall)[len(timed.wall) // 2], "synchronized": True,
            "calibration": timed.calibration_fields(),
        },
        "fallback": {"state": seen.state.value, "ops": sorted(set(seen.ops)), "source": seen.source,
                     "invalidates_latency": seen.state.value == "observed"},
        "injected_slowdown": _injected(spec["slowdown"]),
        "measured_at": started.isoformat(),
    }


def main() -> int:
    """Entry point: measure the spec in ``argv[1]`` and print the record after :data:`MARK`."""
    data = measure_spec(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + MARK + json.dumps(data) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
