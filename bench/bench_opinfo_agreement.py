"""How far a full CPU matrix agrees with OpInfo's own dtype claims, under ``test_dtypes``' rule.

PyTorch's ``TestCommon.test_dtypes`` checks an OpInfo's declared dtypes both ways: a claimed dtype
must run at least one sample, an unclaimed one must raise on at least one (partial support is
allowed either way); forward and backward alike. On the CPU, opmatrix's verdicts should agree
with those claims: every disagreement is either a wrong verdict of opmatrix or a wrong claim of
OpInfo, and each is printed with its cause so a reader can tell which.

This script *measures*: it reads a finished run's journal (one record per OpInfo entry x dtype,
with its cells) and OpInfo's claims, and compares them. It never feeds OpInfo's claims into a
matrix (the probe does not read them; its verdicts come from what ran)::

    opmatrix probe --backend cpu --no-runtime --workers 2 --out /tmp/fullcpu    # the full run
    python bench/bench_opinfo_agreement.py /tmp/fullcpu [--record]

Per (entry, dtype, direction) the check is:

- forward, claimed (``supported_dtypes("cpu")``): some eager cell of the task ran a sample
  (a path other than ``rejected``, an outcome that is not a fault);
- forward, unclaimed: some sample was refused (``rejected``) or raised (a fault), or OpInfo's
  generator itself raised at that dtype part way;
- backward, claimed (``supported_backward_dtypes("cpu")``): some eager cell has a backward result
  that ran; unclaimed: none ran, or one raised.

Not compared, and counted on their own lines: tasks whose samples never hold the dtype (OpInfo
claims a dtype it never generates: ``_safe_softmax`` int16 from float32 tensors), and entries
OpInfo marks device-only (no CPU dtypes, ``onlyCUDA``, or its CPU ``test_dtypes`` skipped). Also printed: ``wrong`` cells (on the CPU a plain
call is compared with a plain call: any is a finding) and tasks skipped as yielding no samples
while OpInfo yields some. The last line is ``agreement A/B``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True)
class Check:
    """One comparison: an entry at a dtype in one direction, and whether it agrees."""

    entry: str
    dtype: str
    direction: str  # forward | backward
    claimed: bool
    agrees: bool
    cause: str = ""


def _tasks(run: Path) -> list[Any]:
    from opmatrix.schema import TaskRecord
    from opmatrix.schema.journalfile import scan_journal

    scan = scan_journal(run / "journal.jsonl" if run.is_dir() else run)
    return [r for r in scan.records if isinstance(r, TaskRecord)]


def _ran(result: Any) -> bool:
    from opmatrix.schema import ExecPath

    if result.path not in (ExecPath.rejected, ExecPath.unknown) and not result.outcome.is_fault:
        return True
    return any(p not in (ExecPath.rejected, ExecPath.unknown) for p in result.samples.by_path)


def _raised(result: Any) -> bool:
    from opmatrix.schema import ExecPath

    return result.path is ExecPath.rejected or result.outcome.is_fault or ExecPath.rejected in result.samples.by_path


def _grad_ran(result: Any) -> bool:
    from opmatrix.schema import ExecPath

    g = result.autograd
    return g is not None and g.path is not ExecPath.rejected and not g.outcome.is_fault


def _grad_raised(result: Any) -> bool:
    from opmatrix.schema import ExecPath

    g = result.autograd
    return g is not None and (g.path is ExecPath.rejected or g.outcome.is_fault)


def _what(results: list[Any]) -> str:
    """The cells' verdicts in a few words, with the first error message."""
    kinds = Counter(f"{r.path.value}/{r.outcome.value}" for r in results)
    text = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "no eager cell"
    err = next((r.error for r in results if r.error is not None), None)
    if err is not None:
        text += f"; first error {err.type}: {err.message[:140]}"
    return text


def _why_no_backward(results: list[Any]) -> str:
    notes = sorted({part for r in results if r.note for part in r.note.split("; ") if "backward" in part})
    grads = Counter(f"{r.autograd.path.value}/{r.autograd.outcome.value}" for r in results if r.autograd is not None)
    said = ", ".join(f"{k} x{n}" for k, n in sorted(grads.items()))
    return "; ".join(filter(None, [f"backward results {said}" if said else "no backward result", *notes[:2]]))


def _device_only(info: Any) -> bool:
    """Whether OpInfo marks the entry device-only: no CPU dtypes at all (``dtypesIfCUDA`` only,
    ``batch_norm.without_cudnn``), or its own CPU ``test_dtypes`` skipped."""
    if not info.supported_dtypes("cpu"):
        return True
    for d in getattr(info, "decorators", None) or ():  # a device-type decorator (``onlyCUDA``)
        name = getattr(d, "__name__", "")
        if name.startswith("only") and "CPU" not in name and name != "onlyNativeDeviceTypes":
            return True
    for d in getattr(info, "decorators", None) or ():
        if getattr(d, "cls_name", None) == "TestCommon" and getattr(d, "test_name", None) == "test_dtypes" \
                and getattr(d, "device_type", None) in (None, "cpu") and getattr(d, "active_if", True) \
                and getattr(d, "dtypes", None) is None:
            return True
    return False


def compare(tasks: Iterable[Any], infos: dict[str, Any]) -> tuple[list[Check], dict[str, list[str]]]:
    """Every check, and the tasks not compared (by reason)."""
    import torch

    checks: list[Check] = []
    excluded: dict[str, list[str]] = {"no sample holds the dtype": [], "OpInfo marks it device-only": [],
                                      "no OpInfo of that name": []}
    for task in sorted(tasks, key=lambda t: t.task):
        info = infos.get(task.source)
        dname = task.dtype.value
        if info is None:
            excluded["no OpInfo of that name"].append(task.task)
            continue
        if _device_only(info):
            excluded["OpInfo marks it device-only"].append(task.task)
            continue
        if task.skipped and task.skipped.startswith("no sample holds"):
            excluded["no sample holds the dtype"].append(task.task)
            continue
        dtype = getattr(torch, dname)
        eager = [c.result for c in task.cells if c.mode.value == "eager"]
        # OpInfo's own generator raised at this dtype part way (an op it uses lacks the dtype):
        # that is a sample raising, as test_dtypes would meet it
        stopped = any(k.startswith("samples after") for k in task.not_run)
        claimed = dtype in info.supported_dtypes("cpu")
        if claimed:
            ok = any(_ran(r) for r in eager)
            cause = "" if ok else (f"skipped: {task.skipped}" if task.skipped else _what(eager))
        else:
            ok = any(_raised(r) for r in eager) or not eager or stopped
            cause = "" if ok else f"runs although not claimed: {_what(eager)}"
        checks.append(Check(task.source, dname, "forward", claimed, ok, cause))
        if not (info.supports_autograd and (dtype.is_floating_point or dtype.is_complex)):
            continue
        try:
            bclaimed = dtype in info.supported_backward_dtypes("cpu")
        except Exception:  # noqa: BLE001 - an entry without backward dtypes claims none
            bclaimed = False
        if bclaimed:
            ok = any(_grad_ran(r) for r in eager)
            cause = "" if ok else (f"skipped: {task.skipped}" if task.skipped else _why_no_backward(eager))
        else:
            ok = not any(_grad_ran(r) for r in eager) or any(_grad_raised(r) for r in eager) or stopped
            cause = "" if ok else f"backward runs although not claimed: {_why_no_backward(eager)}"
        checks.append(Check(task.source, dname, "backward", bclaimed, ok, cause))
    return checks, excluded


def wrong_cells(tasks: Iterable[Any]) -> Iterator[str]:
    """Every eager ``wrong`` cell: on the CPU a plain call judged against a plain call."""
    for task in tasks:
        for c in task.cells:
            if c.result.outcome.value == "wrong":
                yield (f"{task.source} {c.dtype.value} {c.op} rank {c.rank} {c.layout.value} {c.mode.value}: "
                       f"{(c.result.note or '')[:160]}")


def no_samples_yet_samples(tasks: Iterable[Any], infos: dict[str, Any]) -> Iterator[str]:
    """Tasks skipped as yielding no samples while OpInfo's generation yields some."""
    import torch

    from opmatrix.probes.ops.source import OpEntry, generate_samples

    for task in tasks:
        if not (task.skipped or "").startswith("OpInfo yields no samples") or task.source not in infos:
            continue
        try:
            n = len(generate_samples(OpEntry(task.source, infos[task.source]), getattr(torch, task.dtype.value), limit=1))
        except Exception:  # noqa: BLE001 - OpInfo raises: truly no samples
            n = 0
        if n:
            yield f"{task.task}: skipped as {task.skipped!r}, yet OpInfo yields samples"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("run", type=Path, help="a finished CPU run: its output folder or journal.jsonl")
    ap.add_argument("--record", action="store_true", help="append a row to docs/benchmarks.md")
    args = ap.parse_args(argv)
    from benchdoc import Run

    bench = Run("bench_opinfo_agreement")
    from opmatrix.probes.ops.source import all_ops

    infos = {e.full_name: e.info for e in all_ops()}
    tasks = _tasks(args.run)
    checks, excluded = compare(tasks, infos)
    for c in checks:
        if not c.agrees:
            claim = "claimed" if c.claimed else "not claimed"
            print(f"DISAGREE {c.entry} {c.dtype} {c.direction} ({claim}): {c.cause}")
    wrong = list(wrong_cells(tasks))
    for line in wrong:
        print(f"WRONG {line}")
    empty = list(no_samples_yet_samples(tasks, infos))
    for line in empty:
        print(f"NO-SAMPLES {line}")
    bad_claimed = sum(1 for c in checks if c.claimed and not c.agrees)
    bad_unclaimed = sum(1 for c in checks if not c.claimed and not c.agrees)
    for reason, items in excluded.items():
        print(f"not compared ({reason}): {len(items)} tasks" + (f", e.g. {', '.join(items[:4])}" if items else ""))
    print(f"tasks {len(tasks)}; checks {len(checks)} (forward {sum(c.direction == 'forward' for c in checks)}, "
          f"backward {sum(c.direction == 'backward' for c in checks)})")
    print(f"claimed but not run: {bad_claimed}; run but not claimed: {bad_unclaimed}; wrong cells: {len(wrong)}; "
          f"skipped as no samples while OpInfo yields some: {len(empty)}")
    agree = sum(c.agrees for c in checks)
    if args.record:
        bench.record({"run": str(args.run), "tasks": str(len(tasks)), "claimed not run": str(bad_claimed),
                      "run not claimed": str(bad_unclaimed), "wrong cells": str(len(wrong)),
                      "agreement": f"{agree}/{len(checks)} ({100 * agree / max(len(checks), 1):.2f}%)"})
    print(f"agreement {agree}/{len(checks)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
