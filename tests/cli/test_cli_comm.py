"""`mfukit comm`: predict, sweep, check, nccl-log through the real entry point."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "comm"


def test_predict_json(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "comm", "predict", "--collective", "all_reduce", "--bytes", "1GiB", "--system", "dgx-h100", "--nodes", "16",
        "--format", "json",
    )  # fmt: skip
    assert run.exit_code == 0
    envelope = run.json()
    assert envelope["schema"] == "comm.predict/1"
    result = envelope["result"]
    assert {"time_s", "algbw_bytes_per_s", "busbw_bytes_per_s", "algorithm", "bottleneck"} <= set(result)
    assert result["num_gpus"] == 128 and result["num_domains"] == 16
    assert result["busbw_bytes_per_s"] == result["algbw_bytes_per_s"] * 2 * 127 / 128
    assert 2**30 / result["time_s"] == result["algbw_bytes_per_s"]
    assert result["algorithm"] in {a["algorithm"] for a in result["alternatives"]}
    assert any("qm9700" in a for a in envelope["assumptions"])


def test_predict_table_fits(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit(
        "comm", "predict", "--collective", "allreduce", "--bytes", "8GiB", "--system", "dgx-a100-80gb"
    )
    assert run.exit_code == 0
    assert "ring" in run.stdout and "NVLink" in run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 100


def test_a_gpu_alone_picks_its_own_default_node(mfukit) -> None:  # type: ignore[no-untyped-def]
    # --gpu without --system means the GPU's default node (as estimate and plan read it), not dgx-h100's
    run = mfukit(
        "comm", "predict", "--collective", "all_reduce", "--bytes", "64MiB", "--gpu", "a100-80gb-sxm", "--gpus", "16",
        "--format", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    assert run.json()["result"]["num_domains"] == 2
    assert any("NVLink 3" in note for note in run.json()["assumptions"])


def test_predict_bad_input(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("comm", "predict", "--collective", "allreduse", "--bytes", "1GiB")
    assert run.exit_code == 2 and "did you mean all_reduce" in run.stderr and "Traceback" not in run.stderr
    run = mfukit("comm", "predict", "--collective", "all_reduce", "--bytes", "1024 lots")
    assert run.exit_code == 2 and "--bytes" in run.stderr
    run = mfukit("comm", "predict", "--collective", "all_reduce", "--bytes", "1GiB", "--algo", "nvls",
                 "--system", "dgx-a100-80gb")  # fmt: skip
    assert run.exit_code == 2 and "NVLink SHARP" in run.stderr


def test_sweep_table_csv_and_report(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("comm", "sweep", "--collective", "all_reduce", "--system", "dgx-h100", "--format", "csv")
    assert run.exit_code == 0
    header, *rows = run.stdout.strip().splitlines()
    assert header == "size_bytes,time_s,algbw_bytes_per_s,busbw_bytes_per_s,algorithm,protocol,bottleneck"
    assert len(rows) == 31 and rows[0].startswith("8,") and rows[-1].startswith("8589934592,")
    run = mfukit(
        "comm", "sweep", "--collective", "all_gather", "--max-bytes", "1GiB", "--report", str(tmp_path)
    )
    assert run.exit_code == 0
    assert (tmp_path / "report.html").exists() and (tmp_path / "busbw.png").read_bytes()[:4] == b"\x89PNG"


def test_check_healthy_real_run(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("comm", "check", str(DATA / "superbench/nccl_allreduce.txt"), "--system", "dgx-a100-80gb",
                 "--format", "json")  # fmt: skip
    assert run.exit_code == 0
    result = run.json()["result"]
    assert result["verdict"] == "ok" and result["num_ranks"] == 8
    assert abs(result["peak_busbw_bytes_per_s"] - 235.26e9) < 0.01e9
    assert {s["status"] for s in result["sizes"]} == {"ok"}


def test_check_exit_1_when_slow_or_broken(mfukit) -> None:  # type: ignore[no-untyped-def]
    slow = mfukit("comm", "check", str(DATA / "aws_do_eks/karpenter_block1_L169.txt"), "--system", "dgx-a100-80gb",
                  "--nodes", "2")  # fmt: skip
    assert slow.exit_code == 1 and "low_busbw" in slow.stdout
    broken = mfukit("comm", "check", str(DATA / "synthetic/wrong_results_8x_h100.txt"), "--format", "json")
    assert broken.exit_code == 1 and broken.json()["result"]["verdict"] == "broken"


def test_check_bad_files(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = mfukit("comm", "check", str(tmp_path / "nope.txt"))
    assert missing.exit_code == 2 and "file not found" in missing.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("this is not nccl-tests output\n")
    run = mfukit("comm", "check", str(junk))
    assert run.exit_code == 2 and "no nccl-tests result rows" in run.stderr and "Traceback" not in run.stderr


def test_nccl_log(mfukit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    healthy = mfukit(
        "comm", "nccl-log", str(DATA / "synthetic/ib_gdr_healthy_2x8.log"), "--system", "dgx-h100"
    )
    assert healthy.exit_code == 0 and "NET/IB/GDRDMA" in healthy.stdout
    socket = mfukit("comm", "nccl-log", str(DATA / "synthetic/socket_fallback_2x1.log"), "--format", "json")
    assert socket.exit_code == 1
    assert next(f["id"] for f in socket.json()["result"]["findings"]) == "nccl_socket_fallback"
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert mfukit("comm", "nccl-log", str(empty)).exit_code == 2


def test_predict_bounds_the_network_by_the_partial_node(mfukit) -> None:  # type: ignore[no-untyped-def]
    """12 GPUs of DGX H100 = 8 + 4: the 4-GPU node has 4 NICs, 4 x 400 Gb/s x 0.96 = 192 GB/s. NVLSTree on 2
    nodes moves S per node (algbw 192 GB/s, busbw x 2 x 11/12 = 352 GB/s); it printed 540.8 GB/s."""
    run = mfukit(
        "comm", "predict", "--collective", "all_reduce", "--bytes", "8GiB", "--system", "dgx-h100", "--gpus", "12",
        "--format", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    envelope = run.json()
    result = envelope["result"]
    assert result["smallest_domain_gpus"] == 4 and result["num_domains"] == 2
    assert result["algorithm"] == "nvls_tree"
    assert abs(result["busbw_bytes_per_s"] / 1e9 - 192.0 * 2 * 11 / 12) < 0.5  # latency: 51 us of 44.8 ms
    ring = next(a for a in result["alternatives"] if (a["algorithm"], a["protocol"]) == ("ring", "simple"))
    assert abs(ring["algbw_bytes_per_s"] / 1e9 - 192.0 / (2 * 11 / 12)) < 0.01
    assert "partial" in result["bottleneck"]


def test_negative_size_says_so(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("comm", "predict", "--collective", "all_reduce", "--bytes", "-5", "--system", "dgx-h100")
    assert run.exit_code == 2 and "must not be negative" in run.stderr


def test_check_judges_the_hosts_the_file_names(mfukit) -> None:  # type: ignore[no-untyped-def]
    run = mfukit("comm", "check", str(DATA / "synthetic/gist_collapsed_allreduce_8x_a100.txt"),
                 "--system", "dgx-h100", "--nodes", "2", "--format", "json")  # fmt: skip
    envelope = run.json()
    assert envelope["result"]["num_nodes"] == 1
    assert "nccl_tests_above_nic_limit" not in {f["id"] for f in envelope["result"]["findings"]}
    assert any("judged as 1 host(s)" in w for w in envelope["warnings"])
