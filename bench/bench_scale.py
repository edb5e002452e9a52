"""Local pool vs Ray executor on this machine: wall time, per-task overhead, equal matrices.

    python bench/bench_scale.py [--ops add,mul,sort,softmax] [--tasks 120] [--record]

1. The same refaccel probe three ways: the local pool on every device (``--devices all``),
   ``--executor ray`` on a local Ray instance (one node, its two devices as the ``refaccel``
   resource), and ``--executor ray --ray-address`` on two nodes started with ``ray start`` on
   loopback (127.0.0.2 and 127.0.0.3, one ``refaccel`` device each; :mod:`tests.raycluster` says
   why not 127.0.0.1 and how the nodes share a token). Wall time of each command (the two-node
   one once the nodes run; their start is printed apart), and ``opmatrix diff --json`` counts
   between the local matrix and each Ray matrix (all zero: the same cells and outcomes).
2. Per-task overhead: trivial tasks (one unit each, no work: the runner tests' handler) through
   one local worker and through one Ray actor, ``--tasks`` N and then 2N of them: per task =
   (wall(2N) - wall(N)) / N, so worker (and actor) start-up and shut-down cancel out; the Ray
   instance is started once before both Ray runs. The overhead is Ray's per-task time minus the
   local pool's.

The last line is ``ray overhead per task X ms`` (goal: under 20 ms). ``--record`` appends a row to docs/benchmarks.md (bench/benchdoc.py) with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
OPM = [sys.executable, "-m", "opmatrix"]


def _probe(out: Path, ops: str, dtypes: str, extra: list[str], env: dict[str, str] | None = None) -> float:
    cmd = [*OPM, "probe", "--backend", "refaccel", "--generation", "g2", "--ops", ops, "--dtypes", dtypes,
           "--no-runtime", "--quiet", "--out", str(out), *extra]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall


def _diff(a: Path, b: Path) -> dict[str, int]:
    done = subprocess.run([*OPM, "diff", str(a / "matrix.yaml"), str(b / "matrix.yaml"), "--json"],
                          capture_output=True, text=True)
    counts: dict[str, int] = json.loads(done.stdout)["counts"]
    return counts


def _wall(tasks: int, executor: object | None, out: Path) -> float:
    """Wall seconds of ``tasks`` trivial tasks through one worker (start and end included)."""
    from opmatrix.probes.runner import run
    from tests.runner_handlers import HANDLERS, make_tasks

    t0 = time.monotonic()
    summary = run(make_tasks(tasks, units=1), command="runner test", backend="cpu", out_dir=out, workers=1, handlers=HANDLERS,
                  progress=False, executor=executor)  # type: ignore[arg-type]
    wall = time.monotonic() - t0
    if summary.recorded != tasks or summary.faulted:
        raise SystemExit(f"trivial run: {summary.recorded}/{tasks} recorded, {summary.faulted} faulted")
    return wall


def _per_task(tasks: int, make: object, out: Path) -> tuple[float, float]:
    """(seconds per task, wall of the N-task run): (wall(2N) - wall(N)) / N."""
    small = _wall(tasks, make() if callable(make) else None, out / "n")
    big = _wall(2 * tasks, make() if callable(make) else None, out / "2n")
    return (big - small) / tasks, small


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="add,mul,sort,softmax")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--record", action="store_true", help="append a row to docs/benchmarks.md")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from benchdoc import Run

    bench = Run("bench_scale")
    from opmatrix.probes.runner.raypool import RayExecutor
    from tests.raycluster import LoopbackCluster

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        local = _probe(out / "local", args.ops, args.dtypes, ["--devices", "all"])
        on_ray = _probe(out / "ray", args.ops, args.dtypes, ["--executor", "ray"])
        counts = _diff(out / "local", out / "ray")
        equal = not any(counts.get(k) for k in ("worse", "better", "new", "removed"))
        t0 = time.monotonic()
        with LoopbackCluster(out / "cluster", {"refaccel": 1}, nodes=2) as cluster:
            started = time.monotonic() - t0
            two = _probe(out / "two", args.ops, args.dtypes, ["--executor", "ray", "--ray-address", cluster.address],
                         env=cluster.env)
        counts2 = _diff(out / "local", out / "two")
        equal2 = not any(counts2.get(k) for k in ("worse", "better", "new", "removed"))
        print(f"probe {args.ops} x {args.dtypes} on refaccel (2 devices): local pool {local:.1f} s wall, "
              f"ray (one node, local instance) {on_ray:.1f} s wall, ray (two nodes via ray start on 127.0.0.2/.3, "
              f"one device each) {two:.1f} s wall (+{started:.1f} s to start the nodes)")
        print(f"matrices equal (opmatrix diff --json counts): one node {equal} {counts}; two nodes {equal2} {counts2}")
        local_task, local_wall = _per_task(args.tasks, None, out / "t-local")
        import ray

        ray.init(address="local", resources={"opm_dev": 1}, include_dashboard=False, log_to_driver=False)
        try:  # executors joining a running instance leave it running
            ray_task, ray_wall = _per_task(args.tasks, lambda: RayExecutor(
                address=None, resource="opm_dev", backend="cpu", generation=None, device_type="cpu"), out / "t-ray")
        finally:
            ray.shutdown()
    overhead = (ray_task - local_task) * 1000
    print(f"trivial tasks, one worker, (wall(2N) - wall(N)) / N with N={args.tasks}: local {local_task * 1000:.1f} "
          f"ms/task ({local_wall:.1f} s for N), ray {ray_task * 1000:.1f} ms/task ({ray_wall:.1f} s for N)")
    if args.record:
        bench.record({"probe local": f"{local:.1f} s", "probe ray": f"{on_ray:.1f} s", "matrices equal": str(equal),
                      "local/task": f"{local_task * 1000:.1f} ms", "ray/task": f"{ray_task * 1000:.1f} ms",
                      "ray overhead/task": f"{overhead:.1f} ms", "probe ray 2 nodes": f"{two:.1f} s",
                      "2 nodes equal": str(equal2)})
    print(f"ray overhead per task {overhead:.1f} ms")


if __name__ == "__main__":
    main()
