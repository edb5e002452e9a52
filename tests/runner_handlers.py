"""A task handler for the runner's tests: units that crash, abort, hang, OOM or poison on demand.

A ``test`` task's payload names its units and which of them misbehave::

    Task("t3|float32", "test", {"source": "t3", "units": 4, "faults": {"u2": "segv"}})

Modes: ``segv`` (a real NULL read), ``abort`` (``os.abort``), ``exit`` (``os._exit(3)``), ``nospace``
(a write to ``/dev/full`` whose ENOSPC escapes), ``nospace-exit`` (the worker dies of it, exit 1),
``hang`` (sleeps far past any deadline), ``oom`` (a device OOM the handler classifies and
records itself), ``oom-escape`` (a ``MemoryError`` escaping the handler), ``poison``
(``WorkerPoisoned``), ``sick`` (an error after which :class:`SickCpuAdapter`'s health check fails),
``worn:N`` (a segfault only once this process has run N units: state a worker accumulates, not
the input). Each finished unit is checkpointed (a fault's next attempt restores it; ``runs``, a
file the payload may name, gets one line per unit actually run).
Each unit may also ``sleep`` seconds, so that a run lasts long enough to be killed half-way;
``prepare`` seconds pass before the first unit (a handler's imports and sample generation).

Run as a script, it drives :func:`~opmatrix.probes.runner.run` in its own process (for tests
that kill or interrupt the orchestrator)::

    python tests/runner_handlers.py OUT_DIR --tasks 12 --sleep 0.2 --workers 2 [--resume]
    python tests/runner_handlers.py OUT_DIR --ray-address 127.0.0.2:6379 --ray-resource opm_dev --runs FILE
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel

from opmatrix.backend.builtin import CpuAdapter
from opmatrix.probes.runner import Skip, Task, WorkerContext, WorkerPoisoned
from opmatrix.schema import CellRecord, CellResult, ErrorInfo, ExecPath, Outcome, Samples, TaskRecord

HANDLERS = {"test": "tests.runner_handlers:HANDLER"}

_SICK = False
_RUN = 0  # units this process has run


class SickCpuAdapter(CpuAdapter):
    """The cpu adapter whose health check fails once a ``sick`` unit ran in this process."""

    def health_check(self) -> str | None:
        return "device lost after a sick unit" if _SICK else super().health_check()


class SplitGenerationAdapter(CpuAdapter):
    """The cpu adapter as a pool that started the wrong workers reports it: the first process to
    claim ``OPMATRIX_TEST_GEN_MARK`` (a file) is generation g2, every later one g1. The run's
    calibration child (started before any worker, without the run's calibration in its
    environment) times the backend's start and claims nothing."""

    def __init__(self, generation: str | None = None, device_index: int = 0) -> None:
        if "OPMATRIX_CALIBRATION" not in os.environ:
            super().__init__("g2", device_index)
            return
        try:
            os.close(os.open(os.environ["OPMATRIX_TEST_GEN_MARK"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            generation = "g2"
        except FileExistsError:
            generation = "g1"
        super().__init__(generation, device_index)


def make_tasks(
    count: int,
    *,
    units: int = 3,
    faults: Mapping[str, Mapping[str, str]] | None = None,
    sleep: float = 0.0,
    pid_dir: str | None = None,
) -> list[Task]:
    """``count`` test tasks ``t0|float32`` ...; ``faults`` maps a task source to {unit: mode}.

    ``pid_dir``: each worker writes a file named after its pid there before each unit, holding its parent's pid.
    """
    faults = faults or {}
    return [
        Task(
            f"t{i}|float32",
            "test",
            {
                "source": f"t{i}",
                "units": units,
                "faults": dict(faults.get(f"t{i}", {})),
                "sleep": sleep,
                "pid_dir": pid_dir,
            },
            order=i,
        )
        for i in range(count)
    ]


def _misbehave(mode: str) -> None:
    global _SICK
    if mode.startswith("worn:"):
        if _RUN >= int(mode.partition(":")[2]):
            ctypes.string_at(0)
    elif mode == "segv":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()
    elif mode == "exit":
        os._exit(3)
    elif mode == "nospace":  # a real ENOSPC (/dev/full) escaping the handler: the worker reports it
        with open("/dev/full", "w") as full:
            full.write("x" * 65536)
    elif mode == "nospace-exit":  # a worker that dies of it, as native code would, its last words on stderr
        try:
            with open("/dev/full", "w") as full:
                full.write("x" * 65536)
        except OSError as exc:
            print(f"fatal: could not write a scratch file: {exc}", file=sys.stderr, flush=True)
            os._exit(1)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "oom":
        import torch

        raise torch.OutOfMemoryError("out of memory: tried to allocate 64.00 GiB")
    elif mode == "oom-escape":
        raise MemoryError("host allocation failed")
    elif mode == "poison":
        raise WorkerPoisoned(None, "device lost (injected)")
    elif mode == "sick":
        _SICK = True
        raise RuntimeError("device reported an internal error (injected)")
    else:
        raise ValueError(f"unknown fault mode {mode!r}")


def _cell(
    source: str, index: int, unit: str, outcome: Outcome, error: ErrorInfo | None, note: str | None = None
) -> CellRecord:
    ok = outcome is Outcome.ok
    return CellRecord(
        op=f"test.{source}.{unit}",
        dtype="float32",
        rank=index,
        layout="contiguous",
        result=CellResult(
            path=ExecPath.native, outcome=outcome, samples=Samples(probed=1, passed=int(ok)), error=error, note=note
        ),
    )


def handle(
    ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip], skip_rest: Skip | None
) -> TaskRecord:
    """Run each unit (``u0`` ...), misbehaving where the payload says; record one cell per unit."""
    global _RUN
    source = task.payload["source"]
    faults: dict[str, str] = task.payload.get("faults", {})
    time.sleep(task.payload.get("prepare", 0.0))  # host-side preparation before the first unit
    cells = []
    for index in range(task.payload.get("units", 3)):
        unit = f"u{index}"
        if unit in ctx.carried:  # finished in an earlier attempt
            cells.append(CellRecord.model_validate_json(ctx.carried[unit]))
            continue
        fault = skip.get(unit) or skip_rest
        if fault is not None:
            error = ErrorInfo(type=fault.outcome, message=fault.message[:1000], actionable=False, signal=fault.signal)
            cells.append(_cell(source, index, unit, Outcome(fault.outcome), error))
            continue
        progress(unit)
        _RUN += 1
        if task.payload.get("runs"):
            with open(task.payload["runs"], "a") as fh:
                fh.write(f"{source}.{unit}\n")
        if task.payload.get("pid_dir"):  # lets a test check that no worker outlives its orchestrator
            Path(task.payload["pid_dir"], str(os.getpid())).write_text(str(os.getppid()))  # and who started it
        if task.payload.get("started"):  # each worker's units, as it starts them: a test acts on the event
            with open(Path(task.payload["started"], f"{os.getpid()}-{os.getppid()}"), "a") as fh:
                fh.write(f"{source}.{unit}\n")
        time.sleep(task.payload.get("sleep", 0.0))
        try:
            if unit in faults:
                _misbehave(faults[unit])
        except (RuntimeError, ValueError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            ctx.check_health(unit)  # after any failure: an unusable device is blamed on this unit
            verdict = ctx.adapter.classify_exception(exc)
            error = ErrorInfo(type=type(exc).__name__, message=str(exc), actionable=False)
            cells.append(_cell(source, index, unit, Outcome(verdict.outcome), error))
            continue
        note = None if ctx.device is None else f"device={ctx.device}"
        if unit in ctx.retried:
            note = f"passed in a fresh worker; it had {ctx.retried[unit]}"
        cells.append(_cell(source, index, unit, Outcome.ok, None, note))
        if ctx.checkpoint is not None:
            ctx.checkpoint(unit, cells[-1].model_dump_json().encode())
    worst = max((c.result.outcome for c in cells), default=Outcome.ok)
    if task.payload.get("bad_record"):  # a handler bug: a pydantic model that is no journal record
        return NotARecord()  # type: ignore[return-value]
    return TaskRecord(task=task.id, source=source, dtype="float32", outcome=worst, cells=cells)


class NotARecord(BaseModel):
    kind: str = "bogus"


class TestHandler:
    """The ``test`` task kind."""

    def handle(self, ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip],
               skip_rest: Skip | None) -> TaskRecord:
        return handle(ctx, task, progress, skip, skip_rest)

    warm: str | None = None  # a test may name a module (one that fails to import: the zygote dies)

    def unit_timeout(self, task: Task, unit: str, timeout: float) -> float:
        return timeout

    def fault_record(self, task: Task, skip: Skip) -> TaskRecord:
        text = f"{skip.outcome}: {skip.message}".strip()
        return TaskRecord(task=task.id, source=task.payload["source"], dtype="float32", outcome=skip.outcome,
                          error=ErrorInfo(type=skip.outcome, message=text[-2000:], actionable=False, signal=skip.signal))


HANDLER = TestHandler()


def main(argv: list[str] | None = None) -> int:
    """Drive a test run in this process (see the module docstring)."""
    from opmatrix.probes.runner import run

    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--tasks", type=int, default=12)
    p.add_argument("--units", type=int, default=3)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--pid-dir")
    p.add_argument("--runs", help="a file that gets one line per unit actually run")
    p.add_argument("--started", help="a folder: each worker appends each unit it starts to PID-PARENTPID there")
    p.add_argument("--ray-address", help="run on this Ray cluster (the Ray executor)")
    p.add_argument("--ray-resource", default="opm_dev")
    args = p.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    tasks = make_tasks(args.tasks, units=args.units, sleep=args.sleep, pid_dir=args.pid_dir)
    if args.runs or args.started:
        extra = {"runs": args.runs, "started": args.started}
        tasks = [Task(t.id, t.kind, {**t.payload, **{k: v for k, v in extra.items() if v}}, t.order) for t in tasks]
    executor = None
    if args.ray_address:
        from opmatrix.probes.runner.raypool import RayExecutor

        executor = RayExecutor(address=args.ray_address, resource=args.ray_resource, backend="cpu", generation=None,
                               device_type="cpu")
    summary = run(
        tasks,
        executor=executor,
        command=shlex.join(["python", "tests/runner_handlers.py", *given]), backend="cpu",
        out_dir=Path(args.out),
        workers=args.workers,
        timeout=args.timeout,
        resume=args.resume,
        handlers=HANDLERS,
        progress=False,
    )
    return summary.exit_code


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # so workers import tests.runner_handlers
    sys.exit(main())
