"""Topology.lookup's indexed longest-prefix match against the plain scan it replaced: the same
route for every router and every address a fabric has (hosts, switch ports, one outside)."""

from __future__ import annotations

import ipaddress

import pytest

from fabrics.spec import ClosSpec
from fabrics.topology import NextHop, Route, Topology, build_clos


def scanned(topo: Topology, node: str, dst: ipaddress.IPv4Address) -> Route | None:
    """The scan: the first attached port whose network holds dst (not its own address), else
    the longest prefix, the first of equals."""
    for port in topo.ports[node]:
        if dst in port.address.network and dst != port.address.ip:
            peer = topo.links[(node, port.ifname)].dst
            return Route(port.address.network, (NextHop(dst, port.ifname, peer),))
    best: Route | None = None
    for route in topo.routes.get(node, ()):
        if dst in route.prefix and (best is None or route.prefix.prefixlen > best.prefix.prefixlen):
            best = route
    return best


@pytest.mark.parametrize(
    "spec",
    [
        ClosSpec(hosts_per_leaf=4, leaves=2, spines=2),
        ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, parallel_links=3),
        ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, pods=2, super_spines=2, parallel_links=2),
    ],
    ids=["2 tiers", "parallel links", "3 tiers"],
)
def test_every_lookup_matches_the_scan(spec: ClosSpec) -> None:
    topo = build_clos(spec)
    addresses = {p.address.ip for ports in topo.ports.values() for p in ports}
    addresses.add(ipaddress.IPv4Address("192.0.2.1"))  # reached by no route
    checked = 0
    for node in topo.node_by_name:
        for dst in sorted(addresses):
            assert topo.lookup(node, dst) == scanned(topo, node, dst), (node, dst)
            checked += 1
    assert checked == len(topo.node_by_name) * len(addresses)
    # and a router's own addresses and its peers' are told apart as the scan tells them
    leaf = topo.routers[0]
    own = topo.ports[leaf][0].address.ip
    assert topo.lookup(leaf, own) == scanned(topo, leaf, own)
