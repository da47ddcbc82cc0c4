"""The scenario flags of the commands the performance model answers; their views are
:mod:`mfukit.perf.views`."""

from __future__ import annotations

PERF_FLAGS = (
    "model",
    "tokens",
    "seq_len",
    "global_batch_tokens",
    "global_batch_size",
    "micro_batch_size",
    "precision",
    "attention_flops",
    "attention",
    "offload_optimizer",
    "offload_optimizer_step",
    "offload_params",
    "offload_activations",
    "framework",
    "compile",
    "tp_comm_overlap",
    "fp8_recipe",
    "system",
    "gpu",
    "gpus",
    "nodes",
    "nics_per_node",
    "nic_rate",
    "hbm_headroom",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "first_stage_layers",
    "last_stage_layers",
    "sequence_parallel",
    "recompute",
    "zero",
    "fsdp",
)
"""The scenario flags of the commands the performance model answers (estimate, plan, size)."""
