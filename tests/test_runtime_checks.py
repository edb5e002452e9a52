"""Runtime checks (levels 0-1) against real backends, each run in isolated processes.

refaccel runs through the real CLI (``opmatrix doctor --json``); cpu, meta and refaccel g1
through :func:`run_checks`. The fork / spawn suite forks and spawns for real.
"""

from __future__ import annotations

import functools
import json
import os
import unittest
from typing import Any
from unittest import mock

import pytest

from opmatrix.probes.runtime.catalog import CATALOG
from opmatrix.probes.runtime.execute import run_checks, runtime_from_records
from opmatrix.schema import ApiService, CheckResult, Runtime

from .conftest import run_cli

PASS, NA, FAIL, UNKNOWN = CheckResult.passed, CheckResult.not_applicable, CheckResult.failed, CheckResult.unknown
PROCESS_CHECKS = [c.name for c in CATALOG if c.kind == "process" and c.name != "init_messages"]
#: what a check that could not be judged on a loaded machine says (docs/runner.md#calibrated-deadlines)
TOO_LOADED = "the machine is too loaded to judge a timeout"


@functools.cache
def doctor_payload() -> dict[str, Any]:
    """``opmatrix doctor --backend refaccel --json``, parsed, with its exit code."""
    done = run_cli("doctor", "--backend", "refaccel", "--json", timeout=1800)
    payload: dict[str, Any] = json.loads(done.stdout)
    payload["returncode"] = done.returncode
    return payload


def refaccel_doctor() -> tuple[int, Runtime, float]:
    """``opmatrix doctor --backend refaccel --json``: exit code, runtime section, seconds."""
    payload = doctor_payload()
    return payload["returncode"], Runtime.model_validate(payload["runtime"]), payload["seconds"]


def undecided_by_load(runtime: Runtime) -> list[str]:
    """Checks left unknown because the machine was too loaded to judge their timeout."""
    return [c.name for c in runtime.checks if c.result is UNKNOWN and TOO_LOADED in c.evidence]


@functools.cache
def runtime_of(backend: str, generation: str | None = None, names: tuple[str, ...] | None = None) -> Runtime:
    return runtime_from_records(run_checks(backend, generation, names))


class RefaccelDoctorTest(unittest.TestCase):
    """Every check passes on the reference accelerator g2, in bring-up order, quickly."""

    def test_exit_zero_and_every_check(self) -> None:
        code, runtime, _ = refaccel_doctor()
        self.assertEqual(code, 0, [(c.name, c.evidence) for c in runtime.checks if c.result is not PASS])
        self.assertEqual([c.name for c in runtime.checks], [c.name for c in CATALOG])
        # a loaded machine may leave a check undecided (saying so), never failed; refaccel's storages
        # have no inter-process handle: the one check that does not apply, saying so
        undecided = set(undecided_by_load(runtime))
        self.assertEqual({c.name: c.result for c in runtime.checks if c.result is not PASS and c.name not in undecided},
                         {"ipc_sharing": NA})
        self.assertIn("refaccel storages have no inter-process handle", runtime.check("ipc_sharing").evidence)
        self.assertEqual({c.level for c in runtime.checks}, {0, 1, 4})
        self.assertEqual(runtime.check("identity").level, 1)  # docs/levels.md: level 0 is import, driver, count, select

    def test_round_two_checks_rest_on_evidence(self) -> None:
        _, rt, _ = refaccel_doctor()
        self.assertIn("REFACCEL_ERROR_OUT_OF_MEMORY (2)", rt.check("error_cause").evidence)
        self.assertIn("changed ['fast_math'] and recompiled; restored: a hit", rt.check("compile_cache_identity").evidence)
        self.assertIn("refaccel:1: copies both ways right, can_device_access_peer True", rt.check("peer_access").evidence)
        self.assertIn("priority range (least 0, greatest -2)", rt.check("stream_priority").evidence)
        self.assertIn("is_pinned True; pageable False", rt.check("pinned_memory").evidence)
        self.assertIn("replayed on new values", rt.check("graph_replay").evidence)
        self.assertIn("completed in", rt.check("stream_cycle").evidence)

    def test_deadlines_are_calibrated(self) -> None:
        """The deadlines come from the machine measured at the start, and the evidence says which."""
        cal = doctor_payload()["calibration"]
        self.assertGreater(cal["plain_start"], 0)
        self.assertIsNone(cal["problem"])
        start = cal["plain_start"] + cal["backend_start"]
        self.assertAlmostEqual(cal["child_deadline"], 30 + 4 * start, delta=0.1)
        self.assertAlmostEqual(cal["case_deadline"], 90 + 20 * start, delta=0.1)
        spawn = refaccel_doctor()[1].check("spawn").evidence
        self.assertIn(f"deadline {cal['child_deadline']:.0f} s (calibrated: plain child {cal['plain_start']:.2f} s",
                      spawn)


class RefaccelLevel0Test(unittest.TestCase):
    """Discovery, driver, init messages, identity and generic API coverage on refaccel."""

    def test_driver_and_identity(self) -> None:
        _, rt, _ = refaccel_doctor()
        self.assertIn("driver 2.3.1", rt.check("driver").evidence)
        self.assertEqual([d.index for d in rt.devices], [0, 1])
        self.assertTrue(all(d.uuid and d.uuid.startswith("RA-") for d in rt.devices))
        self.assertEqual(len({d.uuid for d in rt.devices}), 2)
        for key in ("driver", "firmware", "isa"):
            self.assertTrue(rt.capabilities.get(key), key)

    def test_init_failures_name_their_causes(self) -> None:
        evidence = refaccel_doctor()[1].check("init_messages").evidence
        for phrase in ("driver_mismatch -> unsupported driver version", "device_busy -> device busy",
                       "missing_driver -> driver or firmware missing", "device_reset -> device in reset"):
            self.assertIn(phrase, evidence)

    def test_api_coverage_says_which_path(self) -> None:
        _, rt, _ = refaccel_doctor()
        service = {a.api: a.service for a in rt.apis}
        self.assertEqual(service["torch.accelerator.device_count"], ApiService.generic)
        self.assertEqual(service["torch.accelerator.memory_allocated"], ApiService.own_module)
        self.assertEqual(service["torch.accelerator.set_device_index"], ApiService.own_module)
        self.assertEqual(service["torch.Stream"], ApiService.own_module)
        self.assertEqual(service["torch.Event"], ApiService.own_module)
        self.assertEqual(service["torch.profiler device activity"], ApiService.none)
        self.assertEqual(rt.check("stream_order").via, "torch.refaccel.Stream")
        self.assertEqual(rt.check("memory_stats").via, "torch.refaccel")
        self.assertEqual(rt.check("enumerate").via, "torch.accelerator.device_count")


class RefaccelLevel1Test(unittest.TestCase):
    """Tensor semantics, streams / events, RNG and memory on refaccel, with measured evidence."""

    def test_claims_both_ways(self) -> None:
        import opmatrix.backend.refaccel.table as table

        _, rt, _ = refaccel_doctor()
        storable = sorted(str(d).removeprefix("torch.") for d in table.storable_dtypes())
        self.assertEqual(sorted(d.value for d in rt.claimed_dtypes), storable)
        self.assertIn("exactly the claimed ones work", rt.check("dtype_claims").evidence)
        self.assertIn(f"{len(storable)} claimed dtypes", rt.check("views").evidence)

    def test_evidence_is_measured(self) -> None:
        _, rt, _ = refaccel_doctor()
        self.assertIn("torch.OutOfMemoryError", rt.check("oom").evidence)
        self.assertIn("device usable afterwards", rt.check("oom").evidence)
        self.assertRegex(rt.check("event_elapsed_time").evidence, r"elapsed_time \d+\.\d+ ms")
        self.assertIn("all 1048576 values 42.0", rt.check("event_cross_stream").evidence)
        self.assertIn("refaccel:0 <-> refaccel:1", rt.check("copy_d2d").evidence)
        self.assertIn("onto refaccel:0 and cpu", rt.check("serialization").evidence)


class RefaccelProcessTest(unittest.TestCase):
    """The fork / spawn suite on refaccel: fork after initialisation is refused, naming spawn."""

    def test_fork_after_init_names_the_cause(self) -> None:
        check = refaccel_doctor()[1].check("fork_after_init")
        self.assertIs(check.result, PASS)
        self.assertIn("forked after refaccel was initialised", check.evidence)
        self.assertIn("spawn", check.evidence)
        self.assertEqual(refaccel_doctor()[1].capabilities["fork_after_init"], "rejected_with_error")

    def test_discovery_does_not_initialise(self) -> None:
        self.assertIn("is_initialized() stayed False", refaccel_doctor()[1].check("fork_before_init").evidence)

    def test_children(self) -> None:
        rt = refaccel_doctor()[1]
        self.assertIn("killed by SIGSEGV", rt.check("child_crash").evidence)
        self.assertIn("same device id RA-", rt.check("spawn").evidence)
        self.assertIn("sum 140.0", rt.check("dataloader_spawn").evidence)


class CpuTest(unittest.TestCase):
    """The host passes what applies to it and says not_applicable for the rest; fork is safe."""

    def test_results(self) -> None:
        rt = runtime_of("cpu")
        self.assertEqual([c.name for c in rt.checks], [c.name for c in CATALOG])
        bad = [(c.name, c.evidence) for c in rt.checks if c.result not in (PASS, NA)]
        self.assertEqual(bad, [])
        for name in ("driver", "init_messages", "stream_order", "event_elapsed_time", "oom", "memory_stats",
                     "pinned_memory", "peer_access", "ipc_sharing", "stream_cycle", "stream_priority", "graph_replay",
                     "error_cause", "compile_cache_identity"):
            self.assertIs(rt.check(name).result, NA, name)
        self.assertIn("torch.cpu exposes no persistent compile cache", rt.check("compile_cache_identity").evidence)
        self.assertIs(rt.check("dlpack").result, PASS)
        for name in ("allocation", "views", "conversion", "serialization", "rng", *PROCESS_CHECKS):
            self.assertIs(rt.check(name).result, PASS, name)
        self.assertIn("11 default dtypes (the runtime claims none)", rt.check("views").evidence)
        self.assertIn("fork-safe", rt.check("fork_after_init").evidence)
        self.assertEqual(rt.capabilities["fork_after_init"], "works")


class MetaTest(unittest.TestCase):
    """meta: shape-only checks pass; everything that needs values or a runtime is not_applicable."""

    def test_results(self) -> None:
        rt = runtime_of("meta")
        self.assertIs(rt.check("allocation").result, PASS)
        self.assertIs(rt.check("views").result, PASS)
        for name in ("copy_h2d_d2h", "item", "serialization", "identity", "oom", *PROCESS_CHECKS):
            self.assertIs(rt.check(name).result, NA, name)
        self.assertNotIn(FAIL, {c.result for c in rt.checks})


class GenerationTest(unittest.TestCase):
    """g1 is identified as itself."""

    def test_g1_identity(self) -> None:
        rt = runtime_of("refaccel", "g1", ("import", "driver", "identity", "allocation"))
        self.assertEqual([c.name for c in rt.checks], ["import", "driver", "identity", "allocation"])
        self.assertTrue(all(c.result is PASS for c in rt.checks), rt.checks)
        self.assertTrue(all(d.name.startswith("RefAccel R1") for d in rt.devices))


class PluginTest(unittest.TestCase):
    """A ``package.module:attr`` adapter is probed like a built-in one (here: refaccel's own class)."""

    def test_plugin_spec(self) -> None:
        spec = "opmatrix.backend.refaccel.adapter:RefaccelAdapter"
        names = ("import", "driver", "init_messages", "enumerate", "fork_after_init")
        rt = runtime_of(spec, "g2", names)
        self.assertEqual({c.name: c.result for c in rt.checks}, dict.fromkeys(names, PASS))
        self.assertIn("import opmatrix.backend.refaccel", rt.check("import").evidence)


class IsolationTest(unittest.TestCase):
    """A check that crashes or hangs the worker is blamed, and the following checks still run."""

    def test_crash_and_hang_are_blamed(self) -> None:
        names = ["kernel", "rng", "stream_order"]
        with mock.patch.dict(os.environ, {"OPMATRIX_REFACCEL_FAULT": "crash:aten::uniform_"}):
            crashed = runtime_from_records(run_checks("refaccel", None, names))
        self.assertIs(crashed.check("rng").result, FAIL)
        self.assertIn("killed by SIGSEGV", crashed.check("rng").evidence)
        self.assertIs(crashed.check("stream_order").result, PASS)
        from opmatrix.probes.runner.calibrate import calibrate

        cal = calibrate("refaccel")
        limit = 15 * cal.slowdown  # short for a hang, yet as long on a loaded machine as 15 s on an idle one
        with mock.patch.dict(os.environ, {"OPMATRIX_REFACCEL_FAULT": "hang:aten::uniform_"}):
            hung = runtime_from_records(run_checks("refaccel", None, names, check_deadline=limit, calibration=cal))
        self.assertIn(f"hung: no result within {limit:.0f} s (the worker was killed), again when retried in a "
                      "fresh worker", hung.check("rng").evidence)
        self.assertIn(f"deadline {limit:.0f} s (calibrated: plain child", hung.check("rng").evidence)
        self.assertIs(hung.check("stream_order").result, PASS)

    def test_poisoned_device_gets_a_new_worker(self) -> None:
        with mock.patch.dict(os.environ, {"OPMATRIX_REFACCEL_FAULT": "poison:aten::uniform_"}):
            rt = runtime_from_records(run_checks("refaccel", None, ["rng", "stream_order"]))
        self.assertIs(rt.check("rng").result, FAIL)
        self.assertIn("the device was unusable afterwards (refaccel context poisoned", rt.check("rng").evidence)
        self.assertIn("fault scope context (same stream: fails", rt.check("rng").evidence)
        self.assertIn("a fresh process on device 0: works", rt.check("rng").evidence)
        self.assertIs(rt.check("stream_order").result, PASS)


class TimeoutJudgementTest(unittest.TestCase):
    """A second timeout is the backend's finding only where the machine could judge it."""

    def verdicts(self, plain_now: float, load_now: float) -> Any:
        from opmatrix.probes.runner import calibrate
        from opmatrix.probes.runtime.casehost import _judged
        from opmatrix.probes.runtime.spec import failed, passed

        cal = calibrate.Calibration(plain_start=2.0, backend_start=1.0, load=1.0, backend="refaccel")
        found = {"spawn": failed("spawn child did not finish within 42 s (killed)"), "fork_after_init": passed("ok")}
        with mock.patch.object(calibrate, "machine_now", return_value=(plain_now, load_now)):
            return _judged(found, [42.0], cal)

    def test_loaded_machine_is_unknown_with_the_times(self) -> None:
        judged = self.verdicts(plain_now=9.0, load_now=1.0)  # a plain child now 4.5x slower than at calibration
        self.assertIs(judged["spawn"].result, UNKNOWN)
        self.assertIn("a plain child now starts in 9.00 s (at calibration 2.00 s)", judged["spawn"].evidence)
        self.assertIn("deadline 42 s (calibrated: plain child 2.00 s, refaccel start 1.00 s", judged["spawn"].evidence)
        self.assertIs(judged["fork_after_init"].result, PASS)
        self.assertIs(self.verdicts(plain_now=2.0, load_now=7.0)["spawn"].result, UNKNOWN)  # load 7 per CPU

    def test_machine_able_to_judge_fails_the_check(self) -> None:
        judged = self.verdicts(plain_now=2.5, load_now=1.0)
        self.assertIs(judged["spawn"].result, FAIL)
        self.assertIn("timed out again when retried in a fresh process; deadline 42 s", judged["spawn"].evidence)


class DeviceIndexTest(unittest.TestCase):
    """Every check gives the same verdict from any device: select from device 1 was failing."""

    def test_select_and_api_paths_alike_on_each_device(self) -> None:
        import subprocess
        import sys

        script = (
            "import json\n"
            "from opmatrix.backend.registry import get_adapter\n"
            "from opmatrix.probes.runtime.context import Probe\n"
            "from opmatrix.probes.runtime.discovery import check_select\n"
            "a = get_adapter('refaccel', None); a.setup(); out = {}\n"
            "for i in (0, 1):\n"
            "    a.select_device(i); p = Probe.from_adapter(a, 'refaccel')\n"
            "    v = check_select(p)\n"
            "    out[i] = [v.result.value, v.evidence, v.via, p.api('current_device_index')[1]]\n"
            "print(json.dumps(out))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True)
        out = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertEqual(out["0"][0], "pass", out["0"])
        self.assertEqual(out["1"], out["0"])  # same verdict, same evidence, same API path from device 1


@pytest.mark.slow
class SlowInitialisationTest(unittest.TestCase):
    """A backend whose initialisation takes longer than any fixed deadline had (30 s a child) passes."""

    def test_slow_but_healthy_backend_passes(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "OPMATRIX_CALIBRATION"}
        env["OPMATRIX_REFACCEL_INIT_DELAY"] = "31"
        with mock.patch.dict(os.environ, env, clear=True):
            rt = runtime_from_records(run_checks("refaccel", None, ("driver", "spawn")))
        self.assertEqual({c.name: c.result for c in rt.checks}, {"driver": PASS, "spawn": PASS},
                         [c.evidence for c in rt.checks])
        self.assertRegex(rt.check("driver").evidence, r"initialised in (3[1-9]|[4-9]\d)\.\d\d s")
        self.assertRegex(rt.check("spawn").evidence, r"spawn child initialised and computed in (3[1-9]|[4-9]\d)")


if __name__ == "__main__":
    unittest.main()
