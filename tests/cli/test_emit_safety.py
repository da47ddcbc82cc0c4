"""`mfukit train --emit`: no user string can inject a command or an option (issue 15, Deliver 1).

The reproducers from the issue run through the CLI; the property tests feed arbitrary text to every
value an emitter takes and run the sbatch script with stub Slurm commands and torchrun on PATH: either the
emitter refuses the text (InputError, exit 2), or the script runs exactly the intended commands, with
exactly the given values, and sbatch reads exactly the intended options from its ``#SBATCH`` lines.
"""

from __future__ import annotations

import functools
import shlex
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from emit_support import install_stubs, run_with_stubs, sbatch_options
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mfukit.errors import InputError
from mfukit.train.config import TrainConfig
from mfukit.train.emit import kubernetes_manifest, sbatch_script
from mfukit.train.launch import SIGNALS_TO_FORWARD
from mfukit.train.prepare import TrainRequest, prepare

EXAMPLE = Path(__file__).parents[2] / "examples" / "tiny-cpu.toml"
INJECTIONS = [
    "\ntouch pwned\n",
    "\r\ntouch pwned",
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "' ; touch pwned ; '",
    '" ; touch pwned ; "',
    "\\\n#SBATCH --uid=0",
    " --uid=0",
    "\x00",
    "\x1b[2J",
    "\u2028touch pwned",
    "\u202e",
    "#",
    "%j%%",
    "hetjob",
    "&& rm -rf x",
    "${IFS}touch${IFS}pwned",
]
hostile = st.one_of(
    st.text(max_size=24),
    st.builds(
        lambda a, b, c: a + b + c, st.text(max_size=8), st.sampled_from(INJECTIONS), st.text(max_size=8)
    ),
)
# what a path may hold and an sbatch script can still express (no control character, no backslash)
expressible = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=["Cc", "Cf", "Cs", "Zl", "Zp"], exclude_characters="\\"
    ),
    max_size=24,
).filter(lambda text: "hetjob" not in text.lower() and "packjob" not in text.lower())


@functools.cache
def base() -> tuple[TrainConfig, TrainRequest]:
    request = TrainRequest(scenario_path=EXAMPLE, nproc_per_node=2, nnodes="1")
    return prepare(request, cuda=True).config, request


def run_dir(root: Path, text: str) -> Path:
    """``text`` as a run directory under ``root`` (never above it)."""
    relative = text.lstrip("/")
    assume(not any(part == ".." for part in relative.split("/")))
    assume(all(len(part.encode()) < 200 for part in relative.split("/")))
    return root / "runs" / relative


def intended_torchrun(out: Path, nnodes: str) -> list[str]:
    return [
        "torchrun",
        f"--nnodes={nnodes}",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.9.8.7:20042",
        "--rdzv-id=42",
        "--max-restarts=3",
        f"--signals-to-handle={SIGNALS_TO_FORWARD}",
        "-m",
        "mfukit.train.worker",
        str(out / "config.json"),
    ]


def check_sbatch(root: Path, out_text: str, **values: Any) -> None:
    """Emit with ``values``; when accepted, run the script and check only the intended commands ran."""
    config, request = base()
    out = run_dir(root, out_text)
    nnodes = values.pop("nnodes", "2")
    partition = values.pop("partition", "batch")
    time_limit = values.pop("time_limit", "4:00:00")
    nccl = values.pop("nccl", "mlx5_0:1")
    name = values.pop("name", "tiny-cpu")
    try:
        script = sbatch_script(
            config.model_copy(update={"out_dir": str(out), "name": name}),
            replace(request, nnodes=nnodes),
            gpus=2,
            env={"NCCL_IB_HCA": nccl},
            time_limit=time_limit,
            partition=partition,
        )
    except InputError as error:
        assert error.field, error.render()  # a refusal names the flag or field
        return
    low, _, high = nnodes.partition(":")
    single = not high or high == low
    options = sbatch_options(script)
    job_name = next(o for o in options if o.startswith("--job-name="))
    assert options == [
        job_name,
        f"--nodes={low if single else f'{low}-{high}'}",
        "--ntasks-per-node=1",
        "--gpus-per-node=2",
        "--exclusive",
        f"--time={time_limit}",
        "--requeue",
        options[7],
        "--open-mode=append",
        f"--output={str(out / 'logs').replace('%', '%%')}/slurm-%j.out",
        f"--partition={partition}",
    ]
    assert options[7].startswith("--signal=B:USR1@")
    script_path = root / "train.sbatch"
    script_path.write_text(script, encoding="utf-8")
    calls = run_with_stubs(script_path, root / "bin", root)
    torchrun = intended_torchrun(out, low if single else nnodes)
    assert calls == [
        ["scontrol", "show", "hostnames", "gpu[01-02]"],
        ["scontrol", "show", "node", "gpu01"],
        ["srun", "--kill-on-bad-exit=1", "--cpu-bind=none", *torchrun],
        torchrun,
    ]
    assert (out / "logs").is_dir()
    assert not list(root.rglob("pwned"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    out=hostile,
    partition=st.one_of(st.just("batch"), hostile),
    time_limit=st.one_of(st.sampled_from(["10", "4:00:00", "1-00:00:00"]), hostile),
    nnodes=st.one_of(st.sampled_from(["2", "1:2"]), hostile),
    nccl=hostile,
    name=hostile,
)
def test_sbatch_runs_only_the_intended_commands_whatever_the_text(
    out: str, partition: str, time_limit: str, nnodes: str, nccl: str, name: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        install_stubs(root / "bin")
        check_sbatch(
            root, out, partition=partition, time_limit=time_limit, nnodes=nnodes, nccl=nccl, name=name
        )


@pytest.mark.slow  # each example runs bash and four stub interpreters
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(out=expressible)
def test_any_expressible_run_directory_is_accepted_and_reaches_every_command_intact(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        install_stubs(root / "bin")
        config, request = base()
        out_dir = run_dir(root, out)
        sbatch_script(
            config.model_copy(update={"out_dir": str(out_dir)}),
            request,
            gpus=2,
            env={},
            time_limit="10",
            partition=None,
        )  # no InputError: every such path can be expressed
        check_sbatch(root, out)


@settings(max_examples=60, deadline=None)
@given(
    image=st.one_of(
        st.sampled_from(["registry.example/mfukit:1", "localhost:5000/a/b@sha256:" + "a" * 64]), hostile
    ),
    name=hostile,
)
def test_k8s_manifest_carries_the_text_as_values_or_refuses_it(image: str, name: str) -> None:
    config, request = base()
    try:
        text = kubernetes_manifest(
            config.model_copy(update={"name": name, "out_dir": f"/runs/{name}"}),
            request,
            gpus=2,
            env={"NCCL_IB_HCA": "mlx5_0:1"},
            image=image,
        )
    except InputError as error:
        assert error.field, error.render()
        return
    config_map, jobset = yaml.safe_load_all(text)
    (container,) = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image
    assert container["command"][-3:] == ["-m", "mfukit.train.worker", "/etc/mfukit/config.json"]
    assert TrainConfig.model_validate_json(config_map["data"]["config.json"]).name == name


# ----------------------------------------------------------------------------------- the reproducers
def emit(mfukit: Any, out: Path | str, *extra: str, kind: str = "slurm") -> Any:
    return mfukit("train", str(EXAMPLE), "--emit", kind, "--out", str(out), *extra)


def test_newline_in_partition_is_refused(mfukit: Any, tmp_path: Path) -> None:
    run = emit(mfukit, tmp_path / "X", "--partition", "batch\ntouch pwned")
    assert run.exit_code == 2
    assert "--partition" in run.stderr and "control character" in run.stderr
    assert not (tmp_path / "X" / "train.sbatch").exists()


@pytest.mark.parametrize("partition", ["batch gpu", "batch#x", "a=b", "batch,", "bätch"])
def test_partition_must_be_a_slurm_name(mfukit: Any, tmp_path: Path, partition: str) -> None:
    run = emit(mfukit, tmp_path / "X", "--partition", partition)
    assert run.exit_code == 2 and "--partition" in run.stderr


def test_partition_list_is_accepted(mfukit: Any, tmp_path: Path) -> None:
    run = emit(mfukit, tmp_path / "X", "--partition", "batch,gpu-h100.long_q", "--format", "json")
    assert run.exit_code == 0, run.stderr
    assert "--partition=batch,gpu-h100.long_q" in sbatch_options(run.json()["result"]["text"])


def test_newline_in_out_is_refused(mfukit: Any, tmp_path: Path) -> None:
    run = emit(mfukit, f"{tmp_path}/X\ntouch pwned")
    assert run.exit_code == 2
    assert "--out" in run.stderr and "control character" in run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag,value", [("--nnodes", " 2\n"), ("--nnodes", "٢"), ("--time-limit", "\n10")])
def test_counts_and_limits_are_ascii_digits(mfukit: Any, tmp_path: Path, flag: str, value: str) -> None:
    run = emit(mfukit, tmp_path / "X", flag, value)
    assert run.exit_code == 2 and flag in run.stderr


def test_run_directory_with_spaces_quotes_and_percent_works(mfukit: Any, tmp_path: Path) -> None:
    out = tmp_path / 'my run "#1" $(touch pwned) 50%'
    run = emit(
        mfukit, out, "--nproc-per-node", "2", "--nnodes", "2", "--global-batch-size", "16", "--format", "json"
    )
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    script_path = Path(envelope["result"]["path"])
    assert script_path == out / "train.sbatch"
    options = sbatch_options(script_path.read_text())
    assert f'--output={tmp_path}/my run "#1" $(touch pwned) 50%%/logs/slurm-%j.out' in options
    install_stubs(tmp_path / "bin")
    calls = run_with_stubs(script_path, tmp_path / "bin", tmp_path)
    assert calls[-1] == intended_torchrun(out, "2")
    assert not list(tmp_path.rglob("pwned"))
    # the printed command is one the shell splits back into sbatch and the path
    assert shlex.split(envelope["result"]["submit"]) == ["sbatch", str(script_path)]


def test_printed_submit_command_is_quoted(
    mfukit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # the note on one line
    out = tmp_path / "a b;c [red]x[/red]"
    table = emit(mfukit, out)
    assert table.exit_code == 0, table.stderr
    (line,) = [line for line in table.stdout.splitlines() if line.startswith("submit with: ")]
    assert shlex.split(line.removeprefix("submit with: ")) == ["sbatch", str(out / "train.sbatch")]
    k8s = emit(mfukit, out, "--image", "registry.example/mfukit:1", "--format", "json", kind="k8s")
    assert k8s.exit_code == 0, k8s.stderr
    assert shlex.split(k8s.json()["result"]["submit"]) == [
        "kubectl",
        "apply",
        "-f",
        str(out / "train-jobset.yaml"),
    ]


def test_backslash_in_out_is_refused_for_slurm(mfukit: Any, tmp_path: Path) -> None:
    run = emit(mfukit, tmp_path / "a\\b")
    assert run.exit_code == 2 and "backslash" in run.stderr


@pytest.mark.parametrize(
    "image",
    [
        "registry.example/mfukit:1",
        "mfukit",
        "localhost:5000/team/mfukit@sha256:" + "0" * 64,
        "a/b__c/d-e.f:v1.2_3",
    ],
)
def test_oci_references_are_accepted(mfukit: Any, tmp_path: Path, image: str) -> None:
    run = emit(mfukit, tmp_path / "X", "--image", image, kind="k8s")
    assert run.exit_code == 0, run.stderr


@pytest.mark.parametrize(
    "image",
    ["Registry.example/Mfukit", "mfukit:", "a//b", "a:1:2", "a@sha256:xyz", "-a", "a b", "x\n- rm", "a:-tag"],
)
def test_non_oci_references_are_refused(mfukit: Any, tmp_path: Path, image: str) -> None:
    run = emit(mfukit, tmp_path / "X", "--image", image, kind="k8s")
    assert run.exit_code == 2 and "--image" in run.stderr
