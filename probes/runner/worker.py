"""The worker process (spawned, or forked from a warm zygote: :mod:`.zygote`): set the backend up once, then run tasks sent over a pipe.

Messages to the parent, in order for one task::

    ("ready", slot, {"torch": "2.13.0 git=...", "adapter": "driver=...|gen=g2"})   once, after setup
    ("done", task_id, record_json)       the task's journal record
    ("poisoned", task_id, unit, msg)     the device is unusable: the worker exits after sending
    ("fault", task_id, unit, outcome, msg)  the handler raised (oom / error): the worker exits

Before each risky unit the task posts it on the slot's :class:`~.board.UnitBoard` (a shared
page, not a message: the parent reads it for deadlines and blame).

The worker detaches from the terminal's Ctrl-C (the parent decides), dies with its parent
(``PR_SET_PDEATHSIG`` on Linux), and writes its stdout/stderr to a log file whose tail becomes
the message of a crash; ``faulthandler`` puts the Python stack of a SIGSEGV/SIGABRT there.
"""

from __future__ import annotations

import faulthandler
import gc
import hashlib
import importlib.util
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmatrix.schema import FaultOutcome, Outcome
from opmatrix.schema.outdir import pid_alive

from .board import UnitBoard
from .carry import CarryWriter
from .evidence import EngineOptions, WorkerIdentity
from .messages import Done, Fault, Poisoned, Ready, RunTask, SetupFailed
from .task import Handler, Skip, Task, WorkerContext, WorkerPoisoned, resolve_handler
from .zygote import PRELOAD

if TYPE_CHECKING:
    from pydantic import BaseModel


__all__ = ["WorkerSpec", "worker_main"]


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to set itself up (picklable: it crosses the spawn boundary)."""

    backend: str
    generation: str | None
    log_path: str
    board_path: str
    parent_pid: int
    handlers: dict[str, str]
    kinds: tuple[str, ...] = ()
    device: int | None = None
    #: ``probe --devices``: "all" or "0,1,3"; the worker resolves it itself (the parent never
    #: touches the device runtime) and probes ``plan[slot % len(plan)]``
    device_plan: str | None = None
    threads: int | None = None
    options: EngineOptions = field(default_factory=EngineOptions)
    carry_path: str = ""  # where finished units are checkpointed (:mod:`.carry`); "" for none
    #: the parent's environment when it started the worker: a worker forked from the zygote
    #: (:mod:`.zygote`) would otherwise have the zygote's, from when that started
    env: dict[str, str] = field(default_factory=dict)


def _die_with_parent(parent_pid: int) -> None:
    """Exit when the orchestrator dies (it may be SIGKILLed), so no orphan keeps probing.

    The worker's own parent is the orchestrator (spawned) or the zygote (forked from it), which
    exits when the orchestrator does; the death signal is armed against the own parent."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) == 0  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
        if os.getppid() != parent or not pid_alive(parent_pid):
            os._exit(0)  # the parent died before the signal was armed
        if armed:
            return

    def watch() -> None:  # portable backstop for platforms without PDEATHSIG
        while True:
            time.sleep(1.0)
            if os.getppid() != parent or not pid_alive(parent_pid):
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _detach(spec: WorkerSpec) -> None:
    """Own process group, Ctrl-C ignored, stdout/stderr to the log file, faulthandler on."""
    os.setpgrp()  # the parent kills our whole group (compile helpers included) on a hang
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(spec.parent_pid)
    fd = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(file=sys.stderr, all_threads=False)
    # kineto (torch 2.13) writes two "USDT: ... profiler_start/stop" lines for every profiler use and
    # the engine profiles every backward: thousands of lines that would bury a crash's last words.
    # 6 is above its ERROR (4) and USDT (5) levels; a user's own setting wins.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    # the parent sends SIGUSR1 before killing a hung worker: the stack shows where it hung
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)


CODE_SUFFIXES = (".py", ".yaml", ".json", ".cpp")


def code_hash(modules: Iterable[str]) -> str:
    """Hash of the source files beside each module (its package folder, not recursive).

    Part of every evidence key: a changed probe engine, runtime check or adapter re-probes
    instead of reusing records it would no longer produce.
    """
    digest = hashlib.sha256()
    for name in sorted(set(modules)):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            digest.update(f"{name}:missing\0".encode())
            continue
        for path in sorted(Path(spec.origin).parent.iterdir()):
            if path.suffix in CODE_SUFFIXES and path.is_file():
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _setup(slot: int, spec: WorkerSpec) -> tuple[WorkerContext, WorkerIdentity]:
    """Import torch, build and set up the adapter; returns the context and the evidence identity."""
    import torch

    from opmatrix.backend.registry import get_adapter

    preload = sys.modules.get(PRELOAD)
    if getattr(preload, "AUTOLOAD_DEFERRED", False):  # forked from the zygote
        preload.load_deferred_backends()  # type: ignore[union-attr]

    if spec.threads:
        torch.set_num_threads(spec.threads)
    adapter = get_adapter(spec.backend, spec.generation)
    device, plan = spec.device, None
    if spec.device_plan is not None:
        # the backend's devices are known once it is registered (a privateuse1: module, once
        # imported): without it a generic PrivateUse1 adapter saw device 0 alone
        adapter.register()
        plan = resolve_devices(spec.device_plan, adapter)
        device = plan[slot % len(plan)]
    if device is not None:
        adapter.select_device(device)
    adapter.setup()
    adapter.health_baseline()  # before any probe: "poisoned" later needs this to have passed
    ctx = WorkerContext(adapter=adapter, index=slot, options=spec.options, device=device,
                        devices=tuple(plan or ()), backend=spec.backend)
    identity = WorkerIdentity(
        # plain str: a TorchVersion would make the parent import torch to unpickle this message
        torch=f"{torch.__version__} git={getattr(torch.version, 'git_version', None)}",
        adapter=adapter.evidence_key(),
        code=code_hash(
            [type(adapter).__module__, *(spec.handlers[k].partition(":")[0] for k in spec.kinds if k in spec.handlers)]
        ),
        torch_version=str(torch.__version__),
        host=socket.gethostname(),  # beside the device in every record: which machine ran it
        torch_git=getattr(torch.version, "git_version", None),
        device_type=adapter.device_type,
        dispatch_key=adapter.dispatch_key,
        versions={k: None if v is None else str(v) for k, v in adapter.versions().items()},
    )
    if device is not None:  # as torch names it, with the device's stable identity
        identity = identity.model_copy(update={
            "device": str(adapter.device(device)),
            "device_uuid": next((d.uuid for d in adapter.devices() if d.index == device), None),
            "device_count": len(plan) if plan is not None else None,
        })
    return ctx, identity


def resolve_devices(plan: str, adapter: Any) -> list[int]:
    """The device indices of ``--devices`` ("all" or "0,1,3"), asked of the backend in this worker."""
    present = [d.index for d in adapter.devices()]
    if plan.strip() == "all":
        if not present:
            raise ValueError(f"--devices all: backend {adapter.name!r} lists no device here")
        return present
    wanted = [int(p) for p in plan.split(",") if p.strip()]
    if getattr(adapter, "is_host", False):
        return wanted  # the host's "devices" are what the caller names them (tests spread work so)
    missing = [i for i in wanted if i not in present]
    if missing:
        raise ValueError(f"--devices: {adapter.name} has no device {missing[0]} here (devices: "
                         f"{', '.join(map(str, present)) or 'none'})")
    return wanted


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, (MemoryError, torch.OutOfMemoryError))


def _has_fault(record: BaseModel) -> bool:
    """Whether a record shows a fault that warrants a health check of the device."""
    outcomes = [getattr(record, "outcome", None)]
    outcomes += [getattr(getattr(c, "result", None), "outcome", None) for c in getattr(record, "cells", [])]
    return any(isinstance(o, Outcome) and o.is_fault for o in outcomes)


def worker_main(slot: int, conn: Connection, spec: WorkerSpec) -> None:
    """Entry point of a worker: setup, then serve tasks until told to stop."""
    if spec.env:
        os.environ.clear()
        os.environ.update(spec.env)
    _detach(spec)
    try:
        ctx, identity = _setup(slot, spec)
    except Exception:  # noqa: BLE001 - any setup failure is reported to the parent verbatim
        conn.send(SetupFailed(slot, traceback.format_exc()[-4000:]))
        return
    # what the imports and the setup made lives as long as the worker: collections skip it (in a
    # worker forked from the zygote they would also write to, and so copy, the pages it shares)
    gc.freeze()
    board = UnitBoard(spec.board_path)
    carry = CarryWriter(spec.carry_path) if spec.carry_path else None
    conn.send(Ready(slot, identity))
    handlers: dict[str, Handler] = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            _quit()
        if not isinstance(msg, RunTask):  # Stop
            _quit()
        if carry is not None:
            carry.start(msg.task.id)
        ctx.carried, ctx.retried, ctx.checkpoint = dict(msg.done), dict(msg.retried), carry
        if not _serve(ctx, conn, board, msg.task, msg.skip, msg.skip_rest, handlers, spec.handlers):
            return


def _quit() -> None:
    """Exit now, without the interpreter's teardown: the parent holds every record, and tearing
    down torch (and a device runtime) took a second or more per worker here, or can hang in a
    vendor's exit handler."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve(
    ctx: WorkerContext,
    conn: Connection,
    board: UnitBoard,
    task: Task,
    skip: dict[str, Skip],
    skip_rest: Skip | None,
    handlers: dict[str, Handler],
    targets: dict[str, str],
) -> bool:
    """Run one task and report it; returns False when the worker must exit (poisoned, fault)."""
    unit: list[str | None] = [None]

    def progress(unit_id: str) -> None:
        unit[0] = unit_id
        board.post(task.id, unit_id)

    try:
        if task.kind not in handlers:
            if task.kind not in targets:
                raise ValueError(f"no handler for task kind {task.kind!r} (known: {', '.join(sorted(targets))})")
            handlers[task.kind] = resolve_handler(targets[task.kind])
        ctx.adapter.refresh_baseline()  # a device reset since this worker started is usable again
        record = handlers[task.kind].handle(ctx, task, progress, skip, skip_rest)
        if not hasattr(record, "model_dump_json"):
            raise TypeError(f"handler for {task.kind!r} returned {type(record).__name__}, expected a pydantic record")
        text = record.model_dump_json()  # here, so a record that cannot be written is this task's error
    except WorkerPoisoned as exc:
        blamed = exc.unit if exc.unit is not None else unit[0]
        conn.send(_poisoned(ctx, board, task.id, blamed, exc.message))
        return False
    except Exception as exc:  # noqa: BLE001 - a handler bug or an escaped OOM is blamed on the unit
        outcome = FaultOutcome.oom if _is_oom(exc) else FaultOutcome.error
        traceback.print_exc()
        conn.send(Fault(task.id, unit[0], outcome, f"{type(exc).__name__}: {exc}"[-2000:]))
        return False
    if _has_fault(record):
        problem = ctx.adapter.poisoned_after_fault()
        if problem is not None:
            conn.send(_poisoned(ctx, board, task.id, unit[0], f"health check after the task failed: {problem}"))
            return False
    conn.send(Done(task.id, text))
    return True


def _poisoned(ctx: WorkerContext, board: UnitBoard, task_id: str, unit: str | None, message: str) -> Poisoned:
    """The message for a device found unusable, with how far the fault reached: the worker looks
    (same stream, new stream, other device, fresh process) before it exits, re-posting ``unit`` so
    the runner's deadline for it does not pass while it looks."""
    from opmatrix.probes.runner.faultscope import observe

    def keepalive() -> None:
        if unit is not None:
            board.post(task_id, unit)

    try:
        found = observe(ctx.adapter, ctx.backend, keepalive)
    except Exception as exc:  # noqa: BLE001 - the look itself failed: the scope stays unknown, said why
        return Poisoned(task_id, unit, message, "unknown", (f"the checks after the fault failed: {exc!r}"[:300],))
    return Poisoned(task_id, unit, message, found.scope.value, found.evidence)
