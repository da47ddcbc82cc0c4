"""The sacct -P reader: blocks, lines Python splits, spellings Arrow does not take, and jobs built late."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mfukit.errors import InputError
from mfukit.sched.job import RUNNING, Job
from mfukit.sched.traces import read_trace, sacct_parsable
from mfukit.sched.traces.common import Rows, TraceRead
from mfukit.sched.traces.sacct_parsable import read_sacct_parsable
from mfukit.sched.traces.shape import JobFactory

DATA = Path(__file__).parents[1] / "data" / "sched"
HEADER = "JobID|Partition|User|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|NodeList|TimelimitRaw|Flags"


def row(job: str, start: str = "2026-01-01T00:01:00", end: str = "2026-01-01T01:01:00", **fields: str) -> str:
    values = {
        "partition": "batch",
        "user": "u1",
        "state": "COMPLETED",
        "submit": "2026-01-01T00:00:00",
        "eligible": "2026-01-01T00:00:30",
        "elapsed": "3600",
        "nodes": "1",
        "tres": "cpu=4,gres/gpu=8",
        "nodelist": "gpu01",
        "limit": "120",
        "flags": "SchedMain",
    } | fields
    keys = ("partition", "user", "state", "submit", "eligible")
    rest = ("elapsed", "nodes", "tres", "nodelist", "limit", "flags")
    return "|".join([job, *(values[k] for k in keys), start, end, *(values[k] for k in rest)])


def write(tmp_path: Path, lines: list[str], newline: str = "\n") -> Path:
    path = tmp_path / "sacct.txt"
    path.write_bytes(newline.join(lines).encode() + newline.encode())
    return path


def key(job: Job) -> tuple[Any, ...]:
    return (
        job.job_id, job.name, job.submit_s, job.eligible_s, job.run_s, job.limit_s, job.num_nodes,
        job.gpus_per_node, job.partition, job.qos, job.user, job.exit_state, job.start_s,
        job.first_start_s, job.end_s, job.state, job.node_names, job.backfilled, job.restarts,
    )  # fmt: skip


def summary(read: TraceRead) -> tuple[Any, ...]:
    assert read.attempts is not None
    return (
        [key(j) for j in read.jobs],
        [key(j) for j in read.attempts],
        list(read.skipped.items()),
        read.warnings,
        read.assumptions,
    )


def mixed(tmp_path: Path) -> Path:
    """Rows with every line Arrow does not read as Python does, and other spellings, among plain ones."""
    rows = [row(str(n), nodelist=f"gpu{n:02d}", user=f"u{n % 3}") for n in range(1, 40)]
    extra = [
        "",
        "   ",
        row("41", end="Unknown", state="RUNNING"),
        row("42", start="Unknown", end="Unknown", state="PENDING"),
        row("43.batch", tres="cpu=1"),
        row("44_3", user="", partition=""),
        row("007", elapsed="", nodes="", limit="", tres="gres/gpu:a100=4"),
        row("45", submit="1767225600", eligible="Unknown"),
        row("46", start="2026-01-01 00:02:00", nodelist="gpu[01-02]", nodes="2", tres="gres/gpu=16"),
        "47|batch|u1",  # too few fields: the rest are empty (no GPUs)
        row("48") + "|extra|fields",
        "\ufeff" + row("49"),
    ]
    return write(tmp_path, [HEADER, *rows[:20], *extra, *rows[20:]])


@pytest.mark.parametrize(("block", "split"), [(97, 1 << 16), (1000, 300), (5000, 200), (5000, 1 << 16)])
def test_blocks_and_halves_do_not_change_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, split: int
) -> None:
    path = mixed(tmp_path)
    whole = read_trace(path, gpus_per_node=8, cluster_gpus=1024, skip_bad=True)
    monkeypatch.setattr(sacct_parsable, "BLOCK_BYTES", block)
    monkeypatch.setattr(sacct_parsable, "SPLIT_BYTES", split)
    assert summary(read_trace(path, gpus_per_node=8, cluster_gpus=1024, skip_bad=True)) == summary(whole)


def test_other_spellings_read_as_the_row_functions_read_them(tmp_path: Path) -> None:
    read = read_trace(mixed(tmp_path), gpus_per_node=8, cluster_gpus=1024)
    by_name = {job.name: job for job in read.jobs}
    assert read.skipped == {
        "job step (use sacct -X)": 1,
        "never started (pending)": 1,
        "no GPUs allocated": 1,
    }
    assert by_name["41"].state == RUNNING and by_name["41"].end_s is None
    assert (
        by_name["44_3"].job_id == 44 and by_name["44_3"].user == "" and by_name["44_3"].partition == "batch"
    )
    lone = by_name["007"]  # no ElapsedRaw: end - start; no limit: the run time (factor 1)
    assert lone.job_id == 7 and lone.run_s == 3600.0 and lone.limit_s == 3600 and lone.num_gpus == 4
    assert by_name["45"].submit_s == 1767225600.0  # Eligible Unknown: queued from Submit, an epoch time
    assert by_name["46"].start_s == 1767225720.0 and by_name["46"].node_names == ("gpu01", "gpu02")
    assert by_name["48"].limit_s == 7200.0  # fields past the header's are not read
    assert by_name["\ufeff49"].job_id == 33  # a BOM before the number: no leading number, so its line
    assert any("no time limit" in note for note in read.assumptions)


def test_lines_are_numbered_as_python_splits_them(tmp_path: Path) -> None:
    lines = [HEADER, "", row("1"), row("2") + "\r" + row("3"), "  ", row("4", start="2026-13-01T00:00:00")]
    path = write(tmp_path, lines, "\r\n")
    with pytest.raises(InputError, match=r"line 7: not a time: '2026-13-01T00:00:00'"):
        read_trace(path, gpus_per_node=8, cluster_gpus=64)
    read = read_trace(path, gpus_per_node=8, cluster_gpus=64, skip_bad=True)
    assert [j.name for j in read.jobs] == ["1", "2", "3"] and "skipped 1 bad row(s): line 7" in read.warnings[
        0
    ]


def test_bad_fields_are_named_in_file_order_whichever_block_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sacct_parsable, "BLOCK_BYTES", 300)
    lines = [HEADER, *(row(str(n)) for n in range(1, 9))]
    lines[3] = row("3", nodelist="gpu[a-3]")
    lines[6] = row("6", elapsed="-5")
    lines[8] = row("8", tres="gres/gpu=2048")
    path = write(tmp_path, lines)
    with pytest.raises(InputError, match=r"line 4: NodeList 'gpu\[a-3\]' is not a Slurm host list"):
        read_trace(path, gpus_per_node=8, cluster_gpus=1024)
    read = read_trace(path, gpus_per_node=8, cluster_gpus=1024, skip_bad=True)
    assert (
        "line 4: NodeList" in read.warnings[0]
        and "line 7: ElapsedRaw '-5' is not a non-negative" in read.warnings[0]
    )
    assert "line 9: asks for 2048 GPUs" in read.warnings[0]
    # a bad row's NodeList, though in the dictionary of a batch with attempts, is never expanded
    assert [job.name for job in read.jobs] == ["1", "2", "4", "5", "7"]


def test_jobids_fold_by_their_text(tmp_path: Path) -> None:
    lines = [HEADER, row("7", state="PREEMPTED"), row("007"), row("7_1"), row(" 7 ", state="PREEMPTED")]
    lines += [row("7", start="2026-01-01T02:00:00"), row("7_1", state="FAILED")]
    read = read_trace(write(tmp_path, lines), gpus_per_node=8, cluster_gpus=64)
    assert [(j.name, j.job_id, j.restarts) for j in read.jobs] == [("7", 7, 2), ("007", 7, 0), ("7_1", 7, 1)]
    assert read.jobs[0].first_start_s == 1767225660.0 and read.jobs[0].start_s == 1767232800.0
    assert read.attempts is not None and len(read.attempts) == 6 and read.jobs[0] is read.attempts[4]


def test_numbers_beyond_64_bits_stay_exact(tmp_path: Path) -> None:
    lines = [HEADER, row("123456789012345678901234567890", nodes="1e20", tres="gres/gpu=8")]
    (job,) = read_trace(write(tmp_path, lines), gpus_per_node=8, cluster_gpus=64).jobs
    assert job.job_id == 123456789012345678901234567890 and job.num_nodes == 10**20


class CountingFactory(JobFactory):
    made = 0

    def make(self, *args: Any, **kwargs: Any) -> Job | None:
        self.made += 1
        return super().make(*args, **kwargs)


def test_jobs_are_built_on_first_use(tmp_path: Path) -> None:
    factory = CountingFactory(8, 1024)
    read = read_sacct_parsable(DATA / "devslurm_sacct.txt", factory, Rows("devslurm", skip_bad=False))
    assert (
        read.attempts is not None and (len(read.jobs), len(read.attempts)) == (40, 40) and factory.made == 0
    )
    assert {job.name for job in read.jobs} == {str(n) for n in range(1, 41)} and factory.made == 40
    assert all(a is j for a, j in zip(read.attempts, read.jobs, strict=True))
