"""How close a training step runs to the datasheet: the fitted constants of the step-time model.

Three kinds of profile, in ``data/efficiency.toml`` with their provenance (the calibration files' SHA-256,
the rows fitted, the fit error); ``python -m mfukit.perf.calibrate`` refits them:

* a **hardware** profile per accelerator family: the GEMM curve of :mod:`mfukit.perf.gemm` (the fraction of
  the dense tensor-core peak the best tile reaches, the operand-load cost that makes small tiles slower, the
  tile prologue/epilogue in K, the launch cost; the SM count comes from the catalog), flash attention's and
  FP8 GEMMs' fractions of peak, and the fraction of HBM bandwidth element-wise kernels reach;
* a **framework** profile per software stack: fitted host costs (the time to launch a layer's forward, a
  floor under its GPU time; a fixed cost per micro-batch on a stage, per collective and per pipeline send),
  and facts read from its code: how much of the DP gradient reduction and of a sharded optimizer's weight
  all-gather overlap compute, the gradient's bytes and bucket size in the reduction, whether FSDP keeps
  weights gathered under a pipeline. The same GPU runs the same layer at different speed under
  Megatron-LM, FSDP or nanotron;
* a **network** profile per scale-out link whose NCCL behaviour the InfiniBand constants do not describe
  (AWS EFA): the fraction of line rate collectives move and an extra latency per ring step, fitted on
  multi-node runs.

An accelerator or framework without calibration data borrows another profile and every estimate says so.
"""

from __future__ import annotations

import math
import os
from datetime import date
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from pydantic import Field

from mfukit import units
from mfukit.core.hardware import Accelerator, AchievedGemm, Dtype, System
from mfukit.core.scenario import Precision, read_document, stack_alias
from mfukit.core.schema import Strict, validate_as
from mfukit.errors import InputError, UnknownNameError

if TYPE_CHECKING:
    from mfukit.perf.gemm import GemmCurve

EFFICIENCY_FILE = Path(__file__).parent / "data" / "efficiency.toml"
DEFAULT_FRAMEWORK = "megatron-core"
HARDWARE_FIELDS = (
    "gemm_peak_fraction",
    "gemm_latency_s",
    "gemm_tile_half_dim",
    "gemm_k_overhead",
    "attention_peak_fraction",
    "fp8_gemm_peak_fraction",
)
# fitted on multi-node runs after the constants above (mfukit.perf.calibrate): how much one rank's step
# time varies, which the slowest of thousands of ranks turns into lost time (step_time.straggler_factor)
SCALE_FIELDS = ("sync_jitter_cv",)
FRAMEWORK_FIELDS = (
    "host_layer_s",
    "microbatch_overhead_s",
    "collective_overhead_s",
    "p2p_overhead_s",
    # the stack's attention kernel against the default stack's (Transformer Engine's cuDNN fused attention):
    # FlashAttention 2 in nanotron and LLM Foundry, torch SDPA in torchtitan run at their own rate
    "attention_speedup",
)
# What a framework does, read from its code rather than fitted: how much of the data-parallel gradient
# reduction hides under the last micro-batch's backward, how much of a sharded optimizer's weight all-gather
# hides under the next forward, and the gradient's bytes in the reduction (None: the sharding's convention).
FRAMEWORK_FACTS: dict[str, float | str | None] = {
    "grad_reduce_overlap": 1.0,
    "param_gather_overlap": 1.0,
    "grad_reduce_bytes": None,
    "grad_bucket_params": None,  # None: the whole gradient buffer in one collective
    # 1: with a pipeline, FSDP keeps each stage's weights gathered across micro-batches and reduce-scatters
    # the gradients once, at the last one (one gather and one reduction per step instead of per micro-batch)
    "fsdp_gathers_once_with_pipeline": 0.0,
    # its element-wise ops without torch.compile: fused kernels (Megatron's and Transformer Engine's fused norm,
    # bias-GeLU/SwiGLU and RoPE, apex/Triton norms), or composite PyTorch ops that each read and write HBM
    "eager_elementwise": "fused",
    # what "selective" recompute repeats: the core attention (Megatron, Korthikanti et al. 2022), or, as
    # torchtitan's op-level policy, every second matmul of a layer and every element-wise op (attention kept)
    "selective_recompute": "attention",
    # FP8 scaling, bytes moved per element: of an FP8 GEMM's activation input (amax, scale and cast, the
    # transposed copy its weight gradient reads), of its output gradient in the backward, and of its weight
    # per micro-batch. Defaults: Transformer Engine's delayed scaling (the amax comes out of the cast kernel;
    # cast-transpose writes both layouts; FP8 weights are cast once per step and cached across micro-batches)
    "fp8_input_cast_bytes": 4.0,
    "fp8_grad_cast_bytes": 4.0,
    "fp8_weight_cast_bytes": 0.0,
    # (these three and the next are the stack's own recipe; training.fp8_recipe = "current" replaces them with
    # CURRENT_SCALING's)
    # 1: an FP8 GEMM input that a fused kernel produces (the norm before the QKV and first MLP GEMMs, the
    # activation before the second) is scaled and cast inside that kernel, at no traffic of its own:
    # Transformer Engine's LayerNormLinear / LayerNormMLP emit FP8 from the norm and the activation under
    # delayed scaling (the amax of the previous steps is known before the kernel runs). 0: every FP8 input
    # pays the recipe's bytes (current scaling needs the tensor's own amax first; torchao casts each input)
    "fp8_fused_input_casts": 0.0,
    # 1: with sequence parallelism on a GPU with FP8 tensor cores (Hopper and later), the stack's recipes split
    # the TP collectives under the GEMMs (Transformer Engine userbuffers, --tp-comm-overlap) unless told not to
    "tp_comm_overlap": 0.0,
    # 1: the stack's pipeline can interleave virtual stages (Megatron's interleaved 1F1B, torchtitan's
    # Interleaved1F1B; parallelism.vpp > 1); 0: one stage per rank only (DeepSpeed's PipelineEngine, nanotron's
    # 1F1B and all-forward-all-backward engines)
    "interleaved_pipeline": 1.0,
    # ZeRO-3 / FSDP, how the weights are gathered: one collective per layer (FSDP's flat parameter of a
    # wrapped block) or one per weight matrix (DeepSpeed's per-submodule fetch; norms and biases stay
    # resident below stage3_param_persistence_threshold), and how many parameters are prefetched ahead of
    # the one computing (None: the whole next unit; DeepSpeed: stage3_prefetch_bucket_size)
    "zero3_gathers": "per-layer",
    "zero3_prefetch_params": None,
    # the data-parallel shardings the stack implements (perf.model_states.Sharding names; None: every one), which
    # the planner searches
    "shardings": None,
    # an offloaded optimizer step on the CPU (training.offload_optimizer_step = "cpu"), parameters per second
    # per host core, end to end: the 16-bit gradients copied into the fp32 host partition, the gradient norm,
    # unscale and clip, DeepSpeed's SIMD CPU Adam, the 16-bit parameters copied back. DeepSpeed's maintainers
    # measured ~10 s for the optimizer step of Qwen-72B on 4 A100 nodes (deepspeedai/DeepSpeed#6834, 2024-12:
    # 18.2e9 parameters per 128-core node, 14e6 per core per second); Qwen2.5-3B on 2 A100s and 128 bound
    # cores steps in 2.38 s whole (DeepSpeed#7474, 2025-08: >= 10e6). The same work streams only ~30 B per
    # parameter through DRAM (perf.memory.ADAM_STEP_BYTES_PER_PARAM), which a 400-600 GB/s host would do
    # ~10x faster: the cores, not the memory bus, set the step. Stacks without a measurement of their own
    # (Megatron's HybridDeviceOptimizer runs torch's CPU Adam) borrow DeepSpeed's rate.
    "cpu_optimizer_params_per_s_per_core": 14e6,
    # Gradient accumulation outside the GEMMs: HBM bytes per parameter with an unsharded gradient that every
    # micro-batch's backward moves, by the gradients' dtype (fp16 runs; bf16 runs, FP8 recipes included).
    # 0 where the weight-gradient GEMM accumulates into the main gradient in place (Megatron's
    # --gradient-accumulation-fusion, on by default since 2021; Transformer Engine's fuse_wgrad_accumulation)
    # or where gradients are reduce-scattered every micro-batch (ZeRO-2/3, FSDP: only a shard accumulates).
    # Copying a 16-bit gradient into fp32 reads 2 B and writes 4 B, adding fp32 into an fp32 buffer reads
    # 4 + 4 B and writes 4 B, adding a 16-bit gradient straight into one reads 2 + 4 B and writes 4 B. Against
    # the micro-batch's GEMM time (6 x tokens / GEMM rate per parameter) the pass costs (bytes / HBM rate):
    # with 18 B on an A100, about a fifth at 2,048 tokens per micro-batch and a twentieth at 8,192.
    "fp16_grad_accumulation_bytes": 0.0,
    "bf16_grad_accumulation_bytes": 0.0,
}
# Transformer Engine's FP8 current scaling (Float8CurrentScaling; NeMo / Megatron-Bridge "FP8-CS" recipes),
# bytes per element: each FP8 input's own amax first (read 2 B), then the cast-transpose (read 2 B, write
# 1 + 1 B), so no norm or activation kernel can emit FP8 itself; the output gradient the same way. What
# training.fp8_recipe = "current" means on any Transformer Engine stack.
CURRENT_SCALING: dict[str, float] = {
    "fp8_input_cast_bytes": 6.0,
    "fp8_grad_cast_bytes": 6.0,
    "fp8_fused_input_casts": 0.0,
}
EagerElementwise = Literal["fused", "composite"]
Zero3Gathers = Literal["per-layer", "per-matrix"]
# the data-parallel shardings of perf.memory (kept here as text: perf.memory imports this module's callers)
Sharding = Literal["none", "distributed-optimizer", "zero-1", "zero-2", "zero-3", "fsdp-full", "fsdp-hybrid"]
SelectiveRecompute = Literal["attention", "alternate-matmuls"]


class FitRecord(Strict):
    """What one profile was fitted on and how well it reproduces those rows."""

    sources: list[str]
    rows: int = Field(ge=0)
    median_abs_rel_error: float = Field(ge=0)
    p90_abs_rel_error: float = Field(ge=0)
    # hardware profiles: the highest 16-bit MFU any run on these accelerators measured (all rows, fitted or
    # not), and that run; a prediction above it is beyond what was measured
    highest_mfu: float | None = Field(default=None, gt=0, le=1)
    highest_mfu_run: str | None = None


class HardwareProfile(Strict):
    name: str
    accelerators: list[str] = Field(min_length=1)
    borrows: str | None = Field(default=None, description="the profile whose constants this one uses")
    why: str = ""
    gemm_peak_fraction: float | None = Field(default=None, gt=0, le=1)
    gemm_latency_s: float | None = Field(default=None, ge=0)
    gemm_tile_half_dim: float | None = Field(default=None, ge=0)
    gemm_k_overhead: float | None = Field(default=None, ge=0)
    attention_peak_fraction: float | None = Field(default=None, gt=0, le=1)
    fp8_gemm_peak_fraction: float | None = Field(default=None, gt=0, le=1)
    sync_jitter_cv: float | None = Field(default=None, ge=0, le=0.2)
    fit: FitRecord | None = None


class FrameworkProfile(Strict):
    name: str
    description: str
    borrows: str | None = None
    why: str = ""
    host_layer_s: float | None = Field(default=None, ge=0)
    microbatch_overhead_s: float | None = Field(default=None, ge=0)
    collective_overhead_s: float | None = Field(default=None, ge=0)
    p2p_overhead_s: float | None = Field(default=None, ge=0)
    attention_speedup: float | None = Field(default=None, gt=0)
    grad_reduce_overlap: float | None = Field(default=None, ge=0, le=1)
    param_gather_overlap: float | None = Field(default=None, ge=0, le=1)
    grad_reduce_bytes: float | None = Field(default=None, gt=0)
    grad_bucket_params: float | None = Field(default=None, gt=0)
    fsdp_gathers_once_with_pipeline: float | None = Field(default=None, ge=0, le=1)
    eager_elementwise: EagerElementwise | None = None
    selective_recompute: SelectiveRecompute | None = None
    fp8_input_cast_bytes: float | None = Field(default=None, ge=0)
    fp8_grad_cast_bytes: float | None = Field(default=None, ge=0)
    fp8_weight_cast_bytes: float | None = Field(default=None, ge=0)
    fp8_fused_input_casts: float | None = Field(default=None, ge=0, le=1)
    tp_comm_overlap: float | None = Field(default=None, ge=0, le=1)
    interleaved_pipeline: float | None = Field(default=None, ge=0, le=1)
    zero3_gathers: Zero3Gathers | None = None
    zero3_prefetch_params: float | None = Field(default=None, gt=0)
    shardings: list[Sharding] | None = None
    cpu_optimizer_params_per_s_per_core: float | None = Field(default=None, gt=0)
    fp16_grad_accumulation_bytes: float | None = Field(default=None, ge=0)
    bf16_grad_accumulation_bytes: float | None = Field(default=None, ge=0)
    facts_source: str | None = Field(
        default=None, description="where the overlap and gradient facts come from"
    )
    fit: FitRecord | None = None


NETWORK_FIELDS = ("efficiency", "step_latency_s")


class NetworkProfile(Strict):
    """How NCCL runs on one scale-out network (a catalog link, or one cluster's network: a catalog system)
    where NCCL's InfiniBand constants do not hold: the fraction of the NICs' line rate collectives move, and an
    extra latency per network step."""

    name: str = Field(description="the catalog link (fabrics/) or system (systems/) it describes")
    why: str = ""
    efficiency: float | None = Field(default=None, gt=0, le=1)
    step_latency_s: float | None = Field(default=None, ge=0)
    fit: FitRecord | None = None


class Provenance(Strict):
    data: str
    files: dict[str, str] = Field(description="file name -> SHA-256 of the calibration data fitted")
    split: str
    fitted: date
    objective: str
    hbm_fraction: float = Field(gt=0, le=1)
    hbm_fraction_why: str


class EfficiencyFile(Strict):
    provenance: Provenance
    hardware: list[HardwareProfile]
    framework: list[FrameworkProfile]
    network: list[NetworkProfile] = Field(default_factory=list)


class Efficiency(Strict):
    """The constants one estimate runs on (borrowed ones resolved)."""

    hardware: str
    framework: str
    calibrated: bool
    notes: tuple[str, ...]
    # the notes of the parts that run on borrowed constants (what a warning must say); the fitted parts' notes
    # (rows fitted, error on them) are assumptions, not warnings
    uncalibrated_notes: tuple[str, ...] = ()
    highest_measured_mfu: float | None = None  # on this GPU family, 16-bit, in the calibration data
    highest_measured_run: str | None = None
    gemm_peak_fraction: float = Field(gt=0, le=1)
    gemm_latency_s: float = Field(ge=0)
    gemm_tile_half_dim: float = Field(ge=0, description="a square output tile this small runs at half speed")
    gemm_k_overhead: float = Field(ge=0, description="a tile's prologue and epilogue, in K elements")
    attention_peak_fraction: float = Field(gt=0, le=1)
    fp8_gemm_peak_fraction: float = Field(gt=0, le=1)
    sync_jitter_cv: float = Field(default=0.0, ge=0, le=0.2)
    hbm_fraction: float = Field(gt=0, le=1)
    host_layer_s: float = Field(ge=0, description="host time to launch one layer's forward pass")
    microbatch_overhead_s: float = Field(ge=0)
    collective_overhead_s: float = Field(ge=0)
    p2p_overhead_s: float = Field(ge=0)
    attention_speedup: float = Field(default=1.0, gt=0)
    grad_reduce_overlap: float = Field(ge=0, le=1)
    param_gather_overlap: float = Field(ge=0, le=1)
    grad_reduce_bytes: float | None = Field(default=None, gt=0)
    grad_bucket_params: float | None = Field(default=None, gt=0)
    fsdp_gathers_once_with_pipeline: float = Field(ge=0, le=1)
    eager_elementwise: EagerElementwise
    selective_recompute: SelectiveRecompute
    fp8_input_cast_bytes: float = Field(ge=0)
    fp8_grad_cast_bytes: float = Field(ge=0)
    fp8_weight_cast_bytes: float = Field(ge=0)
    fp8_fused_input_casts: float = Field(ge=0, le=1)
    tp_comm_overlap: float = Field(ge=0, le=1)
    interleaved_pipeline: float = Field(ge=0, le=1)
    zero3_gathers: Zero3Gathers
    zero3_prefetch_params: float | None = Field(default=None, gt=0)
    shardings: list[Sharding] | None = None
    cpu_optimizer_params_per_s_per_core: float = Field(gt=0)
    fp16_grad_accumulation_bytes: float = Field(default=0.0, ge=0)
    bf16_grad_accumulation_bytes: float = Field(default=0.0, ge=0)

    def grad_accumulation_bytes(self, precision: Precision) -> float:
        """Bytes per parameter the stack's gradient accumulation moves outside the GEMMs each micro-batch, for
        a run in ``precision`` (its gradients' dtype: bf16 under an FP8 recipe; none for fp32, whose .grad
        autograd accumulates as the optimizer reads it)."""
        by_precision: dict[Precision, float] = {
            "fp16": self.fp16_grad_accumulation_bytes,
            "bf16": self.bf16_grad_accumulation_bytes,
            "fp8": self.bf16_grad_accumulation_bytes,
            "fp32": 0.0,
        }
        return by_precision[precision]

    @property
    def attention_fraction(self) -> float:
        """The share of the 16-bit peak the stack's attention kernel reaches on this part: the hardware's
        fitted flash-attention rate times the stack's fitted speedup over the reference stack's kernel."""
        return min(1.0, self.attention_peak_fraction * self.attention_speedup)


def require_interleaving(
    accelerator: Accelerator, framework: str, vpp: int, source: str | None = None
) -> None:
    """Refuse virtual pipeline stages (``vpp`` > 1) on a stack whose pipeline runs one stage per rank (its
    ``interleaved_pipeline`` fact), naming the stacks that interleave."""
    if vpp <= 1 or efficiency_for(accelerator, framework).interleaved_pipeline:
        return
    interleaving = [
        profile.name
        for profile in efficiency_file().framework
        if efficiency_for(accelerator, profile.name).interleaved_pipeline
    ]
    raise InputError(
        f"training.framework {framework} runs one pipeline stage per rank: it has no interleaved schedule "
        f"for vpp {vpp}",
        source=source,
        field="parallelism.vpp",
        value=vpp,
        hint=f"set vpp = 1, or a framework with an interleaved 1F1B schedule ({', '.join(interleaving)})",
    )


def installed_efficiency_path() -> Path:
    """The constants in effect: the last ``efficiency.toml`` at the top of an ``MFUKIT_CATALOG`` directory (a
    site's own, written by ``mfukit calibrate``), else the shipped ``perf/data/efficiency.toml``."""
    overlays = [
        Path(p) / EFFICIENCY_FILE.name for p in os.environ.get("MFUKIT_CATALOG", "").split(os.pathsep) if p
    ]
    found = [path for path in overlays if path.is_file()]
    return found[-1] if found else EFFICIENCY_FILE


def efficiency_file(path: Path | None = None) -> EfficiencyFile:
    return _load_efficiency(path or installed_efficiency_path())


@cache
def _load_efficiency(path: Path) -> EfficiencyFile:
    return validate_as(EfficiencyFile, read_document(path), source=str(path))


def _resolved(
    profile: HardwareProfile | FrameworkProfile,
    others: dict[str, HardwareProfile] | dict[str, FrameworkProfile],
    names: tuple[str, ...],
) -> tuple[dict[str, object], str]:
    base = others[profile.borrows] if profile.borrows else profile
    values: dict[str, object] = {}
    for name in names:
        own = getattr(profile, name)
        values[name] = own if own is not None else getattr(base, name)
    if profile.borrows and isinstance(profile, FrameworkProfile) and base.fit is not None:
        # a stack that runs another's code shares its constants, fitted on both stacks' runs
        return values, (
            f"{profile.name}: the constants of {base.name} ({profile.why}), fitted on {base.fit.rows} measured "
            f"runs ({', '.join(base.fit.sources)})"
        )
    if profile.borrows:
        return values, f"{profile.name}: uncalibrated, constants of {base.name} ({profile.why})"
    fit = profile.fit
    if fit is None:
        return values, f"{profile.name}: not fitted"
    return values, (
        f"{profile.name}: fitted on {fit.rows} measured runs ({', '.join(fit.sources)}), "
        f"median error {fit.median_abs_rel_error:.1%} on them"
    )


def network_name(system: System, file: EfficiencyFile | None = None) -> str:
    """The network profile that describes ``system``'s scale-out network: the system's own, for a cluster whose
    collectives run apart from its link's (NICs shared by GPUs), else its link's."""
    names = {profile.name for profile in (file or efficiency_file()).network}
    return system.name if system.name in names else system.scale_out_fabric


def network_profile_of(link: str, file: EfficiencyFile | None = None) -> NetworkProfile | None:
    """The fitted profile of scale-out link ``link``, if it has one."""
    for profile in (file or efficiency_file()).network:
        if profile.name == link and profile.efficiency is not None and profile.step_latency_s is not None:
            return profile
    return None


def hardware_profile_of(accelerator_name: str, file: EfficiencyFile | None = None) -> HardwareProfile | None:
    for profile in (file or efficiency_file()).hardware:
        if accelerator_name in profile.accelerators:
            return profile
    return None


def stack_name(name: str, *, field: str = "training.framework") -> str:
    """The profile ``name`` means (an alias such as ``megatron`` or a spelling such as ``Megatron_Core``
    folded to its stack), or an error naming the stacks there are."""
    folded = stack_alias(name)
    names = [profile.name for profile in efficiency_file().framework]
    if folded not in names:
        raise UnknownNameError("framework", name, names, field=field)
    return folded


def efficiency_for(
    accelerator: Accelerator, framework: str = DEFAULT_FRAMEWORK, *, file: EfficiencyFile | None = None
) -> Efficiency:
    """The constants for ``accelerator`` under ``framework`` (from ``file``, the installed profiles by
    default). An accelerator no profile lists gets the Hopper constants, said in the notes."""
    content = file or efficiency_file()
    hardware = {profile.name: profile for profile in content.hardware}
    stacks = {profile.name: profile for profile in content.framework}
    framework = stack_alias(framework)
    if framework not in stacks:
        raise UnknownNameError("framework", framework, list(stacks), field="training.framework")
    profile = hardware_profile_of(accelerator.name, content)
    extra: list[str] = []
    if profile is None:
        profile = hardware["hopper"]
        extra.append(f"{accelerator.name} is in no efficiency profile: Hopper constants used, uncalibrated")
    hw_values, hw_note = _resolved(profile, hardware, HARDWARE_FIELDS + SCALE_FIELDS)
    if hw_values["sync_jitter_cv"] is None:  # not fitted: no multi-node runs of this family
        hw_values["sync_jitter_cv"] = 0.0
    fw_profile = stacks[framework]
    fw_values, fw_note = _resolved(fw_profile, stacks, FRAMEWORK_FIELDS)
    missing = [name for name, value in fw_values.items() if value is None]
    if missing:  # what the framework's data could not show comes from the default framework
        default, _ = _resolved(stacks[DEFAULT_FRAMEWORK], stacks, FRAMEWORK_FIELDS)
        if default["attention_speedup"] is None:  # the default stack's attention kernel is the reference
            default["attention_speedup"] = 1.0
        fw_values |= {name: default[name] for name in missing}
        if (fw_profile.borrows or fw_profile.name) != DEFAULT_FRAMEWORK:  # its own code's values: no gap
            fw_note += f"; {', '.join(missing)} not shown by its data: {DEFAULT_FRAMEWORK}'s"
    facts, _ = _resolved(fw_profile, stacks, tuple(FRAMEWORK_FACTS))
    fw_values |= {
        name: default if facts[name] is None else facts[name] for name, default in FRAMEWORK_FACTS.items()
    }
    if hw_values["fp8_gemm_peak_fraction"] is None:  # no FP8 data: FP8 GEMMs as efficient as 16-bit ones
        hw_values["fp8_gemm_peak_fraction"] = hw_values["gemm_peak_fraction"]
    # a part no run calibrates (a borrowing profile, or none: Hopper's) with a measured best GEMM
    if (profile.borrows or extra) and accelerator.max_achievable_gemm is not None:
        lender = measured_part(hardware[profile.borrows] if profile.borrows else profile)
        anchored, anchor_note = _anchored_fractions(
            accelerator, hw_values, content.provenance.hbm_fraction, lender
        )
        hw_values |= anchored
        if profile.borrows:
            hw_note += f"; {anchor_note}"
        else:
            extra.append(anchor_note)
    borrowed = (
        *((f"hardware {hw_note}",) if profile.borrows else ()),
        *((f"framework {fw_note}",) if fw_profile.borrows and "uncalibrated" in fw_note else ()),
        *extra,
    )
    return Efficiency.model_validate(
        {
            "hardware": profile.name,
            "framework": fw_profile.name,
            "calibrated": not borrowed,
            "notes": (f"hardware {hw_note}", f"framework {fw_note}", *extra),
            "uncalibrated_notes": borrowed,
            "highest_measured_mfu": None if profile.fit is None else profile.fit.highest_mfu,
            "highest_measured_run": None if profile.fit is None else profile.fit.highest_mfu_run,
            "hbm_fraction": content.provenance.hbm_fraction,
            **hw_values,
            **fw_values,
        }
    )


# A large GEMM, square and a whole number of every standard tile: what "the share of the peak GEMMs reach on
# this part" means where a part has no measured best GEMM of its own (benches, the MFU ceiling, the notes)
LARGE_GEMM = (8192, 8192, 8192)


_Curve = tuple[float, float, float, float]
"""(tile half-dimension, K overhead, launch latency s, HBM fraction): the GEMM curve's constants."""


def _gemm_curve(accelerator: Accelerator, dtype: str, fraction: float, curve: _Curve) -> GemmCurve:
    """The step-time model's GEMM curve of ``dtype`` on ``accelerator`` at peak fraction ``fraction``."""
    from mfukit.perf.gemm import GemmCurve  # gemm sits above this module's importers

    tile_half_dim, k_overhead, latency_s, hbm_fraction = curve
    return GemmCurve(
        peak_flops_per_s=accelerator.peak_flops(cast(Dtype, dtype)) * fraction,
        compute_units=accelerator.compute_units,
        tile_half_dim=tile_half_dim,
        k_overhead=k_overhead,
        latency_s=latency_s,
        hbm_bytes_per_s=accelerator.hbm_bytes_per_s * hbm_fraction,
    )


def model_gemm_curve(accelerator: Accelerator, efficiency: Efficiency, dtype: Dtype) -> GemmCurve:
    """The step-time model's GEMM curve of ``dtype`` on ``accelerator`` under ``efficiency``."""
    fraction = efficiency.fp8_gemm_peak_fraction if dtype == "fp8" else efficiency.gemm_peak_fraction
    curve = (
        efficiency.gemm_tile_half_dim,
        efficiency.gemm_k_overhead,
        efficiency.gemm_latency_s,
        efficiency.hbm_fraction,
    )
    return _gemm_curve(accelerator, dtype, fraction, curve)


def large_gemm_fraction(
    accelerator: Accelerator, efficiency: Efficiency, dtype: str, size: int | None = None
) -> float:
    """The share of ``dtype``'s dense peak a large GEMM (``size`` cubed, :data:`LARGE_GEMM` by default) reaches
    on the model's curve: the peak fraction is the best tile's asymptote, below which tile loads and the K
    prologue keep every real GEMM."""
    m, n, k = (size, size, size) if size else LARGE_GEMM
    seconds = model_gemm_curve(accelerator, efficiency, cast(Dtype, dtype)).one_gemm_s(m, n, k, dtype)
    return 2.0 * m * n * k / seconds / accelerator.peak_flops(cast(Dtype, dtype))


def measured_part(profile: HardwareProfile) -> Accelerator | None:
    """The first of a family's parts with a measured best 16-bit GEMM in the catalog (None: none has one)."""
    return _first_measured(tuple(profile.accelerators))


@cache
def _first_measured(names: tuple[str, ...]) -> Accelerator | None:
    from mfukit import catalog  # catalog sits below perf; imported here to keep this module's import light

    known = set(catalog.entries("accelerators"))
    for name in names:
        if name not in known:  # a profile may list a part a site's catalog does not hold
            continue
        part = catalog.accelerator(name)
        if part.max_achievable_gemm is not None and part.max_achievable_gemm.bf16 is not None:
            return part
    return None


def _curve(values: dict[str, object], hbm_fraction: float) -> _Curve:
    """(tile half-dimension, K overhead, launch latency s, HBM fraction) of a profile's resolved values."""
    return (
        _number(values, "gemm_tile_half_dim"),
        _number(values, "gemm_k_overhead"),
        _number(values, "gemm_latency_s"),
        hbm_fraction,
    )


def _rate(accelerator: Accelerator, dtype: str, fraction: float, curve: _Curve, gemm: AchievedGemm) -> float:
    """FLOP/s of the measured shape of ``gemm`` on ``accelerator``'s curve at peak fraction ``fraction``."""
    seconds = _gemm_curve(accelerator, dtype, fraction, curve).one_gemm_s(gemm.m, gemm.n, gemm.k, dtype)
    return 2.0 * gemm.m * gemm.n * gemm.k / seconds


def _fraction_reproducing(
    accelerator: Accelerator, dtype: str, gemm: AchievedGemm, target_flops_per_s: float, curve: _Curve
) -> tuple[float, bool]:
    """The peak fraction at which ``curve`` runs the shape of ``gemm`` at ``target_flops_per_s``, and whether it
    was capped at 1 (the target is faster than the curve allows at the full peak). The curve's time falls
    monotonically as the fraction rises: bisected in log space."""
    low, high = 1e-3, 1.0
    if _rate(accelerator, dtype, high, curve, gemm) < target_flops_per_s:
        return high, True
    for _ in range(60):
        middle = math.sqrt(low * high)
        slow = _rate(accelerator, dtype, middle, curve, gemm) < target_flops_per_s
        low, high = (middle, high) if slow else (low, middle)
    return high, False


def _anchored_fractions(
    accelerator: Accelerator, borrowed: dict[str, object], hbm_fraction: float, lender: Accelerator | None
) -> tuple[dict[str, float], str]:
    """:func:`_anchored`, solved once per part, lender and borrowed constants (some hundred curve evaluations,
    where an estimate needs the constants many times)."""
    fractions = (
        _number(borrowed, "gemm_peak_fraction"),
        _number(borrowed, "attention_peak_fraction"),
        _number(borrowed, "fp8_gemm_peak_fraction"),
    )
    curve = _curve(borrowed, hbm_fraction)
    # an Accelerator holds mappings (its peaks), so it is keyed by its JSON; the lender is a catalog part, fixed
    # for the process (_first_measured), so its name says which
    key = (accelerator.model_dump_json(), None if lender is None else lender.name, fractions, curve)
    if key not in _ANCHORS:
        _ANCHORS[key] = _anchored(accelerator, fractions, curve, lender)
    updates, note = _ANCHORS[key]
    return dict(updates), note


_ANCHORS: dict[tuple[object, ...], tuple[tuple[tuple[str, float], ...], str]] = {}


def _anchored(
    accelerator: Accelerator,
    fractions: tuple[float, float, float],
    curve: _Curve,
    lender: Accelerator | None,
) -> tuple[tuple[tuple[str, float], ...], str]:
    """The GEMM peak fractions at which the borrowed GEMM curve (its tile, K and launch constants, this part's
    compute units) runs this part's measured best GEMM as far below that measurement as the lending family's
    fitted curve runs ``lender``'s own measured best GEMM, and the note saying so (with that share). The
    fitted curves are whole training steps' (they carry what a step loses beside its GEMMs), so the part's
    measurement is taken relative to its lender's, never as the rate its training GEMMs reach: at its own
    measured rate MI300X had been predicted 25-40 % too fast. Each measurement is matched at its own shape on
    the curve, which prices shapes: an MI300X measured at a long K, easy on the curve, gets a lower fraction
    than its share of the peak alone would give. Where the curve cannot reach a part's target even at the
    full peak (a best GEMM at a shape the lender's curve prices dearly), the fraction is 1, the note says so,
    and the part runs below its target, on the slow side. Without a lender measurement nothing is anchored.
    Flash attention's fraction, and FP8's where only a 16-bit GEMM was measured, move by the same factor as
    the 16-bit GEMMs': their matrix math runs at the same clock, which the part lowers under dense matrix
    load (what makes the achievable GEMM fall below the datasheet peak)."""
    gemm_fraction, attention_fraction, fp8_fraction = fractions
    measured = accelerator.max_achievable_gemm
    assert measured is not None
    lender_gemm = (
        None if lender is None or lender.max_achievable_gemm is None else lender.max_achievable_gemm.bf16
    )
    if lender is None or lender_gemm is None:
        return (
            (),
            "no measured best GEMM in the lending family to compare the part's with: fractions unchanged",
        )
    # the share of the lender's measurement its family's curve reaches (1 for the lender's own measured part)
    share = _rate(lender, "bf16", gemm_fraction, curve, lender_gemm) / lender_gemm.flops_per_s
    updates: dict[str, float] = {}
    said: list[str] = []
    for dtype, field, gemm in (
        ("bf16", "gemm_peak_fraction", measured.bf16),
        ("fp8", "fp8_gemm_peak_fraction", measured.fp8),
    ):
        if gemm is None or dtype not in accelerator.peak_flops_per_s:
            continue
        fraction, capped = _fraction_reproducing(accelerator, dtype, gemm, share * gemm.flops_per_s, curve)
        updates[field] = fraction
        said.append(
            f"{dtype.upper()} {units.format_flops_rate(gemm.flops_per_s, 0)}"
            + (" (beyond the curve at the full peak: fraction 1)" if capped else "")
        )
    if not said:
        return (), f"{accelerator.name}'s max-achievable GEMM names no type it has a peak for: not used"
    if "gemm_peak_fraction" in updates:
        factor = updates["gemm_peak_fraction"] / gemm_fraction
        updates["attention_peak_fraction"] = min(1.0, attention_fraction * factor)
        if "fp8_gemm_peak_fraction" not in updates:
            updates["fp8_gemm_peak_fraction"] = min(1.0, fp8_fraction * factor)
    return tuple(updates.items()), (
        f"GEMM peak fractions set from {accelerator.name}'s measured best GEMM ({', '.join(said)}; "
        f"{measured.url}) times {share:.2f}, the share of {lender.name}'s measured best GEMM "
        f"({units.format_flops_rate(lender_gemm.flops_per_s, 0)}) its family's fitted curve reaches; "
        "flash attention's" + ("" if measured.fp8 is not None else " and FP8's") + " scaled alike"
    )


def _number(values: dict[str, object], name: str) -> float:
    value = values[name]
    assert isinstance(value, float | int), name
    return float(value)


def beyond_measured(efficiency: Efficiency, mfu: float, precision: str) -> str | None:
    """A warning when a predicted 16-bit MFU exceeds the highest one measured on the GPU's family in the
    calibration data (None otherwise, or when nothing was measured on it: the uncalibrated note says so)."""
    highest = efficiency.highest_measured_mfu
    if highest is None or precision not in ("bf16", "fp16") or mfu <= highest:
        return None
    return (
        f"MFU {units.format_percent(mfu)} is beyond what was measured on this GPU: highest measured "
        f"{units.format_percent(highest)} "
        f"({efficiency.highest_measured_run}); the prediction extrapolates the fitted curves"
    )
