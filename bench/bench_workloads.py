"""Wall time of the workload suite on refaccel: every catalog workload x dtypes x eager+compile.

    python bench/bench_workloads.py [--generation g2] [--dtypes float32,bfloat16,float16] [--workers 2]

Runs ``opmatrix probe --suites workloads --workloads all`` in a temporary folder (the same runner
and isolation as any probe) and prints the wall time, the per-task time and the slowest tasks
(goal: all catalog workloads x 3 dtypes x eager+compile under 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    """Run the suite once and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generation", default="g2")
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "opmatrix", "probe", "--backend", "refaccel", "--generation", args.generation,
               "--suites", "workloads", "--workloads", "all", "--workload-dtypes", args.dtypes,
               "--workload-modes", args.modes, "--workers", str(args.workers), "--out", tmp, "--quiet"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return proc.returncode
        rows = [json.loads(line) for line in (Path(tmp) / "journal.jsonl").read_text().splitlines() if line.strip()]
    tasks = [r for r in rows if r.get("kind") == "workload"]
    steps = sorted(((sum(s.get("seconds", 0) for s in r["result"].get("steps", {}).values()), r["task"]) for r in tasks),
                   reverse=True)
    print(f"refaccel {args.generation}: {len(tasks)} workload tasks ({args.dtypes}; {args.modes}) "
          f"with {args.workers} workers in {wall:.1f} s wall (goal < 180 s)")
    print("slowest tasks (step seconds): " + ", ".join(f"{t} {s:.1f}" for s, t in steps[:5]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
