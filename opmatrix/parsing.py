"""The CLI's argument parser: argparse, with usage errors a newcomer can act on.

A usage error is one line naming what was wrong, with the nearest valid spelling and the help to
read. An option argparse does not know is named before anything else is checked, so a typo is
not reported as the option it was meant to be going missing::

    $ opmatrix probe --backed refaccel
    opmatrix probe: unknown option --backed; did you mean --backend? (see opmatrix probe --help)
    $ opmatrix prob --backend refaccel
    opmatrix: unknown command 'prob'; did you mean 'probe'? (see opmatrix --help)
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["CliParser"]

_INVALID_VERB = re.compile(r"argument VERB: invalid choice: '([^']*)'")


class CliParser(argparse.ArgumentParser):
    """argparse, with a usage error on one line naming the option (and where to read more)."""

    def error(self, message: str) -> NoReturn:
        """Exit 2 with one line; a mistyped command gets the nearest command's name."""
        typo = _INVALID_VERB.search(message)
        if typo is not None:
            message = f"unknown command {typo.group(1)!r}" + _suggest(typo.group(1), self._verbs(), quote=True)
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """As argparse, but a verb's unknown ``--option`` is an error before its required ones are."""
        if args is not None:
            self._refuse_unknown_options(list(args))
        return super().parse_known_args(args, namespace)

    def _refuse_unknown_options(self, args: list[str]) -> None:
        known = [flag for action in self._actions for flag in action.option_strings if flag.startswith("--")]
        for arg in args:
            if arg == "--" or (self._subparsers is not None and not arg.startswith("-")):
                return  # the rest is positional, or the verb's to check (its own parser does)
            if not arg.startswith("--"):
                continue
            flag = arg.partition("=")[0]
            if flag in known or sum(k.startswith(flag) for k in known) == 1:  # argparse takes a unique prefix
                continue
            self.error(f"unknown option {flag}" + _suggest(flag, known, quote=False))

    def _verbs(self) -> list[str]:
        subparsers = self._subparsers
        if subparsers is None:
            return []
        return [name for action in subparsers._group_actions
                for name in getattr(action, "choices", None) or {}]


def _suggest(word: str, choices: list[str], *, quote: bool) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if quote else f"; did you mean {close[0]}?"

