"""Open an HTML report in a real headless Chromium (Debian's ``chromium``) and check what a reader sees:
every image loaded, no console error, nothing wider than the window; a screenshot is kept beside it.

A copy of the report gets a small script as the first thing in its ``<head>``: it records console errors
and failed loads from the start, and after the load event writes its findings as JSON into the page, which
``--dump-dom`` then prints. Tests that use it carry the ``chromium`` marker (tests/conftest.py).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIDTH_PX = 1280
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
PROBE = """<script>
(function () {
  var errors = [];
  var original = console.error;
  console.error = function () { errors.push(Array.prototype.join.call(arguments, " ")); original.apply(console, arguments); };
  window.addEventListener("error", function (event) {
    var target = event.target;
    errors.push(target && target !== window ? "failed to load " + (target.src || target.href || target.tagName)
                                            : String(event.message));
  }, true);
  window.addEventListener("load", function () {
    var width = document.documentElement.clientWidth;
    var images = Array.prototype.map.call(document.images, function (img) {
      return {src: (img.getAttribute("src") || "").slice(0, 40), alt: img.alt, loaded: img.complete && img.naturalWidth > 0,
              width: img.naturalWidth};
    });
    var wide = [];
    Array.prototype.forEach.call(document.body.querySelectorAll("*"), function (el) {
      var box = el.getBoundingClientRect();
      if (box.right > width + 1 && wide.length < 20) { wide.push(el.tagName.toLowerCase() + (el.className ? "." + el.className : "") + " right=" + Math.round(box.right)); }
    });
    var out = document.createElement("pre");
    out.id = "mfukit-browser-check";
    out.textContent = JSON.stringify({errors: errors, images: images, wide: wide, width: width,
                                      scroll_width: document.documentElement.scrollWidth});
    document.body.appendChild(out);
  });
})();
</script>"""


@dataclass(frozen=True)
class PageCheck:
    errors: list[str]
    images: list[dict[str, Any]]
    wide: list[str]
    width_px: int
    scroll_width_px: int
    screenshot: Path

    def problems(self) -> list[str]:
        found = [f"console: {error}" for error in self.errors]
        found += [
            f"image not loaded: {image['alt'] or image['src']}"
            for image in self.images
            if not image["loaded"]
        ]
        if self.scroll_width_px > self.width_px:
            found.append(
                f"page is {self.scroll_width_px} px wide at a {self.width_px} px window: {self.wide}"
            )
        found += [f"overflows: {element}" for element in self.wide]
        return found


def check_page(report: Path, work_dir: Path) -> PageCheck:
    """Load ``report`` at 1,280 px in headless Chromium; its findings, and a screenshot in ``work_dir``."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary is not None, "mark the test `chromium` (tests/conftest.py skips or fails it without one)"
    work_dir.mkdir(parents=True, exist_ok=True)
    probed = report.with_name(report.stem + ".browser-check.html")
    text = report.read_text(encoding="utf-8")
    head = re.search(r"<head[^>]*>", text)
    assert head is not None, f"{report} has no <head>"
    probed.write_text(text[: head.end()] + PROBE + text[head.end() :], encoding="utf-8")
    try:
        common = [binary, *FLAGS, f"--window-size={WIDTH_PX},900", "--virtual-time-budget=5000"]
        dump = subprocess.run(
            [*common, f"--user-data-dir={work_dir / 'profile-dom'}", "--dump-dom", probed.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        screenshot = work_dir / f"{report.parent.name}-{report.stem}.png"
        subprocess.run(
            [
                *common,
                f"--user-data-dir={work_dir / 'profile-shot'}",
                f"--screenshot={screenshot}",
                report.as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
    finally:
        probed.unlink()
    found = re.search(r'<pre id="mfukit-browser-check">(.*?)</pre>', dump.stdout, re.S)
    assert found is not None, f"the page never finished loading: {dump.stderr[-2000:]}"
    data = json.loads(html.unescape(found.group(1)))
    return PageCheck(
        errors=data["errors"],
        images=data["images"],
        wide=data["wide"],
        width_px=data["width"],
        scroll_width_px=data["scroll_width"],
        screenshot=screenshot,
    )
