"""Fit the efficiency profiles to measured runs, and predict those runs: ``python -m mfukit.perf.calibrate``.

Every case of :mod:`mfukit.perf.calibration_data` is predicted by the step-time model through
:class:`mfukit.perf.evaluator.Evaluator`.

The fit minimises a robust (soft-L1) loss of the log error r of tokens/s per GPU,
``2(sqrt(1 + (r / 0.05)^2) - 1)``, summed per (source, accelerator) group and divided by the group's size,
so that no source outweighs another by its row count and the fit aims at the median rather than at runs a
framework lost for reasons no model of the hardware sees. The GPU and framework constants are fitted on the
rows of the fit split that ran inside one node; then each network profile on every row (not only the
fit split's) that crossed that network with no pipeline across nodes (:mod:`mfukit.perf.calibrate_network`);
every other multi-node row tests the model. A framework constant that moves none of its one-node rows'
predictions (a collective cost where no run launched one, a pipeline cost where none used PP, a host floor
its GPU work always covered) is fitted on the stack's multi-node rows with the rank jitter instead, and
where none of those moves it either, it stays the default framework's. The optimiser is Levenberg-Marquardt on the
logarithms (logits for fractions) of the constants, with a finite-difference Jacobian, from the neutral start
every leave-one-source-out fold takes (:func:`neutral_prior`). The result is written
to ``perf/data/efficiency.toml`` with the SHA-256 of each data file, the split and the fit error of each
profile; borrowed profiles and framework facts are kept as they are.
"""

from __future__ import annotations

import collections
import hashlib
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TypeVar

import numpy as np

from mfukit.perf.calibrate_network import fit_network
from mfukit.perf.calibration_data import (
    calibration_dir,
    file_digests,
    highest_measured_mfu,
    load_cases,
)
from mfukit.perf.efficiency import (
    DEFAULT_FRAMEWORK,
    EFFICIENCY_FILE,
    FRAMEWORK_FIELDS,
    HARDWARE_FIELDS,
    SCALE_FIELDS,
    Efficiency,
    EfficiencyFile,
    FitRecord,
    FrameworkProfile,
    HardwareProfile,
    NetworkProfile,
    _load_efficiency,
    efficiency_file,
    efficiency_for,
    hardware_profile_of,
)
from mfukit.perf.evaluator import LOSS_SCALE, Evaluator, Group, error_summary, levenberg_marquardt, soft_l1
from mfukit.perf.layouts import Floats
from mfukit.perf.measured_runs import Case

P = TypeVar("P", HardwareProfile, FrameworkProfile)
FRACTIONS = frozenset({"gemm_peak_fraction", "attention_peak_fraction", "fp8_gemm_peak_fraction"})


# Search bounds in the transformed space: fractions 0.01-0.99, times 0.1 us-0.1 s, GEMM dimensions 1-4096.
_BOUNDS = {
    "fraction": (math.log(0.01 / 0.99), math.log(0.99 / 0.01)),
    "time": (math.log(1e-7), math.log(0.1)),
    "dimension": (0.0, math.log(4096.0)),
}


# The range of each host cost, from what profilers of these stacks show at least (a layer's forward launches
# tens of kernels at 5-20 us each, a micro-batch's own Python work, data, loss and schedule bookkeeping, takes
# a few hundred us, one collective's or p2p send/recv's launch and NCCL setup 10 us) to the most a fit may
# put on it (the bounds below): a layer's forward 0.1-2 ms, a micro-batch 0.2-3 ms, a collective or send
# 10-100 us. A collective's cost is charged on the GPU's timeline, once per exposed call, beside the NCCL
# latency the collective model already holds: the kernel launch and the wait between the compute and NCCL
# streams, tens of us. Its CPU side (c10d's allreduce_ takes 265-280 us of host time per call in HTA's A100
# NCCL trace, shared/reference/artifacts/hta/nccl_parser_config, profiler on) runs while the GPU works on
# what was launched before, so it is not this cost. With 500 us allowed, the fits put 130 us (Megatron-Core,
# Megatron-DeepSpeed) to 500 us (FSDP) on every call, and the fold without the NeMo sources 500 us on
# Megatron-Core's, where it carried what the fold got wrong of NeMo's GPU curve: with the bound at 100 us
# alone, those sources went from 13-22 % to 8-20 % held out (docs/performance-model.md).
HOST_COST_RANGES_S = {
    "host_layer_s": (1e-4, 2e-3),
    "microbatch_overhead_s": (2e-4, 3e-3),
    "collective_overhead_s": (1e-5, 1e-4),
    "p2p_overhead_s": (1e-5, 1e-4),
}


# Where a stack constant is probed for whether its runs show it at all (_moves): its host cost range, and
# the attention kernel's 0.5-2x of the reference one (_FIELD_BOUNDS).
ATTENTION_SPEEDUP_RANGE = (0.5, 2.0)
PLAUSIBLE_RANGES = {**HOST_COST_RANGES_S, "attention_speedup": ATTENTION_SPEEDUP_RANGE}


# A GEMM's fixed cost (launch and tail) is kept to 5-20 us. The fastest GEMM of XLA's measured H100 table
# (256 x 256 x 256) takes 5.0 us, and the curve fitted to those kernels puts 5.1 us on every launch
# (benchmarks/gemm_curve.py); the fold without vTrain, the only source whose runs are made of GEMMs that
# small, had put it on the former 2 us floor. Beyond 20 us it would trade places with the framework's
# per-layer cost (a layer runs the same handful of GEMMs every time).
_FIELD_BOUNDS = {
    "gemm_latency_s": (math.log(5e-6), math.log(2e-5)),
    # a rank's step time varying by 0.01-20 % (1 sigma): what measured clusters show (Lin et al. OSDI 2025)
    "sync_jitter_cv": (math.log(1e-4), math.log(0.2)),
    # Flash attention's share of the dense peak, kept to what the kernels measure alone (forward, head dim 128,
    # causal and not): FlashAttention-2 reaches 50-73 % of A100's (Dao 2023, Fig. 4) and 35-37 % of H100's,
    # cuDNN's fused attention 53-62 % and FlashAttention-3 61-65 % of H100's (Shah et al. 2024, Fig. 5). In
    # training runs attention is a few % of the step below 8K tokens, so a fold without the long-sequence
    # runs cannot pin it down; unbounded, such a fold put H100 attention at a sixth of the peak. A stack's
    # kernel relative to the reference one stays within the spread of those figures (0.5-2x).
    "attention_peak_fraction": (math.log(0.25 / 0.75), math.log(0.75 / 0.25)),
    "attention_speedup": (math.log(ATTENTION_SPEEDUP_RANGE[0]), math.log(ATTENTION_SPEEDUP_RANGE[1])),
    # A stack's host costs, at most the top of their range (HOST_COST_RANGES_S, with room to spare above what
    # profilers show; a fit may go below it): a fit whose data cannot pin a constant down would otherwise load
    # onto it what it got wrong elsewhere. Without these bounds a fold without vTrain's runs fitted 61 ms per
    # p2p transfer and 100 ms per micro-batch to Megatron-DeepSpeed and predicted vTrain 74 % off (20 % with);
    # with 10 ms allowed per micro-batch the full fit put all 10 on Megatron-Core's, 44 % off its own 32B H100
    # run; with 2 ms per collective, the fit without the Megatron-Core runs put 461 us on every Megatron-Core
    # TP collective, more than its transfer across nodes.
    **{name: (math.log(1e-7), math.log(high)) for name, (_, high) in HOST_COST_RANGES_S.items()},
}
# At most this many rows of one (source, accelerator) group enter a fit, chosen by a hash of their ids: the
# groups are weighted equally anyway, and the sweeps of thousands of rows would only slow the solver.
MAX_ROWS_PER_GROUP = 30


def _kind(name: str) -> str:
    return "fraction" if name in FRACTIONS else "time" if name.endswith("_s") else "dimension"


def _bounds(name: str) -> tuple[float, float]:
    return _FIELD_BOUNDS.get(name, _BOUNDS[_kind(name)])


def _encode(name: str, value: float) -> float:
    low, high = _bounds(name)
    raw = math.log(value / (1 - value)) if name in FRACTIONS else math.log(max(value, 1e-9))
    return min(high, max(low, raw))


def _decode(name: str, value: float) -> float:
    low, high = _bounds(name)
    bounded = min(high, max(low, value))
    return 1 / (1 + math.exp(-bounded)) if name in FRACTIONS else math.exp(bounded)


def _owners(file: EfficiencyFile) -> dict[tuple[str, str], str]:
    """(kind, profile) -> the profile whose fitted constants it runs on (itself, or the one it borrows)."""
    owners = {("hardware", p.name): p.name for p in file.hardware}  # a GPU that borrows is not fitted
    return owners | {("framework", p.name): p.borrows or p.name for p in file.framework}


@dataclass
class _Problem:
    evaluator: Evaluator
    parameters: list[tuple[str, str, str]]  # (kind, profile, field)
    start: dict[tuple[str, str], Efficiency]
    weights: Floats
    owners: dict[tuple[str, str], str]
    _base_x: Floats | None = None
    _base: Floats | None = None

    def efficiencies(self, x: Floats) -> Callable[[str, str], Efficiency]:
        updates: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
        for (kind, profile, field), value in zip(self.parameters, x.tolist(), strict=True):
            updates[(kind, profile)][field] = _decode(field, value)

        def lookup(accelerator: str, framework: str) -> Efficiency:
            base = self.start[(accelerator, framework)]
            hardware = self.owners[("hardware", base.hardware)]
            stack = self.owners[("framework", base.framework)]
            return base.model_copy(
                update=updates.get(("hardware", hardware), {}) | updates.get(("framework", stack), {})
            )

        return lookup

    def residuals(self, x: Floats) -> Floats:
        return self._loss(self.evaluator.predict(self.efficiencies(x)))

    def _loss(self, predicted: Floats) -> Floats:
        return soft_l1(np.log(predicted / self.evaluator.measured), self.weights)

    def column(self, x: Floats, r: Floats, j: int, step: float) -> Floats:
        """The residuals with parameter ``j`` moved by ``step``: only the groups running on its profile are
        evaluated again (a GPU family's constants do not move another family's runs)."""
        kind, profile, _ = self.parameters[j]
        touched = [
            number
            for number, group in enumerate(self.evaluator.groups)
            if self.owners[(kind, self._profile(group, kind))] == profile
        ]
        if not touched:
            return r
        if self._base_x is None or not np.array_equal(self._base_x, x):
            self._base_x, self._base = x.copy(), self.evaluator.predict(self.efficiencies(x))
        moved = x.copy()
        moved[j] += step
        return self._loss(self.evaluator.predict(self.efficiencies(moved), only=touched, base=self._base))

    def _profile(self, group: Group, kind: str) -> str:
        base = self.start[(group.accelerator, group.framework)]
        return base.hardware if kind == "hardware" else base.framework


def _group_of(case: Case) -> str:
    return f"{case.source}:{case.accelerator.name}"


def _weights(cases: Sequence[Case]) -> Floats:
    groups = [_group_of(case) for case in cases]
    sizes = collections.Counter(groups)
    return np.asarray([1.0 / sizes[name] for name in groups])


def _parameters(
    file: EfficiencyFile,
    start: dict[tuple[str, str], Efficiency],
    cases: Sequence[Case],
    kinds: set[str],
    stacks: dict[str, frozenset[str]] | None = None,
) -> tuple[list[tuple[str, str, str]], list[float]]:
    """The constants to fit: those of every calibrated profile the cases run on, of the given kinds
    (``hardware``: the GEMM curve; ``framework``: the host costs; ``scale``: the rank jitter); ``stacks``:
    only these stacks' constants of these names. A constant set to None starts where the default stack's
    stands, the value it ran on."""
    parameters: list[tuple[str, str, str]] = []
    x0: list[float] = []
    owners = _owners(file)
    used_hardware = {owners[("hardware", e.hardware)] for e in start.values()}
    used_frameworks = {owners[("framework", e.framework)] for e in start.values()}
    for profile in file.hardware:
        if profile.name not in used_hardware or profile.borrows is not None:
            continue
        names: list[str] = []
        if "hardware" in kinds:
            fp8 = any(
                case.workload.precision == "fp8"
                and owners[("hardware", _hardware_name(case, file) or "")] == profile.name
                for case in cases
                if _hardware_name(case, file)
            )
            names += [name for name in HARDWARE_FIELDS if fp8 or name != "fp8_gemm_peak_fraction"]
        if "scale" in kinds:
            names += list(SCALE_FIELDS)
        for name in names:
            parameters.append(("hardware", profile.name, name))
            fallback = 0.01 if name in SCALE_FIELDS else profile.gemm_peak_fraction or 0.7
            x0.append(_encode(name, float(getattr(profile, name) or fallback)))
    if "framework" in kinds:
        default = next(f for f in file.framework if f.name == DEFAULT_FRAMEWORK)
        for framework in file.framework:
            if framework.name not in used_frameworks or framework.borrows is not None:
                continue
            if stacks is not None and framework.name not in stacks:
                continue
            for name in FRAMEWORK_FIELDS:
                if name == "attention_speedup" and framework.name == DEFAULT_FRAMEWORK:
                    continue  # the reference the others' kernels are measured against
                if stacks is not None and name not in stacks[framework.name]:
                    continue
                parameters.append(("framework", framework.name, name))
                fallback = 1.0 if name == "attention_speedup" else 1e-5
                value = getattr(framework, name)
                x0.append(
                    _encode(name, float(value if value is not None else getattr(default, name) or fallback))
                )
    return parameters, x0


def _solve(
    file: EfficiencyFile,
    cases: Sequence[Case],
    kinds: set[str],
    iterations: int = 40,
    stacks: dict[str, frozenset[str]] | None = None,
) -> dict[tuple[str, str], dict[str, float]]:
    """Fit the constants of ``kinds`` on ``cases`` starting from ``file``."""
    if not cases:
        return {}
    evaluator = Evaluator(cases)
    start = {
        (group.accelerator, group.framework): _efficiency(file, cases[int(group.indices[0])], group.framework)
        for group in evaluator.groups
    }
    parameters, x0 = _parameters(file, start, cases, kinds, stacks)
    if not parameters:
        return {}
    problem = _Problem(evaluator, parameters, start, _weights(cases), _owners(file))
    best = levenberg_marquardt(
        problem.residuals, np.asarray(x0), iterations=iterations, column=problem.column
    )
    values: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    for (kind, profile, name), value in zip(parameters, best.tolist(), strict=True):
        values[(kind, profile)][name] = _decode(name, value)
    return values


def _efficiency(file: EfficiencyFile, case: Case, framework: str) -> Efficiency:
    """The constants of ``file`` (not the installed one) for a case."""
    return efficiency_for(case.accelerator, framework, file=file)


def _updated(file: EfficiencyFile, values: dict[tuple[str, str], dict[str, float]]) -> EfficiencyFile:
    hardware = [p.model_copy(update=values.get(("hardware", p.name), {})) for p in file.hardware]
    frameworks = [p.model_copy(update=values.get(("framework", p.name), {})) for p in file.framework]
    return file.model_copy(update={"hardware": hardware, "framework": frameworks})


# Where a leave-one-source-out fold starts: no fitted value, so what a fold's runs do not pin down cannot
# carry what the held-out source taught (GEMMs near the curve the tile model gives, each host cost at the
# geometric middle of its range, 0.5 % rank jitter, the reference attention kernel; networks on their link's
# nccl-tests figures, catalog [nccl], or NCCL's constants). A host cost no run of a fold's stack pins stays
# at its start: the middle of its range is the least committal guess, where the range's floor would assume
# the fastest host any stack ran on.
NEUTRAL = {
    "gemm_peak_fraction": 0.7,
    "gemm_latency_s": 1e-5,
    "gemm_tile_half_dim": 32.0,
    "gemm_k_overhead": 1.0,
    "attention_peak_fraction": 0.3,
    "fp8_gemm_peak_fraction": 0.7,
    "sync_jitter_cv": 0.005,
    **{name: math.sqrt(low * high) for name, (low, high) in HOST_COST_RANGES_S.items()},
    "attention_speedup": 1.0,
}


def neutral_prior(file: EfficiencyFile) -> EfficiencyFile:
    """``file`` with every fitted constant at its neutral start and no network profile fitted (the facts
    read from the stacks' code stay)."""

    def reset(profile: P) -> P:
        if profile.borrows is not None:
            return profile
        names = [name for name in NEUTRAL if name in type(profile).model_fields]
        return profile.model_copy(update={name: NEUTRAL[name] for name in names} | {"fit": None})

    networks = [
        n.model_copy(update={"efficiency": None, "step_latency_s": None, "fit": None}) for n in file.network
    ]
    return file.model_copy(
        update={
            "hardware": [reset(h) for h in file.hardware],
            "framework": [reset(f) for f in file.framework],
            "network": networks,
        }
    )


def fit_subset(cases: Sequence[Case]) -> list[Case]:
    """At most :data:`MAX_ROWS_PER_GROUP` rows of each (source, accelerator) group, the same ones every time
    (the lowest SHA-256 of ``"<source>:<row_id>"``)."""
    groups: dict[str, list[Case]] = collections.defaultdict(list)
    for case in cases:
        groups[_group_of(case)].append(case)

    def digest(case: Case) -> str:
        return hashlib.sha256(f"{case.source}:{case.row_id}".encode()).hexdigest()

    return [case for members in groups.values() for case in sorted(members, key=digest)[:MAX_ROWS_PER_GROUP]]


def fit(
    cases: Sequence[Case], start: EfficiencyFile | None = None, iterations: int = 40
) -> tuple[EfficiencyFile, dict[str, tuple[int, float, float]]]:
    """Fit every calibrated profile on ``cases`` (at most :data:`MAX_ROWS_PER_GROUP` of each group), in three
    stages: (1) the GPU and framework constants on the runs inside one node (the GPU's kernels and the
    stack's host costs, no network); (2) each ``[[network]]`` profile on every multi-node run that crossed
    that network (:mod:`mfukit.perf.calibrate_network`); (3) each GPU family's rank jitter, and the
    stack constants no single-node run pinned (every one of a stack only multi-node runs showed), on every
    run, under the fitted GPU and network constants. A profile none of
    ``cases`` ran on keeps no constants of its own: it takes the default stack's (or the most-fitted GPU
    family's), so a leave-one-source-out fold never reuses what the held-out source taught. Returns the new
    file and, per profile, (rows, median, p90) of the fit error."""
    current = start or efficiency_file()
    # runs on a GPU whose family borrows another's constants test them; they do not fit them
    chosen = [case for case in fit_subset(cases) if _fitted_family(case, current)]
    single = [case for case in chosen if case.num_gpus <= case.system.gpus_per_node]
    by_name = {case.accelerator.name: case.accelerator for case in chosen}
    current = _updated(current, _solve(current, single, {"hardware", "framework"}, iterations))
    current, unidentified = _drop_unidentified(current, single)
    fitted_file = current

    def constants(accelerator: str, framework: str) -> Efficiency:
        return efficiency_for(by_name[accelerator], framework, file=fitted_file)

    records: dict[str, tuple[int, float, float]] = {}
    networks = []
    # a network's two constants are fitted on every run that crossed it, not on the capped subset (30 rows of
    # a 1,744-run sweep left six multi-node runs to pin AWS EFA down); fit_network weighs its sources equally
    over_networks = [case for case in cases if _fitted_family(case, current)]
    for network in current.network:
        fitted, record = fit_network(network, over_networks, constants)
        networks.append(fitted)
        if record is not None:
            records[f"network {network.name}"] = record
    current = current.model_copy(update={"network": networks})
    # stage 3: the rank jitter on every run, and the costs the one-node runs did not pin: every cost of a
    # stack no single-node run showed, and a seen stack's costs that moved none of its one-node runs (a host
    # floor their GPU work covered, a p2p cost where none piped). What the one-node runs pinned stays: the
    # multi-node runs add the network and the jitter.
    owners = _owners(current)
    in_runs = {owners[("framework", case.workload.framework)] for case in chosen}
    current, unmoved = _drop_unidentified(current, chosen)  # what no run moves stays the default stack's
    refit = {
        stack: fields
        for stack in in_runs
        if (fields := unidentified.get(stack, frozenset(FRAMEWORK_FIELDS)) - unmoved.get(stack, frozenset()))
    }
    current = _updated(current, _solve(current, chosen, {"framework", "scale"}, iterations, stacks=refit))
    current = _without_unused(current, chosen)
    return _with_records(current, chosen, records), records


def _fitted_family(case: Case, file: EfficiencyFile) -> bool:
    profile = hardware_profile_of(case.accelerator.name, file)
    return profile is not None and profile.borrows is None


def _drop_unidentified(
    file: EfficiencyFile, cases: Sequence[Case]
) -> tuple[EfficiencyFile, dict[str, frozenset[str]]]:
    """Framework constants that move none of their runs' predictions set to None (the default stack's), and
    the names set so, per stack that ran (an empty set: every constant moved its runs)."""
    if not cases:
        return file, {}
    evaluator = Evaluator(cases)
    lookup = {
        (g.accelerator, g.framework): _efficiency(file, cases[int(g.indices[0])], g.framework)
        for g in evaluator.groups
    }
    predicted = evaluator.predict(lambda a, f: lookup[(a, f)])
    owners = _owners(file)
    frameworks = []
    dropped: dict[str, frozenset[str]] = {}
    for framework in file.framework:
        # the stack and the stacks that borrow its constants (DeepSpeed runs Megatron-DeepSpeed's host costs)
        sharing = frozenset(p.name for p in file.framework if owners[("framework", p.name)] == framework.name)
        mask = np.asarray([c.workload.framework in sharing for c in cases])
        unidentified = {
            name: None
            for name in FRAMEWORK_FIELDS
            if mask.any()
            and framework.borrows is None
            and framework.name != DEFAULT_FRAMEWORK
            and not _moves(evaluator, lookup, predicted, sharing, name, mask)
        }
        frameworks.append(framework.model_copy(update=unidentified))
        if mask.any():
            dropped[framework.name] = frozenset(unidentified)
    return file.model_copy(update={"framework": frameworks}), dropped


def _without_unused(file: EfficiencyFile, cases: Sequence[Case]) -> EfficiencyFile:
    """Profiles no case ran on lose their constants: a stack takes the default stack's (efficiency_for), a
    GPU family the constants of the family fitted on the most runs."""
    owners = _owners(file)
    used_stacks = collections.Counter(owners[("framework", c.workload.framework)] for c in cases)
    used_hardware = collections.Counter(owners[("hardware", _hardware_name(c, file) or "")] for c in cases)
    frameworks = [
        p
        if p.borrows or used_stacks[p.name] or p.name == DEFAULT_FRAMEWORK
        else p.model_copy(update=dict.fromkeys(FRAMEWORK_FIELDS) | {"fit": None})
        for p in file.framework
    ]
    donor = next(
        (p for p in file.hardware if used_hardware and p.name == used_hardware.most_common(1)[0][0]), None
    )
    hardware = [
        p
        if p.borrows or used_hardware[p.name] or donor is None
        else p.model_copy(
            update={name: getattr(donor, name) for name in (*HARDWARE_FIELDS, *SCALE_FIELDS)} | {"fit": None}
        )
        for p in file.hardware
    ]
    return file.model_copy(update={"framework": frameworks, "hardware": hardware})


def _with_records(
    file: EfficiencyFile, cases: Sequence[Case], records: dict[str, tuple[int, float, float]]
) -> EfficiencyFile:
    """Each fitted profile with the rows it was fitted on and its error on them."""
    if not cases:
        return file
    evaluator = Evaluator(cases)
    errors = evaluator.predict(lambda a, f: _efficiency(file, evaluator.cases[_first(evaluator, a, f)], f))
    errors = errors / evaluator.measured - 1
    owners = _owners(file)
    hardware = []
    for profile in file.hardware:
        mask = np.asarray(
            [owners[("hardware", _hardware_name(c, file) or "")] == profile.name for c in cases]
        )
        hardware.append(_with_record(profile, mask, errors, cases, records))
    frameworks = []
    for framework in file.framework:
        mask = np.asarray([owners[("framework", c.workload.framework)] == framework.name for c in cases])
        frameworks.append(_with_record(framework, mask, errors, cases, records))
    return file.model_copy(update={"hardware": hardware, "framework": frameworks})


def _first(evaluator: Evaluator, accelerator: str, framework: str) -> int:
    group = next(g for g in evaluator.groups if g.accelerator == accelerator and g.framework == framework)
    return int(group.indices[0])


def _moves(
    evaluator: Evaluator,
    lookup: dict[tuple[str, str], Efficiency],
    predicted: Floats,
    sharing: frozenset[str],
    name: str,
    mask: np.ndarray,
) -> bool:
    """Whether the framework constant ``name``, set to either end of its plausible range, moves any prediction
    of its runs (``mask``, the runs of the stacks in ``sharing``: the one that holds it and those that borrow
    it): a run without TP, CP, EP or ZeRO-3/FSDP launches no per-layer collective, one without a pipeline
    sends nothing between stages, and a host floor that no run's GPU work falls under is only bounded from
    above by the data, not measured. A constant none of its runs shows is not kept: the default framework's
    applies. The ends of the range, not the value the constant holds, so that one fitted to its floor (or
    inheriting a floor) still counts as seen where a larger value would have shown."""
    # only the groups of the sharing stacks are evaluated again: the probe leaves every other alone
    touched = [number for number, group in enumerate(evaluator.groups) if group.framework in sharing]

    def at(value: float) -> Callable[[str, str], Efficiency]:
        def lookup_at(accelerator: str, stack: str) -> Efficiency:
            base = lookup[(accelerator, stack)]
            return base.model_copy(update={name: value}) if stack in sharing else base

        return lookup_at

    for value in PLAUSIBLE_RANGES[name] if touched else ():
        changed = evaluator.predict(at(value), only=touched, base=predicted)
        if np.any(np.abs(changed[mask] / predicted[mask] - 1) > 1e-6):
            return True
    return False


def _hardware_name(case: Case, file: EfficiencyFile) -> str | None:
    profile = hardware_profile_of(case.accelerator.name, file)
    return profile.name if profile else None


def _with_record(
    profile: P,
    mask: np.ndarray,
    errors: Floats,
    cases: Sequence[Case],
    records: dict[str, tuple[int, float, float]],
) -> P:
    if profile.borrows is not None or not mask.any():
        return profile
    median, p90 = error_summary(errors[mask])
    rows = int(mask.sum())
    records[profile.name] = (rows, median, p90)
    sources = sorted({cases[int(i)].source for i in np.flatnonzero(mask)})
    record = FitRecord(sources=sources, rows=rows, median_abs_rel_error=median, p90_abs_rel_error=p90)
    return profile.model_copy(update={"fit": record})


def with_highest_mfu(profile: HardwareProfile, cases: list[Case]) -> HardwareProfile:
    """``profile`` with the highest 16-bit MFU measured on its accelerators in its fit record."""
    found = highest_measured_mfu(cases, profile.accelerators)
    if profile.fit is None or found is None:
        return profile
    mfu, run = found
    return profile.model_copy(
        update={"fit": profile.fit.model_copy(update={"highest_mfu": round(mfu, 4), "highest_mfu_run": run})}
    )


def calibrated(cases: Sequence[Case], start: EfficiencyFile | None = None) -> EfficiencyFile:
    """Every profile fitted on ``cases``, with each GPU family's highest measured MFU in its record."""
    fitted, _ = fit(cases, start=start)
    return fitted.model_copy(update={"hardware": [with_highest_mfu(h, list(cases)) for h in fitted.hardware]})


def main(argv: Sequence[str] | None = None) -> int:
    """Refit ``perf/data/efficiency.toml`` on every source, then predict each source with constants fitted
    without it and write the residuals the prediction intervals use (``perf/data/loso_residuals.csv``).
    ``--no-loso``: the fit only; ``--loso-only``: the residuals only, under the installed constants."""
    options = set(argv or ())
    folder = calibration_dir()
    cases = load_cases(folder)
    sources = sorted({case.source for case in cases})
    unknown = options - {"--no-loso", "--loso-only"}
    if unknown:
        print(f"unknown option(s) {', '.join(sorted(unknown))}: --no-loso or --loso-only", file=sys.stderr)
        return 2
    shipped = efficiency_file(EFFICIENCY_FILE)  # never a site overlay on MFUKIT_CATALOG
    if "--loso-only" in options:  # the residuals again, under the constants already fitted
        return _write_loso(cases, shipped)
    print(f"{len(cases)} measured runs of {len(sources)} sources; fitting on all of them", file=sys.stderr)
    # from the neutral start every leave-one-source-out fold takes: the shipped constants are a function of the
    # data, not of the fits before (a constant no run moves stays neutral, not where an earlier fit left it)
    fitted = calibrated(cases, start=neutral_prior(shipped))
    provenance = fitted.provenance.model_copy(
        update={
            "data": "benchmarks/data/calibration",
            "files": file_digests(folder),
            "split": f"every source fitted ({', '.join(sources)}), at most {MAX_ROWS_PER_GROUP} rows of each "
            "(source, accelerator) group; GPU and framework constants first on the runs inside one node, then "
            "each network profile on every multi-node run on it with no pipeline across nodes, then the "
            "framework constants and each GPU family's rank jitter on every run; accuracy and the prediction "
            "intervals come from leave-one-source-out refits (perf/data/loso_residuals.csv)",
            "fitted": date.today(),
            "objective": f"soft-L1 of the log error of tokens/s per GPU, scale {LOSS_SCALE}, each (source, "
            "accelerator) group weighted equally; Levenberg-Marquardt from the neutral start of every fold",
            "hbm_fraction_why": "not fitted: element-wise kernels are taken to move 80 % of the datasheet HBM "
            "bandwidth (copy kernels reach ~90 % on A100/H100, multi-input fused kernels less); element-wise "
            "work is a few % of a large model's step",
        }
    )
    fitted = fitted.model_copy(update={"provenance": provenance})
    write_file(fitted, EFFICIENCY_FILE)
    return 0 if "--no-loso" in options else _write_loso(cases, fitted)


def _write_loso(cases: Sequence[Case], fitted: EfficiencyFile) -> int:
    """Predict every source with constants fitted without it; write the residual table the intervals use."""
    from mfukit.perf.loso import leave_one_source_out, stderr_progress
    from mfukit.perf.uncertainty import RESIDUALS_FILE, residual_of, write_residuals

    predicted, ceilings = leave_one_source_out(cases, start=fitted, progress=stderr_progress)
    measured = np.asarray([case.measured_tokens_per_s_per_gpu for case in cases])
    errors = np.log(measured / predicted).tolist()
    write_residuals(
        RESIDUALS_FILE,
        [residual_of(c, e, k) for c, e, k in zip(cases, errors, ceilings.tolist(), strict=True)],
    )
    median, p90 = error_summary(predicted / measured - 1)
    print(f"leave-one-source-out: median {median:.1%}, p90 {p90:.1%} over {len(cases)} runs", file=sys.stderr)
    return 0


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_file(content: EfficiencyFile, path: Path) -> None:
    """The efficiency file as TOML (written to a temporary file, then renamed)."""
    lines = [
        "# Efficiency profiles of the step-time model (mfukit.perf.efficiency).",
        "# Fitted by `python -m mfukit.perf.calibrate`; edit borrowed profiles by hand, refit the others.",
        "",
        "[provenance]",
    ]
    provenance = content.provenance.model_dump()
    files = provenance.pop("files")
    lines += [f"{key} = {_toml_value(value)}" for key, value in provenance.items()]
    lines += ["", "[provenance.files]"] + [f'"{name}" = "{digest}"' for name, digest in files.items()]
    tables: tuple[tuple[str, Sequence[HardwareProfile | FrameworkProfile | NetworkProfile]], ...] = (
        ("hardware", content.hardware),
        ("framework", content.framework),
        ("network", content.network),
    )
    for table, profiles in tables:
        for profile in profiles:
            data = profile.model_dump(exclude_none=True)
            fit_record = data.pop("fit", None)
            lines += ["", f"[[{table}]]"] + [f"{key} = {_toml_value(value)}" for key, value in data.items()]
            if fit_record:
                lines += ["", f"[{table}.fit]"] + [
                    f"{key} = {_toml_value(value)}" for key, value in fit_record.items()
                ]
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    temporary.replace(path)
    _load_efficiency.cache_clear()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
