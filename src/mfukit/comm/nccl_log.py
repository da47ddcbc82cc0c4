"""Analyse NCCL_DEBUG=INFO output: version, network and transports per peer, HCAs in use against GPUs per
node, channels, rings and trees, NVLS, environment overrides, warnings and watchdog timeouts, as findings
with stable ids and a fix each.

Line formats: nccl src/debug.cc (``host:pid:tid [dev] NCCL INFO msg``), src/init.cc, src/transport/*.cc,
net_ib/init.cc; shared/reference/comms/comms_nccl_log_patterns.csv and comms_nccl_env_vars.csv.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from mfukit.core.findings import Finding, worst

_PREFIX = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<host>[A-Za-z0-9_.\-]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>\d+)\]\s+(?:[\w./-]+:\d+\s+)?"
    r"NCCL\s+(?P<level>INFO|WARN|TRACE|ABORT)\s?(?P<msg>.*)"
)
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<build>\S*)")
# `.*\S` then `\s*$`, not a lazy `.+?` before `\s*$` (quadratic on a run of spaces)
_USING_NETWORK = re.compile(r"^Using network (?P<name>.*\S)\s*$")
_IB_USING = re.compile(r"^NET/IB ?: Using (?P<list>.*?)(?:;|$)")
_IB_DEVICE = re.compile(r"\[\d+\](?P<name>[A-Za-z0-9_]+):(?P<port>\d+)/(?P<layer>IB|RoCE)")
_IB_NONE = re.compile(r"^NET/IB ?: No device found")
_SOCKET_USING = re.compile(r"^NET/Socket ?: Using (?P<list>.*)")
_CHANNEL_PEER = re.compile(
    r"^Channel (?P<ch>\d+)(?:/\d+)? : (?P<src>\d+)\[[^\]]*\] -> (?P<dst>\d+)\[[^\]]*\]"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.*\S)\s*$"
)
# No quantified group: `(?:\d+\s*)+` split "1011" as 1|0|1|1 every way, 2^n tries on a bad line; the ranks are
# one class run that starts with a digit (ranks separated by blanks, blanks allowed at the end)
_RING = re.compile(r"^Channel (?P<ch>\d+)/(?P<total>\d+) :\s+(?P<ranks>\d[\d\s]*)$")
_TREES = re.compile(r"^Trees ")
_CONNECTED = re.compile(r"^Connected all rings(?:, use ring PXN (?P<pxn>\d) GDR (?P<gdr>\d))?")
_NVLS = re.compile(r"NVLS multicast support is (?P<not>not )?available")
_CHANNELS = re.compile(r"(?<!\d)(?P<n>\d+) (?P<kind>coll|collnet|nvls|p2p) channels(?! per peer)")
_INIT = re.compile(r"rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+).* Init COMPLETE")
_ENV = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]+) set (?:by environment )?to ")  # the value: _env_value
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|Timeout\(ms\)=\d+|timed out after")
_ERROR_WORDS = re.compile(
    r"unhandled (?:system|cuda) error|ncclSystemError|ncclRemoteError|ncclInternalError"
)


def _env_value(rest: str) -> str:
    """``IB.`` -> ``IB``: the value less its sentence's full stop, by string operations (a lazy group
    before ``\\.?\\s*$`` was quadratic on a long line of spaces)."""
    value = rest.rstrip()
    return value.removesuffix(".").strip()


@dataclass
class NcclLogReport:
    """What an NCCL_DEBUG=INFO log says about one job's communicators."""

    lines: int = 0
    nccl_lines: int = 0
    versions: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    num_ranks: int | None = None
    gpus_per_host: dict[str, int] = field(default_factory=dict)
    hcas: dict[str, list[str]] = field(default_factory=dict)
    link_layers: list[str] = field(default_factory=list)
    ib_missing: bool = False
    socket_interfaces: list[str] = field(default_factory=list)
    transports: dict[str, int] = field(default_factory=dict)
    net_devices_used: dict[str, list[int]] = field(default_factory=dict)
    gdr: bool | None = None
    rings: int = 0
    trees: bool = False
    channels: dict[str, int] = field(default_factory=dict)
    nvls_available: bool | None = None
    env: dict[str, str] = field(default_factory=dict)
    warnings_logged: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)
    init_complete: int = 0
    nodes_hint: int | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def severity(self) -> str:
        return worst(self.findings) or "ok"

    @property
    def multi_node(self) -> bool | None:
        """True or False when the log (or the caller) says; None when it cannot tell."""
        if (
            len(self.hosts) > 1
            or any(k.startswith("NET/") for k in self.transports)
            or (self.nodes_hint or 0) > 1
        ):
            return True
        if self.nodes_hint == 1 or (
            self.transports and not any(k.startswith("NET/") for k in self.transports)
        ):
            return False
        return None


def _transport(via: str) -> str:
    """``NET/IB/9/GDRDMA`` -> ``NET/IB/GDRDMA``; ``P2P/CUMEM/read`` -> ``P2P/CUMEM``; ``SHM/direct/direct`` -> ``SHM``."""
    parts = via.split("/")
    if parts[0] == "NET":
        kind = parts[1] if len(parts) > 1 else "?"
        return f"NET/{kind}/GDRDMA" if via.endswith("/GDRDMA") else f"NET/{kind}"
    if parts[0] == "P2P":
        return "/".join(parts[:2])
    return parts[0]


class _Collector:
    def __init__(self, expected_nics: int | None) -> None:
        self.expected_nics = expected_nics
        self.report = NcclLogReport()
        self.devs: dict[str, set[int]] = defaultdict(set)
        self.transports: Counter[str] = Counter()
        self.net_devices: dict[str, set[int]] = defaultdict(set)
        self.hcas: dict[str, dict[str, str]] = defaultdict(dict)
        self.warns: Counter[str] = Counter()
        self.nranks: set[int] = set()

    def line(self, raw: str) -> None:
        report = self.report
        report.lines += 1
        if _WATCHDOG.search(raw):
            report.timeouts.append(raw.strip()[:300])
        match = _PREFIX.search(raw)
        if match is None:
            if (version := _VERSION.search(raw)) is not None:
                self._version(version["version"])
            elif _ERROR_WORDS.search(raw) and "NCCL" in raw:
                self.warns[raw.strip()[:200]] += 1
            return
        report.nccl_lines += 1
        host, message = match["host"], match["msg"].strip()
        self.devs[host].add(int(match["dev"]))
        if match["level"] in ("WARN", "ABORT"):
            self.warns[re.sub(r"0x[0-9a-f]+", "0x..", message)[:200]] += 1
            return
        self.info(host, message)

    def _version(self, version: str) -> None:
        if version not in self.report.versions:
            self.report.versions.append(version)

    def info(self, host: str, message: str) -> None:
        report = self.report
        if (version := _VERSION.search(message)) is not None:
            self._version(version["version"])
        elif (network := _USING_NETWORK.match(message)) is not None:
            if network["name"] not in report.networks:
                report.networks.append(network["name"])
        elif (ib := _IB_USING.match(message)) is not None:
            for device in _IB_DEVICE.finditer(ib["list"]):
                self.hcas[host][f"{device['name']}:{device['port']}"] = device["layer"]
        elif _IB_NONE.match(message):
            report.ib_missing = True
        elif (sockets := _SOCKET_USING.match(message)) is not None:
            for name in re.findall(r"\[\d+\]([^:\s\[]+):", sockets["list"]):
                if name not in report.socket_interfaces:
                    report.socket_interfaces.append(name)
        elif (peer := _CHANNEL_PEER.match(message)) is not None:
            transport = _transport(peer["via"])
            self.transports[transport] += 1
            parts = peer["via"].split("/")
            index = re.match(r"\d+", parts[2]) if transport.startswith("NET/") and len(parts) > 2 else None
            if index is not None:
                self.net_devices[host].add(int(index.group()))
        elif (ring := _RING.match(message)) is not None:
            report.rings = max(report.rings, int(ring["total"]))
        elif _TREES.match(message):
            report.trees = True
        elif (connected := _CONNECTED.match(message)) is not None and connected["gdr"] is not None:
            gdr = connected["gdr"] == "1"
            report.gdr = gdr if report.gdr is None else (report.gdr and gdr)
        elif (nvls := _NVLS.search(message)) is not None:
            report.nvls_available = nvls["not"] is None
        elif (init := _INIT.search(message)) is not None:
            report.init_complete += 1
            self.nranks.add(int(init["nranks"]))
        elif (env := _ENV.match(message)) is not None:
            report.env[env["var"]] = _env_value(message[env.end() :])
        if "channels" in message:
            for count in _CHANNELS.finditer(message):
                report.channels[count["kind"]] = max(report.channels.get(count["kind"], 0), int(count["n"]))

    def finish(self) -> NcclLogReport:
        report = self.report
        report.hosts = sorted(self.devs)
        report.gpus_per_host = {host: len(devs) for host, devs in sorted(self.devs.items())}
        report.num_ranks = max(self.nranks) if self.nranks else None
        report.hcas = {host: sorted(names) for host, names in sorted(self.hcas.items())}
        report.link_layers = sorted({layer for names in self.hcas.values() for layer in names.values()})
        report.transports = dict(self.transports.most_common())
        report.net_devices_used = {
            host: sorted(indices) for host, indices in sorted(self.net_devices.items())
        }
        report.warnings_logged = [f"{message} (x{count})" for message, count in self.warns.most_common()]
        if report.gdr is None and any(k.startswith("NET/IB") for k in self.transports):
            report.gdr = any(k.endswith("/GDRDMA") for k in self.transports)
        report.findings = _findings(report, self.expected_nics)
        return report


def analyse_nccl_log(
    text: str, *, expected_nics_per_node: int | None = None, num_nodes: int | None = None
) -> NcclLogReport:
    """Read an NCCL_DEBUG=INFO log (any mix of ranks, prefixes and other output) into findings.

    ``expected_nics_per_node`` (the system's compute NICs) sharpens the missing-rails check; without it
    the GPUs seen per host are the expectation on rail-per-GPU systems. ``num_nodes`` says the job spans
    nodes when the log itself shows only one host.
    """
    return analyse_nccl_lines(
        text.splitlines(), expected_nics_per_node=expected_nics_per_node, num_nodes=num_nodes
    )


def analyse_nccl_lines(
    lines: Iterable[str], *, expected_nics_per_node: int | None = None, num_nodes: int | None = None
) -> NcclLogReport:
    """:func:`analyse_nccl_log` over lines as they stream past (a training log of any size, whose NCCL
    INFO lines are interleaved with everything else): memory stays bounded by the report."""
    collector = _Collector(expected_nics_per_node)
    collector.report.nodes_hint = num_nodes
    for raw in lines:
        collector.line(raw.rstrip("\r\n"))
    return collector.finish()


def rejudge(
    report: NcclLogReport, *, expected_nics_per_node: int | None = None, num_nodes: int | None = None
) -> NcclLogReport:
    """The same log judged again with what the caller knows about the job (its system's NICs per node,
    its node count): a copy with ``nodes_hint`` and ``findings`` redone."""
    hinted = replace(report, nodes_hint=num_nodes if num_nodes is not None else report.nodes_hint)
    return replace(hinted, findings=_findings(hinted, expected_nics_per_node))


def _findings(report: NcclLogReport, expected_nics: int | None = None) -> list[Finding]:
    found: list[Finding] = []
    socket_data = report.transports.get("NET/Socket", 0)
    socket_network = "Socket" in report.networks
    if socket_data or (socket_network and report.multi_node is not False):
        evidence = [f"{socket_data} channel connection(s) via NET/Socket"] if socket_data else []
        evidence += ["'Using network Socket'"] if socket_network else []
        evidence += ["'NET/IB : No device found'"] if report.ib_missing else []
        certain = bool(socket_data) or report.multi_node is True
        found.append(
            Finding(
                "nccl_socket_fallback",
                "error" if certain else "warning",
                "inter-node traffic over TCP sockets",
                "NCCL found no usable RDMA device and fell back to NET/Socket: busbw drops to a few GB/s"
                + ("" if certain else " (the log does not show whether the job spans nodes)"),
                fix="make the HCAs visible (ibv_devices; in containers mount /dev/infiniband and request the RDMA "
                "resource), unset NCCL_IB_DISABLE, list them with NCCL_IB_HCA=mlx5_0,...; keep "
                "NCCL_SOCKET_IFNAME for the bootstrap interface only",
                evidence=evidence,
            )
        )
    ib_plain = report.transports.get("NET/IB", 0)
    if report.gdr is False or ib_plain:
        found.append(
            Finding(
                "nccl_no_gdr",
                "warning",
                "no GPUDirect RDMA",
                "inter-node data goes through host memory ('via NET/IB/N' without /GDRDMA, or 'GDR 0'): "
                "lower bandwidth and CPU load on every transfer",
                fix="load nvidia-peermem (or nv_peer_mem), disable PCIe ACS on the GPU-NIC switches, check the "
                "IOMMU, and raise NCCL_NET_GDR_LEVEL (e.g. PHB or SYS) if the NIC sits far from the GPU",
                evidence=[f"{ib_plain} connection(s) via NET/IB without GDRDMA"] if ib_plain else ["GDR 0"],
            )
        )
    found.extend(_rail_findings(report, expected_nics))
    shm = report.transports.get("SHM", 0)
    if shm:
        found.append(
            Finding(
                "nccl_shm_transport",
                "warning",
                "intra-node traffic through host shared memory",
                f"{shm} channel connection(s) use SHM instead of P2P over NVLink/PCIe",
                fix="unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL=LOC (nccl-tests#228: 220 GB/s once removed); in "
                "containers share the IPC namespace (--ipc=host) and expose all GPUs",
            )
        )
    found.extend(_env_findings(report))
    if report.nvls_available is False:
        found.append(
            Finding(
                "nccl_nvls_unavailable",
                "info",
                "NVLink SHARP not available",
                "'NVLS multicast support is not available': all-reduce runs without in-switch reduction",
                fix="on NVSwitch systems (Hopper+) run nvidia-fabricmanager with a matching driver; NVLS needs "
                "CUDA 12.1+ and NCCL 2.17+",
            )
        )
    if len(report.versions) > 1:
        found.append(
            Finding(
                "nccl_mixed_versions",
                "error",
                "ranks run different NCCL versions",
                f"versions seen: {', '.join(report.versions)}",
                fix="use one container image / NCCL build on every node",
            )
        )
    if report.warnings_logged:
        found.append(
            Finding(
                "nccl_warnings",
                "error",
                "NCCL reported errors",
                f"{len(report.warnings_logged)} distinct NCCL WARN message(s)",
                fix="read the first WARN: IB errors point at links or HCAs (ibstat, ibdiagnet); Cuda failures at "
                "the GPU (nvidia-smi -q, Xid in dmesg)",
                evidence=report.warnings_logged[:5],
            )
        )
    if report.timeouts:
        found.append(
            Finding(
                "nccl_watchdog_timeout",
                "error",
                "collective watchdog timeout",
                f"{len(report.timeouts)} timeout line(s): a rank stopped participating (hang, crash or dead link)",
                fix="find the first rank that timed out and its node's logs; set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
                "and NCCL_DEBUG=INFO; check the fabric (ibdiagnet) between its nodes",
                evidence=report.timeouts[:3],
            )
        )
    if report.nccl_lines >= 10 and not report.init_complete:
        found.append(
            Finding(
                "nccl_init_incomplete",
                "warning",
                "no communicator finished initialising",
                "the log has no 'Init COMPLETE' line: truncated, or hung at bootstrap",
                fix="a hang at init is usually the bootstrap interface: set NCCL_SOCKET_IFNAME to the interface "
                "the nodes reach each other on (not lo or docker0)",
            )
        )
    return found


def _rail_findings(report: NcclLogReport, expected_nics: int | None) -> list[Finding]:
    if not report.hcas or not report.multi_node:
        return []
    short = []
    for host, names in report.hcas.items():
        gpus = report.gpus_per_host.get(host, 0)
        expected = expected_nics if expected_nics is not None else gpus
        in_use = len(names)
        if expected > 1 and in_use < expected:
            short.append(f"{host}: {in_use} of {expected} NICs ({', '.join(names)}) for {gpus} GPU(s)")
    if not short:
        return []
    return [
        Finding(
            "nccl_missing_rails",
            "warning",
            "fewer compute NICs in use than rails",
            f"{len(short)} host(s) run NCCL on fewer HCAs than they have rails: their network bandwidth is cut "
            "by the same fraction",
            fix="list every compute HCA in NCCL_IB_HCA (use '=' for exact names: '=mlx5_0,mlx5_1,...'), check "
            "each port is Active (ibstat) and that storage NICs are excluded rather than compute ones",
            evidence=short[:5],
        )
    ]


def _env_findings(report: NcclLogReport) -> list[Finding]:
    env, found = report.env, []
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1":
        found.append(
            Finding(
                "nccl_ib_disabled",
                "error" if report.multi_node is not False else "warning",
                "NCCL_IB_DISABLE=1",
                "RDMA is disabled by the environment: inter-node traffic uses TCP sockets",
                fix="unset NCCL_IB_DISABLE",
            )
        )
    if env.get("NCCL_P2P_DISABLE", "0").strip() == "1" or env.get("NCCL_P2P_LEVEL", "").upper() in (
        "LOC",
        "0",
    ):
        found.append(
            Finding(
                "nccl_p2p_disabled",
                "warning",
                "GPU peer-to-peer disabled by the environment",
                f"NCCL_P2P_DISABLE={env.get('NCCL_P2P_DISABLE', '-')} NCCL_P2P_LEVEL={env.get('NCCL_P2P_LEVEL', '-')}: "
                "intra-node traffic goes through host memory",
                fix="unset NCCL_P2P_DISABLE and NCCL_P2P_LEVEL",
            )
        )
    if env.get("NCCL_NET_GDR_LEVEL", "").upper() in ("LOC", "0"):
        found.append(
            Finding(
                "nccl_gdr_level_loc",
                "warning",
                "NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA",
                "every inter-node transfer is staged through host memory",
                fix="unset NCCL_NET_GDR_LEVEL or set it to PHB/SYS",
            )
        )
    ifname = env.get("NCCL_SOCKET_IFNAME", "")
    if ifname.lstrip("=^").startswith(("lo", "docker")) and not ifname.startswith("^"):
        found.append(
            Finding(
                "nccl_socket_ifname_local",
                "warning",
                f"NCCL_SOCKET_IFNAME={ifname}",
                "bootstrap bound to a local-only interface: ranks on other nodes cannot connect",
                fix="name the interface the nodes reach each other on (e.g. eth0, ens*) or exclude with ^lo,docker",
            )
        )
    forced = {var: env[var] for var in ("NCCL_ALGO", "NCCL_PROTO") if var in env}
    if forced:
        found.append(
            Finding(
                "nccl_forced_algorithm",
                "info",
                "algorithm or protocol forced",
                ", ".join(f"{k}={v}" for k, v in forced.items()) + ": NCCL's own choice is overridden",
                fix="fine for benchmarking (NCCL_ALGO=RING measures the network); remove for training",
            )
        )
    return found
