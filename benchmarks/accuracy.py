"""How close the step-time model comes to measured training throughput on sources it was never fitted on.

Peers: every usable row of ``benchmarks/data/calibration/`` (LLM Foundry's MPT benchmarks, vTrain's
Megatron-DeepSpeed runs, the Ultra-Scale Playbook's nanotron sweep, torchtitan's Llama 3.1 runs, and the
runs gathered from papers and vendor tables in ``gathered_runs.csv``), each turned into a model, layout and
cluster by ``mfukit.perf.calibration_data``. The Megatron-stack rows of shared/reference are reserved for
checking the model: never fitted, they are predicted by ``mfukit validate`` as a site's file.

Metric, leave-one-source-out: each source's rows are predicted by constants fitted without that source
(``mfukit.perf.loso``: every constant refitted, a stack or network only that source ran falls back to the
defaults), |predicted - measured| / measured of tokens/s per GPU (= of MFU in any one FLOP convention), per
source and overall. Overall is given two ways: every source weighted equally (a 3,000-row sweep counts as one
source; the headline) and every row weighted equally. In-sample figures (constants fitted on every source)
sit beside them. A constant answer is the peer a model must beat: each source predicted at the median MFU of
the other sources' runs. Coverage: the share of held-out rows inside their 80 % interval, the interval built
from the other sources' residuals (``mfukit.perf.uncertainty``; target 75-85 %). Prints the tables and writes
``benchmarks/results/accuracy.json`` and ``benchmarks/results/accuracy.md``, the table of
``docs/performance-model.md`` with each source under its title (:data:`SOURCE_TITLES`; a unit test checks the
page's figures against the residual table, source by source).

Run: ``python benchmarks/accuracy.py`` reads the held-out predictions that ``python -m mfukit.perf.calibrate``
wrote (``perf/data/loso_residuals.csv``, checked against the data); ``--refit`` fits every fold again
(once per source family: many minutes).
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mfukit.perf.calibration_data import load_cases, measured_mfu
from mfukit.perf.efficiency import efficiency_file
from mfukit.perf.loso import leave_one_source_out, predict_with, stderr_progress
from mfukit.perf.measured_runs import Case
from mfukit.perf.uncertainty import (
    Residual,
    annotated,
    case_regime,
    interval_for,
    load_residuals,
    residual_of,
)

RESULTS = Path(__file__).parent / "results" / "accuracy.json"
TABLE = RESULTS.with_suffix(".md")
TARGET_MEDIAN, TARGET_P90 = 0.07, 0.15
TARGET_COVERAGE = (0.75, 0.85)


# How docs/performance-model.md names each source (source_group of the calibration data) in its accuracy table
SOURCE_TITLES = {
    "baai_flagperf": "BAAI FlagPerf (Megatron-Core, Megatron-DeepSpeed, ZeRO-3; A800, A100, H100, H800)",
    "bigscience_bloom_tr11": "BigScience BLOOM-176B (Megatron-DeepSpeed, 384 A100)",
    "bigscience_tr11_prequel": "BigScience tr11 prequel layouts (A100)",
    "deepspeed_deepcompile_blog": "DeepSpeed DeepCompile blog (ZeRO-3, offload; H100)",
    "ds4sci_longseq_megatron": "DeepSpeed4Science long sequences (Megatron-DeepSpeed, TP 32 on 32 A100-40GB)",
    "gptneox20b_paper": "GPT-NeoX-20B paper (A100-40GB)",
    "ibm_fms_fsdp": "IBM fms-fsdp (FSDP/HSDP, A100 and H100)",
    "llmfoundry_mpt": "LLM Foundry MPT (FSDP, A100/H100)",
    "nemo_automodel_h100": "NeMo AutoModel (H100)",
    "nemo_launcher_gpt3_5b_scaling": "NeMo launcher GPT-3 5B scaling (8-256 A100)",
    "nemo_long_sequence_h100": "NeMo long-sequence recipes (CP, H100)",
    "nemo_megatron_bridge": "NeMo / Megatron-Bridge recipes (H100, B200, GB200)",
    "nemo_perf_summary_2407": "NeMo performance summary 24.07 (FP8, H100)",
    "olmo_core": "AI2 OLMo-core (FSDP2, compile, Float8; one 8 x H100 node)",
    "opt175b_paper": "OPT-175B paper (FSDP, 992 A100)",
    "torchao_float8_torchtitan": "torchao Float8 on torchtitan (H100, MI300X)",
    "torchtitan": "torchtitan (Llama 3.1, H100)",
    "torchtitan_405b_h100_2024": "torchtitan Llama 3.1 405B (FSDP2 x TP 8, 128 H100, 2024 docs)",
    "torchtitan_a100_2024": "torchtitan on A100 (FSDP2, Llama 2 and 3, 2024 docs)",
    "torchtitan_h200_trainy": "torchtitan on H200",
    "ultrascale_playbook": "Ultra-Scale Playbook sweep (nanotron, 1-64 H100 nodes)",
    "vtrain_multi": "vTrain, 64-512 A100 (Megatron-DeepSpeed)",
    "vtrain_single": "vTrain, one 8 x A100 node",
    "zero_bubble_megatron": "Zero Bubble paper, Megatron-LM 1F1B (pipeline, 8-32 A100)",
}


def percent(value: float, signed: bool = False) -> str:
    """A fraction as the docs print it: one decimal, thousands separated, "%" after a space."""
    return f"{value * 100:+,.1f} %" if signed else f"{value * 100:,.1f} %"


def markdown_table(
    rows: list[dict[str, Any]], overall: dict[str, Any], every_row: dict[str, Any]
) -> list[str]:
    """The accuracy table of docs/performance-model.md: one line per source under its title, then overall (its
    headline figures in bold) and every row weighted equally (no in-sample column)."""

    def line(row: dict[str, Any], title: str, bold: bool = False) -> str:
        def b(text: str) -> str:
            return f"**{text}**" if bold else text

        in_sample = (
            f"{row['in_sample_median'] * 100:,.1f} / {row['in_sample_p90'] * 100:,.1f} %"
            if "in_sample_median" in row
            else ""
        )
        cells = [
            b(title),
            f"{row['rows']:,}",
            b(percent(row["median_abs_rel_error"])),
            b(percent(row["p90_abs_rel_error"])),
            percent(row["median_signed_rel_error"], signed=True),
            b(f"{row['coverage'] * 100:.0f} %"),
            in_sample,
        ]
        return "| " + " | ".join(cells) + " |"

    return [
        "| source | runs | median | p90 | bias | inside 80 % | in-sample median / p90 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(line(row, SOURCE_TITLES.get(row["group"], row["group"])) for row in rows),
        line(overall, overall["group"], bold=True),
        line(every_row, every_row["group"]),
    ]


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    cumulative = (cumulative - 0.5 * weights[order]) / cumulative[-1]
    return float(np.interp(q, cumulative, values[order]))


def summarise(name: str, errors: np.ndarray, weights: np.ndarray | None = None) -> dict[str, object]:
    magnitudes = np.abs(errors)
    w = np.ones(len(errors)) if weights is None else weights
    median, p90 = weighted_quantile(magnitudes, w, 0.5), weighted_quantile(magnitudes, w, 0.9)
    return {
        "group": name,
        "rows": len(errors),
        "median_abs_rel_error": median,
        "p90_abs_rel_error": p90,
        "median_signed_rel_error": weighted_quantile(errors, w, 0.5),
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
    measured = np.asarray([c.measured_tokens_per_s_per_gpu for c in cases])
    in_sample = predict_with(efficiency_file(), cases)[0] / measured - 1
    held_out_tokens, ceilings = (
        leave_one_source_out(cases, progress=stderr_progress) if "--refit" in sys.argv else _from_table(cases)
    )
    held_out = held_out_tokens / measured - 1
    residuals = annotated(
        [
            residual_of(c, float(np.log(m / p)), k)
            for c, m, p, k in zip(cases, measured, held_out_tokens, ceilings, strict=True)
        ]
    )
    inside = np.asarray(
        [_inside(c, p, k, residuals) for c, p, k in zip(cases, held_out_tokens, ceilings, strict=True)]
    )
    constant = _constant_answer(cases)
    by_source: dict[str, list[int]] = collections.defaultdict(list)
    for index, case in enumerate(cases):
        by_source[case.source].append(index)
    sizes = {source: len(idx) for source, idx in by_source.items()}
    per_source = 1.0 / np.asarray([sizes[c.source] for c in cases])
    rows = []
    for source, idx in sorted(by_source.items()):
        i = np.asarray(idx)
        row = summarise(source, held_out[i])
        row |= {
            "in_sample_median": summarise(source, in_sample[i])["median_abs_rel_error"],
            "in_sample_p90": summarise(source, in_sample[i])["p90_abs_rel_error"],
            "constant_median": summarise(source, constant[i])["median_abs_rel_error"],
            "coverage": float(inside[i].mean()),
            "accounting": cases[idx[0]].accounting,
        }
        rows.append(row)
    overall = summarise("all sources, weighted equally", held_out, per_source) | {
        "in_sample_median": summarise("", in_sample, per_source)["median_abs_rel_error"],
        "in_sample_p90": summarise("", in_sample, per_source)["p90_abs_rel_error"],
        "constant_median": summarise("", constant, per_source)["median_abs_rel_error"],
        "constant_p90": summarise("", constant, per_source)["p90_abs_rel_error"],
        "coverage": float(np.average(inside, weights=per_source)),
    }
    every_row = summarise("all rows, weighted equally", held_out) | {
        "coverage": float(inside.mean()),
        "constant_median": summarise("", constant)["median_abs_rel_error"],
    }
    print(
        f"leave-one-source-out (target median <= {TARGET_MEDIAN:.0%}, p90 <= {TARGET_P90:.0%}; coverage of the "
        f"80 % interval {TARGET_COVERAGE[0]:.0%}-{TARGET_COVERAGE[1]:.0%})\n"
    )
    header = (
        f"{'source':34} {'rows':>5} {'median':>7} {'p90':>7} {'bias':>7} {'cover':>6}"
        f" {'in-sample med/p90':>18} {'constant':>9}  target"
    )
    print(header)
    for row in [*rows, overall, every_row]:
        in_sample_text = (
            f"{row['in_sample_median']:.1%} / {row['in_sample_p90']:.1%}" if "in_sample_median" in row else ""
        )
        print(
            f"{row['group']:34} {row['rows']:>5} {row['median_abs_rel_error']:>7.1%} {row['p90_abs_rel_error']:>7.1%}"
            f" {row['median_signed_rel_error']:>+7.1%} {row['coverage']:>6.0%} {in_sample_text:>18}"
            f" {row['constant_median']:>9.1%}  {'met' if row['meets_target'] else 'missed'}"
        )
    order = ranking(cases, held_out_tokens)
    print("\nranking within each (model, GPU count, batch) group of measured layouts (held-out predictions)")
    print(
        f"{'source':24} {'groups':>6} {'median Spearman':>16} {'median share ranked above the fastest':>38}"
    )
    for row in order:
        print(
            f"{row['source']:24} {row['groups']:>6} {row['median_spearman']:>16.2f}"
            f" {row['median_share_ranked_above_the_measured_fastest']:>38.1%}"
        )
    floors = twins(cases)
    print(
        "\nUltra-Scale runs measured twice (ZeRO-0 and ZeRO-1, nothing else changed): the error no model of"
    )
    print("the layout can get below on both, (R - 1) / (R + 1)")
    print(f"{'placement':58} {'pairs':>5} {'ratio med':>9} {'p90':>6} {'floor med':>9} {'p90':>6}")
    for row in floors:
        print(
            f"{row['group']:58} {row['pairs']:>5} {row['median_ratio']:>9.2f} {row['p90_ratio']:>6.2f}"
            f" {row['median_error_floor']:>9.1%} {row['p90_error_floor']:>6.1%}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    figures = {
        "per_source": rows,
        "overall": overall,
        "every_row": every_row,
        "ranking": order,
        "ultrascale_twins": floors,
    }
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    TABLE.write_text("\n".join(markdown_table(rows, overall, every_row)) + "\n")
    print(f"\nwrote {RESULTS} and {TABLE} (the table of docs/performance-model.md)")


def _from_table(cases: list[Case]) -> tuple[np.ndarray, np.ndarray]:
    """The held-out predictions ``python -m mfukit.perf.calibrate`` made and their kernel ceilings (its residual
    table holds ln(measured / predicted) of every run, from constants fitted without the run's source)."""
    table = {(r.source, r.row_id): r for r in load_residuals()}
    missing = [c for c in cases if (c.source, c.row_id) not in table]
    if missing:
        raise SystemExit(
            f"{len(missing)} runs are not in the residual table: run python -m mfukit.perf.calibrate, or pass --refit"
        )
    rows = [table[(c.source, c.row_id)] for c in cases]
    tokens = [c.measured_tokens_per_s_per_gpu / np.exp(r.log_error) for c, r in zip(cases, rows, strict=True)]
    return np.asarray(tokens), np.exp([r.ceiling for r in rows])


def _inside(case: Case, predicted: float, ceiling: float, residuals: list[Residual]) -> bool:
    interval = interval_for(case_regime(case), exclude_source=case.source, residuals=residuals)
    low, high = interval.capped(ceiling).around(predicted)
    return bool(low <= case.measured_tokens_per_s_per_gpu <= high)


def _constant_answer(cases: list[Case]) -> np.ndarray:
    """The error of answering, for every run of a source, the median MFU of the other sources' runs."""
    mfus = np.asarray([measured_mfu(c) for c in cases])
    sources = np.asarray([c.source for c in cases])
    out = np.empty(len(cases))
    for source in set(sources.tolist()):
        here = sources == source
        out[here] = float(np.median(mfus[~here])) / mfus[here] - 1
    return out


if __name__ == "__main__":
    main()
