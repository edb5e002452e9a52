"""The typed vocabulary in ``opmatrix.schema``: names, keys, faults, the cache and file rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opmatrix.schema import (
    PROCESS_FAULTS,
    ArtifactError,
    CellKey,
    DType,
    ExitCode,
    FaultOutcome,
    Layout,
    Mode,
    OpName,
    Outcome,
    loads_yaml,
)
from opmatrix.schema.files import cache_dir, write_text_atomic
from opmatrix.schema.yamlload import HAVE_LIBYAML, _strict_load

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, dotted, qualified", [
    ("aten.softmax.int", "aten.softmax.int", "aten::softmax.int"),
    ("aten::softmax.int", "aten.softmax.int", "aten::softmax.int"),
    ("aten::relu", "aten.relu.default", "aten::relu"),
    ("aten.add.Tensor", "aten.add.Tensor", "aten::add.Tensor"),
])
def test_op_names_round_trip_between_both_spellings(text: str, dotted: str, qualified: str):
    """Like torchgen's OperatorName: parse either spelling, print either, and parse it back."""
    op = OpName.parse(text)
    assert (str(op), op.qualified) == (dotted, qualified)
    assert OpName.parse(str(op)) == op == OpName.parse(op.qualified)
    assert op.event_name == qualified.split(".")[0]


@pytest.mark.parametrize("bad", ["softmax", "aten.softmax", "aten::", "aten.soft max.int"])
def test_malformed_op_names_say_what_was_expected(bad: str):
    with pytest.raises(ValueError, match="operator name"):
        OpName.parse(bad)


def test_a_cell_key_finds_the_same_cell_as_a_tuple_of_strings():
    """One key type for ci, matrix and reports; the string enums keep plain tuples working."""
    key = CellKey("aten.mm.default", DType.float32, 2, Layout.contiguous, Mode.eager)
    plain = ("aten.mm.default", "float32", 2, "contiguous", "eager")
    assert key == plain and {plain: 1}[key] == 1
    assert key.op == "aten.mm.default" and key.mode is Mode.eager


def test_fault_outcomes_are_the_faults_of_outcome():
    assert {o.value for o in Outcome if o.is_fault} == {f.value for f in FaultOutcome}
    assert Outcome.wrong.fault is None and Outcome.hung.fault is FaultOutcome.hung
    assert {f.value for f in PROCESS_FAULTS} == {"crashed", "hung", "poisoned"}
    assert FaultOutcome.crashed in PROCESS_FAULTS and FaultOutcome.oom not in PROCESS_FAULTS


def test_one_cache_directory_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """OPMATRIX_CACHE_DIR, else XDG_CACHE_HOME/opmatrix, else ~/.cache/opmatrix; NO_CACHE turns it off."""
    for var in ("OPMATRIX_CACHE_DIR", "OPMATRIX_NO_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("opinfo") == tmp_path / "home" / ".cache" / "opmatrix" / "opinfo"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("matrices") == tmp_path / "xdg" / "opmatrix" / "matrices"
    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir("matrices") == tmp_path / "mine" / "matrices"
    monkeypatch.setenv("OPMATRIX_NO_CACHE", "1")
    assert cache_dir("matrices") is None


def test_atomic_write_replaces_only_changed_files(tmp_path: Path):
    path = tmp_path / "sub" / "f.txt"
    assert write_text_atomic(path, "a\n") is True
    assert write_text_atomic(path, "a\n") is False  # unchanged: not rewritten
    assert write_text_atomic(path, "b\n") is True and path.read_text() == "b\n"
    assert [p.name for p in path.parent.iterdir()] == ["f.txt"]  # no temporary file left behind


DOCS = [
    "a: 1\nb: [x, 2.5, null, true, -3, 0x1f, 1_000, .inf]\nc: {d: '7', e: ~}\n",
    "when: 2026-12-31\nyes: on\nempty:\n",
    "- 1\n- [a, b]\n",
    "",
    # what the event-driven fast path must type exactly as the strict loader does
    "q: '1'\nd: \"2.5\"\nn: 'null'\nt: ! 3\ns: !!str 4\nblock: |\n  7\nfolded: >\n  true\n",
    "1: a\n2.5: b\nnull: c\nfalse: d\n-7: e\n",
    "a: &x 1\nb: 2\n",
    "x: {a: [1, {b: [2, [3, []]]}], c: {}}\n",
    "--- 1\n",
    "v: .nan\nw: -.INF\nx: 0o17\ny: +12\nz: 1e3\nu: 190:20:30\n",
]


@pytest.mark.skipif(not HAVE_LIBYAML, reason="the fast path needs libyaml; the strict loader is used alone")
@pytest.mark.parametrize("text", DOCS)
def test_the_fast_parse_builds_what_the_strict_loader_builds(text: str):
    assert loads_yaml(text, "t.yaml") == _strict_load(text, "t.yaml", True)


@pytest.mark.parametrize("text, message", [
    ("a: 1\na: 2\n", "t.yaml:2: duplicate key 'a' (first at line 1); remove one of them"),
    ("1: a\ntrue: b\n", "t.yaml:2: duplicate key True (first at line 1); remove one of them"),
    ("k: =\n", "t.yaml:1: YAML tag '!!value' is not allowed"),
    ("--- 1\n--- 2\n", "t.yaml:2: malformed YAML: but found another document"),
    ("a: &x [1]\nb: *x\n", "t.yaml:1: YAML aliases (*name) are not allowed"),
    ("a: !!python/object:os.system x\n", "t.yaml:1: YAML tag '!!python/object:os.system' is not allowed"),
    ("a: [1\n", "t.yaml:2: malformed YAML"),
])
def test_strictness_and_its_messages_are_unchanged(text: str, message: str):
    """What the fast path does not accept is judged, and worded, by the strict loader."""
    with pytest.raises(ArtifactError) as err:
        loads_yaml(text, "t.yaml")
    assert str(err.value).startswith(message)


def test_query_into_a_closed_pipe_exits_0_quietly(example_matrix_path: Path):
    """``opmatrix query ... | head -c1``: the reader left; not an error (it exited 2 before)."""
    cmd = (f"{sys.executable} -m opmatrix query {example_matrix_path} aten.softmax.int --dtype float32 --rank 3"
           " --json | head -c 1 >/dev/null; echo ${PIPESTATUS[0]}")
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.stdout.strip() == "0", res.stderr
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr


@pytest.mark.slow
def test_planning_ops_uses_the_name_index_without_importing_op_db(tmp_path: Path):
    """After one process built the index, selecting --ops imports neither op_db nor torch."""
    env = {**os.environ, "OPMATRIX_CACHE_DIR": str(tmp_path)}
    env.pop("OPMATRIX_NO_CACHE", None)
    build = "from opmatrix.probes.ops.source import all_ops; all_ops()"
    subprocess.run([sys.executable, "-c", build], env=env, check=True, timeout=600)
    probe = ("import sys; from opmatrix.probes.ops.source import select_ops, source_hash\n"
             "e = select_ops(['softmax']); print(sorted(x.full_name for x in e), source_hash(e))\n"
             "print('torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600)
    names, imported = res.stdout.strip().splitlines()
    assert names.startswith("['softmax', 'softmax.with_dtype']") and imported == "False", res.stderr
    full = ("from opmatrix.probes.ops.source import all_ops, source_hash, select_ops\n"
            "all_ops(); print(sorted(x.full_name for x in select_ops(['softmax'])), source_hash(select_ops(['softmax'])))")
    again = subprocess.run([sys.executable, "-c", full], env={**env, "OPMATRIX_NO_CACHE": "1"},
                           capture_output=True, text=True, timeout=600)
    assert again.stdout.strip() == names  # the same selection and the same source hash without the index


def test_samples_are_reproducible_per_op_and_dtype():
    """Two generations of one (OpInfo, dtype) give the same samples (seeded once per call)."""
    import torch

    from opmatrix.probes.ops import source

    (entry,) = [e for e in source.all_ops() if e.full_name == "mm"]
    first = source.generate_samples(entry, torch.float32)
    again = source.generate_samples(entry, torch.float32)
    assert len(again) == len(first) > 0
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a.input, b.input) and a.input.stride() == b.input.stride()
        assert all(torch.equal(x, y) for x, y in zip(a.args, b.args, strict=True)) and a.kwargs == b.kwargs


def test_task_and_unit_ids_round_trip():
    """Task and unit ids are typed once in schema: parse(str(x)) == x, and bad ones are refused."""
    from opmatrix.schema import Layout, TaskId, UnitId

    task = TaskId("softmax.with_dtype", "float32")
    assert str(task) == "softmax.with_dtype|float32" and TaskId.parse(str(task)) == task
    unit = UnitId("3.1", Layout.transposed, "backward")
    assert str(unit) == "3.1/transposed/backward" and UnitId.parse(str(unit)) == unit
    for bad in ("3/transposed", "3/sideways/eager", "3/transposed/forward"):
        with pytest.raises(ValueError, match="unit id"):
            UnitId.parse(bad)
    with pytest.raises(ValueError, match="task id"):
        TaskId.parse("softmax")


def test_exit_codes_are_named_and_the_cli_returns_them(tmp_path: Path):
    """``ExitCode`` names the process statuses; the CLI returns a member, 2 for a refused input."""
    import opmatrix
    from opmatrix.cli import main

    assert opmatrix.ExitCode is ExitCode
    assert [int(c) for c in (ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.INTERRUPTED)] == [0, 1, 2, 130]
    assert ExitCode.BLOCKED is ExitCode.FAILED
    missing = tmp_path / "absent.yaml"
    code = main(["validate", str(missing)])
    assert code is ExitCode.USAGE
    assert main(["schema", "matrix"]) is ExitCode.OK
