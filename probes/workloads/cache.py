"""Level 4 "caching": a second process compiles the same workload and reports whether it reused
the first process's on-disk compile cache.

Only inductor keeps such a cache among the backends opmatrix runs (its FX graph cache and
AOTAutograd's cache, read from dynamo's own counters); ``aot_eager``/``eager`` and refaccel's
backend keep none, and any other backend is recorded as not observable::

    cache = second_process(ctx, {"workload": "mlp", "dtype": "float32", "seed": 0}, "inductor")
    cache.result, cache.hits, cache.seconds   # CheckResult.passed, 2, 1.4

The child is a fresh interpreter (``python -m opmatrix.probes.workloads.cache SPEC``), never a
fork of the worker: it imports torch, sets up the adapter from the same ``--backend`` spec and
generation, builds the workload with the same seed and dtype, compiles it and runs one no-grad
forward pass, then prints its counters as one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from opmatrix.schema import CheckResult
from opmatrix.schema.userref import child_env
from opmatrix.schema.workloads import CompileCache

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from opmatrix.probes.runner import WorkerContext

    from .steps import CompileBackend

__all__ = ["second_process", "CACHELESS"]

#: torch.compile backends that keep no compile cache across processes
CACHELESS = frozenset({"eager", "aot_eager", "aot_eager_decomp_partition", "refaccel"})
TIMEOUT_S = 600.0


def second_process(ctx: WorkerContext, payload: Mapping[str, Any], backend: CompileBackend) -> CompileCache:
    """Compile workload ``payload`` with ``backend`` again in a fresh process; its cache figures."""
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    if name in CACHELESS:
        return CompileCache(result=CheckResult.not_applicable, evidence=f"{name} keeps no compile cache across processes")
    if name != "inductor":
        return CompileCache(result=CheckResult.unknown,
                            evidence=f"not observed: opmatrix reads inductor's cache counters only, not {name}'s")
    if ctx.backend is None:
        return CompileCache(result=CheckResult.unknown, evidence="not observed: the worker has no --backend spec to "
                            "set the device up in a second process")
    spec = {"backend": ctx.backend, "generation": ctx.adapter.generation, "device": ctx.device,
            "workload": payload["workload"], "dtype": payload["dtype"], "seed": int(payload.get("seed", 0)),
            "compile_backend": name}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", __name__, json.dumps(spec)], capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=child_env(), check=False)
    except subprocess.TimeoutExpired:
        return CompileCache(result=CheckResult.unknown, evidence=f"the second process ran past {TIMEOUT_S:g} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return CompileCache(result=CheckResult.unknown,
                            evidence=f"the second process failed (exit {done.returncode}): {tail}")
    got = json.loads(lines[-1])
    hits, misses = int(got["hits"]), int(got["misses"])
    where = f"{got['aot_hits']} AOTAutograd and {got['fx_hits']} FX graph cache hit(s), {misses} graph(s) generated again"
    result = CheckResult.passed if hits and not misses else CheckResult.failed
    verdict = "reused the first process's cache" if result is CheckResult.passed else "compiled again"
    return CompileCache(result=result, hits=hits, misses=misses, seconds=round(float(got["seconds"]), 4),
                        evidence=f"a second process {verdict}: {where}; its first call took {got['seconds']:.2f} s "
                        f"({time.perf_counter() - start:.1f} s with start-up)")


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch._dynamo.utils import counters

    from opmatrix.backend.registry import get_adapter

    from .catalog import TORCH_DTYPES, build
    from .compare import to_device
    from .steps import forward

    torch.set_num_threads(1)
    adapter = get_adapter(spec["backend"], spec["generation"])
    if spec["device"] is not None:
        adapter.select_device(spec["device"])
    adapter.setup()
    wl = build(spec["workload"], TORCH_DTYPES[spec["dtype"]], spec["seed"])
    device = adapter.device()
    model = wl.model.to(device).eval()
    inputs = to_device(wl.inputs, device)
    compiled: Callable[..., object] = torch.compile(model, backend=spec["compile_backend"])
    start = time.perf_counter()
    with torch.no_grad():
        forward(wl, compiled, inputs, True)
    adapter.synchronize()
    seconds = time.perf_counter() - start
    fx_hits, aot_hits = counters["inductor"]["fxgraph_cache_hit"], counters["aot_autograd"]["autograd_cache_hit"]
    misses = counters["inductor"]["fxgraph_cache_miss"]  # graphs whose code was generated again
    return {"hits": fx_hits + aot_hits, "fx_hits": fx_hits, "aot_hits": aot_hits, "misses": misses, "seconds": seconds}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))), flush=True)
