"""Engine plan input: checks that name the flow, the schedule adapter, sharding, QP numbering."""

from __future__ import annotations

import pytest

from emulator.engine.coordinator import assign_connections
from emulator.engine.launch import shard_ranks
from emulator.engine.plan import EngineFlow, RankEndpoint, check_plan, from_schedule_flow
from emulator.errors import PlanError
from emulator.schedule.plan import Flow

RANKS = [RankEndpoint(r, f"10.0.0.{r + 1}") for r in range(4)]


def test_schedule_flow_adapts_with_its_deps_and_a_start_delay() -> None:
    f = Flow(
        id=9,
        instance=1,
        iteration=0,
        step=2,
        src=1,
        dst=2,
        qp=3,
        udp_sport=50001,
        bytes=4096,
        deps=(4, 5),
    )
    e = from_schedule_flow(f, start_delay_s=0.25)
    assert e == EngineFlow(9, 1, 2, 3, 50001, 4096, (4, 5), 0.25)
    assert e.connection_key == (1, 2, 3, 50001)


@pytest.mark.parametrize(
    ("flows", "message"),
    [
        ([EngineFlow(1, 0, 9, 0, 50000, 10)], "flow 1: dst rank 9 has no endpoint"),
        ([EngineFlow(1, 0, 1, 0, 50000, 0)], "flow 1: bytes must be positive"),
        ([EngineFlow(1, 0, 1, 0, 70000, 10)], "flow 1: udp_sport 70000"),
        ([EngineFlow(1, 0, 1, 0, 50000, 10, (2,))], "flow 1: depends on flow 2"),
        (
            [EngineFlow(1, 0, 1, 0, 5, 10), EngineFlow(1, 1, 2, 0, 5, 10)],
            "flow 1: id appears twice",
        ),
        (
            [EngineFlow(1, 0, 1, 0, 5, 10, (2,)), EngineFlow(2, 1, 0, 0, 5, 10, (1,))],
            "flows [1, 2]: dependency cycle",
        ),
        ([EngineFlow(1, 0, 1, 0, 5, 10, start_delay_s=-1)], "flow 1: start_delay_s"),
    ],
)
def test_bad_plans_raise_plan_error_naming_the_flow(flows: list[EngineFlow], message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_plan(flows, RANKS)


def test_a_good_plan_passes() -> None:
    flows = [EngineFlow(1, 0, 1, 0, 5, 10), EngineFlow(2, 1, 2, 0, 6, 10, (1,))]
    check_plan(flows, RANKS)


def test_ranks_are_sharded_round_robin_over_at_most_one_worker_each() -> None:
    shards = shard_ranks(RANKS, 3)
    assert [[r.rank for r in s] for s in shards] == [[0, 3], [1], [2]]
    assert len(shard_ranks(RANKS[:1], 8)) == 1
    assert sum(len(s) for s in shard_ranks(RANKS, 0)) == 4


def test_connections_number_queue_pairs_by_src_dst_qp_and_sport() -> None:
    flows = [
        EngineFlow(1, 0, 1, 0, 50000, 10),
        EngineFlow(2, 0, 1, 0, 50000, 10),  # same QP: a second message
        EngineFlow(3, 0, 1, 1, 50001, 10),
        EngineFlow(4, 1, 0, 0, 50000, 10),
    ]
    conns = assign_connections(flows)
    assert conns == {(0, 1, 0, 50000): 0, (0, 1, 1, 50001): 1, (1, 0, 0, 50000): 2}


def test_ranks_sharing_a_nic_stay_in_one_shard() -> None:
    """Endpoints behind one port share its transmit arbiter, so one worker has them all."""
    ranks = [RankEndpoint(r, f"10.0.0.{r + 1}", nic=r // 4) for r in range(8)] + [
        RankEndpoint(8, "10.0.0.9")
    ]
    shards = shard_ranks(ranks, 2)
    assert [[r.rank for r in s] for s in shards] == [[0, 1, 2, 3, 8], [4, 5, 6, 7]]
    assert len(shard_ranks(ranks[:4], 8)) == 1


def test_one_queue_pair_cannot_send_two_ways() -> None:
    """Flows of two QP profiles on one (src, dst, qp, sport) would share a QP and one of them
    would silently send the other's way: refused, naming the QP."""
    from emulator.engine.coordinator import Coordinator
    from emulator.errors import PlanError
    from emulator.transport.qp_profile import QpProfile

    flows = [EngineFlow(1, 0, 1, 0, 50000, 10), EngineFlow(2, 0, 1, 0, 50000, 10, profile=1)]
    with pytest.raises(PlanError, match=r"flow 2: rank 0 -> 1 QP 0 on UDP port 50000 is already"):
        Coordinator(RANKS, flows, profiles=(QpProfile(), QpProfile(dscp=10)))
    Coordinator(
        RANKS,
        [flows[0], EngineFlow(2, 0, 1, 0, 50001, 10, profile=1)],
        profiles=(QpProfile(), QpProfile(dscp=10)),
    )
