"""The small rules behind truth on foreign backends: the bring-up health check, positive evidence
of poison, overloads resolved per rank and dtype, and which units a fault rules out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from opmatrix.backend.base import Adapter, bringup_check
from opmatrix.probes.ops import observe
from opmatrix.probes.ops.faults import SkipPlan
from opmatrix.probes.runner.plan import COMPILE_TIMEOUT_FACTOR
from opmatrix.probes.runner.runner import fault_budget
from opmatrix.probes.runner.task import Skip
from opmatrix.schema import UnitId


def test_health_check_uses_only_the_bringup_opset() -> None:
    """Allocation and copies only: never an arithmetic op that may be the one that faulted."""
    rec = observe.LeafRecorder()
    with rec:
        assert Adapter().health_check() is None
    # detach: reading the host copy's bytes (numpy), on the host
    assert set(rec.ops) <= {"aten.empty.memory_format", "aten.copy_.default", "aten.detach.default"}, rec.ops


def test_bringup_check_names_what_failed() -> None:
    """A device that cannot allocate fails the check with the reason, it does not raise."""
    problem = bringup_check("no_such_device")
    assert problem is not None and "bring-up check" in problem


class _Flaky(Adapter):
    def __init__(self, answers: list[str | None]):
        super().__init__()
        self.answers = answers

    def health_check(self) -> str | None:
        return self.answers.pop(0)


def test_poisoned_needs_the_check_to_have_passed_before() -> None:
    """Positive evidence only: a check that never passed says nothing about a fault."""
    never = _Flaky(["broken", "broken"])
    never.health_baseline()
    assert never.poisoned_after_fault() is None
    broke = _Flaky([None, "copy failed"])
    broke.health_baseline()
    assert "passed before the fault" in (broke.poisoned_after_fault() or "")


def test_overload_signature_includes_rank_and_dtype() -> None:
    """interpolate on rank 3 and rank 4 inputs calls different overloads: different keys."""
    r3 = (torch.rand(1, 2, 4), (), {"scale_factor": 2.0, "mode": "nearest"})
    r4 = (torch.rand(1, 2, 4, 4), (), {"scale_factor": 2.0, "mode": "nearest"})
    assert observe.signature_of(r3) != observe.signature_of(r4)
    assert observe.signature_of(r4) != observe.signature_of((r4[0].double(), (), r4[2]))
    calls3 = observe.top_level_overloads(F.interpolate, r3)
    calls4 = observe.top_level_overloads(F.interpolate, r4)
    assert any("upsample_nearest1d" in c for c in calls3) and any("upsample_nearest2d" in c for c in calls4)


@pytest.mark.parametrize("fn, values", [
    (torch.add, (torch.rand(3, 2), (torch.rand(3, 2),), {"alpha": 2})),
    (torch.softmax, (torch.rand(2, 5), (1,), {})),
    (F.linear, (torch.rand(2, 3), (torch.rand(4, 3), torch.rand(4)), {})),
    (torch.nn.functional.normalize, (torch.rand(2, 3), (), {})),
    (lambda x, y: x.add_(y), (torch.rand(3), (torch.rand(3),), {})),
])
def test_pre_dispatch_recorder_sees_what_make_fx_traces(fn, values) -> None:
    """The cheap recorder and make_fx(pre_dispatch=True) name the same top-level ops."""
    before = values[0].clone()
    assert observe._pre_dispatch_overloads(fn, values) == observe._make_fx_overloads(fn, values)
    assert torch.equal(values[0], before)  # an in-place op ran on a copy, not on the sample


def test_pre_dispatch_recorder_sees_data_dependent_ops() -> None:
    """make_fx cannot trace Tensor.item (a data-dependent read); recording on real inputs can."""
    assert observe.top_level_overloads(lambda t: t.item(), (torch.tensor(3.0), (), {})) == ["aten.item.default"]
    assert not torch._ops._len_torch_dispatch_stack_pre_dispatch()  # the mode is off again


def test_samples_come_from_opinfo_without_its_stack_crawl() -> None:
    """The samples are OpInfo's own, at the same seed, without its TrackedInputIter."""
    import random

    from opmatrix.probes.ops.source import _sample_iter, all_ops

    entry = next(e for e in all_ops() if e.full_name == "nn.functional.conv2d")
    torch.manual_seed(0)
    random.seed(0)
    ours = list(_sample_iter(entry.info, torch.float32))
    torch.manual_seed(0)
    random.seed(0)
    theirs = list(entry.info.sample_inputs("cpu", torch.float32, set_seed=False))
    assert len(ours) == len(theirs) > 3
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.input, b.input) and a.kwargs == b.kwargs


def _walk(plan: SkipPlan, order: list[str]) -> dict[str, str]:
    return {uid: (d if isinstance(d, str) else d.outcome) for uid in order
            if (d := plan.decide(UnitId.parse(uid))) is not None}


def test_eager_fault_skips_only_that_samples_later_layouts() -> None:
    """roll dies on empty inputs only: the other samples run, and earlier layouts too."""
    order = [f"{i}/{lay}/eager" for i in ("0", "1", "2") for lay in ("contiguous", "transposed", "expanded")]
    plan = SkipPlan.from_runner({"1/transposed/eager": Skip("crashed", "SIGSEGV")}, None)
    got = _walk(plan, order)
    assert got["1/contiguous/eager"] == "run" and got["1/transposed/eager"] == "crashed"
    assert got["1/expanded/eager"] == "not_run" and got["2/contiguous/eager"] == "run"
    assert list(plan.not_run) == ["1/expanded/eager"]


def test_backward_fault_skips_the_backward_for_the_rest_of_the_task() -> None:
    order = ["0/contiguous/eager", "0/contiguous/backward", "1/contiguous/eager", "1/contiguous/backward"]
    plan = SkipPlan.from_runner({"0/contiguous/backward": Skip("crashed", "SIGSEGV")}, None)
    got = _walk(plan, order)
    assert got == {"0/contiguous/eager": "run", "0/contiguous/backward": "crashed",
                   "1/contiguous/eager": "run", "1/contiguous/backward": "not_run"}


def test_skip_rest_keeps_units_before_the_last_fault() -> None:
    """Past the fault budget, what ran before the last fault runs again (results kept); what
    comes after it is listed as not run, with the reason, never as a fault cell."""
    order = [f"{i}/contiguous/eager" for i in range(5)]
    rest = Skip("crashed", "not run: the task faulted 3 times; last: SIGSEGV",
                not_run="not run: the task faulted 3 times; last: SIGSEGV")
    plan = SkipPlan.from_runner({"1/contiguous/eager": Skip("crashed", "x"), "2/contiguous/eager": Skip("crashed", "x")}, rest)
    got = _walk(plan, order)
    assert got == {"0/contiguous/eager": "run", "1/contiguous/eager": "crashed", "2/contiguous/eager": "crashed",
                   "3/contiguous/eager": "not_run", "4/contiguous/eager": "not_run"}
    assert plan.not_run["3/contiguous/eager"].startswith("not run: the task faulted 3 times")


def test_units_past_the_fault_budget_are_not_run_by_the_skips_field_not_its_words() -> None:
    """Whether a unit never ran is the runner's typed ``not_run``, never words in a message: a
    crash that says "could not run" is a fault whose later units are listed with its message."""
    order = [f"{i}/contiguous/eager" for i in range(3)]
    crash = Skip("crashed", "RuntimeError: could not run 'aten::foo' with arguments from the backend")
    plan = SkipPlan.from_runner({"0/contiguous/eager": Skip("crashed", "x")}, crash)
    assert _walk(plan, order)["1/contiguous/eager"] == "not_run"
    assert plan.not_run["1/contiguous/eager"] == f"not run: {crash.message}"
    said = "not run: the task faulted 4 times; last: SIGSEGV"
    plan = SkipPlan.from_runner({"0/contiguous/eager": Skip("crashed", "x")}, Skip("crashed", "SIGSEGV", not_run=said))
    _walk(plan, order)
    assert plan.not_run == {"1/contiguous/eager": said, "2/contiguous/eager": said}
    with pytest.raises(ValueError, match="unit id"):
        SkipPlan.from_runner({"1:contiguous:eager": crash}, None)  # ids are parsed, not matched as text


def test_the_host_computes_a_unit_only_when_the_cpu_takes_its_layout() -> None:
    """Fallback then a rejection-looking error is fallback/error only when the CPU computes this
    very unit; a shared reference from another layout is not enough when the CPU refuses this one."""
    from opmatrix.probes.ops.eager import _host_computes
    from opmatrix.probes.ops.judging import Reference

    def refuses() -> None:
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor ...")

    ref = Reference(object(), None)
    assert _host_computes(None, None) is False
    assert _host_computes(ref, None) is True  # the unit's own reference
    assert _host_computes(ref, lambda: ref) is True  # shared, and the CPU takes this layout too
    assert _host_computes(ref, refuses) is False
    # computed only in a wider dtype (no CPU kernel at this one): the host does not compute it
    assert _host_computes(Reference(object(), None, widened="float32"), None) is False


def test_a_unit_that_compiles_gets_more_time_before_it_is_hung() -> None:
    """inductor compiling a workload took over 60 s on a loaded machine: slow, not hung."""
    from opmatrix.probes.handlers import TASK_HANDLERS
    from opmatrix.probes.runner.task import Task, resolve_handler

    op, workload = (resolve_handler(TASK_HANDLERS[k]) for k in ("op", "workload"))
    softmax = Task("softmax|float32", "op", {"source": "softmax", "dtype": "float32"})
    assert op.unit_timeout(softmax, "3/contiguous/eager", 60) == 60
    assert op.unit_timeout(softmax, "3/contiguous/compile", 60) == 60 * COMPILE_TIMEOUT_FACTOR
    assert op.unit_timeout(softmax, "3/contiguous/dynamic", 60) == 60 * COMPILE_TIMEOUT_FACTOR  # it compiles too
    # a workload's mode is in its payload: every step of a compile-mode task compiles
    eager = Task("workload:mlp|float32|eager", "workload", {"workload": "mlp", "dtype": "float32", "mode": "eager"})
    compiled = Task("workload:mlp|float32|compile", "workload", {"workload": "mlp", "dtype": "float32", "mode": "compile"})
    assert workload.unit_timeout(eager, f"{eager.id}:inference", 60) == 60
    assert workload.unit_timeout(compiled, f"{compiled.id}:inference", 60) == 60 * COMPILE_TIMEOUT_FACTOR


def test_a_process_check_outlives_its_case_hosts_deadline() -> None:
    """A runtime check run in a fresh case host has a deadline of its own (a real hang is its finding);
    the runner must not kill it earlier: under load 10 a spawn child took over 60 s to import torch and
    dataloader_spawn, forkserver and parent_continues read 'hung: no progress within 60s'."""
    from opmatrix.probes.handlers import TASK_HANDLERS
    from opmatrix.probes.runner.task import resolve_handler
    from opmatrix.probes.runtime.checks import isolated_deadline, plan_runtime_tasks

    runtime = resolve_handler(TASK_HANDLERS["runtime"])
    tasks = {t.payload["check"]: t for t in plan_runtime_tasks("refaccel", "g2")}
    assert runtime.unit_timeout(tasks["dataloader_spawn"], "dataloader_spawn", 60) > isolated_deadline()
    assert runtime.unit_timeout(tasks["allocation"], "allocation", 60) == 60


def test_fault_budget_grows_with_units() -> None:
    assert fault_budget(0) == 3 and fault_budget(100) >= 9  # 100 units with 8 bad inputs: 92 recorded


_G1_WHERE = """
import json
from opmatrix.backend.registry import get_adapter
from opmatrix.probes.ops.engine import probe_task
adapter = get_adapter("refaccel", "g1")
adapter.setup()
out = {}
for dtype in ("int64", "int32"):
    rec = probe_task(adapter, "where", dtype, options={"layouts": ["contiguous"], "compile": "off"})
    out[dtype] = sorted({(c.result.path.value, c.result.fallback.state.value, c.result.fallback.copies_per_call or 0)
                         for c in rec.cells})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_refaccel_g1_where_int64_falls_back_inside_its_kernel(tmp_path: Path) -> None:
    """g1's where kernel copies int64 inputs to the host: registered, counter silent, observed
    by the call tree as fallback with its copies; int32 stays native."""
    env = {**os.environ, "OPMATRIX_CACHE_DIR": str(tmp_path), "KINETO_LOG_LEVEL": "6"}
    proc = subprocess.run([sys.executable, "-c", _G1_WHERE], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["int64"] and all(path == "fallback" and state == "observed" and copies >= 3
                                for path, state, copies in got["int64"]), got
    assert got["int32"] and all(path == "native" and state == "not_observed" for path, state, _ in got["int32"]), got


def test_a_clean_refusal_is_rejected_and_no_fault() -> None:
    """The fast loop's own check of the rule (before only a slow test held it): refaccel g2's
    device memory cannot hold complex64, and says so; every add complex64 cell is rejected with
    outcome ok (never error), and names the refusal; so is addcmul, which has no kernel and which
    the host fallback may not serve."""
    import opmatrix.backend.refaccel as refaccel
    from opmatrix.backend.registry import get_adapter
    from opmatrix.probes.ops.engine import probe_task

    refaccel.install()
    if refaccel.installed_generation() != "g2":
        pytest.fail("this process installed refaccel g1 first; the test needs g2 (one generation per process)")
    adapter = get_adapter("refaccel", "g2")
    adapter.setup()
    rec = probe_task(adapter, "add", "complex64", options={"layouts": ["contiguous"], "compile": "off"})
    assert rec.cells, rec
    assert {(c.result.path.value, c.result.outcome.value) for c in rec.cells} == {("rejected", "ok")}, rec.cells
    assert all(c.result.error is not None and "complex64" in c.result.error.message for c in rec.cells)
    # a kernel-less op the host fallback may not serve: the call itself refuses (not the staging)
    rec = probe_task(adapter, "addcmul", "float32", options={"layouts": ["contiguous"], "compile": "off"})
    eager = [c for c in rec.cells if c.mode.value == "eager"]
    assert eager and {(c.result.path.value, c.result.outcome.value) for c in eager} == {("rejected", "ok")}, eager
