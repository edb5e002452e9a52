"""The pieces of the runtime probes: cause classification, records -> runtime section, runner tasks."""

from __future__ import annotations

import unittest

from opmatrix.backend.registry import get_adapter
from opmatrix.probes.runner.task import Skip, Task, WorkerContext
from opmatrix.probes.runtime.catalog import CATALOG, by_name
from opmatrix.probes.runtime.checks import handle, plan_runtime_tasks
from opmatrix.probes.runtime.doctor import exit_code, verdict_line
from opmatrix.probes.runtime.execute import runtime_from_records
from opmatrix.probes.runtime.initfail import classify_init_failure
from opmatrix.schema import ApiCoverage, ApiService, CheckResult, DeviceInfo, Runtime, RuntimeCheck, RuntimeRecord


class InitCauseTest(unittest.TestCase):
    """Each initialisation failure is named as itself, never as "no accelerator"."""

    CASES = {
        "refaccel driver 1.2.0 is older than the minimum 2.0 required by this runtime": "unsupported_driver",
        "CUDA driver version is insufficient for CUDA runtime version": "unsupported_driver",
        "refaccel:0 (RA-1) is busy: the device partition is owned by another tenant": "device_busy",
        "all CUDA-capable devices are busy or unavailable": "device_busy",
        "refaccel kernel driver not loaded: /dev/refaccel0 not found": "missing_driver",
        "libcuda.so.1: cannot open shared object file": "missing_driver",
        "refaccel:0 is in reset (firmware recovery in progress)": "device_reset",
        "no CUDA-capable device is detected": "no_device",
        "this torch build has no CUDA support (a CPU wheel)": "not_built",
        "initialisation failed (code 7)": "unnamed",
    }

    def test_causes(self) -> None:
        got = {msg: classify_init_failure(msg).cause for msg in self.CASES}
        self.assertEqual(got, self.CASES)


def _record(name: str, result: CheckResult, runtime: Runtime | None = None, evidence: str = "e") -> RuntimeRecord:
    spec = by_name(name)
    check = RuntimeCheck(name=name, level=spec.level, result=result, evidence=evidence)
    return RuntimeRecord(task=f"runtime|{name}", check=check, runtime=runtime)


class RuntimeSectionTest(unittest.TestCase):
    """Records in any order become one runtime section in bring-up order, facts merged."""

    def test_merge_and_order(self) -> None:
        records = [
            _record("fork_after_init", CheckResult.passed, Runtime(capabilities={"fork_after_init": "rejected_with_error"})),
            _record("identity", CheckResult.passed, Runtime(
                devices=[DeviceInfo(index=1, name="b", uuid="U1"), DeviceInfo(index=0, name="a", uuid="U0")],
                capabilities={"driver": "2.3.1"})),
            _record("dtype_claims", CheckResult.passed, Runtime(claimed_dtypes=["int64", "float32"])),
            _record("api_coverage", CheckResult.passed, Runtime(apis=[
                ApiCoverage(api="torch.Stream", service=ApiService.own_module),
                ApiCoverage(api="torch.Event", service=ApiService.none)])),
            _record("import", CheckResult.passed),
        ]
        rt = runtime_from_records(records)
        self.assertEqual([c.name for c in rt.checks], ["import", "identity", "api_coverage", "dtype_claims",
                                                        "fork_after_init"])
        self.assertEqual([d.index for d in rt.devices], [0, 1])
        self.assertEqual([d.value for d in rt.claimed_dtypes], ["float32", "int64"])
        self.assertEqual([a.api for a in rt.apis], ["torch.Event", "torch.Stream"])
        self.assertEqual(rt.capabilities, {"driver": "2.3.1", "fork_after_init": "rejected_with_error"})

    def test_exit_code_and_verdict(self) -> None:
        ok = runtime_from_records([_record("import", CheckResult.passed), _record("select", CheckResult.unknown)])
        self.assertEqual(exit_code(ok), 0)
        self.assertEqual(verdict_line(ok), "levels 0-1: pass (1 pass, 1 unknown); undecided: select")
        bad = runtime_from_records([_record("driver", CheckResult.failed, evidence="device busy")])
        self.assertEqual(exit_code(bad), 1)
        self.assertEqual(verdict_line(bad), "levels 0-1: FAIL (1 fail) -- driver: device busy")


class RunnerTaskTest(unittest.TestCase):
    """Runtime checks as runner tasks: planned in bring-up order, handled in a worker, faults recorded."""

    def test_plan(self) -> None:
        tasks = plan_runtime_tasks("refaccel", "g1")
        self.assertEqual([t.id for t in tasks], [f"runtime|{c.name}" for c in CATALOG])
        self.assertEqual([t.order for t in tasks], list(range(len(CATALOG))))
        self.assertEqual(tasks[0].kind, "runtime")
        self.assertEqual(tasks[-1].payload, {"check": "dataloader_spawn", "level": 1, "backend": "refaccel",
                                             "generation": "g1"})

    def test_handle_runs_and_skips(self) -> None:
        adapter = get_adapter("cpu")
        adapter.setup()
        ctx = WorkerContext(adapter=adapter, index=0)
        seen: list[str] = []
        task = Task(id="runtime|item", kind="runtime", payload={"check": "item", "backend": "cpu"})
        rec = handle(ctx, task, seen.append, {}, None)
        self.assertIsInstance(rec, RuntimeRecord)
        self.assertEqual((rec.check.name, rec.check.result, seen), ("item", CheckResult.passed, ["item"]))
        fault = Skip("crashed", "worker died", "SIGSEGV")
        skipped = handle(ctx, task, seen.append, {"item": fault}, None)
        self.assertEqual(skipped.check.result, CheckResult.failed)
        self.assertEqual(skipped.check.evidence, "crashed: worker died (SIGSEGV)")
        self.assertEqual(seen, ["item"])  # a skipped unit is never run again

    def test_handle_process_case_in_fresh_process(self) -> None:
        adapter = get_adapter("cpu")
        adapter.setup()
        task = Task(id="runtime|child_exit", kind="runtime", payload={"check": "child_exit", "backend": "cpu"})
        rec = handle(WorkerContext(adapter=adapter, index=0), task, lambda unit: None, {}, None)
        self.assertEqual(rec.check.result, CheckResult.passed, rec.check.evidence)
        self.assertIn("exited 0", rec.check.evidence)


class InitFailureModesTest(unittest.TestCase):
    """Backends declare how to provoke each initialisation failure; a bad declaration is named."""

    def test_module_attribute(self) -> None:
        import types

        from opmatrix.backend.initmodes import modes_from_module

        mod = types.ModuleType("myaccel")
        self.assertEqual(modes_from_module(mod), ())
        mod.OPMATRIX_INIT_FAILURE_MODES = [  # type: ignore[attr-defined]
            {"mode": "driver_mismatch", "env": {"MYACCEL_DRIVER": "1.0"}, "cause": "unsupported_driver",
             "words": ["driver", "1.0"]},
        ]
        (mode,) = modes_from_module(mod)
        self.assertEqual((mode.mode, mode.env, mode.cause, mode.words),
                         ("driver_mismatch", (("MYACCEL_DRIVER", "1.0"),), "unsupported_driver", ("driver", "1.0")))
        mod.OPMATRIX_INIT_FAILURE_MODES = [{"mode": "x", "env": {}, "cause": "gremlins"}]  # type: ignore[attr-defined]
        with self.assertRaisesRegex(ValueError, r"myaccel.OPMATRIX_INIT_FAILURE_MODES\[0\]: .*cause 'gremlins' is not one of"):
            modes_from_module(mod)

    def test_refaccel_declares_four_modes(self) -> None:
        from opmatrix.backend.registry import get_adapter

        modes = get_adapter("refaccel", "g2").init_failure_modes()
        self.assertEqual({m.cause for m in modes}, {"unsupported_driver", "missing_driver", "device_busy", "device_reset"})
        self.assertEqual(get_adapter("cpu").init_failure_modes(), ())


if __name__ == "__main__":
    unittest.main()
