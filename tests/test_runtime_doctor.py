"""``opmatrix doctor``: exit codes, the table, and initialisation failures named by cause."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import unittest

import pytest

from opmatrix.probes.runtime.doctor import exit_code, render

from .conftest import ROOT, run_cli
from .test_runtime_checks import refaccel_doctor


def doctor_with_driver(mode: str) -> subprocess.CompletedProcess[str]:
    """``opmatrix doctor --backend refaccel`` with refaccel's simulated driver in ``mode``."""
    env = {**os.environ, "OPMATRIX_REFACCEL_DRIVER": mode}
    return subprocess.run([sys.executable, "-m", "opmatrix", "doctor", "--backend", "refaccel"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


@pytest.mark.slow  # runs the runtime suite / child processes end to end
class DriverFaultTest(unittest.TestCase):
    """Incompatible and busy drivers fail doctor (exit 1), each named as itself."""

    def test_incompatible_driver(self) -> None:
        done = doctor_with_driver("incompatible")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        last = done.stdout.strip().splitlines()[-1]
        self.assertIn("levels 0-1: FAIL", last)
        self.assertIn("driver: unsupported driver version: refaccel driver 1.2.0 is older than the minimum 2.0", last)
        self.assertNotIn("busy", last)
        self.assertIn("install a driver version this backend release supports", done.stdout)
        self.assertIn("not run: the backend did not initialise", done.stdout)

    def test_busy_device(self) -> None:
        done = doctor_with_driver("busy")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        last = done.stdout.strip().splitlines()[-1]
        self.assertIn("driver: device busy / owned by another tenant: refaccel:0", last)
        self.assertNotIn("driver version", last)


class UsageTest(unittest.TestCase):
    """Invalid input exits 2 with the registry's message."""

    def test_unknown_backend(self) -> None:
        done = run_cli("doctor", "--backend", "refacel")
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stdout, "")
        self.assertIn("unknown backend 'refacel'; did you mean 'refaccel'?", done.stderr)

    def test_unknown_generation(self) -> None:
        done = run_cli("doctor", "--backend", "refaccel", "--generation", "g9")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--backend refaccel --generation g9: unknown refaccel generation 'g9'", done.stderr)

    def test_bad_plugin(self) -> None:
        done = run_cli("doctor", "--backend", "no_such_pkg.mod:Adapter")
        self.assertEqual(done.returncode, 2)
        self.assertIn("cannot import 'no_such_pkg.mod'", done.stderr)


@pytest.mark.slow  # runs the runtime suite / child processes end to end
class MetaDoctorTest(unittest.TestCase):
    """meta: exit 0, checks that do not apply say not_applicable in the table."""

    def test_table(self) -> None:
        done = run_cli("doctor", "--backend", "meta", timeout=300)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertRegex(done.stdout, r"fork_after_init\s+1\s+not_applicable\s+meta has no runtime state")
        self.assertIn("levels 0-1: pass", done.stdout)


@pytest.mark.slow  # runs the runtime suite / child processes end to end
class TableTest(unittest.TestCase):
    """The table names every check by stage, with evidence, devices and API coverage."""

    def test_render_refaccel(self) -> None:
        _, runtime, _ = refaccel_doctor()
        out = io.StringIO()
        render(runtime, "title", out)
        text = out.getvalue()
        for word in ("fork", "spawn", "stream", "event", "serial", "oom"):
            self.assertIn(word, text.lower())
        self.assertIn("stage 7: process lifecycle: fork, spawn, crashes", text)
        self.assertIn("id RA-", text)
        self.assertRegex(text, r"torch.accelerator.memory_allocated\s+own_module")
        passes = sum(c.result.value == "pass" for c in runtime.checks)
        self.assertTrue(text.rstrip().endswith(f"levels 0-1: pass ({passes} pass, 1 not_applicable)"), text[-200:])
        self.assertEqual(exit_code(runtime), 0)


class WholeWordsTest(unittest.TestCase):
    """Evidence wraps in the table and is never cut inside a word; the summary points at --json."""

    EVIDENCE = ("the runtime found neither firmware nor a driver record for refaccel:1 after the reset; "
                "bisected to the second queue, " * 3).strip()

    def _runtime(self, result: str) -> object:
        from opmatrix.schema import Runtime, RuntimeCheck

        return Runtime(checks=[RuntimeCheck(name="stream_cycle", level=1, result=result, evidence=self.EVIDENCE,
                                            advice="detect wait cycles")])

    def test_table_wraps_whole_evidence(self) -> None:
        out = io.StringIO()
        render(self._runtime("pass"), "title", out)  # type: ignore[arg-type]
        lines = [line.strip() for line in out.getvalue().splitlines()]
        first = next(i for i, line in enumerate(lines) if line.startswith("stream_cycle"))
        rest = lines[first + 1:]
        shown = " ".join([lines[first].split("pass", 1)[1].strip(), *rest[:rest.index("")]])
        self.assertIn(self.EVIDENCE, shown)
        self.assertNotIn("...", out.getvalue())

    def test_summary_points_at_json_with_the_check(self) -> None:
        from opmatrix.probes.runtime.doctor import verdict_line

        line = verdict_line(self._runtime("fail"))  # type: ignore[arg-type]
        self.assertTrue(line.endswith("... (the rest: doctor --json, check stream_cycle)"), line)
        head = line.split("stream_cycle: ", 1)[1].split(" ... (the rest")[0]
        self.assertTrue(self.EVIDENCE.startswith(head))
        self.assertTrue(self.EVIDENCE[len(head)] == " ", "cut inside a word")


if __name__ == "__main__":
    unittest.main()
