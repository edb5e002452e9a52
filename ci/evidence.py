"""Evidence of the right subject: every artifact the gate judges must be of the contract's backend.

A verdict proves something only about the subject its evidence measured. A g1 matrix, a g1
baseline, a performance record of another backend or a compat report of ``cpu`` judged by a
refaccel g2 contract prove nothing about refaccel g2, so each is named here::

    identity_problems(contract, matrix=m, records=recs)
    # [("records", "op.add.float32 was measured on refaccel g1, the contract is for refaccel g2")]

The gate refuses such inputs before judging (exit 2, naming the file and the contract); called as a
library, :func:`~opmatrix.ci.evaluate_contract` turns each into a failing ``identity`` check. Records
that cannot be real are refused too: a baseline measured with an injected slowdown (the flag that
tests the gate), and a record compared with a baseline measured on another device.
"""

from __future__ import annotations

from collections.abc import Mapping

from opmatrix.schema import Contract, Matrix
from opmatrix.schema.perf import CompatReport, PerfRecord

__all__ = ["identity_mismatch", "identity_problems", "named"]


def named(backend: str, generation: str | None) -> str:
    """``refaccel g2`` (the backend, with its generation when it has one)."""
    return backend + (f" {generation}" if generation else "")


def _mismatch(backend: str, generation: str | None, contract: Contract, *, generation_optional: bool) -> str | None:
    want = named(contract.backend, contract.generation)
    if backend != contract.backend:
        return f"the contract is for {want}, it is {named(backend, generation)}"
    if contract.generation is not None and generation != contract.generation:
        if generation is None and generation_optional:
            return None
        return f"the contract is for {want}, it is {named(backend, generation) if generation else backend + ' (no generation)'}"
    return None


def identity_mismatch(matrix: Matrix, contract: Contract) -> str | None:
    """``"the contract is for X, the matrix is Y"`` when they name another backend or generation."""
    # matrices of backends without generations (cpu) name none; one that names another is refused
    wrong = _mismatch(matrix.backend.name, matrix.backend.generation, contract, generation_optional=True)
    return wrong.replace(", it is ", ", the matrix is ") if wrong else None


def _device(rec: PerfRecord) -> tuple[str, str, str]:
    hw = rec.hardware
    return hw.device_type, hw.device_name, hw.machine


def _record_problems(what: str, records: Mapping[str, PerfRecord], contract: Contract) -> list[tuple[str, str]]:
    out = []
    for rid, rec in sorted(records.items()):
        wrong = _mismatch(rec.backend, rec.generation, contract, generation_optional=False)
        if wrong:
            out.append((what, f"{rid} was measured on {named(rec.backend, rec.generation)}, "
                              f"{wrong.split(', it is ')[0]}"))
    return out


def identity_problems(
    contract: Contract, *, matrix: Matrix | None = None, baseline: Matrix | None = None,
    records: Mapping[str, PerfRecord] | None = None, baseline_records: Mapping[str, PerfRecord] | None = None,
    compat: CompatReport | None = None,
) -> list[tuple[str, str]]:
    """(which input, what is wrong) for every way the evidence is not of the contract's subject or
    cannot be real; [] when it is sound. ``which`` is ``matrix``, ``baseline``, ``records``,
    ``baseline_records`` or ``compat``."""
    out: list[tuple[str, str]] = []
    for what, m in (("matrix", matrix), ("baseline", baseline)):
        wrong = identity_mismatch(m, contract) if m is not None else None
        if wrong:
            out.append((what, wrong))
    out += _record_problems("records", records or {}, contract)
    out += _record_problems("baseline_records", baseline_records or {}, contract)
    for rid, rec in sorted((baseline_records or {}).items()):
        if rec.injected_slowdown:
            out.append(("baseline_records", f"{rid} was measured with an injected slowdown ({rec.injected_slowdown}); "
                        "a baseline must be a real measurement: measure it again without --slowdown"))
        now = (records or {}).get(rid)
        if now is not None and _device(now) != _device(rec):
            out.append(("records", f"{rid} was measured on {' / '.join(_device(now))}, its baseline on "
                                   f"{' / '.join(_device(rec))}: compare measurements of the same device"))
    if compat is not None:  # a report without a generation does not prove one (opmatrix compat --generation)
        wrong = _mismatch(compat.backend, compat.generation, contract, generation_optional=False)
        if wrong:
            out.append(("compat", wrong.replace(", it is ", ", the report is ")))
    return out
