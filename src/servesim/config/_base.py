"""The strict base of every scenario part: unknown keys are errors, values are frozen, a
number is not given as true/false (YAML's ``yes``/``no``/``on``/``off`` are booleans, which
pydantic would take as 1 and 0), and a float is finite unless its field says otherwise
(``allow_inf_nan=True``: a benchmark's request rate and burstiness, where inf means "all at
once" and "constant spacing")."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


def _takes_number_not_bool(annotation: Any) -> bool:
    """Whether a field of this type takes an int or float but no bool."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(a in (int, float) for a in args)
    return False


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, data: Any) -> Any:
        """A boolean given for a number field is an error (``bool_for_number``; the message
        formatter appends the field to the location)."""
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and field is not None and _takes_number_not_bool(field.annotation):
                    raise PydanticCustomError(
                        "bool_for_number",
                        "Input should be a number, not a boolean (YAML reads yes/no/on/off as true/false)",
                        {"field": name, "value": value},
                    )
        return data
