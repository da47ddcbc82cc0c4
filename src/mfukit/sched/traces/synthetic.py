"""A synthetic trace: Poisson arrivals at a target load, a job-size mix like published LLM clusters,
heavy-tailed (log-normal) run times, and time limits a random multiple of the run time.

The size mix is data (``sched/data/llm_cluster_size_mix.toml``, fitted to Meta's RSC figures). The
run-time distribution and the limit multiple are knobs, not facts: their defaults are illustrative
and every command that uses them says so in its assumptions.
"""

from __future__ import annotations

import math
import random
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mfukit.errors import InputError
from mfukit.sched.job import Job, shape_for_gpus

SIZE_MIX_FILE = Path(__file__).parents[1] / "data" / "llm_cluster_size_mix.toml"
MINUTE_S = 60.0


@cache
def size_mix() -> tuple[tuple[int, ...], tuple[float, ...], str]:
    """(GPUs per job, fraction of jobs, source) of the shipped mix."""
    data = tomllib.loads(SIZE_MIX_FILE.read_text(encoding="utf-8"))
    return tuple(data["gpus"]), tuple(data["fraction"]), str(data["source"]["url"])


@dataclass(frozen=True)
class SyntheticSpec:
    num_jobs: int
    cluster_gpus: int
    gpus_per_node: int
    load: float = 0.9  # offered GPU-time / capacity
    median_run_s: float = 1800.0
    run_sigma: float = 1.5  # log-normal shape: the tail of a few very long jobs
    limit_factor_max: float = 3.0  # limit = run x U(1, this), rounded up to whole minutes
    num_users: int = 40
    seed: int = 0

    def check(self) -> None:
        if self.num_jobs < 1:
            raise InputError("must be at least 1", field="--jobs", value=self.num_jobs)
        if not 0 < self.load <= 10:
            raise InputError("must be in (0, 10]", field="--load", value=self.load)
        if self.median_run_s <= 0 or self.run_sigma < 0:
            raise InputError("median run time must be > 0 and sigma >= 0", field="--median-run")
        if self.limit_factor_max < 1:
            raise InputError("must be >= 1", field="--limit-factor", value=self.limit_factor_max)


def generate(spec: SyntheticSpec) -> list[Job]:
    spec.check()
    sizes, weights, _ = size_mix()
    allowed = [(s, w) for s, w in zip(sizes, weights, strict=True) if s <= spec.cluster_gpus]
    sizes_ok = [s for s, _ in allowed]
    weights_ok = [w for _, w in allowed]
    total_weight = sum(weights_ok)
    mean_gpus = sum(math.prod(shape_for_gpus(s, spec.gpus_per_node)) * w for s, w in allowed) / total_weight
    mean_run_s = spec.median_run_s * math.exp(spec.run_sigma**2 / 2)
    rate_per_s = spec.load * spec.cluster_gpus / (mean_gpus * mean_run_s)
    rng = random.Random(spec.seed)
    mu = math.log(spec.median_run_s)
    cumulative = []
    running = 0.0
    for weight in weights_ok:
        running += weight / total_weight
        cumulative.append(running)
    jobs = []
    t = 0.0
    for job_id in range(1, spec.num_jobs + 1):
        t += rng.expovariate(rate_per_s)
        u = rng.random()
        index = next((i for i, c in enumerate(cumulative) if u <= c), len(sizes_ok) - 1)
        nodes, per_node = shape_for_gpus(sizes_ok[index], spec.gpus_per_node)
        run_s = max(1.0, round(rng.lognormvariate(mu, spec.run_sigma)))
        limit_s = math.ceil(run_s * rng.uniform(1.0, spec.limit_factor_max) / MINUTE_S) * MINUTE_S
        jobs.append(
            Job(
                job_id,
                round(t, 3),
                run_s,
                limit_s,
                nodes,
                per_node,
                user=f"u{rng.randrange(spec.num_users):03d}",
            )
        )
    return jobs
