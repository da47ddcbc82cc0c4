"""Every fixture in tests/data, mutated, through the command that reads it: exit 0, 1 or 2, never 101
(a traceback), within a time bound.

Each fixture is one case (so every file is fuzzed on every run); hypothesis draws a few mutations of
its bytes (flips, cuts, duplicated spans, hostile tokens: NaN, 1e400, 2^63, a BOM, deep brackets, NUL,
rich markup). Large files are fuzzed in their first 64 KiB, gzip files inside the compression. CI runs
derandomized (HYPOTHESIS_PROFILE=ci), so a failure there reproduces with the same command.
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mfukit.cli.main import cli

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples"
HEAD_BYTES = 64 * 1024
TIME_LIMIT_S = (
    30.0  # per invocation on a loaded 2-core CI machine; a hang or a quadratic blow-up is far past it
)
TOKENS = [
    b"NaN", b"nan", b"inf", b"-1", b"0", b"1e400", b"-1e400", b"9223372036854775807", b"true", b"\x00",
    b"\xef\xbb\xbf", b"[" * 2000, b"{" * 2000, b"]", b"}", b"|", b",", b"\n", b"\"", b"[bold]x[/bold]",
    b"gpu[a-3]", b"1O0", b"\xff\xfe", b" " * 5000, b"9" * 400, b"Channel 00/32 : " + b"10 11 " * 30 + b"x",
]  # fmt: skip


def _command(path: Path) -> list[str] | None:
    """The command that reads this fixture (None: a file no command takes as input)."""
    name, parts = path.name, path.relative_to(DATA).parts if DATA in path.parents else ()
    if path.suffix == ".md":
        return None
    if parts[:1] == ("comm",):
        if path.suffix == ".log":
            return ["comm", "nccl-log", "{}"]
        return ["comm", "check", "{}", "--system", "dgx-h100"]
    if parts[:1] == ("sched",):
        if name == "slurmctld.log" or name == "trace.json":
            return None  # the dev Slurm's own logs, read by the replay tests, not a user input
        if "sacct" in name:
            return ["sched", "analyze", "{}", "--gpus", "64"]
        return ["sched", "simulate", "{}", "--nodes", "8", "--skip-bad-rows"]
    if parts[:1] == ("diagnose",):
        if name.endswith(".config.json"):  # a job's HF model config: diagnose reads it as --model
            return [
                "diagnose", str(DATA / "diagnose" / "cases" / "deepspeed_h100x32" / "rank0.log"), "--model", "{}",
            ]  # fmt: skip
        return ["diagnose", "{}"]
    if parts[:1] == ("k8s",):
        return None  # the JobSet CRD the emitted manifests are validated against, not a user input
    if parts[:1] == ("watch",):
        if path.suffix == ".toml":
            return ["estimate", "{}"]  # the job the watch tests follow: its scenario names the layout
        return None  # promtool's rule tests, read by promtool
    if parts[:1] == ("models",):
        return [
            "estimate",
            "--model",
            "{}",
            "--gpu",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch-size",
            "512",
            "--tp",
            "8",
            "--pp",
            "1",
        ]
    if name.startswith("fabric"):
        return ["fabric", "check", "{}"]
    if path.suffix in {".toml", ".yaml"}:
        return ["ft", "plan", "{}", *SCENARIO_FLAGS.get(name, [])]
    return None


# what each scenario leaves to the command line (its comment says so), so that the unmutated file runs
SCENARIO_FLAGS = {
    "llama-65b_a100_14d.toml": ["--gpus", "1024"],
    "tiny-cpu.toml": ["--gpu", "h100-sxm", "--gpus", "1"],
    "micro.toml": ["--gpu", "h100-sxm", "--gpus", "1"],
}


FIXTURES = sorted(
    p
    for p in [*DATA.rglob("*"), *EXAMPLES.glob("*.toml"), *EXAMPLES.glob("*.yaml")]
    if p.is_file() and _command(p) is not None
)


def _run(fixture: Path, target: Path) -> tuple[int, str, float]:
    command = _command(fixture)
    assert command is not None
    args = [str(target) if part == "{}" else part for part in command]
    start = time.perf_counter()
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    return (
        result.exit_code,
        f"{' '.join(args)}: exit {result.exit_code}\n{result.output[-2000:]}",
        time.perf_counter() - start,
    )


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_fixture_as_it_is_is_read(fixture: Path) -> None:
    """The unmutated file gives an answer (0 or 1): the fuzz cases start from a real reading."""
    code, output, _ = _run(fixture, fixture)
    assert code in (0, 1), output


def _mutate(data: bytes, draw: st.DataObject) -> bytes:
    for _ in range(draw.draw(st.integers(1, 4), label="mutations")):
        at = draw.draw(st.integers(0, len(data)), label="at")
        kind = draw.draw(st.sampled_from(["flip", "cut", "duplicate", "insert", "truncate"]), label="kind")
        if kind == "flip" and data:
            index = min(at, len(data) - 1)
            data = data[:index] + bytes([data[index] ^ draw.draw(st.integers(1, 255))]) + data[index + 1 :]
        elif kind == "cut":
            data = data[:at] + data[at + draw.draw(st.integers(1, 200)) :]
        elif kind == "duplicate":
            data = data[:at] + data[at : at + draw.draw(st.integers(1, 400))] * 2 + data[at:]
        elif kind == "insert":
            data = data[:at] + draw.draw(st.sampled_from(TOKENS), label="token") + data[at:]
        else:
            data = data[:at]
    return data


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(draw=st.data())
def test_mutated_fixture_never_crashes(
    fixture: Path, draw: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    raw = fixture.read_bytes()
    compressed = fixture.suffix == ".gz"
    body = gzip.decompress(raw) if compressed else raw
    mutated = _mutate(body[:HEAD_BYTES], draw)
    target = tmp_path_factory.mktemp("fuzz") / fixture.name
    target.write_bytes(gzip.compress(mutated, mtime=0) if compressed else mutated)
    code, output, spent = _run(fixture, target)
    assert code in (0, 1, 2), output
    assert spent < TIME_LIMIT_S, f"{output.splitlines()[0]} took {spent:.1f} s"
