"""A throw-away multi-node Slurm on one machine, for development and tests.

Debian's slurm-wlm (22.05): one slurmctld and N slurmd (``slurmd -N gpuNN``) on 127.0.0.1, fake GPU
device nodes (``mknod c 195 N``) so gres/gpu behaves as on real nodes (CUDA_VISIBLE_DEVICES set),
and optionally slurmdbd + MariaDB so ``sacct`` works. Everything lives in one work directory: config,
state, logs, MariaDB's data, and the PID of every process started, so ``down`` stops exactly those
processes and nothing else, and several clusters can run side by side (ports are probed free at
start). They share the machine's munged, which ``up`` starts (and ``down`` stops) only when it was not
running. Needs root (mknod, and Slurm runs as root here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mfukit.errors import InputError, MissingComponentError
from mfukit.sched.slurm import conf

STATE_FILE = "cluster.json"
INSTALL_HINT = (
    "as root: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge "
    "(and slurmdbd mariadb-server for sacct)"
)
NVIDIA_MAJOR = 195  # the character-device major number of /dev/nvidiaN


@dataclass
class DevCluster:
    """A running dev cluster: pass ``env`` to sbatch/squeue/sacct/scontrol."""

    workdir: Path
    nodes: list[str]
    gpus_per_node: int
    with_db: bool
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf_path(self) -> Path:
        return self.workdir / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The process environment with SLURM_CONF pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

    def run(self, *command: str, timeout_s: float = 60.0, check: bool = True) -> str:
        """Run a Slurm client command against this cluster; return its stdout."""
        done = subprocess.run(
            list(command), env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def save(self) -> None:
        data = asdict(self)
        data["workdir"] = str(self.workdir)
        (self.workdir / STATE_FILE).write_text(json.dumps(data, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, workdir: Path) -> DevCluster:
        path = workdir / STATE_FILE
        if not path.is_file():
            raise InputError("no dev cluster was started here", source=str(workdir))
        data = json.loads(path.read_text(encoding="utf-8"))
        data["workdir"] = Path(data["workdir"])
        return cls(**data)


def require_slurm(with_db: bool) -> None:
    needed = ["slurmctld", "slurmd", "sbatch", "munged"] + (["slurmdbd", "mariadbd"] if with_db else [])
    missing = [
        tool for tool in needed if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin") is None
    ]
    if missing:
        raise MissingComponentError(
            f"Slurm ({', '.join(missing)})", purpose="to run the dev cluster", install=INSTALL_HINT
        )
    if os.geteuid() != 0:
        raise MissingComponentError(
            "root", purpose="to run the dev cluster (fake GPU device nodes, daemons)", install="run as root"
        )


def free_port_block(count: int, start: int) -> int:
    """The first port >= ``start`` such that ``count`` consecutive ports are free on 127.0.0.1."""
    port = start
    while port + count < 65000:
        if all(_port_free(port + offset) for offset in range(count)):
            return port
        port += count
    raise RuntimeError(f"no {count} free consecutive ports from {start}")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _spawn(cluster: DevCluster, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
    log = (cluster.workdir / "log" / f"{name}.out").open("ab")
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    cluster.pids[name] = process.pid
    cluster.save()


def _wait(what: str, check: object, timeout_s: float, cluster: DevCluster) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"the dev cluster did not come up: {what} (logs in {cluster.workdir / 'log'})")


def up(
    workdir: Path,
    *,
    num_nodes: int = 4,
    gpus_per_node: int = 8,
    with_db: bool = False,
    options: conf.ClusterOptions | None = None,
) -> DevCluster:
    """Start a cluster in ``workdir`` (created; must not hold a running cluster) and wait until idle.

    On any failure, whatever was started is stopped again before the error propagates.
    """
    require_slurm(with_db)
    if not 1 <= num_nodes <= 64 or not 1 <= gpus_per_node <= 16:
        raise InputError("1..64 nodes of 1..16 GPUs", field="--nodes/--gpus-per-node")
    workdir = workdir.resolve()
    if (workdir / STATE_FILE).exists():
        raise InputError(
            "already holds a dev cluster",
            source=str(workdir),
            hint="run `mfukit sched dev-cluster down` first",
        )
    for sub in ("etc", "log", "run", "state", "spool", "fakedev", "munge", "jobs"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    ports = {
        "slurmctld": free_port_block(1, 16817),
        "slurmd": free_port_block(num_nodes, 17001),
        "slurmdbd": free_port_block(1, 16819) if with_db else 0,
        "mariadb": free_port_block(1, 13306) if with_db else 0,
    }
    names = conf.node_names(num_nodes)
    cluster = DevCluster(workdir, names, gpus_per_node, with_db, ports)
    cluster.save()
    try:
        _start(cluster, options or conf.ClusterOptions())
    except BaseException:
        down(workdir)
        raise
    return cluster


def _start(cluster: DevCluster, options: conf.ClusterOptions) -> None:
    workdir, names, gpus_per_node, with_db = (
        cluster.workdir,
        cluster.nodes,
        cluster.gpus_per_node,
        cluster.with_db,
    )
    for index in range(gpus_per_node):
        device = workdir / "fakedev" / f"nvidia{index}"
        if not device.exists():
            os.mknod(device, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, index))
    _start_munge(cluster)
    files = conf.render(workdir, names, gpus_per_node, cluster.ports, with_db=with_db, options=options)
    for relative, text in files.items():
        path = workdir / relative
        path.write_text(text, encoding="utf-8")
        if relative.endswith("slurmdbd.conf"):
            path.chmod(0o600)
    if with_db:
        _start_database(cluster, options)
    conf_path = str(cluster.conf_path)
    _spawn(cluster, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", conf_path])
    for name in names:
        _spawn(cluster, f"slurmd-{name}", ["/usr/sbin/slurmd", "-D", "-N", name, "-f", conf_path])

    def all_idle() -> bool:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], env=cluster.env, capture_output=True, text=True, check=False
        )
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return len(states) == len(names) and all(state == "idle" for state in states.values())

    _wait("all nodes idle", all_idle, 60.0, cluster)


def _munge_works() -> bool:
    probe = subprocess.run(["munge", "-n"], capture_output=True, check=False)
    return probe.returncode == 0


def _start_munge(cluster: DevCluster) -> None:
    """Use the machine's munged; start it (as the munge user, like its init script) when it is not up.

    Slurm 22.05 clients ignore ``AuthInfo=socket=`` on their slurmdbd connections, so a private munged
    is not an option: the default socket must answer. A munged started here is stopped by ``down``.
    """
    if _munge_works():
        return
    run_dir = Path("/run/munge")
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "munge", "munge")
    _spawn(cluster, "munged", ["/usr/sbin/runuser", "-u", "munge", "--", "/usr/sbin/munged", "-F"])
    _wait("munged", _munge_works, 10.0, cluster)


def _start_database(cluster: DevCluster, options: conf.ClusterOptions) -> None:
    workdir = cluster.workdir
    data = workdir / "mysql"
    sock = workdir / "run" / "mysqld.sock"
    subprocess.run(
        [
            "mariadb-install-db",
            "--user=root",
            f"--datadir={data}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        capture_output=True,
        check=True,
    )
    _spawn(
        cluster,
        "mariadbd",
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            "--user=root",
            f"--datadir={data}",
            f"--port={cluster.ports['mariadb']}",
            "--bind-address=127.0.0.1",
            f"--socket={sock}",
            f"--pid-file={workdir / 'run' / 'mariadbd.pid'}",
            f"--log-error={workdir / 'log' / 'mariadbd.log'}",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=64M",
            "--innodb-lock-wait-timeout=900",
            "--skip-log-bin",
        ],
    )

    def accepting() -> bool:
        probe = subprocess.run(
            ["mariadb", f"--socket={sock}", "-u", "root", "-e", "SELECT 1"], capture_output=True, check=False
        )
        return probe.returncode == 0

    _wait("mariadbd", accepting, 60.0, cluster)
    grants = (
        "CREATE USER IF NOT EXISTS 'slurm'@'%' IDENTIFIED BY 'mfukit';"
        "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'mfukit';"
        "GRANT ALL ON *.* TO 'slurm'@'%'; GRANT ALL ON *.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    )
    subprocess.run(
        ["mariadb", f"--socket={sock}", "-u", "root", "-e", grants], capture_output=True, check=True
    )
    # slurmdbd finds slurmdbd.conf beside $SLURM_CONF
    _spawn(cluster, "slurmdbd", ["/usr/sbin/slurmdbd", "-D"], env=cluster.env)

    def dbd_ready() -> bool:
        probe = subprocess.run(
            ["sacctmgr", "-n", "list", "cluster"], env=cluster.env, capture_output=True, check=False
        )
        return probe.returncode == 0

    _wait("slurmdbd", dbd_ready, 60.0, cluster)
    # one session (each sacctmgr call costs ~0.75 s); it exits 1 on "nothing new added", so check after
    subprocess.run(
        ["sacctmgr", "-i"],
        input=conf.sacctmgr_commands(options),
        env=cluster.env,
        capture_output=True,
        text=True,
        check=False,
    )
    associations = cluster.run("sacctmgr", "-n", "-P", "list", "assoc", "format=user,account,qos")
    if "root|research|" not in associations:
        raise RuntimeError(f"sacctmgr did not set up the account: {associations.strip()!r}")


def down(workdir: Path) -> list[str]:
    """Stop every process this cluster started (by recorded PID only); return what was stopped."""
    cluster = DevCluster.load(workdir.resolve())
    if _is_ours(cluster.pids.get("slurmctld", 0), "slurmctld"):
        with contextlib.suppress(subprocess.TimeoutExpired, RuntimeError):
            cluster.run("scancel", "--full", "--user=root", timeout_s=10.0, check=False)
            time.sleep(0.5)  # let the slurmd signal their steps before they stop
    order = [n for n in cluster.pids if n.startswith("slurmd-")] + [
        n for n in ("slurmctld", "slurmdbd", "mariadbd", "munged") if n in cluster.pids
    ]
    stopped = []
    for name in order:
        pid = cluster.pids[name]
        if _is_ours(pid, name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            stopped.append(name)
    deadline = time.monotonic() + 10.0
    for name in order:
        pid = cluster.pids[name]
        while _is_ours(pid, name) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_ours(pid, name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    (cluster.workdir / STATE_FILE).unlink(missing_ok=True)
    return stopped


def _is_ours(pid: int, name: str) -> bool:
    """Is ``pid`` still the process we started as ``name`` (not a recycled PID, not a zombie)?"""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    if "\nState:\tZ" in status:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return name.split("-")[0] in command or (name == "munged" and "runuser" in command)
