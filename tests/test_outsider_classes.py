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
  folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_truth_toyaccel import ROOT, _probe

pytestmark = pytest.mark.slow


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


def test_a_module_that_registers_no_device_fails_the_import_check(tmp_path: Path) -> None:
    proc = _doctor(tmp_path, "privateuse1:json")
    assert proc.returncode == 1, proc.stdout[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("import "))
    assert "FAIL" in line and "registered no PrivateUse1 device" in line, line
    assert "privateuseone" not in proc.stdout, proc.stdout[-3000:]


def test_a_folder_named_like_the_package_does_not_shadow_it_in_child_processes(tmp_path: Path) -> None:
    shadow = tmp_path / "tests"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the folder in the current directory was imported')\n")
    proc = _doctor(tmp_path, "privateuse1:tests.toyaccel_plugin")
    assert "the folder in the current directory was imported" not in proc.stdout, proc.stdout[-3000:]
    for check in ("import", "driver", "enumerate", "allocation", "spawn"):
        line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith(check + " "))
        assert " pass " in line, line
