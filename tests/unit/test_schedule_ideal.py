"""Ideal-time model: max-min fair sharing on one link and on a 2-leaf Clos, and whole jobs."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import pytest

from emulator.errors import InputError
from emulator.schedule.busbw import busbw_bytes_per_s
from emulator.schedule.fabric import clos_path, default_clos_spec, star_path
from emulator.schedule.fluid import FluidNetwork
from emulator.schedule.ideal import simulate
from emulator.schedule.job import JobSchedule, RankInput
from emulator.schedule.matching import GroupTable
from emulator.schedule.nodes import CommInfo, NodeInfo, NodeKind, Stream
from emulator.schedule.params import CollectivesParams, ComputeParams

GBPS = 1e9


def one_link(src: int, dst: int, sport: int) -> Sequence[tuple[Hashable, float]]:
    return [("wire", 8e9)]  # 1e9 bytes/s


def test_single_link_fair_share_then_full_rate() -> None:
    net = FluidNetwork(one_link)
    net.add(1, 0, 1, 50000, 1_000_000)
    net.add(2, 0, 1, 50001, 2_000_000)
    t = net.next_completion()
    assert t == pytest.approx(2e-3)  # both at 0.5e9 B/s until the small one is done
    assert net.advance(t) == [1]
    t = net.next_completion()
    assert t == pytest.approx(3e-3)  # the rest (1e6 B) alone at 1e9 B/s
    assert net.advance(t) == [2]
    assert net.next_completion() == float("inf")


def two_leaf_clos(src: int, dst: int, sport: int) -> Sequence[tuple[Hashable, float]]:
    """Hosts 0, 1 under leaf A, hosts 2, 3 under leaf B, one A->B spine path of 20 Gb/s.
    Host links 10 Gb/s, except host 1's uplink (30 Gb/s)."""
    leaf = {0: "A", 1: "A", 2: "B", 3: "B"}
    up = (("up", src), 30 * GBPS if src == 1 else 10 * GBPS)
    down = (("down", dst), 10 * GBPS)
    if leaf[src] == leaf[dst]:
        return [up, down]
    return [up, ((leaf[src], leaf[dst]), 20 * GBPS), down]


def test_two_leaf_clos_max_min_differs_from_equal_share() -> None:
    net = FluidNetwork(two_leaf_clos)
    size = 1_250_000
    net.add(1, 0, 2, 1, size)  # f1 and f2 share host 2's downlink: 5 Gb/s each
    net.add(2, 1, 2, 1, size)
    net.add(3, 1, 3, 1, size)  # f3 is left 10 Gb/s of the spine link: host 3's full rate
    t = net.next_completion()
    assert t == pytest.approx(1e-3)
    assert net.advance(t) == [3]
    t = net.next_completion()
    assert t == pytest.approx(2e-3)
    assert sorted(net.advance(t)) == [1, 2]


def rank_input(rank: int, nodes: list[NodeInfo]) -> RankInput:
    return RankInput(lambda iteration: iter(nodes), f"rank{rank}.et")


def coll(
    index: int,
    node_id: int,
    collective: str,
    size: int,
    deps: tuple[int, ...] = (),
    pg: str | None = None,
) -> NodeInfo:
    return NodeInfo(
        index,
        node_id,
        collective.lower(),
        NodeKind.COLLECTIVE,
        data_deps=deps,
        comm=CommInfo(collective, size, pg, None, None, None),
    )


def comp(
    index: int, node_id: int, delay_s: float, deps: tuple[int, ...] = (), stream: str = Stream.GPU
) -> NodeInfo:
    return NodeInfo(index, node_id, "comp", NodeKind.DELAY, delay_s, stream, data_deps=deps)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_reaches_line_rate_busbw_on_a_star(n: int) -> None:
    size = 8 << 20
    ranks = [
        rank_input(r, [comp(0, 1, 1e-4), coll(1, 2, "ALL_REDUCE", size, (1,))]) for r in range(n)
    ]
    job = JobSchedule(ranks, GroupTable(n, {}))
    result = simulate(job, star_path(100e9))
    (instance,) = result.instances
    rate = 100e9 / 8
    assert instance.time_s == pytest.approx(2 * (n - 1) / n * size / rate)
    assert busbw_bytes_per_s("ALL_REDUCE", n, size, instance.time_s) == pytest.approx(rate)
    assert result.job_time_s == pytest.approx(1e-4 + instance.time_s)
    assert result.bytes_total == 2 * (n - 1) * size


def test_compute_serialized_per_stream_but_cpu_and_gpu_overlap() -> None:
    nodes = [comp(0, 1, 1e-3), comp(1, 2, 1e-3), comp(2, 3, 1e-3, stream=Stream.CPU)]
    serial = simulate(JobSchedule([rank_input(0, nodes)], GroupTable(1, {})), one_link)
    assert serial.job_time_s == pytest.approx(2e-3)
    parallel = simulate(
        JobSchedule(
            [rank_input(0, nodes)],
            GroupTable(1, {}),
            compute=ComputeParams(serialize_compute=False),
        ),
        one_link,
    )
    assert parallel.job_time_s == pytest.approx(1e-3)


def test_collective_waits_for_its_slowest_member_and_iterations_repeat() -> None:
    size = 1 << 20
    ranks = [
        rank_input(r, [comp(0, 1, 1e-3 * (r + 1)), coll(1, 2, "ALL_GATHER", size, (1,))])
        for r in range(4)
    ]
    job = JobSchedule(ranks, GroupTable(4, {}), iterations=3)
    result = simulate(job, star_path(100e9))
    assert [i.iteration for i in result.instances] == [0, 1, 2]
    ag_s = 3 / 4 * size / 12.5e9
    for instance in result.instances:
        assert instance.time_s == pytest.approx(ag_s)
    # each iteration starts on rank 3 after its previous all-gather, compute 4 ms each time
    assert result.job_time_s == pytest.approx(3 * (4e-3 + ag_s))


def test_every_member_reaching_a_collective_is_reported_with_its_time() -> None:
    size = 1 << 20
    ranks = [
        rank_input(r, [comp(0, 1, 1e-3 * (r + 1)), coll(1, 2, "ALL_GATHER", size, (1,))])
        for r in range(4)
    ]
    issued: list[tuple[int, int, float]] = []
    job = JobSchedule(
        ranks, GroupTable(4, {}), on_member_issued=lambda i, r, t: issued.append((i, r, t))
    )
    [instance] = simulate(job, star_path(100e9)).instances
    assert sorted(issued) == [(instance.id, r, pytest.approx(1e-3 * (r + 1))) for r in range(4)]
    assert instance.start_s == pytest.approx(4e-3)  # the rendezvous is the last member's


def test_a_straggler_computes_slower_and_the_collective_waits_for_it() -> None:
    size = 1 << 20
    ranks = [
        rank_input(r, [comp(0, 1, 1e-3), coll(1, 2, "ALL_GATHER", size, (1,))]) for r in range(4)
    ]
    plain = simulate(JobSchedule(ranks, GroupTable(4, {})), star_path(100e9))
    slow = ComputeParams(stragglers={"2": 3.0})
    issued: list[tuple[int, float]] = []
    job = JobSchedule(
        ranks,
        GroupTable(4, {}),
        compute=slow,
        on_member_issued=lambda i, r, t: issued.append((r, t)),
    )
    result = simulate(job, star_path(100e9))
    assert sorted(issued) == [
        (0, pytest.approx(1e-3)),
        (1, pytest.approx(1e-3)),
        (2, pytest.approx(3e-3)),
        (3, pytest.approx(1e-3)),
    ]
    [instance] = result.instances
    assert instance.start_s == pytest.approx(3e-3)
    assert result.job_time_s == pytest.approx(plain.job_time_s + 2e-3)
    with pytest.raises(InputError, match=r"compute\.stragglers: rank 9 is not in the trace set"):
        JobSchedule(ranks, GroupTable(4, {}), compute=ComputeParams(stragglers={"9": 2.0}))


def test_default_clos_gives_line_rate_to_a_ring_and_fewer_bytes_per_s_to_collisions() -> None:
    n, size = 8, 4 << 20
    spec = default_clos_spec(n)
    assert (spec.hosts_per_leaf, spec.leaves, spec.spines) == (4, 2, 4)
    ranks = [rank_input(r, [coll(0, 1, "ALL_TO_ALL", size)]) for r in range(n)]
    result = simulate(JobSchedule(ranks, GroupTable(n, {})), clos_path(spec, n))
    (instance,) = result.instances
    busbw = busbw_bytes_per_s("ALL_TO_ALL", n, size, instance.time_s)
    assert busbw is not None
    # no better than the host link; ECMP hash collisions on leaf uplinks may cost some
    assert 0.3 * 12.5e9 < busbw <= 12.5e9 * (1 + 1e-9)


def test_flow_times_respect_dependencies() -> None:
    ranks = [rank_input(r, [coll(0, 1, "ALL_REDUCE", 4000)]) for r in range(4)]
    job = JobSchedule(
        ranks, GroupTable(4, {}), collectives=CollectivesParams(), keep_instances=True
    )
    result = simulate(job, star_path(1e9), keep_flow_times=True)
    (instance,) = job.instances
    for flow in instance.flows:
        start, end = result.flow_times[flow.id]
        assert end > start
        for dep in flow.deps:
            assert result.flow_times[dep][1] <= start + 1e-15


def _ring_job(n: int, iterations: int = 1) -> JobSchedule:
    size = 1 << 20
    ranks = [rank_input(r, [coll(0, 1, "ALL_REDUCE", size)]) for r in range(n)]
    return JobSchedule(ranks, GroupTable(n, {}), iterations=iterations)


def test_the_plan_lists_every_queue_pair_its_flows_use_once_with_their_profile() -> None:
    """What the engine opens before the clock starts: each (src, dst, qp, sport) the flows went
    on, once however many messages it carried, in first-use order."""
    result = simulate(_ring_job(4, iterations=3), star_path(100e9))
    keys = list(result.queue_pairs)
    assert len(keys) == len(set(keys))
    # a ring: every rank sends to its successor only, on the same queue pairs every iteration
    assert {(src, dst) for src, dst, _, _ in keys} == {(r, (r + 1) % 4) for r in range(4)}
    assert all(0 < sport < 65536 for *_, sport in keys)
    assert set(result.queue_pairs.values()) == {0}
    assert result.flows_total > len(keys)


def test_a_plan_with_more_queue_pairs_than_kept_lists_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past QUEUE_PAIRS_KEPT the list is dropped whole (the engine then opens each at first
    use): half a list would look complete."""
    import emulator.schedule.ideal as ideal

    full = simulate(_ring_job(4), star_path(100e9)).queue_pairs
    monkeypatch.setattr(ideal, "QUEUE_PAIRS_KEPT", len(full) - 1)
    assert simulate(_ring_job(4), star_path(100e9)).queue_pairs == {}
    monkeypatch.setattr(ideal, "QUEUE_PAIRS_KEPT", len(full))
    assert simulate(_ring_job(4), star_path(100e9)).queue_pairs == full
