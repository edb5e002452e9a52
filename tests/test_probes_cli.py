"""``opmatrix probe`` end to end: refaccel paths, PrivateUse1 modules, plugin adapters, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opmatrix.matrix import MatrixIndex
from opmatrix.schema import load_matrix

from .conftest import ROOT, run_cli

OPS = "softmax,add,mul,mm,sort,addcmul"
DTYPES = "float32,bfloat16,float64"


def _probe(out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opmatrix", "probe", *args, "--out", str(out), "--quiet", "--workers", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=900, env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def refaccel(tmp_path_factory):
    """Both generations probed once over a small op set (no runtime checks: other tests do them)."""
    out = {}
    for gen in ("g1", "g2"):
        d = tmp_path_factory.mktemp(f"refaccel-{gen}")
        res = _probe(d, "--backend", "refaccel", "--generation", gen, "--ops", OPS, "--dtypes", DTYPES, "--no-runtime")
        assert res.returncode == 0, res.stdout + res.stderr
        out[gen] = MatrixIndex.load(d / "matrix.yaml")
    return out


def _path(m: MatrixIndex, op: str, dtype: str, rank: int, layout: str = "contiguous", mode: str = "eager", **args):
    return str(m.query(op, dtype=dtype, rank=rank, layout=layout, mode=mode, args=args or None).path)


@pytest.mark.slow  # a real probe of refaccel in subprocess workers
def test_g2_shows_every_path_where_its_design_puts_it(refaccel):
    g2 = refaccel["g2"]
    assert _path(g2, "aten.mm.default", "float32", 2) == "native"
    assert _path(g2, "aten.mm.default", "bfloat16", 2) == "native"
    assert _path(g2, "aten.softmax.int", "float32", 3, dim=-1) == "native"
    assert _path(g2, "aten.softmax.int", "float32", 3, dim=0) == "composite"
    assert _path(g2, "aten.softmax.int", "float32", 3, "noncontiguous", dim=-1) == "composite"
    assert _path(g2, "aten.softmax.int", "float64", 3, dim=-1) == "rejected"
    assert _path(g2, "aten.sort.stable", "float32", 3) == "fallback"
    assert _path(g2, "aten.addcmul.default", "float32", 2) == "rejected"
    assert _path(g2, "aten.addcmul.default", "float32", 2, mode="compile") == "decomposed"
    paths = {str(e.path) for entries in g2.model.operators.values() for e in entries}
    assert paths == {"native", "composite", "decomposed", "fallback", "rejected"}


@pytest.mark.slow  # a real probe of refaccel in subprocess workers
def test_rejections_are_actionable(refaccel):
    ans = refaccel["g2"].query("aten.add.Tensor", dtype="float64", rank=2, layout="contiguous")
    assert str(ans.path) == "rejected" and ans.entry.error is not None and ans.entry.error.actionable


@pytest.mark.slow  # a real probe of refaccel in subprocess workers
def test_g1_differs_from_g2_in_bf16_and_carries_a_wrong_result(refaccel):
    g1, g2 = refaccel["g1"], refaccel["g2"]
    assert _path(g1, "aten.mm.default", "bfloat16", 2) != "native"
    outcomes = {
        str(e.outcome) for op, entries in g1.model.operators.items() for e in entries if "noncontiguous" in map(str, e.layouts)
    }
    assert "wrong" in outcomes
    assert "wrong" not in {str(e.outcome) for entries in g2.model.operators.values() for e in entries}


@pytest.mark.slow  # a real probe of refaccel in subprocess workers
def test_privateuse1_module_is_probed_with_generic_signals(tmp_path):
    vendor = tmp_path / "pkg"
    vendor.mkdir()
    (vendor / "vendor_backend.py").write_text(textwrap.dedent("""
        # a vendor package that registers its PrivateUse1 device on import, as torch_npu does
        import opmatrix.backend.refaccel as _r
        _r.install("g2")
    """))
    out = tmp_path / "out"
    env = {"PYTHONPATH": f"{vendor}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    res = _probe(out, "--backend", "privateuse1:vendor_backend", "--ops", "add,sort,softmax", "--dtypes", "float32",
                 "--no-runtime", "--no-compile", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    m = MatrixIndex.load(out / "matrix.yaml")
    assert m.model.backend.device_type == "refaccel" and m.model.backend.dispatch_key == "PrivateUse1"
    assert _path(m, "aten.add.Tensor", "float32", 2) == "native"
    # no adapter counter here: refaccel's boxed fallback computes on host memory directly (no copy for the
    # profiler to see), so the path comes from the registrations and the note says no copy was seen
    sort = m.query("aten.sort.stable", dtype="float32", rank=3, layout="contiguous")
    assert str(sort.path) == "fallback" and str(sort.entry.fallback.state) == "not_observed"
    assert "backend fallback" in (sort.entry.note or "") and "no host<->device copy was seen" in (sort.entry.note or "")
    assert _path(m, "aten.softmax.int", "float32", 3, dim=0) == "composite"


@pytest.mark.slow  # a real probe of refaccel in subprocess workers
def test_plugin_adapter_from_module_attr(tmp_path):
    res = _probe(tmp_path, "--backend", "tests.example_adapter:HostAsDevice", "--ops", "add", "--dtypes", "float32",
                 "--no-runtime", "--no-compile", "--threads", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    m = load_matrix(tmp_path / "matrix.yaml")
    assert m.backend.name == "host-as-device" and m.evidence.driver == "example-driver 1.0"
    assert {str(e.path) for e in m.operators["aten.add.Tensor"]} == {"native"}
    assert all(e.autograd is not None for e in m.operators["aten.add.Tensor"])  # backward ran under the profiler
    # ... whose kineto chatter (two lines per use) stays out of the logs a crash message is cut from
    logs = "".join(p.read_text() for p in (tmp_path / "workers").glob("w*.log"))
    assert "profiler_start" not in logs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "refacel"], "unknown backend 'refacel'; did you mean 'refaccel'?"),
        (["--backend", "cpu", "--ops", "sofmax"], "--ops: 'sofmax' matches no OpInfo; did you mean softmax"),
        (["--backend", "cpu", "--dtypes", "float23"], "--dtypes: unknown value 'float23'; did you mean 'float32'?"),
        (["--backend", "cpu", "--layouts", "strided"], "--layouts: unknown value 'strided'"),
        (["--backend", "cpu", "--threads", "0"], "--threads: must be at least 1"),
        (["--backend", "nope.module:Thing"], "cannot import 'nope.module'"),
    ],
)
def test_bad_input_exits_2_naming_what(tmp_path, args, message):
    res = run_cli("probe", *args, "--out", str(tmp_path / "o"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr
    assert not (tmp_path / "o").exists()


_EXIT = """
import atexit, sys, threading, time
from pathlib import Path
import torch  # noqa: F401 - with torch imported the entry point skips the interpreter's teardown
from opmatrix import cli

out = Path(sys.argv[1])


class Teardown:
    def __del__(self):  # runs when the interpreter tears its modules down, not on the fast exit
        (out / "teardown").write_text("ran")


kept = Teardown()
cli.main = lambda argv=None: (sys.stdout.write("x" * 300_000), sys.stderr.write("the end"), 3)[-1]
atexit.register(lambda: (out / "atexit").write_text("ran"))
if len(sys.argv) > 2:  # another live thread: the normal exit, which waits for it
    threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").write_text("done"))).start()
cli.run()
"""


@pytest.mark.parametrize("thread", [False, True])
def test_the_command_exits_without_tearing_torch_down_and_loses_nothing(tmp_path: Path, thread: bool) -> None:
    script = tmp_path / "exit.py"
    script.write_text(_EXIT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path), *(["thread"] if thread else [])],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 3 and done.stdout == "x" * 300_000 and done.stderr.endswith("the end")
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "teardown").exists() == thread  # skipped, unless a thread made it a normal exit
    assert (tmp_path / "thread").exists() == thread
