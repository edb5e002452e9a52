"""Probe throughput: ``opmatrix probe`` beside a naive loop over the same OpInfo samples.

Both are measured in the same run on the same machine:

- naive: for each (OpInfo, dtype), ``sample_inputs`` (OpInfo's defaults, re-seeding per sample)
  and one forward call per sample on the CPU, in one process, nothing compared or observed;
- probe: ``opmatrix probe --backend cpu`` with N workers: every sample x 6 layouts, device run +
  CPU reference + comparison, first-order backward, path classification, journal and matrix.

    python bench/bench_probe.py                      # every 10th OpInfo, 11 dtypes, 2 workers
    python bench/bench_probe.py --every 1            # all of OpInfo (tens of minutes)

Prints wall time, cells, samples/s and the ratio probe / naive, plus the probe's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def naive(names: list[str], dtypes: list[str]) -> tuple[float, int]:
    """Forward pass over every sample, in process; returns (seconds, samples)."""
    import torch

    from opmatrix.probes.ops.source import select_ops

    entries = select_ops(names)
    n = 0
    t0 = time.perf_counter()
    for e in entries:
        for d in dtypes:
            try:
                for s in e.info.sample_inputs("cpu", getattr(torch, d)):
                    n += 1
                    try:
                        e.info.op(s.input, *s.args, **s.kwargs)
                    except Exception:  # noqa: BLE001 - a naive loop ignores what fails
                        pass
            except Exception:  # noqa: BLE001
                continue
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=int, default=10, help="take every Nth OpInfo (1 = all)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,float64,float16,bfloat16,complex64,int64,int32,int16,int8,uint8,bool")
    ap.add_argument("--out", help="probe output dir (default: a temporary one)")
    args = ap.parse_args()
    from opmatrix.probes.ops.source import all_ops

    names = [o.full_name for o in all_ops()][:: args.every]
    dtypes = args.dtypes.split(",")
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-probe-"))
    print(f"{len(names)} OpInfos x {len(dtypes)} dtypes; probe output in {out}", flush=True)

    t_naive, samples = naive(names, dtypes)
    print(f"naive forward loop : {t_naive:8.1f} s  {samples} samples ({samples / t_naive:,.0f} samples/s, 1 process)",
          flush=True)

    cmd = [sys.executable, "-m", "opmatrix", "probe", "--backend", "cpu", "--ops", ",".join(names),
           "--dtypes", ",".join(dtypes), "--workers", str(args.workers), "--out", str(out), "--quiet", "--no-runtime"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    t_probe = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if res.returncode not in (0, 1):
        sys.exit(f"probe failed ({res.returncode}): {res.stderr[-2000:]}")
    from opmatrix.schema import load_matrix

    m = load_matrix(out / "matrix.yaml")
    cells = m.cell_count()
    yaml_mb = os.path.getsize(out / "matrix.yaml") / 1e6
    print(f"opmatrix probe     : {t_probe:8.1f} s  {cells} cells in {len(m.operators)} overloads, "
          f"{len(m.skipped)} skipped tasks, matrix {yaml_mb:.1f} MB, peak RSS of one process {peak_mb:,.0f} MB "
          f"({args.workers} workers)")
    print(f"ratio probe / naive: {t_probe / t_naive:8.2f}x wall for 6 layouts x (device run + reference) "
          f"+ backward + classification")
    print(res.stdout.strip().splitlines()[0] if res.stdout.strip() else "")


if __name__ == "__main__":
    main()
