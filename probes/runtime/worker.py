"""The in-worker half of the runtime checks: a fresh process that initialises the backend and runs
the ``worker`` checks in order, announcing each before it runs and reporting it when done::

    python -m opmatrix.probes.runtime.worker --backend refaccel --generation g2 --checks import,driver,views
    @@opmatrix {"event": "start", "check": "import"}
    @@opmatrix {"event": "done", "record": {"kind": "runtime", "task": "runtime|import", ...}}

A crash or a hang is blamed on the check last announced (see :mod:`.execute`). Lines without the
marker are the backend's own output and are ignored.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from opmatrix.backend.base import Adapter
from opmatrix.probes.runner.faultscope import observe
from opmatrix.schema import RuntimeRecord

from .catalog import by_name
from .context import Probe
from .discovery import bootstrap
from .spec import CheckSpec, Verdict, failed, unknown

__all__ = ["MARK", "POISONED_EXIT", "emit", "main", "run_check", "task_id"]

MARK = "@@opmatrix "
#: exit status of a worker whose device a check left unusable (its record was already written)
POISONED_EXIT = 75


def task_id(name: str) -> str:
    """The journal task id of check ``name``."""
    return f"runtime|{name}"


def emit(event: dict[str, object]) -> None:
    """One protocol line on stdout, flushed (the parent reads it even if we die next)."""
    sys.stdout.write(MARK + json.dumps(event) + "\n")
    sys.stdout.flush()


def make_record(spec: CheckSpec, verdict: Verdict, evidence_key: str = "") -> RuntimeRecord:
    """The journal record of one verdict."""
    return RuntimeRecord(task=task_id(spec.name), check=spec.record(verdict), evidence_key=evidence_key,
                         runtime=verdict.facts.to_runtime())


def run_check(spec: CheckSpec, probe: Probe) -> Verdict:
    """Run one in-worker check; an exception it did not expect is recorded, classified, as a failure."""
    assert spec.run is not None, f"{spec.name} is not an in-worker check"
    try:
        return spec.run(probe)
    except Exception as exc:  # noqa: BLE001 - the isolation boundary: every exception is a finding
        kind = probe.adapter.classify_exception(exc)
        text = " ".join(str(exc).split())[:400]
        return failed(f"{kind.outcome} ({kind.reason}): {type(exc).__name__}: {text}")


def _evidence_key(adapter: Adapter) -> str:
    try:
        return adapter.evidence_key()
    except (RuntimeError, AttributeError, ValueError) as exc:
        return f"unknown ({type(exc).__name__})"


def run_worker(
    adapter: Adapter, spec_text: str, generation: str | None, names: Sequence[str], spent: float = 0.0
) -> None:
    """Bootstrap (import + driver), then run ``names`` in order, emitting each record."""
    specs = [by_name(n) for n in names]
    wanted = {s.name for s in specs}
    for name in ("import", "driver"):
        if name in wanted:
            emit({"event": "start", "check": name})
    imported, driver, probe = bootstrap(adapter, spec_text, generation, spent)
    key = _evidence_key(adapter) if probe is not None else ""
    for name, verdict in (("import", imported), ("driver", driver)):
        if name in wanted:
            emit({"event": "done", "record": make_record(by_name(name), verdict, key).model_dump(mode="json")})
    for spec in specs:
        if spec.name in ("import", "driver"):
            continue
        emit({"event": "start", "check": spec.name})
        if probe is None:
            why = driver if driver.result.value == "fail" else imported
            verdict = unknown(f"not run: the backend did not initialise ({why.evidence[:300]})",
                              "fix the import / driver check first")
        else:
            verdict = run_check(spec, probe)
        problem = probe.adapter.health_check() if probe is not None and verdict.result.value == "fail" else None
        if problem is not None and probe is not None:
            found = observe(probe.adapter, spec_text)
            verdict.evidence += (f"; the device was unusable afterwards ({problem}); fault scope {found.scope.value} "
                                 f"({'; '.join(found.evidence)})")
        emit({"event": "done", "record": make_record(spec, verdict, key).model_dump(mode="json")})
        if problem is not None:
            sys.exit(POISONED_EXIT)  # every later check would fail for this one's fault: start afresh


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the worker process."""
    from opmatrix.backend.registry import get_adapter

    parser = argparse.ArgumentParser(prog="opmatrix.probes.runtime.worker")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--generation")
    parser.add_argument("--checks", required=True, help="comma-separated check names, in order")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    adapter = get_adapter(args.backend, args.generation)
    spent = time.perf_counter() - start
    run_worker(adapter, args.backend, args.generation, [n for n in args.checks.split(",") if n], spent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
