"""How a command ended, as its process exit status: one name per meaning, shared by every verb.

    >>> from opmatrix.schema import ExitCode
    >>> ExitCode.BLOCKED is ExitCode.FAILED, int(ExitCode.USAGE)
    (True, 2)
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode"]


class ExitCode(IntEnum):
    """The exit status of an ``opmatrix`` command (and of its library call's result)."""

    #: the command did what was asked and found nothing against the input
    OK = 0
    #: a verdict against the input: the gate blocked, doctor failed, a probe aborted or faulted
    FAILED = 1
    #: the same status, as the gate names it
    BLOCKED = 1
    #: invalid input or usage: the message names what and where
    USAGE = 2
    #: interrupted (Ctrl-C, SIGTERM); a probe continues with ``--resume``
    INTERRUPTED = 130
