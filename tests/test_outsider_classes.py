"""What a vendor meets following the README with a PrivateUse1 package of their own, one class
each, on the repository's own backend (``tests/toyaccel.py``, through ``opmatrix`` as a user
runs it):

- a device module whose seeding is broken: sample generation seeds the host's generator only, so
  the probe still has cells (before, ``torch.manual_seed`` called the backend's
  ``manual_seed_all`` and every task read "OpInfo yields no samples");
- a module that imports but registers no device: the import check says so (before: the import
  passed and the driver check failed with "No module named 'torch.privateuseone'");
- a folder in the current directory named like the backend's package: doctor's child processes
  import the installed package, as the CLI does (before: ``python -m`` children imported the
  folder);
- a worker that dies in a cell's backward is a process fault of the run (``faulted cells``, exit
  1), as in a forward (before: only the cell's autograd said so, and ``probe`` exited 0);
- ``--devices 0,1`` on a generic PrivateUse1 backend with two devices: workers asked for the
  devices before importing the module and saw device 0 alone (the probe failed: "has no device 1");
- a dtype refused in the vendor's own words, by a C++ kernel's ``TORCH_CHECK`` or at allocation:
  ``rejected`` because the message names the dtype (before: ``native``/``error`` and
  ``unknown``/``error``, since no phrase of the refusal table was in it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opmatrix.backend.base import dtype_named

from .test_truth_classes import _all
from .test_truth_toyaccel import ROOT, _kernel_build_dir, _probe


@pytest.mark.slow
def test_a_device_module_whose_seeding_raises_still_gets_cells(tmp_path: Path) -> None:
    proc, matrix = _probe(tmp_path / "out", "mul,zeros", "float32", TOYACCEL_SEED_FAILS="1")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert {"aten.mul.Tensor", "aten.zeros.default"} <= set(matrix["operators"]), proc.stdout[-2000:]
    assert not matrix.get("skipped"), matrix.get("skipped")


def _doctor(cwd: Path, backend: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "TOYACCEL_FLAVOUR": "fallback", **env}
    script = Path(sys.executable).with_name("opmatrix")  # the console script, as the README runs it
    return subprocess.run([str(script), "doctor", "--backend", backend], env=full, capture_output=True, text=True,
                          timeout=600, cwd=cwd)


@pytest.mark.slow
def test_a_module_that_registers_no_device_fails_the_import_check(tmp_path: Path) -> None:
    proc = _doctor(tmp_path, "privateuse1:json")
    assert proc.returncode == 1, proc.stdout[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("import "))
    assert "FAIL" in line and "registered no PrivateUse1 device" in line, line
    assert "privateuseone" not in proc.stdout, proc.stdout[-3000:]


@pytest.mark.slow
def test_a_folder_named_like_the_package_does_not_shadow_it_in_child_processes(tmp_path: Path) -> None:
    shadow = tmp_path / "tests"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the folder in the current directory was imported')\n")
    proc = _doctor(tmp_path, "privateuse1:tests.toyaccel_plugin")
    assert "the folder in the current directory was imported" not in proc.stdout, proc.stdout[-3000:]
    for check in ("import", "driver", "enumerate", "allocation", "spawn"):
        line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith(check + " "))
        assert " pass " in line, line


@pytest.mark.parametrize(("message", "dtype", "named"), [
    ("TA_E_DTYPE(0x21): copysign kernel accepts Float, got Double", "float64", "Double"),
    ("no device memory layout for element type torch.complex128", "complex128", "complex128"),
    ("QX matrix engine: operands must be fp32 or bf16 (got FP64)", "float64", "fp64"),
    ("QX_E_DTYPE: abs kernel only accepts Float, got Int", "int32", "Int"),
    ("mm: expected kFloat, got kDouble", "float64", "Double"),
    ("aclnnAbs: tensor self dtype DT_DOUBLE is not in the dtype list [DT_FLOAT]", "float64", "Double"),
    ("dtype DT_INT32 is outside the vector unit's formats", "int32", "int32"),
    ("mm: expected kFloat, got kDouble", "int32", None),
    # an Int inside another word, the lowercase word "int", a dtype the sample does not hold,
    # an internal assert and a message that names nothing are no refusal of the sample's dtype
    ("IntArrayRef overflow in kernel", "int32", None),
    ("expected an int argument", "int32", None),
    ("TA_E_DTYPE(0x21): copysign kernel accepts Float, got Double", "int32", None),
    ("INTERNAL ASSERT FAILED: Double buffer corrupted", "float64", None),
    # a runtime that failed doing the work names the dtype of the kernel it ran, refusing nothing
    ("toy runtime: stream synchronize failed (error 507015) while launching Float kernel", "float32", None),
    ("kernel launch timed out for Half tensor", "float16", None),
    ("illegal memory access in Double reduction", "float64", None),
    ("internal error 0x1f", "float32", None),
    # torch_xla's lowering and broadcasting failures print shapes in XLA notation: not refusals
    ("Error while lowering: [] aten::svd, num_outputs=3, xla_shape=(f32[0,0]{1,0}, f32[0]{0}, "
     "f32[0,0]{1,0}), dynamic_dims: (), some=1, compute_uv=1", "float32", None),
    ("Shapes are not compatible for broadcasting: f32[5,5,0] vs. f32[1,5]. Expected dimension 2 of "
     "shape f32[5,5,0] (0) to match dimension 1 of shape f32[1,5] (5).", "float32", None),
    ("Error while lowering: [] aten::expand, xla_shape=s64[5]{0}, dynamic_dims: (), size=(5)", "int64", None),
    # ... and dump the node's attributes, the dtype among them: a compiler failure, not a refusal
    ("Error while lowering: [] aten::cumprod, xla_shape=f32[0]{0}, dynamic_dims: (), dim=0, dtype=Float\n"
     "XLA builder error: INVALID_ARGUMENT: Window dimensions { stride: 1 padding_low: -1 } has a non-positive "
     "dimension.", "float32", None),
    # while the builder's own refusal of the element type names it
    ("Error while lowering: [] aten::bitwise_not, xla_shape=f32[20]{0}, dynamic_dims: ()\nXLA builder error: "
     "INVALID_ARGUMENT: Expected pred or an integral element type in argument to Not operation; got F32.",
     "float32", "f32"),
])
def test_a_message_names_the_dtype_in_its_own_words(message: str, dtype: str, named: str | None) -> None:
    assert dtype_named(RuntimeError(message), dtype) == named


def test_a_python_bug_naming_a_dtype_is_no_refusal() -> None:
    """A Python backend's bug mishandles a dtype; it does not refuse it."""
    for exc in (TypeError("Cannot interpret 'torch.float32' as a data type"), KeyError("torch.bfloat16"),
                AttributeError("'torch.dtype' object has no attribute 'Float'"), AssertionError("Double")):
        assert dtype_named(exc, "float32") is None and dtype_named(exc, "bfloat16") is None, exc


@pytest.mark.slow
def test_a_dtype_refused_in_the_vendors_words_is_rejected(tmp_path: Path) -> None:
    """copysign (C++, TORCH_CHECK) refuses float64 without a phrase of the refusal table; device
    memory refuses complex128 at allocation in a RuntimeError of its own: both rejected, with
    the backend's message; float32 copysign stays native."""
    from .toyaccel import build_cpp_kernels

    library = build_cpp_kernels(_kernel_build_dir())
    proc, matrix = _probe(tmp_path / "out", "copysign,mul", "float32,float64,complex128", TOYACCEL_CPP_KERNELS=library,
                          TOYACCEL_MEMORY_REFUSES="complex128", TOYACCEL_MEMORY_WORDS="1")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert {(e["path"], e["outcome"]) for e in _all(matrix, "aten.copysign.Tensor", "float32")} == {("native", "ok")}
    refused = _all(matrix, "aten.copysign.Tensor", "float64")
    assert {(e["path"], e["outcome"]) for e in refused} == {("rejected", "ok")}, refused
    assert all("accepts Float, got Double" in e["error"]["message"] for e in refused)
    memory = _all(matrix, "aten.mul.Tensor", "complex128")
    assert {(e["path"], e["outcome"]) for e in memory} == {("rejected", "ok")}, memory
    assert all("no device memory layout" in e["error"]["message"] for e in memory)


@pytest.mark.slow
def test_a_sample_that_names_the_host_as_its_device_runs_on_the_device(tmp_path: Path) -> None:
    """OpInfo's ``linspace(start, end, steps, dtype=..., device=...)`` with tensor ends was
    generated with ``device="cpu"``: probed as generated, the op ran on the host and read ``ok``
    even at a dtype device memory refuses. It runs with ``device=`` the device: float64 (refused
    at allocation) is rejected, float32 is made on the device."""
    proc, matrix = _probe(tmp_path / "out", "linspace", "float32,float64", TOYACCEL_MEMORY_REFUSES="float64")
    assert proc.returncode == 0, proc.stdout[-2000:]
    tensor_ends = [(k, e) for k, es in matrix["operators"].items() if k.startswith("aten.linspace.Tensor")
                   for e in es if e.get("mode", "eager") == "eager"]
    assert tensor_ends, sorted(matrix["operators"])
    for key, e in tensor_ends:
        asked = (e.get("conditions") or {}).get("dtype")
        assert asked in ("float32", "float64"), (key, e)
        want = {("rejected", "ok")} if asked == "float64" else {("fallback", "ok"), ("native", "ok"), ("composite", "ok")}
        assert (e["path"], e["outcome"]) in want, (key, e)
        if asked == "float64":
            assert "does not support dtype torch.float64" in e["error"]["message"], (key, e)


@pytest.mark.slow
def test_opinfos_seeding_wrapper_does_not_fail_the_compiled_call(tmp_path: Path) -> None:
    """OpInfo wraps randn and item in ``wrapper_set_seed``; compiled on a backend whose device
    module sets its RNG state in Python (toyaccel through the generic adapter, as OpenReg), the
    wrapper's ``freeze_rng_state`` made dynamo fail with "you set no_dispatch()": a harness error
    read as the backend's compile ``error``. The compiled cells read what the backend does."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOYACCEL_FLAVOUR": "fallback", "TOYACCEL_FAULT": "",
           "OPMATRIX_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "opmatrix", "probe", "--backend", "privateuse1:tests.toyaccel_plugin", "--ops",
           "item,randn", "--dtypes", "float32", "--no-runtime", "--layouts", "contiguous", "--workers", "1",
           "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    import yaml

    matrix = yaml.safe_load((out / "matrix.yaml").read_text())
    compiled = [e for op in ("aten.item.default", "aten.randn.default") for e in matrix["operators"][op]
                if e.get("mode") == "compile"]
    assert {e["outcome"] for e in compiled} == {"ok"}, compiled


def test_a_backward_fault_counts_as_a_fault_of_the_run() -> None:
    from opmatrix.probes.runner.progress import count_record

    cell = {"result": {"path": "native", "outcome": "ok", "autograd": {"path": "unknown", "outcome": "crashed"}}}
    assert count_record({"kind": "task", "cells": [cell]})[1] == {"ok": 1, "crashed": 1}
    cell["result"]["autograd"]["outcome"] = "error"  # an error is the cell's finding, not a process fault
    assert count_record({"kind": "task", "cells": [cell]})[1] == {"ok": 1}
    cell["result"].update(outcome="crashed", autograd={"path": "unknown", "outcome": "crashed"})
    assert count_record({"kind": "task", "cells": [cell]})[1] == {"crashed": 1}  # one cell, one fault


def test_the_matrix_counts_a_backward_crash_as_the_cells_fault() -> None:
    """count_matrix (the site's count) and the probe's summary use one rule: cell_fault."""
    from opmatrix.schema import Autograd, CellResult, ExecPath, FaultOutcome, Outcome, Samples, cell_fault

    def result(outcome: str, backward: str | None) -> CellResult:
        grad = Autograd(path=ExecPath.unknown, outcome=Outcome(backward)) if backward else None
        return CellResult(path=ExecPath.native, outcome=Outcome(outcome), autograd=grad,
                          samples=Samples(probed=1, passed=0))

    assert cell_fault(result("ok", "crashed")) is FaultOutcome.crashed
    assert cell_fault(result("ok", "hung")) is FaultOutcome.hung
    assert cell_fault(result("ok", "error")) is None  # a backward's error is a finding of the cell
    assert cell_fault(result("error", None)) is FaultOutcome.error
    assert cell_fault(result("wrong", "crashed")) is FaultOutcome.crashed
    assert cell_fault(result("ok", None)) is None


@pytest.mark.slow
def test_a_worker_killed_in_a_backward_fails_the_probe(tmp_path: Path) -> None:
    """toyaccel's abs is native; its backward's sgn runs through the boxed fallback, which dies by
    SIGSEGV (TOYACCEL_FAULT=crash:sgn): the cell's backward reads crashed, and the probe says
    it faulted and exits 1, as the README's exit codes promise for a crash."""
    proc, matrix = _probe(tmp_path / "out", "abs", "float32", TOYACCEL_FAULT="crash:sgn")
    assert proc.returncode == 1, proc.stdout[-2000:]
    entries = _all(matrix, "aten.abs.default", "float32")
    backward = {(e.get("autograd") or {}).get("outcome") for e in entries}
    assert "crashed" in backward, backward
    # one fault count: the summary line, the exit code and the site agree, and say how to reproduce
    from opmatrix.reports.summary import coverage
    from opmatrix.schema import load_matrix

    crashed = coverage(load_matrix(tmp_path / "out" / "matrix.yaml")).faults
    assert crashed > 0 and f"faulted cells: crashed {crashed}\n" in proc.stdout, proc.stdout[-2000:]
    command = "opmatrix probe --backend tests.toyaccel:ToyAdapter --ops abs --dtypes float32"
    assert f"  reproduce: {command}\n" in proc.stdout, proc.stdout[-2000:]
    assert all(f"reproduce: {command}" in e["note"] for e in entries if e["autograd"]["outcome"] == "crashed")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "opmatrix", "report", str(tmp_path / "out" / "matrix.yaml"), "--out",
                    str(site)], check=True, capture_output=True, cwd=ROOT)
    index = (site / "index.html").read_text()
    assert f'<b id="n-faults">{crashed}</b> faults' in index
    assert "<i>\u00d7</i>" in index or "<i>×</i>" in index  # the abs square is marked faulted, not a plain F


@pytest.mark.slow
def test_devices_of_a_generic_privateuse1_backend_are_probed(tmp_path: Path) -> None:
    """``--devices 0,1`` through ``privateuse1:MODULE`` (toyaccel with two devices): one worker per
    device, each finds its device; every task's record names one of the two."""
    import json

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOYACCEL_FLAVOUR": "fallback", "TOYACCEL_FAULT": "",
           "TOYACCEL_DEVICES": "2", "OPMATRIX_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "opmatrix", "probe", "--backend", "privateuse1:tests.toyaccel_plugin", "--ops",
           "add,mul,neg,abs", "--dtypes", "float32", "--no-runtime", "--no-compile", "--layouts", "contiguous",
           "--devices", "0,1", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines() if line.strip()]
    devices = {r.get("device") for r in records if r.get("kind") == "task"}
    assert devices and devices <= {"toyaccel:0", "toyaccel:1"}, devices


@pytest.mark.slow
def test_a_device_whose_memory_refuses_bytes_still_has_a_health_check() -> None:
    """The bring-up check copies bytes as uint8; memory that refuses uint8 gets them as float32,
    so the health baseline passes (before: it failed, and no later fault could ever be called
    poisoned). Memory that refuses both fails it, naming the allocation."""
    code = "from tests.toyaccel import ToyAdapter\na = ToyAdapter(); a.setup(); print(repr(a.health_check()))"
    for refused, healthy in (("uint8", True), ("uint8,float32", False)):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TOYACCEL_FLAVOUR": "fallback", "TOYACCEL_MEMORY_REFUSES": refused}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-2000:]
        line = out.stdout.strip().splitlines()[-1]
        assert (line == "None") is healthy and (healthy or "allocate uint8" in line), (refused, line)
