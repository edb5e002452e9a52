"""Answers to capability queries: the path a cell takes, with the entry that says so.

An :class:`Answer` is precomputed once per probed cell and shared by every query for it, so it
is immutable. When a cell splits into condition groups (``softmax`` is native for ``dim: last``,
composite for ``dim: first``), the answer without argument values is the *worst* group and lists
the better ones as ``alternatives``; :meth:`Answer.given` narrows it with argument values::

    >>> a = m.query("aten.softmax.int", dtype="float32", rank=3)  # needs a probed matrix: not run  # doctest: +SKIP
    >>> a.path, [e.conditions for e in a.alternatives]  # needs a probed matrix: not run  # doctest: +SKIP
    (ExecPath.composite, [{'dim': 'last'}])
    >>> a.given({"dim": -1}, rank=3).path  # needs a probed matrix: not run  # doctest: +SKIP
    ExecPath.native

A cell that was never probed answers ``path == "unknown"`` and ``known == False``: never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from opmatrix.schema import Entry, Evidence, ExecPath, Outcome, describe, features_of, matches, model_to_data

__all__ = ["UNKNOWN", "Answer", "cell_answer", "decide", "severity", "unknown"]

#: the path of a cell that was not probed
UNKNOWN: Literal["unknown"] = "unknown"


# enum ``.rank`` walks the enum each call; the index sorts often enough for that to show
_PATH_RANK = {p: i for i, p in enumerate(ExecPath)}
_OUTCOME_RANK = {o: i for i, o in enumerate(Outcome)}


def severity(entry: Entry) -> tuple[int, int]:
    """How bad a result is: outcome first (``wrong`` outranks any path), then the path."""
    return (_OUTCOME_RANK[entry.outcome], _PATH_RANK[entry.path])


def _worst_first(entry: Entry) -> tuple[object, ...]:
    # worst first; on a tie the unconditional group, then conditions by name (deterministic)
    return (-_OUTCOME_RANK[entry.outcome], -_PATH_RANK[entry.path], len(entry.conditions),
            sorted(entry.conditions.items()))


@dataclass(frozen=True, slots=True)
class Answer:
    """How one cell runs: ``path`` (or ``"unknown"``), ``outcome``, the deciding ``entry``."""

    path: ExecPath | Literal["unknown"]
    outcome: Outcome | None
    entry: Entry | None
    evidence: Evidence | None
    #: condition groups of the same cell with a better result than this answer's
    alternatives: tuple[Entry, ...] = ()
    known: bool = True
    #: why the answer is unknown, or how it was chosen among condition groups
    reason: str = ""
    #: every condition group that covers the cell (what :meth:`given` chooses from)
    options: tuple[Entry, ...] = field(default=(), repr=False)
    #: argument names the options' conditions use (sorted); empty: arguments cannot matter
    condition_names: tuple[str, ...] = field(default=(), repr=False)
    #: feature labels of the condition names -> the answer for them (filled as queries come)
    _given: dict[tuple[str | None, ...], Answer] = field(default_factory=dict, repr=False, compare=False)

    @property
    def conditions(self) -> dict[str, str]:
        """Argument conditions of the deciding entry (empty: holds for any arguments)."""
        return dict(self.entry.conditions) if self.entry is not None else {}

    @property
    def supported(self) -> bool:
        """Runs on the device and matched the reference (native, composite or decomposed, ok)."""
        return (
            self.known
            and self.outcome is Outcome.ok
            and isinstance(self.path, ExecPath)
            and self.path <= ExecPath.decomposed
        )

    def at_most(self, worst_path: ExecPath) -> bool:
        """Known, outcome ok, and a path no worse than ``worst_path``."""
        return (
            self.known and self.outcome is Outcome.ok and isinstance(self.path, ExecPath) and self.path <= worst_path
        )

    def given(self, args: Mapping[str, Any], rank: int | None) -> Answer:
        """This cell's answer for the argument values ``args`` (by schema name, e.g. ``dim``).

        Conditions are evaluated as :func:`opmatrix.schema.conditions.matches` does: groups whose
        conditions hold decide; if none holds but some cannot be told (an argument is missing),
        those decide; if every group's conditions fail, the cell is ``unknown`` for these values.
        """
        names = self.condition_names
        if not names or not args:
            return self
        # only the feature labels of the condition names matter: cache the answer per labels
        relevant = {n: args[n] for n in names if n in args}
        feats = features_of(relevant, rank)
        key = tuple(feats.get(n) for n in names)
        answer = self._given.get(key)
        if answer is None:
            answer = self._given[key] = self._choose(relevant, rank)
        return answer

    def _choose(self, args: Mapping[str, Any], rank: int | None) -> Answer:
        verdicts = [(entry, matches(entry.conditions, args, rank)) for entry in self.options]
        hits = [entry for entry, ok in verdicts if ok is True]
        if hits:
            return decide(hits, self.evidence, all_options=self.options, how="matched the arguments")
        open_ = [entry for entry, ok in verdicts if ok is None]
        if open_:
            return decide(open_, self.evidence, all_options=self.options, how="arguments did not decide")
        shown = {n: args[n] for n in self.condition_names if n in args}
        probed = "; ".join(describe(e.conditions) for e in self.options)
        return unknown(f"no probed argument condition matches {shown} (probed: {probed})", self.evidence,
                       options=self.options)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (the ``opmatrix query --json`` object, without the cell key)."""
        entry = self.entry
        out: dict[str, Any] = {
            "path": str(self.path),
            "outcome": None if self.outcome is None else self.outcome.value,
            "known": self.known,
            "conditions": self.conditions,
        }
        if entry is not None:
            out["mixed"] = entry.mixed
            out["flaky"] = entry.flaky
            out["samples"] = {
                "probed": entry.samples.probed,
                "passed": entry.samples.passed,
                "by_path": {k.value: v for k, v in entry.samples.by_path.items()},
            }
            out["entry"] = model_to_data(entry)
        out["alternatives"] = [
            {"conditions": dict(e.conditions), "path": e.path.value, "outcome": e.outcome.value}
            for e in self.alternatives
        ]
        if self.reason:
            out["reason"] = self.reason
        return out

    def summary(self) -> str:
        """One line for people, e.g. ``composite (ok), 12/12 samples; better when dim=last: native``."""
        if not self.known:
            return f"unknown: {self.reason}"
        assert self.entry is not None and self.outcome is not None
        text = path_words(self.path, self.outcome)
        if self.entry.conditions:
            text += f" when {describe(self.entry.conditions)}"
        s = self.entry.samples
        text += f", {s.passed}/{s.probed} samples passed"
        if s.by_path:
            text += " (" + ", ".join(f"{k.value} {v}" for k, v in s.by_path.items()) + ")"
        if self.entry.components:
            text += f", runs as {', '.join(self.entry.components)}"
        if self.entry.fallback.ops:
            text += f", host fallback: {', '.join(self.entry.fallback.ops)}"
        for alt in self.alternatives:
            text += f"; {path_words(alt.path, alt.outcome)} when {describe(alt.conditions)}"
        for worse in (e for e in self.options if severity(e) > severity(self.entry)):
            # a group only a call with other arguments is in (a contract without conditions counts it)
            text += f"; {path_words(worse.path, worse.outcome)} only when {describe(worse.conditions)}"
        return text


def path_words(path: ExecPath | str, outcome: Outcome) -> str:
    """``composite (ok)``; a clean refusal reads ``rejected (clean rejection)``, never a bare "ok"
    beside it (the outcome of a refusal that left the device usable is not a success)."""
    name = path.value if isinstance(path, ExecPath) else path
    if name == ExecPath.rejected.value and outcome is Outcome.ok:
        return f"{name} (clean rejection)"
    return f"{name} ({outcome.value})"


def unknown(reason: str, evidence: Evidence | None, *, options: Sequence[Entry] = ()) -> Answer:
    """The answer for a cell that was not probed (or not for these argument values)."""
    return Answer(
        path=UNKNOWN, outcome=None, entry=None, evidence=evidence, known=False, reason=reason,
        options=tuple(options), condition_names=_names(options),
    )


def _names(options: Sequence[Entry]) -> tuple[str, ...]:
    return tuple(sorted({name for e in options for name in e.conditions}))


def cell_answer(options: Sequence[Entry], evidence: Evidence | None) -> Answer:
    """The answer for a cell when no argument values are given.

    Groups whose conditions the *absence* of arguments already rules out (``dtype: float64``
    when no ``dtype`` is passed: see ``DEFAULT_LABELS`` in :mod:`opmatrix.schema.conditions`) do
    not take part; the worst remaining group answers, the better ones are alternatives.
    """
    default = [e for e in options if matches(e.conditions, {}, None) is not False]
    if not default:
        probed = "; ".join(describe(e.conditions) for e in options)
        return unknown(f"probed only for argument values a default call does not have ({probed}); "
                       "pass argument values", evidence, options=options)
    return decide(default, evidence, all_options=options)


def decide(
    entries: Sequence[Entry],
    evidence: Evidence | None,
    *,
    all_options: Sequence[Entry] | None = None,
    how: str = "",
) -> Answer:
    """The answer among condition groups ``entries``: the worst, listing the better ones."""
    ranked = sorted(entries, key=_worst_first)
    worst = ranked[0]
    options = tuple(sorted(all_options if all_options is not None else entries, key=_worst_first))
    better = tuple(
        sorted((e for e in options if severity(e) < severity(worst)), key=lambda e: (severity(e), _worst_first(e)))
    )
    reason = ""
    if len(entries) > 1:
        reason = f"worst of {len(entries)} condition groups"
        reason += f" ({how})" if how else "; pass argument values to narrow"
        left = [e for e in options if all(e is not x for x in entries)]
        if left:  # groups a call with these arguments cannot be in: said, as a contract without conditions counts them
            reason += "; not counted here: " + "; ".join(f"{describe(e.conditions)} {e.path.value} ({e.outcome.value})"
                                                         for e in left)
    elif len(options) > 1:
        others = "; ".join(describe(e.conditions) for e in options if e is not worst)
        reason = f"{how or 'the only group that holds without argument values'} (other groups: {others})"
    return Answer(
        path=worst.path,
        outcome=worst.outcome,
        entry=worst,
        evidence=evidence,
        alternatives=better,
        reason=reason,
        options=options,
        condition_names=_names(options),
    )
