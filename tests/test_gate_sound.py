"""A sound gate, tried as an adversarial user would: one class of hostile or careless input per test group.

Never PASS on evidence that proves nothing (a requirement selecting nothing, evidence of another
subject, a record that cannot be real, an unsealed or forged matrix); never harm its own inputs or a
special file; never a traceback for a hostile shape (deep nesting, non-UTF-8 names, the C locale, a
long TMPDIR). Most checks run the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from opmatrix.ci import Status, Verdict, evaluate_contract
from opmatrix.schema import ArtifactError, Contract, LevelRequirement, dump_model, load_matrix, validate_data
from opmatrix.schema.distributed import DistributedRequirement

from .conftest import ROOT, run_cli
from .test_distributed import _case
from .test_distributed import _matrix as dist_matrix
from .test_gate_support import TODAY, contract, g1_matrix, g2_matrix, op_req
from .test_perf import _record, _samples

CONTRACTS = ROOT / "ci" / "contracts"
G2 = str(CONTRACTS / "refaccel-g2.yaml")
TRACEBACK = "Traceback (most recent call last)"


def _write(tmp_path: Path, name: str, model: Any) -> str:
    path = tmp_path / name
    dump_model(model, path, command="tests/test_gate_sound.py")
    return str(path)


def _contract_data(**changes: Any) -> dict[str, Any]:
    data = yaml.safe_load(Path(G2).read_text())
    data.update(changes)
    return data


def _load_contract(data: dict[str, Any]) -> Contract:
    return validate_data(data, Contract, "c.yaml", yaml.safe_dump(data, sort_keys=False))


# -- 1. no vacuous pass ------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "value", "named"), [
    (("requirements", 0, "checks"), [], "requirements[0].checks: an empty list selects nothing"),
    (("requirements", 2, "operators", 0, "dtypes"), [], "requirements[2].operators[0].dtypes"),
    (("requirements", 2, "operators", 0, "layouts"), [], "requirements[2].operators[0].layouts"),
    (("requirements", 2, "operators", 0, "ops"), [], "requirements[2].operators[0].ops"),
])
def test_an_empty_selecting_list_is_a_contract_error(where: tuple[Any, ...], value: Any, named: str) -> None:
    """An empty list where a requirement selects what it judges would pass on no evidence: refused, named."""
    data = _contract_data()
    node: Any = data
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    with pytest.raises(ArtifactError) as err:
        _load_contract(data)
    assert named in str(err.value)


@pytest.mark.parametrize("extra", [
    {"level": 3, "workloads": [{"names": ["mlp"], "dtypes": []}]},
    {"level": 5, "distributed": {"collectives": ["broadcast"], "dtypes": ["float32"], "world_sizes": []}},
    {"level": 6, "perf": {"records": []}},
    {"level": 7, "compat": {"torch": []}},
])
def test_empty_selections_of_levels_3_to_7_are_contract_errors(extra: dict[str, Any]) -> None:
    data = _contract_data()
    data["requirements"].append(extra)
    with pytest.raises(ArtifactError, match="selects nothing|at least 1 item"):
        _load_contract(data)


@pytest.mark.parametrize("levels", [[], [9], [-1], [2, 2]])
def test_judged_levels_must_be_a_non_empty_subset_of_0_to_7(levels: list[int]) -> None:
    with pytest.raises(ArtifactError, match="judged_levels"):
        _load_contract(_contract_data(judged_levels=levels))


def test_a_requirement_that_selects_no_case_is_unknown_never_a_pass() -> None:
    """Collectives without dtypes select no distributed case: `unknown` (blocks when promised)."""
    req = LevelRequirement(level=5, distributed=DistributedRequirement(collectives=["all_reduce.sum"]))
    c = Contract(release="1", backend="refaccel", generation="g2", level=5, judged_levels=[5], requirements=[req])
    result = evaluate_contract(dist_matrix([_case("barrier.sync.w2")]), c, today=TODAY)
    (r,) = result.requirements
    assert r.status is Status.unknown and "selected nothing to judge" in r.message
    assert result.verdict is Verdict.blocked


def test_an_op_the_matrix_never_probed_blocks() -> None:
    """Requiring an ATen op that exists but was never probed is a failing claim, not a pass."""
    result = evaluate_contract(g2_matrix(), contract([op_req(["aten.cosh.default"])]), today=TODAY)
    assert result.verdict is Verdict.blocked
    assert any("aten.cosh.default" in line and "not probed" in line for line in result.blocking)


def test_levels_6_and_7_are_judged_in_the_same_pass_as_the_matrix() -> None:
    """One evaluate_contract call: a level-6 requirement without records is unknown beside the matrix's levels."""
    c = contract([op_req(["aten.add.Tensor"])], level=6,
                 extra_levels=[LevelRequirement(level=6, perf={"records": ["op.*"]})])  # type: ignore[arg-type]
    result = evaluate_contract(g2_matrix(), c, today=TODAY)
    by_id = {r.id: r for r in result.requirements}
    assert by_id["L6.perf"].status is Status.unknown and "no performance records" in by_id["L6.perf"].message
    assert result.verdict is Verdict.blocked
    records = {"op.add": _record(_samples(1e-4, seed=1), rid="op.add", backend="refaccel")}
    records = {k: r.model_copy(update={"generation": "g2"}) for k, r in records.items()}
    passed = evaluate_contract(g2_matrix(), c, records=records, baseline_records=records, today=TODAY)
    assert {r.id: r.status for r in passed.requirements}["L6.perf"] is Status.passed


# -- 2. evidence of the subject ------------------------------------------------------------------


def _records_dir(tmp_path: Path, name: str, **changes: Any) -> str:
    folder = tmp_path / name
    folder.mkdir()
    rec = _record(_samples(1e-4, seed=len(name)), rid="op.add.float32", backend="refaccel")
    dump_model(rec.model_copy(update=changes), folder / "op.add.float32.yaml")
    return str(folder)


def test_records_of_another_generation_are_refused_naming_both(tmp_path: Path) -> None:
    """g1 records with a g1 baseline, judged by a g2 contract: exit 2, naming the records and the contract."""
    now = _records_dir(tmp_path, "now", generation="g1")
    before = _records_dir(tmp_path, "before", generation="g1")
    out = run_cli("gate", "--contract", str(CONTRACTS / "refaccel-perf.yaml"), "--records", now,
                  "--baseline-records", before)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{now}: op.add.float32 was measured on refaccel g1, the contract is for refaccel g2" in out.stderr
    assert TRACEBACK not in out.stderr


def test_records_alone_never_prove_the_levels_a_matrix_proves(tmp_path: Path) -> None:
    """A level-6 contract judged on performance records alone: the promise includes levels 0-5,
    which only a probed matrix proves, so they are unknown and the gate blocks (giving less
    evidence used to give a better verdict). The shipped perf contract is an add-on that names
    the level it judges (judged_levels: [6]) and passes on the same records."""
    now = _records_dir(tmp_path, "now", generation="g2")
    before = _records_dir(tmp_path, "before", generation="g2")
    whole = yaml.safe_load((CONTRACTS / "refaccel-perf.yaml").read_text())
    whole.pop("judged_levels")
    (tmp_path / "whole.yaml").write_text(yaml.safe_dump(whole))
    out = run_cli("gate", "--contract", str(tmp_path / "whole.yaml"), "--records", now, "--baseline-records", before)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "level 0 is promised and judged from a probed matrix, which was not given (--matrix)" in out.stdout
    out = run_cli("gate", "--contract", str(CONTRACTS / "refaccel-perf.yaml"), "--records", now,
                  "--baseline-records", before)
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout + out.stderr


def test_a_baseline_with_an_injected_slowdown_or_of_another_device_is_refused(tmp_path: Path) -> None:
    now = _records_dir(tmp_path, "now", generation="g2")
    slowed = _records_dir(tmp_path, "slowed", generation="g2", injected_slowdown="1.3")
    out = run_cli("gate", "--contract", str(CONTRACTS / "refaccel-perf.yaml"), "--records", now,
                  "--baseline-records", slowed)
    assert out.returncode == 2 and "injected slowdown" in out.stderr, out.stdout + out.stderr
    other = _record(_samples(1e-4), rid="op.add.float32", backend="refaccel")
    hw = other.hardware.model_copy(update={"device_name": "another accelerator"})
    elsewhere = _records_dir(tmp_path, "elsewhere", generation="g2", hardware=hw)
    out = run_cli("gate", "--contract", str(CONTRACTS / "refaccel-perf.yaml"), "--records", now,
                  "--baseline-records", elsewhere)
    assert out.returncode == 2 and "another accelerator" in out.stderr, out.stdout + out.stderr


@pytest.mark.parametrize(("backend", "generation", "said"), [("cpu", None, "the report is cpu"),
                                                             ("refaccel", "g1", "the report is refaccel g1"),
                                                             ("refaccel", None, "the report is refaccel (no generation)")])
def test_a_compat_report_of_another_subject_is_refused(tmp_path: Path, backend: str, generation: str | None,
                                                       said: str) -> None:
    report = {"schema_version": 1, "kind": "compat-report", "backend": backend, "generation": generation,
              "ops": ["add"], "measured_at": "now",
              "runs": [{"torch": "2.13.0", "python": "3.11.7", "environment": "x", "cells": {"a": "native/ok"}}]}
    (tmp_path / "compat.yaml").write_text(yaml.safe_dump(report))
    c = _contract_data(level=7, requirements=[{"level": 7, "compat": {"torch": ["2.13.0"]}}])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(c))
    out = run_cli("gate", "--contract", str(tmp_path / "c.yaml"), "--compat", str(tmp_path / "compat.yaml"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"the contract is for refaccel g2, {said}" in out.stderr


@pytest.mark.slow
def test_compat_records_the_generation_its_matrices_were_probed_on(tmp_path: Path) -> None:
    out = run_cli("compat", "--backend", "refaccel", "--generation", "g1", "--torch",
                  torch.__version__.split("+")[0], "--ops", "add", "--out", str(tmp_path / "c"))
    assert out.returncode == 0, out.stdout + out.stderr
    report = yaml.safe_load((tmp_path / "c" / "compat.yaml").read_text())
    assert report["backend"] == "refaccel" and report["generation"] == "g1"
    c = _contract_data(level=7, requirements=[{"level": 7, "compat": {"torch": [torch.__version__.split("+")[0]]}}])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(c))
    refused = run_cli("gate", "--contract", str(tmp_path / "c.yaml"), "--compat", str(tmp_path / "c" / "compat.yaml"))
    assert refused.returncode == 2 and "the report is refaccel g1" in refused.stderr


@pytest.mark.parametrize("samples", [[0.0] * 15, [1e-4] * 14 + [0.0]])
def test_a_record_with_a_zero_second_window_cannot_be_real(samples: list[float]) -> None:
    with pytest.raises(ArtifactError, match="cannot be real"):
        _record(samples)


# -- 3. seals ----------------------------------------------------------------------------------


def _unsealed(tmp_path: Path, model: Any, name: str = "unsealed.yaml") -> str:
    data = yaml.safe_load(Path(_write(tmp_path, "sealed-" + name, model)).read_text())
    data.pop("integrity")
    (tmp_path / name).write_text(yaml.safe_dump(data))
    return str(tmp_path / name)


def test_an_unsealed_matrix_is_refused_unless_allowed_and_then_flagged(tmp_path: Path) -> None:
    path = _unsealed(tmp_path, g2_matrix())
    out = run_cli("gate", "--matrix", path, "--contract", G2)
    assert out.returncode == 2 and "unsealed matrix (no integrity block)" in out.stderr, out.stdout + out.stderr
    out = run_cli("gate", "--matrix", path, "--contract", G2, "--allow-unsealed")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "UNSEALED" in out.stdout and "--allow-unsealed" in out.stdout
    assert run_cli("validate", path).returncode == 0
    strict = run_cli("validate", "--strict", path)
    assert strict.returncode == 2 and "unsealed" in strict.stderr
    assert run_cli("validate", "--strict", "--allow-unsealed", path).returncode == 0


def test_a_forged_cache_entry_never_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The g1 matrix file is unchanged; its cache entry is replaced by g2's content (which passes), with
    g1's seal kept or with g2's: both are misses, so g1 stays blocked. The entry is rewritten."""
    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPMATRIX_NO_CACHE", raising=False)
    g1 = _write(tmp_path, "g1.yaml", g1_matrix())
    g2 = _write(tmp_path, "g2.yaml", g2_matrix().model_copy(update={"backend": g1_matrix().backend}))
    load_matrix(g1)
    load_matrix(g2)
    entries = sorted((tmp_path / "cache" / "matrices").glob("*.json"))
    assert len(entries) == 2
    by_text = {e.read_text()[:200]: e for e in entries}
    g1_seal = yaml.safe_load(Path(g1).read_text())["integrity"]
    (g1_entry,) = [e for head, e in by_text.items() if g1_seal["digest"] in head]
    (g2_entry,) = [e for e in entries if e != g1_entry]
    genuine = g1_entry.read_text()
    forged_g2 = g2_entry.read_text()
    head = forged_g2[:forged_g2.index(',"backend"')]
    for forged in (forged_g2, genuine[:genuine.index(',"backend"')] + forged_g2[len(head):]):
        g1_entry.write_text(forged)
        out = run_cli("gate", "--matrix", g1, "--contract", str(CONTRACTS / "refaccel-g1.yaml"))
        env_note = out.stdout + out.stderr
        assert out.returncode == 1 and "BLOCKED" in out.stdout, env_note
        assert g1_entry.read_text() == genuine  # the strict load healed the entry


def _run_with_cache(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPMATRIX_CACHE_DIR": str(cache)}
    env.pop("OPMATRIX_NO_CACHE", None)
    return subprocess.run([sys.executable, "-m", "opmatrix", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)


def test_an_unsealed_matrix_is_never_cached(tmp_path: Path) -> None:
    path = _unsealed(tmp_path, g2_matrix())
    assert _run_with_cache(tmp_path / "cache", "validate", path).returncode == 0
    assert not list((tmp_path / "cache").glob("matrices/*.json"))


def test_the_seal_is_documented_as_edit_detection_not_a_signature() -> None:
    text = (ROOT / "docs" / "seals.md").read_text()
    assert "not a signature" in text and "Sigstore" in text and "--allow-unsealed" in text


# -- 4. outputs never clobber inputs or special files ---------------------------------------------


@pytest.mark.parametrize("option", ["--junit", "--summary", "--json"])
@pytest.mark.parametrize("victim", ["matrix", "contract", "hardlink"])
def test_an_output_naming_an_input_is_refused_and_the_input_is_intact(tmp_path: Path, option: str, victim: str) -> None:
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    c = tmp_path / "contract.yaml"
    c.write_text(Path(G2).read_text())
    target = {"matrix": m, "contract": str(c), "hardlink": str(tmp_path / "link.yaml")}[victim]
    if victim == "hardlink":  # another name, the same inode
        os.link(m, target)
    before = {p: Path(p).read_bytes() for p in (m, str(c))}
    out = run_cli("gate", "--matrix", m, "--contract", str(c), option, target)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "is the same file as" in out.stderr and TRACEBACK not in out.stderr
    assert {p: Path(p).read_bytes() for p in before} == before


def test_two_outputs_naming_one_file_are_refused(tmp_path: Path) -> None:
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    out = run_cli("gate", "--matrix", m, "--contract", G2, "--junit", str(tmp_path / "o"), "--summary",
                  str(tmp_path / "o"))
    assert out.returncode == 2 and "give each output its own file" in out.stderr
    assert not (tmp_path / "o").exists()


def test_an_output_that_cannot_be_written_leaves_no_other_written(tmp_path: Path) -> None:
    """--summary under a file (not a folder), into a missing folder or onto a folder: exit 2
    naming the option and the path as given, before any output is written (the JUnit file
    used to be written first, and the error named a temporary file)."""
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    (tmp_path / "adir").mkdir()
    for bad, said in ((str(tmp_path / "g2.yaml" / "s.md"), "is not a folder"),
                      (str(tmp_path / "nowhere" / "s.md"), "does not exist"),
                      (str(tmp_path / "adir"), "is a folder; name a file")):
        out = run_cli("gate", "--matrix", m, "--contract", G2, "--junit", str(tmp_path / "j.xml"), "--summary", bad,
                      "--json", str(tmp_path / "g.json"))
        assert out.returncode == 2 and f"--summary {bad!r}: " in out.stderr and said in out.stderr, out.stderr
        assert not (tmp_path / "j.xml").exists() and not (tmp_path / "g.json").exists()


def test_dash_and_a_fifo_are_streamed_never_renamed_over(tmp_path: Path) -> None:
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    out = run_cli("gate", "--matrix", m, "--contract", G2, "--summary", "-")
    assert out.returncode == 0 and "## ✅ opmatrix gate: PASS" in out.stdout
    fifo = tmp_path / "junit.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    out = run_cli("gate", "--matrix", m, "--contract", G2, "--junit", str(fifo), timeout=120)
    reader.join(60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert got and got[0].startswith(b"<?xml") and fifo.is_fifo()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".junit")]


def _limited(limit: int) -> None:  # runs in the child: files above `limit` bytes fail with EFBIG ("disk full")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("verb", ["report", "gate"])
def test_a_full_disk_leaves_no_temporary_file(tmp_path: Path, verb: str) -> None:
    """Writes that fail half-way (a file-size limit: what a full disk does to a write) exit 2 and leave no temp file."""
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = (["report", m, "--out", str(out_dir / "site")] if verb == "report"
            else ["gate", "--matrix", m, "--contract", G2, "--json", str(out_dir / "r.json")])
    proc = subprocess.run([sys.executable, "-m", "opmatrix", *args], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=lambda: _limited(2048), timeout=600)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert TRACEBACK not in proc.stderr
    leftovers = [p.name for p in out_dir.rglob("*")  # .opmatrix: the folder's ownership marker, not a temp file
                 if (p.name.startswith(".") and p.name != ".opmatrix") or p.name.endswith(".tmp")]
    assert leftovers == []


# -- 5. contract fields that mean nothing ---------------------------------------------------------


@pytest.mark.parametrize(("text", "named"), [
    ("tolerances:\n- {op: aten.add.Tensor, atol: 1e309, rtol: 0}\n", "tolerances[0].atol"),
    ("tolerances:\n- {op: aten.add.Tensor, atol: 1.0e+309, rtol: 0}\n", "tolerances[0].atol: inf is not a finite"),
    ("min_cells_ratio: .nan\n", "min_cells_ratio"),
    ("waivers:\n- {match: {op: aten.mm.default}, reason: r, owner: o, expires: 4102444800}\n",
     "waivers[0].expires: not a date"),
    ("waivers:\n- {match: {op: aten.mm.default}, reason: r, owner: o, expires: 2099-02-30}\n",
     "'2099-02-30' is not a real date"),
    ("waivers:\n- {match: {op: aten.mm.default}, reason: r, owner: o, expires: '2099-02-30'}\n",
     "waivers[0].expires: not a calendar date"),
    ("waivers:\n- {match: {op: aten.mm.default}, reason: r, owner: o, expires: 2027-01-01 10:00:00}\n",
     "is a time, not a date"),
    ("judged_levels: [9]\n", "judged_levels[0]"),
])
def test_contract_fields_that_mean_nothing_exit_2_in_one_line(tmp_path: Path, text: str, named: str) -> None:
    base = Path(G2).read_text().replace("waivers: []\n", "")
    path = tmp_path / "c.yaml"
    path.write_text(base + text)
    out = run_cli("validate", str(path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert named in out.stderr and TRACEBACK not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


# -- 6. hostile shapes -----------------------------------------------------------------------------


def test_deep_json_to_merge_and_report_exits_2_without_a_traceback(tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    out = run_cli("merge", str(deep), "--out", str(tmp_path / "m"))
    assert out.returncode == 2 and TRACEBACK not in out.stderr and "nested too deeply" in out.stderr
    assert not (tmp_path / "m").exists()
    gate_json = tmp_path / "g.json"
    gate_json.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    out = run_cli("report", m, "--gate", str(gate_json), "--out", str(tmp_path / "site"))
    assert out.returncode == 2 and TRACEBACK not in out.stderr, out.stderr


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_yaml_exits_2_naming_the_file(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("release: '1'\nlevel: 0\nbackend: x\nrequirements: " + "[" * depth + "]" * depth + "\n")
    out = run_cli("validate", str(path))
    assert out.returncode == 2 and str(path) in out.stderr and TRACEBACK not in out.stderr


def test_non_utf8_paths_and_operator_names_are_named_with_escapes(tmp_path: Path) -> None:
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    bad = os.fsencode(tmp_path) + b"/site-\xfe"
    for args in ([b"report", m.encode(), b"--out", bad], [b"query", m.encode(), b"aten.\xfe"],
                 [b"probe", b"--backend", b"refaccel", b"--ops", b"add", b"--out", bad]):
        proc = subprocess.run([sys.executable.encode(), b"-m", b"opmatrix", *args], capture_output=True, cwd=ROOT,
                              timeout=600)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 2 and TRACEBACK not in err, err
        assert "\\xfe" in err and "not valid UTF-8" in err
    assert not os.path.exists(bad)


def test_output_works_under_the_c_locale_with_a_non_ascii_contract(tmp_path: Path) -> None:
    m = _write(tmp_path, "g2.yaml", g2_matrix())
    c = tmp_path / "c.yaml"
    c.write_text(Path(G2).read_text().replace('release: "0.2"', 'release: "0.2-β ✅"'), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONIO"))}
    env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0")
    proc = subprocess.run([sys.executable, "-m", "opmatrix", "gate", "--matrix", m, "--contract", str(c),
                           "--summary", "-"], capture_output=True, cwd=ROOT, env=env, timeout=600)
    out = proc.stdout.decode("ascii")  # nothing but ASCII reaches a C-locale terminal
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert "## [ok] opmatrix gate: PASS" in out and "0.2-\\u03b2 [ok]" in out


# -- 7. long paths ---------------------------------------------------------------------------------


def test_a_long_tmpdir_gets_a_short_private_socket_folder(tmp_path: Path) -> None:
    long_dir = tmp_path / ("x" * 200)
    long_dir.mkdir()
    code = ("from opmatrix.probes.runner.zygote import short_socket_dir; import os, json; d = short_socket_dir(); "
            "print(json.dumps([d, oct(os.stat(d).st_mode & 0o777)]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(long_dir)})
    folder, mode = json.loads(proc.stdout)
    assert len(folder) < 40 and mode == "0o700"
    assert not os.path.exists(folder)  # removed when the process ended


@pytest.mark.slow
def test_a_probe_under_a_long_tmpdir_survives_worker_replacements(tmp_path: Path) -> None:
    """A crashing op forces worker replacements (forked from the zygote through a Unix socket)."""
    long_dir = tmp_path / ("x" * 180)
    long_dir.mkdir()
    env = {**os.environ, "TMPDIR": str(long_dir), "OPMATRIX_REFACCEL_FAULT": "crash:aten::mul.Tensor"}
    proc = subprocess.run([sys.executable, "-m", "opmatrix", "probe", "--backend", "refaccel", "--ops", "add,mul",
                           "--dtypes", "float32", "--no-runtime", "--quiet", "--out", str(tmp_path / "p")],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # faulted cells, a complete matrix
    assert "AF_UNIX" not in proc.stderr
    m = load_matrix(tmp_path / "p" / "matrix.yaml")
    assert any(e.outcome.value == "crashed" for e in m.operators["aten.mul.Tensor"])



def test_judging_only_levels_above_the_promise_proves_nothing() -> None:
    """judged_levels that name no promised level leave every judged requirement informational: unknown, blocked."""
    c = contract([op_req(["aten.add.Tensor"])], level=1, judged_levels=[2])
    result = evaluate_contract(g2_matrix(), c, today=TODAY)
    assert result.verdict is Verdict.blocked
    assert any(line.startswith("scope (unknown): no requirement of a promised level") for line in result.blocking)


def test_merge_never_writes_over_the_journal_it_reads(tmp_path: Path) -> None:
    journal = tmp_path / "p" / "journal.jsonl"
    journal.parent.mkdir()
    journal.write_text('{"kind": "header"}\n')
    out = run_cli("merge", str(journal), "--out", str(journal.parent))
    assert out.returncode == 2 and "is the same file as JOURNAL" in out.stderr
    assert journal.read_text() == '{"kind": "header"}\n' and not (journal.parent / "journal.jsonl.prev").exists()
