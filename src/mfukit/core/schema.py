"""Typed input schemas: a strict pydantic base, unit-carrying field types, and validation errors
turned into :class:`~mfukit.errors.InputError` that name the file, field, value and the fix.

Every file mfukit reads (scenario, catalog entry, topology) is validated through :func:`validate_as`.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from mfukit import units
from mfukit.errors import InputError, suggest


class Strict(BaseModel):
    """Base of every input schema: unknown fields are errors, instances are immutable, and a boolean is
    never taken as a number (pydantic's lax mode reads ``num_gpus = true`` as 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and not _accepts_bool(field.annotation):
                raise ValueError(f"{str(value).lower()} is a boolean, not a number")
        return value


def _accepts_bool(annotation: Any) -> bool:
    """Whether a field typed ``annotation`` takes a boolean as it is (bool, Any, or a union with either)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is bool or annotation is Any:
        return True
    if origin is typing.Literal:
        return any(isinstance(arg, bool) for arg in args)
    if origin is Annotated:
        return _accepts_bool(args[0])
    if origin in (Union, types.UnionType):
        return any(_accepts_bool(arg) for arg in args)
    numeric = isinstance(annotation, type) and issubclass(annotation, int | float | str)
    return not numeric and annotation is not type(None)


class _Internal(float):
    """A float that is already in SI units (set by code, not parsed from user text)."""


def _unit_field(parser: Callable[..., float]) -> BeforeValidator:
    def parse(value: object) -> float:
        if isinstance(value, _Internal):
            return float(value)
        try:
            return parser(value)
        except InputError as error:
            detail = f"; expected {error.expected}" if error.expected else ""
            hint = f"; {error.hint}" if error.hint else ""
            raise ValueError(f"{error.message}{detail}{hint}") from None

    return BeforeValidator(parse)


def si(value: float) -> float:
    """Mark a float computed by code as already in SI units, so unit-carrying fields accept it."""
    return _Internal(value)


# Unit-carrying field types: users write "80GiB", code reads bytes.
Bytes = Annotated[float, _unit_field(units.parse_bytes)]
Seconds = Annotated[float, _unit_field(units.parse_duration_s)]
BytesPerSecond = Annotated[float, _unit_field(units.parse_bandwidth_bytes_per_s)]
FlopsPerSecond = Annotated[float, _unit_field(units.parse_flops_per_s)]
Watts = Annotated[float, _unit_field(units.parse_power_w)]
Count = Annotated[float, _unit_field(units.parse_count)]
IntCount = Annotated[int, BeforeValidator(lambda v: units.parse_int_count(v) if isinstance(v, str) else v)]
Fraction = Annotated[float, _unit_field(units.parse_fraction)]
Usd = Annotated[float, _unit_field(units.parse_usd)]
FailureRate = Annotated[float, _unit_field(units.parse_failure_rate_per_s)]
"""Failures per second per unit (GPU, node or job), written as failures per 1,000 unit-days."""
MAX_POSITIVE_INT = 2**31 - 1
"""Bound on a positive whole number (a batch, a sequence length, a parallel degree): far above any a run
uses, low enough that the products over it (tokens per step = sequences x tokens per sequence) stay within
64-bit integers (a global batch of 10^400 sequences overflowed the batch rounding)."""
PositiveInt = Annotated[int, Field(ge=1, le=MAX_POSITIVE_INT)]
MAX_GPUS = 10**8
"""Bound on a count of GPUs or nodes: far above any cluster built (the largest announced hold ~10^5-10^6
GPUs), low enough that every formula over it stays finite (2^63 GPUs overflowed ``ft plan``)."""
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS)]


ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_as(
    model_cls: type[ModelT], data: Mapping[str, Any], *, source: str, prefix: str | None = None
) -> ModelT:
    """Validate ``data`` against ``model_cls``; on failure raise one InputError naming the first bad field."""
    try:
        return model_cls.model_validate(dict(data))
    except ValidationError as error:
        raise input_error_from(error, model_cls, source=source, prefix=prefix) from None


def input_error_from(
    error: ValidationError, model_cls: type[BaseModel], *, source: str, prefix: str | None = None
) -> InputError:
    """The first problem of a pydantic ValidationError as an InputError; the count of others is noted."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    field = ".".join([*([prefix] if prefix else []), *loc]) or None
    more = len(error.errors()) - 1
    also = f" ({more} more problem{'s' if more > 1 else ''} in this file)" if more else ""
    kind = first["type"]
    if kind == "extra_forbidden":
        known = _field_names_at(model_cls, first["loc"][:-1])
        close = suggest(str(first["loc"][-1]), known)
        hint = f"did you mean {', '.join(close)}?" if close else f"known fields: {', '.join(sorted(known))}"
        return InputError(f"unknown field{also}", source=source, field=field, hint=hint)
    if kind == "missing":
        return InputError(f"is required but missing{also}", source=source, field=field)
    message = str(first["msg"]).removeprefix("Value error, ")
    value = first.get("input")
    if isinstance(value, dict | list):
        value = None
    return InputError(f"{message}{also}", source=source, field=field, value=value)


def _field_names_at(model_cls: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names (as written in files) of the sub-model found at ``loc``."""
    current: Any = model_cls
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)),
            None,
        )
        if field is None:
            return []
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _model_in(annotation: Any) -> Any:
    """The BaseModel class inside an annotation such as ``Foo | None`` or ``dict[str, Foo]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType, dict, list, tuple, Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
