"""Flags that travel together: a block of click options the command receives as one typed value."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Decorator(Protocol):
    """A decorator that keeps the type of what it decorates (a click command's function)."""

    def __call__(self, function: F, /) -> F: ...


def option_group(target: str, build: Callable[..., object], *options: Callable[[Any], Any]) -> Decorator:
    """Add ``options`` (click.option decorators, in help order); the command receives them as the one
    keyword ``target = build(**their values)``. The options' names are ``build``'s parameters."""
    names = tuple(inspect.signature(build).parameters)

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            return function(*args, **{target: build(**values)}, **kwargs)

        command: Any = wrapper
        for option in reversed(options):
            command = option(command)
        return command  # type: ignore[no-any-return]

    return decorate
