"""``opmatrix bench``: measure workloads and hot operators, one spawned process each, -> DIR/*.yaml.

    opmatrix bench --backend cpu --workloads mlp,cnn --ops add,mm --out out/perf
    opmatrix bench --backend refaccel --ops mm --slowdown 1.3 --out out/perf-slow   # tests the gate

Each record is written as ``DIR/<id>.yaml`` (schema-valid, see :mod:`opmatrix.schema.perf`). A
subject whose process crashed, hung past ``--timeout`` or failed writes no record and is named on
stderr; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opmatrix.schema import UsageError, dump_model, validate_data
from opmatrix.schema.perf import PerfRecord

from .worker import MARK

__all__ = ["bench", "bench_specs", "run_spec"]

DEFAULT_WORKLOADS = ("mlp", "cnn")
DEFAULT_OPS = ("add", "mm", "softmax")


def _known_workloads() -> list[str]:
    from opmatrix.probes.workloads.catalog import WORKLOADS

    return sorted(WORKLOADS)


def bench_specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One measurement spec per (workload, mode) and per hot operator the arguments select."""
    from .hotops import HOT_OPS

    workloads, ops = args.workloads, args.ops
    if workloads is None and ops is None:
        workloads, ops = list(DEFAULT_WORKLOADS), list(DEFAULT_OPS)
    workloads, ops = workloads or [], ops or []
    unknown = [w for w in workloads if w not in _known_workloads()]
    unknown += [o for o in ops if o not in HOT_OPS]
    if unknown:
        raise UsageError(
            f"opmatrix bench: unknown workload/op {', '.join(unknown)}; workloads: {', '.join(_known_workloads())}; "
            f"ops: {', '.join(sorted(HOT_OPS))}"
        )
    if args.slowdown < 1.0:
        raise UsageError(f"opmatrix bench: --slowdown {args.slowdown} must be >= 1.0 (1.3 = 30% slower)")
    common = {"backend": args.backend, "generation": args.generation, "dtype": args.dtype, "seed": args.seed,
              "warmup": args.warmup, "repetitions": args.repetitions, "target_window_s": args.window_ms / 1000,
              "threads": args.threads, "slowdown": args.slowdown}
    specs = [{**common, "kind": "workload", "name": w, "mode": m} for w in workloads for m in args.modes]
    specs += [{**common, "kind": "op", "name": o, "mode": "eager"} for o in ops]
    return specs


def run_spec(spec: dict[str, Any], timeout: float) -> tuple[PerfRecord | None, str]:
    """Measure one spec in a fresh process with a deadline: the record, or why there is none."""
    cmd = [sys.executable, "-m", "opmatrix.probes.perf.worker", json.dumps(spec)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"hung: no result within --timeout {timeout:g} s"
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARK)), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return None, f"failed ({how}): {tail}"
    return validate_data(json.loads(line[len(MARK):]), PerfRecord, f"record of {spec['name']}"), ""


def _line(rec: PerfRecord) -> str:
    t = rec.timing
    flag = "  FALLBACK OBSERVED (latency invalid)" if rec.fallback.invalidates_latency else ""
    return (f"{rec.id}: median {t.median_s * 1e3:.4f} ms/iter [{t.ci_low_s * 1e3:.4f}, {t.ci_high_s * 1e3:.4f}] "
            f"({t.clock}, {t.repetitions}x{t.window}, IQR {t.iqr_s * 1e3:.4f} ms){flag}")


def bench(args: argparse.Namespace) -> int:
    """Run ``opmatrix bench``; 0 when every subject produced a record, 1 otherwise."""
    specs = bench_specs(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    command = "opmatrix bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "opmatrix bench"
    for spec in specs:
        t0 = time.monotonic()
        rec, why = run_spec(spec, args.timeout)
        if rec is None:
            failed += 1
            print(f"{spec['kind']}.{spec['name']}.{spec['mode']}: no record: {why}", file=sys.stderr)
            continue
        dump_model(rec, out / f"{rec.id}.yaml", command=command)
        print(f"{_line(rec)}  [{time.monotonic() - t0:.1f} s]")
    print(f"{len(specs) - failed}/{len(specs)} records in {out}")
    return 1 if failed else 0
