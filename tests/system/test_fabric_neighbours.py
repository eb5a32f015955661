"""The emulated Clos has a static L2: every port knows its peer's MAC for good, so no ARP rides
a shaped data queue and no neighbour entry can go stale, fail and hold packets back mid-run
(fabrics/netns.py, neighbour_commands). After traffic between every pair of hosts, each
namespace's neighbour table holds exactly one PERMANENT entry per port, with the MAC the peer
interface really has, and nothing the kernel learned by ARP; a cable taken down and brought
back (which flushes its neighbours) has them again."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from fabrics.netns import LiveFabric, bring_up
from fabrics.spec import ClosSpec
from fabrics.topology import build_clos, cable_named
from tests.system.conftest import ping_all_pairs

pytestmark = pytest.mark.system


def _json(netns: str, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["ip", "-n", netns, "-j", *args], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out or "[]")


def _neighbours(live: LiveFabric, node: str) -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
    """(dev, address) -> (lladdr, states) of every IPv4 neighbour entry in the node's namespace."""
    return {
        (str(n["dev"]), str(n["dst"])): (str(n.get("lladdr")), tuple(n.get("state", ())))
        for n in _json(live.netns_of(node), "-4", "neigh", "show")
    }


def _mac(live: LiveFabric, node: str, ifname: str) -> str:
    (link,) = _json(live.netns_of(node), "link", "show", "dev", ifname)
    return str(link["address"])


def _expected(live: LiveFabric, node: str) -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
    out: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
    for cable in live.topology.cables:
        for near, far in ((cable.a, cable.b), (cable.b, cable.a)):
            if near.node == node:
                mac = _mac(live, far.node, far.ifname)
                out[(near.ifname, str(far.address.ip))] = (mac, ("PERMANENT",))
    return out


def test_every_port_has_its_peer_as_a_permanent_neighbour_and_learns_none(
    fabric_env: str,
) -> None:
    topo = build_clos(ClosSpec(hosts_per_leaf=2, leaves=2, spines=2))
    with bring_up(topo, rate_scale=0.1, prefix=fabric_env) as live:
        addresses = {h: str(topo.host_address(h)) for h in topo.hosts}
        netns = {h: live.netns_of(h) for h in topo.hosts}
        pairs = {(a, b) for a in topo.hosts for b in topo.hosts if a != b}
        assert ping_all_pairs(netns, addresses) == pairs
        for node in (n.name for n in topo.nodes):
            assert _neighbours(live, node) == _expected(live, node), node

        cable = cable_named(topo, "l0-s0")
        live.set_cable(cable, up=False)
        assert not any(dev == cable.a.ifname for dev, _ in _neighbours(live, cable.a.node)), (
            "taking an interface down flushes its neighbours (the reason set_cable adds them back)"
        )
        live.set_cable(cable, up=True)
        live.reroute([])  # the kernel dropped the routes over the dead interface
        assert ping_all_pairs(netns, addresses) == pairs
        for node in (cable.a.node, cable.b.node):
            assert _neighbours(live, node) == _expected(live, node), node
