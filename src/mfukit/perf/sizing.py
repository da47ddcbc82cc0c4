"""Cluster sizing: how many GPUs, in which layout, to train a model on D tokens by a deadline.

total FLOPs = tokens x model FLOPs per token (:mod:`mfukit.perf.flops`); a GPU delivers peak x MFU x
goodput of them. The minimum GPU count is total / (per-GPU rate x deadline); it is then rounded up to
whole nodes and to a layout that can be built and fits in memory: TP inside the scale-up domain, PP
dividing the layers, DP dividing the global batch in sequences (which caps DP: 4M tokens of
2,048-token sequences are 1,953 sequences, so DP must divide 1,953), the memory model's peak within HBM.
Among layouts with the fewest GPUs the one with the least model parallelism wins (smaller PP, then TP:
fewer pipeline bubbles and TP collectives at the same MFU assumption).

Here MFU is an input, taken as constant across GPU counts: the user's ``--mfu``, or the accelerator's
sourced ``typical_mfu`` where the performance model cannot predict one (no global batch).
:mod:`mfukit.perf.sizing_model` sizes with the MFU the performance model predicts at each count instead,
on this module's candidates, rounding and memory check.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from mfukit import units
from mfukit.comm.topology import from_system
from mfukit.core.hardware import Accelerator, System
from mfukit.core.model import ModelSpec
from mfukit.core.parallelism import Parallelism, divisors, layout_problems
from mfukit.core.scenario import Precision
from mfukit.errors import InputError
from mfukit.perf.flops import AttentionConvention, model_flops_per_token
from mfukit.perf.layouts import Ints, batch_change_note, round_batch
from mfukit.perf.memory import MemoryEstimate, StepShape, estimate_memory
from mfukit.perf.traffic import GradientTraffic, model_gradient_traffic, nics_to_hide

LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep")
# What a Megatron-LM run of this size uses unless the scenario says otherwise.
PLANNING_DEFAULTS = {"sequence_parallel": True, "recompute": "selective", "zero": 1}
EXPOSED_COMM_BUDGET = 0.05  # gradient traffic may leave at most this share of a step uncovered
MAX_TP = 8  # in larger NVLink domains (NVL72) TP stays within 8 GPUs, as published runs do


@dataclass(frozen=True)
class SizingInputs:
    model: ModelSpec
    tokens: float
    seq_len: int
    global_batch_sequences: int | None
    micro_batch_size: int
    precision: Precision
    attention: AttentionConvention
    system: System
    accelerator: Accelerator
    mfu: float
    mfu_source: str
    goodput: float
    deadline_s: float | None
    num_gpus: int | None
    layout: Parallelism  # sharding, recompute, SP, vpp and any degrees the user set
    fixed: dict[str, int]  # the degrees (tp, pp, dp, cp, ep) the user fixed
    pue: float = 1.2
    usd_per_gpu_hour: float | None = None
    batch_rounding_frac: float = 0.0  # see mfukit.perf.layouts.BATCH_ROUNDING_FRAC (0: exact)
    # what the performance model warns about its plan (a batch given in tokens rounded, an MFU beyond measured)
    model_warnings: tuple[str, ...] = ()
    # the attention kernel and dropout of training.attention, training.attention_dropout, training.hidden_dropout
    flash_attention: bool = True
    attention_dropout: bool = False
    hidden_dropout: bool = False


@dataclass(frozen=True)
class Candidate:
    layout: Parallelism
    memory: MemoryEstimate
    num_microbatches: int


@dataclass(frozen=True)
class Sizing:
    inputs: SizingInputs
    flops_per_token: float
    total_train_flops: float
    effective_flops_per_s_per_gpu: float  # peak x MFU x goodput
    gpus_min: float | None  # the unrounded count the deadline needs
    chosen: Candidate | None
    why_not: list[str]
    traffic: GradientTraffic | None
    step_s: float | None

    @property
    def gpus(self) -> int:
        return self.chosen.layout.world_size if self.chosen else 0

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.inputs.system.gpus_per_node)

    @property
    def wall_s(self) -> float:
        return (
            self.total_train_flops / (self.gpus * self.effective_flops_per_s_per_gpu)
            if self.gpus
            else math.inf
        )

    @property
    def days(self) -> float:
        return self.wall_s / units.SECONDS_PER_DAY

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.wall_s / units.SECONDS_PER_HOUR

    @property
    def required_flops_per_s(self) -> float | None:
        """Aggregate model FLOP/s the deadline needs (before MFU and goodput)."""
        deadline = self.inputs.deadline_s
        return self.total_train_flops / deadline if deadline else None

    @property
    def watts_per_gpu(self) -> tuple[float | None, str]:
        """Power per GPU and where it comes from: the node's maximum power shared by its GPUs (CPUs,
        NICs, fans included) when the catalog has it, else the accelerator's TDP alone; None when the
        vendor publishes neither."""
        system = self.inputs.system
        if system.node_power_w is not None:
            return (
                system.node_power_w / system.gpus_per_node,
                f"{system.name} node power / {system.gpus_per_node} GPUs",
            )
        return self.inputs.accelerator.tdp_w, f"{self.inputs.accelerator.name} TDP (GPU only)"

    @property
    def energy_kwh(self) -> float | None:
        watts, _ = self.watts_per_gpu
        if watts is None:
            return None
        return self.gpus * watts * self.wall_s * self.inputs.pue / units.JOULES_PER_KWH

    @property
    def cost_usd(self) -> float | None:
        price = self.inputs.usd_per_gpu_hour
        return None if price is None else self.gpu_hours * price

    @property
    def meets_deadline(self) -> bool | None:
        deadline = self.inputs.deadline_s
        return None if deadline is None or not self.chosen else self.wall_s <= deadline * (1 + 1e-9)

    @property
    def nics_to_hide_fully(self) -> int | None:
        """NICs per node (at the node's NIC rate) that hide the gradient traffic completely."""
        if self.traffic is None:
            return None
        system = self.inputs.system
        return nics_to_hide(
            self.traffic, gpus_per_node=system.gpus_per_node, nic_bytes_per_s=system.nic_bytes_per_s
        )

    @property
    def allowed_exposed_s(self) -> float:
        """Gradient traffic per step that may stay uncovered: ``EXPOSED_COMM_BUDGET`` of a step (none when the
        step time is unknown)."""
        return EXPOSED_COMM_BUDGET * self.step_s if self.step_s else 0.0

    @property
    def nics_needed_per_node(self) -> int | None:
        """NICs per node that keep uncovered gradient traffic within :attr:`allowed_exposed_s`, however many
        NIC cages the node has."""
        if self.traffic is None:
            return None
        system = self.inputs.system
        return nics_to_hide(
            self.traffic,
            gpus_per_node=system.gpus_per_node,
            nic_bytes_per_s=system.nic_bytes_per_s,
            allowed_exposed_s=self.allowed_exposed_s,
        )

    @property
    def recommended_nics_per_node(self) -> int | None:
        """:attr:`nics_needed_per_node`, at most the node's NIC cages (a node cannot take more NICs than it
        has cages; what they leave exposed is :attr:`exposed_comm_s`)."""
        needed = self.nics_needed_per_node
        return None if needed is None else min(needed, self.inputs.system.nics_per_node)

    @property
    def fabric_hides_traffic(self) -> bool:
        """Whether the node's NICs keep the exposed gradient traffic within :attr:`allowed_exposed_s`."""
        exposed = self.exposed_comm_s
        return exposed is None or exposed <= self.allowed_exposed_s * (1 + 1e-9)

    @property
    def pipeline_bubble_frac(self) -> float | None:
        """(p - 1)/(v·m) of the chosen layout (Narayanan et al. 2021), which the assumed MFU does not see."""
        if self.chosen is None or self.chosen.layout.pp == 1:
            return None if self.chosen is None else 0.0
        layout = self.chosen.layout
        return (layout.pp - 1) / (layout.vpp * self.chosen.num_microbatches)

    @property
    def exposed_comm_s(self) -> float | None:
        """Gradient traffic per step the node's NICs cannot hide."""
        if self.traffic is None:
            return None
        system = self.inputs.system
        return self.traffic.exposed_s(system.scale_out_bytes_per_s_per_node / system.gpus_per_node)


def planning_layout(layout: Parallelism | None) -> tuple[Parallelism, dict[str, int]]:
    """The user's ``[parallelism]`` with planning defaults for what they left out, and the degrees they fixed."""
    if layout is None:
        return Parallelism.model_validate(PLANNING_DEFAULTS), {}
    given = layout.model_fields_set
    defaults = {key: value for key, value in PLANNING_DEFAULTS.items() if key not in given}
    if layout.fsdp != "none":
        defaults.pop("zero", None)
    fixed = {name: int(getattr(layout, name)) for name in LAYOUT_FIELDS if name in given}
    return layout.model_copy(update=defaults), fixed


def _choices(inputs: SizingInputs, name: str, options: list[int]) -> list[int]:
    return [inputs.fixed[name]] if name in inputs.fixed else options


def _dp_options(inputs: SizingInputs, lowest: int, step: int) -> Iterator[int]:
    """Data-parallel degrees from ``lowest`` up: divisors of the batch (in micro-batches), or multiples of ``step``."""
    if "dp" in inputs.fixed:
        yield inputs.fixed["dp"]
        return
    batch = inputs.global_batch_sequences
    if batch is not None:
        dps = np.arange(lowest, 2 * batch // inputs.micro_batch_size + 1)
        yield from (int(d) for d in dps[_batch_of(inputs, dps) > 0])
        return
    start = max(step, math.ceil(lowest / step) * step)
    yield from range(start, start + 64 * step, step)


def _batch_of(inputs: SizingInputs, dp: npt.ArrayLike) -> Ints:
    """The global batch (sequences) a DP degree runs: exact, or rounded when given in tokens; 0 where none is."""
    per_step = np.asarray(dp, dtype=np.int64) * inputs.micro_batch_size
    return round_batch(inputs.global_batch_sequences or 0, inputs.batch_rounding_frac, per_step)


def _microbatches(inputs: SizingInputs, dp: int) -> int | None:
    if inputs.global_batch_sequences is None:
        return None
    return max(1, int(_batch_of(inputs, [dp])[0]) // (dp * inputs.micro_batch_size))


def _shape(inputs: SizingInputs, num_microbatches: int | None) -> StepShape:
    return StepShape(
        seq_len=inputs.seq_len,
        micro_batch_size=inputs.micro_batch_size,
        num_microbatches=num_microbatches,
        precision=inputs.precision,
        flash_attention=inputs.flash_attention,
        attention_dropout=inputs.attention_dropout,
        hidden_dropout=inputs.hidden_dropout,
        gpus_per_node=inputs.system.gpus_per_node,
    )


def search_layout(inputs: SizingInputs, target_gpus: int) -> tuple[Candidate | None, list[str]]:
    """The buildable, fitting layout with at least ``target_gpus`` GPUs (exactly, when the count is given)
    and the fewest GPUs; the reasons nothing fits otherwise."""
    model, system = inputs.model, inputs.system
    gpn = system.gpus_per_node
    tps = [t for t in divisors(system.scale_up_domain_gpus) if t <= max(gpn, MAX_TP)]
    eps = divisors(model.moe.num_experts) if model.moe else [1]
    hbm = inputs.accelerator.hbm_bytes
    best: Candidate | None = None
    smallest_peak: float | None = None
    problems: dict[str, str] = {}
    for tp in _choices(inputs, "tp", tps):
        for pp in _choices(inputs, "pp", divisors(model.num_hidden_layers)):
            for cp in _choices(inputs, "cp", [1]):
                for ep in _choices(inputs, "ep", eps):
                    base = tp * pp * cp
                    exact = inputs.num_gpus
                    lowest = exact // base if exact is not None else math.ceil(target_gpus / base)
                    step = gpn // math.gcd(gpn, base)
                    for dp in _dp_options(inputs, max(1, lowest), step):
                        world = base * dp
                        if exact is not None and world != exact:
                            continue
                        if best is not None and world > best.layout.world_size:
                            break
                        if world % gpn:
                            continue
                        layout = inputs.layout.model_copy(
                            update={"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep}
                        )
                        broken = layout_problems(
                            layout,
                            model,
                            seq_len=inputs.seq_len,
                            global_batch_sequences=(
                                int(_batch_of(inputs, [dp])[0]) or inputs.global_batch_sequences
                                if inputs.global_batch_sequences is not None
                                else None
                            ),
                            micro_batch_size=inputs.micro_batch_size,
                        )
                        if broken:
                            problems.setdefault(broken[0].field, f"{broken[0].message} ({broken[0].fix})")
                            continue
                        m = _microbatches(inputs, dp)
                        memory = estimate_memory(model, layout, _shape(inputs, m))
                        peak = memory.peak_bytes
                        smallest_peak = peak if smallest_peak is None else min(smallest_peak, peak)
                        if not memory.fits(hbm):
                            continue
                        candidate = Candidate(layout, memory, m or pp * layout.vpp)
                        if best is None or _better(candidate, best):
                            best = candidate
                        break
    if best is not None:
        return best, []
    reasons = list(problems.values())
    if smallest_peak is not None:
        reasons.append(
            f"the smallest per-GPU peak among buildable layouts is {units.format_bytes(smallest_peak)}, "
            f"more than the {units.format_bytes(hbm)} of {inputs.accelerator.name}"
        )
    if inputs.num_gpus is not None:
        batch = (
            f" and DP dividing the global batch of {inputs.global_batch_sequences} sequences"
            if inputs.global_batch_sequences
            else ""
        )
        reasons.append(
            f"{inputs.num_gpus} GPUs cannot be split as TP x PP x DP with TP inside a node, PP dividing the "
            f"{model.num_hidden_layers} layers{batch}, in memory"
        )
    elif inputs.global_batch_sequences is not None:
        reasons.append(
            f"the global batch of {inputs.global_batch_sequences} sequences caps DP at "
            f"{inputs.global_batch_sequences // inputs.micro_batch_size}"
        )
    return None, reasons or ["no layout of the given degrees can be built"]


def _better(candidate: Candidate, best: Candidate) -> bool:
    def key(c: Candidate) -> tuple[int, int, int, int]:
        return (c.layout.world_size, c.layout.pp, c.layout.tp, c.layout.ep)

    return key(candidate) < key(best)


def check_fixed_degrees(inputs: SizingInputs) -> None:
    """A degree the user fixed that no GPU count can make valid (tp not dividing the heads, pp not dividing
    the layers...) is bad input, not a negative answer."""
    layout = inputs.layout.model_copy(update={**inputs.fixed, "dp": 1})
    for problem in layout_problems(
        layout,
        inputs.model,
        seq_len=inputs.seq_len,
        global_batch_sequences=None,
        micro_batch_size=1,
        max_tp=inputs.system.scale_up_domain_gpus,
    ):
        if problem.field.removeprefix("parallelism.") in inputs.fixed:
            raise InputError(problem.message, field=problem.field, value=problem.value, hint=problem.fix)


def size(inputs: SizingInputs) -> Sizing:
    """Size the cluster for ``inputs`` at its constant MFU: minimum GPUs for the deadline (or the given
    count), the layout, the memory check, gradient traffic, days, GPU-hours, energy and cost."""
    check_fixed_degrees(inputs)
    flops_per_token = model_flops_per_token(inputs.model, inputs.seq_len, inputs.attention)
    effective = inputs.accelerator.peak_flops(inputs.precision) * inputs.mfu * inputs.goodput
    total = inputs.tokens * flops_per_token
    gpus_min = total / (effective * inputs.deadline_s) if inputs.deadline_s else None
    target = inputs.num_gpus if inputs.num_gpus is not None else math.ceil(gpus_min or 1)
    chosen, why_not = search_layout(inputs, target)
    if chosen is not None and inputs.global_batch_sequences is not None:
        dp, micro = chosen.layout.dp, inputs.micro_batch_size
        note = batch_change_note(
            inputs.global_batch_sequences,
            dp * micro * chosen.num_microbatches,
            dp=dp,
            micro_batch_size=micro,
            rounding_frac=inputs.batch_rounding_frac,
        )
        inputs = replace(inputs, model_warnings=(note,)) if note else inputs
    return finish(inputs, chosen, why_not)


def finish(inputs: SizingInputs, chosen: Candidate | None, why_not: list[str]) -> Sizing:
    """The sizing of ``chosen`` (from :func:`search_layout` or the planner) at ``inputs.mfu``: totals,
    the deadline's unrounded GPU count, gradient traffic and the step time."""
    flops_per_token = model_flops_per_token(inputs.model, inputs.seq_len, inputs.attention)
    total = inputs.tokens * flops_per_token
    peak = inputs.accelerator.peak_flops(inputs.precision)
    effective = peak * inputs.mfu * inputs.goodput
    gpus_min = total / (effective * inputs.deadline_s) if inputs.deadline_s else None
    traffic = step_s = None
    if chosen is not None:
        layout = chosen.layout
        traffic = _traffic(inputs, chosen, flops_per_token)
        # the batch the layout runs (rounded when given in tokens)
        if inputs.global_batch_sequences is not None:
            step_tokens = layout.dp * inputs.micro_batch_size * chosen.num_microbatches * inputs.seq_len
            step_s = step_tokens * flops_per_token / (layout.world_size * peak * inputs.mfu)
    return Sizing(
        inputs=inputs,
        flops_per_token=flops_per_token,
        total_train_flops=total,
        effective_flops_per_s_per_gpu=effective,
        gpus_min=gpus_min,
        chosen=chosen,
        why_not=why_not,
        traffic=traffic,
        step_s=step_s,
    )


def _traffic(inputs: SizingInputs, candidate: Candidate, flops_per_token: float) -> GradientTraffic:
    """The data-parallel gradient traffic of ``candidate`` at ``inputs.mfu`` on the scenario's nodes."""
    layout = candidate.layout
    peak = inputs.accelerator.peak_flops(inputs.precision)
    model_parallel = layout.tp * layout.pp * layout.cp
    microbatch_flops = flops_per_token * inputs.seq_len * inputs.micro_batch_size
    topology, _ = from_system(
        inputs.system,
        inputs.accelerator,
        num_nodes=math.ceil(layout.world_size / inputs.system.gpus_per_node),
    )
    return model_gradient_traffic(
        inputs.model,
        layout,
        _shape(inputs, candidate.num_microbatches),
        topology,
        microbatch_compute_s=microbatch_flops / model_parallel / (peak * inputs.mfu),
    )


@dataclass(frozen=True)
class HidingLayout:
    """A layout of the same GPUs whose gradient traffic the node's NICs hide (within the budget)."""

    candidate: Candidate
    exposed_s: float


def layout_that_hides(sizing: Sizing) -> HidingLayout | None:
    """When the node's NIC cages cannot hide the chosen layout's gradient traffic: the layout of the same GPU
    count, micro-batch and sharding with the least model parallelism (smaller PP, then TP) whose traffic they
    hide within :attr:`Sizing.allowed_exposed_s`, at the same MFU; None when the chosen one is hidden already
    or no such layout fits. More TP or PP shards the gradients each GPU reduces over more GPUs, and more
    micro-batches per step (a smaller DP) lengthen the compute the reduction overlaps."""
    inputs, chosen = sizing.inputs, sizing.chosen
    if chosen is None or sizing.fabric_hides_traffic:
        return None
    model, system = inputs.model, inputs.system
    world = chosen.layout.world_size
    nic_per_gpu = system.scale_out_bytes_per_s_per_node / system.gpus_per_node
    tps = [t for t in divisors(system.scale_up_domain_gpus) if t <= max(system.gpus_per_node, MAX_TP)]
    best: HidingLayout | None = None
    for pp in divisors(model.num_hidden_layers):
        for tp in tps:
            base = tp * pp * chosen.layout.cp
            if world % base or (tp, pp) == (chosen.layout.tp, chosen.layout.pp):
                continue
            dp = world // base
            layout = chosen.layout.model_copy(update={"tp": tp, "pp": pp, "dp": dp})
            batch = int(_batch_of(inputs, [dp])[0]) if inputs.global_batch_sequences is not None else None
            if batch == 0 or layout_problems(
                layout,
                model,
                seq_len=inputs.seq_len,
                global_batch_sequences=batch,
                micro_batch_size=inputs.micro_batch_size,
            ):
                continue
            m = _microbatches(inputs, dp)
            memory = estimate_memory(model, layout, _shape(inputs, m))
            if not memory.fits(inputs.accelerator.hbm_bytes):
                continue
            candidate = Candidate(layout, memory, m or pp * layout.vpp)
            exposed = _traffic(inputs, candidate, sizing.flops_per_token).exposed_s(nic_per_gpu)
            if exposed <= sizing.allowed_exposed_s * (1 + 1e-9):
                best = HidingLayout(candidate, exposed)
                break
        if best is not None:
            return best
    return None
