"""The fork / process suite of docs/levels.md#fork-and-spawn, plus provoked initialisation failures.

Each case is a function of :class:`CaseEnv` run in a process of its own whose parent never
initialised the backend (see :mod:`.casehost`); the case decides what to initialise itself::

    fork_after_init: parent initialises, forks; the child's first device call must fail with an
    error naming the pre-fork initialisation (or work correctly), never hang or compute garbage.

The cases: fork before / after initialisation, spawn, forkserver, repeated children, a crashing
child, a clean child exit, the parent continuing afterwards, a DataLoader with spawned workers,
and ``init_messages`` (each declared initialisation failure mode names its cause).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opmatrix.probes.runner.calibrate import current
from opmatrix.schema.text import cut

from .children import WORK_RESULT, ChildResult, describe_exit, run_forked, run_started, work
from .context import HOST_DEVICES, NO_VALUE_DEVICES
from .initfail import classify_init_failure
from .spec import Verdict, failed, not_applicable, passed, unknown

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter
    from opmatrix.backend.initmodes import InitFailureMode

__all__ = ["CASES", "CaseEnv", "SquaresDataset", "device_type_of"]

#: what an error from a child forked after initialisation must mention to name its cause
FORK_CAUSE = re.compile(r"fork|spawn|forkserver|initiali[sz]", re.IGNORECASE)


@dataclass(frozen=True)
class CaseEnv:
    """Which backend a case runs against."""

    spec: str
    generation: str | None = None

    def adapter(self) -> Adapter:
        """A fresh, not yet set-up adapter."""
        from opmatrix.backend.registry import get_adapter

        return get_adapter(self.spec, self.generation)

    def initialise(self) -> Adapter:
        """Set up the backend in this process and compute once (initialises lazy runtimes)."""
        adapter = self.adapter()
        adapter.setup()
        value = work(adapter)
        if value != WORK_RESULT:
            raise RuntimeError(f"device computed {value} instead of {WORK_RESULT}")
        return adapter


def child_deadline() -> float:
    """Deadline of one child that initialises the backend (the case as a whole has a larger one),
    calibrated at run start (:mod:`opmatrix.probes.runner.calibrate`)."""
    return current().child_deadline()


def device_type_of(adapter: Adapter) -> str:
    """The torch device type, also for PrivateUse1 adapters that learn it only in ``setup()``."""
    import torch

    if adapter.dispatch_key == "PrivateUse1":
        return str(torch._C._get_privateuse1_backend_name())
    return str(adapter.device_type)


def _child_ok(res: ChildResult, what: str) -> str | None:
    """None when the child computed the expected value, else what went wrong."""
    if res.status == "ok":
        value = res.value["value"] if isinstance(res.value, dict) else res.value
        return None if value == WORK_RESULT else f"{what} computed {value!r} instead of {WORK_RESULT}"
    return f"{what} {res.describe()}"


def _parent_after(env: CaseEnv, adapter: Adapter | None = None) -> str | None:
    """None when this (parent) process can still use the device, else why not."""
    try:
        adapter = adapter or env.initialise()
        value = work(adapter)
    except Exception as exc:  # noqa: BLE001 - any failure means the parent cannot go on
        return f"parent could not use the device afterwards: {type(exc).__name__}: {exc}"
    return None if value == WORK_RESULT else f"parent computed {value} afterwards"


def case_fork_before_init(env: CaseEnv) -> Verdict:
    """Discovery without initialisation, then a forked child initialises and computes."""
    import importlib

    import torch

    from .discovery import backend_module

    adapter = env.adapter()
    importlib.import_module(backend_module(adapter))
    adapter.register()
    mod = getattr(torch, device_type_of(adapter), None)
    discovery = "no device_count to try before initialisation"
    count = getattr(mod, "device_count", None)
    initialised = getattr(mod, "is_initialized", None)
    if callable(count):
        before = bool(initialised()) if callable(initialised) else None
        n = count()
        discovery = f"device_count() {n} before initialisation"
        if before is False and callable(initialised) and initialised():
            return failed(f"device_count() initialised the runtime: a later fork is unsafe ({discovery})",
                          "make device discovery fork-safe: counting devices must not initialise the runtime")
        if before is False:
            discovery += " (is_initialized() stayed False)"
    res = run_forked(lambda: work(env.initialise()), child_deadline())
    problem = _child_ok(res, "forked child") or _parent_after(env)
    if problem:
        return failed(f"{problem}; {discovery}")
    return passed(f"{discovery}; forked child initialised and computed in {res.seconds:.2f} s; parent then initialised")


def case_fork_after_init(env: CaseEnv) -> Verdict:
    """A child forked after initialisation fails clearly (or works), never hangs or corrupts."""
    adapter = env.initialise()
    res = run_forked(lambda: work(adapter), current().fork_child_deadline())
    parent = _parent_after(env, adapter)
    advice = ("a child forked after initialisation must get an error naming the pre-fork initialisation "
              "and recommending spawn (or fully re-initialise)")
    if res.status == "ok":
        if res.value != WORK_RESULT:
            return failed(f"child computed {res.value!r} instead of {WORK_RESULT}: corrupted state", advice)
        verdict = passed(f"fork-safe: the child computed {res.value} after the parent initialised")
        verdict.facts.capabilities["fork_after_init"] = "works"
    elif res.status == "raised":
        if not FORK_CAUSE.search(res.message):
            return failed(f"child error does not name the cause (fork after initialisation): {res.message}", advice)
        verdict = passed(f"child got: {res.message}")
        verdict.facts.capabilities["fork_after_init"] = "rejected_with_error"
    else:
        return failed(f"child {res.describe()}", advice)
    if parent:
        return failed(f"{verdict.evidence}; but {parent}")
    verdict.evidence += "; parent continued"
    return verdict


def _started_case(env: CaseEnv, method: str, adapter: Adapter | None = None) -> Verdict:
    adapter = adapter or env.initialise()
    devices = adapter.devices()
    uuid = devices[0].uuid if devices else None
    res = run_started(method, env.spec, env.generation, child_deadline())
    problem = _child_ok(res, f"{method} child") or _parent_after(env, adapter)
    if problem:
        return failed(problem, f"{method} children must initialise the backend themselves and compute")
    child_uuid = res.value.get("uuid")
    if uuid != child_uuid:
        return failed(f"{method} child sees device 0 as {child_uuid}, the parent as {uuid}: identity is not stable")
    same = f"; same device id {uuid}" if uuid else ""
    return passed(f"{method} child initialised and computed in {res.seconds:.2f} s{same}; parent continued")


def case_spawn(env: CaseEnv) -> Verdict:
    """A spawned child of an initialised parent initialises and computes."""
    return _started_case(env, "spawn")


def case_forkserver(env: CaseEnv) -> dict[str, Verdict]:
    """forkserver children of an initialised parent; one server serves both checks.

    ``forkserver``: a child initialises and computes. ``parent_continues``: then one child dies
    of SIGSEGV and one exits cleanly, and the parent's tensors and device must be unaffected.
    """
    import torch

    adapter = env.initialise()
    want = torch.arange(1024, dtype=torch.float32) * 3
    kept = want.to(adapter.device())
    first = _started_case(env, "forkserver", adapter)
    crashed = run_started("forkserver", env.spec, env.generation, child_deadline(), mode="crash")
    clean = run_started("forkserver", env.spec, env.generation, child_deadline())
    problems = []
    if crashed.code != -signal.SIGSEGV:
        problems.append(f"crashing child {crashed.describe()}")
    problems += [p for p in (_child_ok(clean, "clean child"),) if p]
    if not torch.equal(kept.cpu(), want):
        problems.append("a tensor the parent held changed while the children ran")
    problems += [p for p in (_parent_after(env, adapter),) if p]
    continues = failed("; ".join(problems)) if problems else passed(
        f"forkserver children: one {describe_exit(crashed.code)}, one exited 0; the parent's tensor kept its "
        "values and new work computed")
    return {"forkserver": first, "parent_continues": continues}


def case_repeated_children(env: CaseEnv) -> Verdict:
    """Three children in a row each initialise, compute and exit; the device is free for the next."""
    times = []
    for i in range(3):
        res = run_forked(lambda: work(env.initialise()), child_deadline(), clean_exit=True)
        problem = _child_ok(res, f"child {i + 1} of 3")
        if problem:
            return failed(problem, "each new process must be able to initialise after the previous one exited")
        times.append(f"{res.seconds:.2f}")
    problem = _parent_after(env)
    if problem:
        return failed(problem)
    return passed(f"3 children one after another initialised, computed and exited ({' / '.join(times)} s); "
                  "then the parent initialised")


def case_child_crash(env: CaseEnv) -> Verdict:
    """A child that dies of SIGSEGV while holding the device is reported, and the device is reusable."""
    def crash() -> None:
        import resource

        work(env.initialise())
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGSEGV)

    res = run_forked(crash, child_deadline())
    if res.status != "signal":
        return failed(f"the crashing child {res.describe()} (expected death by SIGSEGV)")
    problem = _parent_after(env)
    if problem:
        return failed(f"child {res.describe()}; {problem}", "a crashed process must not leave the device busy")
    return passed(f"child {res.describe()} while holding the device; a new process then initialised and computed")


def case_child_exit(env: CaseEnv) -> Verdict:
    """A child that exits normally (running the backend's exit hooks) ends with code 0 and its result."""
    res = run_forked(lambda: work(env.initialise()), child_deadline(), clean_exit=True)
    problem = _child_ok(res, "child") or _parent_after(env)
    if problem:
        return failed(problem, "the backend's exit hooks must let a process leave cleanly")
    return passed(f"child initialised, computed, ran its exit hooks and exited 0 in {res.seconds:.2f} s")


class SquaresDataset:
    """``i -> tensor(i*i)`` as host tensors: what DataLoader workers produce for the device."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        return torch.tensor(float(i * i))


def case_dataloader_spawn(env: CaseEnv) -> Verdict:
    """A DataLoader with 2 spawned workers feeds an initialised parent that moves batches to the device."""
    from torch.utils.data import DataLoader

    adapter = env.initialise()
    dataset: Any = SquaresDataset(8)  # map-style: __len__ + __getitem__, no torch import at module level
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=2, num_workers=2, multiprocessing_context="spawn",
                        timeout=child_deadline())
    total = 0.0
    for batch in loader:
        total += float(batch.to(adapter.device()).sum().item())
    want = float(sum(i * i for i in range(8)))
    if total != want:
        return failed(f"sum over the device batches {total}, expected {want}")
    problem = _parent_after(env, adapter)
    return failed(problem) if problem else passed(f"2 spawn workers, 4 batches moved to {adapter.device()}: sum {total}")


def case_init_messages(env: CaseEnv) -> Verdict:
    """Each provokable initialisation failure names its own cause (driver version, busy, ...)."""
    from .discovery import initialise

    adapter = env.adapter()  # constructing reads no driver state; the backend declares its modes
    modes = adapter.init_failure_modes()
    if not modes:
        if device_type_of(adapter) in HOST_DEVICES:
            return not_applicable("the host has no driver to fail")
        return unknown(f"{env.spec} declares no way to provoke an initialisation failure (Adapter.init_failure_modes, "
                       "or OPMATRIX_INIT_FAILURE_MODES in a PrivateUse1 module)")
    seen, problems = [], []
    for mode in modes:
        def provoke(mode: InitFailureMode = mode) -> str:
            os.environ.update(dict(mode.env))
            initialise(env.adapter())
            return "initialised"

        res = run_forked(provoke, child_deadline())
        if res.status == "ok":
            problems.append(f"{mode.mode}: initialisation did not fail")
            continue
        if res.status != "raised":
            problems.append(f"{mode.mode}: the probe {res.describe()}")
            continue
        cause = classify_init_failure(res.message)
        lacking = [w for w in mode.words if w.lower() not in res.message.lower()]
        if cause.cause != mode.cause:
            problems.append(f"{mode.mode}: message names {cause.title!r}, expected {mode.cause}: {res.message}")
        elif lacking:
            problems.append(f"{mode.mode}: message lacks {', '.join(map(repr, lacking))}: {res.message}")
        else:
            seen.append(f"{mode.mode} -> {cause.title}: {cut(res.message, 200)}")  # a cut says so: …
    if problems:
        return failed("; ".join(problems), "each initialisation failure must say what failed: driver version, "
                      "device busy, reset, missing firmware")
    return passed("; ".join(seen))


#: check name -> the case function that decides it (one function may decide several checks: it
#: then returns {check name: verdict} and runs once for all of them)
CASES: dict[str, Callable[[CaseEnv], Verdict | dict[str, Verdict]]] = {
    "init_messages": case_init_messages,
    "fork_before_init": case_fork_before_init,
    "fork_after_init": case_fork_after_init,
    "spawn": case_spawn,
    "forkserver": case_forkserver,
    "repeated_children": case_repeated_children,
    "child_crash": case_child_crash,
    "child_exit": case_child_exit,
    "parent_continues": case_forkserver,
    "dataloader_spawn": case_dataloader_spawn,
}


def no_runtime_verdict(device_type: str) -> Verdict:
    """The verdict for every process case on a device without runtime state (meta)."""
    assert device_type in NO_VALUE_DEVICES
    return not_applicable(f"{device_type} has no runtime state to fork, spawn or crash with")
