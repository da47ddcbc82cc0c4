"""Per-GPU peak memory of many layouts at once: the planner's memory check.

The same model as :func:`mfukit.perf.memory.estimate_memory`, evaluated for a whole
:class:`~mfukit.perf.layouts.LayoutGrid`. Each part of a stage's memory is a product of terms that
depend on only a few of the layout's degrees:

* model states = parameters of the stage (tp, ep, pp and its split) x bytes per parameter (sharding,
  ranks sharing one copy);
* activations = bytes of one layer for one sequence (tp, cp, sequence parallel, recompute) x micro-batch
  size x layers of the stage x micro-batches in flight (pp, vpp, rank, micro-batches per step): every
  activation term scales with the tokens of a micro-batch (Korthikanti et al. 2022, §4);
* buffers = an allowance plus a term proportional to the micro-batch.

Each term is computed once per distinct value with the scalar functions of ``memory.py`` and
``activations.py`` (so there is one memory model, not two) and combined with numpy.
``tests/property/test_memory_grid.py`` checks that the result equals ``estimate_memory`` layout by layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfukit.core.parallelism import Parallelism
from mfukit.perf.activations import (
    embedding_input_bytes,
    layer_activation_bytes,
    layer_input_bytes,
    logits_and_loss_bytes,
)
from mfukit.perf.layouts import (
    RECOMPUTES,
    SHARDINGS,
    Bools,
    Floats,
    LayoutGrid,
    Workload,
    per_unique,
    sharding_fields,
)
from mfukit.perf.memory import (
    MemoryOverheads,
    StepShape,
    activation_shape,
    communicators,
    default_overheads,
    fp8_weight_copy_bytes_per_param,
    fragmentation_frac,
    framework_buffers,
    held_state_bytes_per_param,
    in_flight_microbatches,
    stage_layers,
    stage_params,
)
from mfukit.perf.model_states import fsdp_shard_ranks, gradient_reduce_bytes, weight_bytes_per_param

_GATHERING = np.asarray([name in {"zero-3", "fsdp-full", "fsdp-hybrid"} for name in SHARDINGS])
_FIRST, _LAST, _MIDDLE = 0, 1, 2  # the middle stage: the second rank (pp > 2), the most in flight of them
# the stages GridMemory sizes, by the name of its fields (first_bytes, ...), and the kind each is computed as
STAGE_KINDS = {"first": _FIRST, "middle": _MIDDLE, "last": _LAST}


@dataclass(frozen=True)
class StageParamsGrid:
    """Parameters one GPU of a stage computes with, before ZeRO/FSDP sharding (arrays over layouts)."""

    dense: Floats
    expert: Floats
    largest_unit: Floats
    gemm: Floats
    outside_layers: Floats


@dataclass(frozen=True)
class GridMemory:
    """Peak memory per GPU of each layout (the largest of its first, second and last pipeline stage; the
    second, ``middle``, is -inf without one: pp <= 2)."""

    first_bytes: Floats
    last_bytes: Floats
    middle_bytes: Floats
    first_params: StageParamsGrid
    last_params: StageParamsGrid
    # without the fragmentation allowance: what must fit (StageMemory.required_bytes)
    first_required_bytes: Floats
    last_required_bytes: Floats
    middle_required_bytes: Floats

    @property
    def peak_bytes(self) -> Floats:
        return np.maximum(np.maximum(self.first_bytes, self.last_bytes), self.middle_bytes)

    @property
    def required_bytes(self) -> Floats:
        return np.maximum(
            np.maximum(self.first_required_bytes, self.last_required_bytes), self.middle_required_bytes
        )

    def fits(self, hbm_bytes: float, headroom_bytes: float = 0.0, *, keep_headroom: bool = True) -> Bools:
        """Which layouts run in ``hbm_bytes`` (their required bytes fit: :meth:`MemoryEstimate.fits`) and, with
        ``keep_headroom``, also keep ``headroom_bytes`` free with their allocator cache, as ``plan`` does."""
        runs = self.required_bytes <= hbm_bytes
        if not keep_headroom:
            return np.asarray(runs, dtype=bool)
        return np.asarray(runs & (self.peak_bytes <= hbm_bytes - headroom_bytes), dtype=bool)


class _Terms:
    """The scalar pieces, each evaluated once per distinct key."""

    def __init__(self, workload: Workload, gpus_per_node: int, allowances: MemoryOverheads):
        self.w = workload
        self.model = workload.model
        self.gpn = gpus_per_node
        self.allowances = allowances

    def shape(
        self, micro_batch_size: int = 1, first: int | None = None, last: int | None = None
    ) -> StepShape:
        return self.w.memory_shape(
            micro_batch_size=micro_batch_size,
            gpus_per_node=self.gpn,
            first_stage_layers=first,
            last_stage_layers=last,
        )

    def layers(self, pp: int, first: int, last: int, kind: int) -> range:
        rank = 0 if kind == _FIRST else 1 if kind == _MIDDLE and pp > 2 else pp - 1
        return stage_layers(self.model.num_hidden_layers, pp, rank, self.shape(first=first, last=last))

    def params(self, tp: int, ep: int, pp: int, first: int, last: int, kind: int) -> tuple[float, ...]:
        held = stage_params(
            self.model,
            Parallelism(tp=tp, ep=ep),
            self.layers(pp, first, last, kind),
            first=kind == _FIRST or pp == 1,
            last=kind == _LAST or pp == 1,
        )
        return held.dense, held.expert, held.largest_unit, held.gemm, held.outside_layers

    def layer_kinds(self, pp: int, first: int, last: int, kind: int) -> tuple[float, ...]:
        """Dense layers, MoE layers, and whether the first layer is MoE, on the stage."""
        layers = self.layers(pp, first, last, kind)
        moe = sum(1 for index in layers if self.model.is_moe_layer(index))
        first_moe = bool(len(layers)) and self.model.is_moe_layer(layers[0])
        return float(len(layers) - moe), float(moe), float(first_moe)

    def states(self, sharding: int, ranks: int) -> tuple[float, ...]:
        state = held_state_bytes_per_param(SHARDINGS[sharding], ranks, self.shape())
        return state.weights, state.gradients, state.optimizer

    def activations(self, tp: int, cp: int, sp: bool, recompute: int) -> tuple[float, ...]:
        """Per sequence (micro-batch of 1): stored bytes of a dense and an MoE layer, the full-recompute
        working set of each, the embedding inputs and the logits/loss buffers."""
        layout = Parallelism(tp=tp, cp=cp, sequence_parallel=sp, recompute=RECOMPUTES[recompute])
        act = activation_shape(layout, self.shape())
        stored = [layer_activation_bytes(self.model, act, moe_layer=moe) for moe in (False, True)]
        working = [
            layer_activation_bytes(self.model, act, moe_layer=moe, stored=False)
            - layer_input_bytes(self.model, act)
            for moe in (False, True)
        ]
        return (
            *stored,
            *working,
            embedding_input_bytes(self.model, act),
            logits_and_loss_bytes(self.model, act),
        )

    def buffers(self, sharding: int, pipelined: bool, tp: int, cp: int, sp: bool) -> tuple[float, ...]:
        """Framework communication buffers as (fixed, per sequence): they are affine in the micro-batch."""
        layout = _sharded(SHARDINGS[sharding], tp=tp, pp=2 if pipelined else 1, cp=cp, sp=sp)
        w = weight_bytes_per_param(self.w.precision)
        at = [
            framework_buffers(
                self.model,
                layout,
                SHARDINGS[sharding],
                activation_shape(layout, self.shape(b)),
                w,
                self.allowances,
            )
            for b in (1, 2)
        ]
        return 2 * at[0] - at[1], at[1] - at[0]

    def gather_bytes_per_param(self, sharding: int) -> float:
        """ZeRO-3/FSDP: the unit computed and the one prefetched in 16 bits, plus one unsharded gradient."""
        if not _GATHERING[sharding]:
            return 0.0
        layout = _sharded(SHARDINGS[sharding])
        return 2 * weight_bytes_per_param(self.w.precision) + gradient_reduce_bytes(
            layout, self.w.precision, self.w.fp8_main_grads
        )

    def fp8_copy_bytes_per_param(self, sharding: int) -> float:
        return fp8_weight_copy_bytes_per_param(SHARDINGS[sharding], self.shape())

    def dense_ranks(self, sharding: int, tp: int, dp: int, cp: int) -> float:
        return float(fsdp_shard_ranks(_sharded(SHARDINGS[sharding], tp=tp, dp=dp, cp=cp), self.gpn))

    def communicators(self, tp: int, pp: int, dp: int, cp: int, ep: int) -> float:
        return float(communicators(Parallelism(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep)))


def _sharded(sharding: str, **degrees: int | bool) -> Parallelism:
    values: dict[str, object] = {"sequence_parallel": degrees.pop("sp", False), **degrees}
    return Parallelism.model_validate(values | sharding_fields(sharding))


def stage_params_grid(
    workload: Workload, grid: LayoutGrid, kind: int, gpus_per_node: int = 8
) -> StageParamsGrid:
    terms = _Terms(workload, gpus_per_node, default_overheads())
    values = per_unique(terms.params, grid.tp, grid.ep, grid.pp, grid.first_layers, grid.last_layers, kind)
    return StageParamsGrid(values[:, 0], values[:, 1], values[:, 2], values[:, 3], values[:, 4])


def stage_layer_kinds(workload: Workload, grid: LayoutGrid, kind: int) -> tuple[Floats, Floats]:
    """Dense and MoE layers on the first (``kind`` 0), last (1) or second (2, pp > 2; the last otherwise)
    pipeline stage of each layout (:data:`STAGE_KINDS`)."""
    terms = _Terms(workload, 8, default_overheads())
    values = per_unique(terms.layer_kinds, grid.pp, grid.first_layers, grid.last_layers, kind)
    return values[:, 0], values[:, 1]


def stored_activation_bytes(
    workload: Workload, grid: LayoutGrid, kind: int, gpus_per_node: int = 8
) -> Floats:
    """Bytes the layers of the first (``kind`` 0) or last (1) stage store for one micro-batch on one GPU,
    before any activation offload (what an offload moves to the host and back per micro-batch)."""
    terms = _Terms(workload, gpus_per_node, default_overheads())
    dense_layers, moe_layers, _ = per_unique(
        terms.layer_kinds, grid.pp, grid.first_layers, grid.last_layers, kind
    ).T
    return np.asarray(
        grid.mbs * _stored_per_sequence(terms, grid, dense_layers, moe_layers), dtype=np.float64
    )


def _stored_per_sequence(terms: _Terms, g: LayoutGrid, dense_layers: Floats, moe_layers: Floats) -> Floats:
    """Bytes a stage's layers store for one sequence: the layers full recompute runs again keep only their
    inputs, the others (``recompute_layers`` below the stage's) everything a layer without recompute keeps."""
    own = per_unique(terms.activations, g.tp, g.cp, g.sp, g.recompute)
    full = g.recompute == RECOMPUTES.index("full")
    rest = per_unique(
        terms.activations, g.tp, g.cp, g.sp, np.where(full, RECOMPUTES.index("none"), g.recompute)
    )
    share = g.recomputed_share(dense_layers + moe_layers)
    per_kind = [share * own[:, k] + (1.0 - share) * rest[:, k] for k in (0, 1)]
    return np.asarray(dense_layers * per_kind[0] + moe_layers * per_kind[1], dtype=np.float64)


def grid_memory(
    workload: Workload, grid: LayoutGrid, *, gpus_per_node: int, overheads: MemoryOverheads | None = None
) -> GridMemory:
    """Peak memory per GPU of every layout of ``grid`` (what ``estimate_memory`` gives for each)."""
    allowances = overheads or default_overheads()
    terms = _Terms(workload, gpus_per_node, allowances)
    g = grid
    mbs = g.mbs.astype(np.float64)
    dense_ranks = np.where(
        np.asarray(SHARDINGS)[g.sharding] == "fsdp-hybrid",
        per_unique(terms.dense_ranks, g.sharding, g.tp, g.dp, g.cp),
        (g.dp * g.cp).astype(np.float64),
    )
    expert_ranks = np.maximum(1, dense_ranks // g.ep)
    dense_state = per_unique(terms.states, g.sharding, dense_ranks.astype(np.int64))
    expert_state = per_unique(terms.states, g.sharding, expert_ranks.astype(np.int64))
    acts = per_unique(terms.activations, g.tp, g.cp, g.sp, g.recompute)
    fixed, per_sequence = per_unique(terms.buffers, g.sharding, g.pp > 1, g.tp, g.cp, g.sp).T
    comm = fixed + per_sequence * mbs
    gather_factor = per_unique(terms.gather_bytes_per_param, g.sharding)
    nccl = per_unique(terms.communicators, g.tp, g.pp, g.dp, g.cp, g.ep) * float(
        allowances.nccl_buffer_per_communicator.value
    )
    fp8_copy_factor = per_unique(terms.fp8_copy_bytes_per_param, g.sharding)
    fragmentation = fragmentation_frac(terms.shape(), allowances)
    context = float(allowances.cuda_context.value)
    totals: list[Floats] = []
    required: list[Floats] = []
    held: list[StageParamsGrid] = []
    for kind in (_FIRST, _LAST, _MIDDLE):
        params = stage_params_grid(workload, g, kind, gpus_per_node)
        is_first = (kind == _FIRST) | (g.pp == 1)
        is_last = (kind == _LAST) | (g.pp == 1)
        rank = np.where(kind == _FIRST, 0, np.where((kind == _MIDDLE) & (g.pp > 2), 1, g.pp - 1))
        in_flight = per_unique(in_flight_microbatches, g.pp, g.vpp, rank, g.num_microbatches)
        dense_layers, moe_layers, first_moe = per_unique(
            terms.layer_kinds, g.pp, g.first_layers, g.last_layers, kind
        ).T
        stored = (
            (1.0 - workload.offload_activations)
            * mbs
            * _stored_per_sequence(terms, g, dense_layers, moe_layers)
        )
        has_layers = (dense_layers + moe_layers) > 0
        working = np.where(
            (g.recompute == RECOMPUTES.index("full")) & has_layers,
            mbs * np.where(first_moe > 0, acts[:, 3], acts[:, 2]),
            0.0,
        )
        states = params.dense * dense_state.sum(axis=1) + params.expert * expert_state.sum(axis=1)
        allocated = (
            states
            + stored * in_flight
            + working
            + np.where(is_first, acts[:, 4] * mbs * in_flight, 0.0)
            + np.where(is_last, acts[:, 5] * mbs, 0.0)
            + params.largest_unit * gather_factor
            + comm
            + params.gemm * fp8_copy_factor
        )
        absent = -np.inf if kind == _MIDDLE else 0.0  # no middle stage without pp > 2
        present = (g.pp > 2) | (kind != _MIDDLE)
        totals.append(np.where(present, allocated * (1 + fragmentation) + nccl + context, absent))
        required.append(np.where(present, allocated + nccl + context, absent))
        held.append(params)
    return GridMemory(
        totals[0], totals[1], totals[2], held[0], held[1], required[0], required[1], required[2]
    )
