"""The DUT backend against a software DUT: a namespace router with the eBPF marker, veth cables."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from fabrics.dut import DestinationRefused, bring_up_dut
from fabrics.ecn import ebpf
from fabrics.iproute import in_netns, ip, run, run_batch, tc
from fabrics.spec import DutSpec
from tests.system.conftest import Receiver

pytestmark = pytest.mark.system


@pytest.fixture
def software_dut(fabric_env: str) -> Iterator[tuple[str, list[str], dict[str, ebpf.PortMaps]]]:
    """A router namespace with two ports; the other end of each cable stays in the root
    namespace as the 'existing interface' a rank is bound to. Removed by the test afterwards."""
    dut = f"{fabric_env}dut"
    cables = [f"{fabric_env}d{i}" for i in range(2)]
    run_batch([ip("netns", "add", dut)])
    try:
        cmds = []
        for i, name in enumerate(cables):
            cmds += [
                ip("link", "add", name, "type", "veth", "peer", "name", f"p{i}", "netns", dut),
            ]
        run_batch(cmds)
        run_batch(
            [ip("link", "set", "lo", "up", netns=dut)]
            + [
                ip("addr", "add", f"192.168.{50 + i}.1/24", "dev", f"p{i}", netns=dut)
                for i in range(2)
            ]
            + [ip("link", "set", f"p{i}", "up", netns=dut) for i in range(2)]
        )
        run(ip("netns", "exec", dut, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        obj = ebpf.compiled_object()
        run_batch([c for i in range(2) for c in ebpf.attach_commands(dut, f"p{i}", obj)])
        progs = ebpf.discover(dut)
        maps = ebpf.maps_of(list(progs.values()))
        port_maps = {dev: maps[pid] for dev, pid in progs.items()}
        for m in port_maps.values():
            ebpf.write_params(m, ebpf.MarkerParams(1e8, 20_000, 80_000, 0.2, 1_000_000))
        yield dut, cables, port_maps
    finally:
        for name in cables:
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        run_batch([ip("netns", "del", dut)])


def udp_datagrams_out(netns: str | None) -> int:
    """Udp OutDatagrams of a namespace (/proc/net/snmp as seen from inside it)."""
    assert netns is not None
    with in_netns(netns), open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("OutDatagrams")])


def test_two_ranks_through_the_dut_and_allowlist_refusal(
    software_dut: tuple[str, list[str], dict[str, ebpf.PortMaps]], fabric_env: str
) -> None:
    _dut, cables, port_maps = software_dut
    spec = DutSpec(
        interfaces=tuple(cables),
        addresses=("192.168.50.2/24", "192.168.51.2/24"),
        gateways=("192.168.50.1", "192.168.51.1"),
        routes=("192.168.48.0/20",),
        allowlist=("192.168.50.0/24", "192.168.51.0/24"),
        max_rate_gbps=0.1,
    )
    with bring_up_dut(spec, prefix=fabric_env) as live:
        assert [ns for ns in live.netns] == [f"{fabric_env}r0", f"{fabric_env}r1"]
        assert (live.ranks, live.rank_address(1), live.rank_netns(1)) == (
            2,
            "192.168.51.2",
            live.netns[1],
        )
        r1 = live.netns[1]
        assert r1 is not None
        sock = live.socket(0)
        with Receiver(r1, port=6000) as rx:
            for _ in range(50):
                sock.sendto(b"y" * 500, ("192.168.51.2", 6000))
            rx.wait_for(50, timeout_s=5)
        assert rx.packets == 50
        toward_r1 = ebpf.read_state(port_maps["p1"])
        assert toward_r1.ect_packets == 0 and toward_r1.packets >= 50  # routed by the DUT

        # UDP datagrams the rank's namespace sent (the interface's own counter also moves for
        # ARP refreshes, which are not ours to refuse)
        sent_before = udp_datagrams_out(live.netns[0])
        with pytest.raises(DestinationRefused, match=r"192\.168\.99\.9.*allowlist"):
            sock.sendto(b"z", ("192.168.99.9", 6000))
        with pytest.raises(DestinationRefused, match="interface"):
            live.check_destination(0, "192.168.51.2", ifname="eth9")
        assert udp_datagrams_out(live.netns[0]) == sent_before
        sock.close()
    for name in cables:  # handed back to the root namespace, without our rate cap
        assert run(ip("-o", "link", "show", "dev", name)).strip()
        assert "htb" not in run(tc("qdisc", "show", "dev", name))


def test_without_namespaces_addresses_and_rate_cap_are_released_from_the_interface(
    fabric_env: str,
) -> None:
    cable, peer = f"{fabric_env}v0", f"{fabric_env}v1"
    run_batch([ip("link", "add", "name", cable, "type", "veth", "peer", "name", peer)])
    try:
        spec = DutSpec(
            interfaces=(cable,),
            addresses=("192.168.60.2/24",),
            allowlist=("192.168.60.0/24",),
            namespaces=False,
            max_rate_gbps=0.5,
        )
        with bring_up_dut(spec, prefix=fabric_env) as live:
            assert live.rank_netns(0) is None
            assert "192.168.60.2/24" in run(ip("-o", "addr", "show", "dev", cable))
            qdiscs = run(tc("qdisc", "show", "dev", cable))
            assert "qdisc htb 1: root" in qdiscs
            assert "rate 500Mbit" in run(tc("class", "show", "dev", cable))
        assert "192.168.60.2" not in run(ip("-o", "addr", "show", "dev", cable))
        assert "htb" not in run(tc("qdisc", "show", "dev", cable))
    finally:
        run_batch([ip("link", "del", "dev", cable)])
