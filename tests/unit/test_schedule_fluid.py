"""The congestion-free plan's fluid network (emulator.schedule.fluid) against the definition of a
max-min fair allocation (Bertsekas & Gallager, Data Networks, 6.5.2): feasible (no link carries
more than its capacity) and every flow has a bottleneck link, saturated and carrying no flow at a
higher rate. Random networks (hypothesis), then completions and class turnover by hand."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.schedule.fluid import FluidNetwork

EPS = 1e-9


def _network(capacities: list[float], paths: list[tuple[int, ...]]) -> FluidNetwork:
    """Flow k goes from rank k to rank k+1000 over links `paths[k]` (bit/s: capacities)."""

    def path(src: int, dst: int, sport: int) -> list[tuple[str, float]]:
        return [(f"l{i}", capacities[i]) for i in paths[src]]

    return FluidNetwork(path)


@st.composite
def networks(draw: st.DrawFn) -> tuple[list[float], list[tuple[int, ...]], list[int]]:
    links = draw(st.integers(1, 7))
    capacities = [draw(st.sampled_from([8e9, 16e9, 40e9, 100e9, 400e9])) for _ in range(links)]
    flows = draw(st.integers(1, 14))
    paths = [
        tuple(sorted(draw(st.sets(st.integers(0, links - 1), min_size=1, max_size=links))))
        for _ in range(flows)
    ]
    sizes = [draw(st.integers(1, 10**6)) for _ in range(flows)]
    return capacities, paths, sizes


@settings(max_examples=300, deadline=None)
@given(networks())
def test_rates_are_max_min_fair(case: tuple[list[float], list[tuple[int, ...]], list[int]]) -> None:
    capacities, paths, sizes = case
    net = _network(capacities, paths)
    for k, size in enumerate(sizes):
        net.add(k, k, k + 1000, 0, size)
    assert math.isfinite(net.next_completion())  # fills the rates
    rate = [float(net._rate[net._class_of[tuple(f"l{i}" for i in p)]]) for p in paths]
    load = [0.0] * len(capacities)
    for k, p in enumerate(paths):
        for i in p:
            load[i] += rate[k]
    capacity = [c / 8 for c in capacities]  # bytes/s, as the rates
    for i, carried in enumerate(load):
        assert carried <= capacity[i] * (1 + EPS), f"link l{i} over its capacity"
    for k, p in enumerate(paths):
        assert any(
            load[i] >= capacity[i] * (1 - EPS)
            and all(rate[k] >= rate[j] * (1 - EPS) for j, q in enumerate(paths) if i in q)
            for i in p
        ), f"flow {k} on {p} has no bottleneck link"


def test_a_link_shared_then_freed_gives_the_rest_the_whole_rate() -> None:
    # two flows of 1 and 3 MB share 8 Gb/s (1 GB/s): 0.5 GB/s each until the first ends at
    # 2 ms, then the second alone at 1 GB/s: 2 MB more, done at 4 ms
    net = _network([8e9], [(0,), (0,)])
    net.add(0, 0, 1000, 0, 1_000_000)
    net.add(1, 1, 1001, 0, 3_000_000)
    assert math.isclose(net.next_completion(), 0.002)
    assert net.advance(0.002) == [0]
    assert math.isclose(net.next_completion(), 0.004)
    assert net.advance(0.004) == [1]
    assert net.next_completion() == math.inf


def test_many_classes_made_and_retired_keep_their_order_and_rates() -> None:
    # 300 flows one after another, each on its own path (a class each): the class table fills,
    # is compacted in order, and every flow still takes its size over the link's rate
    paths = [(i % 7,) for i in range(300)]
    net = _network([8e9] * 7, paths)
    now = 0.0
    for k in range(300):
        net.add(k, k, k + 1000, 0, 1_000_000)  # alone on its link: 1 ms at 1 GB/s
        end = net.next_completion()
        assert math.isclose(end - now, 0.001, rel_tol=1e-9)
        assert net.advance(end) == [k]
        now = end
    assert net.active == 0


def test_flows_done_at_one_instant_come_out_in_the_order_their_classes_were_made() -> None:
    net = _network([8e9, 8e9, 8e9], [(2,), (0,), (1,)])
    for k in (0, 1, 2):
        net.add(k, k, k + 1000, 0, 1_000_000)
    assert net.advance(net.next_completion()) == [0, 1, 2]
