"""The pieces every model of the suite's schema is made of: strict models, one-or-many lists, sizes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from bench.plan.sizes import parse_size


def one_or_many(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


def none_or_many(value: Any) -> Any:
    return None if value is None else one_or_many(value)


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as error:
        raise ValueError(str(error)) from None


Size = Annotated[int, BeforeValidator(_size)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # .inf never ends a hung job
