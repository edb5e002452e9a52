"""refaccel process rules and fault injection, each case in a subprocess the parent survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import pytest
import torch

import opmatrix.backend.refaccel as refaccel
from opmatrix.backend import get_adapter

refaccel.install()

_PY = sys.executable


def _run(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    return subprocess.run([_PY, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


_MP_SCRIPT = """
import multiprocessing as mp, os, sys, torch
import opmatrix.backend.refaccel as r

def child(q):
    import torch, opmatrix.backend.refaccel as r
    r.install()
    try:
        q.put(("ok", (torch.ones(3, device="refaccel") * 2).cpu().sum().item()))
    except Exception as e:
        q.put(("error", str(e)))

if __name__ == "__main__":
    r.install()
    results = {}
    results["count_without_init"] = (torch.refaccel.device_count(), torch.refaccel.is_initialized())
    # fork before initialisation: the child initialises for itself
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if (torch.ones(2, device="refaccel") + 1).cpu().sum().item() == 4.0 else 5)
        except Exception:
            os._exit(6)
    results["fork_before_init"] = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
    x = torch.ones(2, device="refaccel")  # initialises the parent
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start(); results[method] = q.get(timeout=120); p.join()
    print(repr(results))
"""


@pytest.mark.slow  # runs the runtime suite / child processes end to end
class ForkSpawnTest(unittest.TestCase):
    """Discovery without initialisation, fork before init, spawn and forkserver children work."""

    def test_fork_rules_in_subprocess(self) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
            fh.write(_MP_SCRIPT)
        try:
            proc = subprocess.run([_PY, fh.name], capture_output=True, text=True, timeout=240)
        finally:
            os.unlink(fh.name)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        results = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr of plain data
        self.assertEqual(results["count_without_init"], (2, False))
        self.assertEqual(results["fork_before_init"], 0)
        self.assertEqual(results["spawn"], ("ok", 6.0))
        self.assertEqual(results["forkserver"], ("ok", 6.0))

    def test_fork_after_init_fails_naming_the_cause(self) -> None:
        x = torch.ones(2, device="refaccel") + 1  # this process is initialised
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report the error message and leave at once
            os.close(read)
            try:
                (x + 1).cpu()
                message = b"no error"
            except Exception as exc:  # noqa: BLE001
                message = str(exc).encode()
            os.write(write, message[:4000])
            os._exit(0)
        os.close(write)
        message = os.read(read, 4000).decode()
        os.close(read)
        os.waitpid(pid, 0)
        self.assertIn("forked after refaccel was initialised in its parent", message)
        self.assertIn("spawn", message)
        self.assertEqual((x + 1).cpu().tolist(), [3.0, 3.0])  # the parent keeps working


class FaultInjectionTest(unittest.TestCase):
    """crash / abort / hang / oom / poison do what they say, in a child; the parent survives."""

    _CALL = """
        import sys, torch, opmatrix.backend.refaccel as r
        r.install()
        x = torch.ones(3, device="refaccel")
        print("READY", flush=True)
        y = x * 2
        print("RETURNED", flush=True)
    """

    def test_crash_and_abort_kill_the_child(self) -> None:
        for mode, sig in (("crash", signal.SIGSEGV), ("abort", signal.SIGABRT)):
            with self.subTest(mode=mode):
                proc = _run(self._CALL, OPMATRIX_REFACCEL_FAULT=f"{mode}:aten::mul.Tensor")
                self.assertEqual(proc.returncode, -sig, proc.stderr[-2000:])
                self.assertIn("READY", proc.stdout)
                self.assertNotIn("RETURNED", proc.stdout)
        self.assertEqual((torch.ones(2, device="refaccel") * 2).cpu().tolist(), [2.0, 2.0])

    def test_hang_never_returns(self) -> None:
        env = {**os.environ, "OPMATRIX_REFACCEL_FAULT": "hang:aten::mul"}
        proc = subprocess.Popen([_PY, "-c", textwrap.dedent(self._CALL)], stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            self.assertEqual(proc.stdout.readline().strip(), "READY")
            time.sleep(2.0)
            self.assertIsNone(proc.poll())
        finally:
            proc.kill()
            proc.wait()

    def test_oom_then_poison_through_the_api(self) -> None:
        proc = _run(
            """
            import torch, opmatrix.backend.refaccel as r
            from opmatrix.backend import get_adapter
            r.install()
            x = torch.ones(3, device="refaccel")
            r.inject_fault("oom", "aten::mul.Tensor")
            try:
                x * 2
            except torch.OutOfMemoryError as e:
                print("OOM", "injected" in str(e))
            r.clear_faults()
            print("AFTER_OOM", (x * 2).cpu().sum().item())
            r.inject_fault("poison", "aten::add")
            for label, call in (("first", lambda: x + 1), ("later", lambda: x * 3), ("copy", lambda: x.cpu())):
                try:
                    call(); print(label, "ran")
                except RuntimeError as e:
                    print(label, "poisoned" in str(e))
            print("HEALTH", get_adapter("refaccel").health_check())
            """
        )
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        lines = proc.stdout.splitlines()
        self.assertIn("OOM True", lines)
        self.assertIn("AFTER_OOM 6.0", lines)
        self.assertEqual([line for line in lines if line.split()[0] in ("first", "later", "copy")],
                         ["first True", "later True", "copy True"])
        self.assertTrue(lines[-1].startswith("HEALTH refaccel context poisoned: uncorrectable device fault"))

    def test_bad_fault_spec_is_rejected(self) -> None:
        with self.assertRaisesRegex(ValueError, "unknown refaccel fault mode 'melt'"):
            refaccel.inject_fault("melt", "aten::add")


@pytest.mark.slow  # runs the runtime suite / child processes end to end
class InitFailureTest(unittest.TestCase):
    """An incompatible driver and a busy device fail initialisation with distinct messages."""

    _INIT = """
        import torch, opmatrix.backend.refaccel as r
        r.install()
        print("COUNT", torch.refaccel.device_count(), torch.refaccel.is_available())
        try:
            torch.ones(1, device="refaccel")
        except RuntimeError as e:
            print("ERROR", e)
    """

    def test_incompatible_and_busy(self) -> None:
        incompatible = _run(self._INIT, OPMATRIX_REFACCEL_DRIVER="incompatible").stdout
        busy = _run(self._INIT, OPMATRIX_REFACCEL_DRIVER="busy").stdout
        self.assertIn("COUNT 2 False", incompatible)
        self.assertIn("refaccel driver 1.2.0 is older than the minimum 2.0 required by this runtime", incompatible)
        self.assertIn("busy: the device partition is owned by another tenant", busy)
        self.assertNotIn("older than", busy)

    def test_every_driver_mode_has_its_own_message(self) -> None:
        from opmatrix.backend.refaccel import runtime

        before = os.environ.get("OPMATRIX_REFACCEL_DRIVER")
        messages = {}
        try:
            for mode in ("incompatible", "busy", "missing", "reset"):
                os.environ["OPMATRIX_REFACCEL_DRIVER"] = mode
                messages[mode] = runtime._init_failure()
                self.assertFalse(torch.refaccel.is_available(), mode)
            os.environ["OPMATRIX_REFACCEL_DRIVER"] = "missing"
            self.assertEqual(runtime.device_count(), 0)
        finally:
            if before is None:
                os.environ.pop("OPMATRIX_REFACCEL_DRIVER", None)
            else:
                os.environ["OPMATRIX_REFACCEL_DRIVER"] = before
        self.assertEqual(len(set(messages.values())), 4)
        self.assertIn("not loaded", messages["missing"])
        self.assertIn("in reset", messages["reset"])


class AdapterTest(unittest.TestCase):
    """The adapter exposes identity, versions, devices, claims, compile backend and health."""

    def test_adapter_surface(self) -> None:
        adapter = get_adapter("refaccel", generation=refaccel.installed_generation())
        adapter.setup()
        self.assertEqual((adapter.name, adapter.device_type, adapter.dispatch_key), ("refaccel", "refaccel", "PrivateUse1"))
        self.assertEqual([d.index for d in adapter.devices()], [0, 1])
        self.assertTrue(all(d.uuid for d in adapter.devices()))
        self.assertEqual(adapter.versions()["driver"], "2.3.1")
        self.assertIn("bfloat16", adapter.claimed_dtypes() or [])
        self.assertEqual(adapter.compile_backend(), "refaccel")
        self.assertIsNone(adapter.health_check())
        self.assertEqual(adapter.available(), (True, ""))


if __name__ == "__main__":
    unittest.main()
