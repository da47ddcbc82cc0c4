"""Fit a scale-out network's NCCL profile (``[[network]]`` in ``perf/data/efficiency.toml``) to measured runs.

Where NCCL's InfiniBand constants do not describe a network (AWS EFA: NCCL runs through the aws-ofi-nccl
plugin over the SRD transport), two physical numbers say how collectives behave on it: the fraction of the
NICs' line rate they move (nccl-tests' busbw over the line rate) and an extra latency per network step of
every algorithm. Both are fitted, after the GPU and framework constants, on the runs that crossed
that network: the multi-node runs whose pipeline stays inside a node (a pipeline's send/receive stalls
across the network are a framework effect the collective model does not describe; the accuracy table of
docs/performance-model.md shows them).
The loss is the same soft-L1 of the log error as the rest
of the calibration, each source weighted equally (each run equally within its source).

The same two numbers, fitted instead to published nccl-tests results on that network
(``python -m mfukit.perf.calibrate_network RESULTS.csv``), are a catalog fact of the link (``[nccl]`` in
``catalog/data/fabrics/``): what the collective model uses when no training run has measured the network, as
in the leave-one-source-out fold of the only source that ran on it.
"""

from __future__ import annotations

import collections
import csv
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mfukit import catalog
from mfukit.comm.collectives import COLLECTIVES, Collective
from mfukit.comm.model import collective_time_s
from mfukit.comm.topology import CommTopology, from_system
from mfukit.comm.tuning import constants
from mfukit.core.hardware import Accelerator, System
from mfukit.errors import InputError
from mfukit.perf.efficiency import Efficiency, FitRecord, NetworkProfile, network_name
from mfukit.perf.evaluator import Evaluator, error_summary, levenberg_marquardt, soft_l1
from mfukit.perf.layouts import Floats
from mfukit.perf.measured_runs import Case

# Searched in logit / log space: a busbw fraction of 2-99 % of line rate, 0.1 us - 2 ms per network step.
_EFFICIENCY_BOUNDS = (math.log(0.02 / 0.98), math.log(0.99 / 0.01))
_LATENCY_BOUNDS = (math.log(1e-7), math.log(2e-3))


def network_cases(cases: Sequence[Case], name: str) -> list[Case]:
    """The runs that cross network ``name`` (a link, or one system's network) with no pipeline stage boundary
    on it."""
    return [
        case
        for case in cases
        if network_name(case.system) == name
        and case.num_gpus > case.system.gpus_per_node
        and case.layout.pp == 1
    ]


def _decode(profile: NetworkProfile, x: Floats) -> NetworkProfile:
    logit = min(max(float(x[0]), _EFFICIENCY_BOUNDS[0]), _EFFICIENCY_BOUNDS[1])
    log_latency = min(max(float(x[1]), _LATENCY_BOUNDS[0]), _LATENCY_BOUNDS[1])
    return profile.model_copy(
        update={"efficiency": 1 / (1 + math.exp(-logit)), "step_latency_s": math.exp(log_latency)}
    )


def _least_loss(
    profile: NetworkProfile,
    predicted: Callable[[NetworkProfile], Floats],
    measured: Floats,
    weights: Floats,
) -> NetworkProfile:
    """``profile`` with the efficiency and step latency that minimise the soft-L1 of ln(predicted / measured),
    each measurement weighted as ``weights`` says; from a neutral start, not the previous fit (which may sit on
    a bound, where the clipping flattens the loss)."""

    def residuals(x: Floats) -> Floats:
        return soft_l1(np.log(predicted(_decode(profile, x)) / measured), weights)

    return _decode(profile, levenberg_marquardt(residuals, np.asarray([0.0, math.log(1e-5)]), iterations=25))


def fit_network(
    profile: NetworkProfile, cases: Sequence[Case], efficiency: Callable[[str, str], Efficiency]
) -> tuple[NetworkProfile, tuple[int, float, float] | None]:
    """``profile`` fitted on its runs of ``cases`` under the (already fitted) GPU and framework constants,
    and (rows, median, p90) of its fit error; unfitted (NCCL's constants) when no run crossed the network."""
    rows = network_cases(cases, profile.name)
    if not rows:  # nothing measured it: NCCL's InfiniBand constants, said in the estimate's notes
        return profile.model_copy(update={"efficiency": None, "step_latency_s": None, "fit": None}), None
    measured = np.asarray([case.measured_tokens_per_s_per_gpu for case in rows])
    # each source that crossed the network weighs the same, its runs equally within it
    per_source = collections.Counter(case.source for case in rows)
    weights = np.asarray([1.0 / (len(per_source) * per_source[case.source]) for case in rows])

    def predicted(candidate: NetworkProfile) -> Floats:
        return Evaluator(rows, networks={profile.name: candidate}).predict(efficiency)

    fitted = _least_loss(profile, predicted, measured, weights)
    median, p90 = error_summary(predicted(fitted) / measured - 1)
    sources = sorted({case.source for case in rows})
    record = FitRecord(sources=sources, rows=len(rows), median_abs_rel_error=median, p90_abs_rel_error=p90)
    return fitted.model_copy(update={"fit": record}), (len(rows), median, p90)


@dataclass(frozen=True)
class NcclTestsPoint:
    """One nccl-tests measurement: a collective of ``size_bytes`` (nccl-tests' size column) on ``gpus`` GPUs
    of ``nodes`` nodes, and its time (out of place)."""

    collective: Collective
    nodes: int
    gpus: int
    size_bytes: float
    seconds: float


NCCL_TESTS_COLUMNS = ("system", "collective", "nodes", "gpus", "size_bytes", "time_us")


def read_nccl_tests(path: Path) -> tuple[System, list[NcclTestsPoint]]:
    """The system and the measurements of an nccl-tests results file (``benchmarks/data/comms/``: one row per
    collective, node count and size, with the columns of :data:`NCCL_TESTS_COLUMNS`)."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", source=str(path), expected="a CSV file") from None
    if not rows:
        raise InputError(
            "has no rows", source=str(path), expected=f"the columns {', '.join(NCCL_TESTS_COLUMNS)}"
        )
    missing = [name for name in NCCL_TESTS_COLUMNS if name not in rows[0]]
    if missing:
        raise InputError(f"lacks the column(s) {', '.join(missing)}", source=str(path))
    systems = {row["system"] for row in rows}
    if len(systems) != 1:
        raise InputError(
            f"names {len(systems)} systems", source=str(path), field="system", expected="one system per file"
        )
    system = catalog.system(systems.pop(), field="system")
    points = [_nccl_tests_point(path, number, row, system) for number, row in enumerate(rows, start=2)]
    return system, points


def _nccl_tests_point(path: Path, number: int, row: dict[str, str], system: System) -> NcclTestsPoint:
    """One row of an nccl-tests results file, checked: whole nodes of ``system``, finite positive numbers."""

    def refused(message: str, field: str, expected: str) -> InputError:
        return InputError(f"line {number}: {message}", source=str(path), field=field, expected=expected)

    collective = row["collective"]
    if collective not in COLLECTIVES:
        raise refused(f"unknown collective {collective!r}", "collective", f"one of {', '.join(COLLECTIVES)}")
    try:
        nodes, gpus = int(row["nodes"]), int(row["gpus"])
        size, seconds = float(row["size_bytes"]), float(row["time_us"]) * 1e-6
    except (TypeError, ValueError):  # a short row leaves its last cells None
        raise refused(
            "nodes, gpus, size_bytes and time_us must be numbers", "nodes", "whole counts, finite numbers"
        ) from None
    if not (math.isfinite(size) and math.isfinite(seconds) and size > 0 and seconds > 0):
        raise refused(
            "size_bytes and time_us must be finite and positive", "time_us", "e.g. 33554432 and 427.1"
        )
    if nodes < 2 or gpus % nodes or not nodes <= gpus <= nodes * system.gpus_per_node:
        raise refused(
            f"{gpus} GPUs on {nodes} node(s)",
            "gpus",
            f"2 or more nodes, the same ranks on each, at most {system.gpus_per_node} per {system.name} node",
        )
    return NcclTestsPoint(collective, nodes, gpus, size, seconds)


def nccl_tests_times(
    points: Sequence[NcclTestsPoint],
    system: System,
    accelerator: Accelerator,
    efficiency: float,
    latency_s: float,
) -> Floats:
    """The collective model's seconds for each of ``points`` with the network at ``efficiency`` of line rate
    and ``latency_s`` more per network step: one topology per node count, the sizes of one collective on one
    group timed together."""
    times = np.empty(len(points))
    groups: dict[tuple[Collective, int, int], list[int]] = collections.defaultdict(list)
    for index, point in enumerate(points):
        groups[(point.collective, point.nodes, point.gpus)].append(index)
    topologies: dict[int, CommTopology] = {}
    for (collective, nodes, gpus), indices in groups.items():
        if nodes not in topologies:
            built, _ = from_system(system, accelerator, num_nodes=nodes)
            topologies[nodes] = built.with_options(net_efficiency=efficiency, net_step_latency_s=latency_s)
        sizes = [points[index].size_bytes for index in indices]
        times[indices] = collective_time_s(
            collective, sizes, topologies[nodes], gpus, gpus_per_domain=system.gpus_per_node
        )
    return times


def fit_to_nccl_tests(
    points: Sequence[NcclTestsPoint], system: System, accelerator: Accelerator
) -> tuple[float, float]:
    """The network's efficiency and extra step latency that best reproduce ``points`` (:func:`_least_loss`,
    each measurement weighted equally)."""

    def predicted(candidate: NetworkProfile) -> Floats:
        assert candidate.efficiency is not None and candidate.step_latency_s is not None
        return nccl_tests_times(points, system, accelerator, candidate.efficiency, candidate.step_latency_s)

    measured = np.asarray([point.seconds for point in points])
    neutral = NetworkProfile(name=system.scale_out_fabric)
    fitted = _least_loss(neutral, predicted, measured, np.full(len(points), 1.0 / len(points)))
    assert fitted.efficiency is not None and fitted.step_latency_s is not None
    return fitted.efficiency, fitted.step_latency_s


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mfukit.perf.calibrate_network RESULTS.csv``: fit a network's ``[nccl]`` catalog block to
    nccl-tests results, and print it with the model's error on them before and after."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m mfukit.perf.calibrate_network RESULTS.csv", file=sys.stderr)
        return 2
    try:
        system, points = read_nccl_tests(Path(args[0]))
    except InputError as error:
        print(f"error: {error.render()}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: {args[0]}: {error.strerror}", file=sys.stderr)
        return 2
    accelerator = catalog.accelerator(system.accelerator)
    measured = np.asarray([point.seconds for point in points])
    efficiency, latency_s = fit_to_nccl_tests(points, system, accelerator)
    nodes = sorted({point.nodes for point in points})
    for label, (eff, lat) in {
        "NCCL's InfiniBand constants": (constants().network.efficiency, 0.0),
        "fitted": (efficiency, latency_s),
    }.items():
        median, p90 = error_summary(nccl_tests_times(points, system, accelerator, eff, lat) / measured - 1)
        print(f"# {label}: median {median:.1%}, p90 {p90:.1%} of {len(points)} times", file=sys.stderr)
    print(f"# {len(points)} results, {nodes[0]}-{nodes[-1]} nodes of {system.name}")
    print(f'[nccl]\nefficiency = {efficiency:.3f}\nstep_latency = "{latency_s * 1e6:.2f}us"')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
