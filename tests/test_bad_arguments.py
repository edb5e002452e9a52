"""Every argument is checked before any work starts: exit 2, one line naming the option and the
fix, nothing created (no output directory, no worker, no measuring process).

One parametrized case per class of bad input and per command: empty lists, non-finite or
out-of-range numbers, unknown backend / generation / dtype / suite, non-versions, user modules that
do not import or factories that return no ``nn.Module``, PrivateUse1 modules that do not import or
register no device. The CLI runs in-process (``opmatrix.cli.main``) except where a real console
script or a fresh interpreter is the point.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opmatrix.cli import main

from .conftest import EXAMPLES, ROOT

MATRIX = str(EXAMPLES / "softmax-matrix.yaml")


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of the CLI in-process; argparse's own errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


CASES = [
    # probe: empty lists, unknown names, numbers, user factories
    (["probe", "--backend", "cpu", "--suites", ","], "--suites: empty"),
    (["probe", "--backend", "cpu", "--suites", "ops,nope"], "--suites: unknown value 'nope'"),
    (["probe", "--backend", "refaccel", "--suites", "workloads", "--workloads", ","], "--workloads: empty"),
    (["probe", "--backend", "cpu", "--suites", "workloads", "--workloads", "no_such_module_x:make"],
     "--workloads: 'no_such_module_x:make': cannot import 'no_such_module_x': ModuleNotFoundError"),
    (["probe", "--backend", "cpu", "--suites", "workloads", "--workloads", "os.path:no_such_factory"],
     "--workloads: 'os.path:no_such_factory': module 'os.path' has no callable 'no_such_factory'"),
    (["probe", "--backend", "cpu", "--workload-dtypes", "float64"], "--workload-dtypes: unknown value 'float64'"),
    (["probe", "--backend", "cpu", "--dtypes", "float33"], "--dtypes: unknown value 'float33'; did you mean 'float32'?"),
    (["probe", "--backend", "nosuchaccel", "--ops", "add"], "--backend: unknown backend 'nosuchaccel'"),
    (["probe", "--backend", "refaccel", "--generation", "g9"], "--generation: refaccel has no generation 'g9'"),
    (["probe", "--backend", "cpu", "--workers", "0"], "--workers: must be at least 1, got 0"),
    (["probe", "--backend", "cpu", "--max-restarts", "-1"], "--max-restarts: must be at least 0, got -1"),
    (["probe", "--backend", "cpu", "--timeout", "inf"], "--timeout: must be a finite number of seconds above 0"),
    (["probe", "--backend", "cpu", "--workers", "two"], "opmatrix probe: argument --workers: invalid int value"),
    (["probe", "--backend", "cpu", "--runtime-only", "--no-runtime"], "--runtime-only and --no-runtime: choose one"),
    (["probe", "--backend", "", "--ops", "add"], "--backend: empty"),
    (["probe", "--backend", "cpu", "--shard", "3/2"], "--shard '3/2': expected I/N"),
    (["probe", "--backend", "cpu", "--devices", "a"], "--devices: expected"),
    (["probe", "--backend", "cpu", "--ops", "add", "--ops", "mul"], "opmatrix probe: --ops: given more than once"),
    (["probe", "--backend", "cpu", "--workers", "1", "--workers=2"], "opmatrix probe: --workers: given more than once"),
    (["probe", "--backend", "cpu", "--timeout", "5", "--dtypes", "float32", "--timeout", "9"],
     "opmatrix probe: --timeout: given more than once"),
    (["probe", "--backend", "cpu", "--ops", "nosuchop_zz"], "--ops: 'nosuchop_zz' matches no OpInfo"),
    (["probe", "--backend", "cpu", "--ops", "add", "--compile-backend", "inductr"],
     "--compile-backend: 'inductr' is not a torch.compile backend (registered: aot_eager"),
    # bench: every argument before the first measuring process
    (["bench", "--backend", "refaccel", "--generation", "g2", "--ops", "add", "--repetitions", "0"],
     "--repetitions: must be at least 1, got 0"),
    (["bench", "--backend", "refaccel", "--slowdown", "nan"], "--slowdown: must be a finite number of at least 1"),
    (["bench", "--backend", "refaccel", "--slowdown", "0.5"], "--slowdown: must be a finite number of at least 1"),
    (["bench", "--backend", "refaccel", "--window-ms=-inf"], "--window-ms: must be a finite number above 0"),
    (["bench", "--backend", "refaccel", "--runs", "0"], "--runs: must be at least 1, got 0"),
    (["bench", "--backend", "refaccel", "--modes", ","], "--modes: empty"),
    (["bench", "--backend", "refaccel", "--workloads", ","], "--workloads: empty"),
    (["bench", "--backend", "nosuchaccel", "--workloads", "mlp"], "--backend: unknown backend 'nosuchaccel'"),
    (["bench", "--backend", "refaccel", "--generation", "g9", "--ops", "add"], "--generation: refaccel has no"),
    (["bench", "--backend", "cpu", "--dtype", "float33"], "opmatrix bench: argument --dtype: invalid choice"),
    (["bench", "--backend", "cpu", "--workloads", "nosuchnet"], "--workloads: unknown workload 'nosuchnet' (choose from"),
    (["bench", "--backend", "cpu", "--ops", "add,nosuchop"], "--ops: unknown hot op 'nosuchop' (choose from add,"),
    # compat: versions, backend, ops before any environment is made
    (["compat", "--torch", ","], "--torch: empty; name at least one"),
    (["compat", "--torch", "2.x"], "--torch: '2.x' is not a torch version"),
    (["compat", "--torch", "2.13.0", "--backend", "nosuchaccel"], "--backend: unknown backend 'nosuchaccel'"),
    (["compat", "--torch", "2.13.0", "--ops", ","], "--ops: empty"),
    (["compat", "--torch", "2.13.0", "--backend", "refaccel", "--generation", "g9"], "--generation: refaccel has no generation 'g9'"),
    (["compat", "--torch", "2.13.0", "--ops", "no_such_op_xyz"], "--ops: 'no_such_op_xyz' matches no OpInfo"),
    (["compat", "--torch", "2.13.0", "--timeout", "0"], "--timeout: must be a finite number of seconds above 0"),
    # explain, merge, report
    (["explain", MATRIX, "no_such_module_x:make"], "WORKLOAD: 'no_such_module_x:make': cannot import"),
    (["explain", MATRIX, "nosuchnet"], "WORKLOAD: unknown workload 'nosuchnet'"),
    (["explain", MATRIX, "mlp", "--dtype", "int8"], "opmatrix explain: argument --dtype: invalid choice"),
    (["report", MATRIX, "--gate", ""], "--gate: empty"),
    (["merge", "/nonexistent/journal.jsonl"], "opmatrix merge: the following arguments are required: --out"),
    # typos: the mistyped word is named (before the option it was meant to be is missed) with the nearest spelling
    (["probe", "--backed", "refaccel", "--ops", "add"],
     "opmatrix probe: unknown option --backed; did you mean --backend? (see opmatrix probe --help)"),
    (["probe", "--backend", "cpu", "--wrkers=2"], "opmatrix probe: unknown option --wrkers; did you mean --workers?"),
    (["gate", "--matrx", MATRIX, "--contract", "c.yaml"], "opmatrix gate: unknown option --matrx; did you mean --matrix?"),
    (["probe", "--backend", "cpu", "--zzzzzz"], "opmatrix probe: unknown option --zzzzzz (see opmatrix probe --help)"),
    (["prob", "--backend", "cpu"], "opmatrix: unknown command 'prob'; did you mean 'probe'? (see opmatrix --help)"),
    (["--versoin", "probe"], "opmatrix: unknown option --versoin; did you mean --version? (see opmatrix --help)"),
]


@pytest.mark.parametrize(("argv", "says"), CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_bad_argument_exits_2_in_one_line_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        argv: list[str], says: str) -> None:
    """exit 2, one line that starts with the option's name (or argparse's), nothing under --out"""
    monkeypatch.chdir(tmp_path)  # a default --out (probe: out/<backend>) would land here
    out = tmp_path / "out"
    extra = [] if argv[0] in ("merge", "explain") else ["--out", str(out)]
    code, err = _run(capsys, [*argv, *extra])
    assert code == 2, err
    assert _one_line(err).startswith(says), err
    assert list(tmp_path.iterdir()) == [], "something was created"


def test_merge_and_report_of_missing_files_create_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An input that does not exist is named before --out is made."""
    for argv in (["merge", str(tmp_path / "nope.jsonl")], ["report", str(tmp_path / "nope.yaml")]):
        code, err = _run(capsys, [*argv, "--out", str(tmp_path / "out")])
        assert code == 2 and "nope" in _one_line(err)
        assert not (tmp_path / "out").exists()


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user module with factories that return no model, or raise."""
    (tmp_path / "badfactories.py").write_text(textwrap.dedent("""
        def not_a_model():
            return 42, ()

        def raises():
            raise RuntimeError("weights not found")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("factory", "says"), [
    ("badfactories:not_a_model", "WORKLOAD: workload factory badfactories:not_a_model returned tuple, not (nn.Module"),
    ("badfactories:raises", "WORKLOAD: workload factory badfactories:raises raised RuntimeError: weights not found"),
])
def test_explain_factory_returning_no_model_exits_2(factories: Path, capsys: pytest.CaptureFixture[str],
                                                    factory: str, says: str) -> None:
    code, err = _run(capsys, ["explain", MATRIX, factory])
    assert code == 2 and _one_line(err).startswith(says), err


def _console(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed ``opmatrix`` console script (not ``python -m``: its sys.path lacks the cwd)."""
    script = shutil.which("opmatrix", path=str(Path(sys.executable).parent)) or "opmatrix"
    return subprocess.run([script, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_privateuse1_module_that_does_not_import_is_one_line(tmp_path: Path) -> None:
    res = _console("probe", "--backend", "privateuse1:nosuch_vendor_pkg", "--ops", "add", "--out", "o", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert _one_line(res.stderr) == ("--backend privateuse1:nosuch_vendor_pkg: cannot import 'nosuch_vendor_pkg': "
                                     "ModuleNotFoundError: No module named 'nosuch_vendor_pkg'")
    assert not (tmp_path / "o").exists()


def test_privateuse1_module_that_registers_no_device_names_what_it_must_register(tmp_path: Path) -> None:
    (tmp_path / "silent_vendor.py").write_text("import torch  # imports, registers nothing\n")
    (tmp_path / "broken_vendor.py").write_text("import torch\nraise ImportError('libvendor.so: not found')\n")
    res = _console("probe", "--backend", "privateuse1:silent_vendor", "--ops", "add", "--out", "o", cwd=tmp_path)
    line = _one_line(res.stderr)
    assert res.returncode == 2 and "registered no PrivateUse1 device" in line, res.stderr
    assert "rename_privateuse1_backend" in line and "aten::empty.memory_format" in line
    res = _console("bench", "--backend", "privateuse1:broken_vendor", "--ops", "add", "--out", "o", cwd=tmp_path)
    assert res.returncode == 2 and "ImportError: libvendor.so: not found" in _one_line(res.stderr), res.stderr
    assert not (tmp_path / "o").exists()


def test_bench_with_an_unknown_backend_starts_nothing(tmp_path: Path) -> None:
    """From the console script: exit 2 in one line, no output directory."""
    res = _console("bench", "--backend", "nosuchaccel", "--workloads", "mlp", "--out", "b", cwd=tmp_path)
    assert res.returncode == 2 and _one_line(res.stderr).startswith("--backend: unknown backend"), res.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.slow  # a real probe through the installed console script, workers included
def test_own_adapter_from_the_repository_root_with_the_console_script(tmp_path: Path) -> None:
    """``tests.example_adapter:HostAsDevice`` resolves from the clone's root as README says, and the
    workers (which import it themselves) find it too."""
    res = _console("probe", "--backend", "tests.example_adapter:HostAsDevice", "--ops", "add", "--dtypes",
                   "float32", "--no-runtime", "--quiet", "--out", str(tmp_path / "own"), cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "host-as-device: 1/1 tasks" in res.stdout
    assert (tmp_path / "own" / "matrix.yaml").exists()
