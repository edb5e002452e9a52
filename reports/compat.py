"""The site's compatibility page (level 7): the promised torch window as ``opmatrix compat`` ran it.

    view = compat_view(load_model("out/compat/compat.yaml", CompatReport))
    view.runs, view.changes       # per version checks; cells that differ between adjacent versions

Only what the report holds is shown: each version's environment and checks, and per pair of
adjacent versions (oldest first) every cell whose path/outcome differs or that one side lacks. The
gate judges which of those are worse (``ci/contracts/*compat*.yaml``); the page does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opmatrix.schema.perf import CompatReport, CompatRun, torch_version_key

__all__ = ["CompatChange", "CompatView", "compat_view"]


@dataclass(frozen=True)
class CompatChange:
    """Adjacent torch versions and the cells whose ``path/outcome`` differs between them."""

    older: str
    newer: str
    cells: list[tuple[str, str, str]] = field(default_factory=list)  # label, older value, newer value
    same: int = 0


@dataclass(frozen=True)
class CompatView:
    report: CompatReport
    runs: list[CompatRun]
    changes: list[CompatChange]


def _change(older: CompatRun, newer: CompatRun) -> CompatChange:
    labels = sorted(set(older.cells) | set(newer.cells))
    differ = [(label, older.cells.get(label, "not probed"), newer.cells.get(label, "not probed")) for label in labels
              if older.cells.get(label) != newer.cells.get(label)]
    return CompatChange(older.torch, newer.torch, differ, len(labels) - len(differ))


def compat_view(report: CompatReport) -> CompatView:
    runs = sorted(report.runs, key=lambda r: torch_version_key(r.torch))
    return CompatView(report, runs, [_change(a, b) for a, b in zip(runs, runs[1:], strict=False)])
