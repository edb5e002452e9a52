"""The op engine's checkpoint: a named, versioned batch that round-trips, and anything else is refused by name."""

from __future__ import annotations

import pickle

import pytest

from opmatrix.probes.ops.checkpoint import FORMAT, CheckpointBatch, UnitDone, dump_batch, load_batch


def test_a_batch_round_trips_its_units() -> None:
    units = {"0/contiguous/eager": UnitDone([], invalid=1, failed=0, representative=True, grads=2, compiled=False)}
    assert load_batch(dump_batch(units)) == units


def test_the_old_tuple_checkpoint_is_refused_with_a_message() -> None:
    old = pickle.dumps({"0/contiguous/eager": ([], 0, 0, False, 0, False)}, protocol=5)  # the 6-tuple format
    with pytest.raises(ValueError, match="not an op checkpoint batch"):
        load_batch(old)


def test_another_format_is_refused_naming_both() -> None:
    blob = pickle.dumps(CheckpointBatch({}, format=FORMAT + 1), protocol=5)
    with pytest.raises(ValueError, match=f"format {FORMAT + 1}, this opmatrix reads format {FORMAT}"):
        load_batch(blob)
