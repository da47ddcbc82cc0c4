"""docs/scenario.md and `mfukit init` come from the schema: every field documented, the file current, and
the starter file loads and runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel

from mfukit.cli.scenario_reference import reference, sections
from mfukit.core.model import ModelSpec
from mfukit.core.scenario import Scenario, load_scenario

DOC = Path(__file__).parents[2] / "docs" / "scenario.md"


def test_scenario_reference_is_current() -> None:
    """docs/scenario.md is generated from the schema: regenerate with `make docs`."""
    assert DOC.read_text() == reference(), "docs/scenario.md is stale: run `make docs`"


def _schema_keys(model: type[BaseModel], prefix: str) -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        nested = next(
            (a for a in (field.annotation, *getattr(field.annotation, "__args__", ())) if isinstance(a, type)
             and issubclass(a, BaseModel)),
            None,
        )  # fmt: skip
        key = f"{prefix}.{field.alias or name}"
        keys |= _schema_keys(nested, key) if nested is not None else {key}
    return keys


def test_every_field_is_documented_with_a_meaning() -> None:
    documented = {f.key: f for _, _, fields in sections() for f in fields}
    bookkeeping = ("model.name", "model.display_name", "model.aliases", "model.source")
    expected = {key for key in _schema_keys(ModelSpec, "model") if not key.startswith(bookkeeping)}
    for name, field in Scenario.model_fields.items():
        if name != "model":
            expected |= _schema_keys(
                field.annotation.__args__[0] if name == "parallelism" else field.annotation, name
            )  # type: ignore[union-attr]
    assert expected <= set(documented)
    assert not [key for key, f in documented.items() if not f.meaning], "give the field a description"
    deadline = documented["training.deadline"]
    assert deadline.type == "duration" and "14d" in deadline.unit and deadline.default == "none"
    assert documented["training.seq_len"].default == "2048"
    assert documented["parallelism.recompute"].type == '"none" | "selective" | "full"'


def test_init_writes_a_commented_file_that_loads(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.toml"
    run = mfukit("init", str(path), "--model", "meta-llama/Llama-2-13b-hf", "--gpu", "a100-80gb-sxm")
    assert run.exit_code == 0, run.stderr
    text = path.read_text()
    scenario = load_scenario(path)
    assert scenario.model == {"preset": "llama2-13b"} and scenario.cluster.gpu == "a100-80gb-sxm"
    assert scenario.parallelism is None  # left to the planner
    for _, _, fields in sections():
        for field in fields:
            assert f"{field.name} = " in text, field.key
    # uncommenting a default line gives a valid file
    uncommented = text.replace("# seq_len = 2048", "seq_len = 2048").replace(
        "# [parallelism]", "[parallelism]"
    )
    uncommented = uncommented.replace("# tp = 1", "tp = 2")
    assert tomllib.loads(uncommented)["parallelism"] == {"tp": 2}
    again = mfukit("init", str(path))
    assert again.exit_code == 2 and "--force" in again.stderr
    runs = mfukit(
        "estimate", str(path), "--gpus", "8", "--global-batch-size", "64", "--tp", "8", "--format", "json"
    )
    assert runs.exit_code == 0, runs.stderr
