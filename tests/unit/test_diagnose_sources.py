"""Each artifact parser on small samples in the formats the reference documents."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mfukit.catalog import resolve
from mfukit.core.scenario import ClusterSection, TrainingSection
from mfukit.diagnose.engine import diagnose
from mfukit.diagnose.mfu import measure
from mfukit.diagnose.sources import dcgm, dcgmi_diag, detect, kernel_log, nvidia_smi, sacct, training_log
from mfukit.diagnose.sources.jsonstream import TraceEventStream
from mfukit.perf.flops import model_flops_per_token


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_nvidia_smi_csv_units_reasons_and_na(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "node03.csv",
        "timestamp, index, name, utilization.gpu [%], clocks.sm [MHz], clocks.max.sm [MHz], power.draw [W], "
        "clocks_event_reasons.active, ecc.errors.uncorrected.volatile.total\n"
        "2025/09/28 21:48:26.006, 0, NVIDIA H100 80GB HBM3, 100 %, 1155 MHz, 1980 MHz, 699.12 W, 0x0000000000000048, [N/A]\n",
    )
    assert [source.kind for source in detect(path)] == ["nvidia_smi"]
    (series,) = nvidia_smi.parse(path)
    sample = series.samples[0]
    assert series.host == "" and series.gpu == "0"  # the file's name is no host
    assert sample.sm_clock_hz == 1155e6 and sample.max_sm_clock_hz == 1980e6
    assert sample.throttle_reasons == 0x48 and sample.utilization == 1.0
    assert sample.ecc_uncorrected is None and sample.time_s is not None


def test_nvidia_smi_csv_hosts_come_from_pdsh_prefixes(tmp_path: Path) -> None:
    """`pdsh -w gpu[01-02] nvidia-smi --query-gpu=... --format=csv` prefixes each line with its node."""
    header = "timestamp, index, name, clocks.sm [MHz]"
    rows = [f"{host}: {line}" for host in ("gpu01", "gpu02") for line in
            (header, f"2025/09/28 21:48:26.006, 0, NVIDIA H100 80GB HBM3, {1980 if host == 'gpu01' else 1155} MHz")]  # fmt: skip
    path = write(tmp_path, "nvidia-smi_node007.csv", "\n".join(rows) + "\n")
    found = {(s.host, s.gpu): s.samples[0].sm_clock_hz for s in nvidia_smi.parse(path)}
    assert found == {("gpu01", "0"): 1980e6, ("gpu02", "0"): 1155e6}


def test_nvidia_smi_q_reasons_ecc_and_remap(tmp_path: Path) -> None:
    text = """==============NVSMI LOG==============

Driver Version                            : 535.129.03
Attached GPUs                             : 1
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    Clocks Event Reasons
        Idle                              : Not Active
        SW Power Cap                      : Not Active
        HW Slowdown                       : Active
        HW Thermal Slowdown               : Active
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 12
            DRAM Uncorrectable            : 2
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
    Clocks
        SM                                : 705 MHz
    Max Clocks
        SM                                : 1410 MHz
"""
    (series,) = nvidia_smi.parse(write(tmp_path, "gpu-q.txt", text))
    sample = series.samples[0]
    assert sample.throttle_reasons == 0x8 | 0x40
    assert sample.ecc_uncorrected == 2
    assert sample.remap_pending is True and sample.remap_failure is False
    assert sample.sm_clock_hz == 705e6 and sample.max_sm_clock_hz == 1410e6


def test_dcgm_scrape_filters_sentinels(tmp_path: Path) -> None:
    text = (
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h1"} 1980\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-2",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="h1"} 990\n'
        'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1",Hostname="h1"} 9223372036854775794\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="h1"} 100\n'
    )
    series = {s.gpu: s for s in dcgm.parse(write(tmp_path, "metrics.prom", text))}
    assert series["1"].samples[0].sm_clock_hz == 990e6
    assert series["1"].samples[0].ecc_uncorrected is None  # the blank sentinel is not 9.2e18 errors
    assert series["1"].samples[0].utilization == 1.0


def test_dcgmi_diag_table(tmp_path: Path) -> None:
    text = """+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
+-----  Hardware  ----------+------------------------------------------------+
| Diagnostic                | Fail - GPU: 0                                  |
| Warning                   | GPU 0 Thermal violations totaling 13.3 seconds |
+-----  Stress  ------------+------------------------------------------------+
| Memory Bandwidth          | Pass - All                                     |
"""
    results = dcgmi_diag.parse(write(tmp_path, "diag.txt", text))
    failed = [r for r in results if r.status in ("fail", "warn")]
    assert {r.test for r in failed} == {"Diagnostic"}
    assert any("Thermal violations" in r.message for r in failed)


def test_xid_lines_all_formats(tmp_path: Path) -> None:
    text = (
        "[Tue Sep 10 10:47:46 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        "Sep 10 10:47:46 gpu-17 kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.\n"
        "NVRM: Xid (0000:03:00): 14, Channel 00000001\n"
        "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error\n"
    )
    events = kernel_log.parse(write(tmp_path, "dmesg.txt", text))
    assert [e.xid for e in events] == [79, 63, 14, 12028]
    assert events[1].host == "gpu-17" and events[0].pci == "0000:3b:00"
    assert events[0].host is None  # dmesg names no host, and the file's name is none
    assert events[3].nvswitch


def test_a_fatal_xid_fails_the_failure_gate(tmp_path: Path) -> None:
    """XID 79 (fallen off the bus) in the journal of gpu-17, and no checkpoint save anywhere."""
    write(tmp_path, "journal.txt", "Sep 10 10:47:46 gpu-17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1896, "
          "GPU has fallen off the bus.\n")  # fmt: skip
    result = diagnose([tmp_path])
    gate = next(g for g in result.gates if g.id == "failure_rate")
    assert gate.status == "fail" and "XID 79" in gate.why and "gpu-17" in gate.why
    xid = next(f for f in result.findings if f.id == "xid_error")
    assert "nodename=gpu-17" in xid.fix[0]


def test_sacct_parsable(tmp_path: Path) -> None:
    text = (
        "JobID|JobName|State|Submit|Eligible|Start|End|AllocTRES|NodeList\n"
        "2|A|COMPLETED|2026-11-29T16:15:04|2026-11-29T16:15:04|2026-11-29T16:15:04|2026-11-29T16:15:24|"
        "billing=3,cpu=3,gres/gpu:h100=24,gres/gpu=24,mem=12000M,node=3|gpu[01-03]\n"
        "2.batch|batch|COMPLETED|||2026-11-29T16:15:04|2026-11-29T16:15:24|cpu=1|gpu01\n"
        "3|B|NODE_FAIL|2026-11-29T16:15:30|2026-11-29T16:15:30|2026-11-29T16:15:40|2026-11-29T16:20:40|gres/gpu=8,node=1|gpu04\n"
    )
    jobs = sacct.parse(write(tmp_path, "sacct.txt", text))
    assert [(j.job_id, j.state, j.num_gpus, j.num_nodes) for j in jobs] == [
        ("2", "COMPLETED", 24, 3),
        ("3", "NODE_FAIL", 8, 1),
    ]
    assert jobs[0].end_s is not None and jobs[0].start_s is not None and jobs[0].end_s - jobs[0].start_s == 20


@pytest.mark.parametrize(
    ("framework", "text", "step", "check"),
    [
        (
            "megatron",
            " [2024-05-01 10:00:00] iteration      100/  500000 | consumed samples:        51200 | elapsed time per iteration (ms): 5123.4 | "
            "throughput per GPU (TFLOP/s/GPU): 150.2 | learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 2.345678E+00 |\n",
            100,
            lambda s: (
                s.step_time_s == pytest.approx(5.1234)
                and s.tflops_per_gpu == 150.2
                and s.loss == pytest.approx(2.345678)
            ),
        ),
        (
            "torchtitan",
            "\x1b[31m[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - step: 10  loss:  7.8421  memory: 33.12GiB(34.85%)  "
            "tps: 6,123  tflops: 354.23  mfu: 35.82%\x1b[39m\n",
            10,
            lambda s: s.tokens_per_s_per_gpu == 6123 and s.mfu == pytest.approx(0.3582),
        ),
        (
            "huggingface",
            "{'loss': 2.3456, 'grad_norm': 1.23, 'learning_rate': 5e-05, 'epoch': 0.1}\n"
            " 10%|█         | 100/1000 [01:40<15:00,  1.00s/it]\n",
            100,
            lambda s: s.step_time_s == 1.0,
        ),
        (
            "lightning",
            "Epoch 0:  10%|█         | 100/1000 [00:50<07:30,  2.00it/s, v_num=0, train_loss=2.34]\n",
            100,
            lambda s: s.step_time_s == 0.5 and s.loss == 2.34,
        ),
        (
            "mfukit-jsonl",
            json.dumps(
                {"step": 7, "loss": 2.1, "step_time_s": 1.25, "tokens_per_s": 8e5, "mfu": 0.41, "memory": {}}
            )
            + "\n",
            7,
            lambda s: s.mfu == 0.41 and s.tokens_per_s == 8e5,
        ),
        (
            "generic",
            "step 12 | loss 3.2 | step_time 850 ms | tokens/s 12000\n",
            12,
            lambda s: s.step_time_s == 0.85,
        ),
    ],
)
def test_training_logs(tmp_path: Path, framework: str, text: str, step: int, check: object) -> None:
    path = write(tmp_path, "train.log", text)
    assert training_log.framework_of(text) == framework
    (log,) = training_log.parse(path)
    record = next(s for s in log.steps if s.step == step)
    assert check(record)  # type: ignore[operator]


def test_stream_reads_header_after_events_and_top_level_arrays(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(
        gzip.compress(
            b'{"traceEvents": [{"ph": "X", "name": "a"}, {"ph": "X"}], "distributedInfo": {"rank": 3}}'
        )
    )
    stream = TraceEventStream(path, dict, chunk_chars=8)
    assert len(list(stream.events())) == 2 and stream.header["distributedInfo"] == {"rank": 3}
    array = write(tmp_path, "a.json", '[{"ph": "X"}, {"ph": "M"}]')
    assert len(list(TraceEventStream(array, dict).events())) == 2


def test_stream_survives_truncation_and_corruption(tmp_path: Path) -> None:
    events = ",".join(json.dumps({"ph": "X", "name": f"k{i}", "ts": i, "dur": 1}) for i in range(50))
    text = '{"traceEvents": [' + events + "]}"
    cut = write(tmp_path, "cut.json", text[: len(text) // 2])
    stream = TraceEventStream(cut, dict, chunk_chars=64)
    read = list(stream.events())
    assert 0 < len(read) < 50 and stream.problems.truncated
    broken = write(tmp_path, "broken.json", text.replace('"name": "k10"', '"name": k10 !!'))
    stream = TraceEventStream(broken, dict, chunk_chars=64)
    assert len(list(stream.events())) == 49 and stream.problems.corrupt_stretches == 1


def test_worker_processes_read_what_one_process_reads(tmp_path: Path) -> None:
    """Large inputs are parsed in worker processes (parsing.default_workers): same records either way."""
    from diagnose_support import load_cases

    from mfukit.diagnose.parsing import default_workers, parse_files

    cases = load_cases()
    for rank in range(3):
        plans = [cases.RankPlan(0.01, 0.9, 0.1, extra={"t0_s": 1.0}) for _ in range(2)]
        cases.write_rank_trace(tmp_path / f"rank{rank}.json.gz", rank, 3, plans, 1.2)
    files = sorted(tmp_path.glob("*.json.gz"))
    assert default_workers(files) == 1  # a few hundred KB: not worth a worker process
    alone = parse_files(files, workers=1)
    pooled = parse_files(files, workers=2)
    assert [(p, k, e) for p, k, _, e in alone] == [(p, k, e) for p, k, _, e in pooled]
    assert [r[2][0].steps for r in alone] == [r[2][0].steps for r in pooled]  # type: ignore[attr-defined]


HF_LOG = Path(__file__).parents[1] / "data" / "diagnose" / "logs" / "hf_trainer_printer_callback.log"


@pytest.mark.parametrize(
    "summary",
    [
        # transformers <= 4.x: numbers
        "{'train_runtime': 100.0152, 'train_samples_per_second': 64.0, 'train_steps_per_second': 1.0, "
        "'train_loss': 1.92, 'epoch': 0.0064}",
        # newer releases print every value as a string
        "{'train_runtime': '100', 'train_samples_per_second': '64', 'train_steps_per_second': '1', "
        "'train_loss': '1.92', 'epoch': '0.0064'}",
    ],
)
def test_hf_trainer_summary_without_progress_bars(tmp_path: Path, summary: str) -> None:
    """A Trainer run with disable_tqdm=True prints only its logs dicts: the closing summary's
    train_samples_per_second is the job's throughput (one record covering the run's 100 steps)."""
    text = HF_LOG.read_text().replace(HF_LOG.read_text().splitlines()[-2], summary)
    path = write(tmp_path, "train.log", text)
    (log,) = training_log.parse(path)
    assert log.framework == "huggingface"
    (record,) = log.steps
    assert record.samples_per_s == 64.0 and record.step == 100 and record.interval_steps == 100
    assert not any("progress bar" in p for p in log.problems)


def test_hf_trainer_summary_gives_the_mfu() -> None:
    model = resolve.model_spec({"preset": "llama2-7b"}, source="test")
    training = TrainingSection(seq_len=2048)
    cluster = resolve.cluster(ClusterSection(gpu="a100-80gb-sxm", num_gpus=64), source="test")
    (log,) = training_log.parse(HF_LOG)
    estimate = measure([log], model, training, cluster)
    # 64 sequences/s x 2,048 tokens over 64 GPUs = 2,048 tokens/s per GPU
    assert estimate.tokens_per_s_per_gpu == pytest.approx(2048.0)
    flops = model_flops_per_token(model, 2048, training.attention_flops)
    assert estimate.measured == pytest.approx(2048.0 * flops / 312e12, rel=1e-9)
    assert 0.25 < estimate.measured < 0.32 and "samples/s" in estimate.method
