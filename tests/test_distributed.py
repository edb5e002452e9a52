"""Level 5: the distributed suite, its matrix section, the gate, the diff and the site.

Fast tests build sections by hand; the ``slow`` ones run real ``torch.distributed`` process
groups on 127.0.0.1 (gloo for cpu, refaccel's host-staged c10d backend for refaccel).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from opmatrix.ci import evaluate_contract
from opmatrix.schema import (
    ArtifactError,
    BackendId,
    Evidence,
    Matrix,
    dumps_model,
    load_contract,
    load_matrix,
    loads_yaml,
    validate_data,
)
from opmatrix.schema.distributed import CaseKind, DistCase, DistOutcome, Distributed
from tests.conftest import ROOT, run_cli

CONTRACTS = ROOT / "ci" / "contracts"
TODAY = dt.date(2026, 1, 1)


def _ids() -> list[str]:
    from opmatrix.ci.distributed import required_case_ids

    req = load_contract(CONTRACTS / "scaleout-refaccel-g2.yaml").requirements[0].distributed
    assert req is not None
    return [cid for cid, _ in required_case_ids(req)]


def _case(cid: str, outcome: str = "ok", **kw: object) -> DistCase:
    kind = cid.split(".")[0]
    kind = {"ddp": "ddp", "checkpoint": "checkpoint", "failure": "failure", "topology": "topology"}.get(kind, "collective")
    fields: dict[str, object] = {"id": cid, "kind": CaseKind(kind), "c10d_backend": "refaccel_c10d", "world_size": 2,
                                 "outcome": DistOutcome(outcome)}
    if cid.startswith("failure.rank_killed"):
        fields.update(detect_seconds=0.4, timeout_seconds=3.0)
    if cid.startswith("failure.never_joins"):
        fields.update(evidence={"timeout_error": True})
    fields.update(kw)
    return DistCase.model_validate(fields)


def _matrix(cases: list[DistCase] | None, generation: str = "g2") -> Matrix:
    ev = Evidence(opmatrix_version="0", torch_version="2.13", python="3.11", platform="linux")
    section = Distributed(c10d_backend="refaccel_c10d", cases=cases) if cases is not None else None
    return Matrix(backend=BackendId(name="refaccel", device_type="refaccel", dispatch_key="PrivateUse1",
                                    generation=generation), evidence=ev, distributed=section)


class TestSchema:
    def test_section_round_trips_and_rejects_unknown_fields(self) -> None:
        """A matrix's distributed section survives YAML data; a misspelled case field is an error."""
        m = _matrix([_case("broadcast.float32.sync.w2")])
        data = loads_yaml(dumps_model(m))
        assert validate_data(data, Matrix, "m.yaml").distributed == m.distributed
        data["distributed"]["cases"][0]["outcom"] = "ok"
        with pytest.raises(ArtifactError, match="outcom"):
            validate_data(data, Matrix, "m.yaml")


class TestPlan:
    def test_every_collective_dtype_and_mode_is_planned(self) -> None:
        """World size 2 covers all collectives x 3 dtypes x sync/async; failures run in batches of their own."""
        from opmatrix.probes.distributed.cases import COLLECTIVES, plan_batches

        batches = plan_batches()
        ids = {c["id"] for _, cases in batches for c in cases}
        for name, op in COLLECTIVES:
            for dtype in ("float32", "bfloat16", "int64"):
                for mode in ("sync", "async"):
                    assert ".".join(p for p in (name, op, dtype, mode, "w2") if p) in ids
        assert {"barrier.sync.w4", "ddp.mlp.float32.w2", "checkpoint.dcp.float32.w2", "topology.w4"} <= ids
        failures = [cases for _, cases in batches if cases[0]["kind"] == "failure"]
        assert [len(c) for c in failures] == [1, 1]


class TestMerge:
    def test_worst_rank_wins_and_launcher_faults_count(self) -> None:
        """One rank wrong makes the case wrong; a launcher fault record makes it crashed; a planned death is ignored."""
        from opmatrix.probes.distributed import merge_case

        case = {"id": "x", "kind": "collective", "world_size": 2, "collective": "broadcast", "dtype": "float32"}
        recs = [{"rank": 0, "outcome": "ok", "seconds": 0.1}, {"rank": 1, "outcome": "wrong", "error": "differs"}]
        assert merge_case(case, recs, "gloo").outcome is DistOutcome.wrong
        fault = {"rank": -1, "outcome": "crashed", "error": "rank 1 exited with -9"}
        merged = merge_case(case, [recs[0], fault], "gloo")
        assert merged.outcome is DistOutcome.crashed and "rank 1" in (merged.error or "")
        planned = {**case, "kind": "failure", "dies": [1]}
        assert merge_case(planned, [recs[0]], "gloo").outcome is DistOutcome.ok


class TestGate:
    def test_g2_contract_passes_on_a_complete_section(self) -> None:
        """Every required case ok (host-staged) -> the level-5 add-on contract passes."""
        cases = [_case(cid, path="fallback") for cid in _ids()]
        result = evaluate_contract(_matrix(cases), load_contract(CONTRACTS / "scaleout-refaccel-g2.yaml"), today=TODAY)
        assert result.verdict.value == "pass", result.blocking

    def test_gap_is_named_in_the_blocking_lines(self) -> None:
        """An unsupported bf16 all_reduce blocks g1, and the gate line names the case and the error."""
        err = "RuntimeError: refaccel c10d (g1) does not support all_reduce for torch.bfloat16"
        cases = [_case(cid, "unsupported", error=err) if cid.startswith("all_reduce.sum.bfloat16") else _case(cid)
                 for cid in _ids()]
        result = evaluate_contract(_matrix(cases, "g1"), load_contract(CONTRACTS / "scaleout-refaccel-g1.yaml"),
                                   today=TODAY)
        assert result.verdict.value == "blocked"
        assert any("all_reduce.sum.bfloat16.sync.w2" in line and "does not support" in line for line in result.blocking)

    def test_slow_failure_detection_and_missing_section_block(self) -> None:
        """A killed rank noticed after the limit fails; a matrix without the section is unknown and blocks."""
        contract = load_contract(CONTRACTS / "scaleout-refaccel-g2.yaml")
        cases = [_case(cid, detect_seconds=30.0) if cid.startswith("failure.rank_killed") else _case(cid)
                 for cid in _ids()]
        slow = evaluate_contract(_matrix(cases), contract, today=TODAY)
        assert any("failure.rank_killed" in line and "limit 10" in line for line in slow.blocking)
        none = evaluate_contract(_matrix(None), contract, today=TODAY)
        assert none.verdict.value == "blocked"
        assert any(r.kind == "distributed" and r.status.value == "unknown" for r in none.requirements)


    def test_baseline_regression_blocks(self) -> None:
        """A case that passed in the baseline and is unsupported now blocks, named in the gate output."""
        contract = load_contract(CONTRACTS / "scaleout-refaccel-g2.yaml")
        before = _matrix([_case(cid) for cid in _ids()] + [_case("all_reduce.avg.float32.sync.w2")])
        after = _matrix([_case(cid) for cid in _ids()] + [_case("all_reduce.avg.float32.sync.w2", "unsupported")])
        result = evaluate_contract(after, contract, baseline=before, today=TODAY)
        assert result.verdict.value == "blocked"
        assert any(line.startswith("distributed baseline:") and "all_reduce.avg.float32.sync.w2" in line
                   for line in result.blocking)


class TestDiffAndSite:
    def test_diff_lists_worse_better_new_removed(self, tmp_path: Path) -> None:
        """``opmatrix diff`` reports a case that regressed, one that improved, one new and one removed."""
        from opmatrix.schema import dump_model

        a = _matrix([_case("broadcast.float32.sync.w2"), _case("barrier.sync.w2", "error", error="boom"),
                     _case("topology.w2")])
        b = _matrix([_case("broadcast.float32.sync.w2", "unsupported", error="no"), _case("barrier.sync.w2"),
                     _case("ddp.mlp.float32.w2")])
        dump_model(a, tmp_path / "a.yaml")
        dump_model(b, tmp_path / "b.yaml")
        proc = run_cli("diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--json")
        assert proc.returncode == 0, proc.stderr
        kinds = {c["case"]: c["kind"] for c in json.loads(proc.stdout)["distributed"]}
        assert kinds == {"broadcast.float32.sync.w2": "worse", "barrier.sync.w2": "better",
                         "ddp.mlp.float32.w2": "new", "topology.w2": "removed"}

    def test_site_has_a_distributed_table(self, tmp_path: Path) -> None:
        """The index page lists every case with its outcome and poison scope."""
        from opmatrix.reports.site import render_site

        m = _matrix([_case("broadcast.float32.sync.w2"),
                     _case("failure.rank_killed.w2", poison_scope="communicator", error="rank 1 killed")])
        html = (render_site(m, tmp_path).index).read_text()
        assert 'id="distributed"' in html and "failure.rank_killed.w2" in html and "communicator" in html


class TestSuitesFlag:
    def test_suites_parsing_and_aliases(self) -> None:
        """Default runtime,ops; --runtime-only / --no-runtime stay aliases; an unknown suite is named."""
        from opmatrix.probes.options import ProbeOptions

        def suites(**kw: object) -> set[str]:
            return ProbeOptions(backend="cpu", **kw).chosen_suites()

        assert suites() == {"runtime", "ops"}
        assert suites(suites=("distributed",)) == {"distributed"}
        assert suites(runtime_only=True) == {"runtime"}
        assert suites(suites=("runtime", "distributed"), no_runtime=True) == {"distributed"}
        with pytest.raises(ValueError, match="'distributd'"):
            suites(suites=("distributd",))

    def test_unknown_suite_exits_2(self) -> None:
        proc = run_cli("probe", "--backend", "cpu", "--suites", "nope", "--out", "/tmp/opm-never")
        assert proc.returncode == 2 and "--suites" in proc.stderr


class TestC10dResolution:
    def test_cpu_gloo_refaccel_own_and_missing(self) -> None:
        """cpu uses gloo; refaccel registers its own backend; a device without one gets the fix in the error."""
        import torch.distributed as dist

        from opmatrix.backend import get_adapter
        from opmatrix.probes.distributed.c10d import NoC10dBackend, prepare_c10d

        assert prepare_c10d(get_adapter("cpu")) == "gloo"
        ref = get_adapter("refaccel", generation="g2")
        ref.register()
        assert prepare_c10d(ref) == "refaccel_c10d" and "REFACCEL_C10D" in dist.Backend._plugins
        plugin = type("PluginAdapter", (), {"device_type": "opmtestdev"})()  # a PrivateUse1 package's device
        dist.Backend.register_backend("opmtestdev_c10d", lambda *a: None, devices=["opmtestdev"])
        assert prepare_c10d(plugin) == "opmtestdev_c10d"
        meta = get_adapter("meta")
        with pytest.raises(NoC10dBackend, match="register_backend"):
            prepare_c10d(meta)


# -- real process groups ------------------------------------------------------------------------


def _section(out: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(json.dumps(load_matrix(out / "matrix.yaml").model_dump(mode="json")))
            ["distributed"]["cases"]}


@pytest.mark.slow
def test_cpu_suite_end_to_end(tmp_path: Path) -> None:
    """probe --suites distributed on cpu: exact collectives, DDP, checkpoint, rank failure detected in time."""
    proc = run_cli("probe", "--backend", "cpu", "--suites", "distributed", "--out", str(tmp_path), "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = _section(tmp_path)
    for cid in ("all_reduce.sum.bfloat16.sync.w2", "reduce_scatter.sum.int64.async.w2", "send_recv.float32.sync.w4",
                "ddp.mlp.float32.w2", "checkpoint.dcp.float32.w2", "topology.w4", "barrier.async.w2"):
        assert cases[cid]["outcome"] == "ok", (cid, cases[cid].get("error"))
    assert cases["all_reduce.sum.float32.async.w2"]["evidence"]["async_progress"] is True
    killed = cases["failure.rank_killed.w2"]
    assert killed["outcome"] == "ok" and killed["detect_seconds"] <= killed["timeout_seconds"] + 2.5
    assert "rank 1 killed" in killed["error"] and killed["poison_scope"] == "communicator"
    joins = cases["failure.never_joins.w2"]
    assert joins["evidence"]["timeout_error"] is True and joins["detect_seconds"] >= joins["timeout_seconds"] * 0.9
    assert cases["topology.w4"]["evidence"]["ranks"] == "0,1,2,3"


@pytest.mark.slow
def test_crash_and_hang_are_blamed_and_nothing_is_lost(tmp_path: Path) -> None:
    """An unplanned rank death is 'crashed', a case past its deadline is 'hung'; the cases after both still run."""
    from opmatrix.probes.distributed import merge_case
    from opmatrix.probes.distributed.launch import run_cases

    barrier = {"kind": "collective", "collective": "barrier", "world_size": 2, "deadline": 30.0}
    cases = [
        {"id": "crash", "kind": "failure", "failure": "rank_killed", "world_size": 2, "timeout": 3.0,
         "deadline": 30.0, "dies": []},  # rank 1 kills itself, but the plan does not expect it
        {"id": "after-crash", **barrier},
        {"id": "hang", "kind": "failure", "failure": "never_joins", "world_size": 2, "timeout": 60.0,
         "deadline": 4.0, "dies": []},
        {"id": "after-hang", **barrier},
    ]
    got: dict[str, DistCase] = {}
    base = {"backend": "cpu", "generation": None, "pg_timeout": 15.0}
    run_cases(base, 2, cases, tmp_path, lambda c, recs: got.__setitem__(c["id"], merge_case(c, recs, "gloo")))
    assert got["crash"].outcome is DistOutcome.crashed and "rank 1" in (got["crash"].error or "")
    assert got["hang"].outcome is DistOutcome.hung and "deadline" in (got["hang"].error or "")
    assert got["after-crash"].outcome is DistOutcome.ok and got["after-hang"].outcome is DistOutcome.ok


@pytest.mark.slow
def test_refaccel_g1_blocked_g2_passes(tmp_path: Path) -> None:
    """refaccel's staged c10d backend: g2 passes its level-5 contract; g1 is blocked naming the bf16 all_reduce gap."""
    from opmatrix.probes.distributed import run_suite

    for gen in ("g2", "g1"):
        section = run_suite("refaccel", gen, tmp_path / gen, world_sizes=(2,), progress=False)
        m = _matrix(list(section.cases), gen)
        result = evaluate_contract(m, load_contract(CONTRACTS / f"scaleout-refaccel-{gen}.yaml"), today=TODAY)
        ddp = section.case("ddp.mlp.float32.w2")
        assert ddp is not None and ddp.outcome is DistOutcome.ok and ddp.path.value == "fallback"
        assert (ddp.evidence.get("host_staged_bytes") or 0) > 0
        if gen == "g2":
            assert result.verdict.value == "pass", result.blocking
        else:
            assert result.verdict.value == "blocked"
            assert any("all_reduce.sum.bfloat16" in line and "does not support" in line for line in result.blocking)


class _FinishesBetweenReadAndPoll:
    """A rank that writes its result and exits 0 in the moment between the launcher's read of its
    progress file and its ``poll()``: the race a busy machine hits now and then, made deterministic
    (a real process cannot be scheduled into that window on demand)."""

    def __init__(self, log: Path, case: str) -> None:
        self.log, self.case, self.returncode = log, case, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.log.write_text(json.dumps({"case": self.case, "event": "result", "rank": 0, "outcome": "ok"}) + "\n")
            self.returncode = 0
        return self.returncode


def test_a_rank_that_finishes_as_it_is_polled_is_not_blamed(tmp_path: Path) -> None:
    from opmatrix.probes.distributed.launch import _watch
    from opmatrix.probes.runner.calibrate import Calibration

    rank = _FinishesBetweenReadAndPoll(tmp_path / "rank0.jsonl", "c1")
    cal = Calibration(plain_start=1.0, backend_start=0.5, load=1.0)
    done, fault = _watch([rank], tmp_path, [{"id": "c1", "deadline": 5.0}], cal)  # type: ignore[list-item]
    assert (done, fault) == (1, None)
