"""The base model every artifact class derives from: frozen, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Model", "RankRange"]


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
