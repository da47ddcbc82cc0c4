"""What the calibration shares: an evaluator that predicts measured runs for any constants (and any scale-out
network profile), the robust loss, and the least-squares solver (:mod:`mfukit.perf.calibrate`,
:mod:`mfukit.perf.calibrate_network`, ``benchmarks/accuracy.py``).

Runs that share a model, sequence length, precision, framework and cluster size are evaluated together, and
their collectives (which do not depend on the fitted constants) are computed once.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from mfukit.comm.topology import from_system
from mfukit.perf.efficiency import Efficiency, NetworkProfile, network_name
from mfukit.perf.layouts import Floats, grid_of, with_changes
from mfukit.perf.measured_runs import Case
from mfukit.perf.step_time import Machine, Prepared, evaluate, machine_for, prepare, with_network_profile

LOSS_SCALE = 0.05


@dataclass(frozen=True)
class Group:
    indices: np.ndarray
    prepared: Prepared
    accelerator: str
    framework: str


class Evaluator:
    """Predicts tokens/s per GPU of a list of cases for any efficiency constants."""

    def __init__(self, cases: Sequence[Case], networks: dict[str, NetworkProfile] | None = None):
        self.cases = list(cases)
        keyed: dict[tuple[object, ...], list[int]] = collections.defaultdict(list)
        for index, case in enumerate(self.cases):
            nodes = math.ceil(case.num_gpus / case.system.gpus_per_node)
            workload = replace(case.workload, global_batch_sequences=1)
            # a System holds mappings (its NCCL environment), so it is keyed by its JSON
            keyed[(workload, case.system.model_dump_json(), case.accelerator.name, nodes)].append(index)
        self.groups: list[Group] = []
        for indices in keyed.values():
            members = [self.cases[i] for i in indices]
            first = members[0]
            grid = grid_of(
                [case.layout for case in members],
                model=first.workload.model,
                micro_batch_size=[case.micro_batch_size for case in members],
                num_microbatches=[case.num_microbatches for case in members],
            )
            grid = with_changes(
                grid,
                first_layers=[case.first_layers for case in members],
                last_layers=[case.last_layers for case in members],
            )
            machine = _machine(first, max(case.num_gpus for case in members), (networks or {}))
            self.groups.append(
                Group(
                    np.asarray(indices),
                    prepare(first.workload, grid, machine),
                    first.accelerator.name,
                    first.workload.framework,
                )
            )
        self.measured = np.asarray([case.measured_tokens_per_s_per_gpu for case in self.cases])

    def predict(
        self,
        efficiency: Callable[[str, str], Efficiency],
        only: Sequence[int] | None = None,
        base: Floats | None = None,
    ) -> Floats:
        """Tokens/s per GPU of every case; ``efficiency(accelerator, framework)`` gives the constants.
        ``only``: re-evaluate just those groups (indices into ``groups``), the others taken from ``base``."""
        return self._run(efficiency, only, base)[0]

    def predict_with_ceiling(self, efficiency: Callable[[str, str], Efficiency]) -> tuple[Floats, Floats]:
        """:meth:`predict`, and each prediction's kernel ceiling (``StepEstimate.kernel_ceiling``)."""
        return self._run(efficiency, None, None)

    def _run(
        self, efficiency: Callable[[str, str], Efficiency], only: Sequence[int] | None, base: Floats | None
    ) -> tuple[Floats, Floats]:
        out = np.empty(len(self.cases)) if base is None else base.copy()
        ceilings = np.full(len(self.cases), np.inf)
        for number in range(len(self.groups)) if only is None else only:
            group = self.groups[number]
            estimate = evaluate(group.prepared, efficiency(group.accelerator, group.framework))
            out[group.indices] = estimate.tokens_per_s / group.prepared.grid.world_size
            ceilings[group.indices] = estimate.kernel_ceiling
        return out, ceilings


def _machine(case: Case, num_gpus: int, networks: dict[str, NetworkProfile]) -> Machine:
    """The case's machine, its scale-out network under ``networks[name]`` where given (else the installed)."""
    name = network_name(case.system)
    if name not in networks:
        return machine_for(case.system, case.accelerator, num_gpus)
    topology, notes = from_system(
        case.system, case.accelerator, num_nodes=math.ceil(num_gpus / case.system.gpus_per_node)
    )
    topology, notes = with_network_profile(topology, name, notes, networks[name])
    return machine_for(case.system, case.accelerator, num_gpus, topology=topology)


def soft_l1(log_errors: Floats, weights: Floats) -> Floats:
    """Residuals whose squares sum to the soft-L1 loss ``2(sqrt(1 + z^2) - 1)``, z = error / LOSS_SCALE: a
    smooth absolute error, so the fit aims at the median and a run lost to causes no model sees counts little."""
    z = log_errors / LOSS_SCALE
    return np.asarray(np.sign(z) * np.sqrt(weights * 2 * (np.sqrt(1 + z**2) - 1)), dtype=np.float64)


def levenberg_marquardt(
    residuals: Callable[[Floats], Floats],
    x0: Floats,
    iterations: int = 40,
    column: Callable[[Floats, Floats, int, float], Floats] | None = None,
) -> Floats:
    """Minimise ``|residuals(x)|^2`` from ``x0`` (finite-difference Jacobian, adaptive damping). ``column(x,
    r, j, step)``, when given, returns the residuals with parameter j moved by ``step`` more cheaply (only the
    runs that parameter touches re-evaluated)."""
    x = x0.copy()
    r = residuals(x)
    cost = float(r @ r)
    damping = 1e-2
    for _ in range(iterations):
        step = 1e-3
        jacobian = np.stack(
            [(_moved(residuals, column, x, r, j, step) - r) / step for j in range(len(x))], axis=1
        )
        gradient = jacobian.T @ r
        normal = jacobian.T @ jacobian
        improved = False
        while damping < 1e8:
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
            trial = x + delta
            r_trial = residuals(trial)
            cost_trial = float(r_trial @ r_trial)
            if cost_trial < cost:
                x, r, cost, damping, improved = trial, r_trial, cost_trial, damping / 3, True
                break
            damping *= 4
        if not improved or float(np.max(np.abs(delta))) < 1e-4:
            break
    return x


def _moved(
    residuals: Callable[[Floats], Floats],
    column: Callable[[Floats, Floats, int, float], Floats] | None,
    x: Floats,
    r: Floats,
    j: int,
    step: float,
) -> Floats:
    if column is not None:
        return column(x, r, j, step)
    moved = x.copy()
    moved[j] += step
    return residuals(moved)


def error_summary(errors: Floats) -> tuple[float, float]:
    """Median and 90th percentile of |relative error|."""
    magnitudes = np.abs(errors)
    return float(np.median(magnitudes)), float(np.quantile(magnitudes, 0.9))
