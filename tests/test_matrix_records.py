"""Journal reading and matrix building from hand-made journal records (helpers shared by test_matrix_*)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from opmatrix.matrix import build_matrix, merge_records, read_journal
from opmatrix.matrix.journal import dumps_records
from opmatrix.schema import (
    ArtifactError,
    BackendId,
    CellRecord,
    CellResult,
    DeviceInfo,
    ErrorInfo,
    Evidence,
    ExecPath,
    FallbackEvidence,
    JournalHeader,
    Numerics,
    Outcome,
    Runtime,
    RuntimeCheck,
    RuntimeRecord,
    Samples,
    TaskRecord,
    dumps_model,
)

BACKEND = BackendId(name="refaccel", device_type="refaccel", dispatch_key="PrivateUse1", generation="g2")
EVIDENCE = Evidence(opmatrix_version="0.1.0", torch_version="2.13.0", python="3.11.7", platform="Linux")


def result(
    path: str = "native",
    outcome: str = "ok",
    *,
    probed: int = 4,
    passed: int | None = None,
    conditions: dict[str, str] | None = None,
    err: float | None = None,
    **extra: object,
) -> CellResult:
    """A cell result; ``err`` sets numerics with that max abs error (atol 1e-5)."""
    numerics = Numerics(atol=1e-5, rtol=1.3e-6, max_abs_err=err) if err is not None else None
    return CellResult(
        path=ExecPath(path),
        outcome=Outcome(outcome),
        conditions=conditions or {},
        samples=Samples(probed=probed, passed=probed if passed is None else passed),
        numerics=numerics,
        **extra,  # type: ignore[arg-type]
    )


def cells(op: str, dtype: str, ranks: range | list[int], layouts: tuple[str, ...] = ("contiguous",),
          mode: str = "eager", **kw: object) -> list[CellRecord]:
    """Cell records of one result over ranks x layouts."""
    res = result(**kw)  # type: ignore[arg-type]
    return [
        CellRecord(op=op, dtype=dtype, rank=r, layout=lay, mode=mode, result=res)  # type: ignore[arg-type]
        for r in ranks
        for lay in layouts
    ]


def task(source: str, dtype: str, cell_records: list[CellRecord], outcome: str = "ok", **kw: object) -> TaskRecord:
    """A task record ``source|dtype``."""
    return TaskRecord(task=f"{source}|{dtype}", source=source, dtype=dtype, outcome=outcome,  # type: ignore[arg-type]
                      cells=cell_records, **kw)  # type: ignore[arg-type]


def softmax_records() -> list[TaskRecord | RuntimeRecord]:
    """The seed's softmax example as journal records: conditional native/composite, f64 rejected."""
    records: list[TaskRecord | RuntimeRecord] = []
    for dtype in ("float32", "bfloat16"):
        records.append(task("softmax", dtype, [
            *cells("aten.softmax.int", dtype, range(2, 6), conditions={"dim": "last"}, err=1e-6),
            *cells("aten.softmax.int", dtype, range(2, 6), path="composite", conditions={"dim": "first"},
                   components=["aten.exp.default", "aten.sum.dim_IntList", "aten.div.Tensor"]),
            *cells("aten.softmax.int", dtype, range(2, 6), ("noncontiguous", "transposed"), path="composite"),
        ]))
    error = ErrorInfo(type="RuntimeError", message="refaccel: softmax does not support float64", actionable=True)
    records.append(task("softmax", "float64", cells("aten.softmax.int", "float64", range(1, 6), path="rejected",
                                                     error=error)))
    records.append(RuntimeRecord(task="runtime|driver", check=RuntimeCheck(name="driver", level=0, result="pass")))
    return records


def build(records: list) -> str:  # type: ignore[type-arg]
    """Matrix YAML text built from ``records``."""
    return dumps_model(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))


# -- build -----------------------------------------------------------------------------------


def test_softmax_records_compress_to_the_seed_example_entries():
    """Conditional groups stay separate entries; f32 and bf16 share each one."""
    m = build_matrix(softmax_records(), backend=BACKEND, evidence=EVIDENCE)
    entries = m.operators["aten.softmax.int"]
    summary = [(e.path.value, e.conditions, [d.value for d in e.dtypes], (e.ranks.min, e.ranks.max),
                [x.value for x in e.layouts]) for e in entries]
    assert summary == [
        ("native", {"dim": "last"}, ["bfloat16", "float32"], (2, 5), ["contiguous"]),
        ("composite", {}, ["bfloat16", "float32"], (2, 5), ["noncontiguous", "transposed"]),
        ("composite", {"dim": "first"}, ["bfloat16", "float32"], (2, 5), ["contiguous"]),
        ("rejected", {}, ["float64"], (1, 5), ["contiguous"]),
    ]
    assert entries[0].samples.probed == 2 * 4 * 4  # summed over the entry's cells
    assert [c.name for c in m.runtime.checks] == ["driver"]


def test_two_opinfos_calling_one_overload_roll_up():
    """``add`` and ``__radd__`` both call aten.add.Tensor: the worst path wins, samples add up."""
    records = [
        task("add", "float32", cells("aten.add.Tensor", "float32", [2], probed=3)),
        task("__radd__", "float32", cells("aten.add.Tensor", "float32", [2], path="fallback", probed=2,
                                           fallback=FallbackEvidence(state="observed", ops=["aten::add.out"]))),
    ]
    (entry,) = build_matrix(records, backend=BACKEND, evidence=EVIDENCE).operators["aten.add.Tensor"]
    assert (entry.path, entry.mixed, entry.samples.probed) == (ExecPath.fallback, True, 5)
    assert entry.samples.by_path == {ExecPath.native: 3, ExecPath.fallback: 2}
    assert entry.fallback.ops == ["aten::add.out"]


def test_skipped_and_cell_less_faulted_tasks_are_listed_never_absent():
    crash = ErrorInfo(type="WorkerCrashed", message="SIGSEGV", actionable=False, signal="SIGSEGV")
    records = [
        task("add", "float32", cells("aten.add.Tensor", "float32", [1])),
        task("sort", "complex64", [], skipped="OpInfo declares no complex64 support"),
        task("topk", "float32", [], outcome="crashed", error=crash),
        task("mm", "int8", cells("aten.mm.default", "int8", [2], path="rejected", outcome="crashed"),
             outcome="crashed"),
    ]
    m = build_matrix(records, backend=BACKEND, evidence=EVIDENCE)
    assert m.skipped == {
        "sort|complex64": "OpInfo declares no complex64 support",
        "topk|float32": "crashed: WorkerCrashed: SIGSEGV",
    }
    assert m.operators["aten.mm.default"][0].outcome is Outcome.crashed  # the fault stays on its cell


def test_build_does_not_depend_on_record_order():
    records = softmax_records() + [
        task("add", "float32", cells("aten.add.Tensor", "float32", range(0, 4), err=1e-7)),
        task("__radd__", "float32", cells("aten.add.Tensor", "float32", range(0, 3), path="composite", err=2e-7)),
    ]
    expected = build(records)
    rng = random.Random(5)
    for _ in range(5):
        shuffled = records[:]
        rng.shuffle(shuffled)
        for t in shuffled:
            if isinstance(t, TaskRecord):  # cell order inside a task must not matter either
                rng.shuffle(t.cells)
        assert build(shuffled) == expected


def test_runtime_records_complete_the_given_runtime():
    found = Runtime(devices=[DeviceInfo(index=1, name="b"), DeviceInfo(index=0, name="a")],
                    claimed_dtypes=["bfloat16", "float32"], capabilities={"tf32": False})
    records = [
        RuntimeRecord(task="runtime|devices", check=RuntimeCheck(name="devices", level=0, result="pass"),
                      runtime=found),
        RuntimeRecord(task="runtime|fork", check=RuntimeCheck(name="fork_after_init", level=1, result="fail")),
    ]
    given = Runtime(claimed_dtypes=["float32"], capabilities={"tf32": True})
    rt = build_matrix(records, backend=BACKEND, evidence=EVIDENCE, runtime=given).runtime
    assert [c.name for c in rt.checks] == ["devices", "fork_after_init"]
    assert [d.name for d in rt.devices] == ["a", "b"]
    assert [d.value for d in rt.claimed_dtypes] == ["float32", "bfloat16"]
    assert rt.capabilities == {"tf32": True}


def test_duplicate_task_ids_are_refused_by_build():
    records = [task("add", "float32", []), task("add", "float32", [])]
    with pytest.raises(ValueError, match="task 'add|float32' appears twice"):
        build_matrix(records, backend=BACKEND, evidence=EVIDENCE)


# -- journals --------------------------------------------------------------------------------


def _write(path: Path, records: list, tail: str = "") -> Path:  # type: ignore[type-arg]
    path.write_text(dumps_records(records) + tail, encoding="utf-8")
    return path


def test_truncated_last_line_is_dropped(tmp_path: Path):
    header = JournalHeader(backend="refaccel", planned=3)
    good = softmax_records()[:2]
    cut = json.dumps(softmax_records()[2].model_dump(mode="json"))[:57]
    records = read_journal(_write(tmp_path / "j.jsonl", [header, *good], tail=cut))
    assert records == [header, *good]


def test_malformed_line_in_the_middle_names_file_and_line(tmp_path: Path):
    path = tmp_path / "j.jsonl"
    path.write_text(dumps_records([JournalHeader(backend="refaccel", planned=1)]) + "{not json\n"
                    + dumps_records(softmax_records()[:1]))
    with pytest.raises(ArtifactError) as err:
        read_journal(path)
    assert str(err.value) == (
        f"{path}:2: not JSON (a corrupt line in the middle of the journal); remove line 2 from {path} (or move "
        "the journal aside and probe again without --resume); the lines after it are intact, so this is not a "
        "run cut short"
    )


def test_invalid_record_names_file_line_and_field(tmp_path: Path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"kind": "task", "task": "a|float32", "source": "a", "dtype": "float33", "outcome": "ok"}\n')
    with pytest.raises(ArtifactError, match=r"j\.jsonl:1: dtype: Input should be 'float64', "):
        read_journal(path)


def test_resumed_task_keeps_its_last_record(tmp_path: Path):
    first = task("add", "float32", [], outcome="hung")
    again = task("add", "float32", cells("aten.add.Tensor", "float32", [1]))
    records = read_journal(_write(tmp_path / "j.jsonl", [first, softmax_records()[0], again]))
    assert records == [softmax_records()[0], again]


def test_merging_shards_in_any_order_equals_one_run():
    records = softmax_records() + [task("add", "float32", cells("aten.add.Tensor", "float32", [1, 2]))]
    header = JournalHeader(backend="refaccel", generation="g2", planned=len(records))
    shards = [[header, *records[i::3]] for i in range(3)]
    whole = build(merge_records([[header, *records]]))
    for order in itertools.permutations(shards):
        assert build(merge_records(order)) == whole


def test_merge_prefers_a_finished_task_over_a_faulted_one_whatever_the_order():
    hung = task("add", "float32", [], outcome="hung")
    done = task("add", "float32", cells("aten.add.Tensor", "float32", [1]))
    assert merge_records([[hung], [done]]) == merge_records([[done], [hung]]) == [done]
