"""The alert rules under promtool, and `mfukit watch` scraped by a real Prometheus while a log is written.

The live test starts Debian's prometheus on loopback (temp config and data dir, free ports, 1 s scrape and
rule evaluation, the shipped rules file), has it scrape `mfukit watch` following a Megatron-style log as it
is written, and asks its HTTP API: mfukit_mfu must equal what `mfukit diagnose` computes for the same log,
every dashboard panel's query must return data, and once the log slows the MFU alert must go pending.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mfukit.diagnose.engine import diagnose
from mfukit.diagnose.given import job

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "mfukit.rules.yml"
RULE_TESTS = ROOT / "tests" / "data" / "watch" / "mfukit.rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "mfukit.json"
SCENARIO = ROOT / "tests" / "data" / "watch" / "llama3-70b_h100x1024_tp8pp4.toml"
MFUKIT = Path(sys.executable).with_name("mfukit")

pytestmark = pytest.mark.prometheus


def test_rules_pass_promtool() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def megatron_line(iteration: int, stamp: datetime.datetime, step_ms: float) -> str:
    """One iteration line as Megatron-LM main prints it (reference/logs-and-monitoring.md 1.3)."""
    return (
        f" [{stamp:%Y-%m-%d %H:%M:%S.%f}] iteration {iteration:8d}/  100000 | consumed samples: "
        f"{iteration * 2048:12d} | elapsed time per iteration (ms): {step_ms:.1f} | learning rate: "
        "1.000000E-04 | global batch size:  2048 | lm loss: 2.101000E+00 | loss scale: 1.0 | "
        "grad norm: 0.812 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )


class Writer:
    """Writes a Megatron log line by line, its own clock advancing one log interval (10 steps) a line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.iteration = 0
        self.clock = datetime.datetime(2026, 3, 1, 8, 0, 0)
        path.write_text("------------------------ arguments ------------------------\n")

    def steps(self, count: int, step_ms: float, *, pause_s: float = 0.15, save_s: float = 0.0) -> None:
        with self.path.open("a") as stream:
            for _ in range(count):
                if save_s:
                    stream.write(f"saving checkpoint at iteration {self.iteration:8d} to /ckpt\n")
                    stream.write(
                        f"  successfully saved checkpoint at iteration {self.iteration:8d} to /ckpt\n"
                    )
                self.iteration += 10
                self.clock += datetime.timedelta(seconds=10 * step_ms / 1e3 + save_s)
                save_s = 0.0
                stream.write(megatron_line(self.iteration, self.clock, step_ms))
                stream.flush()
                time.sleep(pause_s)


@contextlib.contextmanager
def process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A server started for the test, stopped by its PID."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def wait_for(port: int, expr: str, timeout_s: float, until: Any = bool) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        result = query(port, expr)
        if until(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.25)


def wait_ready(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"prometheus on 127.0.0.1:{port} not ready after {timeout_s} s")


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace('"$job"', '".+"'))
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


@pytest.mark.slow
def test_watch_scraped_by_prometheus(tmp_path: Path) -> None:
    log = tmp_path / "pretrain.log"
    writer = Writer(log)
    watch_port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(RULES))}]\n"
        "scrape_configs:\n"
        "  - job_name: mfukit-watch\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{watch_port}']}}]\n"
    )
    dcgm = tmp_path / "dcgm.prom"  # a saved dcgm-exporter scrape: SM activity beside MFU
    dcgm.write_text(
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",Hostname="node1"} 0.93\nDCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="node1"} 100\n'
    )
    # the window holds the whole log, so the watch's MFU is over the steps diagnose reads
    watch_cmd = [str(MFUKIT), "watch", str(log), "--scenario", str(SCENARIO), "--job", "llama70b",
                 "--listen", f"127.0.0.1:{watch_port}", "--poll", "0.2s", "--window", "24h", "--goodput-target", "90%", "--dcgm", str(dcgm)]  # fmt: skip
    prom_cmd = [shutil.which("prometheus") or "prometheus", f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"]  # fmt: skip
    with (
        process(watch_cmd, tmp_path / "watch.out") as watcher,
        process(prom_cmd, tmp_path / "prometheus.out"),
    ):
        wait_ready(prom_port, 20)
        up = wait_for(prom_port, 'up{job="mfukit-watch"} == 1', 15)  # scraping before the log grows
        assert up, (tmp_path / "watch.out").read_text() + (tmp_path / "prometheus.out").read_text()
        # a healthy job runs at the step the performance model expects for its layout; the slow one at 3x
        expected_step_s = expected_mfu_of_scenario().step_time_s
        assert expected_step_s is not None
        healthy_ms = 1000.0 * expected_step_s
        writer.steps(6, healthy_ms)
        writer.steps(6, healthy_ms, save_s=40.0)
        last = wait_for(
            prom_port, "mfukit_last_step", 10, until=lambda r: r and _value(r) == writer.iteration
        )
        assert watcher.poll() is None, (tmp_path / "watch.out").read_text()
        assert last and _value(last) == writer.iteration, (tmp_path / "watch.out").read_text()
        mfu = query(prom_port, 'mfukit_mfu{job="llama70b"}')
        known = job(SCENARIO, {})
        expected = diagnose([log], **known._asdict()).mfu.measured
        assert expected is not None
        assert abs(_value(mfu) - expected) < 0.005, (mfu, expected)  # within 0.5 percentage points
        assert mfu[0]["metric"]["log"] == str(log)
        for title, expr in panel_queries():  # a rate needs two scrapes: a few seconds at most
            values = [float(r["value"][1]) for r in wait_for(prom_port, expr, 5, until=_finite)]
            assert values and all(math.isfinite(v) for v in values), f"panel {title!r}: no data for {expr}"
        assert not query(prom_port, 'ALERTS{alertname="MfukitMfuBelowExpected"}')
        writer.steps(8, 3 * healthy_ms)  # a third of the throughput: MFU far below the expected
        pending = wait_for(prom_port, 'ALERTS{alertname="MfukitMfuBelowExpected", alertstate="pending"}', 10)
        assert pending and pending[0]["metric"]["job"] == "llama70b", query(prom_port, "mfukit_mfu")
    assert watcher.returncode == 0  # stopped by SIGTERM, as a sidecar is: a clean exit


def expected_mfu_of_scenario():  # type: ignore[no-untyped-def]
    """The expected MFU (and step) the watch compares the log against: the performance model's."""
    from mfukit.diagnose.mfu import expected_mfu

    known = job(SCENARIO, {})
    return expected_mfu(known.model, known.training, known.parallelism, known.cluster)


def _finite(result: list[dict[str, Any]]) -> bool:
    return bool(result) and all(math.isfinite(float(r["value"][1])) for r in result)


def _value(result: list[dict[str, Any]]) -> float:
    return float(result[0]["value"][1])
