"""The example outputs of the README and docs/ are current: `make readme` (scripts/readme.py) reruns each
marked command block; here it runs in check mode, and a stale block fails with the fix."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "readme.py"


def _regenerator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("readme_regenerator", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_examples_are_current(monkeypatch: pytest.MonkeyPatch) -> None:
    regenerator = _regenerator()
    monkeypatch.chdir(SCRIPT.parents[1])
    stale: list[str] = []
    for path in regenerator.documents():
        name = path.relative_to(SCRIPT.parents[1]).as_posix()
        text = path.read_text(encoding="utf-8").split("\n")
        updated, problems = regenerator.regenerate(text, name)
        assert problems == []
        stale += [
            f"{name}:{i + 1}: {old!r} -> {new!r}"
            for i, (old, new) in enumerate(zip(text, updated, strict=False))
            if old != new
        ]
    assert stale == [], "examples are stale: run `make readme`\n" + "\n".join(stale[:20])


def test_every_example_block_is_marked_and_volatile_numbers_are_ignored() -> None:
    regenerator = _regenerator()
    checked = []
    for path in regenerator.documents():
        # raises on a `$ mfukit` block without a marker
        checked += regenerator.blocks(path.read_text(encoding="utf-8").split("\n"), path.name)
    assert len(checked) >= 10
    assert regenerator.README in regenerator.documents()
    assert regenerator._normal("top 5 of 21,771 layouts (3.2 s)") == regenerator._normal(
        "top 5 of 21,771 layouts (7.1 s)"
    )
    assert regenerator._normal("MFU 49.3 %") != regenerator._normal("MFU 52.8 %")
    with pytest.raises(SystemExit):
        regenerator.blocks(["text", "```", "$ mfukit size --help", "```"])
