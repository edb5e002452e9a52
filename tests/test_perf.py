"""Level 6: performance records, the noise-aware regression gate, and the refaccel slowdown flag."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from opmatrix.ci.compat import evaluate_compat
from opmatrix.ci.perf import compare_records, evaluate_perf, load_records, ratio_ci
from opmatrix.probes.perf.stats import summarize
from opmatrix.schema import dump_model, validate_data
from opmatrix.schema.gate import CellStatus, Status
from opmatrix.schema.jsonschema import json_schema_text
from opmatrix.schema.perf import CompatCheck, CompatReport, CompatRequirement, CompatRun, PerfRecord, PerfRequirement

from .conftest import ROOT, run_cli

#: the words the seed's level 6 requires every published result to name
SEED_FIELDS = ["warm", "window", "precision", "batch", "driver", "power", "fallback", "compiler", "input"]


def _samples(median: float, n: int = 15, spread: float = 0.03, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def _record(samples: list[float], rid: str = "workload.mlp.eager.float32", fallback: str = "not_observed",
            backend: str = "cpu") -> PerfRecord:
    s = summarize([samples], 0.95)
    data = {
        "kind": "perf-record", "id": rid,
        "subject": {"kind": "workload", "name": "mlp", "mode": "eager"},
        "input": {"shapes": [[32, 64]], "dtype": "float32", "generator": "torch.randn", "seed": 0},
        "precision": "float32", "batch": 32, "concurrency": 1, "backend": backend,
        "hardware": {"device_type": "cpu", "device_name": "x86_64", "device_count": 1, "host_cpu": "cpu",
                     "host_cores": 2, "machine": "Linux"},
        "power_mode": "unknown", "driver": "unknown", "firmware": "unknown", "framework": {"torch": "2.13.0"},
        "compiler": {"name": "eager", "backend": None, "options": {}}, "threads": 1,
        "timing": {"clock": "process_cpu", "warmup": 10, "window": 100, "repetitions": len(samples), "runs": 1,
                   "samples_s": samples, "median_s": s["median"], "iqr_s": s["iqr"], "ci_low_s": s["ci_low"],
                   "ci_high_s": s["ci_high"], "confidence": 0.95, "wall_median_s": s["median"], "synchronized": True},
        "fallback": {"state": fallback, "ops": ["aten::sort"] if fallback == "observed" else [], "source": "test",
                     "invalidates_latency": fallback == "observed"},
        "injected_slowdown": None, "measured_at": "2026-11-30T00:00:00+00:00",
    }
    return validate_data(data, PerfRecord, "test record")


def test_same_distribution_passes_and_30_percent_slower_is_a_regression_naming_the_interval():
    req = PerfRequirement(max_slowdown=0.10)
    base = _record(_samples(1e-4, seed=1))
    same = _record(_samples(1e-4, seed=2))
    slow = _record(_samples(1.3e-4, seed=3))
    assert compare_records(same, base, req)[0] is False
    regressed, why = compare_records(slow, base, req)
    assert regressed and "CI [" in why and "regression" in why
    point, lo, hi = ratio_ci([slow.timing.samples_s], [base.timing.samples_s], 0.95)
    assert 1.2 < lo <= point <= hi < 1.4


def test_a_slowdown_whose_interval_straddles_the_threshold_is_noise_not_a_regression():
    req = PerfRequirement(max_slowdown=0.10)
    wide = [1e-4 * (0.7 + 0.075 * i) for i in range(9)]  # 0.7 .. 1.3 of the median
    base = _record(wide)
    noisy = _record([x * 1.15 for x in reversed(wide)])  # 15% slower, but the spread is +-30%
    regressed, why = compare_records(noisy, base, req)
    assert not regressed and "within noise" in why


def test_gate_names_the_record_and_fallback_in_the_window_blocks_when_forbidden():
    base = {"workload.mlp.eager.float32": _record(_samples(1e-4, seed=1))}
    now = {"workload.mlp.eager.float32": _record(_samples(1e-4, seed=2), fallback="observed")}
    forbid = evaluate_perf(PerfRequirement(), rid="L6.perf", level=6, blocking=True, records=now, baseline=base)
    assert forbid.status is Status.failed
    assert forbid.cells[0].op == "perf:workload.mlp.eager.float32" and "aten::sort" in forbid.cells[0].reason
    allow = evaluate_perf(PerfRequirement(fallback="allowed"), rid="L6.perf", level=6, blocking=True,
                          records=now, baseline=base)
    assert allow.status is Status.passed


def test_gate_without_baseline_is_unknown_and_a_vanished_record_fails():
    now = {"workload.mlp.eager.float32": _record(_samples(1e-4))}
    r = evaluate_perf(PerfRequirement(), rid="L6.perf", level=6, blocking=True, records=now, baseline=None)
    assert r.status is Status.unknown
    base = {**now, "op.mm.eager.float32": _record(_samples(1e-4), rid="op.mm.eager.float32")}
    r = evaluate_perf(PerfRequirement(), rid="L6.perf", level=6, blocking=True, records=now, baseline=base)
    assert r.status is Status.failed
    assert [c.op for c in r.cells if c.status is CellStatus.failed] == ["perf:op.mm.eager.float32"]
    other = evaluate_perf(PerfRequirement(), rid="L6.perf", level=6, blocking=True, records=now, baseline=now,
                          backend="refaccel")
    assert other.status is Status.failed and "the contract is for refaccel" in other.cells[0].reason


def test_record_schema_rejects_an_unflagged_fallback_and_is_committed(tmp_path: Path):
    rec = _record(_samples(1e-4), fallback="observed")
    data = rec.model_dump(mode="json")
    data["fallback"]["invalidates_latency"] = False
    with pytest.raises(Exception, match="invalidates_latency"):
        validate_data(data, PerfRecord, "bad")
    dump_model(rec, tmp_path / "r.yaml")
    assert run_cli("validate", str(tmp_path / "r.yaml")).returncode == 0
    for kind in ("perfrecord", "compatreport"):
        assert (ROOT / "schema" / f"{kind}.schema.json").read_text() == json_schema_text(kind), kind


def _bench(out: Path, *extra: str, env_backend: str = "cpu") -> None:
    r = run_cli("bench", "--backend", env_backend, "--modes", "eager", "--repetitions", "11", "--runs", "4",
                "--out", str(out), *extra)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_bench_rerun_passes_and_an_injected_30_percent_slowdown_blocks(tmp_path: Path):
    """Real cpu measurements: identical re-run gated against the first passes; --slowdown 1.3 blocks.

    Both must hold on one set of three measurements (baseline, slowed, re-run, in that order). The
    gate is noise-aware by design: when a runner shared with other jobs slows one of a record's runs
    by 40% (seen in CI beside a demo), the interval widens and a 30% slowdown is honestly "within
    noise". So a set that fails either check is measured again, up to four sets; each is judged just
    as strictly, and the failure message lists every set's intervals."""
    example = yaml.safe_load((ROOT / "ci" / "contracts" / "cpu-perf.yaml").read_text())
    example["requirements"][0]["perf"]["records"] = ["workload.*"]  # the example's threshold, this test's record
    contract = tmp_path / "contract.yaml"
    contract.write_text(yaml.safe_dump(example))
    req = PerfRequirement.model_validate(example["requirements"][0]["perf"])
    rid = "workload.mlp.eager.float32"
    seen = []
    for attempt in ("1", "2", "3", "4"):
        root = tmp_path / attempt
        for name, extra in (("a", ()), ("slow", ("--slowdown", "1.3")), ("b", ())):
            _bench(root / name, "--workloads", "mlp", *extra)
        same = run_cli("gate", "--contract", str(contract), "--records", str(root / "b"),
                       "--baseline-records", str(root / "a"))
        slow = run_cli("gate", "--contract", str(contract), "--records", str(root / "slow"),
                       "--baseline-records", str(root / "a"), "--junit", str(root / "j.xml"))
        base = load_records(root / "a")[rid]
        seen.append(f"set {attempt}: re-run {compare_records(load_records(root / 'b')[rid], base, req)[1]}; "
                    f"slowed {compare_records(load_records(root / 'slow')[rid], base, req)[1]}")
        if same.returncode == 0 and slow.returncode == 1:
            break
    record = (root / "a" / f"{rid}.yaml").read_text().lower()
    assert [w for w in SEED_FIELDS if w not in record] == []
    timing = yaml.safe_load(record)["timing"]
    assert (timing["repetitions"], timing["runs"], len(timing["samples_s"])) == (11, 4, 44)
    assert same.returncode == 0, "\n".join([same.stdout, *seen])
    assert slow.returncode == 1, "\n".join([slow.stdout, *seen])
    assert f"perf:{rid}" in slow.stdout and "CI [" in slow.stdout
    assert "regression" in (root / "j.xml").read_text()


@pytest.mark.slow
def test_refaccel_slowed_kernel_is_caught_naming_its_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """OPMATRIX_REFACCEL_SLOWDOWN slows the mm kernel itself; the gate blocks naming op.mm and its interval."""
    _bench(tmp_path / "a", "--ops", "mm", env_backend="refaccel")
    monkeypatch.setenv("OPMATRIX_REFACCEL_SLOWDOWN", "aten::mm:1.3")
    _bench(tmp_path / "slow", "--ops", "mm", env_backend="refaccel")
    assert "OPMATRIX_REFACCEL_SLOWDOWN" in (tmp_path / "slow" / "op.mm.eager.float32.yaml").read_text()
    example = yaml.safe_load((ROOT / "ci" / "contracts" / "refaccel-perf.yaml").read_text())
    example["requirements"][0]["perf"]["max_slowdown"] = 0.05  # only detection is tested here: a tight threshold
    contract = tmp_path / "contract.yaml"
    contract.write_text(yaml.safe_dump(example))
    r = run_cli("gate", "--contract", str(contract), "--records", str(tmp_path / "slow"),
                "--baseline-records", str(tmp_path / "a"))
    assert r.returncode == 1, r.stdout
    blocking = r.stdout.split("blocking", 1)[1]
    assert "op.mm.eager.float32" in blocking and "CI [" in blocking


def _run(torch: str, cells: dict[str, str], doctor: bool = True) -> CompatRun:
    checks = [CompatCheck(name=n, ok=ok, seconds=1.0) for n, ok in (("install", True), ("profiler", True),
                                                                       ("doctor", doctor))]
    return CompatRun(torch=torch, python="3.11.7", environment="test", checks=checks, cells=cells)


def test_compat_blocks_a_worse_path_after_the_upgrade_and_a_missing_version():
    req = CompatRequirement(torch=["2.9.0", "2.13.0"], python=["3.11"])
    old = {"aten.mm.default float32 rank 2 contiguous eager": "native/ok", "aten.add.Tensor float32 rank 1": "native/ok"}
    same = CompatReport(kind="compat-report", backend="cpu", ops=["mm"], measured_at="x",
                        runs=[_run("2.13.0+cpu", old), _run("2.9.0", old)])
    assert evaluate_compat(req, rid="L7", level=7, blocking=True, report=same).status is Status.passed
    worse = {**old, "aten.mm.default float32 rank 2 contiguous eager": "fallback/ok"}
    report = same.model_copy(update={"runs": [_run("2.9.0", old), _run("2.13.0", worse)]})
    r = evaluate_compat(req, rid="L7", level=7, blocking=True, report=report)
    assert r.status is Status.failed
    assert [c.reason for c in r.cells if c.status is CellStatus.failed] == [
        "aten.mm.default float32 rank 2 contiguous eager: native/ok -> fallback/ok"]
    missing = same.model_copy(update={"runs": [_run("2.13.0", old, doctor=False)]})
    r = evaluate_compat(req, rid="L7", level=7, blocking=True, report=missing)
    reasons = [c.reason for c in r.cells if c.status is CellStatus.failed]
    assert any("not run" in x for x in reasons) and any(x.startswith("doctor") for x in reasons)
    assert evaluate_compat(req, rid="L7", level=7, blocking=True, report=None).status is Status.unknown


def test_gate_cli_replaces_the_level_6_unknown_with_the_perf_verdict(tmp_path: Path, example_matrix_path: Path):
    for name, median in (("base", 1e-4), ("now", 1.3e-4)):
        (tmp_path / name).mkdir()
        dump_model(_record(_samples(median, seed=len(name)), backend="refaccel"), tmp_path / name / "r.yaml")
    contract = tmp_path / "c.yaml"
    contract.write_text("release: '1'\nbackend: refaccel\nlevel: 2\nrequirements:\n- level: 6\n  perf: {}\n")
    r = run_cli("gate", "--matrix", str(example_matrix_path), "--contract", str(contract), "--records",
                str(tmp_path / "now"), "--baseline-records", str(tmp_path / "base"), "--json", "-")
    ids = {q["id"]: q for q in yaml.safe_load(r.stdout)["requirements"]}
    assert "L6.level" not in ids and ids["L6.perf"]["status"] == "fail" and not ids["L6.perf"]["blocking"]
    assert "regression" in ids["L6.perf"]["cells"][0]["reason"]
    missing = run_cli("gate", "--contract", str(contract))
    assert missing.returncode == 2 and "--records" in missing.stderr


def test_drift_between_runs_widens_the_interval_instead_of_blocking():
    """Two builds measured while the machine's load changed between runs: not a regression."""
    runs = [_samples(m, seed=i) for i, m in enumerate((1e-4, 1.15e-4, 1.3e-4))]
    base, now = runs[:2], runs[1:]  # now's runs are each one load step slower than base's
    point, lo, hi = ratio_ci(now, base, 0.95)
    assert lo < 1.10 < point
    _, flat_lo, _ = ratio_ci([[x for g in now for x in g]], [[x for g in base for x in g]], 0.95)
    assert lo < flat_lo - 0.02  # pooling the runs would hide the drift in a narrower interval
