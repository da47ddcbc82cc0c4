"""core.files: whole-file replacement and single-write line appends."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfukit.core.files import append_line, write_text_atomic


@pytest.mark.parametrize("durable", [False, True])
def test_write_replaces_the_whole_file_and_leaves_no_temporary(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "result.json"
    path.write_text("old and longer", encoding="utf-8")
    write_text_atomic(path, "new", durable=durable)
    assert path.read_text(encoding="utf-8") == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_append_line_adds_one_terminated_line_each_call(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_line(path, '{"a": 1}')
    append_line(path, '{"a": 2}')
    assert path.read_text(encoding="utf-8") == '{"a": 1}\n{"a": 2}\n'
