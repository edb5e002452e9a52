"""The distributed suite end to end: plan, run every batch, merge rank results into cases.

    section = run_suite("cpu", None, Path("out/cpu"))     # a schema Distributed, also journaled
    [c.id for c in section.cases if c.outcome != "ok"]

Each case's records from its ranks merge into one :class:`~opmatrix.schema.distributed.DistCase`:
the worst rank outcome wins, the first error text is kept, timing is the slowest rank. Results
are appended to ``OUT/distributed.jsonl`` as each case finishes (flushed), so nothing is lost
when the run is interrupted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from opmatrix.schema import ExecPath
from opmatrix.schema.distributed import CaseKind, DistCase, DistOutcome, Distributed, PoisonScope

from .cases import plan_batches

__all__ = ["merge_case", "run_suite"]

_ORDER = list(DistOutcome)


def _scalar(value: object) -> str | int | float | bool | None:
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def merge_case(case: dict[str, Any], records: list[dict[str, Any]], c10d: str) -> DistCase:
    """One case from the result records of its ranks (plus the launcher's fault record, if any)."""
    judged = [r for r in records if r.get("rank", -1) not in case.get("dies", [])]
    if not judged:
        judged = [{"outcome": "crashed", "error": "no rank reported a result"}]
    outcome = max((DistOutcome(r["outcome"]) for r in judged), key=_ORDER.index)
    first_error = next((r["error"] for r in judged if r.get("error") and r["outcome"] != "ok"),
                       next((r["error"] for r in judged if r.get("error")), None))
    evidence: dict[str, Any] = {}
    for r in sorted(judged, key=lambda r: r.get("rank", -1)):
        for k, v in (r.get("evidence") or {}).items():
            evidence.setdefault(k, _scalar(v))
    if "async_progress" in evidence:  # every rank must have seen progress
        evidence["async_progress"] = all((r.get("evidence") or {}).get("async_progress", False) for r in judged)
    survivor = next((r for r in judged if r.get("poison_scope")), {})
    staged = any(r.get("staged") for r in judged)
    return DistCase(
        id=case["id"], kind=CaseKind(case["kind"]), c10d_backend=next((r["c10d"] for r in judged if "c10d" in r), c10d),
        world_size=case["world_size"], collective=case.get("collective") or case.get("failure"),
        op=case.get("op"), dtype=case.get("dtype"), async_op=bool(case.get("async_op")), outcome=outcome,
        path=ExecPath.rejected if outcome is DistOutcome.unsupported else (ExecPath.fallback if staged else ExecPath.native),
        seconds=max((r["seconds"] for r in judged if "seconds" in r), default=None),
        detect_seconds=survivor.get("detect_seconds"), timeout_seconds=survivor.get("timeout_seconds"),
        poison_scope=PoisonScope(survivor.get("poison_scope", "none")), error=first_error, evidence=evidence,
    )


def run_suite(backend: str, generation: str | None, out: Path, *, world_sizes: tuple[int, ...] = (2, 4),
              failure_timeout: float = 3.0, pg_timeout: float = 15.0, progress: bool = True) -> Distributed:
    """Run every case for ``backend``; returns the matrix section (and writes OUT/distributed.jsonl)."""
    from opmatrix.backend import get_adapter

    from .c10d import prepare_c10d
    from .launch import run_cases

    out.mkdir(parents=True, exist_ok=True)
    adapter = get_adapter(backend, generation=generation)
    if not callable(getattr(adapter, "prepare_c10d", None)):  # the ranks set the backend up themselves
        adapter.register()  # a PrivateUse1 package registers its device (and its c10d backend) on import
    c10d = prepare_c10d(adapter)
    base = {"backend": backend, "generation": generation, "pg_timeout": pg_timeout}
    journal = out / "distributed.jsonl"
    journal.write_text("")
    cases: list[DistCase] = []
    started = time.monotonic()

    def record(case: dict[str, Any], records: list[dict[str, Any]]) -> None:
        merged = merge_case(case, records, c10d)
        cases.append(merged)
        with journal.open("a") as f:
            f.write(json.dumps(merged.model_dump(mode="json")) + "\n")
        if progress:
            own = f"{merged.seconds:.2f} s" if merged.seconds is not None else "no time recorded"
            print(f"  distributed {merged.id}: {merged.outcome.value} ({own}; {time.monotonic() - started:.0f} s "
                  "into the suite)", flush=True)

    for i, (world_size, batch) in enumerate(plan_batches(world_sizes=world_sizes, failure_timeout=failure_timeout)):
        run_cases(base, world_size, batch, out / "distributed" / f"batch{i}", record)
    return Distributed(c10d_backend=c10d, cases=sorted(cases, key=lambda c: c.id))
