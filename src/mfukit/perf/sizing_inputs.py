"""What ``size`` sizes from a resolved scenario: the tokens, deadline or GPU count, the planning MFU (given,
the GPU's typical one, or where the performance model's search starts) and the goodput allowance."""

from __future__ import annotations

from mfukit import units
from mfukit.catalog.resolved import ResolvedScenario
from mfukit.core.hardware import Accelerator
from mfukit.core.scenario import TrainingSection
from mfukit.errors import InputError
from mfukit.perf.inputs import attention_fields, batch_rounding_frac
from mfukit.perf.sizing import SizingInputs, planning_layout

DEFAULT_GOODPUT = 0.9
START_MFU = 0.4  # where the performance model's count search starts when the GPU has no typical_mfu


def sizing_inputs(scene: ResolvedScenario, mfu_text: str | None) -> SizingInputs:
    """The sizing inputs of ``scene``, at the MFU of ``mfu_text`` (``--mfu``) when given."""
    scenario, source = scene.scenario, scene.source
    training, cluster = scenario.training, scenario.cluster
    if training.tokens is None:
        raise InputError(
            "is required", source=source, field="training.tokens", hint='e.g. training.tokens = "1.4T"'
        )
    if training.tokens <= 0:
        raise InputError("must be positive", source=source, field="training.tokens", value=training.tokens)
    if training.deadline_s is None and scene.num_gpus is None:
        raise InputError(
            "needs a deadline or a GPU count",
            source=source,
            field="training.deadline",
            hint='give training.deadline ("14d") for the minimum cluster, or cluster.num_gpus for the time on that many GPUs',
        )
    mfu, mfu_source = _planning_mfu(mfu_text, scene.accelerator, training, source)
    layout, fixed = planning_layout(scenario.parallelism)
    goodput = scenario.ft.goodput if scenario.ft.goodput is not None else DEFAULT_GOODPUT
    if goodput <= 0:
        raise InputError("must be above 0", source=source, field="ft.goodput", value=goodput)
    if training.deadline_s is not None and training.deadline_s <= 0:
        raise InputError(
            "must be positive", source=source, field="training.deadline", value=training.deadline_s
        )
    return SizingInputs(
        model=scene.model,
        tokens=training.tokens,
        seq_len=training.seq_len,
        global_batch_sequences=training.global_batch_sequences,
        batch_rounding_frac=batch_rounding_frac(training),
        micro_batch_size=training.micro_batch_size,
        precision=training.precision,
        attention=training.attention_flops,
        system=scene.system,
        accelerator=scene.accelerator,
        mfu=mfu,
        mfu_source=mfu_source,
        goodput=goodput,
        deadline_s=training.deadline_s,
        num_gpus=scene.num_gpus,
        layout=layout,
        fixed=fixed,
        pue=cluster.pue,
        usd_per_gpu_hour=cluster.usd_per_gpu_hour,
        **attention_fields(training),
    )


def _planning_mfu(
    mfu_text: str | None, accelerator: Accelerator, training: TrainingSection, source: str
) -> tuple[float, str]:
    """The planning MFU and where it comes from: ``--mfu``, else the GPU's typical_mfu, else (with a global
    batch, for the performance model) only where the search starts."""
    if mfu_text is not None:
        mfu = units.parse_fraction(mfu_text, field="--mfu")
        if mfu == 0:
            raise InputError("must be above 0", source="command line", field="--mfu", value=mfu_text)
        return mfu, "--mfu (given)"
    if accelerator.typical_mfu is not None:
        mfu_source = (
            f"{accelerator.name} typical_mfu: {accelerator.typical_mfu.what} ({accelerator.typical_mfu.url})"
        )
        if training.global_batch_sequences is None:
            mfu_source += "; the performance model needs the global batch (--global-batch-tokens)"
        return accelerator.typical_mfu.value, mfu_source
    if training.global_batch_sequences is not None:
        return START_MFU, "performance model"
    raise InputError(
        f"{accelerator.name} has no typical_mfu in the catalog and no global batch is given",
        source=source,
        field="--mfu",
        hint="give training.global_batch_tokens for the performance model, or ft.mfu (e.g. 0.4)",
    )
