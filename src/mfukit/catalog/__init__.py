"""The catalog: facts as data. One TOML file per item under ``data/<kind>/``, each with a ``[source]``.

Sites add their own hardware without touching the package: every directory in the ``MFUKIT_CATALOG``
environment variable (``os.pathsep``-separated) is searched too, laid out like ``data/``; an entry there
with the same name replaces the shipped one.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from mfukit.core.hardware import Accelerator, Link, StorageTier, Switch, System
from mfukit.core.model import ModelSpec
from mfukit.core.scenario import read_document
from mfukit.core.schema import validate_as
from mfukit.errors import InputError, UnknownNameError

Kind = Literal["accelerators", "systems", "fabrics", "storage", "models"]
KINDS: tuple[Kind, ...] = ("accelerators", "systems", "fabrics", "storage", "models")
SINGULAR: dict[Kind, str] = {
    "accelerators": "accelerator",
    "systems": "system",
    "fabrics": "fabric",
    "storage": "storage tier",
    "models": "model",
}
DATA_DIR = Path(__file__).parent / "data"

Entry = Accelerator | System | Link | Switch | StorageTier | ModelSpec
T = TypeVar("T", bound=BaseModel)


def _search_path() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("MFUKIT_CATALOG", "").split(os.pathsep) if p]
    return [DATA_DIR, *extra]


def _parse(kind: Kind, path: Path) -> Entry:
    data = read_document(path)
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise InputError("must match the file name", source=str(path), field="name", value=data["name"])
    source = str(path)
    if kind == "accelerators":
        return validate_as(Accelerator, data, source=source)
    if kind == "systems":
        return validate_as(System, data, source=source)
    if kind == "fabrics":
        if data.get("type") == "switch":
            return validate_as(Switch, data, source=source)
        return validate_as(Link, data, source=source)
    if kind == "storage":
        return validate_as(StorageTier, data, source=source)
    return validate_as(ModelSpec, data, source=source)


@cache
def entries(kind: Kind) -> dict[str, Entry]:
    """Every entry of ``kind`` by name (site directories override shipped ones)."""
    found: dict[str, Entry] = {}
    for root in _search_path():
        directory = root / kind
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found[path.stem] = _parse(kind, path)
    return found


def names(kind: Kind) -> list[str]:
    return sorted(entries(kind))


def folded(name: str) -> str:
    """``name`` with case and punctuation folded away, so that "Llama-2-13B", "llama_2_13b" and
    "llama2-13b" are one key; dots stay, since "gpt3-1.3b" and "gpt3-13b" are different models."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def lookup_keys(kind: Kind) -> dict[str, list[str]]:
    """Every folded name and alias of ``kind`` and the entries it names (one each in a sound catalog)."""
    keys: dict[str, list[str]] = {}
    for name, entry in entries(kind).items():
        for key in {folded(name), *(folded(alias) for alias in getattr(entry, "aliases", ()))}:
            keys.setdefault(key, []).append(name)
    return keys


def canonical(kind: Kind, name: str) -> str | None:
    """The entry of ``kind`` that ``name`` names: itself, or by its folded spelling or an alias."""
    if name in entries(kind):
        return name
    found = lookup_keys(kind).get(folded(name), [])
    return found[0] if len(found) == 1 else None


def get(kind: Kind, name: str, *, field: str | None = None, source: str | None = None) -> Entry:
    """The entry ``name`` of ``kind`` (case, punctuation and aliases folded: :func:`canonical`); an
    UnknownNameError with the closest names otherwise."""
    items = entries(kind)
    found = canonical(kind, name)
    if found is not None:
        return items[found]
    raise UnknownNameError(SINGULAR[kind], name, items, field=field, source=source)


def _typed(kind: Kind, cls: type[T], name: str, field: str | None, source: str | None) -> T:
    entry = get(kind, name, field=field, source=source)
    if not isinstance(entry, cls):
        others = [n for n, e in entries(kind).items() if isinstance(e, cls)]
        raise UnknownNameError(cls.__name__.lower(), name, others, field=field, source=source)
    return entry


def accelerator(name: str, *, field: str | None = None, source: str | None = None) -> Accelerator:
    return _typed("accelerators", Accelerator, name, field, source)


def system(name: str, *, field: str | None = None, source: str | None = None) -> System:
    return _typed("systems", System, name, field, source)


def link(name: str, *, field: str | None = None, source: str | None = None) -> Link:
    return _typed("fabrics", Link, name, field, source)


def switch(name: str, *, field: str | None = None, source: str | None = None) -> Switch:
    return _typed("fabrics", Switch, name, field, source)


def storage(name: str, *, field: str | None = None, source: str | None = None) -> StorageTier:
    return _typed("storage", StorageTier, name, field, source)


def model(name: str, *, field: str | None = None, source: str | None = None) -> ModelSpec:
    return _typed("models", ModelSpec, name, field, source)


def find(name: str) -> tuple[Kind, Entry]:
    """Look ``name`` up in every kind (for ``mfukit catalog show NAME``)."""
    for kind in KINDS:
        found = canonical(kind, name)
        if found is not None:
            return kind, entries(kind)[found]
    everything: dict[str, Any] = {n: None for kind in KINDS for n in entries(kind)}
    raise UnknownNameError("catalog entry", name, everything)
