"""A failed rank's error file, as torchrun reads it: whole, or absent, never empty.

torchrun parses every failed rank's TORCHELASTIC_ERROR_FILE and itself dies (no restart) on one it cannot
parse; torch's own handler opens the file before writing it, so a rank stopped in between left it empty
and ended a drill (a peer of a hung rank). The reader here is torch's own (`ProcessFailure`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, ProcessFailure, record

from mfukit.train.worker import WholeErrorFile

pytestmark = [pytest.mark.torch]


def fail() -> None:
    raise RuntimeError("gloo: connection closed by peer")


def test_torchrun_reads_the_error_a_rank_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    with pytest.raises(RuntimeError):
        record(fail, error_handler=WholeErrorFile())()
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(error_file))
    assert failure.message["message"] == "RuntimeError: gloo: connection closed by peer"
    assert "in fail" in failure.message["extraInfo"]["py_callstack"]
    assert failure.timestamp > 0
    # the same report torch's own handler writes, key for key
    torch_file = tmp_path / "torch-error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(torch_file))
    with pytest.raises(RuntimeError):
        record(fail, error_handler=ErrorHandler())()
    torch_report = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(torch_file)).error_file_data
    assert torch_report["message"].keys() == failure.error_file_data["message"].keys()
    assert torch_report["message"]["message"] == failure.message["message"]


def test_a_rank_stopped_while_reporting_leaves_no_error_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped between writing and publishing its report (torchrun's SIGTERM): torchrun finds no file,
    which it reports as such, instead of an empty one it cannot parse."""
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))

    def stopped(self: Path, target: Path) -> Path:
        raise KeyboardInterrupt  # what a signal handler raises mid-write

    monkeypatch.setattr(Path, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        record(fail, error_handler=WholeErrorFile())()
    assert not error_file.exists()
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=-15, error_file=str(error_file))
    assert failure.error_file_data == {"message": "<NONE>"}
    assert failure.message == "Signal 15 (SIGTERM) received by PID 1"


def test_no_error_file_asked_for_leaves_the_error_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchrun sets an empty TORCHELASTIC_ERROR_FILE when its log dir is /dev/null: nothing is written and the
    rank's own error propagates, not one raised by the report."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", "")
    with pytest.raises(RuntimeError, match="connection closed") as raised:
        record(fail, error_handler=WholeErrorFile())()
    assert raised.value.__context__ is None
    assert list(tmp_path.iterdir()) == []
