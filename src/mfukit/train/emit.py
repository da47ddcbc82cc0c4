"""``mfukit train --emit slurm|k8s``: the job that runs the same worker on a cluster.

Both run ``torchrun -m mfukit.train.worker config.json`` on every node with c10d rendezvous, the
scenario's config written next to the job, and the NCCL variables the catalog holds for the node type.

* Slurm (sbatch): one torchrun agent per node through ``srun``; MASTER_ADDR is the first node of the
  allocation (its NodeAddr, which also works where node names do not resolve); ``--requeue`` and
  ``--signal=B:USR1@300``: the batch shell forwards USR1 to the step, the workers checkpoint at the next
  step and stop, and the job requeues itself to resume from that checkpoint.
* Kubernetes (JobSet, jobset.x-k8s.io/v1alpha2): one indexed pod per node; the rendezvous endpoint is
  the first pod's DNS name (JobSet's headless service); the config comes from a ConfigMap and the run
  directory from a ReadWriteMany PVC mounted at /runs; ``failurePolicy.maxRestarts`` recreates the whole
  set when torchrun itself gives up (a lost node).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from mfukit import units
from mfukit.core import jobtext
from mfukit.core.files import write_text_atomic
from mfukit.core.results import Output, Table
from mfukit.errors import InputError
from mfukit.train import ownership
from mfukit.train.config import TrainConfig
from mfukit.train.data import ensure_synthetic, synthetic_path
from mfukit.train.launch import RESTART_SAFE_ENV, SIGNALS_TO_FORWARD
from mfukit.train.prepare import (
    Prepared,
    TrainRequest,
    parse_nnodes,
    prepare,
    synthetic_token_count,
)
from mfukit.watch.config import parse_listen

RDZV_PORT = 29400
"""torchrun's default c10d rendezvous port."""
SIGNAL_LEAD_S = 300
SIGNAL_RESOLUTION_S = 60
"""sbatch(1) --signal: "the signal may be sent up to 60 seconds earlier than specified"."""
K8S_RUNS = "/runs"
K8S_CONFIG_DIR = "/etc/mfukit"
PVC_NAME = "mfukit-runs"
ALWAYS_ENV = {
    "PYTHONUNBUFFERED": "1",
    "NCCL_DEBUG": "WARN",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # abort a failed NCCL collective instead of hanging
    **RESTART_SAFE_ENV,
}


def _node_gpus(prepared: Prepared) -> int:
    system = prepared.system
    return system.gpus_per_node if system is not None else prepared.world_size // prepared.nnodes_min


def _nccl_env(prepared: Prepared, warnings: list[str], assumptions: list[str]) -> dict[str, str]:
    system = prepared.system
    if system is None or system.nccl_env is None:
        name = system.name if system is not None else "no system"
        warnings.append(
            f"the catalog has no NCCL variables for {name}: set NCCL_IB_HCA (and NCCL_SOCKET_IFNAME) for your "
            "nodes in the job, or add [nccl_env] to the system's catalog entry"
        )
        return {}
    assumptions.append(f"NCCL variables of {system.name}: {system.nccl_env.what} ({system.nccl_env.url})")
    return {
        jobtext.env_name(key, field=f"{system.name}.nccl_env"): jobtext.check_text(
            value, field=f"{system.name}.nccl_env.{key}", source="catalog"
        )
        for key, value in system.nccl_env.variables.items()
    }


def _job_name(config: TrainConfig) -> str:
    """A DNS-1123 label (Kubernetes) that Slurm accepts too; 40 characters leave room for the suffixes
    (``-config``, ``-workers-0-0``) within the label's 63."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", f"mfukit-{config.name}".lower()).strip("-")
    return jobtext.dns_label(cleaned[:40].rstrip("-"), field="job name")


def _cluster_config(prepared: Prepared, out_dir: str, warnings: list[str]) -> TrainConfig:
    """The config as the cluster's workers read it: the device chosen there, the catalog peak for MFU."""
    config = prepared.config
    tokens = synthetic_token_count(config)
    data = synthetic_path(
        Path(out_dir) / "data", vocab_size=config.model.vocab_size, num_tokens=tokens, seed=config.seed
    )
    peak: float | None = None
    source = ""
    accelerator = prepared.accelerator
    if accelerator is not None:
        peak = accelerator.peak_flops(prepared.peak_dtype)
        source = f"catalog {accelerator.name} dense {prepared.peak_dtype} peak"
    else:
        warnings.append(
            "no MFU in the job's metrics: name cluster.system or cluster.gpu for the catalog peak"
        )
    return config.model_copy(
        update={
            "out_dir": out_dir,
            "device": "auto",
            "data_path": config.data_path or str(data),  # a --data file must be where the nodes see it
            "synthetic_tokens": None if config.data_path else tokens,
            "peak_flops_per_s": peak,
            "peak_source": source,
        }
    )


def emit_job(
    kind: str, request: TrainRequest, *, image: str | None, time_limit: str, partition: str | None
) -> Output:
    if partition is not None:
        jobtext.slurm_names(partition, field="--partition")
    if kind == "k8s" and not image:
        raise InputError(
            "--emit k8s needs a container image",
            source="command line",
            field="--image",
            hint="an image with mfukit and torch installed, e.g. --image registry.example/mfukit:0.1",
        )
    if image is not None:
        jobtext.oci_reference(image, field="--image")
    prepared = prepare(request, cuda=True)
    with ownership.hold(prepared.config.out):  # a live run there reads config.json at every restart
        return _emit(
            kind,
            request,
            prepared,
            image=image if kind == "k8s" else None,
            time_limit=time_limit,
            partition=partition,
        )


def _emit(
    kind: str,
    request: TrainRequest,
    prepared: Prepared,
    *,
    image: str | None,
    time_limit: str,
    partition: str | None,
) -> Output:
    warnings = list(prepared.warnings)
    assumptions = [a for a in prepared.assumptions if not a.startswith("fp32 on CPU")]
    nccl = _nccl_env(prepared, warnings, assumptions)
    gpus = request.nproc_per_node or _node_gpus(prepared)
    if image is not None:  # --emit k8s (emit_job refuses k8s without an image)
        run_name = jobtext.path_component(prepared.config.name, field="scenario name")
        config = _cluster_config(prepared, f"{K8S_RUNS}/{run_name}", warnings)
        text = kubernetes_manifest(config, request, gpus=gpus, env=nccl, image=image)
        path = prepared.config.out / "train-jobset.yaml"
        assumptions.append(
            f"a ReadWriteMany PVC named {PVC_NAME} holds the run directories, mounted at {K8S_RUNS}"
        )
    else:
        config = _cluster_config(prepared, prepared.config.out_dir, warnings)
        if config.synthetic_tokens is not None:
            ensure_synthetic(
                Path(config.data_path).parent,
                vocab_size=config.model.vocab_size,
                num_tokens=config.synthetic_tokens,
                seed=config.seed,
            )
        text = sbatch_script(config, request, gpus=gpus, env=nccl, time_limit=time_limit, partition=partition)
        path = prepared.config.out / "train.sbatch"
        # slurmd opens --output before the script runs: its directory must exist at submission
        (prepared.config.out / "logs").mkdir(parents=True, exist_ok=True)
        assumptions.append(f"{prepared.config.out} is on storage every node sees (checkpoints, data, logs)")
    prepared.config.out.mkdir(parents=True, exist_ok=True)
    config.write(prepared.config.out / "config.json")
    write_text_atomic(path, text)
    nodes = request.nnodes
    table = Table(
        f"{'sbatch script' if kind == 'slurm' else 'Kubernetes JobSet'} for {config.name}", ["item", "value"]
    )
    table.add("job file", str(path))
    table.add("config", str(prepared.config.out / "config.json"))
    table.add("nodes x ranks per node", f"{nodes} x {gpus}")
    table.add("max restarts (torchrun)", request.max_restarts)
    table.add("NCCL variables", ", ".join(f"{k}={v}" for k, v in nccl.items()) or "—")
    submit = jobtext.shell_command(
        ["sbatch", str(path)] if kind == "slurm" else ["kubectl", "apply", "-f", str(path)], field="--out"
    )
    return Output(
        schema="train.emit/1",
        inputs={
            "scenario": str(request.scenario_path),
            "emit": kind,
            "nnodes": nodes,
            "nproc_per_node": gpus,
        },
        result={
            "kind": kind,
            "path": str(path),
            "config_path": str(prepared.config.out / "config.json"),
            "text": text,
            "nnodes": nodes,
            "nproc_per_node": gpus,
            "nccl_env": nccl,
            "submit": submit,
        },
        assumptions=assumptions,
        warnings=warnings,
        tables=[table],
        notes=[f"submit with: {submit}"],  # printed with rich markup off (cli.render)
    )


def _torchrun_args(
    config_path: str, request: TrainRequest, *, gpus: int, endpoint: str, run_id: str
) -> list[str]:
    low, high = parse_nnodes(request.nnodes)
    return [
        f"--nnodes={low}" if low == high else f"--nnodes={low}:{high}",
        f"--nproc-per-node={gpus}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        f"--max-restarts={request.max_restarts}",
        f"--signals-to-handle={SIGNALS_TO_FORWARD}",
        "-m",
        "mfukit.train.worker",
        config_path,
    ]


def slurm_time_s(text: str) -> float | None:
    """A Slurm time limit in seconds (None: unlimited). sbatch(1) --time: "minutes", "minutes:seconds",
    "hours:minutes:seconds", "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds"; 0,
    UNLIMITED and INFINITE mean no limit."""
    if text.upper() in ("UNLIMITED", "INFINITE", "0"):
        return None
    days, _, rest = text.partition("-") if "-" in text else ("", "", text)
    fields = rest.split(":")
    # ASCII digits only: int() would also take blanks, '_' and other scripts' digits, which then reach
    # the #SBATCH line as given
    if all(part.isascii() and part.isdigit() for part in [*fields, *([days] if "-" in text else [])]):
        parts = [int(part) for part in fields]
        whole_days = int(days) if days else 0
    else:
        parts = []
    if not parts or len(parts) > 3:
        raise InputError(
            "is not a Slurm time limit",
            source="command line",
            field="--time-limit",
            value=text,
            hint='e.g. "90" (minutes), "4:00:00", "2-00:00:00"',
        )
    minute, hour = units.SECONDS_PER["min"], units.SECONDS_PER_HOUR
    # minutes[:seconds] without days; hours[:minutes[:seconds]] with days or three fields
    scale = (minute, 1.0) if not days and len(parts) <= 2 else (hour, minute, 1.0)
    return whole_days * units.SECONDS_PER_DAY + sum(p * u for p, u in zip(parts, scale, strict=False))


def signal_lead_s(time_limit: str) -> int:
    """Seconds before the time limit that Slurm sends USR1: 300, or a quarter of a limit under 20 min (the
    save and stop must come after the start, and Slurm may send it up to a minute early)."""
    limit_s = slurm_time_s(time_limit)
    if limit_s is None or limit_s >= 4 * SIGNAL_LEAD_S:
        return SIGNAL_LEAD_S
    if limit_s <= 2 * SIGNAL_RESOLUTION_S:
        raise InputError(
            "leaves no room for the checkpoint-and-requeue warning (USR1 may come up to 60 s early)",
            source="command line",
            field="--time-limit",
            value=time_limit,
            hint="give more than 2 minutes",
        )
    return max(SIGNAL_RESOLUTION_S, int(limit_s // 4))


def sbatch_script(
    config: TrainConfig,
    request: TrainRequest,
    *,
    gpus: int,
    env: dict[str, str],
    time_limit: str,
    partition: str | None,
) -> str:
    """The sbatch script (reference/slurm-and-scheduling.md 1.8, with NodeAddr for MASTER_ADDR).

    Every value from the user is checked and quoted by :mod:`mfukit.core.jobtext`: ``#SBATCH`` lines as
    sbatch splits them, the body as bash does; the only unquoted expansions are Slurm's own variables."""
    low, high = parse_nnodes(request.nnodes)
    nodes = f"{low}-{high}" if high != low else str(low)
    out = Path(config.out_dir)
    lead_s = signal_lead_s(time_limit)
    output = jobtext.slurm_filename(str(out / "logs"), field="--out") + "/slurm-%j.out"
    directives = [
        ("job-name", _job_name(config), "job name"),
        ("nodes", nodes, "--nnodes"),
        ("ntasks-per-node", "1", ""),
        ("gpus-per-node", str(gpus), "--nproc-per-node"),
        ("exclusive", None, ""),
        ("time", time_limit, "--time-limit"),
        ("requeue", None, ""),
        ("signal", f"B:USR1@{lead_s}", "--time-limit"),
        ("open-mode", "append", ""),
        ("output", output, "--out"),
    ]
    if partition is not None:
        directives.append(("partition", jobtext.slurm_names(partition, field="--partition"), "--partition"))
    header = ["#!/bin/bash"] + [
        f"#SBATCH --{option}" if value is None else jobtext.sbatch_directive(option, value, field=field)
        for option, value, field in directives
    ]
    activate = []
    if sys.prefix != sys.base_prefix:
        activate = [
            "# the environment that has mfukit and torch (as on the submitting host)",
            f"source {jobtext.shell_word(sys.prefix + '/bin/activate', field='python environment')}",
        ]
    exports = [
        f"export {jobtext.env_name(key, field='environment')}={jobtext.shell_word(value, field=key)}"
        for key, value in {**ALWAYS_ENV, **env}.items()
    ]
    torchrun = _torchrun_args(
        jobtext.shell_word(str(out / "config.json"), field="--out"),
        request,
        gpus=gpus,
        endpoint='"$MASTER_ADDR:$MASTER_PORT"',
        run_id='"$SLURM_JOB_ID"',
    )
    body = [
        "set -euo pipefail",
        *activate,
        f"mkdir -p {jobtext.shell_word(str(out / 'logs'), field='--out')}",
        *exports,
        "# the first node of the allocation hosts the c10d rendezvous; NodeAddr works where names do not resolve",
        "# (the whole list is read: `| head -n1` could end scontrol with SIGPIPE, fatal under pipefail)",
        'mapfile -t job_nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "head_node=${job_nodes[0]}",
        "MASTER_ADDR=$(scontrol show node \"$head_node\" | grep -oP 'NodeAddr=\\K\\S+')",
        "export MASTER_ADDR",
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))",
        "",
        f"# {lead_s} s before the time limit (or on preemption) Slurm sends USR1 to this shell: forward it",
        "# to the workers, which checkpoint at the next step and stop, then requeue to resume from that checkpoint",
        "requeue_on_usr1() {",
        '  echo "mfukit: USR1: checkpoint and requeue" >&2',
        '  kill -USR1 "$srun_pid" 2>/dev/null || true',
        '  wait "$srun_pid" || true',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "  exit 0",
        "}",
        "trap requeue_on_usr1 USR1",
        "",
        *_sbatch_watch(config, request),
        "srun --kill-on-bad-exit=1 --cpu-bind=none torchrun \\",
        *[f"  {arg} \\" for arg in torchrun[:-3]],
        f"  -m {torchrun[-2]} {torchrun[-1]} &",
        "srun_pid=$!",
        'wait "$srun_pid"',
    ]
    return "\n".join([*header, "", *body]) + "\n"


def kubernetes_manifest(
    config: TrainConfig, request: TrainRequest, *, gpus: int, env: dict[str, str], image: str
) -> str:
    """A ConfigMap with config.json and a JobSet with one indexed pod per node."""
    name = _job_name(config)
    jobtext.oci_reference(image, field="--image")
    _, pods = parse_nnodes(request.nnodes)
    endpoint = f"{name}-workers-0-0.{name}:{RDZV_PORT}"
    command = [
        "torchrun",
        *_torchrun_args(f"{K8S_CONFIG_DIR}/config.json", request, gpus=gpus, endpoint=endpoint, run_id=name),
    ]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config"},
        "data": {"config.json": json.dumps(json.loads(config.model_dump_json()), indent=2)},
    }
    container = {
        "name": "trainer",
        "image": image,
        "command": command,
        "env": [{"name": key, "value": value} for key, value in {**ALWAYS_ENV, **env}.items()],
        "ports": [{"containerPort": RDZV_PORT, "name": "rendezvous"}],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
        "volumeMounts": [
            {"name": "config", "mountPath": K8S_CONFIG_DIR, "readOnly": True},
            {"name": "runs", "mountPath": K8S_RUNS},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": request.max_restarts},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [container],
                                    "volumes": [
                                        {"name": "config", "configMap": {"name": f"{name}-config"}},
                                        {"name": "runs", "persistentVolumeClaim": {"claimName": PVC_NAME}},
                                        {"name": "shm", "emptyDir": {"medium": "Memory"}},
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    if request.watch_sidecar:
        spec: dict[str, Any] = jobset["spec"]  # type: ignore[assignment]
        spec["replicatedJobs"].append(_watch_job(config, request, image))
        spec["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["workers"]}  # not the watch
    return yaml.dump_all([config_map, jobset], Dumper=_BlockDumper, sort_keys=False)


def _watch_args(config: TrainConfig, request: TrainRequest) -> list[str]:
    """``mfukit watch`` on the run's metrics.jsonl (written by rank 0 to the shared run directory)."""
    listen = request.watch_sidecar or ""
    parse_listen(listen, "--watch-sidecar")
    metrics = str(Path(config.out_dir) / "metrics.jsonl")
    return ["watch", metrics, "--kind", "mfukit-jsonl", "--job", _job_name(config), "--listen", listen]


def _sbatch_watch(config: TrainConfig, request: TrainRequest) -> list[str]:
    if not request.watch_sidecar:
        return []
    command = jobtext.shell_command(["mfukit", *_watch_args(config, request)], field="--watch-sidecar")
    return [
        "# mfukit watch serves the run's MFU, goodput and step time from this node while it trains",
        "# (docs/monitoring.md); it stops when this script ends",
        f"{command} &",
        "watch_pid=$!",
        "trap 'kill \"$watch_pid\" 2>/dev/null || true' EXIT",
        "",
    ]


def _watch_job(config: TrainConfig, request: TrainRequest, image: str) -> dict[str, Any]:
    """A one-pod replicated job running ``mfukit watch`` on the run directory's volume."""
    port = parse_listen(request.watch_sidecar or "", "--watch-sidecar")[1]
    container = {
        "name": "mfukit-watch",
        "image": image,
        "command": ["mfukit", *_watch_args(config, request)],
        "ports": [{"containerPort": port, "name": "metrics"}],
        "volumeMounts": [{"name": "runs", "mountPath": K8S_RUNS, "readOnly": True}],
    }
    pod = {
        "restartPolicy": "OnFailure",  # a watch that dies restarts in its pod, never failing the JobSet
        "containers": [container],
        "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": PVC_NAME}}],
    }
    return {
        "name": "watch",
        "replicas": 1,
        "template": {"spec": {"parallelism": 1, "completions": 1, "template": {"spec": pod}}},
    }


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the embedded config.json) as literal blocks, readable in the manifest."""


def _represent_text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_text)
