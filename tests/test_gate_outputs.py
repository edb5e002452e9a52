"""Renderings of a gate result: JUnit XML, markdown summary, JSON."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from opmatrix.ci import GateResult, evaluate_contract
from opmatrix.ci.junit import render_junit
from opmatrix.ci.summary import render_markdown, render_verdict
from opmatrix.schema import LevelRequirement

from .test_gate_support import TODAY, contract, entry, matrix, op_req, waiver

OPS = {
    "aten.mm.default": [entry(("float32",), (2, 2)), entry(("bfloat16",), (2, 2), path="rejected")],
    "aten.add.Tensor": [entry(("float32",), (1, 2))],
    "aten.cumsum.default": [entry(("float32",), (1, 2))],
}


def _blocked() -> GateResult:
    reqs = [op_req(["aten.mm.default"], ("float32", "bfloat16"), name="mm"), op_req(["aten.add.Tensor"], name="add")]
    l3 = LevelRequirement(level=3, workloads=["llama-7b"])
    return evaluate_contract(
        matrix(OPS), contract(reqs, extra_levels=[l3], waivers=[waiver("aten.softmax.*")]), today=TODAY
    )


def test_junit_one_testcase_per_requirement() -> None:
    """The requirements suite has one testcase per requirement; counts agree with the cases."""
    result = _blocked()
    root = ET.fromstring(render_junit(result))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    reqs = suites["opmatrix.requirements"]
    cases = reqs.findall("testcase")
    assert len(cases) == len(result.requirements) == 9
    assert [c.get("name").split(":")[0] for c in cases] == [r.id for r in result.requirements]
    for suite in suites.values():
        assert int(suite.get("tests")) == len(suite.findall("testcase"))
        assert int(suite.get("failures")) == len(suite.findall("testcase/failure"))
        assert int(suite.get("skipped")) == len(suite.findall("testcase/skipped"))
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites.values())
    assert int(root.get("failures")) == sum(int(s.get("failures")) for s in suites.values())


def test_junit_failure_carries_the_deciding_cells() -> None:
    """The mm failure names the bf16 cell; the level-3 workload (not promised) is skipped."""
    root = ET.fromstring(render_junit(_blocked()))
    mm = next(c for c in root.iter("testcase") if c.get("name").startswith("L2.ops.mm"))
    failure = mm.find("failure")
    assert failure is not None and failure.get("type") == "fail"
    assert "aten.mm.default bfloat16 rank 2 contiguous eager: path rejected is worse than composite" in failure.text
    l3 = next(c for c in root.iter("testcase") if c.get("name").startswith("L3.workload.llama-7b"))
    assert l3.find("skipped") is not None and l3.find("failure") is None
    add = next(c for c in root.iter("testcase") if c.get("name").startswith("L2.ops.add"))
    assert list(add) == []


def test_markdown_order_verdict_blocking_improvements_stale() -> None:
    """Verdict first, then blocking items, then improvements (with YAML) and stale waivers."""
    text = render_markdown(_blocked())
    assert text.startswith("## ❌ opmatrix gate: BLOCKED (refaccel g2, release 2.1, level 2 promised)\n")
    at = [text.index(h) for h in ("### Blocking (1)", "### Requirements", "### Improvements", "### Stale waivers (1)")]
    assert at == sorted(at)
    assert "- L2.ops.mm: aten.mm.default bfloat16 rank 2 contiguous eager: path rejected" in text
    assert "```yaml\n- dtypes: [float32]\n  ops: [aten.cumsum.default]\n" in text


def test_markdown_pass() -> None:
    """A passing gate says PASS first and has no blocking section."""
    result = evaluate_contract(matrix(OPS), contract([op_req(["aten.add.Tensor"])]), today=TODAY)
    text = render_markdown(result)
    assert text.startswith("## ✅ opmatrix gate: PASS") and "### Blocking" not in text


def test_json_round_trip() -> None:
    """The JSON output parses back into the same result."""
    result = _blocked()
    assert GateResult.model_validate_json(result.model_dump_json()) == result


def test_printed_verdict_names_what_blocks() -> None:
    """The stdout verdict lists every requirement and what blocks, grouped (the cells are in the summary)."""
    text = render_verdict(_blocked())
    assert text.splitlines()[0] == "opmatrix gate: BLOCKED (refaccel g2, release 2.1, level 2 promised)"
    assert "blocking, worst first (1 reason, 1 failing cell: --summary / --json list each):\n" \
           "  - L2.ops.mm: mm is rejected for bfloat16\n" in text
    assert "stale waivers: #0 (aten.softmax.*)" in text
    summary = render_markdown(_blocked())
    assert "- L2.ops.mm: aten.mm.default bfloat16 rank 2 contiguous eager: path rejected is worse than composite" in summary


def test_gate_and_site_say_what_blocks_in_one_order_worst_first() -> None:
    """Wrong values lead (the worst finding), one line per group not per cell, in the CLI, the markdown
    summary and the site's banner alike"""
    from opmatrix.reports.verdict import verdict_view

    ops = {"aten.mm.default": [entry(("bfloat16", "float16"), (1, 3), path="rejected")],
           "aten.add.Tensor": [entry(("float32",), (1, 3), outcome="wrong")]}
    reqs = [op_req(["aten.mm.default"], ("bfloat16", "float16"), name="mm"),
            op_req(["aten.add.Tensor"], ("float32",), name="add")]
    result = evaluate_contract(matrix(ops), contract(reqs), today=TODAY)
    printed = render_verdict(result).split("blocking, worst first (2 reasons, 9 failing cells")[1].splitlines()[1:3]
    assert printed == ["  - L2.ops.add: add.Tensor gives wrong values for float32",
                       "  - L2.ops.mm: mm is rejected for bfloat16, float16"]
    banner = verdict_view(result).reasons
    assert [f"  - {line}" for line in banner[:2]] == printed
    markdown = render_markdown(result)
    assert markdown.index("- L2.ops.add: add.Tensor gives wrong") < markdown.index("- L2.ops.mm: mm is rejected")
