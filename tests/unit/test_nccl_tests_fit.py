"""A link's measured NCCL behaviour (``[nccl]`` in its catalog entry): fitted to the nccl-tests results shipped in
``benchmarks/data/comms``, used by the collective model, and read with clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mfukit import catalog
from mfukit.comm.topology import from_system
from mfukit.errors import InputError
from mfukit.perf.calibrate_network import fit_to_nccl_tests, main, nccl_tests_times, read_nccl_tests

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

    assert median_error(efficiency, latency_s) < median_error(0.96, 0.0)


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
        ("p5-48xlarge,all_reduce,1,8,33554432,1,1,400\n", "at least 2 nodes"),
        ("p5-48xlarge,all_reduce,two,16,33554432,1,1,400\n", "line 2"),
    ],
)
def test_bad_results_are_refused_with_the_line(tmp_path: Path, rows: str, message: str) -> None:
    path = tmp_path / "results.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(InputError, match=message):
        read_nccl_tests(path)
    assert main([str(path)]) == 2


def test_a_file_without_the_columns_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.csv"
    path.write_text("size,time\n1,2\n")
    assert main([str(path)]) == 2
    assert "lacks the column(s) system, collective" in capsys.readouterr().err
