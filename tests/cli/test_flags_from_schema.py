"""Scenario flags are generated from the schema: each flag's help is its field's meaning, its choices the
field's ``Literal`` values, and a switch is a boolean field, on every command that takes it."""

from __future__ import annotations

import typing

import click
import pytest
from pydantic.fields import FieldInfo

from mfukit.cli.common import ALIASED, FLAG_FIELDS, SCENARIO_FLAGS, ScenarioOption
from mfukit.cli.main import cli
from mfukit.cli.scenario_reference import sections
from mfukit.core.scenario import Scenario, Stack

DOCS = {doc.key: doc for _, _, fields in sections() for doc in fields}


def _options(command: click.Command, context: click.Context) -> list[click.Option]:
    if isinstance(command, click.Group):
        found = []
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None:
                found += _options(sub, click.Context(sub, parent=context, info_name=name))
        return found
    return [param for param in command.params if isinstance(param, click.Option)]


@pytest.mark.parametrize("name", sorted(SCENARIO_FLAGS))
def test_each_flag_says_what_its_field_means(name: str) -> None:
    flag = SCENARIO_FLAGS[name]
    doc = DOCS[flag.field]
    assert doc.meaning and doc.meaning[1:] in flag.help, f"{flag.option}: help is not the schema's meaning"
    assert flag.boolean == (doc.type == "boolean")
    if flag.field not in ALIASED:
        assert flag.choices == doc.choices


def test_choices_are_the_literals_of_the_schema() -> None:
    precision = typing.get_args(
        Scenario.model_fields["training"].annotation.model_fields["precision"].annotation
    )  # type: ignore[union-attr]
    assert SCENARIO_FLAGS["precision"].choices == precision
    assert SCENARIO_FLAGS["zero"].choices == ("0", "1", "2", "3")  # the stage bounds 0..3
    assert SCENARIO_FLAGS["framework"].choices == ()  # aliases (megatron) are folded by the schema
    assert all(stack in SCENARIO_FLAGS["framework"].help for stack in typing.get_args(Stack))


def test_every_command_offers_the_generated_flag() -> None:
    by_option = {flag.option: flag for flag in SCENARIO_FLAGS.values()}
    checked = 0
    for option in _options(cli, click.Context(cli, info_name="mfukit")):
        if not isinstance(option, ScenarioOption):
            continue
        flag = by_option[option.opts[0]]
        checked += 1
        assert option.help == flag.help
        if isinstance(option.type, click.Choice):
            assert tuple(option.type.choices) == flag.choices
        else:
            assert not flag.choices
    assert checked > len(FLAG_FIELDS)  # most flags are on several commands


def _field(dotted: str) -> FieldInfo:
    section, _, name = dotted.partition(".")
    annotation = Scenario.model_fields[section].annotation
    model = next(arg for arg in (annotation, *typing.get_args(annotation)) if isinstance(arg, type))
    return next(f for key, f in model.model_fields.items() if name in (key, f.alias))


@pytest.mark.parametrize(
    "name", sorted(n for n, f in SCENARIO_FLAGS.items() if not f.field.startswith("model."))
)
def test_each_flag_help_is_its_field_description(name: str) -> None:
    flag = SCENARIO_FLAGS[name]
    description = _field(flag.field).description
    assert description, f"{flag.field} has no Field(description=...)"
    assert description[1:] in flag.help
