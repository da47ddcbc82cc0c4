"""Shared fixtures and the rules for optional components.

Tests that need torch carry the ``torch`` marker, tests that need the dev Slurm the ``slurm`` marker, tests
that need Debian's prometheus and promtool the ``prometheus`` marker. When the component is missing they are
skipped, unless MFUKIT_REQUIRE_TORCH=1 / MFUKIT_REQUIRE_SLURM=1 / MFUKIT_REQUIRE_PROMETHEUS=1 (CI sets all
three), in which case the run fails instead: nothing skips silently in CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest
from hypothesis import settings

# CI (.ci/run sets HYPOTHESIS_PROFILE=ci) draws the same property-test examples on every run, so a failure
# there is reproduced by the same command; developers' runs draw new examples each time and keep the
# failing ones in .hypothesis/
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REQUIREMENTS = {
    "torch": ("MFUKIT_REQUIRE_TORCH", lambda: importlib.util.find_spec("torch") is not None),
    # daemons live in /usr/sbin, which a non-login PATH may lack
    "slurm": (
        "MFUKIT_REQUIRE_SLURM",
        lambda: shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin") is not None,
    ),
    # Debian's prometheus package: the server and promtool (tests/unit/test_watch_prometheus.py)
    "prometheus": (
        "MFUKIT_REQUIRE_PROMETHEUS",
        lambda: shutil.which("prometheus") is not None and shutil.which("promtool") is not None,
    ),
    # the HTML reports opened in a real browser (tests/cli/browser_support.py)
    "chromium": ("MFUKIT_REQUIRE_CHROMIUM", lambda: shutil.which("chromium") is not None),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (variable, available) in REQUIREMENTS.items():
        marked = [item for item in items if marker in item.keywords]
        if not marked or available():
            continue
        if os.environ.get(variable) == "1":
            raise pytest.UsageError(f"{variable}=1 but {marker} is not available: install it (see .ci/run)")
        for item in marked:
            item.add_marker(
                pytest.mark.skip(reason=f"{marker} is not available (set {variable}=1 to fail instead)")
            )


# ------------------------------------------------------------------------------------------ dev Slurm
@pytest.fixture(scope="session")
def dev_slurm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A multi-node Slurm (8 nodes x 8 fake GPUs, slurmdbd + MariaDB for sacct) for the whole session.

    Yields a :class:`mfukit.sched.slurm.devcluster.DevCluster`: ``.env`` (os.environ plus SLURM_CONF,
    for sbatch/squeue/sacct/scontrol), ``.workdir`` (jobs can write under ``workdir / "jobs"``),
    ``.nodes`` (gpu01..gpu08), ``.gpus_per_node``, ``.run(*cmd)``. Jobs run as root on this machine's
    filesystem, so a venv in the work tree is usable from every node. With MFUKIT_DEV_SLURM=<workdir>
    a cluster started by `mfukit sched dev-cluster up --with-db` is reused and left running;
    otherwise the cluster is started here and stopped at the end (only the processes it started).
    """
    from pathlib import Path

    from mfukit.sched.slurm import devcluster

    reuse = os.environ.get("MFUKIT_DEV_SLURM")
    if reuse:
        yield devcluster.DevCluster.load(Path(reuse))
        return
    if os.geteuid() != 0:
        message = "the dev Slurm needs root (fake GPU device nodes, daemons)"
        if os.environ.get("MFUKIT_REQUIRE_SLURM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp("dev-slurm")
    cluster = devcluster.up(workdir, num_nodes=8, gpus_per_node=8, with_db=True)
    try:
        yield cluster
    finally:
        devcluster.down(workdir)
