"""An emulated cluster network for benchmarks: Linux network namespaces joined by
rate-limited links (needs root; a benchmark helper, never a CI test).

Layouts
-------
``EmulatedCluster(hosts=1, rate="200mbit")``
    One namespace ``<prefix>-h0`` whose loopback is limited to ``rate``: every
    rank runs in it and every byte between ranks crosses the limited link
    (ranks rendezvous on 127.0.0.1, gloo binds ``lo``).

``EmulatedCluster(hosts=H, rate="100mbit")`` with ``H >= 2``
    One namespace per host, each with an ``eth0`` (address ``10.213.0.<h+1>/24``)
    cabled to a bridge in a switch namespace ``<prefix>-sw``. Each host's link
    is limited to ``rate`` in both directions (a ``tbf`` on the host's egress
    and on the switch port's egress towards the host, i.e. a full-duplex NIC);
    loopback inside a host is unlimited, so ranks on one "machine" talk at
    memory speed and only cross-host traffic pays the slow link.

``rate=None`` gives the same layout without a limit (the control run).

Why ``tbf`` and not ``netem``: ``netem`` needs the ``sch_netem`` kernel module,
which these kernels do not ship (``tc qdisc add ... netem`` fails with "Specified
qdisc kind is unknown"); :func:`netem_available` checks. A ``tbf`` burst smaller
than the link MTU silently drops every larger frame (gloo then times out), so the
MTU is set to 9000 and the burst to 256 KB.

Only addresses inside namespaces made here are ever used: 127.0.0.1 inside a
namespace, and 10.213.0.0/24 on the bridge that exists only in this cluster's
namespaces. Everything is removed on exit (also after an exception); stale
namespaces of a killed run with the same prefix are removed on entry.

Example::

    with EmulatedCluster(hosts=2, rate="200mbit") as net:
        procs = [net.popen(h, ["torchrun", ...]) for h in range(2)]
        ...
        print(net.bytes_sent())  # bytes each host put on its link
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import Sequence

SUBNET = "10.213.0"
MTU = 9000
BURST = "256kb"
LATENCY = "50ms"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _tc(ns: str, *args: str) -> None:
    subprocess.run(["tc", "-n", ns, *args], check=True, capture_output=True, text=True)


def netem_available() -> bool:
    """Whether ``tc ... netem`` works here (it needs a kernel module these machines lack)."""
    ns = f"gmpnetemprobe{os.getpid()}"
    _ip("netns", "add", ns)
    try:
        res = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                             capture_output=True, text=True)
        return res.returncode == 0
    finally:
        _ip("netns", "del", ns, check=False)


def _limit(ns: str, dev: str, rate: str | None) -> None:
    _ip("-n", ns, "link", "set", dev, "mtu", str(MTU))
    if rate:
        _tc(ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", BURST, "latency", LATENCY)


@dataclass
class EmulatedCluster:
    """Network namespaces with rate-limited links; see the module docstring."""

    hosts: int = 1
    rate: str | None = "200mbit"
    prefix: str = "gmpbench"
    namespaces: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.hosts < 1:
            raise ValueError(f"hosts must be >= 1, got {self.hosts}")
        if os.geteuid() != 0:
            raise PermissionError("an emulated cluster needs root (ip netns, tc)")

    # -- lifecycle ---------------------------------------------------------------------------
    def host_ns(self, host: int) -> str:
        return f"{self.prefix}-h{host}"

    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    def addr(self, host: int) -> str:
        """The address ranks on ``host`` are reached at (rendezvous, gloo)."""
        return "127.0.0.1" if self.hosts == 1 else f"{SUBNET}.{host + 1}"

    @property
    def ifname(self) -> str:
        """The interface gloo must bind (GLOO_SOCKET_IFNAME)."""
        return "lo" if self.hosts == 1 else "eth0"

    def __enter__(self) -> "EmulatedCluster":
        self.remove_stale()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def remove_stale(self) -> None:
        listed = _ip("netns", "list", check=False).stdout.split("\n")
        for line in listed:
            name = line.split(" ")[0]
            if name.startswith(self.prefix + "-"):
                _ip("netns", "del", name, check=False)

    def _create(self) -> None:
        for h in range(self.hosts):
            ns = self.host_ns(h)
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        if self.hosts == 1:
            _limit(self.host_ns(0), "lo", self.rate)
            return
        sw = self.switch_ns
        _ip("netns", "add", sw)
        self.namespaces.append(sw)
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "mtu", str(MTU))
        _ip("-n", sw, "link", "set", "br0", "up")
        for h in range(self.hosts):
            ns, port = self.host_ns(h), f"p{h}"
            # the veth is made inside the switch namespace, its peer moved into the host
            _ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _limit(sw, port, self.rate)  # switch -> host direction
            _ip("-n", sw, "link", "set", port, "master", "br0")
            _ip("-n", sw, "link", "set", port, "up")
            _limit(ns, "eth0", self.rate)  # host -> switch direction
            _ip("-n", ns, "addr", "add", f"{self.addr(h)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns, check=False)
        self.namespaces.clear()

    # -- running -------------------------------------------------------------------------------
    def command(self, host: int, cmd: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.host_ns(host), *map(str, cmd)]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["GLOO_SOCKET_IFNAME"] = self.ifname
        return env

    def popen(self, host: int, cmd: Sequence[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", self.env())
        return subprocess.Popen(self.command(host, cmd), **kwargs)

    def bytes_sent(self) -> list[int]:
        """Bytes each host has transmitted on its link so far (``lo`` when ``hosts == 1``): with
        ``hosts >= 2`` exactly the bytes that cross the slow link (headers included), since a
        host's packets to its own address go through its loopback."""
        return [_tx_bytes(self.host_ns(h), self.ifname) for h in range(self.hosts)]

    def bytes_intra(self) -> list[int]:
        """Bytes each host has sent to itself so far (its loopback: ranks on one "machine"); all
        zeros when ``hosts == 1``, where the loopback is the slow link (:meth:`bytes_sent`)."""
        if self.hosts == 1:
            return [0]
        return [_tx_bytes(self.host_ns(h), "lo") for h in range(self.hosts)]


def _tx_bytes(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/statistics/tx_bytes"],
                         check=True, capture_output=True, text=True).stdout
    return int(out.strip())
