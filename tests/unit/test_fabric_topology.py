"""Topology as data: addressing, names, ECMP next-hop sets and shortest-path reachability."""

from __future__ import annotations

import ipaddress
from collections import Counter, deque

import pytest

from fabrics.spec import ClosSpec
from fabrics.topology import IFNAME_MAX, Topology, build_clos

TWO_TIER = ClosSpec(hosts_per_leaf=4, leaves=4, spines=2)
PARALLEL = ClosSpec(hosts_per_leaf=2, leaves=3, spines=2, parallel_links=2)
THREE_TIER = ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, pods=2, super_spines=2)
SPECS = [TWO_TIER, PARALLEL, THREE_TIER]


def all_shortest_node_paths(topo: Topology, src: str, dst: str) -> Counter[tuple[str, ...]]:
    """Every shortest node sequence, counted once per combination of parallel cables (BFS)."""
    adj: dict[str, list[str]] = {n.name: [] for n in topo.nodes}
    for c in topo.cables:
        adj[c.a.node].append(c.b.node)
        adj[c.b.node].append(c.a.node)
    dist = {dst: 0}
    queue = deque([dst])
    while queue:
        n = queue.popleft()
        for m in adj[n]:
            if m not in dist:
                dist[m] = dist[n] + 1
                queue.append(m)
    paths: Counter[tuple[str, ...]] = Counter()

    def walk(path: tuple[str, ...]) -> None:
        if path[-1] == dst:
            paths[path] += 1
            return
        for m in adj[path[-1]]:
            if dist[m] == dist[path[-1]] - 1 and (m == dst or topo.node_by_name[m].role != "host"):
                walk((*path, m))

    walk((src,))
    return paths


def ecmp_node_paths(topo: Topology, src: str, dst: str) -> Counter[tuple[str, ...]]:
    """Every node sequence the routing tables allow, following each next hop."""
    dst_ip = topo.host_address(dst)
    paths: Counter[tuple[str, ...]] = Counter()

    def walk(path: tuple[str, ...]) -> None:
        node = path[-1]
        if node == dst:
            paths[path] += 1
            return
        route = topo.lookup(node, dst_ip)
        assert route is not None, f"{node} has no route to {dst}"
        for hop in route.nexthops:
            walk((*path, hop.peer))

    walk((src,))
    return paths


@pytest.mark.parametrize("spec", SPECS, ids=["2tier", "parallel", "3tier"])
def test_addresses_unique_and_cables_share_a_31(spec: ClosSpec) -> None:
    topo = build_clos(spec)
    ports = [p for c in topo.cables for p in (c.a, c.b)]
    assert len({p.address.ip for p in ports}) == len(ports)
    for c in topo.cables:
        assert c.a.address.network == c.b.address.network
        assert c.a.address.network.prefixlen == 31
    hosts = [topo.host_address(h) for h in topo.hosts]
    assert all(ip in ipaddress.IPv4Network("10.0.0.0/9") for ip in hosts)


@pytest.mark.parametrize("spec", SPECS, ids=["2tier", "parallel", "3tier"])
def test_interface_names_fit_linux_and_are_unique_per_node(spec: ClosSpec) -> None:
    topo = build_clos(spec)
    for node, ports in topo.ports.items():
        names = [p.ifname for p in ports]
        assert len(set(names)) == len(names), node
        assert all(0 < len(n) <= IFNAME_MAX for n in names)


def test_hosts_are_ranks_in_leaf_order() -> None:
    topo = build_clos(TWO_TIER)
    assert topo.hosts == tuple(f"h{r}" for r in range(16))
    leaf_of = {h: topo.links[(h, "eth0")].dst for h in topo.hosts}
    assert [leaf_of[f"h{r}"] for r in (0, 3, 4, 15)] == ["l0", "l0", "l1", "l3"]


@pytest.mark.parametrize("spec", SPECS, ids=["2tier", "parallel", "3tier"])
def test_routes_allow_exactly_every_shortest_path_between_every_pair(spec: ClosSpec) -> None:
    topo = build_clos(spec)
    for src in topo.hosts:
        for dst in topo.hosts:
            if src != dst:
                assert ecmp_node_paths(topo, src, dst) == all_shortest_node_paths(topo, src, dst)


def test_ecmp_next_hop_sets() -> None:
    topo = build_clos(PARALLEL)
    leaf_route = {str(r.prefix): r for r in topo.routes["l0"]}["10.0.1.0/24"]
    assert sorted(h.peer for h in leaf_route.nexthops) == ["s0", "s0", "s1", "s1"]
    assert len({h.ifname for h in leaf_route.nexthops}) == 4
    for hop in leaf_route.nexthops:  # the gateway is the far end of the cable leaving on ifname
        link = topo.links[("l0", hop.ifname)]
        far = next(p for p in topo.ports[link.dst] if p.ifname == link.dst_ifname)
        assert far.address.ip == hop.gateway
    spine_route = {str(r.prefix): r for r in topo.routes["s1"]}["10.0.2.0/24"]
    assert [h.peer for h in spine_route.nexthops] == ["l2", "l2"]

    three = build_clos(THREE_TIER)
    leaf_remote = {str(r.prefix): r for r in three.routes["l0"]}["10.0.2.0/24"]
    assert sorted(h.peer for h in leaf_remote.nexthops) == ["s0", "s1"]  # own pod's spines
    spine_remote = {str(r.prefix): r for r in three.routes["s0"]}["10.0.2.0/24"]
    assert sorted(h.peer for h in spine_remote.nexthops) == ["c0", "c1"]
    core = {str(r.prefix): r for r in three.routes["c0"]}["10.0.2.0/24"]
    assert sorted(h.peer for h in core.nexthops) == ["s2", "s3"]  # pod 1's spines
    assert [str(r.prefix) for r in three.routes["h5"]] == ["0.0.0.0/0"]


def test_path_links_chain_and_carry_rates() -> None:
    spec = ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, host_link_gbps=100, fabric_link_gbps=400)
    topo = build_clos(spec)
    path = topo.path("h0", "h3", 50000)
    assert [link.src for link in path] == ["h0", "l0", path[1].dst, "l1"]
    assert [link.dst for link in path][-1] == "h3"
    assert [link.rate_bps for link in path] == [100e9, 400e9, 400e9, 100e9]
    assert topo.path("h0", "h1", 50000)[1].name == "l0:l0-h1->h1"
    assert topo.path("h0", "h3", 50000) == topo.path("h0", "h3", 50000, 4791)  # deterministic
    assert topo.path("h2", "h2", 1) == ()


def test_ideal_ecmp_spreads_source_ports_evenly() -> None:
    topo = build_clos(TWO_TIER)
    spines = Counter(topo.path("h0", "h4", sport)[1].dst for sport in range(49152, 49152 + 2048))
    assert set(spines) == {"s0", "s1"}
    assert min(spines.values()) > 0.45 * 2048


def test_too_many_leaves_for_the_address_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves: 65536 leaves exceed"):
        build_clos(ClosSpec(hosts_per_leaf=1, leaves=1024, spines=1, pods=64, super_spines=1))
