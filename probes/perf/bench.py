"""``opmatrix bench``: measure workloads and hot operators, one spawned process each, -> DIR/*.yaml.

    opmatrix bench --backend cpu --workloads mlp,cnn --ops add,mm --out out/perf
    opmatrix bench --backend refaccel --ops mm --slowdown 1.3 --out out/perf-slow   # tests the gate

Each record is written as ``DIR/<id>.yaml`` (schema-valid, see :mod:`opmatrix.schema.perf`). A
subject whose process crashed, hung past ``--timeout`` or failed writes no record and is named on
stderr; the exit code is then 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opmatrix.probes.options import BenchOptions
from opmatrix.probes.planning import checked_adapter
from opmatrix.schema import ExitCode, UsageError, dump_model, validate_data
from opmatrix.schema.perf import PerfRecord
from opmatrix.schema.userref import child_env

from .worker import MARK

__all__ = ["bench", "bench_specs", "measure_all", "merge_runs", "run_spec"]

DEFAULT_WORKLOADS = ("mlp", "cnn")
DEFAULT_OPS = ("add", "mm", "softmax")


def _known_workloads() -> list[str]:
    from opmatrix.probes.workloads.catalog import WORKLOADS

    return sorted(WORKLOADS)


def bench_specs(args: BenchOptions) -> list[dict[str, Any]]:
    """One measurement spec per (workload, mode) and per hot operator the arguments select."""
    from .hotops import HOT_OPS

    workloads, ops = list(args.workloads or []), list(args.ops or [])
    if args.workloads is None and args.ops is None:
        workloads, ops = list(DEFAULT_WORKLOADS), list(DEFAULT_OPS)
    for flag, names, known in (("--workloads", workloads, _known_workloads()), ("--ops", ops, sorted(HOT_OPS))):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(f"{flag}: unknown {'workload' if flag == '--workloads' else 'hot op'} "
                             f"{', '.join(map(repr, unknown))} (choose from {', '.join(known)})")
    common = {"backend": args.backend, "generation": args.generation, "dtype": args.dtype, "seed": args.seed,
              "warmup": args.warmup, "repetitions": args.repetitions, "target_window_s": args.window_ms / 1000,
              "threads": args.threads, "slowdown": args.slowdown}
    specs = [{**common, "kind": "workload", "name": w, "mode": m} for w in workloads for m in args.modes]
    specs += [{**common, "kind": "op", "name": o, "mode": "eager"} for o in ops]
    return specs


def run_spec(spec: dict[str, Any], timeout: float) -> tuple[PerfRecord | None, str]:
    """Measure one spec in a fresh process with a deadline: the record, or why there is none."""
    cmd = [sys.executable, "-m", "opmatrix.probes.perf.worker", json.dumps(spec)]
    env = child_env({"PYTHONUNBUFFERED": "1"})
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


def merge_runs(runs: list[PerfRecord]) -> PerfRecord:
    """One record from the records of separate runs of the same subject (samples run after run)."""
    from .stats import summarize
    from .worker import CONFIDENCE

    first = runs[0]
    groups = [r.timing.samples_s for r in runs]
    stats = summarize(groups, CONFIDENCE)
    walls = sorted(r.timing.wall_median_s for r in runs)
    cals = [r.timing.calibration for r in runs]
    calibration = None  # kept only when every run timed the same loop under the same interpreter
    base = cals[0]
    if base is not None and all(c is not None and (c.loop, c.python) == (base.loop, base.python) for c in cals):
        calibration = base.model_copy(update={"samples_s": [x for c in cals if c is not None for x in c.samples_s]})
    timing = first.timing.model_copy(update={
        "runs": len(runs), "samples_s": [x for g in groups for x in g], "median_s": stats["median"],
        "iqr_s": stats["iqr"], "ci_low_s": stats["ci_low"], "ci_high_s": stats["ci_high"],
        "wall_median_s": walls[len(walls) // 2], "calibration": calibration,
    })
    seen = [r.fallback for r in runs]
    observed = [f for f in seen if f.invalidates_latency]
    fallback = observed[0].model_copy(update={"ops": sorted({o for f in observed for o in f.ops})}) if observed \
        else next((f for f in seen if f.state.value == "unknown"), seen[0])
    data = first.model_dump(mode="json")
    data.update(timing=timing.model_dump(mode="json"), fallback=fallback.model_dump(mode="json"))
    return validate_data(data, PerfRecord, f"merged record {first.id}")


def _line(rec: PerfRecord) -> str:
    t = rec.timing
    flag = "  FALLBACK OBSERVED (latency invalid)" if rec.fallback.invalidates_latency else ""
    return (f"{rec.id}: median {t.median_s * 1e3:.4f} ms/iter [{t.ci_low_s * 1e3:.4f}, {t.ci_high_s * 1e3:.4f}] "
            f"({t.clock}, {t.runs} runs x {t.repetitions} x {t.window} iterations, IQR {t.iqr_s * 1e3:.4f} ms){flag}")


def measure_all(specs: list[dict[str, Any]], runs: int, timeout: float) -> tuple[list[PerfRecord], list[str]]:
    """Every spec ``runs`` times (run k of every subject before run k+1 of any), merged per subject."""
    done: dict[int, list[PerfRecord]] = {}
    failed: dict[int, str] = {}
    for _ in range(runs):
        for i, spec in enumerate(specs):
            if i in failed:
                continue
            window = {"window": done[i][0].timing.window} if done.get(i) else {}
            rec, why = run_spec({**spec, **window}, timeout)
            if rec is None:
                failed[i] = f"{spec['kind']}.{spec['name']}.{spec['mode']}: no record: {why}"
            else:
                done.setdefault(i, []).append(rec)
    merged = [merge_runs(done[i]) for i in sorted(done) if i not in failed]
    return merged, list(failed.values())


def bench(args: BenchOptions) -> ExitCode:
    """Run ``opmatrix bench``; 0 when every subject produced a record, 1 otherwise.

    Every argument is checked (the options, the subjects, the backend and its generation) before
    the first measuring process starts or ``--out`` is made."""
    specs = bench_specs(args)
    checked_adapter(args.backend, args.generation)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = args.command_line()
    t0 = time.monotonic()
    records, failures = measure_all(specs, args.runs, args.timeout)
    for rec in records:
        dump_model(rec, out / f"{rec.id}.yaml", command=command)
        print(_line(rec))
    for why in failures:
        print(why, file=sys.stderr)
    print(f"{len(records)}/{len(specs)} records in {out} ({time.monotonic() - t0:.0f} s)")
    return ExitCode.FAILED if failures else ExitCode.OK
