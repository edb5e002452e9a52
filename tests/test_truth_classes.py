"""Truth, round 3, on a backend opmatrix did not write (``tests/toyaccel.py``), one class each:

factory ops probed on the device, a dtype device memory refuses at allocation, a ``TORCH_CHECK``
refusal inside a C++ kernel, ``as_strided`` views that read outside the view, an op whose value
changes under a dispatch mode (the instrument must not change the verdict), a silently wrong
integer kernel (its error and mismatch count), support for empty inputs alone, and every device
of a generic PrivateUse1 backend enumerated. Probes run as a user runs them: ``opmatrix probe``
in a subprocess with spawned workers (the instrument test drives the engine in a subprocess of
its own, since it probes an OpInfo made for it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .test_truth_toyaccel import ROOT, _cells, _kernel_build_dir, _probe

pytestmark = pytest.mark.slow


def _all(matrix: dict[str, Any], op: str, dtype: str) -> list[dict[str, Any]]:
    return [e for es in _cells(matrix, op, dtype).values() for e in es]


def test_factory_ops_run_on_the_device_with_its_dtype(tmp_path: Path) -> None:
    """zeros/ones/full/arange: no tensor input, yet cells exist: each sample ran with
    ``device=toyaccel`` at its dtype, its output (made on the device) matched the CPU's."""
    proc, matrix = _probe(tmp_path / "out", "zeros,ones,full,arange", "float32,int64")
    assert proc.returncode == 0, proc.stdout[-2000:]
    for op in ("aten.zeros.default", "aten.ones.default", "aten.full.default"):
        for dtype in ("float32", "int64"):
            cells = _all(matrix, op, dtype)
            assert all(e["outcome"] == "ok" and e["path"] != "rejected" for e in cells), (op, dtype, cells)
    arange = [k for k in matrix["operators"] if k.startswith("aten.arange")]
    assert arange, sorted(matrix["operators"])
    assert not [k for k in matrix.get("skipped") or {} if k.split("|")[0] in ("zeros", "ones", "full", "arange")]


def test_a_random_factory_is_judged_by_its_distribution(tmp_path: Path) -> None:
    """randn's values are random: compared by shape, dtype, device and moments, never one by one."""
    proc, matrix = _probe(tmp_path / "out", "randn", "float32")
    assert proc.returncode == 0, proc.stdout[-2000:]
    cells = _all(matrix, "aten.randn.default", "float32")
    assert cells and all(e["outcome"] == "ok" for e in cells), cells


def test_a_dtype_refused_at_allocation_is_rejected(tmp_path: Path) -> None:
    """Device memory refuses complex128 (NotImplementedError while staging the inputs, before
    the op runs): every complex128 cell is rejected with that message, nothing is a fault, and
    complex64 still runs. (``add``, not ``mul``: toyaccel's boxed fallback dies in complex ``mul``'s
    backward, whose conjugate view it cannot copy to the host, a crash the probe rightly reports.)"""
    proc, matrix = _probe(tmp_path / "out", "add,zeros", "complex128,complex64", TOYACCEL_MEMORY_REFUSES="complex128")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "faulted cells" not in proc.stdout, proc.stdout[-2000:]
    for op in ("aten.add.Tensor", "aten.zeros.default"):
        refused = _all(matrix, op, "complex128")
        assert refused and {(e["path"], e["outcome"]) for e in refused} == {("rejected", "ok")}, (op, refused)
        assert all("does not support dtype torch.complex128" in e["error"]["message"] for e in refused)
    assert {e["outcome"] for e in _all(matrix, "aten.add.Tensor", "complex64")} == {"ok"}


def test_a_torch_check_refusal_in_a_cpp_kernel_is_rejected(tmp_path: Path) -> None:
    """hypot in C++: float32 native; float64 and int32 refused by TORCH_CHECK ("only supports
    float32", a RuntimeError): rejected, with the kernel's message, never an error."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.fail("no C++ compiler: this test builds tests/toyaccel_kernels.cpp (install g++; see README)")
    from .toyaccel import build_cpp_kernels

    library = build_cpp_kernels(_kernel_build_dir())
    proc, matrix = _probe(tmp_path / "out", "hypot", "float32,float64", TOYACCEL_CPP_KERNELS=library)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert {(e["path"], e["outcome"]) for e in _all(matrix, "aten.hypot.default", "float32")} == {("native", "ok")}
    refused = _all(matrix, "aten.hypot.default", "float64")
    assert refused and {(e["path"], e["outcome"]) for e in refused} == {("rejected", "ok")}, refused
    assert all("only supports float32" in e["error"]["message"] for e in refused)


def test_a_kernel_stating_the_layout_and_rank_it_needs_is_rejected(tmp_path: Path) -> None:
    """mul refuses non-contiguous inputs and ranks above 2 in its own words ("TA_E_LAYOUT(0x31):
    mul kernel requires contiguous input", "... expects 2-D input or less, got 3-D"): those cells
    are rejected with the kernel's message, the others native, nothing is an error."""
    proc, matrix = _probe(tmp_path / "out", "mul", "float32", layouts="contiguous,transposed",
                          TOYACCEL_FAULT="needs:mul")
    assert proc.returncode == 0 and "faulted cells" not in proc.stdout, proc.stdout[-2000:]
    entries = _all(matrix, "aten.mul.Tensor", "float32")
    boxes = [(rank, layout, e) for e in entries for part in (e.get("parts") or [e])
             for rank in range(part["ranks"]["min"], part["ranks"]["max"] + 1) for layout in part["layouts"]]
    assert {(rank, layout) for rank, layout, _ in boxes} >= {(1, "contiguous"), (2, "transposed"), (3, "contiguous")}
    for rank, layout, e in boxes:
        if layout == "contiguous" and rank <= 2:
            assert (e["path"], e["outcome"]) == ("native", "ok"), (rank, layout, e)
        else:
            assert (e["path"], e["outcome"]) == ("rejected", "ok"), (rank, layout, e)
            assert e["error"]["message"].startswith(("TA_E_LAYOUT", "TA_E_RANK")), e


def test_as_strided_views_keep_their_storage(tmp_path: Path) -> None:
    """as_strided samples address the base storage outside the view (partial views): the device
    gets the whole storage and the same view over it, so every value is right."""
    proc, matrix = _probe(tmp_path / "out", "as_strided", "float32")
    assert proc.returncode == 0, proc.stdout[-2000:]
    cells = _all(matrix, "aten.as_strided.default", "float32")
    assert cells and {(e["outcome"]) for e in cells} == {"ok"}, cells
    assert "rejected" not in {e["path"] for e in cells}, cells


def test_a_wrong_integer_kernel_carries_its_error_and_count(tmp_path: Path) -> None:
    """mul int32 with every other value off by one: wrong, max_abs_err 1 (computed in a wide
    type, never 0.0) and the number of values that differ."""
    proc, matrix = _probe(tmp_path / "out", "mul", "int32", TOYACCEL_FAULT="wrong:mul")
    wrong = [e for e in _all(matrix, "aten.mul.Tensor", "int32") if e["outcome"] == "wrong"]
    assert wrong, proc.stdout[-2000:]
    for e in wrong:
        assert e["numerics"]["max_abs_err"] == 1.0 and e["numerics"]["mismatched"] >= 1, e
        assert "values differ" in e["note"] and not e.get("flaky"), e


def test_support_for_empty_inputs_alone_is_conditional(tmp_path: Path) -> None:
    """softmax int16 runs only on the empty sample (the CPU kernel, through the boxed fallback,
    has no int16 softmax): the cell splits into input=empty (runs) and input=nonempty (rejected),
    and the query's headline reads the nonempty part."""
    proc, matrix = _probe(tmp_path / "out", "softmax", "int16")
    assert proc.returncode == 0, proc.stdout[-2000:]
    cells = _all(matrix, "aten.softmax.int", "int16")
    split = {(e.get("conditions") or {}).get("input"): e["path"] for e in cells}
    assert split.get("nonempty") == "rejected" and split.get("empty") not in (None, "rejected"), cells
    line = subprocess.run([sys.executable, "-m", "opmatrix", "query", str(tmp_path / "out" / "matrix.yaml"),
                           "aten.softmax.int", "--dtype", "int16"], capture_output=True, text=True,
                          cwd=ROOT).stdout
    assert "rejected" in line.splitlines()[0], line


_INSTRUMENT = r'''
import json, os, sys
import torch
from torch.testing._internal.opinfo.core import OpInfo, SampleInput
from torch.testing import make_tensor
sys.path.insert(0, os.environ["ROOT"])
from tests.toyaccel import ToyAdapter
from opmatrix.probes.ops.engine import probe_task
from opmatrix.probes.ops.source import OpEntry
from opmatrix.probes.ops.state import InlineContext, engine_state

lib = torch.library.Library("toytest", "DEF")
lib.define("tilt(Tensor x) -> Tensor")

def tilt(x):
    # a composite whose value depends on whether a dispatch mode is active, as complex
    # linalg.pinv drops a conjugation under any pass-through TorchDispatchMode
    same = torch.neg(torch.neg(x))
    return same + torch.ones_like(x) if torch._C._len_torch_dispatch_stack() else same

lib.impl("tilt", tilt, "CompositeImplicitAutograd")

def samples(op, device, dtype, requires_grad, **kw):
    for shape in ((3, 4), (5,)):
        yield SampleInput(make_tensor(shape, device=device, dtype=dtype, low=-2, high=2))

info = OpInfo("toytest.tilt", op=torch.ops.toytest.tilt, dtypes=(torch.float32,), sample_inputs_func=samples,
              supports_autograd=False)
adapter = ToyAdapter()
adapter.setup()
ctx = InlineContext(adapter)
engine_state(ctx).ops["toytest.tilt"] = OpEntry("toytest.tilt", info)
rec = probe_task(ctx, "toytest.tilt", "float32", options={"compile": "off", "layouts": ["contiguous"]})
print(json.dumps([c.model_dump(mode="json") for c in rec.cells]))
'''


def test_the_instrument_never_changes_the_verdict(tmp_path: Path) -> None:
    """A custom composite op returns another value under a dispatch mode: the plain call is
    right, so the cell is ok and not flaky, and its note says the recording pass changed it."""
    env = {**os.environ, "ROOT": str(ROOT), "PYTHONPATH": str(ROOT), "OPMATRIX_CACHE_DIR": str(tmp_path / "cache"),
           "TOYACCEL_FLAVOUR": "fallback", "TOYACCEL_FAULT": ""}
    proc = subprocess.run([sys.executable, "-c", _INSTRUMENT], env=env, capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = json.loads(proc.stdout.strip().splitlines()[-1])
    assert cells, proc.stdout
    for c in cells:
        r = c["result"]
        assert r["outcome"] == "ok" and not r["flaky"] and r["path"] == "composite", r
        assert "the instrument changed the result" in r["note"], r


def test_every_device_of_a_generic_privateuse1_backend_is_enumerated(tmp_path: Path) -> None:
    """The generic adapter (``privateuse1:MODULE``) lists every device torch.accelerator counts."""
    code = ("from opmatrix.backend.builtin import PrivateUse1Adapter\n"
            "a = PrivateUse1Adapter('tests.toyaccel_plugin'); a.setup()\n"
            "print([(d.index, d.name) for d in a.devices()])")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOYACCEL_DEVICES": "2", "TOYACCEL_FLAVOUR": "fallback"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[(0, 'toyaccel:0'), (1, 'toyaccel:1')]", out.stdout


def test_a_backward_that_crashes_every_worker_is_a_fault_and_says_nothing_else(tmp_path: Path) -> None:
    """toyaccel dies copying a conjugate view to the host, so complex ``mul``'s backward crashes
    every worker, a fresh one too (it is retried in one: the first worker had run other tasks'
    units): the cell's backward reads crashed, the run exits 1 naming the faulted cell, and no
    note claims the step later ran without a fault."""
    proc, matrix = _probe(tmp_path / "out", "mul,zeros", "complex128,complex64")
    assert "to retry a crash in a fresh worker" in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 1 and "faulted cells: crashed" in proc.stdout, proc.stdout[-2000:]
    cells = _all(matrix, "aten.mul.Tensor", "complex64")
    crashed = [e for e in cells if (e.get("autograd") or {}).get("outcome") == "crashed"]
    assert crashed, cells
    assert not any("without a fault" in (e.get("note") or "") for e in cells), cells


def test_a_dtype_the_cpu_lacks_is_judged_in_a_wider_one(tmp_path: Path) -> None:
    """toyaccel's abs computes uint16, which the host's kernels lack ("abs_cpu" not implemented
    for 'UInt16'): the reference is computed in int32 and cast back, so a right kernel reads ok
    with that said, and a kernel off by one reads wrong (before: ok unseen, "no reference")."""
    proc, matrix = _probe(tmp_path / "right", "abs", "uint16")
    right = _all(matrix, "aten.abs.default", "uint16")
    assert right and {(e["path"], e["outcome"]) for e in right} == {("native", "ok")}, proc.stdout[-2000:]
    assert all("referenced in int32" in e["note"] and e["numerics"]["reference"] == "cpu_upcast" for e in right)
    proc, matrix = _probe(tmp_path / "wrong", "abs", "uint16", TOYACCEL_FAULT="wrong:abs")
    wrong = _all(matrix, "aten.abs.default", "uint16")
    assert wrong and {e["outcome"] for e in wrong} == {"wrong"}, proc.stdout[-2000:]
    assert all(e["numerics"]["max_abs_err"] == 1.0 for e in wrong), wrong
