"""The space section of the YAML file: one field per knob of the catalogue (knobs/), typed and
documented there; a list is searched, one value is fixed, {multiple_of, min, max} lists a range."""

from __future__ import annotations

import math
import types
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import Field, ValidationInfo, create_model, field_validator, model_validator

from autotune import knobs as catalogue
from autotune.config.study import _Section
from autotune.knobs import KnobValue

MAX_KNOB_VALUES = 1024  # values of one knob; more is a typo or a range without multiple_of


class IntRange(_Section):
    """`{multiple_of: 8, min: 8, max: 128}`: every multiple of `multiple_of` in [min, max]."""

    min: int = Field(ge=1, description="Smallest value.")
    max: int = Field(ge=1, description="Largest value.")
    multiple_of: int = Field(default=1, ge=1, description="Step between values.")

    @model_validator(mode="after")
    def _check_order(self) -> IntRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max}); swap them")
        count = len(self._range())  # a range object: counted without listing it
        if not count:
            raise ValueError(f"no multiple of {self.multiple_of} lies in [{self.min}, {self.max}]")
        if count > MAX_KNOB_VALUES:
            raise ValueError(
                f"{{min: {self.min}, max: {self.max}, multiple_of: {self.multiple_of}}} gives "
                f"{count:,} "
                f"values; at most {MAX_KNOB_VALUES} a knob: raise multiple_of or narrow the range"
            )
        return self

    def _range(self) -> range:
        return range(
            math.ceil(self.min / self.multiple_of) * self.multiple_of,
            self.max + 1,
            self.multiple_of,
        )

    def values(self) -> list[int]:
        return list(self._range())


class _SpaceBase(_Section):
    """The knobs to search. A list is searched; one value is fixed; an absent knob takes its
    default."""

    @field_validator("*", mode="before")
    @classmethod
    def _as_list(cls, value: object, info: ValidationInfo) -> Any:
        """One value is a fixed knob: a one-element list; {multiple_of, min, max} lists a range."""
        assert info.field_name is not None  # a field validator's: always named
        knob = catalogue.BY_NAME[info.field_name]
        if knob.derived and value == "auto":
            return value
        if knob.ranged and isinstance(value, dict):
            return IntRange.model_validate(value).values()
        if isinstance(value, list):
            if not value:
                raise ValueError("empty list; give at least one value")
            if len(value) > MAX_KNOB_VALUES:
                raise ValueError(f"{len(value):,} values; at most {MAX_KNOB_VALUES} a knob")
            return value
        return [value]

    @field_validator("*")
    @classmethod
    def _values(cls, value: list[KnobValue] | str, info: ValidationInfo) -> Any:
        """The knob's own rule for each value; sizes sorted, every list without repeats."""
        assert info.field_name is not None  # a field validator's: always named
        knob = catalogue.BY_NAME[info.field_name]
        if not isinstance(value, list):
            return value
        bad = [msg for v in value if knob.check and (msg := knob.check(v))]
        if bad:
            raise ValueError(bad[0])
        return sorted(set(value)) if knob.sizes else list(dict.fromkeys(value))


def _space_field(knob: catalogue.Knob) -> tuple[Any, Any]:
    listed = types.GenericAlias(list, knob.type)  # list[knob.type]: a type known at run time
    if knob.derived:
        return Union[Literal["auto"], listed], Field(default="auto", description=knob.help)
    return listed, Field(default=[knob.default], description=knob.help)


def _space_model() -> type[_SpaceBase]:
    """One field per knob of the catalogue (knobs.py), typed and documented there."""
    fields: dict[str, Any] = {k.name: _space_field(k) for k in catalogue.CATALOGUE}
    return create_model("SpaceConfig", __base__=_SpaceBase, __module__=__name__, **fields)


if TYPE_CHECKING:
    SpaceConfig = _SpaceBase  # its fields are made at run time, read by name (getattr)
else:
    SpaceConfig = _space_model()
