"""``opmatrix probe``: plan the tasks, run them in isolated workers, write journal and matrix.

    opmatrix probe --backend refaccel --generation g2 --ops softmax,add --out out/refaccel-g2

Exit codes: 0 when every planned task was recorded (cells that are wrong or raised are results,
counted in the summary); 1 when the run aborted (restart cap) or a cell crashed, hung or
poisoned its worker; 2 invalid input; 130 interrupted (``--resume`` continues).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from opmatrix.schema import DEFAULT_DTYPES, BackendId, Evidence, Layout, OpSource, dump_model
from opmatrix.schema.enums import DTYPES

__all__ = ["plan_op_tasks", "probe"]

_PROCESS_FAULTS = ("crashed", "hung", "poisoned")


def _usage(message: str) -> Exception:
    from opmatrix.schema import UsageError

    return UsageError(message)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _validate_names(values: list[str] | None, allowed: list[str], flag: str) -> list[str] | None:
    if values is None:
        return None
    import difflib

    for v in values:
        if v not in allowed:
            close = difflib.get_close_matches(v, allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise _usage(f"{flag}: unknown value {v!r}{hint} (choose from {', '.join(allowed)})")
    return values


def plan_op_tasks(sources: list[str], dtypes: list[str], options: dict[str, Any]) -> list[Any]:
    """One ``op`` task per (OpInfo, dtype), in a stable order."""
    from opmatrix.probes.ops import task_id
    from opmatrix.probes.runner import Task

    tasks = []
    for i, source in enumerate(sources):
        for j, dtype in enumerate(dtypes):
            tasks.append(
                Task(id=task_id(source, dtype), kind="op", payload={"source": source, "dtype": dtype, "options": options},
                     order=i * len(dtypes) + j)
            )
    return tasks


def _runtime_tasks(backend: str, generation: str | None) -> list[Any]:
    try:
        from opmatrix.probes.runtime import plan_runtime_tasks
    except ImportError:
        return []
    return list(plan_runtime_tasks(backend, generation))


def _identity(adapter: Any) -> BackendId:
    if adapter.dispatch_key == "PrivateUse1" and adapter.name.startswith("privateuse1:"):
        import importlib

        import torch

        importlib.import_module(adapter.module)  # registers the device name; no device call
        adapter.device_type = torch._C._get_privateuse1_backend_name()
    return adapter.identity()  # type: ignore[no-any-return]


def _worker_evidence(records: list[Any]) -> Evidence | None:
    """The evidence a worker recorded in the journal header (versions seen on the device side)."""
    from opmatrix.schema import JournalHeader

    return next((r.evidence for r in records if isinstance(r, JournalHeader) and r.evidence is not None), None)


def _shard_of(tasks: list[Any], shard: tuple[int, int]) -> list[Any]:
    from opmatrix.probes.runner import select_shard

    return list(select_shard(tasks, *shard))


def _evidence(adapter: Any, command: str, started: str, source: OpSource | None,
              worker: Evidence | None = None) -> Evidence:
    import torch

    if worker is not None:  # versions as the workers saw them: the parent never initialises the device
        versions = {k: getattr(worker, k) for k in ("driver", "firmware", "isa", "stepping", "backend_version")}
    else:
        try:
            versions = adapter.versions()
        except Exception as exc:  # noqa: BLE001 - versions are evidence, not a reason to fail the run
            versions = {"backend_version": f"unknown ({type(exc).__name__})"}
    return Evidence(
        opmatrix_version=metadata.version("opmatrix"),
        torch_version=torch.__version__,
        torch_git=getattr(torch.version, "git_version", None),
        python=platform.python_version(),
        platform=platform.platform(terse=True),
        driver=versions.get("driver"),
        firmware=versions.get("firmware"),
        isa=versions.get("isa"),
        stepping=versions.get("stepping"),
        backend_version=versions.get("backend_version"),
        op_source=source,
        command=command,
        started=started,
        finished=_now(),
    )


def probe(args: argparse.Namespace) -> int:
    """Run ``opmatrix probe``."""
    from opmatrix.backend import UnknownBackend, get_adapter

    try:
        adapter = get_adapter(args.backend, generation=args.generation)
    except UnknownBackend as exc:
        raise _usage(str(exc)) from None
    dtypes = _validate_names(args.dtypes, list(DTYPES), "--dtypes") or list(DEFAULT_DTYPES)
    layouts = _validate_names(args.layouts, [lay.value for lay in Layout], "--layouts")
    if args.shard:
        from opmatrix.probes.runner import parse_shard

        try:
            shard = parse_shard(args.shard)
        except ValueError as exc:
            raise _usage(f"--shard: {exc}") from None
    else:
        shard = None
    if args.workers is not None and args.workers < 1:
        raise _usage("--workers: must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise _usage("--threads: must be at least 1")
    if args.timeout is not None and args.timeout <= 0:
        raise _usage("--timeout: must be positive")
    if args.devices and not all(d.isdigit() for d in args.devices):
        raise _usage(f"--devices: expected device indices like 0,1, got {','.join(args.devices)!r}")
    if args.max_restarts is not None and args.max_restarts < 0:
        raise _usage("--max-restarts: must be 0 or more")
    devices = [int(d) for d in args.devices] if args.devices else None
    from opmatrix.probes.suites import resolve_suites

    try:
        suites = resolve_suites(args)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    out = Path(args.out or f"out/{args.backend.replace(':', '_')}{'-' + args.generation if args.generation else ''}")
    command = "opmatrix " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "opmatrix probe"
    started = _now()

    from opmatrix.probes.ops.source import UnknownOp, select_ops, source_hash

    tasks: list[Any] = []
    source = None
    if "ops" in suites:
        try:
            entries = select_ops(args.ops)
        except UnknownOp as exc:
            raise _usage(str(exc)) from None
        options: dict[str, Any] = {"compile": "off" if args.no_compile else args.compile}
        if layouts:
            options["layouts"] = layouts
        tasks = plan_op_tasks([e.full_name for e in entries], dtypes, options)
        source = OpSource(name="opinfo", entries=len(entries), hash=source_hash(entries))
    if "runtime" in suites:
        tasks = _runtime_tasks(args.backend, args.generation) + tasks

    from opmatrix.probes.runner import run

    identity = _identity(adapter)
    summary = run(
        tasks, backend=args.backend, generation=args.generation, out_dir=out, workers=args.workers,
        threads=args.threads, timeout=args.timeout, resume=args.resume, devices=devices, shard=shard,
        max_restarts=args.max_restarts,
        options={"op_source_hash": source.hash if source else ""}, progress=not args.quiet, command=command,
    )
    if summary.interrupted:  # the runner has said how many are recorded and how to resume
        return 130

    from opmatrix.matrix.build import build_matrix
    from opmatrix.matrix.journal import read_journal

    records = read_journal(out / "journal.jsonl")
    evidence = _evidence(adapter, command, started, source, _worker_evidence(records))
    matrix = build_matrix(records, backend=identity, evidence=evidence)
    recorded = {getattr(r, "task", None) for r in records}
    planned = {t.id for t in tasks} if shard is None else {t.id for t in _shard_of(tasks, shard)}
    missing = sorted(planned - recorded)
    if missing:  # an aborted run: what was planned but never ran is said, not silently absent
        why = f"not run: the run aborted ({summary.message})" if summary.aborted else "not run"
        matrix = matrix.model_copy(update={"skipped": {**matrix.skipped, **{m: why for m in missing}}})
    if "distributed" in suites:
        from opmatrix.probes.distributed.command import attach_distributed

        matrix = attach_distributed(matrix, args, out)
    dump_model(matrix, out / "matrix.yaml", command=command)
    faults = {k: v for k, v in sorted(summary.faults.items()) if v}
    paths = ", ".join(f"{k} {v}" for k, v in sorted(summary.paths.items()))
    print(f"{identity.name}{'/' + identity.generation if identity.generation else ''}: "
          f"{summary.recorded}/{summary.planned} tasks ({summary.reused} reused), {matrix.cell_count()} cells "
          f"in {len(matrix.operators)} operators, {len(matrix.skipped)} skipped task(s), {summary.seconds:.1f} s")
    if paths:
        print(f"cells by path: {paths}")
    if faults:
        print("faulted cells: " + ", ".join(f"{k} {v}" for k, v in faults.items()))
    print(f"journal: {out / 'journal.jsonl'}")
    print(f"matrix:  {out / 'matrix.yaml'}")
    if summary.aborted:
        print(f"aborted: {summary.message}", file=sys.stderr)
        return 1
    if any(faults.get(k) for k in _PROCESS_FAULTS):
        return 1
    if matrix.distributed and any(c.outcome.value in _PROCESS_FAULTS for c in matrix.distributed.cases):
        return 1
    return 0


