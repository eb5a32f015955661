"""One Clos split over two "servers" (fabrics/vxlan.py): each brings up its part, and the cables
between them are VXLAN tunnels over an underlay, shaped and marked like every other port.

The two servers' NICs are two namespaces joined by a veth (MTU 9100). Server A hosts l0, its
hosts and both spines; server B hosts l1 and its hosts; the spine-to-l1 cables cross. Each part
has its own state file and namespace prefix, as on two machines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import EnvironmentProblem, ScenarioError
from fabrics.counters import read_port_counters
from fabrics.iproute import existing_netns
from fabrics.netns import LiveFabric, bring_up, cable_mac
from fabrics.ownership import STATE_DIR_ENV, load_state, release_resources
from fabrics.spec import ClosSpec, EcnSpec, TierSpec
from fabrics.topology import Topology, build_clos
from fabrics.vxlan import FabricPart, TunnelEnd, check_underlays, plan_parts
from tests.system.conftest import Receiver, paced_send, ping_all_pairs, udp_socket

pytestmark = pytest.mark.system

# Hosts at 10x the fabric links, so a host can overrun its leaf's uplink (the tunnel, for l1);
# leaves mark from a few packets on, spines never (every mark is then a leaf's).
SPEC = ClosSpec(
    hosts_per_leaf=2,
    leaves=2,
    spines=2,
    host_link_gbps=10,
    fabric_link_gbps=1,
    leaf=TierSpec(ecn=EcnSpec(kmin_bytes=5_000, kmax_bytes=20_000, pmax=0.2)),
    spine=TierSpec(ecn=EcnSpec(enabled=False)),
)
OWNER = {"h0": "A", "h1": "A", "l0": "A", "s0": "A", "s1": "A", "h2": "B", "h3": "B", "l1": "B"}
RATE_SCALE = 0.05  # fabric links at 50 Mb/s, host links at 500 Mb/s
UNDERLAY_IP = {"A": "10.254.0.1", "B": "10.254.0.2"}
UNDERLAY_DEV = "ul0"
TAG = os.getpid() % 100000
PREFIX = {"A": f"vx{TAG}A-", "B": f"vx{TAG}B-"}


def _ip(*args: str) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout


@dataclass
class Underlay:
    netns: dict[str, str]  # server -> the namespace standing for its NIC's

    def spec(self) -> dict[str, tuple[str, str, str | None]]:
        return {s: (UNDERLAY_IP[s], UNDERLAY_DEV, ns) for s, ns in self.netns.items()}

    def vxlan_devices(self) -> list[str]:
        return [
            f"{ns}:{link['ifname']}"
            for ns in self.netns.values()
            if ns in existing_netns()
            for link in json.loads(_ip("-n", ns, "-d", "-j", "link", "show") or "[]")
            if link.get("linkinfo", {}).get("info_kind") == "vxlan"
        ]

    def nft_tables(self) -> list[str]:
        """The nftables tables in the underlay namespaces (the guards of fabrics/underlay_guard)."""
        out = []
        for ns in self.netns.values():
            if ns not in existing_netns():
                continue
            listed = subprocess.run(
                ["ip", "netns", "exec", ns, "nft", "list", "tables"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout  # fmt: skip
            out += [f"{ns}:{line.strip()}" for line in listed.splitlines() if line.strip()]
        return out


def _make_underlay(mtu: int) -> Iterator[Underlay]:
    """Two namespaces joined by a veth, standing for two servers' NICs; removed afterwards."""
    ns = {"A": f"vxu{TAG}a", "B": f"vxu{TAG}b"}
    try:
        for n in ns.values():
            _ip("netns", "add", n)
        _ip(
            "-n", ns["A"], "link", "add", UNDERLAY_DEV, "mtu", str(mtu), "type", "veth",
            "peer", "name", UNDERLAY_DEV, "mtu", str(mtu), "netns", ns["B"],
        )  # fmt: skip
        for server, n in ns.items():
            _ip("-n", n, "addr", "add", f"{UNDERLAY_IP[server]}/30", "dev", UNDERLAY_DEV)
            _ip("-n", n, "link", "set", "dev", UNDERLAY_DEV, "up")
            # As the fabric's veths: receive through NAPI, in order (a real NIC's wire is).
            offloads = ["ethtool", "-K", UNDERLAY_DEV, "gro", "on", "tso", "off"]
            subprocess.run(
                ["ip", "netns", "exec", n, *offloads], capture_output=True, timeout=30, check=True
            )
        yield Underlay(ns)
    finally:
        for n in ns.values():
            if n in existing_netns():
                _ip("netns", "del", n)


@pytest.fixture
def underlay(system: None) -> Iterator[Underlay]:
    yield from _make_underlay(9100)


@pytest.fixture
def small_underlay(system: None) -> Iterator[Underlay]:
    yield from _make_underlay(1500)


def _state_dir(tmp_path: Path, server: str) -> Path:
    return tmp_path / f"state-{server}"


def _bring_up_part(
    topo: Topology,
    part: FabricPart,
    server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    **kw: Any,
) -> LiveFabric:
    # Each part has its own state file, as it would on its own machine (read at claim time).
    monkeypatch.setenv(STATE_DIR_ENV, str(_state_dir(tmp_path, server)))
    return bring_up(topo, rate_scale=RATE_SCALE, prefix=PREFIX[server], part=part, **kw)


def _leftovers(underlay: Underlay, tmp_path: Path) -> list[str]:
    namespaces = [n for n in existing_netns() if n.startswith(tuple(PREFIX.values()))]
    states = [str(p) for p in tmp_path.glob("state-*/state.json")]
    return namespaces + underlay.vxlan_devices() + underlay.nft_tables() + states


@pytest.fixture
def parts(
    underlay: Underlay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, LiveFabric]]:
    """Both parts up (eBPF marker); closed at the end, and nothing of them left behind."""
    topo = build_clos(SPEC)
    plan = plan_parts(topo, OWNER, underlay.spec())
    with ExitStack() as stack:
        lives = {}
        for server in ("A", "B"):
            live = _bring_up_part(topo, plan[server], server, tmp_path, monkeypatch, marker="ebpf")
            stack.callback(live.close)
            lives[server] = live
        yield lives
    assert _leftovers(underlay, tmp_path) == []


def _tunnel_ports(live: LiveFabric) -> list[tuple[str, str]]:
    assert live.part is not None
    topo = live.topology
    ends = [(c.a, c.b) for i, c in enumerate(topo.cables) if i in live.part.tunnels]
    return [(p.node, p.ifname) for pair in ends for p in pair if p.node in live.part.nodes]


def test_a_split_fabric_pings_shapes_and_marks_across_the_tunnels(
    parts: dict[str, LiveFabric],
) -> None:
    a, b = parts["A"], parts["B"]
    topo = a.topology
    assert _tunnel_ports(a) == [("s0", "s0-l1"), ("s1", "s1-l1")]
    assert _tunnel_ports(b) == [("l1", "l1-s0"), ("l1", "l1-s1")]
    meta_a, meta_b = a.metadata()["part"], b.metadata()["part"]
    assert (meta_a["local_nodes"], meta_b["local_nodes"]) == (5, 3)
    for ta, tb in zip(meta_a["tunnels"], meta_b["tunnels"], strict=True):
        assert ta["vni"] == tb["vni"] and ta["cable"] == tb["cable"]
        assert (ta["local_ip"], ta["remote_ip"]) == (tb["remote_ip"], tb["local_ip"])
        assert ta["underlay_dev"] == UNDERLAY_DEV

    # Each tunnel end is a vxlan device with the port's name, the cable end's MAC and the MTU.
    assert a.part is not None
    for index, tunnel in a.part.tunnels.items():
        end = 0 if OWNER[topo.cables[index].a.node] == "A" else 1
        port = (topo.cables[index].a, topo.cables[index].b)[end]
        (link,) = json.loads(
            _ip("-n", a.netns_of(port.node), "-d", "-j", "link", "show", "dev", port.ifname)
        )
        assert link["linkinfo"]["info_kind"] == "vxlan"
        assert link["linkinfo"]["info_data"]["id"] == tunnel.vni
        assert link["address"] == cable_mac(index, end)
        assert link["mtu"] == topo.mtu_bytes

    # Only the local nodes exist here; ranks elsewhere are still valid destinations.
    assert a.local_ranks == (0, 1) and b.local_ranks == (2, 3)
    assert b.rank_netns(2) == f"{PREFIX['B']}h2"
    a.check_destination(0, a.rank_address(3))
    with pytest.raises(ScenarioError, match="another server"):
        a.rank_netns(2)
    with pytest.raises(ScenarioError, match="several servers"):
        a.set_cable(topo.cables[0], up=False)
    with pytest.raises(ScenarioError, match="several servers"):
        b.reroute([])

    netns = {h: live.netns[h] for live in (a, b) for h in topo.hosts if h in live.netns}
    addresses = {h: str(topo.host_address(h)) for h in topo.hosts}
    answered = ping_all_pairs(netns, addresses)
    missing = {(x, y) for x in netns for y in netns if x != y} - answered
    assert not missing, f"unanswered across the tunnels: {sorted(missing)}"

    # The eBPF marker sits on every tunnel end's egress (the leaf's; spines do not mark here).
    assert a.metadata()["marker"] == b.metadata()["marker"] == "ebpf"
    for node, dev in _tunnel_ports(b):
        maps = b.marker.maps[(b.netns_of(node), dev)]  # type: ignore[attr-defined]
        out = subprocess.run(
            ["tc", "-n", b.netns_of(node), "filter", "show", "dev", dev, "egress"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert f" id {maps.prog_id} " in out and "direct-action" in out

    # A UDP burst h0 (under l0, server A) -> h2 (under l1, server B) crosses A's tunnel ports:
    # their HTB counts every datagram, and only A's ports are read from A.
    sent = 200
    before = read_port_counters(a)
    assert {node for node, _ in before} == {"l0", "s0", "s1"}
    with Receiver(b.netns_of("h2"), port=5000) as rx:
        s = udp_socket(a.netns_of("h0"))
        for _ in range(sent):
            s.sendto(bytes(1000), (addresses["h2"], 5000))
        s.close()
        rx.wait_for(sent, timeout_s=5)
    after = read_port_counters(a)
    assert rx.packets == sent
    crossed = sum(after[p].tx_packets - before[p].tx_packets for p in _tunnel_ports(a))
    assert crossed == sent


def test_a_ce_mark_made_before_encapsulation_arrives_after_decapsulation(
    parts: dict[str, LiveFabric],
) -> None:
    """h2 (server B) overruns its leaf's uplink, a tunnel: the marker on the tunnel device marks
    the inner packets, VXLAN carries them (outer ECT(0) for an inner CE, RFC 6040), and h0 on
    server A receives exactly the marks the fabric's ports counted."""
    a, b = parts["A"], parts["B"]
    topo = a.topology
    uplink_bps = SPEC.fabric_link_gbps * 1e9 * RATE_SCALE
    with Receiver(a.netns_of("h0"), port=5001) as rx:
        s = udp_socket(b.netns_of("h2"))
        sent = paced_send([(s, (str(topo.host_address("h0")), 5001))], 1.5 * uplink_bps, 1000, 0.4)
        s.close()
        rx.wait_for(sent, timeout_s=10)
    counters = {**read_port_counters(a), **read_port_counters(b)}
    at_tunnel = sum(counters[p].ecn_marks for p in _tunnel_ports(b))
    total = sum(c.ecn_marks for c in counters.values())
    assert rx.packets == sent
    assert at_tunnel >= 0.3 * sent, f"{at_tunnel} marks at l1's tunnel ports of {sent} packets"
    assert rx.ce == total, f"received {rx.ce} CE, the ports marked {total} ({at_tunnel} at l1)"


def _rx_packets(netns: str, dev: str) -> int:
    (link,) = json.loads(_ip("-n", netns, "-s", "-j", "link", "show", "dev", dev))
    return int(link["stats64"]["rx"]["packets"])


def _vxlan_frames(
    source_ip: str, netns: str, to: str, vni: int, inner_dst_mac: str, n: int
) -> None:
    """`n` VXLAN frames (RFC 7348: flags 0x08, VNI) from `source_ip` in `netns` to `to`:4789, each
    an Ethernet frame to `inner_dst_mac` carrying a UDP datagram (as a spoofed RoCEv2 packet
    would be)."""
    inner_ip = bytes.fromhex("4500001c0000400040110000") + bytes([10, 9, 9, 9, 10, 9, 9, 8])
    inner = (
        bytes.fromhex(inner_dst_mac.replace(":", ""))
        + bytes.fromhex("020000000099")  # a source MAC no port of the fabric has
        + b"\x08\x00"
        + inner_ip
        + (4791).to_bytes(2, "big") * 2
        + bytes(4)
    )
    header = bytes([0x08, 0, 0, 0]) + vni.to_bytes(3, "big") + b"\x00"
    s = udp_socket(netns, tos=0)
    try:
        s.bind((source_ip, 0))
        for _ in range(n):
            s.sendto(header + inner, (to, 4789))
    finally:
        s.close()


def test_the_underlay_takes_vxlan_only_from_the_peer_server(
    parts: dict[str, LiveFabric], underlay: Underlay
) -> None:
    """A frame with one of the part's VNIs from an address that is not the tunnel's remote is
    dropped before the tunnel end sees it; the same frame from the remote passes. The stranger is
    a second address on server A's underlay NIC, routed on B, so nothing but the guard stands in
    its way (Linux matches arriving VXLAN on the VNI alone)."""
    a, b = parts["A"], parts["B"]
    assert b.part is not None
    index, tunnel = min(b.part.tunnels.items())
    cable = b.topology.cables[index]
    end = 0 if cable.a.node in b.part.nodes else 1
    port = (cable.a, cable.b)[end]
    node_ns = b.netns_of(port.node)
    stranger = "10.254.7.9"
    _ip("-n", underlay.netns["A"], "addr", "add", f"{stranger}/32", "dev", UNDERLAY_DEV)
    _ip("-n", underlay.netns["B"], "route", "add", f"{stranger}/32", "dev", UNDERLAY_DEV)
    sent = 5

    before = _rx_packets(node_ns, port.ifname)
    _vxlan_frames(
        stranger, underlay.netns["A"], UNDERLAY_IP["B"], tunnel.vni, cable_mac(index, end), sent
    )
    time.sleep(0.2)
    assert _rx_packets(node_ns, port.ifname) == before, "a stranger's frame reached the tunnel end"
    (guard,) = b.metadata()["part"]["underlay_guards"]
    assert guard["netns"] == underlay.netns["B"] and guard["tunnels"] == len(b.part.tunnels)
    assert guard["dropped_frames"] == sent

    _vxlan_frames(
        UNDERLAY_IP["A"],
        underlay.netns["A"],
        UNDERLAY_IP["B"],
        tunnel.vni,
        cable_mac(index, end),
        sent,
    )
    deadline = time.monotonic() + 5
    while _rx_packets(node_ns, port.ifname) < before + sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _rx_packets(node_ns, port.ifname) == before + sent
    assert b.metadata()["part"]["underlay_guards"][0]["dropped_frames"] == sent
    assert a.metadata()["part"]["underlay_guards"][0]["dropped_frames"] == 0


def test_an_underlay_mtu_too_small_is_refused_and_nothing_is_made(
    small_underlay: Underlay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topo = build_clos(SPEC)
    plan = plan_parts(topo, OWNER, small_underlay.spec())
    with pytest.raises(EnvironmentProblem) as info:
        _bring_up_part(topo, plan["A"], "A", tmp_path, monkeypatch)
    message = str(info.value)
    assert "\n" not in message
    assert f"underlay interface {UNDERLAY_DEV} in namespace {small_underlay.netns['A']}" in message
    assert "MTU 1500" in message and f"at least {topo.mtu_bytes + 50}" in message
    assert _leftovers(small_underlay, tmp_path) == []


def test_each_underlay_problem_is_one_line_naming_the_interface(underlay: Underlay) -> None:
    ns = underlay.netns["A"]

    def problem(ip: str, dev: str) -> str:
        with pytest.raises(EnvironmentProblem) as info:
            check_underlays([TunnelEnd(9, ip, UNDERLAY_IP["B"], dev, ns)], SPEC.mtu_bytes)
        assert "\n" not in str(info.value)
        return str(info.value)

    assert (
        problem(UNDERLAY_IP["A"], "nic9")
        == f"underlay interface nic9 in namespace {ns} does not exist"
    )
    assert (
        f"{UNDERLAY_DEV} in namespace {ns} has no address 10.254.9.9 (it has {UNDERLAY_IP['A']})"
        in problem("10.254.9.9", UNDERLAY_DEV)
    )
    _ip("-n", ns, "link", "set", "dev", UNDERLAY_DEV, "down")
    assert f"{UNDERLAY_DEV} in namespace {ns} is down" in problem(UNDERLAY_IP["A"], UNDERLAY_DEV)


CHILD = textwrap.dedent(
    """
    import json, sys, time
    import fabrics.vxlan
    from fabrics.netns import bring_up
    from fabrics.vxlan import plan_parts
    from tests.system.test_fabric_part import OWNER, RATE_SCALE, SPEC
    from fabrics.topology import build_clos

    underlay, prefix, stage = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    topo = build_clos(SPEC)
    part = plan_parts(topo, OWNER, {s: tuple(u) for s, u in underlay.items()})["B"]
    if stage == "tunnels_created":
        # stop for good between creating the tunnel ends and moving them into their namespaces
        real = fabrics.vxlan.run_grouped
        calls = []

        def run_grouped(cmds):
            calls.append(1)
            if len(calls) == 2:
                print("ready", flush=True)
                time.sleep(600)
            real(cmds)

        fabrics.vxlan.run_grouped = run_grouped
    live = bring_up(topo, rate_scale=RATE_SCALE, prefix=prefix, part=part)
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("stage", ["tunnels_created", "up"])
def test_a_killed_part_is_released_from_its_state_file(
    underlay: Underlay, tmp_path: Path, stage: str
) -> None:
    """SIGKILL the owner (mid-tunnel, or with its part up), then release what its state file
    lists as `emulate clean` does: nothing of the part is left, in the underlay either."""
    state_dir = _state_dir(tmp_path, "B")
    env = {**os.environ, STATE_DIR_ENV: str(state_dir)}
    repo = Path(__file__).resolve().parents[2]
    args = [json.dumps(underlay.spec()), PREFIX["B"], stage]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True, env=env, cwd=repo
    )
    try:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        state = load_state(state_dir / "state.json")
        assert state is not None and state["pid"] == child.pid
        vxlan = [r for r in state["resources"] if r["kind"] == "vxlan"]
        assert len(vxlan) == 4  # each tunnel end under its temporary name, then its own
        in_underlay = underlay.vxlan_devices()
        assert len(in_underlay) == (2 if stage == "tunnels_created" else 0), in_underlay
        removed, remaining = release_resources(state["resources"])
        assert remaining == []
        assert sum(r.startswith("VXLAN device ") for r in removed) == 2
        (state_dir / "state.json").unlink()
        deadline = time.monotonic() + 5
        while _leftovers(underlay, tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _leftovers(underlay, tmp_path) == []
    finally:
        state = load_state(state_dir / "state.json")
        if state is not None:
            release_resources(state["resources"])
            (state_dir / "state.json").unlink()
