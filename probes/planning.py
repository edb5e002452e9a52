"""Planning ``opmatrix probe``: check every argument, then plan the tasks and the run's identity.

    plan = plan_probe(args)     # UsageError (exit 2) before any worker starts or anything is written
    plan.tasks, plan.identity, plan.out

The run itself (lock the directory, run the workers, build the matrix) is orchestrated by
``opmatrix.pipeline``, above both this package and ``opmatrix.matrix``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import shlex
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmatrix.schema import DEFAULT_DTYPES, BackendId, Evidence, Layout, OpSource
from opmatrix.schema.enums import DTYPES
from opmatrix.schema.journal import RunIdentity

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter

__all__ = ["ProbePlan", "plan_op_tasks", "plan_probe", "probe_evidence", "worker_evidence"]

def _usage(message: str) -> Exception:
    from opmatrix.schema import UsageError

    return UsageError(message)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _validate_names(values: list[str] | None, allowed: list[str], flag: str) -> list[str] | None:
    if values is None:
        return None
    import difflib

    if not values:
        raise _usage(f"{flag}: empty; name at least one (choose from {', '.join(allowed)}) or leave {flag} out")

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


def _identity(adapter: Adapter) -> BackendId:
    if adapter.dispatch_key == "PrivateUse1" and adapter.name.startswith("privateuse1:"):
        import importlib

        import torch

        importlib.import_module(adapter.module)  # registers the device name; no device call
        adapter.device_type = torch._C._get_privateuse1_backend_name()
    from pydantic import ValidationError

    try:
        return adapter.identity()  # type: ignore[no-any-return]
    except ValidationError as exc:  # an adapter's name with a control character, an empty key ...
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise _usage(f"backend adapter {type(adapter).__module__}.{type(adapter).__qualname__} "
                     f"cannot be recorded: {problems}") from None


def worker_evidence(records: list[Any]) -> Evidence | None:
    """The evidence a worker recorded in the journal header (versions seen on the device side)."""
    from opmatrix.schema import JournalHeader

    return next((r.evidence for r in records if isinstance(r, JournalHeader) and r.evidence is not None), None)


def _shard_of(tasks: list[Any], shard: tuple[int, int]) -> list[Any]:
    from opmatrix.probes.runner import select_shard

    return list(select_shard(tasks, *shard))


def probe_evidence(adapter: Adapter, command: str, started: str, source: OpSource | None,
                   worker: Evidence | None = None) -> Evidence:
    """The matrix's evidence block: versions as the workers saw them, else as the adapter says.

    With a worker's evidence the parent never imports torch (a second and more, after the run)."""
    if worker is not None:  # versions as the workers saw them: the parent never initialises the device
        versions = {k: getattr(worker, k) for k in ("driver", "firmware", "isa", "stepping", "backend_version")}
        torch_version, torch_git = worker.torch_version, worker.torch_git
    else:
        import torch

        torch_version, torch_git = torch.__version__, getattr(torch.version, "git_version", None)
        try:
            versions = adapter.versions()
        except Exception as exc:  # noqa: BLE001 - versions are evidence, not a reason to fail the run
            versions = {"backend_version": f"unknown ({type(exc).__name__})"}
    return Evidence(
        opmatrix_version=metadata.version("opmatrix"),
        torch_version=torch_version,
        torch_git=torch_git,
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


@dataclass
class ProbePlan:
    """Everything ``opmatrix probe`` decided before starting a worker."""

    adapter: Adapter
    backend_id: BackendId
    out: Path
    command: str
    started: str
    tasks: list[Any]
    planned: list[Any]
    identity: RunIdentity
    source: OpSource | None = None
    shard: tuple[int, int] | None = None
    devices: list[int] | None = None
    run_options: dict[str, Any] = field(default_factory=dict)
    suites: frozenset[str] = frozenset({"runtime", "ops"})


def _check_numbers(args: argparse.Namespace) -> None:
    for flag, value in (("--workers", args.workers), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise _usage(f"{flag}: must be at least 1, got {value}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise _usage(f"--timeout: must be a finite number of seconds above 0, got {args.timeout!r}")
    if args.devices is not None and (not args.devices or not all(d.isdigit() for d in args.devices)):
        raise _usage(f"--devices: expected device indices like 0,1, got {','.join(args.devices)!r}")
    if args.max_restarts is not None and args.max_restarts < 0:
        raise _usage("--max-restarts: must be 0 or more")
    if args.ops is not None and not args.ops:
        raise _usage("--ops: empty; name OpInfo names or patterns (e.g. --ops softmax,add or --ops 'linalg.*'), "
                     "or leave --ops out to probe every op")


def _adapter(args: argparse.Namespace) -> Any:
    from opmatrix.backend import UnknownBackend, get_adapter

    try:
        adapter = get_adapter(args.backend, generation=args.generation)
    except UnknownBackend as exc:
        raise _usage(str(exc)) from None
    known = adapter.generations()
    if args.generation is not None and known is not None and args.generation not in known:
        raise _usage(f"--generation: {args.backend} has no generation {args.generation!r} (choose from {', '.join(known)})")
    problems = adapter.preflight()
    if problems:
        raise _usage(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return adapter


def _shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    from opmatrix.probes.runner import parse_shard

    try:
        return parse_shard(text)  # type: ignore[no-any-return]
    except ValueError as exc:
        raise _usage(f"--shard: {exc}") from None


def _op_tasks(args: argparse.Namespace, dtypes: list[str], layouts: list[str] | None) -> tuple[list[Any], OpSource | None, list[str], dict[str, Any]]:
    if args.runtime_only:
        return [], None, [], {}
    from opmatrix.probes.ops.source import UnknownOp, select_ops, source_hash

    try:
        entries = select_ops(args.ops)
    except UnknownOp as exc:
        raise _usage(str(exc)) from None
    options: dict[str, Any] = {"compile": "off" if args.no_compile else args.compile}
    if getattr(args, "compile_backend", None):
        options["compile_backend"] = args.compile_backend
    if layouts:
        options["layouts"] = layouts
    names = [e.full_name for e in entries]
    source = OpSource(name="opinfo", entries=len(entries), hash=source_hash(entries))
    return plan_op_tasks(names, dtypes, options), source, names, options


def plan_probe(args: argparse.Namespace) -> ProbePlan:
    """Check every argument of ``opmatrix probe`` and plan the run; UsageError names the fix."""
    _check_numbers(args)
    dtypes = _validate_names(args.dtypes, list(DTYPES), "--dtypes") or list(DEFAULT_DTYPES)
    layouts = _validate_names(args.layouts, [lay.value for lay in Layout], "--layouts")
    shard = _shard(args.shard)
    adapter = _adapter(args)
    out = Path(args.out or f"out/{args.backend.replace(':', '_')}{'-' + args.generation if args.generation else ''}")
    command = "opmatrix " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "opmatrix probe"
    started = _now()
    from opmatrix.probes.workloads.cli import resolve_suites, workload_tasks

    suites = resolve_suites(args)
    if "ops" in suites:
        from opmatrix.probes.ops import source as op_source
        from opmatrix.probes.runner import zygote

        if not op_source.index_cached():  # a first run: the zygote imports op_db once, for all
            if zygote.start_early(("op",)):
                answered, index = zygote.ask(op_source.index_data)
                if not (answered and op_source.adopt_index(index)):
                    zygote.give_up()  # it failed: planning imports op_db itself, and workers are spawned
    tasks, source, names, options = _op_tasks(args, dtypes, layouts) if "ops" in suites else ([], None, [], {})
    if "runtime" in suites:
        tasks = _runtime_tasks(args.backend, args.generation) + tasks
    if "workloads" in suites:
        tasks += workload_tasks(args)
    identity = RunIdentity(
        backend=args.backend, generation=adapter.generation, adapter=f"{type(adapter).__module__}.{type(adapter).__qualname__}",
        ops=names, dtypes=dtypes if "ops" in suites else [], layouts=layouts,
        runtime="only" if suites == {"runtime"} else "on" if "runtime" in suites else "off",
        options={**{k: v for k, v in options.items() if not isinstance(v, list)}, "suites": ",".join(sorted(suites)),
                 "workloads": ",".join(t.id for t in tasks if t.kind == "workload"),
                 **({"compile_backend": args.compile_backend} if getattr(args, "compile_backend", None) else {})},
        shard=args.shard or None, op_source_hash=source.hash if source else "",
    )
    return ProbePlan(
        adapter=adapter, backend_id=_identity(adapter), out=out, command=command, started=started, tasks=tasks,
        planned=tasks if shard is None else _shard_of(tasks, shard), identity=identity, source=source, shard=shard,
        devices=[int(d) for d in args.devices] if args.devices else None, suites=frozenset(suites),
    )
