"""From a scenario to the run the fault-tolerance model reasons about: failures, checkpoint cost,
restart, step time and the checkpoint policy, with every default it took written down."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mfukit import catalog, units
from mfukit.catalog.resolved import ResolvedScenario
from mfukit.core.cluster import Cluster
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism
from mfukit.core.scenario import Scenario
from mfukit.errors import InputError
from mfukit.ft import checkpoint_io as ckio
from mfukit.ft.failures import JobFailures, scenario_failures
from mfukit.ft.interval import recommended_interval_s
from mfukit.ft.restart import restart_parts
from mfukit.ft.run import Policy, RunModel, effective_save
from mfukit.ft.step_time import Throughput, throughput

DEFAULT_STORAGE = "lustre-generic"


@dataclass
class FtInputs:
    scenario: Scenario
    model: ModelSpec
    cluster: Cluster
    failures: JobFailures
    checkpoint: ckio.CheckpointIO
    throughput: Throughput
    run: RunModel
    """the run under the user's policy (or the recommended interval when none is given)"""
    mode: ckio.Mode
    user_interval_s: float | None
    recommended_interval_s: float
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def step_time_s(self) -> float | None:
        return self.throughput.step_time_s

    def steps(self, interval_s: float) -> int | None:
        step = self.step_time_s
        return max(1, round(interval_s / step)) if step else None

    def policy(self, mode: ckio.Mode, interval_s: float | None, hot_spares: int) -> Policy:
        """A checkpoint policy with its save cost; ``interval_s`` None means the recommended one."""
        save = self.checkpoint.save(mode)
        blocking = self.scenario.ft.checkpoint_blocking_s
        blocking_s = blocking if blocking is not None else save.blocking_s
        mtbf = self.failures.mtbf_s
        interval = interval_s
        if interval is None:
            interval = _whole_steps(
                recommended_interval_s(blocking_s, save.persist_s, mtbf, self.step_time_s),
                self.step_time_s,
                save.persist_s,
            )
        blocking_s, persist_s = effective_save(interval, blocking_s, save.persist_s)
        return Policy(interval, blocking_s, persist_s, hot_spares)


def _whole_steps(interval_s: float, step_time_s: float | None, floor_s: float = 0.0) -> float:
    """``interval_s`` as the nearest whole number of steps, but never fewer steps than ``floor_s`` takes (an
    async save's background persist: rounding below it would stall every save on the one before)."""
    if not step_time_s:
        return interval_s
    steps = max(1, round(interval_s / step_time_s), math.ceil(floor_s / step_time_s - 1e-9))
    return steps * step_time_s


def _straggler_loss(scenario: Scenario, cluster: Cluster, source: str) -> float:
    ft = scenario.ft
    if ft.straggler_rate_per_node_s <= 0 or ft.straggler_slowdown <= 0:
        return 0.0
    if ft.straggler_duration_s is None:
        raise InputError(
            "straggler episodes need a duration",
            source=source,
            field="ft.straggler_duration",
            hint='give ft.straggler_duration, e.g. "20min" (time until a straggler is found and removed)',
        )
    per_s = ft.straggler_rate_per_node_s * cluster.num_nodes
    present = min(1.0, per_s * ft.straggler_duration_s)
    return present * ft.straggler_slowdown


def ft_inputs(
    scene: ResolvedScenario,
    *,
    num_gpus: int | None = None,
    step_time_s: float | None = None,
    parallelism: Parallelism | None = None,
) -> FtInputs:
    """The run of ``scene``; a search passes its candidate GPU count, the step time the performance model
    gave it and its layout, which take the place of the scenario's."""
    assumptions: list[str] = []
    warnings: list[str] = []
    scenario, source, model = scene.scenario, scene.source, scene.model
    ft = scenario.ft
    layout = parallelism if parallelism is not None else scenario.parallelism
    cluster = scene.cluster(num_gpus)
    storage = cluster.storage
    if storage is None:
        storage = catalog.storage(DEFAULT_STORAGE)
        warnings.append(
            f"no storage tier given: checkpoint times assume {storage.display_name} ({DEFAULT_STORAGE}); "
            "set --storage to yours"
        )
    failures, how = scenario_failures(
        ft,
        node_rate_per_s=cluster.node_failure_rate_per_s,
        num_gpus=cluster.num_gpus,
        num_nodes=cluster.num_nodes,
        source=source,
    )
    assumptions.append(how)
    if failures.failure_rate_per_s <= 0:
        raise InputError(
            "every failure rate is zero: there is nothing to plan for",
            source=source,
            field="ft.rates",
            hint="use a failure model with non-zero rates",
        )
    convention = ckio.state_convention(ft.checkpoint_state, layout)
    params = float(model.total_params())
    checkpoint = ckio.checkpoint_io(
        params=params,
        convention=convention,
        precision=scenario.training.precision,
        cluster=cluster,
        storage=storage,
    )
    assumptions.append(
        f"checkpoint: {checkpoint.bytes_per_param:g} B/param ({ckio.STATE_DESCRIPTIONS[convention]}); "
        "data-loader, RNG and step state are negligible beside it"
    )
    if checkpoint.host_link_bytes_per_s is None:
        warnings.append(
            f"{cluster.accelerator.name} has no host_link_bandwidth in the catalog: an async save is taken "
            "to block for the whole write; set --checkpoint-blocking"
        )
    host_ram = cluster.system.host_memory_bytes
    if ft.checkpoint_mode == "async" and checkpoint.per_node_bytes > host_ram / 2:
        warnings.append(
            f"async staging needs {units.format_bytes(checkpoint.per_node_bytes)} of host memory per node "
            f"(x2 double-buffered) of {units.format_bytes(host_ram)}"
        )
    parts = restart_parts(ft, load_s=checkpoint.read_s, assumptions=assumptions)
    step_given = step_time_s if step_time_s is not None else ft.step_time_s
    rate = throughput(
        model, scenario.training, cluster, ft, source=source, parallelism=layout, step_time_s=step_given
    )
    assumptions.append(rate.how)
    work_s = _work_s(scenario, rate, source)
    step = rate.step_time_s
    user_interval: float | None = None
    interval = ft.checkpoint_interval
    if interval is not None:
        if interval.steps is not None:
            if step is None:
                raise InputError(
                    "an interval in steps needs the step time",
                    source=source,
                    field="ft.checkpoint_interval",
                    value=interval.text,
                    hint="give training.global_batch_tokens (with an MFU) or ft.step_time, or the interval in time",
                )
            user_interval = interval.steps * step
        else:
            user_interval = interval.seconds
        if user_interval is None or user_interval <= 0:
            raise InputError(
                "must be positive",
                source=source,
                field="ft.checkpoint_interval",
                value=interval.text,
            )
    straggler = _straggler_loss(scenario, cluster, source)
    shape = ft.weibull_shape
    if ft.failure_distribution == "weibull" and shape is None:
        raise InputError(
            "a Weibull failure distribution needs its shape",
            source=source,
            field="ft.weibull_shape",
            hint="give ft.weibull_shape (< 1 when failures cluster after restarts, as Schroeder & Gibson, "
            "DSN 2006, found for HPC systems)",
        )
    inputs = FtInputs(
        scenario=scenario,
        model=model,
        cluster=cluster,
        failures=failures,
        checkpoint=checkpoint,
        throughput=rate,
        run=RunModel(
            work_s=work_s / (1.0 - straggler),
            interval_s=1.0,
            blocking_s=0.0,
            persist_s=0.0,
            save_s=checkpoint.save("sync").blocking_s,
            failures=failures,
            restart=parts,
            straggler_loss_frac=straggler,
            weibull_shape=shape if ft.failure_distribution == "weibull" else None,
        ),
        mode=ft.checkpoint_mode,
        user_interval_s=user_interval,
        recommended_interval_s=0.0,
        assumptions=assumptions,
        warnings=warnings,
    )
    recommended = inputs.policy(ft.checkpoint_mode, None, ft.hot_spares)
    inputs.recommended_interval_s = recommended.interval_s
    chosen = inputs.policy(ft.checkpoint_mode, user_interval, ft.hot_spares)
    inputs.run = inputs.run.with_policy(chosen)
    if (
        chosen.blocking_s > checkpoint.save(ft.checkpoint_mode).blocking_s + 1e-9
        and ft.checkpoint_mode == "async"
    ):
        inputs.warnings.append(
            f"the interval ({units.format_duration(chosen.interval_s)}) is shorter than the background persist "
            f"({units.format_duration(checkpoint.save('async').persist_s)}): each save waits for the previous one"
        )
    if ft.checkpoint_blocking_s is not None:
        assumptions.append(f"blocking time of one save = {ft.checkpoint_blocking_s:g} s as given")
    return inputs


def _work_s(scenario: Scenario, rate: Throughput, source: str) -> float:
    if scenario.ft.work_s is not None:
        if scenario.ft.work_s <= 0:
            raise InputError("must be positive", source=source, field="ft.work", value=scenario.ft.work_s)
        return scenario.ft.work_s
    tokens = scenario.training.tokens
    if tokens is None or rate.tokens_per_s is None:
        raise InputError(
            "needs the amount of training",
            source=source,
            field="training.tokens",
            hint='give training.tokens, e.g. "15.6T" (with a global batch when ft.step_time is given), or ft.work, '
            'e.g. "48d"',
        )
    if not math.isfinite(tokens / rate.tokens_per_s):
        raise InputError(
            "gives no finite training time", source=source, field="training.tokens", value=tokens
        )
    return tokens / rate.tokens_per_s
