"""Planning ``opmatrix probe``: check every argument, then plan the tasks and the run's identity.

    plan = plan_probe(options)  # UsageError (exit 2) before any worker starts or anything is written
    plan.tasks, plan.identity, plan.out

The run itself (lock the directory, run the workers, build the matrix) is orchestrated by
``opmatrix.pipeline``, above both this package and ``opmatrix.matrix``.
"""

from __future__ import annotations

import datetime as dt
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmatrix.schema import DEFAULT_DTYPES, BackendId, Evidence, OpSource
from opmatrix.schema.journal import RunIdentity

from .options import ProbeOptions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from opmatrix.backend.base import Adapter
    from opmatrix.probes.runner import Task

__all__ = ["ProbePlan", "check_devices", "checked_adapter", "default_out", "plan_op_tasks", "plan_probe", "probe_evidence", "worker_evidence"]


def _usage(message: str) -> Exception:
    from opmatrix.schema import UsageError

    return UsageError(message)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def plan_op_tasks(sources: list[str], dtypes: list[str], options: dict[str, Any]) -> list[Task]:
    """One ``op`` task per (OpInfo, dtype), in a stable order."""
    from opmatrix.probes.ops import OpPayload, task_id
    from opmatrix.probes.runner import Task

    tasks: list[Task] = []
    for i, source in enumerate(sources):
        for j, dtype in enumerate(dtypes):
            tasks.append(
                Task(id=task_id(source, dtype), kind="op",
                     payload=OpPayload(source=source, dtype=dtype, options=options).model_dump(), order=i * len(dtypes) + j)
            )
    return tasks


def _runtime_tasks(backend: str, generation: str | None) -> list[Task]:
    from opmatrix.probes.runtime import plan_runtime_tasks

    return list(plan_runtime_tasks(backend, generation))


def _identity(adapter: Adapter) -> BackendId:
    from opmatrix.backend.builtin import PrivateUse1Adapter

    if isinstance(adapter, PrivateUse1Adapter) and adapter.name.startswith("privateuse1:"):
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


def worker_evidence(records: Sequence[object]) -> Evidence | None:
    """The evidence a worker recorded in the journal header (versions seen on the device side)."""
    from opmatrix.schema import JournalHeader

    return next((r.evidence for r in records if isinstance(r, JournalHeader) and r.evidence is not None), None)


def _shard_of(tasks: list[Task], shard: tuple[int, int]) -> list[Task]:
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
    tasks: list[Task]
    planned: list[Task]
    identity: RunIdentity
    source: OpSource | None = None
    shard: tuple[int, int] | None = None
    devices: list[int] | str | None = None  # indices, or "all" (resolved by the workers)
    suites: frozenset[str] = frozenset({"runtime", "ops"})


def checked_adapter(backend: str, generation: str | None) -> Adapter:
    """The adapter ``--backend`` / ``--generation`` name, ready to plan with: it resolves (a module
    that does not import is one line), knows the generation, and its preflight finds nothing."""
    from opmatrix.backend import UnknownBackend, get_adapter

    try:
        adapter = get_adapter(backend, generation=generation)
    except UnknownBackend as exc:
        text = str(exc)
        raise _usage(text if text.startswith("--backend") else f"--backend: {text}") from None
    known = adapter.generations()
    if generation is not None and known is not None and generation not in known:
        raise _usage(f"--generation: {backend} has no generation {generation!r} (choose from {', '.join(known)})")
    if generation is None and adapter.generation is not None and known is not None and adapter.generation not in known:
        raise _usage(f"--generation: {backend}'s default generation {adapter.generation!r} (set in the environment) is "
                     f"not one it has (choose from {', '.join(known)})")
    problems = adapter.preflight()
    if problems:
        raise _usage(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return adapter


def check_devices(adapter: Adapter, devices: Sequence[str] | None) -> None:
    """The backend can be used here and ``--devices`` names only devices it has, asked of the
    adapter's fork-safe discovery (no device is initialised); UsageError otherwise, before any work."""
    count, why = adapter.discovery()
    if why:
        raise _usage(why)
    if count is None or not devices or tuple(devices) == ("all",):
        return
    missing = [d for d in devices if int(d) >= count]
    if missing:
        have = f"devices 0-{count - 1}" if count > 1 else "device 0" if count == 1 else "no device"
        raise _usage(f"--devices: {adapter.name} has {have}; {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                     "one of them (choose indices from those)")


def check_compile_backend(name: str) -> None:
    """``--compile-backend`` names a ``torch.compile`` backend (built in, registered by an imported
    module, or a ``torch_dynamo_backends`` entry point); imports ``torch._dynamo``, so only when given."""
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend(name)
    except Exception:  # noqa: BLE001 - InvalidBackend, or a registered backend whose module fails to import
        from torch._dynamo import list_backends

        known = [b for b in list_backends(exclude_tags=()) if "TESTING" not in b and "minifier" not in b]
        raise _usage(f"--compile-backend: {name!r} is not a torch.compile backend (registered: "
                     f"{', '.join(known)}); a backend of your own must be registered when its module "
                     "is imported (torch._dynamo.register_backend) or as a torch_dynamo_backends entry point") from None


def _shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    from opmatrix.probes.runner import parse_shard

    try:
        return parse_shard(text)  # type: ignore[no-any-return]
    except ValueError as exc:
        text = str(exc)
        raise _usage(text if text.startswith("--shard") else f"--shard: {text}") from None


def _op_tasks(opts: ProbeOptions, dtypes: list[str],
              layouts: list[str] | None) -> tuple[list[Task], OpSource | None, list[str], dict[str, Any]]:
    from opmatrix.probes.ops.source import UnknownOp, select_ops, source_hash

    try:
        entries = select_ops(list(opts.ops) if opts.ops is not None else None)
    except UnknownOp as exc:
        raise _usage(str(exc)) from None
    options: dict[str, Any] = {"compile": "off" if opts.no_compile else opts.compile}
    if opts.compile_backend:
        options["compile_backend"] = opts.compile_backend
    if layouts:
        options["layouts"] = layouts
    if opts.ranks:
        options["ranks"] = opts.ranks
    names = [e.full_name for e in entries]
    source = OpSource(name="opinfo", entries=len(entries), hash=source_hash(entries))
    return plan_op_tasks(names, dtypes, options), source, names, options


def default_out(options: ProbeOptions) -> Path:
    """``--out``, else ``out/<backend>[-<generation>]``."""
    gen = f"-{options.generation}" if options.generation else ""
    return Path(options.out or f"out/{options.backend.replace(':', '_')}{gen}")


def plan_probe(opts: ProbeOptions) -> ProbePlan:
    """Check what the options alone cannot (backend, generation, ops, workloads) and plan the run;
    UsageError names the option and the fix, before anything is written."""
    dtypes = list(opts.dtypes or DEFAULT_DTYPES)
    layouts = list(opts.layouts) if opts.layouts else None
    shard = _shard(opts.shard)
    suites = opts.chosen_suites()
    from opmatrix.probes.runner.settings import setting_problems

    settings = setting_problems()
    if settings:
        raise _usage(settings[0])
    adapter = checked_adapter(opts.backend, opts.generation)
    check_devices(adapter, opts.devices)
    if opts.compile_backend:
        check_compile_backend(opts.compile_backend)
    out = default_out(opts)
    command = opts.command_line()
    started = _now()
    from opmatrix.probes.workloads.cli import workload_tasks

    workloads = workload_tasks(opts) if "workloads" in suites else []  # user factories checked before op planning
    if "ops" in suites:
        from opmatrix.probes.handlers import TASK_HANDLERS
        from opmatrix.probes.ops import source as op_source
        from opmatrix.probes.runner import zygote
        from opmatrix.probes.runner.task import warm_modules

        if not op_source.index_cached():  # a first run: the zygote imports op_db once, for all
            if zygote.start_early(warm_modules(TASK_HANDLERS, ("op",))):
                answered, index = zygote.ask(op_source.index_data)
                if not (answered and op_source.adopt_index(index)):
                    zygote.give_up()  # it failed: planning imports op_db itself, and workers are spawned
    tasks, source, names, options = _op_tasks(opts, dtypes, layouts) if "ops" in suites else ([], None, [], {})
    if "runtime" in suites:
        tasks = _runtime_tasks(opts.backend, opts.generation) + tasks
    tasks += workloads
    identity = RunIdentity(
        backend=opts.backend, generation=adapter.generation, adapter=f"{type(adapter).__module__}.{type(adapter).__qualname__}",
        ops=names, dtypes=dtypes if "ops" in suites else [], layouts=layouts,
        runtime="only" if suites == {"runtime"} else "on" if "runtime" in suites else "off",
        options={**{k: v for k, v in options.items() if not isinstance(v, list)}, "suites": ",".join(sorted(suites)),
                 "workloads": ",".join(t.id for t in tasks if t.kind == "workload"),
                 **({"compile_backend": opts.compile_backend} if opts.compile_backend else {})},
        shard=opts.shard or None, op_source_hash=source.hash if source else "",
    )
    return ProbePlan(
        adapter=adapter, backend_id=_identity(adapter), out=out, command=command, started=started, tasks=tasks,
        planned=tasks if shard is None else _shard_of(tasks, shard), identity=identity, source=source, shard=shard,
        devices=("all" if opts.devices == ("all",) else [int(d) for d in opts.devices]) if opts.devices else None,
        suites=frozenset(suites),
    )
