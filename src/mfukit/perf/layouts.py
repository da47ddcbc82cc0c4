"""Many parallel layouts at once, as numpy arrays (one entry per configuration), and the fixed workload
they run.

The planner evaluates thousands of layouts per GPU count; the step-time and memory models take a
:class:`LayoutGrid` and return arrays. A single layout (``mfukit estimate``) is a grid of one. Layout
fields follow :class:`~mfukit.core.parallelism.Parallelism`; the sharding is one of the conventions of
:data:`mfukit.perf.model_states.SHARDING_NAMES`; ``num_microbatches`` is per pipeline per optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from mfukit import units
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, Recompute, stage_layer_counts
from mfukit.core.scenario import Fp8Recipe, OptimizerStepDevice, Precision
from mfukit.perf.activations import Kernels, SelectiveRecompute, recomputed_share
from mfukit.perf.flops import AttentionConvention
from mfukit.perf.memory import StepShape
from mfukit.perf.model_states import Fp8Weights, MainGrads, Sharding, sharding_of

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

SHARDINGS: tuple[Sharding, ...] = get_args(Sharding)
# A global batch given in tokens is a target, not a contract: frameworks need it to be a whole number of
# micro-batches per data-parallel rank, and "4M tokens" of 2,048-token sequences is 1,953 = 3^2 x 7 x 31
# sequences, which no power-of-two DP divides. Practitioners round it: the LLaMA paper's "4M tokens" ran as
# 2^22 = 2,048 sequences (+4.9 %). Each layout rounds the batch to its nearest multiple of dp x micro-batch
# when that moves it by at most this fraction; the loss is flat in the batch near the critical batch size
# (McCandlish et al. 2018, arXiv:1812.06162, fig. 7), so a few per cent more or fewer sequences per step
# train the same model, while a larger move would be a different recipe. A batch given in sequences is
# exact.
BATCH_ROUNDING_FRAC = 0.10
RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full")
# what tables and chart labels call each sharding
SHORT_SHARDING: dict[str, str] = {
    "none": "DDP",
    "distributed-optimizer": "dist-opt",
    "zero-1": "ZeRO-1",
    "zero-2": "ZeRO-2",
    "zero-3": "ZeRO-3",
    "fsdp-full": "FSDP",
    "fsdp-hybrid": "HSDP",
}
_SHARDING_FIELDS: dict[Sharding, dict[str, Any]] = {
    "none": {"zero": 0, "fsdp": "none"},
    "distributed-optimizer": {"zero": 1, "zero_impl": "megatron", "fsdp": "none"},
    "zero-1": {"zero": 1, "zero_impl": "deepspeed", "fsdp": "none"},
    "zero-2": {"zero": 2, "fsdp": "none"},
    "zero-3": {"zero": 3, "fsdp": "none"},
    "fsdp-full": {"zero": 0, "fsdp": "full"},
    "fsdp-hybrid": {"zero": 0, "fsdp": "hybrid"},
}


def sharding_fields(sharding: str) -> dict[str, Any]:
    """The ``Parallelism`` fields (zero, zero_impl, fsdp) that name ``sharding``."""
    return dict(_SHARDING_FIELDS[sharding])  # type: ignore[index]


@dataclass(frozen=True)
class Workload:
    """What is trained, independent of the layout: the model, the step's shape and the precision."""

    model: ModelSpec
    seq_len: int
    global_batch_sequences: int
    precision: Precision = "bf16"
    attention: AttentionConvention = "full"
    # Memory behaviour of the software stack (set per training.framework from data/memory_stacks.toml by
    # mfukit.perf.inputs): what its kernels save for backward (te | fused | eager), how it holds FP8 weights
    # (cached | primary | transient | gathered), its main gradients under FP8 (fp32 | 16-bit), whether it runs PyTorch's
    # expandable-segments allocator.
    kernels: Kernels = "fused"
    fp8_weights: Fp8Weights = "transient"
    fp8_main_grads: MainGrads = "fp32"
    expandable_segments: bool = False
    # the stack's loss kernel (None: as the kernels, fused unless eager); what recompute = "selective" keeps
    fused_cross_entropy: bool | None = None
    fused_norm: bool | None = None  # the stack's norm kernel keeps only its input (None: as the kernels)
    selective_recompute: SelectiveRecompute = "core-attention"
    # shares (0..1) kept in host memory (training.offload_*): optimizer states, parameter shards, activations
    offload_optimizer: float = 0.0
    offload_params: float = 0.0
    offload_activations: float = 0.0
    offload_optimizer_step: OptimizerStepDevice = "cpu"  # where offloaded optimizer states are stepped
    flash_attention: bool = True  # training.attention = "flash"; False: eager attention keeps the s^2 scores
    attention_dropout: bool = False  # training.attention_dropout > 0: eager attention stores and moves a mask
    hidden_dropout: bool = False  # training.hidden_dropout > 0: masks after attention, MLP and embedding
    framework: str = "megatron-core"  # a framework profile (software stack) of mfukit.perf.efficiency
    compile: bool = False  # torch.compile: element-wise ops fused by Inductor
    # TP collectives decomposed under the GEMMs (async TP, --tp-comm-overlap); None: the stack's default
    tp_comm_overlap: bool | None = None
    fp8_recipe: Fp8Recipe = "delayed"  # training.fp8_recipe: Transformer Engine's FP8 scaling
    # how far a layout may move the global batch to make it a whole number of micro-batches per DP rank
    # (BATCH_ROUNDING_FRAC when it was given in tokens; 0: exact, given in sequences)
    batch_rounding_frac: float = 0.0

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_sequences * self.seq_len

    def memory_shape(self, **layout_fields: Any) -> StepShape:
        """The memory model's :class:`StepShape` of this workload (``layout_fields``: micro-batch size and
        count, GPUs per node, pipeline split)."""
        return StepShape(
            seq_len=self.seq_len,
            precision=self.precision,
            flash_attention=self.flash_attention,
            attention_dropout=self.attention_dropout,
            hidden_dropout=self.hidden_dropout,
            kernels=self.kernels,
            fp8_weights=self.fp8_weights,
            fp8_main_grads=self.fp8_main_grads,
            expandable_segments=self.expandable_segments,
            fused_cross_entropy=self.fused_cross_entropy,
            fused_norm=self.fused_norm,
            selective_recompute=self.selective_recompute,
            offload_optimizer=self.offload_optimizer,
            offload_params=self.offload_params,
            offload_activations=self.offload_activations,
            offload_optimizer_step=self.offload_optimizer_step,
            **layout_fields,
        )


def round_batch(batch_sequences: int, rounding_frac: float, per_step: npt.ArrayLike) -> Ints:
    """The global batch, in sequences, that layouts running ``per_step`` = dp x micro-batch sequences per
    micro-batch step use: ``batch_sequences`` when ``per_step`` divides it, else its nearest multiple (at least
    one) within ``rounding_frac`` of it; 0 where there is none."""
    step = np.maximum(np.asarray(per_step, dtype=np.int64), 1)
    nearest = np.maximum((2 * batch_sequences + step) // (2 * step), 1) * step
    return np.where(np.abs(nearest - batch_sequences) <= rounding_frac * batch_sequences, nearest, 0)


def rounded_batch(workload: Workload, per_step: npt.ArrayLike) -> Ints:
    """:func:`round_batch` of the workload's batch and rounding bound."""
    return round_batch(workload.global_batch_sequences, workload.batch_rounding_frac, per_step)


def batch_change_note(
    given: int, sequences: int, *, dp: int, micro_batch_size: int, rounding_frac: float
) -> str | None:
    """What rounding the global batch did for one layout (None when it kept the given batch)."""
    if sequences == given:
        return None
    return (
        f"global batch {given:,} -> {sequences:,} sequences ({'+' if sequences > given else '-'}"
        f"{units.format_percent(abs(sequences - given) / given)}) for DP {dp:,} x micro-batch {micro_batch_size}: "
        f"a batch given in tokens is rounded to whole micro-batches per DP rank (by at most "
        f"{units.format_percent(rounding_frac, 0)}; --global-batch-size keeps it exact)"
    )


@dataclass(frozen=True)
class LayoutGrid:
    """Layouts as parallel arrays. ``first_layers``/``last_layers`` are the layers of the first and last
    pipeline stage (the whole model when pp = 1)."""

    tp: Ints
    pp: Ints
    vpp: Ints
    dp: Ints
    cp: Ints
    ep: Ints
    mbs: Ints
    num_microbatches: Ints
    first_layers: Ints
    last_layers: Ints
    sp: Bools
    recompute: Ints  # index into RECOMPUTES
    sharding: Ints  # index into SHARDINGS
    # full recompute of the first N layers of each model chunk (Parallelism.recompute_layers); 0: every layer
    recompute_layers: Ints

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @property
    def world_size(self) -> Ints:
        return self.tp * self.pp * self.dp * self.cp

    def recomputed_share(self, stage_layers: npt.ArrayLike) -> Floats:
        """Share of the layers of a stage with ``stage_layers`` layers that full recompute runs again."""
        full = self.recompute == RECOMPUTES.index("full")
        return recomputed_share(full, self.recompute_layers, self.vpp, stage_layers)

    def take(self, index: npt.ArrayLike) -> LayoutGrid:
        """The layouts at ``index`` (an integer or boolean array)."""
        picked = np.asarray(index)
        return LayoutGrid(**{f.name: getattr(self, f.name)[picked] for f in fields(self)})

    def layout(self, i: int, num_layers: int) -> Parallelism:
        """Configuration ``i`` of a model with ``num_layers`` layers as a :class:`Parallelism`."""
        pp = int(self.pp[i])
        first, last = int(self.first_layers[i]), int(self.last_layers[i])
        even = pp == 1 or (first == last and first * pp == num_layers)
        values: dict[str, Any] = {
            "tp": int(self.tp[i]),
            "pp": pp,
            "vpp": int(self.vpp[i]),
            "dp": int(self.dp[i]),
            "cp": int(self.cp[i]),
            "ep": int(self.ep[i]),
            "sequence_parallel": bool(self.sp[i]),
            "recompute": RECOMPUTES[int(self.recompute[i])],
            "recompute_layers": int(self.recompute_layers[i]) or None,
            **_SHARDING_FIELDS[SHARDINGS[int(self.sharding[i])]],
        }
        if not even:
            values |= {"first_stage_layers": first, "last_stage_layers": last}
        return Parallelism.model_validate(values)


def stage_counts(layout: Parallelism, num_layers: int) -> tuple[int, int]:
    """First and last stage layer counts of ``layout`` (whole numbers; the model when pp = 1)."""
    first, _middle, last = stage_layer_counts(layout, num_layers)
    return int(first), int(last)


def grid_of(
    layouts: Sequence[Parallelism],
    *,
    model: ModelSpec,
    micro_batch_size: Sequence[int],
    num_microbatches: Sequence[int],
) -> LayoutGrid:
    """A grid from whole layouts (``mfukit estimate``, tests, calibration rows)."""
    counts = [stage_counts(layout, model.num_hidden_layers) for layout in layouts]

    def ints(values: Sequence[int]) -> Ints:
        return np.asarray(values, dtype=np.int64)

    return LayoutGrid(
        tp=ints([layout.tp for layout in layouts]),
        pp=ints([layout.pp for layout in layouts]),
        vpp=ints([layout.vpp for layout in layouts]),
        dp=ints([layout.dp for layout in layouts]),
        cp=ints([layout.cp for layout in layouts]),
        ep=ints([layout.ep for layout in layouts]),
        mbs=ints(micro_batch_size),
        num_microbatches=ints(num_microbatches),
        first_layers=ints([first for first, _ in counts]),
        last_layers=ints([last for _, last in counts]),
        sp=np.asarray([layout.sequence_parallel for layout in layouts], dtype=np.bool_),
        recompute=ints([RECOMPUTES.index(layout.recompute) for layout in layouts]),
        sharding=ints([SHARDINGS.index(sharding_of(layout)) for layout in layouts]),
        recompute_layers=ints([layout.recompute_layers or 0 for layout in layouts]),
    )


def step_shape(
    workload: Workload,
    layout: Parallelism,
    *,
    micro_batch_size: int,
    num_microbatches: int,
    gpus_per_node: int,
) -> StepShape:
    """The memory model's :class:`StepShape` of one layout, its uneven pipeline split included."""
    first, last = stage_counts(layout, workload.model.num_hidden_layers)
    return workload.memory_shape(
        micro_batch_size=micro_batch_size,
        num_microbatches=num_microbatches,
        gpus_per_node=gpus_per_node,
        first_stage_layers=first if layout.pp > 1 else None,
        last_stage_layers=last if layout.pp > 1 else None,
    )


def unique_rows(*columns: npt.ArrayLike) -> tuple[list[np.ndarray], Ints]:
    """The distinct rows of equal-length columns (one array per column) and, for every row, the index of
    its distinct row. Faster than ``np.unique(axis=0)``: each column is factorised alone and the codes
    combined into one integer."""
    arrays = [np.asarray(column) for column in columns]
    size = int(np.broadcast_shapes(*(array.shape for array in arrays))[0]) if arrays else 0
    code = np.zeros(size, dtype=np.int64)
    levels: list[np.ndarray] = []
    for array in arrays:
        values, inverse = np.unique(np.broadcast_to(array, (size,)), return_inverse=True)
        code = code * len(values) + inverse.reshape(-1)
        levels.append(values)
    unique_codes, inverse = np.unique(code, return_inverse=True)
    digits: list[np.ndarray] = []
    remaining = unique_codes
    for values in reversed(levels):
        remaining, digit = np.divmod(remaining, len(values))
        digits.append(values[digit])
    return digits[::-1], np.asarray(inverse.reshape(-1), dtype=np.int64)


def per_unique(function: Callable[..., float | Sequence[float]], *keys: npt.ArrayLike) -> Floats:
    """``function(*key)`` for every configuration, computed once per distinct key.

    The planner's layouts take few distinct values per degree (tp in 1..8, a dozen pp), so a term that
    depends on two or three degrees is evaluated with the scalar models and gathered with numpy. A
    function returning k numbers gives an (n, k) array.
    """
    distinct, inverse = unique_rows(*keys)
    rows = [
        function(*(column[i].item() for column in distinct))
        for i in range(len(distinct[0]) if distinct else 0)
    ]
    return np.asarray(np.asarray(rows, dtype=np.float64)[inverse], dtype=np.float64)


def concatenated(first: LayoutGrid, second: LayoutGrid) -> LayoutGrid:
    """The layouts of ``first`` followed by those of ``second``."""
    return LayoutGrid(
        **{f.name: np.concatenate([getattr(first, f.name), getattr(second, f.name)]) for f in fields(first)}
    )


def with_changes(grid: LayoutGrid, **changes: npt.ArrayLike) -> LayoutGrid:
    """A copy of ``grid`` with some fields replaced (broadcast to its length)."""
    size = len(grid)
    filled = {
        name: np.broadcast_to(np.asarray(value, dtype=getattr(grid, name).dtype), (size,)).copy()
        for name, value in changes.items()
    }
    return replace(grid, **filled)
