"""How close the step-time model comes to measured training throughput, on runs it was not fitted on.

Peers: every usable row of ``benchmarks/data/calibration/`` (LLM Foundry's MPT benchmarks, vTrain's
Megatron-DeepSpeed runs on 64-512 A100s and on one 8-GPU node, the Ultra-Scale Playbook's nanotron sweep on
H100, torchtitan's Llama 3.1 runs), each turned into a model, layout and cluster by
``mfukit.perf.calibration_data``. The split is deterministic: rows whose SHA-256 of ``"<source>:<row_id>"``
is below 3 modulo 10 were fitted by ``python -m mfukit.perf.calibrate``; the others (and every torchtitan
row) are the test set reported here.

Metric: |predicted - measured| / measured of TFLOP/s per GPU in the source's own accounting. Model FLOPs
(MFU-style: MPT, Ultra-Scale, torchtitan) and hardware FLOPs with the recompute (HFU-style: vTrain, whose
Megatron-DeepSpeed logs count the recomputed forward) are both FLOPs per token x tokens/s, so predicted and
measured share the FLOP count and the error is the error of tokens/s per GPU; the table names the
accounting so that an HFU-style figure is never read as MFU. Prints median and p90 per source and writes
``benchmarks/results/accuracy.json``.

Run: ``python benchmarks/accuracy.py``.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np

from mfukit.perf.calibration_data import Case, load_cases
from mfukit.perf.efficiency import efficiency_for
from mfukit.perf.evaluator import Evaluator, error_summary

RESULTS = Path(__file__).parent / "results" / "accuracy.json"
TARGET_MEDIAN, TARGET_P90 = 0.07, 0.15


def predictions(cases: list[Case]) -> np.ndarray:
    by_name = {case.accelerator.name: case.accelerator for case in cases}
    cache: dict[tuple[str, str], object] = {}

    def efficiency(accelerator: str, framework: str):  # type: ignore[no-untyped-def]
        key = (accelerator, framework)
        if key not in cache:
            cache[key] = efficiency_for(by_name[accelerator], framework)
        return cache[key]

    return Evaluator(cases).predict(efficiency)


def summarise(name: str, errors: np.ndarray, accounting: str) -> dict[str, object]:
    median, p90 = error_summary(errors)
    return {
        "group": name,
        "rows": len(errors),
        "accounting": accounting,
        "median_abs_rel_error": median,
        "p90_abs_rel_error": p90,
        "median_signed_rel_error": float(np.median(errors)),
        "meets_target": bool(median <= TARGET_MEDIAN and p90 <= TARGET_P90),
    }


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks_a, ranks_b = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def ranking(cases: list[Case], predicted: np.ndarray) -> list[dict[str, object]]:
    """Per source: does the model order the layouts of one (model, GPU count, batch) group as they measured?
    Spearman correlation per group, and where the measured-fastest layout lands in the model's order."""
    groups: dict[tuple[object, ...], list[int]] = collections.defaultdict(list)
    for index, case in enumerate(cases):
        key = (
            case.source,
            case.label,
            case.num_gpus,
            case.workload.global_batch_sequences,
            case.workload.seq_len,
        )
        groups[key].append(index)
    out: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for key, members in groups.items():
        if len(members) < 5:
            continue
        idx = np.asarray(members)
        measured = np.asarray([cases[i].measured_tokens_per_s_per_gpu for i in idx])
        fastest = int(np.argmax(measured))
        share_above = float((predicted[idx] > predicted[idx][fastest]).sum()) / len(idx)
        out[str(key[0])].append((spearman(measured, predicted[idx]), share_above))
    return [
        {
            "source": source,
            "groups": len(values),
            "median_spearman": float(np.median([v[0] for v in values])),
            "median_share_ranked_above_the_measured_fastest": float(np.median([v[1] for v in values])),
        }
        for source, values in sorted(out.items())
    ]


def placement(case: Case) -> str:
    """Where a run's collectives go: one node, or which dimension leaves the node (pipeline first)."""
    if case.num_gpus <= case.system.gpus_per_node:
        return "one node"
    layout = case.layout
    if layout.pp > 1:
        return "several nodes, pipeline across nodes"
    if layout.tp * layout.cp > case.system.gpus_per_node:
        return "several nodes, TP across nodes"
    return "several nodes, DP across nodes"


def twins(cases: list[Case]) -> list[dict[str, object]]:
    """A model-free floor on the error: the Ultra-Scale sweep ran many layouts twice, with ZeRO-0 and with
    ZeRO-1 and nothing else changed. ZeRO-1 only swaps the DP all-reduce for a reduce-scatter and an
    all-gather (a few % of a step), so a model of the layout can predict both runs alike at best, and its
    error on a pair measured R times apart is at least (R - 1) / (R + 1) on both."""
    pairs: dict[tuple[object, ...], dict[int, float]] = collections.defaultdict(dict)
    names: dict[tuple[object, ...], str] = {}
    for case in cases:
        if case.source != "ultrascale_playbook":
            continue
        layout = case.layout
        key = (case.label, case.num_gpus, layout.tp, layout.pp, layout.dp, case.micro_batch_size)
        pairs[key][layout.zero] = case.measured_tokens_per_s_per_gpu
        names[key] = placement(case)
    floors: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for key, measured in pairs.items():
        if 0 in measured and 1 in measured:
            ratio = max(measured.values()) / min(measured.values())
            floors[names[key]].append((ratio, (ratio - 1) / (ratio + 1)))
    return [
        {
            "group": f"ultrascale_playbook / {name}",
            "pairs": len(values),
            "median_ratio": float(np.median([v[0] for v in values])),
            "p90_ratio": float(np.quantile([v[0] for v in values], 0.9)),
            "median_error_floor": float(np.median([v[1] for v in values])),
            "p90_error_floor": float(np.quantile([v[1] for v in values], 0.9)),
        }
        for name, values in sorted(floors.items())
    ]


def main() -> None:
    cases = load_cases()
    predicted = predictions(cases)
    errors = predicted / np.asarray([c.measured_tokens_per_s_per_gpu for c in cases]) - 1
    groups: dict[tuple[str, bool], list[int]] = collections.defaultdict(list)
    details: dict[str, list[int]] = collections.defaultdict(list)
    for index, case in enumerate(cases):
        groups[(case.source, case.fitted)].append(index)
        if not case.fitted:
            details[f"{case.source} / {case.accelerator.name}"].append(index)
            details[f"{case.source} / {placement(case)}"].append(index)
    accounting = {case.source: case.accounting for case in cases}
    test = [
        summarise(source, errors[idx], accounting[source])
        for (source, fitted), idx in groups.items()
        if not fitted
    ]
    fit = [
        summarise(source, errors[idx], accounting[source])
        for (source, fitted), idx in groups.items()
        if fitted
    ]
    breakdown = [
        summarise(name, errors[idx], accounting[name.split(" / ")[0]])
        for name, idx in sorted(details.items())
    ]
    everything = [i for (_, fitted), idx in groups.items() if not fitted for i in idx]
    total = summarise("all test rows", errors[everything], "mixed")
    print(f"target: median <= {TARGET_MEDIAN:.0%}, p90 <= {TARGET_P90:.0%} (test rows, never fitted)\n")
    header = f"{'source (test rows)':58} {'rows':>5} {'accounting':>10} {'median':>8} {'p90':>8} {'bias':>8}  target"
    for title, rows in (
        ("", [*test, total]),
        ("breakdown of the test rows", breakdown),
        (
            "fit-split rows (GPU and framework constants fitted inside one node, the EFA profile on several)",
            fit,
        ),
    ):
        if title:
            print(f"\n{title}")
        print(header if not title.startswith("fit") else header.replace("(test rows)", "(fit split)    "))
        for row in rows:
            print(
                f"{row['group']:58} {row['rows']:>5} {row['accounting']:>10} {row['median_abs_rel_error']:>8.1%}"
                f" {row['p90_abs_rel_error']:>8.1%} {row['median_signed_rel_error']:>+8.1%}"
                f"  {'met' if row['meets_target'] else 'missed'}"
            )
    floors = twins(cases)
    print(
        "\nUltra-Scale runs measured twice (ZeRO-0 and ZeRO-1, nothing else changed): how far apart, and the"
    )
    print("error no model of the layout can get below on both (R - 1) / (R + 1)")
    print(f"{'placement':58} {'pairs':>5} {'ratio med':>9} {'p90':>6} {'floor med':>9} {'p90':>6}")
    for row in floors:
        print(
            f"{row['group']:58} {row['pairs']:>5} {row['median_ratio']:>9.2f} {row['p90_ratio']:>6.2f}"
            f" {row['median_error_floor']:>9.1%} {row['p90_error_floor']:>6.1%}"
        )
    order = ranking(cases, predicted)
    print("\nranking within each (model, GPU count, batch) group of measured layouts (all rows)")
    print(
        f"{'source':24} {'groups':>6} {'median Spearman':>16} {'median share ranked above the fastest':>38}"
    )
    for row in order:
        print(
            f"{row['source']:24} {row['groups']:>6} {row['median_spearman']:>16.2f}"
            f" {row['median_share_ranked_above_the_measured_fastest']:>38.1%}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    figures = {
        "test": test,
        "all_test": total,
        "breakdown": breakdown,
        "fit": fit,
        "ranking": order,
        "ultrascale_twins": floors,
    }
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
