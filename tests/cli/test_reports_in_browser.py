"""Every HTML report (plan, size, diagnose, sched, ft) opened in headless Chromium at 1,280 px: every image
loads, the console shows no error, nothing overflows; screenshots are kept in the test's tmp dir."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_support import check_page

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
DATA = ROOT / "tests" / "data"
REPORTS = {
    "plan": ("plan", "--model", "gpt3-1.3b", "--gpu", "a100-80gb-sxm", "--gpus", "16", "--global-batch-size", "128",
             "--tokens", "26G", "--deadline", "14d"),
    "size": ("size", str(EXAMPLES / "llama-65b_a100_14d.toml"), "--mfu", "0.45"),
    "diagnose": ("diagnose", str(DATA / "diagnose" / "mfukit" / "train_run")),
    "sched": ("sched", "simulate", str(DATA / "sched" / "small.swf"), "--nodes", "8", "--policy", "easy"),
    "ft": ("ft", "plan", str(EXAMPLES / "llama3-405b_h100x16384.toml"), "--checkpoint-interval", "500steps"),
}  # fmt: skip


@pytest.mark.chromium
@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(REPORTS))
def test_report_reads_well_in_a_browser(mfukit, tmp_path: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / kind
    run = mfukit(*REPORTS[kind], "--report", str(out))
    assert run.exit_code in (0, 1), run.stderr  # 1: a negative answer (a failed gate) still has its report
    page = check_page(out / "report.html", tmp_path / "screenshots")
    assert page.images and all(image["width"] > 0 for image in page.images)
    assert page.problems() == []
    assert page.screenshot.is_file() and page.screenshot.stat().st_size > 10_000


@pytest.mark.chromium
def test_the_browser_check_sees_a_broken_page(tmp_path: Path) -> None:
    page = tmp_path / "broken" / "report.html"
    page.parent.mkdir()
    page.write_text(
        '<html><head><title>x</title></head><body><img src="missing.png" alt="chart">'
        '<div style="width:2000px">wide</div><script>console.error("boom")</script></body></html>'
    )
    problems = check_page(page, tmp_path / "screenshots").problems()
    assert any("image not loaded: chart" in p for p in problems)
    assert any("console: boom" in p for p in problems)
    assert any("overflows: div" in p for p in problems)
