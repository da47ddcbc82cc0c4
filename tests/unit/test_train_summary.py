"""The launcher's account of a run that did not finish: status, exit code 1, a warning that says what to do."""

from __future__ import annotations

import json
from pathlib import Path

from mfukit.ft.ledger import EventLog
from mfukit.train.launch import Finished
from mfukit.train.prepare import TrainRequest, prepare
from mfukit.train.run import summarize

MICRO = Path(__file__).parents[1] / "data" / "train" / "micro.toml"


def test_a_run_that_gave_up_is_a_negative_answer(tmp_path: Path) -> None:
    prepared = prepare(TrainRequest(scenario_path=MICRO, out=tmp_path), cuda=False)
    log = EventLog(tmp_path / "ledger.jsonl", attempt=-1)
    log.record("launch")
    step: dict[str, object] = {
        "attempt": 0,
        "step_time_s": 0.1,
        "loss": 4.0,
        "tokens_per_s": 640.0,
        "mfu": 0.1,
    }
    step.update(rank_compute_s=[0.05, 0.05], straggler_ratio=1.0, slowest_rank=0)
    lines = [{**step, "step": n, "t_start": 1e10 + n, "t_end": 1e10 + n + 0.1} for n in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    tail = [
        "RuntimeError: a worker failed",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    outcome = summarize(
        prepared.config, prepared, Finished(returncode=1, timed_out=False, wall_s=5.0, tail=tail)
    )
    assert outcome.exit_code == 1
    assert outcome.result["status"] == "failed"
    assert outcome.result["steps"] == 3 and outcome.result["final_loss"] is None
    (warning,) = outcome.warnings
    assert "torchrun exit 1" in warning and "ChildFailedError" in warning
    assert "rerun the same command to resume" in warning


def test_a_timed_out_run_says_so(tmp_path: Path) -> None:
    prepared = prepare(TrainRequest(scenario_path=MICRO, out=tmp_path), cuda=False)
    outcome = summarize(
        prepared.config, prepared, Finished(returncode=-15, timed_out=True, wall_s=60.0, tail=[])
    )
    assert outcome.exit_code == 1
    assert outcome.warnings == ["the run exceeded --timeout after 60 s and was stopped"]
    assert outcome.result["steps"] == 0 and outcome.result["ettr_measured"] == 0.0
    assert outcome.result["ettr_predicted"] is None


def _commit(out: Path, step: int, config_hash: str) -> None:
    from mfukit.train.commit import DCP_METADATA, CheckpointMeta, CheckpointStore

    store = CheckpointStore(out / "checkpoints", keep=3)
    staging = store.begin(step)
    (staging / DCP_METADATA).write_bytes(b"m")
    meta = CheckpointMeta(step, 2, "2.13.0", config_hash, step * 4, "sync", 0.0)
    store.commit(staging, meta)


def test_an_out_dir_of_another_config_or_a_finished_run_is_refused(tmp_path: Path) -> None:
    import pytest

    from mfukit.errors import InputError
    from mfukit.train.run import _check_existing

    config = prepare(TrainRequest(scenario_path=MICRO, out=tmp_path), cuda=False).config
    _check_existing(config)  # empty: a fresh run
    _commit(tmp_path, 4, config.config_hash())
    _check_existing(config)  # a resumable run of the same configuration
    _commit(tmp_path, 12, config.config_hash())
    with pytest.raises(InputError, match="already holds a finished run"):
        _check_existing(config)
    _commit(tmp_path, 16, "another")
    with pytest.raises(InputError, match="another configuration") as caught:
        _check_existing(config)
    assert caught.value.field == "--out"


def test_peak_from_a_bench_matmul_result(tmp_path: Path) -> None:
    import pytest

    from mfukit.errors import InputError
    from mfukit.train.run import resolve_peak

    prepared = prepare(TrainRequest(scenario_path=MICRO, out=tmp_path), cuda=False)
    bench = tmp_path / "matmul.json"
    bench.write_text(
        json.dumps({"schema": "bench.matmul/1", "result": {"peak_flops_per_s": {"fp32": 6.5e10}}})
    )
    value, source = resolve_peak(str(bench), prepared, cuda=False)
    assert value == 6.5e10 and "bench matmul" in source
    assert resolve_peak("1.5 TFLOPS", prepared, cuda=False)[0] == pytest.approx(1.5e12)
    bench.write_text(json.dumps({"result": {"peak_flops_per_s": {"bf16": 1e12}}}))
    with pytest.raises(InputError, match=r"no result\.peak_flops_per_s\.fp32"):
        resolve_peak(str(bench), prepared, cuda=False)
