"""A link's measured NCCL behaviour (``[nccl]`` in its catalog entry): fitted to the nccl-tests results shipped in
``benchmarks/data/comms``, used by the collective model, and read with clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mfukit import catalog
from mfukit.comm.topology import from_system
from mfukit.comm.tuning import constants
from mfukit.errors import InputError
from mfukit.perf.calibrate_network import fit_to_nccl_tests, main, nccl_tests_times, read_nccl_tests
from mfukit.perf.efficiency import network_name, network_profile_of
from mfukit.perf.step_time import machine_for, with_network_profile

RESULTS = Path(__file__).parents[2] / "benchmarks" / "data" / "comms"
HEADER = "system,collective,nodes,gpus,size_bytes,algbw_GBps,busbw_GBps,time_us\n"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.csv")), ids=lambda path: path.stem)
def test_the_catalog_holds_what_the_fit_gives(path: Path) -> None:
    system, points = read_nccl_tests(path)
    accelerator = catalog.accelerator(system.accelerator)
    efficiency, latency_s = fit_to_nccl_tests(points, system, accelerator)
    measured = catalog.link(system.scale_out_fabric).nccl
    assert measured is not None, f"{system.scale_out_fabric} has nccl-tests results but no [nccl] block"
    assert measured.efficiency == pytest.approx(efficiency, abs=0.0015)
    assert measured.step_latency_s == pytest.approx(latency_s, abs=0.015e-6)
    # and the fit beats NCCL's InfiniBand constants on the results it was fitted to
    seconds = np.asarray([point.seconds for point in points])

    def median_error(eff: float, lat: float) -> float:
        return float(np.median(np.abs(nccl_tests_times(points, system, accelerator, eff, lat) / seconds - 1)))

    assert median_error(efficiency, latency_s) < median_error(constants().network.efficiency, 0.0)


def test_the_collective_model_prices_efa_with_its_measured_numbers() -> None:
    p5 = catalog.system("p5-48xlarge")
    efa = catalog.link(p5.scale_out_fabric).nccl
    assert efa is not None
    topology, notes = from_system(p5, catalog.accelerator(p5.accelerator), num_nodes=4)
    assert (topology.net_efficiency, topology.net_step_latency_s) == (efa.efficiency, efa.step_latency_s)
    assert any("nccl-tests on AWS Elastic Fabric Adapter" in note for note in notes)
    # an InfiniBand node keeps NCCL's own constants
    dgx = catalog.system("dgx-h100")
    ib, _ = from_system(dgx, catalog.accelerator(dgx.accelerator), num_nodes=4)
    assert catalog.link(dgx.scale_out_fabric).nccl is None and ib.net_step_latency_s == 0.0


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("p5-48xlarge,all_reduce,2,16,33554432,1,1,400\nunknown-node,all_reduce,2,16,1,1,1,1\n", "2 systems"),
        ("p5-48xlarge,allreduce,2,16,33554432,1,1,400\n", "unknown collective 'allreduce'"),
        ("p5-48xlarge,all_reduce,1,8,33554432,1,1,400\n", "8 GPUs on 1 node(s)"),
        ("p5-48xlarge,all_reduce,two,16,33554432,1,1,400\n", "line 2: nodes, gpus"),
        ("p5-48xlarge,all_reduce,2,16,33554432\n", "line 2: nodes, gpus"),  # a short row
        ("p5-48xlarge,all_reduce,2,16,33554432,1,1,nan\n", "finite and positive"),
        ("p5-48xlarge,all_reduce,2,16,inf,1,1,400\n", "finite and positive"),
        ("p5-48xlarge,all_reduce,2,17,33554432,1,1,400\n", "17 GPUs on 2 node(s)"),
        ("p5-48xlarge,all_reduce,2,1000,33554432,1,1,400\n", "1000 GPUs on 2 node(s)"),
    ],
)
def test_bad_results_are_refused_with_the_line(tmp_path: Path, rows: str, message: str) -> None:
    path = tmp_path / "results.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(InputError, match=re.escape(message)):
        read_nccl_tests(path)
    assert main([str(path)]) == 2


def test_every_link_with_shipped_results_is_checked() -> None:
    assert sorted(RESULTS.glob("*.csv")), "benchmarks/data/comms holds no nccl-tests results"


def test_a_file_that_is_not_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.csv"
    path.write_bytes(b"\xff\xfe\x00binary")
    assert main([str(path)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_a_file_without_the_columns_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.csv"
    path.write_text("size,time\n1,2\n")
    assert main([str(path)]) == 2
    assert "lacks the column(s) system, collective" in capsys.readouterr().err


def test_a_training_run_profile_replaces_the_nccl_tests_numbers_and_a_fold_without_one_keeps_them() -> None:
    p5 = catalog.system("p5-48xlarge")
    accelerator = catalog.accelerator(p5.accelerator)
    efa = catalog.link(p5.scale_out_fabric).nccl
    assert efa is not None
    fitted = network_profile_of(network_name(p5))
    assert fitted is not None and fitted.efficiency != efa.efficiency
    machine = machine_for(p5, accelerator, 32)
    assert machine.topology.net_efficiency == fitted.efficiency
    scale_out = [note for note in machine.assumptions if note.startswith("scale-out:")]
    assert len(scale_out) == 1 and "fitted on the training runs" in scale_out[0]
    # a leave-one-source-out fold whose runs never crossed EFA has the profile unfitted: nccl-tests prices it
    topology, notes = from_system(p5, accelerator, num_nodes=4)
    unfitted = fitted.model_copy(update={"efficiency": None, "step_latency_s": None})
    kept, kept_notes = with_network_profile(topology, fitted.name, notes, unfitted)
    assert (kept.net_efficiency, kept.net_step_latency_s) == (efa.efficiency, efa.step_latency_s)
    assert kept_notes == notes
