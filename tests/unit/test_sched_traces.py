"""Trace readers: every format, the numbers they must produce, and bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfukit.errors import InputError
from mfukit.sched.job import COMPLETED, FAILED, TIMEOUT
from mfukit.sched.traces import detect_format, read_trace
from mfukit.sched.traces.hostlists import expand_hostlist
from mfukit.sched.traces.sacct import gpus_in_tres, slurm_duration_s

DATA = Path(__file__).parents[1] / "data" / "sched"


def read(name: str, **kwargs: object):  # type: ignore[no-untyped-def]
    options: dict[str, object] = {"gpus_per_node": 8, "cluster_gpus": 1024} | kwargs
    return read_trace(DATA / name, **options)  # type: ignore[arg-type]


def test_formats_are_detected() -> None:
    assert detect_format(DATA / "small.swf") == "swf"
    assert detect_format(DATA / "alibaba_tasks.csv") == "alibaba"
    assert detect_format(DATA / "helios.csv") == "helios"
    assert detect_format(DATA / "philly.csv") == "helios"
    assert detect_format(DATA / "devslurm_sacct.txt") == "sacct-p"
    assert detect_format(DATA / "devslurm_sacct.json") == "sacct-json"


def test_swf_columns_and_skips() -> None:
    trace = read("small.swf")
    by_id = {j.job_id: j for j in trace.jobs}
    assert sorted(by_id) == [1, 2, 3, 4, 6]  # job 5 never ran
    assert trace.skipped == {"never ran (run time <= 0)": 1}
    first = by_id[1]
    assert (first.submit_s, first.run_s, first.limit_s, first.num_nodes, first.gpus_per_node) == (
        0.0,
        3600.0,
        7200.0,
        1,
        8,
    )
    assert (by_id[2].num_nodes, by_id[2].gpus_per_node) == (2, 8)  # 16 GPUs on 8-GPU nodes
    assert (by_id[4].num_nodes, by_id[4].gpus_per_node) == (8, 8)
    assert by_id[3].exit_state == FAILED and by_id[3].partition == "p2" and by_id[3].user == "u3"
    # job 6: no allocated processors -> requested (2); no requested time -> run x limit factor
    assert by_id[6].num_gpus == 2 and by_id[6].limit_s == 900.0
    assert any("no time limit" in a for a in trace.assumptions)
    doubled = read("small.swf", missing_limit_factor=2.0)
    assert {j.job_id: j.limit_s for j in doubled.jobs}[6] == 1800.0


def test_bad_rows_stop_the_read_with_the_line_or_are_skipped(tmp_path: Path) -> None:
    bad = tmp_path / "bad.swf"
    lines = (DATA / "small.swf").read_text().splitlines()
    lines.insert(7, "7 360 0 600")  # too few fields, at line 8
    lines.append("8 x 0 600 8 -1 -1 8 1200 -1 1 3 1 -1 1 1 -1 -1")  # not a number, line 13
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as error:
        read_trace(bad, gpus_per_node=8, cluster_gpus=1024)
    assert "line 8" in error.value.render() and "--skip-bad-rows" in error.value.render()
    trace = read_trace(bad, gpus_per_node=8, cluster_gpus=1024, skip_bad=True)
    assert len(trace.jobs) == 5
    assert "skipped 2 bad row(s)" in trace.warnings[0]
    assert "line 8" in trace.warnings[0] and "line 13" in trace.warnings[0]


def test_requests_larger_than_the_cluster_are_bad_rows() -> None:
    with pytest.raises(InputError, match="more than the cluster has"):
        read("small.swf", cluster_gpus=32)
    assert len(read("small.swf", cluster_gpus=32, skip_bad=True).jobs) == 4


def test_alibaba_task_table() -> None:
    trace = read("alibaba_tasks.csv")
    gpus = {j.name.split("/")[0]: j.num_gpus for j in trace.jobs}
    # 4 x 100 % = 4 GPUs; 1 x 50 % rounds up to one whole GPU; 16 x 100 % = 16 GPUs on 2 nodes
    assert gpus == {"6f0e2c1a": 4, "7a1d9e32": 1, "9c3f1a54": 8, "be512c76": 16}
    assert trace.skipped == {"CPU-only task (no plan_gpu)": 1, "status 'Running' (not finished)": 1}
    failed = next(j for j in trace.jobs if j.name.startswith("9c3f1a54"))
    assert failed.exit_state == FAILED and failed.run_s == 7200.0 and failed.submit_s == 5300.0


def test_helios_and_philly_csv() -> None:
    helios = read("helios.csv")
    by_id = {j.job_id: j for j in helios.jobs}
    assert sorted(by_id) == [101, 102, 103]
    assert by_id[103].run_s == 14400.0 and (by_id[103].num_nodes, by_id[103].gpus_per_node) == (4, 8)
    assert by_id[101].submit_s == pytest.approx(1585699210.0)  # 2020-04-01 00:00:10 UTC
    assert by_id[102].exit_state == FAILED and by_id[101].partition == "vcA"
    assert helios.skipped == {"CPU-only job (no GPUs)": 1, "not finished": 1}
    philly = read("philly.csv")
    assert [j.num_gpus for j in philly.jobs] == [4, 1, 16]
    assert [j.exit_state for j in philly.jobs] == [COMPLETED, FAILED, "CANCELLED"]
    assert philly.jobs[2].run_s == 43200.0


def test_sacct_parsable_from_the_dev_cluster() -> None:
    trace = read("devslurm_sacct.txt")
    assert len(trace.jobs) == 40
    first = next(j for j in trace.jobs if j.name == "1")
    # 1|r1|batch|...|Eligible 17:43:03|Start 17:43:46|End 17:43:49|3|2|...gres/gpu=16...|gpu[05,08]|2|50|SchedBackfill
    assert first.run_s == 3.0 and first.limit_s == 120.0 and first.num_gpus == 16
    assert first.start_s is not None and first.start_s - first.submit_s == 43.0
    assert first.node_names == ("gpu05", "gpu08") and first.backfilled
    assert all(j.state == COMPLETED for j in trace.jobs)


def test_sacct_json_matches_parsable() -> None:
    a = read("devslurm_sacct.txt")
    b = read("devslurm_sacct.json")

    def key(j):  # type: ignore[no-untyped-def]
        return (j.name, j.submit_s, j.start_s, j.end_s, j.num_gpus, j.limit_s, j.node_names, j.backfilled)

    assert sorted(map(key, a.jobs)) == sorted(map(key, b.jobs))


def test_sacct_requeued_attempts_fold_into_one_job(tmp_path: Path) -> None:
    header = "JobID|JobName|Partition|QOS|State|Submit|Eligible|Start|End|ElapsedRaw|NNodes|AllocTRES|NodeList|TimelimitRaw"
    rows = [
        "7|t|batch|normal|PREEMPTED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:01:10|60|2|gres/gpu=16|gpu[01-02]|30",
        "7|t|batch|normal|TIMEOUT|2026-01-01T00:00:00|2026-01-01T00:02:00|2026-01-01T00:03:00|2026-01-01T00:33:00|1800|2|gres/gpu=16|gpu[03-04]|30",
        "7.batch|batch||normal|CANCELLED|2026-01-01T00:00:00|2026-01-01T00:02:00|2026-01-01T00:03:00|2026-01-01T00:33:00|1800|1|cpu=1|gpu03|",
        "8|cpu|batch|normal|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:10:00|600|1|cpu=4|gpu05|30",
    ]
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join([header, *rows]) + "\n")
    trace = read_trace(path, gpus_per_node=8, cluster_gpus=64)
    assert trace.attempts is not None and len(trace.attempts) == 2
    (job,) = trace.jobs
    assert job.restarts == 1 and job.state == TIMEOUT and job.first_start_s == trace.attempts[0].start_s
    assert trace.skipped == {"job step (use sacct -X)": 1, "no GPUs allocated": 1}


def test_sacct_json_rejects_other_json(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"meta": {}}))
    with pytest.raises(InputError, match="'jobs' list"):
        read_trace(path, gpus_per_node=8, cluster_gpus=64)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu[01-03,05]", ("gpu01", "gpu02", "gpu03", "gpu05")),
        ("gpu07", ("gpu07",)),
        ("a[8-10],b1", ("a8", "a9", "a10", "b1")),
        ("None assigned", ()),
    ],
)
def test_hostlists(text: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


def test_tres_and_durations() -> None:
    assert gpus_in_tres("billing=3,cpu=3,gres/gpu:h100=24,gres/gpu=24,mem=12000M,node=3") == 24
    assert gpus_in_tres("cpu=2,gres/gpu:a100=4") == 4
    assert gpus_in_tres("cpu=2,mem=1G") == 0
    assert slurm_duration_s("1-02:03:04") == 93784.0
    assert slurm_duration_s("05:00") == 300.0
    assert slurm_duration_s("30") == 1800.0
    assert slurm_duration_s("UNLIMITED") is None
