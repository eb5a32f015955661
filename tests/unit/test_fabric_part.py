"""A Clos split over servers, as data (fabrics/vxlan.py): the tunnels both ends plan alike,
the checks of a part, and the commands that make a tunnel end."""

from __future__ import annotations

import os

import pytest

from emulator.errors import ScenarioError
from fabrics.netns import cable_mac
from fabrics.ownership import describe
from fabrics.queues import egress_ports
from fabrics.spec import ClosSpec
from fabrics.topology import build_clos
from fabrics.vxlan import (
    DEFAULT_VNI_BASE,
    VNI_MAX,
    FabricPart,
    TunnelEnd,
    plan_parts,
    tunnel_devices,
)

TOPO = build_clos(ClosSpec(hosts_per_leaf=2, leaves=2, spines=2))
# A: l0, its hosts and both spines; B: l1 and its hosts.
OWNER = {"h0": "A", "h1": "A", "l0": "A", "s0": "A", "s1": "A", "h2": "B", "h3": "B", "l1": "B"}
UNDERLAY = {"A": ("192.0.2.1", "eth1", None), "B": ("192.0.2.2", "ens5", "under-b")}


def _index(a: str, b: str) -> int:
    """The index of the cable between nodes a and b."""
    return next(i for i, c in enumerate(TOPO.cables) if {c.a.node, c.b.node} == {a, b})


def test_both_ends_of_a_cross_cable_get_the_same_vni_with_local_and_remote_swapped() -> None:
    parts = plan_parts(TOPO, OWNER, UNDERLAY)
    a, b = parts["A"], parts["B"]
    assert a.nodes == frozenset({"h0", "h1", "l0", "s0", "s1"})
    assert b.nodes == frozenset({"h2", "h3", "l1"})
    cross = {_index("l1", "s0"), _index("l1", "s1")}
    assert set(a.tunnels) == set(b.tunnels) == cross
    for i in cross:
        ta, tb = a.tunnels[i], b.tunnels[i]
        assert ta.vni == tb.vni == DEFAULT_VNI_BASE + i
        assert (ta.local_ip, ta.remote_ip) == ("192.0.2.1", "192.0.2.2")
        assert (tb.local_ip, tb.remote_ip) == ("192.0.2.2", "192.0.2.1")
        assert (ta.underlay_dev, ta.underlay_netns) == ("eth1", None)
        assert (tb.underlay_dev, tb.underlay_netns) == ("ens5", "under-b")
        assert ta.dstport == tb.dstport == 4789
    # Deterministic: another server computing the plan gets the same tunnels.
    assert plan_parts(TOPO, dict(reversed(OWNER.items())), UNDERLAY) == parts
    assert plan_parts(TOPO, OWNER, UNDERLAY, vni_base=100)["B"].tunnels[min(cross)].vni == (
        100 + min(cross)
    )


def test_one_server_owning_everything_needs_no_tunnel_and_no_underlay() -> None:
    (part,) = plan_parts(TOPO, dict.fromkeys(OWNER, "A"), {}).values()
    assert part.tunnels == {} and part.nodes == frozenset(OWNER)


def test_plan_refuses_unassigned_nodes_missing_underlays_and_vnis_out_of_range() -> None:
    with pytest.raises(ScenarioError, match="node h3 has no server"):
        plan_parts(TOPO, {k: v for k, v in OWNER.items() if k != "h3"}, UNDERLAY)
    with pytest.raises(ScenarioError, match="node x9 is assigned a server but not in"):
        plan_parts(TOPO, {**OWNER, "x9": "A"}, UNDERLAY)
    with pytest.raises(ScenarioError, match=r"server B has no underlay .* \(l1:l1-s0 - s0:s0-l1\)"):
        plan_parts(TOPO, OWNER, {"A": UNDERLAY["A"]})
    with pytest.raises(ScenarioError, match="vni_base"):
        plan_parts(TOPO, OWNER, UNDERLAY, vni_base=VNI_MAX)


def test_a_part_must_tunnel_exactly_its_cables_with_one_local_end() -> None:
    good = plan_parts(TOPO, OWNER, UNDERLAY)["A"]
    first, second = sorted(good.tunnels)
    missing = FabricPart(good.nodes, {first: good.tunnels[first]})
    with pytest.raises(
        ScenarioError, match=r"cable \d+ \(l1:l1-s1 - s1:s1-l1\) has one end .* no tunnel"
    ):
        missing.check(TOPO)
    local = _index("l0", "s0")
    extra = FabricPart(
        good.nodes, {**good.tunnels, local: TunnelEnd(7, "192.0.2.1", "192.0.2.2", "eth1")}
    )
    with pytest.raises(
        ScenarioError, match=r"l0:l0-s0 - s0:s0-l0\) has both ends .* needs no tunnel"
    ):
        extra.check(TOPO)
    remote = _index("l1", "h2")
    extra = FabricPart(
        good.nodes, {**good.tunnels, remote: TunnelEnd(7, "192.0.2.1", "192.0.2.2", "eth1")}
    )
    with pytest.raises(ScenarioError, match="has no end on this server"):
        extra.check(TOPO)
    with pytest.raises(ScenarioError, match="node zz is not in the topology"):
        FabricPart(good.nodes | {"zz"}, good.tunnels).check(TOPO)
    with pytest.raises(ScenarioError, match=f"both use VXLAN VNI {good.tunnels[first].vni}"):
        FabricPart(good.nodes, {first: good.tunnels[first], second: good.tunnels[first]})


@pytest.mark.parametrize("vni", [0, VNI_MAX + 1, -1])
def test_vnis_are_24_bits_and_not_zero(vni: int) -> None:
    with pytest.raises(ScenarioError, match=f"VNI {vni}: must be 1..16777215"):
        TunnelEnd(vni, "192.0.2.1", "192.0.2.2", "eth1")


def test_tunnel_addresses_must_be_ipv4_and_differ() -> None:
    with pytest.raises(ScenarioError, match=r"remote_ip 'peer' .* not an IPv4 address"):
        TunnelEnd(5, "192.0.2.1", "peer", "eth1")
    with pytest.raises(ScenarioError, match=r"local and remote are both 192\.0\.2\.1"):
        TunnelEnd(5, "192.0.2.1", "192.0.2.1", "eth1")


def test_a_tunnel_end_is_made_in_the_underlay_then_moved_and_renamed_as_the_port() -> None:
    part = plan_parts(TOPO, OWNER, UNDERLAY)["B"]
    netns = {n: f"emu-{n}" for n in part.nodes}
    devices = tunnel_devices(TOPO, part, netns, cable_mac)
    i = _index("l1", "s0")
    cable = TOPO.cables[i]
    end = 0 if cable.a.node == "l1" else 1
    d = next(d for d in devices if d.ifname == "l1-s0")
    vni = DEFAULT_VNI_BASE + i
    temp = f"x{os.getpid():x}-{vni:x}"
    assert len(temp) <= 15
    assert d.create().argv() == [
        "ip", "-n", "under-b", "link", "add", "name", temp, "address", cable_mac(i, end),
        "mtu", str(TOPO.mtu_bytes), "type", "vxlan", "id", str(vni),
        "local", "192.0.2.2", "remote", "192.0.2.1", "dstport", "4789", "dev", "ens5",
        "nolearning", "tos", "inherit",
    ]  # fmt: skip
    assert d.move().argv() == [
        "ip", "-n", "under-b", "link", "set", "dev", temp, "netns", "emu-l1", "name", "l1-s0"
    ]  # fmt: skip
    temp_record, final_record = d.records()
    assert temp_record == {"kind": "vxlan", "netns": "under-b", "name": temp}
    assert final_record == {"kind": "vxlan", "netns": "emu-l1", "name": "l1-s0"}
    assert describe(final_record) == "VXLAN device l1-s0 in emu-l1"
    # Server A's underlay is the root namespace: no `-n`.
    a = plan_parts(TOPO, OWNER, UNDERLAY)["A"]
    (first, *_) = tunnel_devices(TOPO, a, {n: f"emu-{n}" for n in a.nodes}, cable_mac)
    assert first.create().argv()[:3] == ["ip", "link", "add"]
    assert first.records()[0]["netns"] is None


def test_a_part_shapes_only_its_own_ports() -> None:
    part = plan_parts(TOPO, OWNER, UNDERLAY)["B"]
    netns = {n: f"emu-{n}" for n in part.nodes}
    ports = egress_ports(TOPO, netns, 1.0, 1.0, nodes=part.nodes)
    assert {(p.node, p.dev) for p in ports} == {
        ("h2", "eth0"), ("h3", "eth0"), ("l1", "l1-h2"), ("l1", "l1-h3"),
        ("l1", "l1-s0"), ("l1", "l1-s1"),
    }  # fmt: skip
    everyone = {n.name: f"emu-{n.name}" for n in TOPO.nodes}
    assert egress_ports(TOPO, everyone, 1.0, 1.0) == egress_ports(
        TOPO, everyone, 1.0, 1.0, nodes=set(everyone)
    )
