"""Deadlines that measure the machine: calibrated at run start against the same work without the
backend, so that machine load never decides a verdict (docs/runner.md#calibrated-deadlines).

One fresh interpreter is timed twice over: how long it takes to start and import torch (a plain
child: the machine's speed right now), then how long importing the backend, initialising it and
one device round trip take (the backend's own start). Every deadline that can decide a verdict is
a base (right for a quiet machine and a fast driver) plus a margin times what was measured::

    cal = calibrate("refaccel", "g2")
    cal.plain_start, cal.backend_start      # 2.1, 0.6 (seconds)
    cal.child_deadline()                    # 30 + 4 * (2.1 + 0.6) = 40.8
    cal.describe()                          # 'plain child 2.10 s, backend start 0.60 s, load 1.3/CPU'

The calibration travels to child processes in ``OPMATRIX_CALIBRATION`` (:meth:`Calibration.to_env`,
:func:`current`), so a case host or a runner worker judges by the run's measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

__all__ = ["CALIBRATION_ENV", "Calibration", "applied", "calibrate", "current", "machine_now"]

CALIBRATION_ENV = "OPMATRIX_CALIBRATION"
#: how many times the measured work a deadline allows on top of its base (load varies in a run)
MARGIN = 4.0
#: the bases: right on a quiet machine with a backend that starts in no time
CHILD_BASE = 30.0
FORK_CHILD_BASE = 10.0
CASE_BASE = 90.0
CHECK_BASE = 60.0
#: the most backend initialisations one process case runs one after another (forkserver: the
#: parent and three children; repeated_children: three children and the parent)
CASE_INITS = 5
#: a plain child this slow on a quiet machine: ``slowdown`` is measured against it
QUIET_PLAIN_START = 2.0
#: a timeout is judged only where a plain child starts at most this many times slower than at
#: calibration and the load per CPU is below ``TOO_LOADED``; otherwise the machine is too loaded
LOADED_RATIO = 2.0
TOO_LOADED = 6.0
#: how long the calibration child itself may take before it is given up (then measured as that)
CALIBRATION_LIMIT = 600.0

_PROBE = """
import json, sys, time
t0 = time.time()
import torch
t1 = time.time()
out = {"torch": t1, "problem": None}
try:
    from opmatrix.backend.registry import get_adapter
    from opmatrix.probes.runtime.children import work
    adapter = get_adapter(sys.argv[1], sys.argv[2] or None)
    adapter.setup()
    if adapter.device_type not in ("cpu", "meta"):
        work(adapter)
except Exception as exc:
    out["problem"] = f"{type(exc).__name__}: {exc}"[:300]
out["backend"] = time.time()
print("@@calibration " + json.dumps(out), flush=True)
"""


@dataclass(frozen=True)
class Calibration:
    """What the machine measured at run start; the deadlines derived from it."""

    plain_start: float
    backend_start: float
    load: float
    backend: str = ""
    problem: str | None = None

    @property
    def start(self) -> float:
        """Seconds a fresh process takes to start, import torch and initialise the backend."""
        return self.plain_start + self.backend_start

    @property
    def slowdown(self) -> float:
        """How many times slower than a quiet machine a plain child started (at least 1)."""
        return max(1.0, self.plain_start / QUIET_PLAIN_START)

    def child_deadline(self) -> float:
        """One child that starts and initialises the backend (spawn, forkserver, a forked child)."""
        return CHILD_BASE + MARGIN * self.start

    def fork_child_deadline(self) -> float:
        """A child forked after initialisation: it starts no interpreter and should not initialise."""
        return FORK_CHILD_BASE * self.slowdown + MARGIN * self.backend_start

    def case_deadline(self) -> float:
        """One process case as a whole (up to :data:`CASE_INITS` initialisations in a row)."""
        return CASE_BASE + MARGIN * CASE_INITS * self.start

    def check_deadline(self) -> float:
        """One in-worker check, the worker's own start (import + driver) included."""
        return CHECK_BASE * self.slowdown + MARGIN * self.start

    def unit_timeout(self, timeout: float) -> float:
        """A runner unit's ``--timeout``, scaled by how slow the machine was at run start."""
        return timeout * self.slowdown

    def worker_grace(self, timeout: float) -> float:
        """How long a fresh runner worker may take to start and set the backend up."""
        return max(120.0, 4 * self.unit_timeout(timeout), CHILD_BASE + MARGIN * self.start)

    def describe(self) -> str:
        """What was measured, for evidence text."""
        who = f"{self.backend} " if self.backend else "backend "
        text = f"plain child {self.plain_start:.2f} s, {who}start {self.backend_start:.2f} s, load {self.load:.1f}/CPU"
        return text + (f" (the backend did not start: {self.problem})" if self.problem else "")

    def deadline_note(self, deadline: float) -> str:
        """``deadline 41 s (calibrated: plain child ...)``: which deadline applied, and why."""
        return f"deadline {deadline:.0f} s (calibrated: {self.describe()})"

    def to_env(self) -> dict[str, str]:
        """The environment entry that hands this calibration to child processes."""
        return {CALIBRATION_ENV: json.dumps(asdict(self), sort_keys=True)}

    def too_loaded(self) -> str | None:
        """Why the machine is now too loaded to judge a timeout (None: a timeout is a finding).

        Measures a plain child again: slower by :data:`LOADED_RATIO` than at calibration, or a
        load per CPU of :data:`TOO_LOADED` or more, means the deadline measured the machine."""
        now_plain, load = machine_now()
        if now_plain > LOADED_RATIO * self.plain_start or load >= TOO_LOADED:
            return (f"the machine is too loaded to judge a timeout: a plain child now starts in {now_plain:.2f} s "
                    f"(at calibration {self.plain_start:.2f} s), load {load:.1f}/CPU")
        return None


def _load_per_cpu() -> float:
    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except OSError:
        return 0.0


def machine_now() -> tuple[float, float]:
    """(seconds a plain child takes to start and import torch now, load per CPU)."""
    start = time.time()
    try:
        subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, timeout=CALIBRATION_LIMIT,
                       check=False)
    except subprocess.TimeoutExpired:
        pass
    return time.time() - start, _load_per_cpu()


def calibrate(spec: str, generation: str | None = None) -> Calibration:
    """Measure a plain child's start and the backend's own start in one fresh interpreter."""
    from opmatrix.schema.userref import child_env

    load = _load_per_cpu()
    start = time.time()
    cmd = [sys.executable, "-c", _PROBE, spec, generation or ""]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CALIBRATION_LIMIT, check=False,
                              env=child_env())
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("@@calibration ")]
    except subprocess.TimeoutExpired:
        lines = []
    end = time.time()
    if not lines:
        return Calibration(end - start, end - start, load, spec, f"the calibration child gave no answer within "
                           f"{end - start:.0f} s")
    out = json.loads(lines[-1].split(" ", 1)[1])
    return Calibration(round(out["torch"] - start, 3), round(out["backend"] - out["torch"], 3), round(load, 2), spec,
                       out.get("problem"))


def current(spec: str = "", generation: str | None = None, keep: bool = True) -> Calibration:
    """The run's calibration (from ``OPMATRIX_CALIBRATION``; for backend ``spec`` when given), else
    one measured now and (``keep``) kept in this process's environment for its children."""
    text = os.environ.get(CALIBRATION_ENV)
    if text:
        try:
            found = Calibration(**json.loads(text))
        except (TypeError, ValueError):
            found = None
        if found is not None and (not spec or found.backend == spec):
            return found
    if spec:
        cal = calibrate(spec, generation)
    else:
        plain, load = machine_now()
        cal = Calibration(plain, 0.0, load)
    if keep:
        os.environ.update(cal.to_env())
    return cal


@contextmanager
def applied(cal: Calibration) -> Iterator[Calibration]:
    """Within the block, processes started from here (and :func:`current`) judge by ``cal``."""
    before = os.environ.get(CALIBRATION_ENV)
    os.environ.update(cal.to_env())
    try:
        yield cal
    finally:
        if before is None:
            os.environ.pop(CALIBRATION_ENV, None)
        else:
            os.environ[CALIBRATION_ENV] = before
