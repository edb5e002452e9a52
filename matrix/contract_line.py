"""One generated line per operator that reads like its support contract.

Derived from the matrix's entries only (never written by hand), e.g. for ``aten.softmax.int`` on
refaccel g2::

    native for dim=last on contiguous, storage_offset input, composite otherwise (amax, div, exp,
    sub, sum); bf16, fp16, fp32; ranks 0-3; rejected when dtype=float64 is requested, and for
    bool, c64, fp64, i16, i32, i64, i8, u8; backward first-order ok; compile: native for fp32,
    rejected otherwise; fallback: none observed

Parts: how the eager calls that passed ran (the best path first, with the argument conditions and
layouts it needs; the others "otherwise"), the dtypes and ranks that passed, rejections (by a
requested ``dtype=`` or by input dtype), wrong values and faults (always named), backward, the
compile mode, host fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opmatrix.schema import Entry, ExecPath, FallbackState, Mode, Outcome

__all__ = ["contract_line", "short_dtype"]

_SHORT = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int8": "i8", "int16": "i16",
    "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool", "complex64": "c64", "complex128": "c128",
}


def short_dtype(name: str) -> str:
    """``float32`` -> ``fp32`` (unknown names unchanged)."""
    return _SHORT.get(name, name)


def _dtypes(boxes: Iterable[Entry]) -> str:
    return ", ".join(sorted({short_dtype(d.value) for b in boxes for d in b.dtypes}))


def _op_short(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else name


def _conds(boxes: Iterable[Entry], skip: str = "dtype") -> str:
    found = sorted({f"{k}={v}" for b in boxes for k, v in b.conditions.items() if k != skip})
    return " or ".join(found)


def _paths(ok: Sequence[Entry]) -> str:
    """``native for dim=last on contiguous input, composite otherwise (amax, ...)``; when the
    input dtype alone separates the paths, each path names its dtypes: ``native for bf16, fp32,
    fallback for fp64 (atan2)``."""
    order = sorted({b.path for b in ok})
    groups = {path: [b for b in ok if b.path is path] for path in order}
    dtype_sets = [{d for b in boxes for d in b.dtypes} for boxes in groups.values()]
    by_dtype = len(order) > 1 and all(a.isdisjoint(b) for i, a in enumerate(dtype_sets) for b in dtype_sets[i + 1:])
    texts = []
    for i, (path, boxes) in enumerate(groups.items()):
        if by_dtype:
            text = f"{path.value} for {_dtypes(boxes)}"
        elif i == 0 and len(order) > 1:
            conds = _conds(boxes)
            layouts = sorted({x.value for b in boxes for x in b.layouts}, key=lambda v: v)
            text = path.value + (f" for {conds}" if conds else "") + f" on {', '.join(layouts)} input"
        else:
            text = path.value + (" otherwise" if i else "")
        comps = sorted({_op_short(c) for b in boxes for c in b.components})
        if path in (ExecPath.composite, ExecPath.fallback) and comps:
            text += f" ({', '.join(comps)})"
        texts.append(text)
    return ", ".join(texts)


def _rejections(boxes: Sequence[Entry]) -> str | None:
    rejected = [b for b in boxes if b.path is ExecPath.rejected and b.outcome is Outcome.ok]
    if not rejected:
        return None
    asked = sorted({b.conditions["dtype"] for b in rejected if "dtype" in b.conditions})
    by_input = [b for b in rejected if "dtype" not in b.conditions]
    texts = []
    if asked:
        texts.append(f"when dtype={' or '.join(asked)} is requested")
    if by_input:
        texts.append(f"for {_dtypes(by_input)}")
    return "rejected " + ", and ".join(texts)


def _problems(boxes: Sequence[Entry]) -> list[str]:
    out = []
    wrong = [b for b in boxes if b.outcome is Outcome.wrong]
    if wrong:
        out.append(f"WRONG values for {_dtypes(wrong)}")
    faulted = [b for b in boxes if b.outcome not in (Outcome.ok, Outcome.wrong)]
    if faulted:
        kinds = ", ".join(sorted({b.outcome.value for b in faulted}))
        # faults confined to one condition (input=empty: torch_xla's roll) say so
        conds = {tuple(sorted(b.conditions.items())) for b in faulted}
        where = f" when {_conds(faulted)}" if len(conds) == 1 and () not in conds else ""
        out.append(f"FAULTS ({kinds}{where})")
    return out


def _backward(ok: Sequence[Entry]) -> str:
    with_grad = [b for b in ok if b.autograd is not None]
    if not with_grad:
        return "backward: not probed"
    bad = [b for b in with_grad if b.autograd is not None
           and (b.autograd.outcome is not Outcome.ok or b.autograd.path > ExecPath.decomposed)]
    if not bad:
        return "backward first-order ok"
    what = sorted({f"{b.autograd.path.value}" + ("" if b.autograd.outcome is Outcome.ok else f" ({b.autograd.outcome.value})")
                   for b in bad if b.autograd is not None})
    ranks = sorted({r for b in bad for r in b.ranks.ranks()})
    where = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    good = "ok" if len(bad) < len(with_grad) else "none ok"
    return f"backward first-order {good}, {' or '.join(what)} at {where}"


def _compile(boxes: Sequence[Entry]) -> str:
    if not boxes:
        return "compile: not probed"
    ok = [b for b in boxes if b.outcome is Outcome.ok and b.path <= ExecPath.decomposed]
    texts = [f"{p.value} for {_dtypes(b for b in ok if b.path is p)}" for p in sorted({b.path for b in ok})]
    if any(b not in ok for b in boxes):
        word = "rejected" if all(b.path is ExecPath.rejected for b in boxes if b not in ok) else "not ok"
        texts.append(f"{word} otherwise" if texts else word)
    return "compile: " + ", ".join(texts)


def _fallback(boxes: Sequence[Entry]) -> str:
    """Host fallback over the cells that ran (a clean rejection runs nothing)."""
    if not boxes:
        return "fallback: nothing ran"
    ops = sorted({op for b in boxes for op in b.fallback.ops})
    if any(b.path is ExecPath.fallback or b.fallback.state is FallbackState.observed for b in boxes):
        return f"fallback: host fallback observed ({', '.join(ops) or 'ops not recorded'})"
    if all(b.fallback.state is FallbackState.not_observed for b in boxes):
        return "fallback: none observed"
    return "fallback: not known for every cell"


def contract_line(entries: Sequence[Entry]) -> str:
    """The operator's contract in one line, from its entries (contract-level or boxes)."""
    boxes = [b for e in entries for b in e.boxes()]
    eager = [b for b in boxes if b.mode is Mode.eager]
    ok = [b for b in eager if b.outcome is Outcome.ok and b.path <= ExecPath.fallback]
    parts: list[str] = []
    if ok:
        lo, hi = min(b.ranks.min for b in ok), max(b.ranks.max for b in ok)
        parts += [_paths(ok), _dtypes(ok), f"rank {lo}" if lo == hi else f"ranks {lo}-{hi}"]
    else:
        parts.append("eager: no call passed")
    parts += _problems(boxes)
    rejected = _rejections(eager)
    if rejected:
        parts.append(rejected)
    if ok:
        parts.append(_backward(ok))
    parts.append(_compile([b for b in boxes if b.mode is Mode.compile]))
    ran = [b for b in boxes if b.outcome is not Outcome.ok or b.path is not ExecPath.rejected]
    parts.append(_fallback(ran))
    return "; ".join(parts)
