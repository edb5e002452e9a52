"""Command options: one frozen dataclass per command, every option declared once.

A field carries its type, default and help; the CLI builds its parser from these declarations
and parses into them, the library takes them as they are, and the command line a run records is
written back from them (never read from ``sys.argv``)::

    >>> from dataclasses import dataclass
    >>> from typing import ClassVar
    >>> @dataclass(frozen=True, kw_only=True)
    ... class HelloOptions(Options):
    ...     verb: ClassVar[str] = "hello"
    ...     name: str = option(help="who to greet", positional=True)
    ...     times: int = option(1, help="how often", min=1)
    ...     langs: tuple[str, ...] | None = option(None, help="comma list of languages")
    >>> HelloOptions(name="ada", times=2, langs=["en", "fr"]).command_line()
    'opmatrix hello ada --times 2 --langs en,fr'
    >>> HelloOptions(name="ada", langs=[])
    Traceback (most recent call last):
    ...
    opmatrix.schema.io.UsageError: --langs: empty; name at least one, or leave --langs out

Checks that need no import beyond this (a value of the wrong type, an empty list or string, a
number that is not finite or below its bound, a value outside ``choices``) run when the object is
made, so bad input fails before any work starts, from the CLI and from Python alike. Checks that
need the command's world (is the backend known? does the op exist?) belong to the command.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import shlex
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Literal

from .io import UsageError
from .text import non_utf8

__all__ = ["Kind", "OptionField", "Options", "Spec", "option", "option_fields", "split_list"]

#: how a value is spelled on the command line
Kind = Literal["bool", "int", "float", "str", "list"]
_KINDS: dict[object, Kind] = {bool: "bool", int: "int", float: "float", str: "str"}


@dataclass(frozen=True)
class Spec:
    """How one option is spelled and bounded (the dataclass field holds its type and default)."""

    help: str
    positional: bool = False
    flag: str | None = None  #: default: ``--`` + the field name with dashes
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    bare: str | None = None  #: the value of the flag given without one (``gate --json`` means ``-``)
    repeat: bool = False  #: a list given one item per flag (``--arg a=1 --arg b=2``), not comma-separated
    min: float | None = None  #: inclusive lower bound of a number
    above: float | None = None  #: exclusive lower bound of a number
    empty_ok: bool = False  #: an empty string or list is a value, not a mistake
    recorded: bool = True  #: part of the recorded command line (``--force`` says how to write, not what)
    unit: str | None = None  #: what a number counts, for messages ("seconds")
    if_empty: str | None = None  #: what to do instead of an empty value, for the message


def option(default: Any = MISSING, *, help: str, **spec: Any) -> Any:
    """A dataclass field declared as a command option (no default: the option is required)."""
    return field(default=default, metadata={"opmatrix": Spec(help=help, **spec)})


def split_list(text: str) -> tuple[str, ...]:
    """``a, b,,c`` -> ``("a", "b", "c")``; ``,`` -> ``()`` (which the options then refuse as empty)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class OptionField:
    """One declared option: its field name, spelling, kind and default."""

    name: str
    spec: Spec
    kind: Kind
    default: Any

    @property
    def flag(self) -> str:
        """How the option is named in messages and on the command line."""
        if self.spec.positional:
            return self.spec.metavar or self.name.upper()
        return self.spec.flag or "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is MISSING


def _kind(hint: Any) -> Kind:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    if typing.get_origin(hint) is tuple:
        return "list"
    if hint in _KINDS:
        return _KINDS[hint]
    raise TypeError(f"option type {hint!r} is not one of bool, int, float, str, tuple[str, ...]")


def option_fields(cls: type) -> list[OptionField]:
    """The options ``cls`` declares, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("opmatrix")
        if isinstance(spec, Spec):
            out.append(OptionField(f.name, spec, _kind(hints[f.name]), f.default))
    return out


def _coerce(opt: OptionField, value: Any) -> Any:
    """``value`` as the option's type, or UsageError naming the option."""
    if value is None:
        if opt.required:
            raise UsageError(f"{opt.flag}: required; {opt.spec.help}")
        return None
    if opt.kind == "list" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if opt.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    want = {"bool": bool, "int": int, "float": float, "str": str}.get(opt.kind)
    if want is not None and isinstance(value, want) and (want is bool or not isinstance(value, bool)):
        return value
    shown = {"list": "a list of strings", "int": "an integer", "float": "a number", "str": "a string",
             "bool": "True or False"}[opt.kind]
    raise UsageError(f"{opt.flag}: expected {shown}, got {value!r}")


def _check(opt: OptionField, value: Any) -> None:
    """The checks every option of its kind gets: empty, not finite, out of bounds, not a choice."""
    spec, flag = opt.spec, opt.flag
    if value is None or value is False:
        return
    for item in value if opt.kind == "list" else [value] if opt.kind == "str" else []:
        shown = non_utf8(item)
        if shown is not None:  # bytes the OS handed over undecoded: artifacts are UTF-8
            raise UsageError(f"{flag} '{shown}': not valid UTF-8 (the escapes are the bytes that are not); "
                             "opmatrix writes names and paths into UTF-8 artifacts: use a UTF-8 name")
    if opt.kind in ("list", "str") and not value and not spec.empty_ok:
        hint = f" (choose from {', '.join(spec.choices)})" if spec.choices else ""
        leave = "" if opt.required else f", or leave {flag} out"
        raise UsageError(f"{flag}: empty; {spec.if_empty or f'name at least one{hint}{leave}'}")
    if opt.kind in ("int", "float"):
        unit = f" of {spec.unit}" if spec.unit else ""
        if spec.above is not None and not (math.isfinite(value) and value > spec.above):
            raise UsageError(f"{flag}: must be a finite number{unit} above {spec.above:g}, got {value!r}")
        if spec.min is not None and not (math.isfinite(value) and value >= spec.min):
            raise UsageError(f"{flag}: must be a finite number{unit} of at least {spec.min:g}, got {value!r}"
                             if opt.kind == "float" else f"{flag}: must be at least {spec.min:g}, got {value!r}")
        if not math.isfinite(value):
            raise UsageError(f"{flag}: must be a finite number{unit}, got {value!r}")
    if spec.choices is not None:
        for item in value if opt.kind == "list" else [value]:
            if item not in spec.choices:
                close = difflib.get_close_matches(item, spec.choices, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise UsageError(f"{flag}: unknown value {item!r}{hint} (choose from {', '.join(spec.choices)})")


_O = typing.TypeVar("_O", bound="Options")


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of every command's options: checked when made, written back as a command line."""

    verb: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for opt in option_fields(type(self)):
            value = _coerce(opt, getattr(self, opt.name))
            object.__setattr__(self, opt.name, value)
            _check(opt, value)
        self.check()

    def check(self) -> None:
        """Checks that span fields (a subclass overrides); raise UsageError naming the option."""

    @classmethod
    def from_values(cls: type[_O], values: Mapping[str, Any]) -> _O:
        """The options from parsed values (names the class does not declare are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def command_line(self) -> str:
        """``opmatrix VERB ...`` that reproduces these options (defaults left out)."""
        parts = ["opmatrix", *self.verb.split()]
        for opt in option_fields(type(self)):
            value = getattr(self, opt.name)
            if opt.spec.positional:
                parts += list(value) if opt.kind == "list" else [str(value)]
            elif value is None or value is False or value == opt.default or not opt.spec.recorded:
                continue
            elif value is True or (opt.spec.bare is not None and value == opt.spec.bare):
                parts.append(opt.flag)
            elif opt.kind == "list" and opt.spec.repeat:
                parts += [p for item in value for p in (opt.flag, item)]
            elif opt.kind == "list":
                parts += [opt.flag, ",".join(value)]
            else:
                parts += [opt.flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return shlex.join(parts)
