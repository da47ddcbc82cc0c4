"""`mfukit watch` on bad input: exit 2 with the file or flag named and the fix, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path


def test_log_of_no_kind_exits_2_naming_it(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "notes.txt"
    log.write_text("hello\nnothing here is a training step\n")
    run = mfukit("watch", str(log), "--listen", "127.0.0.1:0", "--detect-timeout", "0s")
    assert run.exit_code == 2
    assert str(log) in run.stderr and "matches no training-log kind" in run.stderr
    assert "Traceback" not in run.stderr


def test_port_in_use_exits_2_with_the_fix(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = mfukit("watch", str(tmp_path / "train.log"), "--listen", f"127.0.0.1:{port}")
    assert run.exit_code == 2
    assert "port already in use" in run.stderr and "fix:" in run.stderr and f"{port + 1}" in run.stderr


def test_bad_listen_address_exits_2(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("watch", str(tmp_path / "train.log"), "--listen", "localhost:http")
    assert run.exit_code == 2 and "--listen" in run.stderr
