"""Contract-level entries: fewer, readable entries whose expansion and query answers are unchanged.

The fixtures are one real refaccel g2 probe (softmax, addcmul, add; default dtypes, ranks and
layouts): its journal, and the matrix the box-per-result compressor wrote from it before entries
were grouped (``*.boxes.yaml.gz``). Both compressors now run on the same cells and every probed
cell must answer the same.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from opmatrix.matrix import MatrixIndex
from opmatrix.matrix.build import collect_cells
from opmatrix.matrix.compress import compress_cells
from opmatrix.matrix.journal import read_journal
from opmatrix.schema import Matrix, TaskRecord, loads_yaml, validate_data

DATA = Path(__file__).parent / "data"
STEM = "refaccel-g2-softmax-addcmul-add"


@pytest.fixture(scope="module")
def old_matrix() -> Matrix:
    text = gzip.decompress((DATA / f"{STEM}.boxes.yaml.gz").read_bytes()).decode()
    return validate_data(loads_yaml(text), Matrix, "old matrix", text)


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    path = tmp_path_factory.mktemp("journal") / "journal.jsonl"
    path.write_bytes(gzip.decompress((DATA / f"{STEM}.journal.jsonl.gz").read_bytes()))
    return collect_cells(r for r in read_journal(path) if isinstance(r, TaskRecord))


@pytest.fixture(scope="module")
def new_matrix(old_matrix: Matrix, cells: dict) -> Matrix:  # type: ignore[type-arg]
    return old_matrix.model_copy(update={"operators": compress_cells(cells)})


def _answers(model: Matrix) -> dict:  # type: ignore[type-arg]
    """Every probed cell -> what a query answers (without and with the softmax dim argument)."""
    out = {}
    for key, answer in MatrixIndex(model).cells():
        seen = [answer] + [answer.given({"dim": d}, rank=key[2]) for d in (-1, 0)]
        out[key] = [
            (str(a.path), a.outcome, a.conditions, [(e.conditions, e.path, e.outcome) for e in a.alternatives],
             a.entry.components if a.entry else None, a.entry.error if a.entry else None)
            for a in seen
        ]
    return out


def test_the_old_fixture_is_what_the_box_compressor_makes_from_the_same_cells(old_matrix, cells):
    assert compress_cells(cells, contract=False) == old_matrix.operators


def test_expansion_gives_back_exactly_the_old_boxes(old_matrix, new_matrix):
    for op, entries in old_matrix.operators.items():
        old = sorted(e.model_dump_json() for e in entries)
        new = sorted(b.model_dump_json() for e in new_matrix.operators[op] for b in e.boxes())
        assert new == old, op
    assert new_matrix.cell_count() == old_matrix.cell_count()


def test_every_probed_cell_answers_the_same(old_matrix, new_matrix):
    old, new = _answers(old_matrix), _answers(new_matrix)
    assert set(new) == set(old) and len(old) > 500
    assert new == old


def test_softmax_reads_like_a_contract_and_the_matrix_shrinks(old_matrix, new_matrix):
    softmax = new_matrix.operators["aten.softmax.int"]
    assert len(softmax) <= 6
    heads = {(e.mode.value, e.path.value) for e in softmax}
    assert {("eager", "native"), ("eager", "composite"), ("eager", "rejected")} <= heads
    native = next(e for e in softmax if (e.mode.value, e.path.value) == ("eager", "native"))
    assert {d.value for d in native.dtypes} == {"float32", "float16", "bfloat16"}
    # numerics are kept per dtype: fp16 and bf16 have looser tolerances than fp32
    tol = {d.value: n.atol for d, n in native.numerics_by_dtype.items()}
    assert tol["float32"] < tol["float16"] < tol["bfloat16"]
    old_n = sum(map(len, old_matrix.operators.values()))
    new_n = sum(map(len, new_matrix.operators.values()))
    assert new_n * 3 <= old_n, (old_n, new_n)


def test_every_command_counts_the_same_cells(old_matrix, new_matrix):
    """probe, report, validate and the site count through count_matrix: grouping changes entries, not cells."""
    from opmatrix.reports.summary import coverage
    from opmatrix.schema import count_matrix

    new, old = count_matrix(new_matrix), count_matrix(old_matrix)
    assert (new.cells, new.cells_by_path, new.samples) == (old.cells, old.cells_by_path, old.samples)
    assert new.cells == new_matrix.cell_count()
    assert new.boxes == old.entries == sum(map(len, old_matrix.operators.values())) > new.entries
    site = coverage(new_matrix)
    assert {p: sum(site.counts[d][p] for d in site.dtypes) for p in new.cells_by_path} == new.cells_by_path
    assert new.line().startswith(f"{new.cells} cells (native ")
    assert f" in {new.entries} entries, 3 operators; {new.samples} samples" in new.line()


def test_the_contract_line_is_generated_from_the_entries(new_matrix):
    from opmatrix.matrix.contract_line import contract_line

    softmax = contract_line(new_matrix.operators["aten.softmax.int"])
    assert softmax.startswith("native for dim=last on contiguous, storage_offset input, composite otherwise "
                              "(amax, div, exp, sub, sum); bf16, fp16, fp32; ranks 0-3;")
    assert "rejected when dtype=float64 is requested, and for bool, c64, fp64" in softmax
    assert softmax.endswith("compile: native for fp32, rejected otherwise; fallback: none observed")
    addcmul = contract_line(new_matrix.operators["aten.addcmul.default"])
    assert addcmul.startswith("eager: no call passed;") and "compile: decomposed for bf16, fp16, fp32" in addcmul
    # the line follows the data: without its composite entry softmax reads native only
    only = [e for e in new_matrix.operators["aten.softmax.int"] if e.path.value != "composite"]
    assert contract_line(only).startswith("native; bf16, fp16, fp32")
