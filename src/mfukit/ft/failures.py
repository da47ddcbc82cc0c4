"""Failure models: per-component interruption rates (per GPU, per node or per job) combined for one job.

A synchronous training job is a series system: any component's failure interrupts the whole job
("a single GPU failure may require a restart of the entire job", Llama 3 §3.3.4), so rates add:
lambda_job = sum_i n_i * lambda_i and MTBF = 1 / lambda_job (Kokolis et al., HPCA 2025: MTTF = 1 / (N_nodes r_f)).

Presets are data files in ``ft/data/failure_models/`` with their source: published interruption counts
over a known exposure (Llama 3, Table 5) or published rates per 1,000 node-days (Meta RSC-1/RSC-2).
Rates count job *interruptions*, not RMAs: a vendor AFR of ~1 %/GPU-year is about 10x lower than the
GPU-attributed interruption rate Llama 3 observed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from mfukit import units
from mfukit.core.hardware import Source
from mfukit.core.scenario import FtSection, read_document
from mfukit.core.schema import FailureRate, PositiveInt, Seconds, Strict, validate_as
from mfukit.errors import InputError, UnknownNameError

Per = Literal["gpu", "node", "job"]
PRESETS_DIR = Path(__file__).parent / "data" / "failure_models"


class Observation(Strict):
    """The exposure behind published counts: how many GPUs, in nodes of how many, for how long."""

    num_gpus: PositiveInt
    gpus_per_node: PositiveInt
    duration_s: Seconds = Field(alias="duration")


class CategorySpec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    component: str
    group: str
    per: Per
    count: int | None = Field(default=None, ge=0, description="interruptions seen over the observation")
    rate_per_unit_s: FailureRate | None = Field(default=None, ge=0, alias="rate_per_1000_unit_days")
    needs_replacement: bool = Field(description="the failed node must be swapped before the job resumes")
    planned: bool = Field(default=False, description="a graceful stop (maintenance): no lost work")

    @model_validator(mode="after")
    def _count_or_rate(self) -> CategorySpec:
        if (self.count is None) == (self.rate_per_unit_s is None):
            raise ValueError("give exactly one of count and rate_per_1000_unit_days")
        return self


class FailureModelSpec(Strict):
    name: str
    display_name: str
    notes: str = ""
    observation: Observation | None = None
    categories: list[CategorySpec] = Field(min_length=1)
    source: Source

    @model_validator(mode="after")
    def _consistent(self) -> FailureModelSpec:
        names = [c.name for c in self.categories]
        if len(set(names)) != len(names):
            raise ValueError("category names must be unique")
        if self.observation is None and any(c.count is not None for c in self.categories):
            raise ValueError("counts need an [observation] (GPUs, GPUs per node, duration)")
        return self


@dataclass(frozen=True)
class Category:
    """One failure category with its rate per unit (GPU, node or job) per second."""

    name: str
    component: str
    group: str
    per: Per
    rate_per_unit_s: float
    needs_replacement: bool
    planned: bool
    overridden: bool = False

    @property
    def rate_per_1000_unit_days(self) -> float:
        """The rate in the unit it is written and shown in."""
        return units.per_1000_unit_days(self.rate_per_unit_s)

    def units(self, num_gpus: int, num_nodes: int) -> int:
        return {"gpu": num_gpus, "node": num_nodes, "job": 1}[self.per]


@dataclass(frozen=True)
class JobFailures:
    """The failure process of one job of ``num_gpus`` GPUs on ``num_nodes`` nodes."""

    model: str
    display_name: str
    categories: tuple[Category, ...]
    num_gpus: int
    num_nodes: int
    source: Source | None

    def rate_per_s(self, category: Category) -> float:
        return category.rate_per_unit_s * category.units(self.num_gpus, self.num_nodes)

    @property
    def unplanned(self) -> tuple[Category, ...]:
        return tuple(c for c in self.categories if not c.planned)

    @property
    def failure_rate_per_s(self) -> float:
        """Unplanned interruptions per second of the whole job (rates add in a series system)."""
        return sum(self.rate_per_s(c) for c in self.unplanned)

    @property
    def planned_rate_per_s(self) -> float:
        return sum(self.rate_per_s(c) for c in self.categories if c.planned)

    @property
    def mtbf_s(self) -> float:
        rate = self.failure_rate_per_s
        return 1.0 / rate if rate > 0 else float("inf")

    @property
    def replacement_rate_per_s(self) -> float:
        return sum(self.rate_per_s(c) for c in self.unplanned if c.needs_replacement)


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.toml"))


def load_failure_model(name: str, *, source: str, field: str = "ft.failure_model") -> FailureModelSpec:
    """A shipped preset by name, or a TOML/YAML file of the same schema by path."""
    path = PRESETS_DIR / f"{name}.toml"
    if not path.is_file():
        candidate = Path(name)
        if candidate.suffix.lower() not in {".toml", ".yaml", ".yml"}:
            raise UnknownNameError("failure model", name, preset_names(), source=source, field=field)
        path = candidate
    data = read_document(path)
    data.setdefault("name", path.stem)
    return validate_as(FailureModelSpec, data, source=str(path))


def _base_rate_per_unit_s(spec: FailureModelSpec, category: CategorySpec) -> float:
    if category.rate_per_unit_s is not None:
        return category.rate_per_unit_s
    observation = spec.observation
    if observation is None or category.count is None:  # excluded by FailureModelSpec's validator
        raise InputError("counts need an observation", source=spec.name, field="observation")
    exposed = {
        "gpu": observation.num_gpus,
        "node": observation.num_gpus / observation.gpus_per_node,
        "job": 1.0,
    }[category.per]
    return category.count / (exposed * observation.duration_s)


def job_failures(
    spec: FailureModelSpec,
    *,
    num_gpus: int,
    num_nodes: int,
    overrides: dict[str, float] | None = None,
    node_rate_per_s: float | None = None,
    source: str = "command line",
) -> JobFailures:
    """The failure process of a job: the preset's categories, with ``overrides`` (``[ft.rates]``: failures
    per second per unit, by category name) applied. ``node_rate_per_s`` (``[cluster]
    failure_rate_per_1000_node_days``, per second per node) replaces the preset's unplanned categories with
    one per-node rate."""
    overrides = dict(overrides or {})
    known = {c.name for c in spec.categories}
    for name in overrides:
        if name not in known:
            raise UnknownNameError(
                f"failure category of {spec.name}", name, known, source=source, field=f"ft.rates.{name}"
            )
    categories = [
        Category(
            name=c.name,
            component=c.component,
            group=c.group,
            per=c.per,
            rate_per_unit_s=overrides[c.name] if c.name in overrides else _base_rate_per_unit_s(spec, c),
            needs_replacement=c.needs_replacement,
            planned=c.planned,
            overridden=c.name in overrides,
        )
        for c in spec.categories
    ]
    if node_rate_per_s is not None:
        categories = [c for c in categories if c.planned]
        categories.insert(
            0,
            Category(
                name="node",
                component="all job-interrupting node failures ([cluster] failure_rate_per_1000_node_days)",
                group="Node",
                per="node",
                rate_per_unit_s=node_rate_per_s,
                needs_replacement=True,
                planned=False,
                overridden=True,
            ),
        )
    return JobFailures(
        model=spec.name,
        display_name=spec.display_name,
        categories=tuple(categories),
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        source=spec.source,
    )


def scenario_failures(
    ft: FtSection,
    *,
    node_rate_per_s: float | None,
    num_gpus: int,
    num_nodes: int,
    source: str,
) -> tuple[JobFailures, str]:
    """The failure process of a scenario's job and the sentence that says where it comes from: ``[ft]
    failure_model`` with its ``[ft.rates]`` overrides, or ``[cluster] failure_rate_per_1000_node_days`` (given
    here per second per node, as ``node_rate_per_s``) in place of the preset's unplanned categories."""
    spec = load_failure_model(ft.failure_model, source=source)
    failures = job_failures(
        spec,
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        overrides=ft.rate_per_unit_s,
        node_rate_per_s=node_rate_per_s,
        source=source,
    )
    if node_rate_per_s is not None:
        how = (
            f"unplanned failures: {units.per_1000_unit_days(node_rate_per_s):g} per 1,000 node-days "
            f"([cluster] failure_rate_per_1000_node_days) replace the {spec.name} categories"
        )
    else:
        how = f"failure model {spec.name}: {spec.source.what} ({spec.source.url})"
    return failures, how


def observed_failures(interruptions: int, exposure_s: float, *, num_gpus: int, num_nodes: int) -> JobFailures:
    """The failure process a run showed: ``interruptions`` over ``exposure_s`` seconds of running, as one
    per-job rate (what a drill or a short run can measure; it says nothing about which component failed)."""
    rate = interruptions / exposure_s if exposure_s > 0 else 0.0
    category = Category(
        name="observed",
        component="interruptions observed in this run",
        group="Observed",
        per="job",
        rate_per_unit_s=rate,
        needs_replacement=False,
        planned=False,
    )
    return JobFailures("observed", "observed in this run", (category,), num_gpus, num_nodes, None)
