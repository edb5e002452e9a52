"""Same backend, same verdict: probe refaccel quiet, under CPU load, and through Ray; count what differs.

    python bench/bench_reproducible.py [--ops add,softmax,sort,cumsum] [--burners 16] [--no-ray] [--record]

1. ``opmatrix probe --backend refaccel --generation g2 --devices all`` (runtime checks included)
   on the machine as it is ("quiet": other users' load stays, and is recorded);
2. the same probe while ``--burners`` CPU burners (this script's own ``python -c 'while True:
   pass'`` processes, ended by pid afterwards) load every core;
3. the same probe with ``--executor ray`` (a local Ray instance), where Ray is installed.

Each matrix is compared with the quiet one: cells by ``opmatrix diff --json`` (worse, better, new,
removed), runtime checks by name and result. A loaded run may read a check ``unknown`` (the
machine was too loaded to judge a timeout; docs/runner.md#calibrated-deadlines): that is counted
apart, never as agreement. The last line is ``cells differing N, runtime checks differing M``
(goal: 0 and 0). ``--record`` appends a row to docs/benchmarks.md (bench/benchdoc.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
OPM = [sys.executable, "-m", "opmatrix"]
DIFFERS = ("worse", "better", "new", "removed")


def _probe(out: Path, ops: str, dtypes: str, extra: list[str]) -> float:
    cmd = [*OPM, "probe", "--backend", "refaccel", "--generation", "g2", "--ops", ops, "--dtypes", dtypes,
           "--devices", "all", "--quiet", "--out", str(out), *extra]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if not (out / "matrix.yaml").exists():
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode} without a matrix:\n{done.stderr[-2000:]}")
    return wall


def _cells_differing(a: Path, b: Path) -> dict[str, int]:
    done = subprocess.run([*OPM, "diff", str(a / "matrix.yaml"), str(b / "matrix.yaml"), "--json"],
                          capture_output=True, text=True, check=False)
    counts = json.loads(done.stdout).get("counts") or {}
    return {k: int(counts[k]) for k in DIFFERS if counts.get(k)}


def _checks(out: Path) -> dict[str, str]:
    import yaml

    runtime = (yaml.safe_load((out / "matrix.yaml").read_text()) or {}).get("runtime") or {}
    return {c["name"]: c["result"] for c in runtime.get("checks") or []}


def _checks_differing(a: dict[str, str], b: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """(checks whose result differs other than by ``unknown``, checks ``unknown`` in b only)."""
    differ = {n: (a.get(n), b.get(n)) for n in sorted(set(a) | set(b))
              if a.get(n) != b.get(n) and b.get(n) != "unknown"}
    undecided = [n for n in sorted(b) if b[n] == "unknown" and a.get(n) != "unknown"]
    return differ, undecided


class Burners:
    """``n`` CPU burner processes of this script, ended by pid."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Burners:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="add,softmax,sort,cumsum")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--burners", type=int, default=8 * (os.cpu_count() or 1))
    parser.add_argument("--no-ray", action="store_true", help="skip the --executor ray run")
    parser.add_argument("--record", action="store_true", help="append a row to docs/benchmarks.md")
    args = parser.parse_args()
    from benchdoc import Run

    run = Run("bench_reproducible")
    tmp = Path(tempfile.mkdtemp(prefix="bench-reproducible-"))
    walls = {"quiet": _probe(tmp / "quiet", args.ops, args.dtypes, [])}
    with Burners(args.burners):
        walls["loaded"] = _probe(tmp / "loaded", args.ops, args.dtypes, [])
    if not args.no_ray and importlib.util.find_spec("ray") is not None:
        walls["ray"] = _probe(tmp / "ray", args.ops, args.dtypes, ["--executor", "ray"])
    quiet = _checks(tmp / "quiet")
    cells = checks = 0
    figures = {"ops": args.ops, "burners": str(args.burners), "quiet": f"{walls['quiet']:.0f} s"}
    for name in [n for n in walls if n != "quiet"]:
        cell_diff = _cells_differing(tmp / "quiet", tmp / name)
        check_diff, undecided = _checks_differing(quiet, _checks(tmp / name))
        cells += sum(cell_diff.values())
        checks += len(check_diff)
        print(f"{name}: {walls[name]:.0f} s; cells differing {cell_diff or 0}; runtime checks differing "
              f"{check_diff or 0}; unknown (too loaded to judge) {undecided or 0}")
        figures[name] = (f"{walls[name]:.0f} s, {sum(cell_diff.values())} cells / {len(check_diff)} checks differ, "
                         f"{len(undecided)} unknown")
    print(f"quiet: {walls['quiet']:.0f} s, {len(quiet)} runtime checks; matrices in {tmp}")
    if args.record:
        run.record(figures)
    print(f"cells differing {cells}, runtime checks differing {checks}")
    return 0 if cells == 0 and checks == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
