"""Benchmark: render the HTML support site of a matrix the size of a full CPU run over OpInfo.

Prints figures, asserts nothing (goals: under 10 s, index under 3 MB). CPU time is printed beside
wall time because a shared machine's load inflates the latter::

    .venv/bin/python bench/bench_report.py [--ops 700] [--baseline] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchdoc import Run

from opmatrix.reports import render_site
from opmatrix.reports.synthetic import synthetic_matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=700, help="operators (default 700, all of OpInfo)")
    parser.add_argument("--baseline", action="store_true", help="also render the diff against a second matrix")
    parser.add_argument("--out", help="output directory (default: a temporary one)")
    parser.add_argument("--record", action="store_true", help="add this run's figures to docs/benchmarks.md")
    args = parser.parse_args()
    run = Run("bench_report")

    t0 = time.perf_counter()
    matrix = synthetic_matrix(n_ops=args.ops, seed=0)
    baseline = synthetic_matrix(n_ops=args.ops, seed=1) if args.baseline else None
    built = time.perf_counter() - t0
    entries = sum(len(e) for e in matrix.operators.values())
    print(f"matrix: {len(matrix.operators)} operators, {entries} entries, {matrix.cell_count()} cells "
          f"(built in {built:.2f} s)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        t0, c0 = time.perf_counter(), time.process_time()
        first = render_site(matrix, out, baseline=baseline, command="bench/bench_report.py")
        cold, cpu = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        second = render_site(matrix, out, baseline=baseline, command="bench/bench_report.py")
        warm = time.perf_counter() - t0
        size = (out / "index.html").stat().st_size
        total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        print(f"render: {cold:.2f} s wall, {cpu:.2f} s CPU ({len(first.written)} files written); "
              f"re-render: {warm:.2f} s ({len(second.written)} written, {second.unchanged} unchanged)  [goal < 10 s]")
        print(f"index.html: {size / 1e6:.2f} MB  [goal < 3 MB]; whole site {total / 1e6:.1f} MB")
        if args.baseline:
            print(f"diff.html: {(out / 'diff.html').stat().st_size / 1e6:.2f} MB")
    if args.record:
        run.record({"operators": str(len(matrix.operators)), "cells": f"{matrix.cell_count():,}",
                    "render": f"{cold:.2f} s wall, {cpu:.2f} s CPU", "re-render": f"{warm:.2f} s",
                    "index.html": f"{size / 1e6:.2f} MB", "site": f"{total / 1e6:.1f} MB"})


if __name__ == "__main__":
    main()
