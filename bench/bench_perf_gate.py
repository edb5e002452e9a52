"""Benchmark: false-positive and detection rate of the level-6 performance gate on this machine.

Runs the benchmark (``--record-runs`` processes per record) ``--runs`` times unchanged and ``--slowed`` times with a deliberate
slowdown, each measurement in its own process as ``opmatrix bench`` does, then judges records as
``opmatrix gate`` does (:func:`opmatrix.ci.perf.compare_records`):

- false positives: every pair of unchanged runs (earlier as baseline) that the gate calls a regression;
- detections: every (unchanged baseline, slowed run) pair it calls a regression.

On ``refaccel`` the slowdown is a real slower kernel (``OPMATRIX_REFACCEL_SLOWDOWN=aten::mm:F``, so only
the mm record is slowed); elsewhere it is ``--slowdown F`` on every window::

    .venv/bin/python bench/bench_perf_gate.py --backend cpu --runs 5 --slowed 2
    .venv/bin/python bench/bench_perf_gate.py --backend refaccel --ops add,mm --workloads ""
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import time

from opmatrix.ci.perf import compare_records
from opmatrix.probes.options import BenchOptions
from opmatrix.probes.perf.bench import bench_specs, measure_all
from opmatrix.schema.perf import PerfRecord, PerfRequirement


def _measure(args: argparse.Namespace, slowed: bool) -> dict[str, PerfRecord]:
    ns = BenchOptions(
        backend=args.backend, workloads=tuple(w for w in args.workloads.split(",") if w) or None,
        ops=tuple(o for o in args.ops.split(",") if o) or None, modes=("eager",), repetitions=args.repetitions,
        timeout=300.0, out="unused",
    )
    env_before = os.environ.get("OPMATRIX_REFACCEL_SLOWDOWN")
    if slowed and args.backend == "refaccel":
        os.environ["OPMATRIX_REFACCEL_SLOWDOWN"] = f"aten::mm:{args.factor}"
    elif slowed:
        ns = dataclasses.replace(ns, slowdown=args.factor)
    try:
        records, failures = measure_all(bench_specs(ns), args.record_runs, ns.timeout)
        if failures:
            raise SystemExit("; ".join(failures))
        return {r.id: r for r in records}
    finally:
        os.environ.pop("OPMATRIX_REFACCEL_SLOWDOWN", None)
        if env_before is not None:
            os.environ["OPMATRIX_REFACCEL_SLOWDOWN"] = env_before


def _slowed_ids(args: argparse.Namespace, ids: list[str]) -> list[str]:
    return [i for i in ids if i.startswith("op.mm.")] if args.backend == "refaccel" else ids


def main() -> None:
    """Measure, judge every pair, print the rates."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu")
    p.add_argument("--workloads", default="mlp")
    p.add_argument("--ops", default="add,mm")
    p.add_argument("--runs", type=int, default=5, help="unchanged runs")
    p.add_argument("--slowed", type=int, default=2, help="runs with the slowdown")
    p.add_argument("--factor", type=float, default=1.3)
    p.add_argument("--repetitions", type=int, default=15)
    p.add_argument("--record-runs", type=int, default=3, help="processes per record (opmatrix bench --runs)")
    p.add_argument("--thresholds", type=lambda t: [float(x) for x in t.split(",")], default=[0.05, 0.10, 0.15],
                   help="contract thresholds to judge at (max_slowdown)")
    args = p.parse_args()
    t0 = time.monotonic()
    plain = [_measure(args, slowed=False) for _ in range(args.runs)]
    slow = [_measure(args, slowed=True) for _ in range(args.slowed)]
    ids = sorted(plain[0])
    print(f"backend {args.backend}, subjects {', '.join(ids)}, {args.record_runs} processes per record, "
          f"{args.runs} unchanged + {args.slowed} slowed benchmark runs "
          f"(x{args.factor:g}), {time.monotonic() - t0:.0f} s of measuring")
    for threshold in args.thresholds:
        _rates(args, PerfRequirement(max_slowdown=threshold), plain, slow, ids)


def _rates(args: argparse.Namespace, req: PerfRequirement, plain: list, slow: list, ids: list[str]) -> None:
    fp = total = 0
    for a, b in itertools.combinations(range(len(plain)), 2):
        for rid in ids:
            regressed, why = compare_records(plain[b][rid], plain[a][rid], req)
            total += 1
            fp += regressed
            if regressed:
                print(f"  false positive: run {b} vs run {a}: {rid}: {why}")
    hits = judged = 0
    for s, base in itertools.product(slow, plain):
        for rid in _slowed_ids(args, ids):
            regressed, why = compare_records(s[rid], base[rid], req)
            judged += 1
            hits += regressed
            if not regressed:
                print(f"  missed: {rid}: {why}")
    print(f"threshold +{req.max_slowdown:.0%}: false positives {fp}/{total} unchanged comparisons "
          f"({100 * fp / max(total, 1):.1f}%), detected {hits}/{judged} slowed ({100 * hits / max(judged, 1):.1f}%)")


if __name__ == "__main__":
    main()
