"""Checkpoint benchmark: async blocking vs synchronous save, save throughput vs this disk, kill-to-resume.

Targets (issue 6), each measured against a peer or a physical limit taken in the same run:

* async blocking time <= 10 % of a synchronous save, for a state of at least 500 MB, both the training
  harness's own saves (its Checkpointer, async and sync: the state copied to reused host buffers, or
  not; every file's sha256, issue 15's commit-record hashes, computed by the writer threads as they
  write; the commit in the background, or in the save). Without the hashing, in the same run:
  ``dcp.async_save`` alone with DCP's plain writer over the plain ``dcp.save``; the difference between
  the two blocking times is what the hashing and the harness's bookkeeping add;
* synchronous save throughput >= 70 % of the disk's own fsynced write bandwidth: the best of probes
  that write the save's own bytes in its layout (one thread and file, and several), so the ratio is at
  most ~1 (a save above 1.1 of it means the disk's speed changed mid-run: the limit did not hold);
* kill-to-first-resumed-step < 30 s for the CPU preset (examples/tiny-cpu.toml, 2 ranks, gloo).

Writes benchmarks/results/checkpoint.json. Run with `make bench` or `python benchmarks/checkpoint.py`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from mfukit.train.bench_checkpoint import run_checkpoint_bench
from mfukit.train.prepare import TrainRequest
from mfukit.train.run import run_training

ROOT = Path(__file__).resolve().parents[1]
STATE_BYTES = 512 * 2**20


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mfukit-ckpt-bench-", dir=ROOT) as scratch:
        io = run_checkpoint_bench(Path(scratch), STATE_BYTES)
        request = TrainRequest(
            scenario_path=ROOT / "examples" / "tiny-cpu.toml",
            out=Path(scratch) / "run",
            inject=("kill@step=20",),
            device="cpu",
            peak_flops="measure",
        )
        drill = run_training(request, echo=lambda line: None, timeout_s=600)
    (recovery_s,) = drill.result["recovery_s"] or [float("nan")]
    rows = [
        ("async blocking / sync save (harness)", io.blocking_vs_sync, "<= 0.10", io.blocking_vs_sync <= 0.10),
        ("sync save / disk write bandwidth", io.save_vs_disk, ">= 0.70", 0.70 <= io.save_vs_disk <= 1.1),
        ("kill to first resumed step (s)", recovery_s, "< 30", recovery_s < 30),
    ]
    probes = ", ".join(f"{name} {rate / 1e9:.3f}" for name, rate in io.disk_probes_bytes_per_s.items())
    print(f"state {io.state_bytes / 1e6:.0f} MB; disk {io.disk_write_bytes_per_s / 1e9:.3f} GB/s (fsync; best of {probes});"
          f" dcp.save {io.sync_save_s:.2f} s ({io.save_bytes_per_s / 1e9:.3f} GB/s),"
          f" the harness's sync save {io.harness_sync_save_s:.2f} s;"
          f" the harness's async save blocks {io.async_blocking_s:.3f} s ({io.blocking_vs_dcp_save:.3f} of dcp.save),"
          f" committed after {io.async_total_s:.2f} s;"
          f" without hashing: dcp.async_save blocks {io.bare_blocking_s:.3f} s"
          f" ({io.bare_blocking_vs_sync:.3f} of dcp.save), durable after {io.bare_total_s:.2f} s;"
          f" the hashing and bookkeeping add {io.async_blocking_s - io.bare_blocking_s:+.3f} s to the blocking"
          f" ({io.hashing_blocking_vs_sync:+.3f} of the sync save) and {io.hashing_total_s:+.2f} s until durable;"
          f" load {io.load_bytes_per_s / 1e9:.3f} GB/s")  # fmt: skip
    print(f"{'quantity':36} {'measured':>10} {'target':>9}  ok")
    for name, value, target, ok in rows:
        print(f"{name:36} {value:10.3f} {target:>9}  {'yes' if ok else 'NO'}")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    record = {
        "state_bytes": io.state_bytes,
        "disk_write_bytes_per_s": io.disk_write_bytes_per_s,
        "disk_probes_bytes_per_s": io.disk_probes_bytes_per_s,
        "sync_save_s": io.sync_save_s,
        "harness_sync_save_s": io.harness_sync_save_s,
        "save_bytes_per_s": io.save_bytes_per_s,
        "async_blocking_s": io.async_blocking_s,
        "async_total_s": io.async_total_s,
        "load_bytes_per_s": io.load_bytes_per_s,
        "async_blocking_without_hashing_s": io.bare_blocking_s,
        "async_blocking_without_hashing_vs_sync": io.bare_blocking_vs_sync,
        "async_total_without_hashing_s": io.bare_total_s,
        "hashing_blocking_vs_sync": io.hashing_blocking_vs_sync,
        "hashing_total_s": io.hashing_total_s,
        "async_blocking_vs_sync": io.blocking_vs_sync,
        "async_blocking_vs_dcp_save": io.blocking_vs_dcp_save,
        "save_vs_disk": io.save_vs_disk,
        "kill_to_resumed_step_s": recovery_s,
        "drill_restarts": drill.result["restarts"],
        "drill_ettr_measured": drill.result["ettr_measured"],
        "targets_met": all(ok for *_, ok in rows),
    }
    (results / "checkpoint.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    return 0 if record["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
