"""Waivers: accepted exceptions, matched against findings, tracked for expiry and staleness.

A waiver covers the findings (failing cells, regressions) its ``match`` selects; absent fields
match anything. Runtime checks are matched as ``op: "check:<name>"``::

    book = WaiverBook(contract.waivers, today=date(2026, 12, 1))
    book.apply(cell)      # -> the cell, waived or annotated "waiver #0 expired on 2026-11-30"
    book.reports()        # active / stale / expired, each with how many findings it matched

An expired waiver never waives anything and blocks the gate until it is renewed or removed; a
valid waiver that matched nothing is stale (reported, not blocking).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Sequence

from opmatrix.schema import Waiver
from opmatrix.schema.gate import CellRef, CellStatus, WaiverReport, WaiverState

__all__ = ["WaiverBook", "waiver_matches"]


def waiver_matches(waiver: Waiver, cell: CellRef) -> bool:
    """Whether ``waiver`` selects ``cell`` (fields the cell lacks match only an absent field)."""
    m = waiver.match
    if not fnmatch.fnmatchcase(cell.op, m.op):
        return False
    pairs = ((m.dtype, cell.dtype), (m.rank, cell.rank), (m.layout, cell.layout), (m.path, cell.path), (m.mode, cell.mode))
    return all(want is None or want == got for want, got in pairs)


class WaiverBook:
    """The contract's waivers and, as findings are applied, what each one matched."""

    def __init__(self, waivers: Sequence[Waiver], today: dt.date) -> None:
        self.waivers = list(waivers)
        self.today = today
        self._matched = [0] * len(self.waivers)

    def expired(self, index: int) -> bool:
        """Whether waiver ``index`` is past its expiry date."""
        return self.waivers[index].expired(self.today)

    def apply(self, cell: CellRef) -> CellRef:
        """A failing cell, waived by the first active waiver that matches it, or annotated when only
        expired waivers match. Cells that did not fail are returned unchanged, and so are cells
        with no evidence (never probed, a check that did not run): a waiver accepts a known
        failure, it cannot stand in for a measurement."""
        if cell.status is not CellStatus.failed or cell.missing:
            return cell
        expired: list[int] = []
        for index, waiver in enumerate(self.waivers):
            if not waiver_matches(waiver, cell):
                continue
            self._matched[index] += 1
            if self.expired(index):
                expired.append(index)
                continue
            return cell.model_copy(update={"status": CellStatus.waived, "waiver": index})
        if expired:
            notes = "; ".join(f"waiver #{i} expired on {self.waivers[i].expires}" for i in expired)
            return cell.model_copy(update={"reason": f"{cell.reason} ({notes})"})
        return cell

    def reports(self) -> list[WaiverReport]:
        """Every waiver with its state: expired, active (matched something) or stale."""
        out = []
        for index, waiver in enumerate(self.waivers):
            if self.expired(index):
                state = WaiverState.expired
            elif self._matched[index]:
                state = WaiverState.active
            else:
                state = WaiverState.stale
            out.append(
                WaiverReport(
                    index=index,
                    match=waiver.match,
                    reason=waiver.reason,
                    owner=waiver.owner,
                    expires=waiver.expires.isoformat(),
                    state=state,
                    matched=self._matched[index],
                )
            )
        return out
