"""The query API: answers for probed cells, ``unknown`` for the rest, argument conditions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from opmatrix.matrix import UNKNOWN, MatrixIndex, UnknownOperatorError, build_matrix
from opmatrix.matrix.cache import cache_dir
from opmatrix.schema import ArtifactError, DType, ExecPath, Layout, Outcome, load_matrix

from .test_matrix_records import BACKEND, EVIDENCE, cells, softmax_records, task


@pytest.fixture(scope="module")
def m() -> MatrixIndex:
    records = softmax_records() + [
        task("mm", "float32", cells("aten.mm.default", "float32", [2], ("contiguous", "transposed"))),
        task("add", "float32", cells("aten.add.Tensor", "float32", [1, 2], path="native", probed=3)),
        task("__radd__", "float32", cells("aten.add.Tensor", "float32", [2], path="fallback", probed=1)),
    ]
    return MatrixIndex(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))


def test_the_seed_softmax_answers(m: MatrixIndex):
    q = m.query
    assert q("aten.softmax.int", "float32", 3, "contiguous", args={"dim": -1}).path is ExecPath.native
    assert q("aten.softmax.int", "float32", 3, "contiguous", args={"dim": 0}).path is ExecPath.composite
    assert q("aten.softmax.int", "float32", 3, "noncontiguous", args={"dim": -1}).path is ExecPath.composite
    assert q("aten.softmax.int", "float64", 3, "contiguous", args={"dim": -1}).path is ExecPath.rejected


def test_without_arguments_the_worst_group_answers_and_lists_the_better_ones(m: MatrixIndex):
    a = m.query("aten.softmax.int", dtype="bfloat16", rank=4, layout="contiguous")
    assert (a.path, a.conditions) == (ExecPath.composite, {"dim": "first"})
    assert [(e.path, e.conditions) for e in a.alternatives] == [(ExecPath.native, {"dim": "last"})]
    assert "pass argument values to narrow" in a.reason


def test_arguments_no_group_was_probed_for_answer_unknown(m: MatrixIndex):
    a = m.query("aten.softmax.int", "float32", 3, args={"dim": 1})  # a middle axis: never probed
    assert (a.path, a.known) == (UNKNOWN, False)
    assert a.reason == "no probed argument condition matches {'dim': 1} (probed: dim=first; dim=last)"


def test_a_missing_argument_leaves_the_worst_group(m: MatrixIndex):
    a = m.query("aten.softmax.int", "float32", 3, args={"half_to_float": False})
    assert a.path is ExecPath.composite


def test_an_explicit_dtype_group_does_not_answer_for_a_call_without_dtype():
    """The probes always record ``dtype=`` when a sample passes it; a default call has none."""
    records = [task("softmax", "float32", [
        *cells("aten.softmax.int", "float32", [3], path="composite"),
        *cells("aten.softmax.int", "float32", [3], path="rejected", conditions={"dtype": "float64"}),
        *cells("aten.log_softmax.int", "float32", [3], path="rejected", conditions={"dtype": "float64"}),
    ])]
    m = MatrixIndex(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))
    assert m.query("aten.softmax.int", "float32", 3).path is ExecPath.composite
    assert m.query("aten.softmax.int", "float32", 3, args={"dim": -1}).path is ExecPath.composite
    assert m.query("aten.softmax.int", "float32", 3, args={"dtype": torch.float64}).path is ExecPath.rejected
    assert m.query("aten.softmax.int", "float32", 3, args={"dtype": "float64"}).path is ExecPath.rejected
    only = m.query("aten.log_softmax.int", "float32", 3)
    assert (only.known, only.reason) == (False, "probed only for argument values a default call does not have "
                                                "(dtype=float64); pass argument values")
    assert only.given({"dtype": torch.float64}, 3).path is ExecPath.rejected


def test_op_spellings_and_dtype_forms_give_the_same_answer(m: MatrixIndex):
    want = m.query("aten.mm.default", "float32", 2, "transposed")
    assert want.path is ExecPath.native
    for op in ("aten::mm", "aten.mm", "aten::mm.default", torch.ops.aten.mm.default, torch.ops.aten.mm):
        for dtype in ("float32", DType.float32, torch.float32):
            assert m.query(op, dtype, 2, Layout.transposed) is want


def test_answers_are_precomputed_and_shared(m: MatrixIndex):
    a = m.query("aten.add.Tensor", "float32", 2)
    assert m.query("aten.add.Tensor", "float32", 2) is a
    assert (a.path, a.outcome, a.entry is not None and a.entry.mixed) == (ExecPath.fallback, Outcome.ok, True)
    assert a.to_dict()["samples"] == {"probed": 4, "passed": 4, "by_path": {"native": 3, "fallback": 1}}
    assert a.evidence == EVIDENCE


def test_cells_not_probed_are_unknown_with_the_reason(m: MatrixIndex):
    cases = {
        ("aten.mm.default", "float16", 2, "contiguous"): "aten.mm.default was not probed with dtype float16 "
                                                         "(probed: float32)",
        ("aten.mm.default", "float32", 3, "contiguous"): "aten.mm.default float32 contiguous was not probed at "
                                                         "rank 3 (probed ranks: [2])",
        ("aten.mm.default", "float32", 2, "expanded"): "aten.mm.default was not probed with layout expanded "
                                                       "(probed: contiguous, transposed)",
        ("aten.bmm.default", "float32", 3, "contiguous"): "aten.bmm.default was not probed on this backend",
    }
    for (op, dtype, rank, layout), reason in cases.items():
        a = m.query(op, dtype, rank, layout)
        assert (a.path, a.known, a.outcome, a.reason) == (UNKNOWN, False, None, reason)
    assert m.query("aten.mm.default", "float32", 2, mode="compile").reason == "aten.mm.default was not probed in compile mode"


def test_unknown_operator_raises_a_key_error_with_a_suggestion(m: MatrixIndex):
    with pytest.raises(KeyError) as err:
        m.query("aten.sofmax.int", "float32", 3)
    assert isinstance(err.value, UnknownOperatorError)
    assert str(err.value) == ("unknown operator 'aten.sofmax.int'; did you mean aten.softmax.int? "
                              "(give an ATen overload such as aten.softmax.int)")
    with pytest.raises(UnknownOperatorError, match="did you mean aten.softmax.int"):
        m.query("aten::softmax", "float32", 3)  # a packet with no .default: which overload?


def test_bad_dtype_layout_and_mode_values_are_value_errors(m: MatrixIndex):
    with pytest.raises(ValueError, match="unknown dtype 'flaot32'; did you mean 'float32'"):
        m.query("aten.mm.default", "flaot32", 2)
    with pytest.raises(ValueError, match="unknown layout 'strided'"):
        m.query("aten.mm.default", "float32", 2, "strided")
    with pytest.raises(ValueError, match="unknown mode 'graph'"):
        m.query("aten.mm.default", "float32", 2, mode="graph")
    for rank in (-1, "2", True):
        with pytest.raises(ValueError, match=f"rank must be an int >= 0, got {rank!r}"):
            m.query("aten.mm.default", "float32", rank)  # type: ignore[arg-type]


def test_load_from_file_and_the_example_matrix(example_matrix_path: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path))
    m = MatrixIndex.load(example_matrix_path)
    assert m.query("aten.softmax.int", "bfloat16", 5, args={"dim": 4}).path is ExecPath.native
    assert "aten::softmax.int" in m and "aten.sofmax.int" not in m
    assert repr(m) == "<MatrixIndex refaccel g2: 1 operators, 29 cells>"


def test_the_validated_model_cache_is_keyed_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       example_matrix_path: Path):
    """Only a sealed matrix is cached; an edit is never served stale, a broken entry is a miss and
    strictness is unchanged."""
    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "m.yaml"
    text = example_matrix_path.read_text()
    assert re.search(r"^integrity:\n", text, flags=re.M)
    path.write_text(text)
    first = MatrixIndex.load(path).model
    (entry,) = (tmp_path / "cache" / "matrices").iterdir()
    assert MatrixIndex.load(path).model == first == load_matrix(path)  # served from the cache, equal
    path.write_text(text.replace("path: rejected", "path: fallback"))  # an edit is never served stale
    with pytest.raises(ArtifactError, match="edited after it was written"):
        MatrixIndex.load(path)
    entry.write_text("{corrupt")  # a broken entry is a miss, not an error
    path.write_text(text)
    assert MatrixIndex.load(path).model == first
    assert entry.read_text() != "{corrupt"  # and the miss rewrote it
    path.write_text(text.replace("path: rejected", "path: rejectd"))  # strictness is unchanged
    with pytest.raises(ArtifactError, match="'rejectd' is not one of native"):
        MatrixIndex.load(path)
    unsealed = tmp_path / "unsealed.yaml"  # an unsealed matrix loads but is never cached
    unsealed.write_text(re.sub(r"^integrity:\n(?:  .*\n)+", "", text, flags=re.M))
    assert load_matrix(unsealed).operators == first.operators
    assert list((tmp_path / "cache" / "matrices").iterdir()) == [entry]
    monkeypatch.setenv("OPMATRIX_NO_CACHE", "1")
    assert cache_dir() is None


def test_a_written_matrix_is_its_own_first_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dump_model stores the validated model under the bytes it wrote, so the first load of a fresh
    matrix is a cache hit; it equals a strict load of the YAML, hostile texts and lone surrogates included."""
    from opmatrix.reports.synthetic import synthetic_matrix
    from opmatrix.schema import ErrorInfo, dump_model

    monkeypatch.setenv("OPMATRIX_CACHE_DIR", str(tmp_path / "cache"))
    model = synthetic_matrix(n_ops=20, seed=5, hostile=True)
    op, entries = next((op, es) for op, es in model.operators.items() if es[0].error)
    odd = entries[0].model_copy(update={"error": ErrorInfo(
        type="E\ud800", message="\x1b[2J\ud800 <b>1e5</b>\nyes", actionable=False)})
    model = model.model_copy(update={"operators": {**model.operators, op: [odd, *entries[1:]]}})
    path = tmp_path / "m.yaml"
    dump_model(model, path, command="test")
    folder = tmp_path / "cache" / "matrices"
    (entry,) = folder.iterdir()  # written with the matrix, before any load
    hit = load_matrix(path)
    assert list(folder.iterdir()) == [entry]
    entry.unlink()  # a cold load of a sealed file stores the canonical JSON its digest was taken of
    cold = load_matrix(path)
    (entry,) = folder.iterdir()
    assert entry.read_text(encoding="utf-8").startswith('{"integrity":{')
    with monkeypatch.context() as patch:  # served from that entry: no YAML is parsed
        patch.setattr("opmatrix.schema.io.loads_yaml", lambda *a, **k: pytest.fail("parsed again"))
        again = load_matrix(path)
    monkeypatch.setenv("OPMATRIX_NO_CACHE", "1")
    strict = load_matrix(path)
    assert hit == strict == cold == again and hit.operators[op][0].error == strict.operators[op][0].error
    assert again.integrity == strict.integrity is not None
    assert "\\ud800" in (strict.operators[op][0].error.message or "")


def test_the_facades_old_name_still_imports_with_a_warning(example_matrix_path: Path) -> None:
    """``from opmatrix.matrix import Matrix`` (the name before MatrixIndex) works and says the new name."""
    with pytest.warns(DeprecationWarning, match="MatrixIndex"):
        from opmatrix.matrix import Matrix
    assert Matrix is MatrixIndex
    assert Matrix.load(example_matrix_path).query("aten.softmax.int", "float32", 3).path is ExecPath.composite


def test_a_worse_group_a_plain_call_cannot_be_in_is_still_said() -> None:
    """softmax float32 splits by dim and also holds a dtype=float64 group (samples that ask for
    another output dtype) that is rejected: a query without arguments answers for the groups a
    plain call can be in, and its line still names the rejected group, which a contract without
    conditions counts (query and gate never seem to disagree silently)."""
    records = [task("softmax", "float32", [
        *cells("aten.softmax.int", "float32", [2], conditions={"dim": "last"}),
        *cells("aten.softmax.int", "float32", [2], path="composite", conditions={"dim": "first"}),
        *cells("aten.softmax.int", "float32", [2], path="rejected", conditions={"dtype": "float64"}),
    ])]
    index = MatrixIndex(build_matrix(records, backend=BACKEND, evidence=EVIDENCE))
    a = index.query("aten.softmax.int", "float32", 2, "contiguous")
    assert a.path is ExecPath.composite
    assert "rejected (clean rejection) only when dtype=float64" in a.summary()
    assert "not counted here: dtype=float64 rejected" in a.reason
