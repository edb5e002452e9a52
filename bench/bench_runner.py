"""Benchmark: the runner's cost over a naive in-process loop, 2 workers vs 1, an unchanged re-run.

Every measurement probes exactly the same work with the real operator engine on ``cpu``
(``opmatrix.probes.ops.engine``: samples x layouts, device run + CPU reference compare; compile
off), each in a fresh process so that each pays one torch import, measured in one run:

- ``naive``: a plain loop calling ``probe_task`` in one process (no isolation, no journal);
- ``runner w1`` / ``runner w2``: :func:`opmatrix.probes.runner.run` with 1 and 2 workers;
- ``rerun``: ``runner w1`` again on its own output directory (every task reused by evidence key);
- ``2 naive``: two naive loops at once, each over the whole plan. How much each slows down when
  both cores are busy bounds what any 2-process runner can gain here: the *ceiling* is
  ``2 x naive / 2 naive``. On a small VM the two vCPUs share caches and memory bandwidth, and
  may share a physical core, so the ceiling may sit under 2.

Every process runs torch with ``--threads`` intra-op threads (default 1, as the runner's default
of cores / workers gives with 2 workers on 2 cores): with the torch default a lone process uses
both cores for OpInfo's small samples and the 1-worker row would measure intra-op threading, not
the runner.

Each row gives the wall time from process start and the time after setup (naive: after torch
import and adapter setup; runner: after the first worker reported ready), since a spawned worker
pays the same imports the naive loop pays before its first task.

Goals (issue 4): runner w1 at most 1.25x naive; w2 at least 1.6x faster than w1; rerun under 5%
of the cold run. Ratios depend on free cores: run it on an idle machine::

    .venv/bin/python bench/bench_runner.py [--ops add,mul,...] [--dtypes float32,...] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

# enough work (about a minute of probing on 2 cores) that the ratios measure the runner, not the
# few seconds every process pays to import torch and OpInfo
OPS = (
    "add,mul,sub,div.no_rounding_mode,sum,mean,softmax,log_softmax,exp,log,cumsum,mm,bmm,addmm,sort,topk,"
    "amax,clamp,where,lerp,addcmul,index_select,gather,cat,stack,nn.functional.linear,nn.functional.conv2d,"
    "nn.functional.layer_norm,nn.functional.gelu,nn.functional.max_pool2d,var,std,prod,argmax,masked_fill,"
    "matmul,einsum,flip,roll,tril"
)
DTYPES = "float32,float64,bfloat16,int64"
OPTIONS = {"compile": "off"}


def _plan(ops: list[str], dtypes: list[str]) -> list[tuple[str, str]]:
    return [(op, dtype) for op in ops for dtype in dtypes]


def naive(ops: list[str], dtypes: list[str], threads: int) -> dict[str, float]:
    """Probe every (op, dtype) in this process, one after the other."""
    t0 = time.monotonic()
    import torch

    from opmatrix.backend import get_adapter

    torch.set_num_threads(threads)  # what a worker does before its adapter's setup

    adapter = get_adapter("cpu")
    adapter.setup()
    t1 = time.monotonic()  # what a worker has done when it reports ready; it imports the engine later
    from opmatrix.probes.ops.engine import probe_task

    cells = 0
    for op, dtype in _plan(ops, dtypes):
        cells += len(probe_task(adapter, op, dtype, options=OPTIONS).cells)
    return {"after_setup": time.monotonic() - t1, "in_process": time.monotonic() - t0, "cells": cells}


def runner(ops: list[str], dtypes: list[str], workers: int, threads: int, out: str) -> dict[str, float]:
    """Probe the same plan through the runner."""
    from opmatrix.probes.handlers import TASK_HANDLERS
    from opmatrix.probes.ops import task_id  # not the engine: the parent stays free of torch
    from opmatrix.probes.runner import Task, run

    tasks = [
        Task(task_id(op, dtype), "op", {"source": op, "dtype": dtype, "options": OPTIONS}, order=i)
        for i, (op, dtype) in enumerate(_plan(ops, dtypes))
    ]
    s = run(
        tasks,
        command="runner test", backend="cpu",
        out_dir=out,
        workers=workers,
        threads=threads,
        progress=False,
        options={"op_source_hash": "bench:" + ",".join(ops)},
        handlers=TASK_HANDLERS,
    )
    assert s.recorded == s.planned and not s.aborted, s
    return {
        "after_setup": s.seconds - (s.startup_seconds or 0.0),
        "in_process": s.seconds,
        "cells": s.paths and sum(s.paths.values()),
        "reused": s.reused,
        "parent_cpu": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),  # the orchestrator alone
    }


def _measure(args: list[str], copies: int = 1) -> dict[str, float]:
    """Run ``copies`` processes of one step at once; the slowest one's times, all of their CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    # files, not pipes: a copy whose stderr pipe filled up (kineto logs every profiler use) would
    # wait for the copy read first, and the copies would run one after the other
    logs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in range(copies)]
    procs = [subprocess.Popen([sys.executable, __file__, *args], stdout=o, stderr=e, text=True) for o, e in logs]
    for proc in procs:
        proc.wait()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the steps and every process they reaped (workers)
    results = []
    for proc, (out, err) in zip(procs, logs, strict=True):
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"bench step {args} failed:\n{err.read()[-3000:]}")
        results.append(json.loads(out.read().strip().splitlines()[-1]))
        out.close()
        err.close()
    result = max(results, key=lambda r: r["after_setup"])
    result["wall"] = wall
    result["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default=OPS)
    p.add_argument("--dtypes", default=DTYPES)
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the best of each is shown")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of every process (default 1)")
    p.add_argument("--step", choices=["naive", "runner"], help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    ops, dtypes = args.ops.split(","), args.dtypes.split(",")
    if args.step == "naive":
        print(json.dumps(naive(ops, dtypes, args.threads)))
        return
    if args.step == "runner":
        print(json.dumps(runner(ops, dtypes, args.workers, args.threads, args.out)))
        return

    common = ["--ops", args.ops, "--dtypes", args.dtypes, "--threads", str(args.threads)]
    names = ["naive", "runner w1", "runner w2", "rerun w1", "2 naive"]
    rows: dict[str, dict[str, float]] = {}
    for i in range(args.rounds):  # interleaved rounds, best of each: other load only adds time
        with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
            steps = {
                "naive": [*common, "--step", "naive"],
                "runner w1": [*common, "--step", "runner", "--workers", "1", "--out", f"{tmp}/w1"],
                "rerun w1": [*common, "--step", "runner", "--workers", "1", "--out", f"{tmp}/w1"],
                "runner w2": [*common, "--step", "runner", "--workers", "2", "--out", f"{tmp}/w2"],
                "2 naive": [*common, "--step", "naive"],
            }
            # odd rounds go backwards (the re-run still after its cold run): a machine that slows
            # down, or speeds up, over the minutes of a run does not favour one row
            order = list(steps) if i % 2 == 0 else ["2 naive", "runner w2", "runner w1", "rerun w1", "naive"]
            for name in order:
                got = _measure(steps[name], copies=2 if name == "2 naive" else 1)
                best = rows.setdefault(name, got)
                for key in ("wall", "after_setup", "cpu", "parent_cpu"):
                    if key not in got:
                        continue
                    best[key] = min(best[key], got[key])
    rows = {name: rows[name] for name in names}
    tasks = len(_plan(ops, dtypes))
    print(
        f"{tasks} tasks ({len(ops)} ops x {len(dtypes)} dtypes) on cpu, {rows['naive']['cells']} cells, "
        f"{args.threads} torch thread(s) per process, {os.cpu_count()} cores, best of {args.rounds} round(s)"
    )
    print(f"{'':<10} {'wall s':>8} {'after setup s':>14} {'cpu s':>8}")
    for name, r in rows.items():
        print(f"{name:<10} {r['wall']:>8.2f} {r['after_setup']:>14.2f} {r['cpu']:>8.2f}")
    n, w1, w2, re, pair = rows["naive"], rows["runner w1"], rows["runner w2"], rows["rerun w1"], rows["2 naive"]
    print(
        f"runner w1 / naive:        {w1['wall'] / n['wall']:.2f}x wall, "
        f"{w1['after_setup'] / n['after_setup']:.2f}x after setup   (goal <= 1.25)"
    )
    print(
        f"speed-up w2 over w1:      {w1['wall'] / w2['wall']:.2f}x wall, "
        f"{w1['after_setup'] / w2['after_setup']:.2f}x after setup   (goal >= 1.6)"
    )
    print(f"unchanged rerun / cold:   {re['wall'] / w1['wall']:.3f} wall ({int(re['reused'])} reused)   (goal < 0.05)")
    print(f"orchestrator CPU:         {w1['parent_cpu']:.2f} s with 1 worker, {w2['parent_cpu']:.2f} s with 2")
    ceiling = 2 * n["after_setup"] / pair["after_setup"]
    print(
        f"machine ceiling for 2:    {ceiling:.2f}x (2 naive loops at once: each {pair['after_setup'] / n['after_setup']:.2f}x "
        f"slower than alone); w2 reaches {w1['after_setup'] / w2['after_setup'] / ceiling:.0%} of it"
    )


if __name__ == "__main__":
    main()
