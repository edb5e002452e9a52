"""The headline of ``opmatrix query MATRIX OP``: what works and on which path, then what does not.

One short paragraph generated from the operator's entries (never written by hand), e.g. for
``aten.softmax.int`` on a backend whose softmax runs through a host fallback::

    Works: eager through host fallback (aten::_softmax) for bf16, fp32 at ranks 0-3; backward
    first-order through host fallback. Compiled (static shapes): fallback for fp32. Does not
    work: rejected for fp64. Accumulation: bf16 in float32.

Every cell there is ``ok`` on the fallback path, so it reads as working, with the path named;
``wrong`` values and faults always lead "Does not work". The full entry list: ``--all``.
"""

from __future__ import annotations

from collections.abc import Sequence

from opmatrix.schema import Entry, ExecPath, Mode, Outcome, Shapes

from .contract_line import _paths, _problems, _rejections, short_dtype

__all__ = ["headline"]

_WORDS = {ExecPath.native: "native", ExecPath.composite: "composite", ExecPath.decomposed: "decomposed",
          ExecPath.fallback: "through host fallback", ExecPath.rejected: "rejected", ExecPath.unknown: "path unknown"}


def _dtypes(boxes: Sequence[Entry]) -> str:
    return ", ".join(sorted({short_dtype(d.value) for b in boxes for d in b.dtypes}))


def _ranks(boxes: Sequence[Entry]) -> str:
    ranks = sorted({r for b in boxes for r in b.ranks.ranks()})
    runs: list[list[int]] = []
    for r in ranks:
        if runs and runs[-1][-1] == r - 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    text = ", ".join(f"{run[0]}" if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def _works(ok: Sequence[Entry]) -> str:
    """``eager native for fp32 at ranks 0-3``; with several paths, the contract line's split
    (by dtype, or by condition and layout), then the dtypes and ranks they cover together (a path
    split by dtype names its dtypes once)."""
    text = _paths(ok).replace("fallback", "through host fallback")
    sets = [{d for b in ok if b.path is p for d in b.dtypes} for p in sorted({b.path for b in ok})]
    by_dtype = len(sets) > 1 and all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1:])
    where = f"at {_ranks(ok)}" if by_dtype else f"for {_dtypes(ok)} at {_ranks(ok)}"
    return f"eager {text} {where}"


def _backward(ok: Sequence[Entry]) -> tuple[str | None, str | None]:
    """(what works, what does not) of first-order backward, in words: a backward ``rejected`` with
    outcome ``ok`` is a clean refusal (the device says it has no backward), not a failure to hide."""
    grads = [b for b in ok if b.autograd is not None]
    if not grads:
        return None, None
    good = [b for b in grads if b.autograd and b.autograd.outcome is Outcome.ok and b.autograd.path is not ExecPath.rejected]
    refused = [b for b in grads if b.autograd and b.autograd.outcome is Outcome.ok and b.autograd.path is ExecPath.rejected]
    bad = [b for b in grads if b.autograd and b.autograd.outcome is not Outcome.ok]
    works = None
    if good:
        paths = sorted({b.autograd.path for b in good if b.autograd})
        works = "backward first-order " + ", ".join(_WORDS[p] for p in paths)
        if refused or bad:
            works += f" at {_ranks(good)}"
    fails = []
    if refused:
        fails.append(f"backward refused cleanly (the device rejects it; forward works) for {_dtypes(refused)} at {_ranks(refused)}")
    if bad:
        kinds = ", ".join(sorted({b.autograd.outcome.value for b in bad if b.autograd}))
        fails.append(f"backward {kinds.upper()} for {_dtypes(bad)} at {_ranks(bad)}")
    return works, "; ".join(fails) or None


def _compiled(boxes: Sequence[Entry]) -> tuple[list[str], list[str]]:
    works, fails = [], []
    for shapes in Shapes:
        mine = [b for b in boxes if (b.shapes or Shapes.static) is shapes]
        ok = [b for b in mine if b.outcome is Outcome.ok and b.path <= ExecPath.fallback]
        if ok:
            paths = sorted({b.path for b in ok})
            works.append(f"compiled ({shapes.value} shapes) " + ", ".join(
                f"{_WORDS[p]} for {_dtypes([b for b in ok if b.path is p])}" for p in paths))
        bad = [b for b in mine if b.outcome is not Outcome.ok]
        if bad:
            fails.append(f"compiled ({shapes.value} shapes) {', '.join(sorted({b.outcome.value.upper() for b in bad}))} "
                         f"for {_dtypes(bad)}")
    return works, fails


def _accumulation(boxes: Sequence[Entry]) -> str | None:
    found = sorted({(d.value, b.numerics.accumulation.value) for b in boxes for d in b.dtypes
                    if b.numerics is not None and b.numerics.accumulation is not None})
    if not found:
        return None
    return "Accumulation: " + ", ".join(f"{short_dtype(d)} in {mode}" for d, mode in found) + "."


def headline(entries: Sequence[Entry]) -> str:
    """What works and on which path, then what does not, for one operator's entries."""
    boxes = [b for e in entries for b in e.boxes()]
    eager = [b for b in boxes if b.mode is Mode.eager]
    ok = [b for b in eager if b.outcome is Outcome.ok and b.path <= ExecPath.fallback]
    works, fails = ([_works(ok)] if ok else []), []
    grad_ok, grad_bad = _backward(ok)
    works += [grad_ok] if grad_ok else []
    compiled_ok, compiled_bad = _compiled([b for b in boxes if b.mode is Mode.compile])
    works += compiled_ok
    wrong = [b for b in eager if b.outcome is Outcome.wrong]
    if wrong:
        fails.append(f"eager WRONG values for {_dtypes(wrong)} at {_ranks(wrong)}")
    faulted = [b for b in eager if b.outcome not in (Outcome.ok, Outcome.wrong)]
    if faulted:
        fails.append(f"eager {_problems(faulted)[0]} for {_dtypes(faulted)}")  # FAULTS (crashed when input=empty)
    rejected = _rejections(eager)
    fails += [rejected] if rejected else []
    fails += [grad_bad] if grad_bad else []
    fails += compiled_bad
    text = ("Works: " + "; ".join(works) + "." if works else "Works: no eager call passed.")
    text += (" Does not work: " + "; ".join(fails) + "." if fails else " Nothing probed failed.")
    if not any(b.mode is Mode.compile for b in boxes):
        text += " Compile: not probed."
    acc = _accumulation(boxes)
    return f"{text} {acc}" if acc else text
