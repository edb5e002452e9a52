"""The base model every artifact class derives from: frozen, strict about unknown fields."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from .text import recorded_text

__all__ = ["Message", "Model", "Name", "RankRange", "Text", "printable"]


def printable(value: str, what: str = "name") -> str:
    """A name shown in terminals and pages: control characters (ESC, BEL, newlines ...) are refused."""
    if value.isprintable():
        return value
    bad = next(ch for ch in value if not ch.isprintable())
    raise ValueError(f"{what} {value!r} contains the control character {bad!r}; names must be printable text")


def _text(value: str) -> str:
    """Free text (a reason, a description): line breaks and tabs are fine, other control characters
    (ESC sequences that repaint a terminal, BEL ...) are refused."""
    if value.isprintable():
        return value
    bad = next((ch for ch in value if not ch.isprintable() and ch not in "\n\t"), None)
    if bad is not None:
        raise ValueError(f"text {value[:60]!r} contains the control character {bad!r}; write plain text")
    return value


#: a string shown as a name (ids, patterns, owners): printable characters only
Name = Annotated[str, AfterValidator(printable)]
#: free text: printable characters, line breaks and tabs
Text = Annotated[str, AfterValidator(_text)]
#: text a backend or a child process wrote (error messages, notes quoting them): kept, with control
#: characters and lone surrogates escaped (evidence is recorded, not refused)
Message = Annotated[str, BeforeValidator(recorded_text)]


class Model(BaseModel):
    """Frozen, ``extra="forbid"``: an artifact never silently carries a misspelled field."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class RankRange(Model):
    """An inclusive range of tensor ranks, e.g. ``{min: 2, max: 5}`` for "ranks 2 through 5"."""

    min: int = Field(ge=0, le=64)
    max: int = Field(ge=0, le=64)

    @model_validator(mode="after")
    def _ordered(self) -> RankRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max}); swap them")
        return self

    def __contains__(self, rank: object) -> bool:
        return isinstance(rank, int) and self.min <= rank <= self.max

    def ranks(self) -> range:
        """The ranks the range covers."""
        return range(self.min, self.max + 1)
