"""What the launcher tests share: the live processes of one run."""

from __future__ import annotations

from pathlib import Path


def processes_of(out: Path) -> dict[int, str]:
    """Pid and command line of the live processes (torchrun's agent, its workers) of the run in ``out``: those
    whose command line names its config.json (zombies left out)."""
    config = str(out / "config.json").encode()
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if config in command.split(b"\0") and state != "Z":
            found[int(proc.name)] = command.replace(b"\0", b" ").decode(errors="replace")
    return found
