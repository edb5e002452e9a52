"""JUnit XML of a gate result, for CI systems that render test reports.

One ``testcase`` per contract requirement in the suite ``opmatrix.requirements``; gate-level
checks (identity, cell count, baseline, waivers) in ``opmatrix.gate``::

    <testsuites name="opmatrix gate" tests="9" failures="2" errors="0" skipped="1">
      <testsuite name="opmatrix.requirements" tests="6" failures="2" errors="0" skipped="1">
        <testcase classname="opmatrix.gate.L2" name="L2.compute: aten.mm.* [...]">
          <failure message="10/12 cells pass, 2 fail" type="fail">aten.mm.default bfloat16 ...</failure>

A blocking failure or unknown is a ``failure`` whose text lists the deciding cells; a non-blocking
one (above the promised level) is ``skipped``; a waived requirement passes and lists the waived
cells in ``system-out``. This is the subset of the format that Jenkins, GitLab and GitHub
reporters all read.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from opmatrix.schema.gate import CellStatus, GateCheck, GateResult, RequirementResult, Status

__all__ = ["render_junit"]

#: Cells written into one failure's text; the JSON output keeps them all.
MAX_CELLS = 200


def _cells_text(r: RequirementResult, status: CellStatus) -> str:
    cells = [c for c in r.cells if c.status is status]
    lines = [c.line() + (f" (waiver #{c.waiver})" if c.waiver is not None else "") for c in cells[:MAX_CELLS]]
    if len(cells) > MAX_CELLS:
        lines.append(f"... and {len(cells) - MAX_CELLS} more")
    return "\n".join(lines)


def _requirement_case(parent: ET.Element, r: RequirementResult) -> tuple[int, int]:
    case = ET.SubElement(parent, "testcase", classname=f"opmatrix.gate.L{r.level}", name=f"{r.id}: {r.title}", time="0")
    if r.status in (Status.failed, Status.unknown):
        text = _cells_text(r, CellStatus.failed) or r.message
        if r.blocking:
            fail = ET.SubElement(case, "failure", message=f"{r.status}: {r.message}", type=str(r.status))
            fail.text = text
            return 1, 0
        ET.SubElement(case, "skipped", message=f"informational (level {r.level} is not promised): {r.status}: {r.message}")
        return 0, 1
    if r.status is Status.waived:
        ET.SubElement(case, "system-out").text = "waived:\n" + _cells_text(r, CellStatus.waived)
    return 0, 0


def _check_case(parent: ET.Element, check: GateCheck, result: GateResult) -> int:
    case = ET.SubElement(parent, "testcase", classname="opmatrix.gate", name=check.name, time="0")
    if not check.blocks:
        return 0
    fail = ET.SubElement(case, "failure", message=check.message, type=str(check.status))
    if check.name == "baseline":
        fail.text = "\n".join(c.cell.line() for c in result.regressions if c.cell.status is CellStatus.failed)
    else:
        fail.text = check.message
    return 1


def _suite(parent: ET.Element, name: str, tests: int, failures: int, skipped: int) -> ET.Element:
    return ET.SubElement(
        parent, "testsuite", name=name, tests=str(tests), failures=str(failures), errors="0", skipped=str(skipped), time="0"
    )


def render_junit(result: GateResult) -> str:
    """The JUnit XML document (UTF-8 text with an XML declaration)."""
    root = ET.Element("testsuites", name="opmatrix gate")
    req_suite = ET.Element("testsuite")
    req_failures = req_skipped = 0
    for r in result.requirements:
        f, s = _requirement_case(req_suite, r)
        req_failures, req_skipped = req_failures + f, req_skipped + s
    gate_suite = ET.Element("testsuite")
    gate_failures = sum(_check_case(gate_suite, c, result) for c in result.checks)

    for name, suite, tests, failures, skipped in (
        ("opmatrix.requirements", req_suite, len(result.requirements), req_failures, req_skipped),
        ("opmatrix.gate", gate_suite, len(result.checks), gate_failures, 0),
    ):
        out = _suite(root, name, tests, failures, skipped)
        props = ET.SubElement(out, "properties")
        for key, value in (("backend", result.backend), ("generation", result.generation or ""),
                           ("release", result.release), ("promised_level", str(result.promised_level)),
                           ("verdict", str(result.verdict))):
            ET.SubElement(props, "property", name=key, value=value)
        out.extend(list(suite))
    total = len(result.requirements) + len(result.checks)
    root.set("tests", str(total))
    root.set("failures", str(req_failures + gate_failures))
    root.set("errors", "0")
    root.set("skipped", str(req_skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
