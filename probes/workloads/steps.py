"""The eager steps of a workload run: to(device), inference, one training step, state_dict round trip.

Each step returns a :class:`~opmatrix.schema.workloads.StepResult`; :func:`guarded` turns an
exception into a failed step classified by the adapter (rejected / oom / error)::

    step = guarded(adapter, lambda: inference(run))
"""

from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch

from opmatrix.schema import CheckResult, Outcome
from opmatrix.schema.workloads import StepResult

from .catalog import Workload
from .compare import compare, to_cpu, to_device, upcast

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter

__all__ = ["CompileBackend", "Run", "Stats", "guarded", "move", "inference", "training", "state_dict_round_trip", "forward"]


#: what torch.compile takes as ``backend=``: a registered name or a compiler function
CompileBackend = str | Callable[..., object]
#: a compiled workload's figures between its steps (compile time, graphs, the compiled callable)
Stats = dict[str, Any]
T = TypeVar("T")


@dataclass
class Run:
    """One workload run on one device: the CPU workload, its device copy, what the steps found."""

    adapter: Adapter
    workload: Workload
    device: torch.device
    model: torch.nn.Module | None = None
    inputs: tuple = ()
    eager_out: object = None
    fallback_ops: set[str] = field(default_factory=set)
    fallback_state: str = "not_observed"
    #: the ops seen on the host during the current step
    step_ops: set[str] = field(default_factory=set)
    #: compile mode: the plain forward (a compiled module's other methods are not compiled)
    plain: bool = False

    def on_device(self) -> torch.nn.Module:
        """The device copy of the model: the steps after ``to_device`` run only once it exists."""
        if self.model is None:
            raise RuntimeError("the model is not on the device: to_device failed")
        return self.model


def forward(wl: Workload, model: Callable[..., object], inputs: tuple, plain: bool = False) -> object:
    """The workload's forward pass (generation for decoders, unless ``plain``: then ``model(*inputs)``)."""
    return wl.run(model, *inputs) if wl.run is not None and not plain else model(*inputs)


def guarded(adapter: Adapter, body: Callable[[], StepResult]) -> StepResult:
    """Run a step; an exception becomes a failed step with the adapter's classification."""
    start = time.perf_counter()
    try:
        return body()
    except Exception as exc:  # noqa: BLE001 - a step's failure is its result
        kind = adapter.classify_exception(exc)
        # a clean refusal is no fault, as for an operator cell (path rejected, outcome ok): the
        # step failed (result fail), the backend said why; the handler still checks the device
        rejected = kind.outcome == "rejected"
        outcome = Outcome.oom if kind.outcome == "oom" else Outcome.ok if rejected else Outcome.error
        text = f"{kind.outcome}: {type(exc).__name__}: {str(exc).splitlines()[0][:400] if str(exc) else ''}"
        return StepResult(result=CheckResult.failed, outcome=outcome, evidence=text, rejected=rejected,
                          seconds=round(time.perf_counter() - start, 4))


def observe(run: Run, body: Callable[[], T]) -> T:
    """``body()`` with the adapter's fallback observation folded into ``run`` (also when it raises)."""
    seen = None
    try:
        with run.adapter.observe_fallback() as seen:
            return body()
    finally:
        if seen is not None:
            if seen.state.value == "unknown" and not run.fallback_ops:
                run.fallback_state = "unknown"
            run.fallback_ops.update(seen.ops)
            run.step_ops.update(seen.ops)


def move(run: Run) -> StepResult:
    """``model.to(device)`` on a copy of the CPU model, and the inputs; checks every tensor moved."""
    start = time.perf_counter()
    model = observe(run, lambda: copy.deepcopy(run.workload.model).to(run.device))
    run.adapter.synchronize()
    seconds = time.perf_counter() - start
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device != run.device]
    run.model, run.inputs = model, to_device(run.workload.inputs, run.device)
    if left:
        return StepResult(result=CheckResult.failed, outcome=Outcome.wrong, seconds=round(seconds, 4),
                          evidence=f"{len(left)} tensors stayed off the device: {', '.join(left[:5])}")
    n = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    return StepResult(result=CheckResult.passed, seconds=round(seconds, 4), evidence=f"{n} parameters and buffers moved")


def _reference(wl: Workload, plain: bool = False) -> object:
    """CPU reference: same dtype for float32 (and exact outputs), float32 upcast for low precision."""
    model = copy.deepcopy(wl.model)
    lowp = any(p.dtype in (torch.bfloat16, torch.float16) for p in model.parameters())
    with torch.no_grad():
        if lowp and (wl.run is None or plain):
            return forward(wl, model.float(), upcast(wl.inputs), plain)
        return forward(wl, model, wl.inputs, plain)


def inference(run: Run) -> StepResult:
    """The forward pass on the device vs the CPU reference (within the workload's tolerance)."""
    wl = run.workload
    model = run.on_device()
    start = time.perf_counter()
    with torch.no_grad():
        out = observe(run, lambda: forward(wl, model, run.inputs, run.plain))
        run.adapter.synchronize()
    seconds = time.perf_counter() - start
    run.eager_out = to_cpu(out)
    ok, err, scale, why = compare(run.eager_out, _reference(wl, run.plain), wl.rtol, wl.atol)
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      evidence=why or "matches the CPU reference", seconds=round(seconds, 4), max_abs_error=err,
                      ref_max_abs=scale, rtol=wl.rtol, atol=wl.atol)


def _train_once(wl: Workload, model: torch.nn.Module, inputs: tuple) -> list[torch.Tensor]:
    """One SGD step: the loss, every gradient and every updated parameter (detached)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.zero_grad()
    out = model(*inputs)
    loss = wl.loss_fn(out) if wl.loss_fn is not None else torch.stack([t.float().sum() for t in _outs(out)]).sum()
    loss.backward()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    opt.step()
    model.eval()
    return [loss.detach(), *grads, *(p.detach() for p in model.parameters())]


def _outs(out: torch.Tensor | Iterable[object]) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def training(run: Run, backend: CompileBackend | None = None) -> StepResult:
    """One training step on the device (loss, gradients, optimizer update) vs the same step on the
    CPU; with ``backend`` (compile mode) the model is compiled with it, so the forward and the
    backward both run as compiled graphs."""
    wl = run.workload
    # a fresh device copy from the CPU model (deepcopy of a device module copies device storages,
    # which crashes refaccel on BatchNorm's int64 counter: a runtime bug this path does not hide elsewhere)
    model = copy.deepcopy(wl.model).to(run.device)
    if backend is not None:
        model = cast(torch.nn.Module, torch.compile(model, backend=backend))  # an OptimizedModule
    start = time.perf_counter()
    got = observe(run, lambda: _train_once(wl, model, run.inputs))
    run.adapter.synchronize()
    seconds = time.perf_counter() - start
    want = _train_once(wl, copy.deepcopy(wl.model), wl.inputs)
    ok, err, scale, why = compare(got, want, wl.rtol * 10, wl.atol * 10)
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      evidence=((why + " (loss, grads, updated parameters)") if why else
                                "loss, gradients and updated parameters match the CPU step")
                      + (f"; forward and backward compiled with {backend}" if backend is not None else ""),
                      seconds=round(seconds, 4), max_abs_error=err, ref_max_abs=scale, rtol=wl.rtol * 10, atol=wl.atol * 10)


def state_dict_round_trip(run: Run) -> StepResult:
    """``torch.save`` of the device state_dict, ``torch.load`` back, load into a fresh copy: same outputs."""
    wl = run.workload
    start = time.perf_counter()
    buf = io.BytesIO()
    model = run.on_device()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    off = [k for k, t in loaded.items() if t.device != run.device]
    fresh = copy.deepcopy(wl.model)
    for p in fresh.parameters():
        p.data = torch.zeros_like(p.data)
    fresh = fresh.to(run.device)
    fresh.load_state_dict(loaded)
    with torch.no_grad():
        a, b = forward(wl, model, run.inputs), forward(wl, fresh, run.inputs)
    ok, err, _, why = compare(a, b, 0.0, 0.0)
    seconds = round(time.perf_counter() - start, 4)
    if off:
        return StepResult(result=CheckResult.failed, outcome=Outcome.wrong, seconds=seconds,
                          evidence=f"loaded tensors not on {run.device}: {', '.join(off[:5])}")
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      seconds=seconds, max_abs_error=err,
                      evidence=why or f"{len(loaded)} tensors saved and loaded on {run.device}; outputs identical")
