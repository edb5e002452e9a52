"""Wall time of the distributed suite (level 5) on this machine: goal under 2 minutes for cpu/gloo.

    python bench/bench_distributed.py [--backend cpu] [--generation G] [--world-sizes 2,4]

Runs every case of ``opmatrix probe --suites distributed`` (real process groups on 127.0.0.1)
and prints the wall time, the cores seen, the cases per outcome, and the time per case kind
(slowest rank; failure cases include their timeouts by design).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from opmatrix.probes.distributed import run_suite

GOAL_SECONDS = 120.0


def main() -> None:
    """Run the suite once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--generation")
    parser.add_argument("--world-sizes", default="2,4")
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.world_sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="opm-bench-dist-") as tmp:
        started = time.monotonic()
        section = run_suite(args.backend, args.generation, Path(tmp), world_sizes=sizes, progress=False)
        wall = time.monotonic() - started
    outcomes = Counter(c.outcome.value for c in section.cases)
    by_kind: dict[str, float] = defaultdict(float)
    for c in section.cases:
        by_kind[c.kind.value] += c.seconds or 0.0
    print(f"distributed suite, {args.backend}{'/' + args.generation if args.generation else ''} "
          f"({section.c10d_backend}), world sizes {args.world_sizes}, {os.cpu_count()} cores visible")
    print(f"  wall time      {wall:7.1f} s   (goal < {GOAL_SECONDS:.0f} s: {'met' if wall < GOAL_SECONDS else 'MISSED'})")
    print(f"  cases          {len(section.cases):7d}     " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    for kind, seconds in sorted(by_kind.items()):
        print(f"  in {kind:<11} {seconds:7.1f} s")
    print(f"  startup/other  {wall - sum(by_kind.values()):7.1f} s   (rank processes importing torch, rendezvous)")


if __name__ == "__main__":
    main()
