"""A checkpoint whose bytes changed, or that cannot be loaded, is set aside and the run resumes from the
newest one that verifies: said on stderr and in the ledger, never a crash loop (issue 15, Deliver 3).

A 16-step run is killed before step 14 (checkpoints at 4, 8 and 12, none with a parameter hash). Then
step 12 gets bytes flipped inside a shard (same size: only its sha256 can tell), and step 8 becomes a
checkpoint from before the hashes whose torch.save archive has a broken zip header (only the load can
tell). One resume with --verify-resume must set both aside, resume from step 4 and finish, repeating the
killed run's losses exactly: nothing of the failed load is left in the weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mfukit.ft.ledger import read_records
from mfukit.train.commit import META_NAME, QUARANTINE_PREFIX, CheckpointStore
from mfukit.train.prepare import TrainRequest
from mfukit.train.run import TrainOutcome, run_training

pytestmark = [pytest.mark.torch, pytest.mark.slow]

MICRO = Path(__file__).parents[1] / "data" / "train" / "micro.toml"
STEPS = 16
RUN_LIMIT_S = 300.0
ZIP_MAGIC = b"PK\x03\x04"


def train(out: Path, *inject: str, lines: list[str] | None = None, **options: Any) -> TrainOutcome:
    request = TrainRequest(
        scenario_path=MICRO,
        out=out,
        steps=STEPS,
        inject=inject,
        device="cpu",
        peak_flops="10 GFLOPS",
        **options,
    )
    echo = lines.append if lines is not None else (lambda line: None)
    return run_training(request, echo=echo, timeout_s=RUN_LIMIT_S)


def events(out: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_records(out / "ledger.jsonl")[0] if e["kind"] == kind]


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))


def test_damaged_checkpoints_are_set_aside_and_the_run_resumes_from_the_newest_good_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    killed = train(out, "kill@step=14:rank=1", max_restarts=0)
    assert killed.exit_code == 1
    store = CheckpointStore(out / "checkpoints", keep=3)
    assert [c.meta.step for c in store.scan()[0]] == [4, 8, 12]

    step12 = out / "checkpoints" / "step-00000012"
    shard = max(step12.glob("*.distcp"), key=lambda p: p.stat().st_size)
    flip_bytes(shard)
    step8 = out / "checkpoints" / "step-00000008"
    record = json.loads((step8 / META_NAME).read_text())
    del record["sha256"]  # written before mfukit recorded hashes
    (step8 / META_NAME).write_text(json.dumps(record))
    archives = [p for p in step8.glob("*.distcp") if ZIP_MAGIC in p.read_bytes()]
    assert archives, "no torch.save archive inside the shards"
    for archive in archives:
        archive.write_bytes(archive.read_bytes().replace(ZIP_MAGIC, b"XX\x03\x04"))
    assert [c.meta.step for c in store.scan()[0]] == [4, 8, 12]  # sizes unchanged: all look complete

    lines: list[str] = []
    resumed = train(out, lines=lines, verify_resume=True)
    assert resumed.exit_code == 0, resumed.warnings
    assert (resumed.result["status"], resumed.result["steps"], resumed.result["restarts"]) == (
        "complete",
        STEPS,
        0,
    )

    by_step = {e["step"]: e for e in events(out, "corrupt_checkpoint")}
    assert sorted(by_step) == [8, 12]
    assert "sha256" in by_step[12]["reason"] and shard.name in by_step[12]["reason"]
    assert "cannot be loaded" in by_step[8]["reason"]
    assert events(out, "attempt_start")[-1]["resumed_step"] == 4
    for step in (8, 12):
        assert any(f"step-{step:08d}" in line and "set aside" in line for line in lines), lines
        assert any(f"step {step} failed verification" in w for w in resumed.warnings)
        assert (out / "checkpoints" / f"{QUARANTINE_PREFIX}step-{step:08d}").is_dir()
    # --verify-resume on a checkpoint saved without it: works, and says what it could not compare
    assert events(out, "resume_verified")[-1]["match"] is None
    assert any("saved without a parameter hash" in line for line in lines)
    assert not any("Traceback" in line for line in lines)

    # the resumed steps repeat the killed run's losses bit for bit
    metrics = read_records(out / "metrics.jsonl")[0]
    first = {m["step"]: m["loss"] for m in metrics if m["attempt"] == 0}
    again = {m["step"]: m["loss"] for m in metrics if m["attempt"] == 1}
    assert min(again) == 5
    assert [again[s] for s in range(5, 14)] == [first[s] for s in range(5, 14)]
