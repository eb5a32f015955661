"""A software DUT: a router namespace with one port per rank, shaping each port to a line rate
under the eBPF ECN marker, standing in for a physical switch. The other end of each cable stays
in the root namespace as the interface a rank is given (fabric kind dut)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from fabrics.ecn import ebpf
from fabrics.iproute import ip, run, run_batch, tc

PORTS = 4
DUT_RATE_BPS = 1e8


def port_address(i: int) -> str:
    """Rank i's address on its cable (the DUT's side is .1)."""
    return f"192.168.{70 + i}.2/24"


def wide_port_address(i: int) -> str:
    """Port i's first rank address in a /20 (room for 4,093 endpoints; the DUT's side is .1)."""
    return f"10.{100 + i}.0.2/20"


def wide_gateway(i: int) -> str:
    return f"10.{100 + i}.0.1"


@contextmanager
def software_dut(
    prefix: str, ports: int = PORTS, rate_bps: float = DUT_RATE_BPS, *, wide: bool = False
) -> Iterator[tuple[str, list[str]]]:
    """The router namespace and the rank-side interface names; everything removed afterwards.
    `wide`: the DUT's ports in /20s (wide_port_address), for many endpoints per port."""
    dut = f"{prefix}dut"
    cables = [f"{prefix}d{i}" for i in range(ports)]
    run_batch([ip("netns", "add", dut)])
    try:
        run_batch(
            [
                ip("link", "add", name, "type", "veth", "peer", "name", f"p{i}", "netns", dut)
                for i, name in enumerate(cables)
            ]
        )
        run_batch(
            [ip("link", "set", "lo", "up", netns=dut)]
            + [
                ip(
                    "addr",
                    "add",
                    f"{wide_gateway(i)}/20" if wide else f"192.168.{70 + i}.1/24",
                    "dev",
                    f"p{i}",
                    netns=dut,
                )
                for i in range(ports)
            ]
            + [ip("link", "set", f"p{i}", "mtu", "9000", "up", netns=dut) for i in range(ports)]
        )
        # a switch port drains at its line rate: HTB at rate_bps under the marker
        shaping = []
        for i in range(ports):
            shaping += [
                tc(
                    "qdisc",
                    "add",
                    "dev",
                    f"p{i}",
                    "root",
                    "handle",
                    "1:",
                    "htb",
                    "default",
                    "1",
                    netns=dut,
                ),
                tc(
                    "class",
                    "add",
                    "dev",
                    f"p{i}",
                    "parent",
                    "1:",
                    "classid",
                    "1:1",
                    "htb",
                    "rate",
                    f"{int(rate_bps)}bit",
                    netns=dut,
                ),
                tc(
                    "qdisc",
                    "add",
                    "dev",
                    f"p{i}",
                    "parent",
                    "1:1",
                    "bfifo",
                    "limit",
                    "1000000",
                    netns=dut,
                ),
            ]
        run_batch(shaping)
        run(ip("netns", "exec", dut, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        obj = ebpf.compiled_object()
        run_batch([c for i in range(ports) for c in ebpf.attach_commands(dut, f"p{i}", obj)])
        progs = ebpf.discover(dut)
        maps = ebpf.maps_of(list(progs.values()))
        for pid in progs.values():
            ebpf.write_params(
                maps[pid], ebpf.MarkerParams(rate_bps, 20_000, 80_000, 0.2, 1_000_000)
            )
        yield dut, cables
    finally:
        for name in cables:
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        run_batch([ip("netns", "del", dut)])


def pin_neighbors(prefix: str, port: int, cable: str, addresses: list[str]) -> None:
    """Permanent ARP entries on the DUT's port for ranks behind `cable`: a real switch has a
    large table, while Linux keeps one machine-wide table of 1,024 learned neighbors (shared
    by every namespace) that a thousand endpoints would overflow. Permanent entries do not
    count toward that limit. They go with the DUT's namespace."""
    import json

    mac = json.loads(run(ip("-j", "link", "show", "dev", cable)))[0]["address"]
    run_batch(
        [
            ip(
                "neigh",
                "replace",
                a,
                "lladdr",
                mac,
                "nud",
                "permanent",
                "dev",
                f"p{port}",
                netns=f"{prefix}dut",
            )
            for a in addresses
        ]
    )
