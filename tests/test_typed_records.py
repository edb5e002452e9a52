"""Typed records: the op checkpoint (a named, versioned batch; anything else refused by name) and the run's evidence key."""

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


def test_the_evidence_key_prints_as_journals_have_it_and_refuses_a_partial_identity() -> None:
    from opmatrix.probes.runner.evidence import EvidenceKey

    key = EvidenceKey.from_identity({"torch": "2.13.0 git=abc", "adapter": "cpu", "code": "c0de"}, op_source="9f2e")
    assert str(key) == "torch=2.13.0 git=abc|cpu|ops=9f2e|code=c0de"
    with pytest.raises(ValueError, match="worker identity without adapter"):
        EvidenceKey.from_identity({"torch": "2.13.0"})
