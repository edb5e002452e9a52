"""Time the README's tour, step by step: the durations the README states come from here.

Reads the commands from the README's fenced block under the ``<!-- tour: ... -->`` marker (so the
bench runs exactly what a newcomer types), runs each in a fresh ``out/tour/`` from the repository
root with this virtual environment's ``opmatrix``, checks each exit code (the gate's 0 or 1 are
verdicts; anything else fails the bench) and prints seconds per step::

    .venv/bin/python bench/bench_tour.py            # prints the figures
    .venv/bin/python bench/bench_tour.py --record   # also appends them to docs/benchmarks.md
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdoc import Run  # noqa: E402 - bench/ is this script's folder

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- tour:"


def tour_commands(readme: Path = ROOT / "README.md") -> list[list[str]]:
    """The ``opmatrix`` command lines of the README's tour block, split as a shell would."""
    text = readme.read_text(encoding="utf-8")
    at = text.find(MARKER)
    if at < 0:
        raise SystemExit(f"bench_tour: {readme} has no '{MARKER}' marker before the tour's commands")
    block = re.search(r"```\n(.*?)```", text[at:], re.S)
    if block is None:
        raise SystemExit(f"bench_tour: no fenced block after the '{MARKER}' marker in {readme}")
    return [shlex.split(line) for line in block.group(1).splitlines() if line.startswith("opmatrix ")]


def main(argv: list[str]) -> int:
    """Run and time the tour; 1 when a step fails (its output is shown)."""
    commands = tour_commands()
    run = Run("bench_tour")
    shutil.rmtree(ROOT / "out" / "tour", ignore_errors=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    figures: dict[str, str] = {}
    for argv_ in commands:
        started = time.perf_counter()
        done = subprocess.run(argv_, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        verb = argv_[1]
        allowed = (0, 1) if verb == "gate" else (0,)
        if done.returncode not in allowed:
            print(f"bench_tour: {' '.join(argv_)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}",
                  file=sys.stderr)
            return 1
        figures[verb] = f"{seconds:.1f} s" + (f" (exit {done.returncode})" if verb == "gate" else "")
        print(f"{verb:8} {seconds:7.1f} s  {' '.join(argv_[2:])[:90]}")
    figures["total"] = f"{sum(float(v.split()[0]) for v in figures.values()):.1f} s"
    print(f"{'total':8} {figures['total']}")
    if "--record" in argv:
        print(run.record(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
