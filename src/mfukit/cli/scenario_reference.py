"""The scenario file's reference (``docs/scenario.md``) and a commented starter file (``mfukit init``), both
generated from the pydantic schema (:class:`~mfukit.core.scenario.Scenario` and the models it holds), so a
field added to the schema is documented and offered without touching this module.

``make docs`` runs ``python -m mfukit.cli.scenario_reference > docs/scenario.md``; a test fails when the
file is stale. Each field's meaning is its ``Field(description=...)``; :data:`MEANINGS` covers the fields
whose schema has none yet (a test checks that every field has one or the other).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from mfukit.core import schema
from mfukit.core.model import ModelSpec
from mfukit.core.scenario import Interval, Scenario

# the unit-carrying field types (core/schema.py): (type, how the value carries its unit)
UNIT_TYPES: list[tuple[Any, str, str]] = [
    (schema.Bytes, "size", 'in the value: "80GiB", "1.5TB"'),
    (schema.Seconds, "duration", 'in the value: "30min", "14d", "5s"'),
    (schema.BytesPerSecond, "rate", 'in the value: "400Gbps" (bits), "50GB/s" (bytes)'),
    (schema.FlopsPerSecond, "compute rate", 'in the value: "989 TFLOPS"'),
    (schema.Watts, "power", 'in the value: "700W", "1.2kW"'),
    (schema.Count, "count", 'plain or SI suffix: 2048, "4M", "1.4T"'),
    (schema.Fraction, "fraction", '0..1 or percent: 0.45, "45%"'),
    (schema.Usd, "money", "US dollars"),
    (Interval, "interval", 'in the value: a duration ("30min") or optimizer steps ("500steps")'),
]
SECTION_MEANINGS = {
    "training": "the workload: tokens, sequence, batch, precision, framework, deadline",
    "cluster": "the machines: node preset or GPU, how many, storage, failures, power and price",
    "parallelism": "the parallel layout; omit the table (or a knob) to let `plan` and `size` search it",
    "ft": "fault tolerance (`ft plan`, `ft simulate`, `train`): failures, checkpoints, restart",
}
# [model]: the two ways to name a model (they are not ModelSpec fields)
MODEL_KEYS = {
    "preset": "a catalog model (`mfukit catalog list models`; HF hub ids and usual spellings work), or the "
    "path of an HF config.json",
    "hf_config": "path of a Hugging Face config.json (relative to the scenario file)",
}
# Meanings of the model fields (HF config names, core.model) whose schema has no description, by dotted key.
MEANINGS: dict[str, str] = {
    "model.num_hidden_layers": "transformer layers",
    "model.hidden_size": "model width",
    "model.num_attention_heads": "attention (query) heads",
    "model.num_key_value_heads": "key/value heads (GQA); omitted: as many as the query heads",
    "model.head_dim": "width of one head; omitted: hidden_size / num_attention_heads",
    "model.vocab_size": "vocabulary size",
    "model.mlp": "MLP kind: gelu (two matrices) or swiglu (three)",
    "model.tie_word_embeddings": "the output projection shares the embedding's weights",
    "model.max_position_embeddings": "the longest sequence the model is trained for",
    "model.position_embedding": "rope, learned absolute, or alibi",
    "model.norm": "rmsnorm or layernorm",
    "model.attention_bias": "biases on the attention projections",
    "model.qkv_bias": "biases on the query, key and value projections only",
    "model.mlp_bias": "biases on the MLP projections",
    "model.moe.num_shared_experts": "shared experts every token goes through",
    "model.mla.q_lora_rank": "rank of the query compression; omitted: no query compression",
    "model.mla.kv_lora_rank": "rank of the joint key/value compression",
    "model.mla.qk_nope_head_dim": "per-head query/key width without RoPE",
    "model.mla.qk_rope_head_dim": "per-head query/key width with RoPE",
    "model.mla.v_head_dim": "per-head value width",
}
SKIPPED = {"model.name", "model.display_name", "model.aliases", "model.source"}  # catalog bookkeeping


@dataclass(frozen=True)
class FieldDoc:
    key: str  # dotted, as written in the file ("training.deadline")
    type: str
    unit: str
    default: str
    meaning: str
    choices: tuple[str, ...] = ()
    """every value the field takes, when they are few: a ``Literal``'s, or a small bounded integer's"""
    boolean: bool = False

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]


def _model_class(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _unit_of(annotation: Any, field: FieldInfo) -> tuple[str, str] | None:
    """(type, unit) of a unit-carrying field, found by its validator; None for other fields."""
    validators = list(field.metadata)
    for part in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(part) is typing.Annotated:
            validators.extend(typing.get_args(part)[1:])
    for kind, type_name, unit in UNIT_TYPES:
        if any(validator in typing.get_args(kind)[1:] for validator in validators):
            return type_name, unit
    return None


def _type_text(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return " | ".join(
            f'"{value}"' if isinstance(value, str) else str(value) for value in typing.get_args(annotation)
        )
    if origin in (Union, types.UnionType):
        parts = [_type_text(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        return " | ".join(parts)
    if origin is typing.Annotated:
        return _type_text(typing.get_args(annotation)[0])
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"table of {_type_text(key)} -> {_type_text(value)}"
    if isinstance(annotation, type):
        return {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _default_text(field: FieldInfo, prefix: str) -> str:
    if field.default_factory is not None:
        return "empty"
    if field.default is PydanticUndefined:
        return "the preset's (inline: required)" if prefix == "model" else "required"
    if field.default is None:
        return "none"
    value = field.default
    if isinstance(value, bool):
        return "true" if value else "false"
    return (
        f'"{value}"' if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    )


def _fields(model: type[BaseModel], prefix: str) -> Iterator[FieldDoc]:
    for name, field in model.model_fields.items():
        key = f"{prefix}.{field.alias or name}"
        if key in SKIPPED or _model_class(field.annotation) is not None:
            continue
        found = _unit_of(field.annotation, field)
        type_text, unit = found if found else (_type_text(field.annotation), "")
        if field.metadata:
            bounds = [f"{op} {getattr(m, attr)}" for m in field.metadata for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if hasattr(m, attr)]  # fmt: skip
            if bounds:
                type_text += f" ({', '.join(bounds)})"
        meaning = field.description or MEANINGS.get(key, "")
        boolean = _type_text(field.annotation) == "boolean"
        yield FieldDoc(key, type_text, unit, _default_text(field, prefix), meaning, _choices(field), boolean)


MAX_CHOICES = 8


def _choices(field: FieldInfo) -> tuple[str, ...]:
    """The values of a ``Literal`` field, or of an integer field bounded on both sides to a few values."""
    for part in (field.annotation, *typing.get_args(field.annotation)):
        if typing.get_origin(part) is Literal:
            return tuple(str(value) for value in typing.get_args(part))
    low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    if field.annotation is int and low is not None and high is not None and high - low < MAX_CHOICES:
        return tuple(str(value) for value in range(low, high + 1))
    return ()


def sections() -> list[tuple[str, str, list[FieldDoc]]]:
    """(table name, what it is, its fields) for every table of the scenario file, in file order."""
    found: list[tuple[str, str, list[FieldDoc]]] = []
    model_keys = [
        FieldDoc(f"model.{key}", "string", "", "none", meaning) for key, meaning in MODEL_KEYS.items()
    ]
    found.append(("model", "the model: a preset, an HF config, or inline HF-style fields (they override the "
                  "preset's)", model_keys + list(_fields(ModelSpec, "model"))))  # fmt: skip
    for name, field in ModelSpec.model_fields.items():
        nested = _model_class(field.annotation)
        if nested is not None and f"model.{name}" not in SKIPPED:
            found.append((f"model.{name}", (nested.__doc__ or "").strip().split("\n")[0], list(_fields(nested, f"model.{name}"))))  # fmt: skip
    for name, field in Scenario.model_fields.items():
        section = _model_class(field.annotation)
        if section is None:
            continue
        doc = (
            field.description or SECTION_MEANINGS.get(name) or (section.__doc__ or "").strip().split("\n")[0]
        )
        found.append((name, doc, list(_fields(section, name))))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "—"


def reference() -> str:
    """``docs/scenario.md``: every table and field of the scenario file, with type, unit, default, meaning."""
    lines = [
        "# Scenario file reference",
        "",
        "Generated from the schema (`src/mfukit/core/scenario.py` and the models it holds) by `make docs`; do not "
        "edit by hand. `mfukit init` writes a commented starter file with the same fields.",
        "",
        "One TOML (or YAML) file is the input of `size`, `estimate`, `plan`, `ft` and `train`. Every table is "
        "optional except `[model]`; a command-line flag overrides the field it names. Quantities carry their "
        'unit ("30min", "80GiB", "400Gbps"); a bare number is an error where the unit would be ambiguous. '
        "Layout knobs follow one rule, for flags and file alike: a knob that is given is fixed, one that is "
        "left out is searched by `plan` and `size`.",
        "",
    ]
    for name, doc, fields in sections():
        lines += [
            f"## `[{name}]`",
            "",
            doc,
            "",
            "| key | type | unit | default | meaning |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{f.name}` | {_cell(f.type)} | {_cell(f.unit)} | {_cell(f.default)} | {_cell(f.meaning)} |"
            for f in fields
        ]
        lines.append("")
    return "\n".join(lines)


def starter(model: str | None, gpu: str | None) -> str:
    """A commented scenario file: ``model`` and ``gpu`` set (when given), every other field commented out at
    its default with its meaning, so that uncommenting a line is the only edit a user needs."""
    given = {"model.preset": model, "cluster.gpu": gpu}
    lines = [
        "# mfukit scenario (written by `mfukit init`). Every field is documented in docs/scenario.md.",
        "# Uncomment a line to set it; a layout knob left commented out is searched by `plan` and `size`.",
        "",
    ]
    for name, doc, fields in sections():
        # a table with nothing set stays commented out: an empty [parallelism] would fix the layout, and an
        # empty [model.moe] would lack its required fields
        header = f"[{name}]" if any(given.get(f.key) for f in fields) else f"# [{name}]"
        lines += [header, f"# {doc}"] if doc else [header]
        for field in fields:
            value = given.get(field.key)
            note = f"  # {field.meaning}" if field.meaning else ""
            unit = f" [{field.unit}]" if field.unit else ""
            if value is not None:
                lines.append(f'{field.name} = "{value}"{note}')
            else:
                literal = field.default in ("true", "false") or field.default[0] in '"-0123456789'
                shown = field.default if literal else "..."
                lines.append(f"# {field.name} = {shown}{unit}{note}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference(), end="")
