"""Truth on a backend opmatrix did not write: ``tests/toyaccel.py``, probed as a user would.

Each test runs ``opmatrix probe --backend tests.toyaccel:ToyAdapter`` in a subprocess (real
spawned workers, a real PrivateUse1 registration in each) and checks every cell against the
truth toyaccel declares: host fallback from *inside* registered kernels (by dtype, by rank),
fallback in backward, a composite whose component fell back, a minimal opset with no boxed
fallback, a fault on a common op, and a C++ kernel (``tests/toyaccel_kernels.cpp``) that falls
back to the host from inside for one dtype and crashes on empty inputs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _probe(out: Path, ops: str, dtypes: str, layouts: str = "contiguous", **env: str
           ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "OPMATRIX_CACHE_DIR": str(out.parent / "cache"),
            "TOYACCEL_FLAVOUR": "fallback", "TOYACCEL_FAULT": "", **env}
    cmd = [sys.executable, "-m", "opmatrix", "probe", "--backend", "tests.toyaccel:ToyAdapter", "--ops", ops,
           "--dtypes", dtypes, "--no-runtime", "--no-compile", "--layouts", layouts, "--workers", "1",
           "--timeout", "30", "--out", str(out)]
    proc = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900, cwd=ROOT)
    path = out / "matrix.yaml"
    assert path.exists(), f"no matrix (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc, yaml.safe_load(path.read_text())


def _cells(matrix: dict[str, Any], op: str, dtype: str) -> dict[int, list[dict[str, Any]]]:
    """rank -> the entries covering (op, dtype, rank) in eager mode."""
    out: dict[int, list[dict[str, Any]]] = {}
    # a contract-level entry is the union of its exact boxes (``parts``): judge each box
    boxes = [{**e, **part} for e in matrix["operators"].get(op, []) for part in (e.get("parts") or [{}])]
    for e in boxes:
        if dtype in e["dtypes"] and e.get("mode", "eager") == "eager":
            for rank in range(e["ranks"]["min"], e["ranks"]["max"] + 1):
                out.setdefault(rank, []).append(e)
    assert out, f"no {op} {dtype} cell; operators: {sorted(matrix['operators'])}"
    return out


@pytest.fixture(scope="module")
def fallback_matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    proc, matrix = _probe(tmp_path_factory.mktemp("toy") / "out", "add,mm,sort,abs,gcd,unravel_index,index_select,equal",
                         "float32,int8,bfloat16,float16")
    assert proc.returncode == 0, proc.stdout[-2000:]
    return matrix


def test_add_falls_back_inside_its_kernel_by_rank(fallback_matrix: dict[str, Any]) -> None:
    """add float32: rank <= 2 computes on the device (native, checked), rank >= 3 on the host."""
    for rank, entries in _cells(fallback_matrix, "aten.add.Tensor", "float32").items():
        for e in entries:
            if rank <= 2:
                assert e["path"] == "native" and e["fallback"]["state"] == "not_observed", (rank, e)
            else:
                assert e["path"] == "fallback" and e["fallback"]["state"] == "observed", (rank, e)
                assert "aten::add" in e["fallback"]["ops"]
                assert e["fallback"]["copies_per_call"] >= 3 and e["fallback"]["bytes_per_call"] > 0
                assert "registrations say native" in e["note"]
            assert e["outcome"] == "ok"


def test_add_falls_back_inside_its_kernel_by_dtype(fallback_matrix: dict[str, Any]) -> None:
    """add int8 runs on the host at every rank although add.Tensor has a PrivateUse1 kernel."""
    for rank, entries in _cells(fallback_matrix, "aten.add.Tensor", "int8").items():
        assert all(e["path"] == "fallback" and e["outcome"] == "ok" for e in entries), (rank, entries)


def test_mm_bfloat16_falls_back_float32_is_native(fallback_matrix: dict[str, Any]) -> None:
    """mm's kernel sends bfloat16 to the host; float32 stays on the device."""
    assert {e["path"] for es in _cells(fallback_matrix, "aten.mm.default", "bfloat16").values() for e in es} == {
        "fallback"}
    assert {e["path"] for es in _cells(fallback_matrix, "aten.mm.default", "float32").values() for e in es} == {
        "native"}


def test_fallback_then_error_keeps_both(fallback_matrix: dict[str, Any]) -> None:
    """mm float16 copies to the host, then raises: the cell is fallback with outcome error."""
    for entries in _cells(fallback_matrix, "aten.mm.default", "float16").values():
        for e in entries:
            assert (e["path"], e["outcome"]) == ("fallback", "error"), e
            assert e["fallback"]["state"] == "observed" and "internal error" in e["error"]["message"]


def test_device_runs_when_the_cpu_reference_rejects(fallback_matrix: dict[str, Any]) -> None:
    """gcd float32: the CPU rejects every sample; the device (its boxed fallback runs the CPU
    kernel) rejects too, and the cell says there was no reference."""
    for entries in _cells(fallback_matrix, "aten.gcd.default", "float32").values():
        for e in entries:
            assert (e["path"], e["outcome"]) == ("rejected", "ok"), e
            assert "no reference" in e["note"], e


def test_the_same_refusal_as_the_cpu_is_a_rejection_not_an_error(fallback_matrix: dict[str, Any]) -> None:
    """unravel_index float32: the op's own argument check raises TypeError before any dispatch, on
    the CPU and on the device alike; the input is invalid everywhere, so the device rejected it
    cleanly (a TypeError alone is no rejection: it read error with an unknown path before)."""
    cells = [e for es in _cells(fallback_matrix, "opinfo.unravel_index", "float32").values() for e in es]
    assert cells and {(e["path"], e["outcome"]) for e in cells} == {("rejected", "ok")}, cells
    assert all("refuses it exactly as the CPU does" in e["note"] for e in cells)


def test_composite_whose_component_fell_back(fallback_matrix: dict[str, Any]) -> None:
    """sort (CompositeExplicitAutograd over sort.values_stable, no kernel: the boxed fallback) is
    fallback with its evidence, and its values are right."""
    for entries in _cells(fallback_matrix, "aten.sort.default", "float32").values():
        for e in entries:
            assert e["path"] == "fallback" and e["outcome"] == "ok", e
            assert e["fallback"]["state"] == "observed" and e["fallback"]["copies_per_call"] >= 2


def test_thin_composite_is_native_and_its_backward_falls_back(fallback_matrix: dict[str, Any]) -> None:
    """abs -> abs.out (a native kernel) is native with that component; its backward (sgn, no
    kernel) ran on the host."""
    for entries in _cells(fallback_matrix, "aten.abs.default", "float32").values():
        for e in entries:
            assert e["path"] == "native" and e["components"] == ["aten.abs.out"], e
            assert e["autograd"]["path"] == "fallback", e


def test_copies_one_way_are_no_fallback_unless_nothing_comes_back(fallback_matrix: dict[str, Any]) -> None:
    """index_select reads its index to the host to check bounds, then gathers in device memory:
    native, no fallback seen; the sample with a negative dim it refuses after that read:
    rejected, not a fallback that failed. equal, served by the boxed fallback, copies both inputs
    to the host and returns a bool: nothing comes back to the device, yet the host computed it:
    fallback."""
    gathered = [e for es in _cells(fallback_matrix, "aten.index_select.default", "float32").values() for e in es]
    refused = [e for e in gathered if (e.get("conditions") or {}).get("dim") == "last"]
    assert refused and all(e["error"]["message"].endswith("a negative dim is not supported") for e in refused)
    assert {(e["path"], e["outcome"], e["fallback"]["state"]) for e in refused} == {("rejected", "ok", "not_observed")}
    assert {(e["path"], e["fallback"]["state"]) for e in gathered if e not in refused} == {("native", "not_observed")}
    equal = [e for es in _cells(fallback_matrix, "aten.equal.default", "float32").values() for e in es]
    assert equal and {(e["path"], e["fallback"]["state"]) for e in equal} == {("fallback", "observed")}, equal


def test_minimal_opset_backend_is_probed(tmp_path: Path) -> None:
    """Empty/copy/fill and five .out kernels, no boxed fallback: every op gets cells, clean
    rejections never poison the device, no worker is replaced."""
    proc, matrix = _probe(tmp_path / "out", "add,mul,abs,sort,mm", "float32", TOYACCEL_FLAVOUR="minimal")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "0 worker restarts" in proc.stdout + proc.stderr
    ops = matrix["operators"]
    for op in ("aten.add.Tensor", "aten.mul.Tensor", "aten.abs.default", "aten.sort.default", "aten.mm.default"):
        assert op in ops, sorted(ops)
        assert all(e["outcome"] in ("ok", "wrong") for e in ops[op]), ops[op]
    assert {e["path"] for e in ops["aten.add.Tensor"]} == {"native"}  # the structured shim over add.out
    assert {e["path"] for e in ops["aten.sort.default"]} == {"rejected"}
    assert {e["path"] for e in ops["aten.mm.default"]} == {"rejected"}


def test_fault_on_a_common_op_erases_nothing(tmp_path: Path) -> None:
    """mul crashes every time: add's cells are intact, mul's crash is a cell with the path the
    dispatcher chose (its registered kernel), and what never ran is listed, not counted."""
    proc, matrix = _probe(tmp_path / "out", "add,mul", "float32", TOYACCEL_FAULT="crash:mul")
    assert proc.returncode == 1, proc.stdout[-2000:]
    ops = matrix["operators"]
    assert ops["aten.add.Tensor"] and all(e["outcome"] == "ok" for e in ops["aten.add.Tensor"])
    mul = ops["aten.mul.Tensor"]
    assert {e["outcome"] for e in mul} == {"crashed"}
    assert {e["path"] for e in mul} == {"native"}
    # the process died; the worker that replaced it found the same device working: the context's
    assert {e["error"]["fault_scope"] for e in mul} == {"context"}
    assert {tuple(e["error"]["scope_evidence"]) for e in mul} == {
        ("the process ended; a fresh process on device 0: works",)}
    not_run = [k for k in matrix.get("not_run", {}) if k.startswith("mul|float32 ")]
    assert not_run, matrix.get("not_run")
    probed = sum(e["samples"]["probed"] for e in mul)
    crashes = [line for line in (proc.stdout + proc.stderr).splitlines() if "crashed (SIGSEGV): task mul" in line]
    # each crash is one cell sample, nothing more, except the first: it crashed the worker that ran
    # add's units first, so it ran again in a fresh worker (and crashed again)
    retries = [line for line in proc.stderr.splitlines() if line.startswith("retrying unit 0/contiguous/eager")]
    assert len(retries) == 1, proc.stderr[-2000:]
    assert probed == len(crashes) - 1, (probed, crashes)


def test_a_worker_worn_out_by_its_own_history_loses_no_sample(tmp_path: Path) -> None:
    """mul segfaults once a process has called it 60 times (torch_xla's JIT ran out of code memory
    this way after ~120 mha samples). Each crash hit a worker that had run other units first: the
    unit runs again in a fresh worker (after the at most 7 units its dead worker had not yet
    checkpointed, about 40 mul calls: a unit's plain call and its recording pass, and for some
    units a plain and a profiled backward of two calls each) and passes, the units checkpointed before are restored, not
    re-run, and every sample of mul is ok, with a note where a retry happened."""
    proc, matrix = _probe(tmp_path / "out", "mul", "float32,float64,float16,bfloat16", TOYACCEL_FAULT="worn:mul",
                          TOYACCEL_WORN_AFTER="60")
    assert proc.returncode == 0, proc.stdout[-2000:]
    entries = [e for dt in ("float32", "float64", "float16", "bfloat16")
               for es in _cells(matrix, "aten.mul.Tensor", dt).values() for e in es]
    assert {e["outcome"] for e in entries} == {"ok"}, entries
    retries = [line for line in proc.stderr.splitlines() if line.startswith("retrying unit")]
    assert retries, proc.stderr[-2000:]
    noted = [e for e in entries if "ran without a fault in a fresh worker (it had first crashed "
             "(SIGSEGV) a worker that had run" in (e.get("note") or "")]
    assert noted, entries
    assert not matrix.get("not_run")
    # without the carried units each attempt would re-run all before it and die at the same call
    assert f"({len(retries)} to retry a crash in a fresh worker)" in proc.stderr, proc.stderr[-1000:]


@pytest.mark.parametrize(("mode", "outcome"), [("hostile", "ok"), ("hostile-error", "error")])
def test_a_hostile_error_text_is_recorded_escaped_and_breaks_nothing(tmp_path: Path, mode: str, outcome: str) -> None:
    """mul raises with terminal escapes, NUL, a lone surrogate, YAML and HTML syntax in its message
    (a rejection by its type, or an error): the text is evidence, kept with its control characters
    and surrogate escaped; the matrix loads, queries and renders; no terminal sees a raw escape."""
    proc, matrix = _probe(tmp_path / "out", "add,mul", "float32", TOYACCEL_FAULT=f"{mode}:mul")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # an error is no process fault
    assert "\x1b" not in proc.stdout + proc.stderr
    mul = matrix["operators"]["aten.mul.Tensor"]
    assert {(e["path"], e["outcome"]) for e in mul} == {("rejected" if outcome == "ok" else "native", outcome)}
    message = mul[0]["error"]["message"]
    assert "\\x1b[2J" in message and "\\ud800" in message and "\\x00" in message, message
    assert not any(not ch.isprintable() for ch in message), message
    assert {e["outcome"] for e in matrix["operators"]["aten.add.Tensor"]} == {"ok"}
    path = tmp_path / "out" / "matrix.yaml"
    query = subprocess.run([sys.executable, "-m", "opmatrix", "query", str(path), "aten.mul.Tensor", "--dtype",
                            "float32", "--rank", "2"], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert query.returncode == 0 and "\x1b" not in query.stdout + query.stderr, query.stdout + query.stderr
    report = subprocess.run([sys.executable, "-m", "opmatrix", "report", str(path), "--out", str(tmp_path / "site")],
                            capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert report.returncode == 0, report.stderr
    html = "".join(f.read_text() for f in (tmp_path / "site").rglob("*.html"))
    assert "pwned" in html and "<script>alert" not in html


def test_an_error_whose_message_cannot_be_read_is_an_error_of_its_cell(tmp_path: Path) -> None:
    """mul raises an exception whose ``__str__`` raises: the cell is an error naming the type."""
    proc, matrix = _probe(tmp_path / "out", "add,mul", "float32", TOYACCEL_FAULT="unreadable:mul")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    mul = matrix["operators"]["aten.mul.Tensor"]
    assert {(e["path"], e["outcome"]) for e in mul} == {("native", "error")}
    assert "_Unreadable (its message could not be read: ValueError)" in mul[0]["error"]["message"]
    assert {e["outcome"] for e in matrix["operators"]["aten.add.Tensor"]} == {"ok"}


def _kernel_build_dir() -> Path:
    """Outside the clone, like the xla environment, one folder per kernel source: checkouts with
    different sources (worktrees, branches) never load each other's library (a folder per torch
    version alone let one checkout's build replace another's between its build and its load)."""
    import hashlib

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    source = hashlib.sha256((ROOT / "tests" / "toyaccel_kernels.cpp").read_bytes()).hexdigest()[:12]
    return cache / "opmatrix-tests" / f"toyaccel-kernels-torch{torch_version()}-{source}"


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


def test_a_cpp_kernel_that_falls_back_from_inside_is_fallback_and_its_crash_stays_on_its_samples(
        tmp_path: Path) -> None:
    """atan2 in C++ (ATen API, the dispatcher, no Python on the call path): float32 native,
    float64 copies to the host inside the kernel (fallback, with the copies counted), int32 a clean
    rejection; the empty-input samples crash the worker and every other sample keeps its result."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.fail("no C++ compiler: this test builds tests/toyaccel_kernels.cpp (install g++; see README)")
    from .toyaccel import build_cpp_kernels

    library = build_cpp_kernels(_kernel_build_dir())
    proc, matrix = _probe(tmp_path / "out", "atan2", "float32,float64,int32", TOYACCEL_CPP_KERNELS=library)
    assert proc.returncode == 1, proc.stdout[-2000:]  # faults were found and recorded
    for dtype, path in (("float32", "native"), ("float64", "fallback"), ("int32", "rejected")):
        for rank, entries in _cells(matrix, "aten.atan2.default", dtype).items():
            # a crashed sample's path is the kernel the dispatcher chose (registered: native)
            assert {e["path"] for e in entries if e["outcome"] != "crashed"} == {path}, (dtype, rank, entries)
            assert {e["path"] for e in entries if e["outcome"] == "crashed"} <= {"native"}, (dtype, rank, entries)
            for e in entries:
                passed, probed = e["samples"]["passed"], e["samples"]["probed"]
                if e["outcome"] == "crashed":  # only the empty samples crashed, in their own group
                    assert e.get("conditions") == {"input": "empty"} and passed == 0, e
                else:
                    assert e["outcome"] == "ok" and passed == probed, e
    f64 = [e for es in _cells(matrix, "aten.atan2.default", "float64").values() for e in es if e["outcome"] == "ok"]
    assert all(e["fallback"]["state"] == "observed" and "aten::atan2" in e["fallback"]["ops"] for e in f64)
    assert all((e["fallback"].get("copies_per_call") or 0) >= 3 for e in f64)  # two inputs in, one result back
    f32 = [e for es in _cells(matrix, "aten.atan2.default", "float32").values() for e in es]
    # a cell holding the crashed sample cannot say what that sample did: unknown, never not_observed
    assert all(e.get("fallback", {}).get("state", "unknown") == ("unknown" if e["outcome"] == "crashed"
                                                                 else "not_observed") for e in f32)
    crashed = {(dt, rank) for dt in ("float32", "float64", "int32")
               for rank, es in _cells(matrix, "aten.atan2.default", dt).items() for e in es if e["outcome"] == "crashed"}
    assert crashed == {(dt, 3) for dt in ("float32", "float64", "int32")}, crashed  # the empty rank-3 sample
    line = subprocess.run([sys.executable, "-m", "opmatrix", "query", str(tmp_path / "out" / "matrix.yaml"),
                           "aten.atan2.default"], capture_output=True, text=True, cwd=ROOT).stdout.splitlines()[0]
    assert "FAULTS (crashed when input=empty)" in line, line


def test_a_sort_of_ties_on_a_contiguous_copy_is_ok_and_wrong_indices_are_wrong(tmp_path: Path) -> None:
    """toyaccel's boxed fallback sorts a contiguous copy of an expanded input (8,000 equal values):
    another tie order than the CPU's, and right; a fallback whose indices select the wrong values
    (``wrong:sort``) still reads wrong."""
    proc, matrix = _probe(tmp_path / "ties", "sort", "float32", "expanded,contiguous")
    assert proc.returncode == 0, proc.stdout[-2000:]
    entries = [e for es in _cells(matrix, "aten.sort.default", "float32").values() for e in es]
    assert {e["outcome"] for e in entries} == {"ok"}, [e.get("note") for e in entries]
    assert any("expanded" in e["layouts"] and e["ranks"]["min"] <= 1 <= e["ranks"]["max"] for e in entries)
    proc, matrix = _probe(tmp_path / "wrong", "sort", "float32", "contiguous", TOYACCEL_FAULT="wrong:sort")
    wrong = [e for es in _cells(matrix, "aten.sort.default", "float32").values() for e in es if e["outcome"] == "wrong"]
    assert wrong and all("output 1:" in e["note"] for e in wrong), wrong


def test_a_backward_served_by_the_boxed_fallback_is_fallback_without_copies(tmp_path: Path) -> None:
    """relu is native; its backward (threshold_backward: no kernel, a structured op whose generic
    wrapper is no kernel of toyaccel's) runs on the host in the boxed fallback, which here works
    on host views of device memory (no copies to see): the backward is fallback."""
    proc, matrix = _probe(tmp_path / "out", "nn.functional.relu", "float32", TOYACCEL_FALLBACK="alias")
    assert proc.returncode == 0, proc.stdout[-2000:]
    entries = [e for es in _cells(matrix, "aten.relu.default", "float32").values() for e in es]
    assert {e["path"] for e in entries} == {"native"}, entries
    assert {e["autograd"]["path"] for e in entries} == {"fallback"}, entries


def test_a_cpp_kernels_backward_served_by_the_boxed_fallback_is_fallback(tmp_path: Path) -> None:
    """leaky_relu in C++ is native; its backward (leaky_relu_backward, no kernel) runs in the boxed
    fallback over host views (no copies): fallback, on the C++ backend as on the Python one."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.fail("no C++ compiler: this test builds tests/toyaccel_kernels.cpp (install g++; see README)")
    from .toyaccel import build_cpp_kernels

    library = build_cpp_kernels(_kernel_build_dir())
    proc, matrix = _probe(tmp_path / "out", "nn.functional.leaky_relu", "float32", TOYACCEL_CPP_KERNELS=library,
                          TOYACCEL_FALLBACK="alias")
    assert proc.returncode == 0, proc.stdout[-2000:]
    entries = [e for es in _cells(matrix, "aten.leaky_relu.default", "float32").values() for e in es]
    assert {e["path"] for e in entries} == {"native"}, entries
    assert {e["autograd"]["path"] for e in entries} == {"fallback"}, entries
