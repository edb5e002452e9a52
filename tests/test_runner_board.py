"""The unit board: what a worker posts is what the parent reads, even after the worker died."""

from __future__ import annotations

import multiprocessing as mp
import struct
from pathlib import Path

from opmatrix.probes.runner.board import UnitBoard


def _post_and_die(path: str) -> None:
    board = UnitBoard(path)
    board.post("softmax|float32", "3/transposed/eager")
    board.post("softmax|float32", "4/contiguous/eager")
    raise SystemExit(7)  # no goodbye message: the board is all the parent has


def test_a_fresh_board_is_empty(tmp_path: Path) -> None:
    assert UnitBoard(tmp_path / "w0.unit", create=True).read() == (0, None, None)


def test_the_last_post_wins(tmp_path: Path) -> None:
    writer = UnitBoard(tmp_path / "w0.unit", create=True)
    reader = UnitBoard(tmp_path / "w0.unit")
    writer.post("add|float32", "0/contiguous/eager")
    first = reader.read()
    writer.post("add|float32", "1/strided/backward")
    second = reader.read()
    assert first[1:] == ("add|float32", "0/contiguous/eager")
    assert second[1:] == ("add|float32", "1/strided/backward") and second[0] > first[0]


def test_a_dead_workers_last_unit_is_readable(tmp_path: Path) -> None:
    path = tmp_path / "w1.unit"
    reader = UnitBoard(path, create=True)
    child = mp.get_context("spawn").Process(target=_post_and_die, args=(str(path),))
    child.start()
    child.join(60)
    assert child.exitcode == 7
    assert reader.read()[1:] == ("softmax|float32", "4/contiguous/eager")


def test_a_write_cut_short_is_not_trusted(tmp_path: Path) -> None:
    board = UnitBoard(tmp_path / "w0.unit", create=True)
    board.post("add|float32", "0/contiguous/eager")
    with (tmp_path / "w0.unit").open("r+b") as fh:  # a writer killed between its two stores
        fh.write(struct.pack("<Q", 3))
    assert board.read() == (3, None, None)


def test_a_long_unit_id_is_cut_to_the_page(tmp_path: Path) -> None:
    board = UnitBoard(tmp_path / "w0.unit", create=True)
    board.post("t", "u" * 10_000)
    seq, task, unit = board.read()
    assert task == "t" and unit is not None and 4000 < len(unit) < 4096


def test_close_can_remove_the_file(tmp_path: Path) -> None:
    board = UnitBoard(tmp_path / "w0.unit", create=True)
    board.close(remove=True)
    assert not (tmp_path / "w0.unit").exists()
    assert board.read() == (0, None, None)


def test_carry_file_keeps_the_task_units_and_drops_a_frame_cut_short(tmp_path: Path) -> None:
    """What a worker checkpointed comes back for its task only; a frame the worker died writing is
    dropped (that unit runs again), and a new task starts from an empty file."""
    from opmatrix.probes.runner.carry import CarryWriter, read_carried

    path = tmp_path / "w0.carry"
    writer = CarryWriter(path)
    writer.start("add|float32")
    writer("0/contiguous/eager", b"\x00first")
    writer("1/contiguous/eager", b"second \xff")
    assert read_carried(path, "add|float32") == {"0/contiguous/eager": b"\x00first", "1/contiguous/eager": b"second \xff"}
    assert read_carried(path, "mul|float32") == {}
    with path.open("ab") as fh:  # the worker died half-way through a frame
        fh.write(b"\x0b\x00\x00\x00\x12\x00\x00\x00\x40\x00\x00\x00add|float32 2/cont")
    assert set(read_carried(path, "add|float32")) == {"0/contiguous/eager", "1/contiguous/eager"}
    writer.start("mul|float32")
    assert path.stat().st_size == 0 and read_carried(path, "add|float32") == {}
    assert read_carried(tmp_path / "missing.carry", "add|float32") == {}
