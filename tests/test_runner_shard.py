"""--shard I/N: deterministic slices whose journals merge into the unsharded matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from opmatrix.matrix.build import build_matrix
from opmatrix.matrix.journal import merge_records, read_journal
from opmatrix.probes.runner import Task, parse_shard, run, select_shard
from opmatrix.schema import BackendId, Evidence
from tests.runner_handlers import HANDLERS, make_tasks


def test_shards_partition_the_plan() -> None:
    """Every task is in exactly one shard, whatever N, and the slice ignores the rest of the plan."""
    tasks = [Task(f"op{i}|float32", "op") for i in range(200)]
    for n in (1, 2, 3, 7):
        slices = [select_shard(tasks, i, n) for i in range(1, n + 1)]
        ids = [t.id for s in slices for t in s]
        assert sorted(ids) == sorted(t.id for t in tasks)
        assert min(len(s) for s in slices) > 200 / n / 2  # roughly balanced
    # a machine planning fewer ops still puts each task in the same shard
    assert select_shard(tasks[::2], 2, 3) == [t for t in select_shard(tasks, 2, 3) if t in tasks[::2]]


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1/0"])
def test_bad_shard_is_named(text: str) -> None:
    """A malformed --shard says what is expected."""
    with pytest.raises(ValueError, match=r"expected I/N"):
        parse_shard(text)


def _matrix(records: list) -> dict:
    evidence = Evidence(opmatrix_version="0", torch_version="0", python="3", platform="test")
    matrix = build_matrix(
        records, backend=BackendId(name="cpu", device_type="cpu", dispatch_key="CPU"), evidence=evidence
    )
    return matrix.model_dump(mode="json")["operators"]


def test_sharded_runs_merge_into_the_unsharded_matrix(tmp_path: Path) -> None:
    """Shards 1/3, 2/3, 3/3 record disjoint tasks whose union, merged, is the unsharded matrix."""
    tasks = make_tasks(9, faults={"t4": {"u1": "oom"}})
    run(tasks, command="runner test", backend="cpu", out_dir=tmp_path / "all", workers=2, handlers=HANDLERS, progress=False)
    journals = []
    for i in (1, 2, 3):
        summary = run(
            tasks, command="runner test", backend="cpu", out_dir=tmp_path / f"s{i}", workers=1, shard=(i, 3), handlers=HANDLERS, progress=False
        )
        assert summary.planned == summary.recorded == len(select_shard(tasks, i, 3))
        journals.append(read_journal(tmp_path / f"s{i}" / "journal.jsonl"))
    ids = [r.task for records in journals for r in records if r.kind == "task"]
    assert sorted(ids) == sorted(t.id for t in tasks)
    merged = merge_records(journals)
    assert _matrix(merged) == _matrix(read_journal(tmp_path / "all" / "journal.jsonl"))
