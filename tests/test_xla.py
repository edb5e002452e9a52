"""The ``xla`` adapter on torch_xla's CPU device (``PJRT_DEVICE=CPU``): a real third-party backend.

Run by ``make test-xla`` (torch 2.9 + torch_xla 2.9 in their own environment); skipped where
torch_xla is not installed. torch_xla's own metrics counters are read here independently of the
adapter, so the paths the probes report are checked against the backend's own account; the crash
test uses a real OpInfo input that kills the process inside torch_xla (``roll`` of an empty tensor).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("torch_xla") is None:
    pytest.skip(
        "torch_xla is not installed in this environment (make test-xla builds one with torch 2.9 + torch_xla 2.9)",
        allow_module_level=True,
    )

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402

from opmatrix.backend import get_adapter  # noqa: E402
from opmatrix.probes.handlers import TASK_HANDLERS  # noqa: E402
from opmatrix.probes.ops.engine import probe_task  # noqa: E402
from opmatrix.probes.runner import Task, run  # noqa: E402
from opmatrix.schema import ExecPath, FallbackState, Layout, Mode, Outcome  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


def _aten_counters() -> dict[str, int]:
    """torch_xla's fallback counters, read directly (not through the adapter)."""
    return {n: met.counter_value(n) for n in met.counter_names() if n.startswith("aten::")}


def _grown(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {n for n, v in after.items() if v > before.get(n, 0)}


@pytest.fixture(scope="module")
def xla():
    """The set-up adapter (torch_xla's CPU client in this process)."""
    adapter = get_adapter("xla")
    adapter.setup()
    return adapter


def _cells(record, *, op=None, rank=None, layout=None, mode=Mode.eager):
    return [
        c
        for c in record.cells
        if (op is None or c.op == op)
        and (rank is None or c.rank == rank)
        and (layout is None or c.layout == layout)
        and c.mode == mode
    ]


class TestAdapter:
    """Identity, versions, devices and health of the xla device."""

    def test_identity_and_versions(self, xla):
        """The dispatch key is XLA; versions name torch_xla, the PJRT platform and the device kind."""
        assert (xla.name, xla.device_type, xla.dispatch_key) == ("xla", "xla", "XLA")
        assert xla.device().type == "xla"
        v = xla.versions()
        assert v["backend_version"].startswith(f"torch_xla {torch_xla.__version__}")
        assert v["isa"].startswith("CPU:")
        assert v["driver"]
        assert [d.name for d in xla.devices()] == ["CPU:0"]
        assert xla.compile_backend() == "openxla"

    def test_health_check_passes_while_a_failed_graph_is_alive(self, xla):
        """A graph that failed to lower does not make a healthy device look poisoned."""
        out = torch.cumprod(torch.zeros(0, device=xla.device()), 0)  # XLA cannot lower this input
        with pytest.raises(RuntimeError, match="cumprod"):
            xla.synchronize()
        assert xla.health_check() is None
        del out
        xla.synchronize()  # once the failed output is gone, the device syncs again

    def test_observe_fallback_reads_counters_after_execution(self, xla):
        """Counters that grew during the block are the observed ops; a lowered op observes none."""
        x = torch.tensor([3.0, 1.0, 3.0], device=xla.device())
        with xla.observe_fallback() as seen:
            torch.unique(x)
        assert (seen.state, seen.ops) == (FallbackState.observed, ["aten::_unique2"])
        with xla.observe_fallback() as seen:
            x + x
        assert (seen.state, seen.ops) == (FallbackState.not_observed, [])

    def test_a_host_scalar_read_is_not_a_fallback(self, xla):
        """torch_xla counts ``.item()`` as aten::_local_scalar_dense; the adapter does not call it a fallback."""
        x = torch.tensor([3.0, 1.0], device=xla.device())
        before = _aten_counters()
        with xla.observe_fallback() as seen:
            assert x.sum().item() == 4.0
        assert _grown(before, _aten_counters()) == {"aten::_local_scalar_dense"}
        assert (seen.state, seen.ops) == (FallbackState.not_observed, [])


class TestPaths:
    """Probe paths agree with torch_xla's registrations and its own counters."""

    @pytest.mark.parametrize(("source", "op", "rank"), [("add", "aten.add.Tensor", 2), ("mm", "aten.mm.default", 2)])
    def test_lowered_ops_are_native(self, xla, source, op, rank):
        """add and mm have XLA kernels, run without fallback counters and match the CPU."""
        before = _aten_counters()
        lowered = met.counter_value(f"xla::{op.split('.')[1]}") or 0
        record = probe_task(xla, source, "float32", options={"compile": "off"})
        assert _grown(before, _aten_counters()) == set()
        assert (met.counter_value(f"xla::{op.split('.')[1]}") or 0) > lowered
        cells = _cells(record, op=op, rank=rank, layout=Layout.contiguous)
        assert cells, [(c.op, c.rank, c.layout) for c in record.cells]
        for cell in cells:
            assert cell.result.path is ExecPath.native
            assert cell.result.outcome is Outcome.ok
            assert cell.result.fallback.state is FallbackState.not_observed

    def test_fallback_ops_are_fallback_and_agree_with_counters(self, xla):
        """unique falls back through aten::_unique2: every cell is fallback and names every counter that
        grew while the task ran (beside the host ops the call tree saw inside the CPU fallback). A
        sample the CPU refuses (unique_dim over a 0-sized dimension) is refused identically by the host
        kernel the fallback ran: that cell is rejected, its fallback evidence kept."""
        before = _aten_counters()
        record = probe_task(xla, "unique", "float32", options={"compile": "off"})
        grown = _grown(before, _aten_counters())
        assert "aten::_unique2" in grown
        cells = _cells(record)
        valid = [c for c in cells if "no reference" not in (c.result.note or "")]
        assert valid and {c.result.path for c in valid} == {ExecPath.fallback}
        for c in cells:
            if c not in valid:
                assert (c.result.path, c.result.outcome) == (ExecPath.rejected, Outcome.ok), c
                assert "refuses it exactly as the CPU does" in (c.result.note or "")
        assert all(c.result.fallback.state is FallbackState.observed for c in cells)
        assert grown <= set().union(*(c.result.fallback.ops for c in cells))

    def test_argument_dependent_fallback_matches_counters_per_sample(self, xla):
        """max_pool2d is lowered for some arguments and falls back for others: the cell is mixed, counts
        both, and names exactly the counter that grew."""
        before = _aten_counters()
        record = probe_task(
            xla, "nn.functional.max_pool2d", "float32",
            options={"compile": "off", "autograd": False, "max_samples": 24, "layouts": ["contiguous"]},
        )
        grown = _grown(before, _aten_counters())
        (cell,) = _cells(record, op="aten.max_pool2d_with_indices.default", rank=4)
        assert cell.result.fallback.ops == sorted(grown) == ["aten::max_pool2d_with_indices"]
        assert cell.result.path is ExecPath.fallback  # the worst path of its samples, never hidden
        assert cell.result.mixed
        assert cell.result.samples.by_path[ExecPath.native] > 0
        assert cell.result.samples.by_path[ExecPath.fallback] > 0

    def test_compile_mode_runs_through_openxla(self, xla):
        """compile cells run through torch_xla's dynamo backend and keep the eager path."""
        record = probe_task(
            xla, "add", "float32",
            options={"compile": "all", "autograd": False, "max_samples": 1, "layouts": ["contiguous"]},
        )
        compiled = _cells(record, op="aten.add.Tensor", mode=Mode.compile)
        assert compiled
        assert {(c.result.path, c.result.outcome) for c in compiled} == {(ExecPath.native, Outcome.ok)}


# -- crash recording -----------------------------------------------------------------------------


def test_an_input_that_kills_the_process_is_crashed_on_its_cell_and_nothing_else_is_lost(tmp_path: Path):
    """torch_xla 2.9 dies by SIGFPE compiling ``roll`` of an empty (0, 0, 0) tensor (OpInfo's first
    roll sample): that unit is ``crashed`` with its signal in the cell's ``input: empty`` group; the
    task's other samples and layouts and the next task are all recorded."""
    options = {"compile": "off", "autograd": False, "max_samples": 2, "layouts": ["contiguous", "transposed"]}
    tasks = [
        Task("roll|float32", "op", {"source": "roll", "dtype": "float32", "options": options}, order=0),
        Task("add|float32", "op", {"source": "add", "dtype": "float32", "options": options}, order=1),
    ]
    summary = run(tasks, command="runner test", backend="xla", out_dir=tmp_path, workers=1, timeout=300, progress=False,
        handlers=TASK_HANDLERS)
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    records = {r["task"]: r for r in map(json.loads, lines[1:])}
    assert sorted(records) == ["add|float32", "roll|float32"]
    roll = {(c["rank"], c["layout"], c["result"]["conditions"].get("input")): c["result"]
            for c in records["roll|float32"]["cells"]}
    # the crash hit exactly the empty sample: the cell splits, the empty group holds the fault
    crashed, ran = roll[(3, "contiguous", "empty")], roll[(3, "contiguous", "nonempty")]
    assert crashed["outcome"] == "crashed"
    assert crashed["error"]["signal"] == "SIGFPE"
    assert "Floating point exception" in crashed["error"]["message"]
    assert (crashed["samples"]["probed"], crashed["samples"]["passed"]) == (1, 0)
    # the crashed sample keeps the kernel the dispatcher chose (XLA's roll), never "rejected"
    assert crashed["path"] == "native" and not crashed["samples"].get("by_path")
    # the (5, 5, 5) sample of the same cell ran after the worker was replaced
    assert (ran["path"], ran["outcome"], ran["samples"]["probed"], ran["samples"]["passed"]) == ("native", "ok", 1, 1)
    assert (roll[(3, "transposed", None)]["path"], roll[(3, "transposed", None)]["outcome"]) == ("native", "ok")
    add = records["add|float32"]["cells"]
    assert add and {(c["result"]["path"], c["result"]["outcome"]) for c in add} == {("native", "ok")}
    assert (summary.restarts, summary.faults.get("crashed")) == (1, 1)


def test_a_failed_graph_does_not_poison_the_ops_after_it(tmp_path: Path):
    """linalg.pinv's failing samples used to leave a broken lazy tensor alive in an exception's
    reference cycle; torch_xla then failed every later sync ("Check failed: tensor_data") and every
    later op of the worker read ``error``. The engine now frees failed calls' leftovers: special.i1
    after pinv in the same worker runs as it does in a fresh one."""
    options = {"compile": "off", "autograd": False, "layouts": ["contiguous"]}
    tasks = [Task(f"{src}|float32", "op", {"source": src, "dtype": "float32", "options": options}, order=i)
             for i, src in enumerate(["linalg.pinv", "special.i1"])]
    run(tasks, command="runner test", backend="xla", out_dir=tmp_path, workers=1, timeout=300, progress=False,
        handlers=TASK_HANDLERS)
    records = {r["task"]: r for r in map(json.loads, (tmp_path / "journal.jsonl").read_text().splitlines()[1:])}
    pinv = [c["result"] for c in records["linalg.pinv|float32"]["cells"]]
    assert any(r["outcome"] == "error" for r in pinv)  # the failures that used to poison the worker
    assert all("tensor_data" not in (r.get("error") or {}).get("message", "") for r in pinv)
    i1 = [c["result"] for c in records["special.i1|float32"]["cells"]]
    assert i1 and {r["outcome"] for r in i1} == {"ok"}, i1


def _cumprod_but_empty(x):
    # refuses an empty input in eager on the device, as a backend's Python kernel may; compiled,
    # the refusal is traced away and XLA fails to lower cumprod of an empty tensor
    if x.numel() == 0 and x.device.type != "cpu" and not torch.compiler.is_compiling():
        raise NotImplementedError("cumprod_but_empty: empty inputs are not supported")
    return torch.cumprod(x, 0)


def test_a_failed_compiled_graph_does_not_poison_the_ops_after_it(xla):
    """An empty input refused in eager is tried compiled (is it available there?): XLA fails to
    lower it, and what the failed graph held lived through the collections compiling made. A
    young-generation collection left it alive, so every later eager call of the task failed
    ("Error while lowering" again, then "Check failed: tensor_data"), as torch_xla's cumprod did
    in a full run. The engine collects fully after a failed compiled call."""
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput

    from opmatrix.probes.ops.source import OpEntry
    from opmatrix.probes.ops.state import InlineContext, engine_state

    def samples(op, device, dtype, requires_grad, **kw):
        for shape in ((4,), (0, 4), (5, 5, 5), (3, 4, 5)):
            yield SampleInput(torch.rand(shape, device=device, dtype=dtype))

    info = OpInfo("xlatest.cumprod_but_empty", op=_cumprod_but_empty, dtypes=(torch.float32,),
                  sample_inputs_func=samples, supports_autograd=False)
    ctx = InlineContext(xla)
    engine_state(ctx).ops[info.name] = OpEntry(info.name, info)
    rec = probe_task(ctx, info.name, "float32", options={"layouts": ["contiguous", "transposed"]})
    failed = [c for c in rec.cells if c.mode is Mode.compile and c.result.outcome is Outcome.error]
    assert failed and "lowering" in failed[0].result.error.message  # the compiled call that failed
    later = [c for c in rec.cells if c.rank == 3]
    assert later and {(c.result.path, c.result.outcome) for c in later} == {(ExecPath.native, Outcome.ok)}, [
        (c.layout, c.result.error) for c in later]


def test_to_sparse_keeps_its_observed_fallback_when_the_copy_back_fails(tmp_path: Path):
    """torch_xla's to_sparse runs on the host, then cannot bring the sparse result back (XLA has no
    sparse tensors): the error reads like a rejection, but the CPU computes the sample and the
    host did the work, so the cell is fallback with outcome error and its copies, not rejected."""
    options = {"compile": "off", "autograd": False, "layouts": ["contiguous"], "max_samples": 2}
    tasks = [Task("to_sparse|float32", "op", {"source": "to_sparse", "dtype": "float32", "options": options})]
    run(tasks, command="runner test", backend="xla", out_dir=tmp_path, workers=1, timeout=300, progress=False,
        handlers=TASK_HANDLERS)
    record = json.loads((tmp_path / "journal.jsonl").read_text().splitlines()[1])
    cells = [c["result"] for c in record["cells"]]
    assert cells and {(r["path"], r["outcome"]) for r in cells} == {("fallback", "error")}, cells
    assert all(r["fallback"]["state"] == "observed" and r["error"]["message"] for r in cells)


# -- the CLI ------------------------------------------------------------------------------------


def test_probe_cli_reports_native_add_mm_and_fallback_unique(tmp_path: Path):
    """``opmatrix probe --backend xla`` in spawned workers: add/mm native, unique fallback, exit 0."""
    out = tmp_path / "x"
    done = run_cli(
        "probe", "--backend", "xla", "--ops", "add,mm,unique", "--dtypes", "float32", "--no-runtime",
        "--layouts", "contiguous", "--workers", "1", "--quiet", "--out", str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]

    def query(op: str) -> dict:
        q = run_cli("query", str(out / "matrix.yaml"), op, "--dtype", "float32", "--rank", "2",
                    "--layout", "contiguous", "--json")
        assert q.returncode == 0, q.stderr
        return json.loads(q.stdout)

    assert query("aten.add.Tensor")["path"] == "native"
    assert query("aten.mm.default")["path"] == "native"
    unique = query("aten._unique2.default")
    assert unique["path"] == "fallback"
    assert "aten::_unique2" in unique["entry"]["fallback"]["ops"]  # with the host ops inside the fallback
