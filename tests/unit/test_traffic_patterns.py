"""Synthetic traffic patterns: the scenario section (checks, flow pairs, YAML errors), the sans-I/O
schedule driven by a hand-written event loop (message cutting, windows, durations, staggered
starts, QP profiles, source ports, instances and results), and the ideal-time plan (fair shares,
rate caps, traffic next to a generated trace, fabric and MTU checks)."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import ScenarioError
from emulator.planning.workload import plan_workload, trace_prefix
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario, WorkloadSpec
from emulator.schedule.fabric import path_for_fabric
from emulator.schedule.ideal import simulate
from emulator.schedule.job import InstanceResult, StartDelay
from emulator.schedule.plan import CollectiveInstance, Flow
from emulator.traffic.schedule import (
    MAX_QPS_PER_PAIR,
    TRAFFIC_ID_BASE,
    CombinedDriver,
    TrafficSchedule,
    pattern_profiles,
)
from emulator.traffic.spec import TrafficPattern
from emulator.transport.params import TransportParams
from emulator.transport.qp_profile import DEFAULT_PROFILE, QpProfile
from emulator.workloads.params import AllreduceParams
from fabrics.spec import ClosSpec

LINE = 100e9  # bit/s
US = 1e-6
MAX_STEPS = 10_000  # every event loop below stops here at the latest


def pattern(**kw: Any) -> TrafficPattern:
    """A valid pattern: one pair 0 -> 1 sending 1000 bytes, unless overridden."""
    base: dict[str, Any] = {"name": "p", "kind": "pairs"}
    if kw.get("kind", "pairs") == "pairs" and "pairs" not in kw:
        base["pairs"] = ((0, 1),)
    if "duration_us" not in kw:
        base["bytes_per_pair"] = 1000
    base.update(kw)
    return TrafficPattern(**base)


# -- the spec --------------------------------------------------------------------------------------


def test_flow_pairs_of_each_kind() -> None:
    pairs = pattern(pairs=((3, 1), (0, 2), (1, 3)))
    assert pairs.flow_pairs() == [(3, 1), (0, 2), (1, 3)]
    assert pairs.max_rank == 3
    incast = pattern(kind="incast", senders=(4, 1, 2), receiver=0)
    assert incast.flow_pairs() == [(4, 0), (1, 0), (2, 0)]
    assert incast.max_rank == 4
    a2a = pattern(kind="all_to_all", ranks=(2, 0, 5))
    assert a2a.flow_pairs() == [(2, 0), (2, 5), (0, 2), (0, 5), (5, 2), (5, 0)]
    assert a2a.max_rank == 5
    receiver_high = pattern(kind="incast", senders=(0, 1), receiver=7)
    assert receiver_high.max_rank == 7


def test_dscp_of_repeats_the_last_and_defaults_to_none() -> None:
    assert pattern().dscp_of(0) is None
    p = pattern(qp_dscp=(10, 26), qps=4)
    assert [p.dscp_of(q) for q in range(4)] == [10, 26, 26, 26]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"bytes_per_pair": 10, "duration_us": 5.0},
            "bytes_per_pair: give exactly one of bytes_per_pair and duration_us",
        ),
        (
            {"bytes_per_pair": None},
            "bytes_per_pair: give exactly one of bytes_per_pair and duration_us",
        ),
        (
            {"rate_mode": "constant", "congestion_control": "dcqcn"},
            "congestion_control: a constant-rate pattern ignores CNPs; use rate_mode stateful",
        ),
        ({"path_mtu_bytes": 1500}, "path_mtu_bytes: must be one of 256, 512, 1024, 2048, 4096"),
        ({"path_mtu_bytes": 8192}, "path_mtu_bytes: must be one of 256, 512, 1024, 2048, 4096"),
        ({"senders": (2,)}, "senders: not a key of a pairs pattern (it takes pairs)"),
        ({"receiver": 0}, "receiver: not a key of a pairs pattern (it takes pairs)"),
        ({"ranks": (0, 1)}, "ranks: not a key of a pairs pattern (it takes pairs)"),
        (
            {"kind": "incast", "pairs": ((0, 1),), "senders": (1,), "receiver": 0},
            "pairs: not a key of a incast pattern (it takes senders and receiver)",
        ),
        (
            {"kind": "all_to_all", "ranks": (0, 1), "senders": (2,)},
            "senders: not a key of a all_to_all pattern (it takes ranks)",
        ),
        (
            {"pairs": ((0, 1), (2, 2))},
            "pairs: pair 1 is [2, 2], expected [src, dst] of two different ranks",
        ),
        ({"pairs": ((0, 1, 2),)}, "pairs: pair 0 is [0, 1, 2], expected [src, dst] of two"),
        ({"pairs": ()}, "pairs: a pairs pattern needs at least one [src, dst]"),
        (
            {"kind": "incast", "senders": (1, 0, 2), "receiver": 0},
            "senders: the receiver 0 cannot send to itself",
        ),
        (
            {"kind": "incast", "senders": (1, 2)},
            "senders: an incast pattern needs senders and a receiver",
        ),
        (
            {"kind": "incast", "receiver": 0},
            "senders: an incast pattern needs senders and a receiver",
        ),
        (
            {"pairs": ((0, 1), (2, 3), (0, 1))},
            "pairs: a (src, dst) pair appears twice in the pattern",
        ),
        (
            {"kind": "incast", "senders": (1, 2, 1), "receiver": 0},
            "pairs: a (src, dst) pair appears twice in the pattern",
        ),
        (
            {"kind": "all_to_all", "ranks": (3,)},
            "ranks: an all_to_all pattern needs at least two different ranks",
        ),
        (
            {"kind": "all_to_all", "ranks": (3, 3)},
            "ranks: an all_to_all pattern needs at least two different ranks",
        ),
        ({"kind": "all_to_all"}, "ranks: an all_to_all pattern needs at least two"),
        ({"qps": 2, "qp_udp_sport": (50_000,)}, "qp_udp_sport: gives 1 ports for 2 QPs per pair"),
    ],
)
def test_bad_patterns_are_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        pattern(**kw)
    assert str(info.value).startswith(message)


def test_constant_rate_with_congestion_control_none_is_accepted() -> None:
    p = pattern(rate_mode="constant", congestion_control="none")
    assert p.congestion_control == "none"
    assert pattern(rate_mode="constant").congestion_control is None
    assert pattern(duration_us=5.0).bytes_per_pair is None


# -- the scenario file -----------------------------------------------------------------------------

INCAST_YAML = """\
name: incast_only
traffic:
  - name: incast
    kind: incast
    senders: [1, 2, 3]
    receiver: 0
    qps: 2
    qp_dscp: [26, 10]
    bytes_per_pair: 4096
    rate_percent: 50
    rate_mode: constant
  - name: background
    kind: all_to_all
    ranks: [0, 1]
    duration_us: 20
    stagger_us: 5
"""


def scenario_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:")
    return message[len(str(path)) :]


def test_traffic_only_scenario_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(INCAST_YAML)
    scenario = load_scenario(path)
    assert scenario.workload is None
    assert scenario.source == path
    assert scenario.traffic == (
        TrafficPattern(
            name="incast",
            kind="incast",
            senders=(1, 2, 3),
            receiver=0,
            qps=2,
            qp_dscp=(26, 10),
            bytes_per_pair=4096,
            rate_percent=50.0,
            rate_mode="constant",
        ),
        TrafficPattern(
            name="background", kind="all_to_all", ranks=(0, 1), duration_us=20.0, stagger_us=5.0
        ),
    )
    with trace_prefix(scenario) as prefix:
        assert prefix is None


BAD_PATTERN = "traffic:\n  - name: a\n    kind: pairs\n    pairs: [[0, 1]]\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "    bytes_per_pair: 10\n    duration_us: 5\n",
            ":5: traffic[0].bytes_per_pair: give exactly one of bytes_per_pair and duration_us",
        ),
        ("", ":2: traffic[0].bytes_per_pair: give exactly one of bytes_per_pair and duration_us"),
        (
            "    bytes_per_pair: 10\n    rate_mode: constant\n    congestion_control: dcqcn\n",
            ":7: traffic[0].congestion_control: a constant-rate pattern ignores CNPs",
        ),
        (
            "    bytes_per_pair: 10\n    path_mtu_bytes: 1500\n",
            ":6: traffic[0].path_mtu_bytes: must be one of 256, 512, 1024, 2048, 4096",
        ),
        (
            "    bytes_per_pair: 10\n    ranks: [0, 1]\n",
            ":6: traffic[0].ranks: not a key of a pairs pattern (it takes pairs)",
        ),
        ("    bytes_per_pair: 10\n    qps: 0\n", ":6: traffic[0].qps: 0 must be at least 1"),
        (
            "    bytes_per_pair: 10\n    rate_percent: 0\n",
            ":6: traffic[0].rate_percent: 0 % must be greater than 0",
        ),
        (
            "    bytes_per_pair: 10\n    qp_dscp: [1, 64]\n",
            ":6: traffic[0].qp_dscp[1]: 64 must be at most 63",
        ),
        (
            "    bytes_per_pair: 10\n    rate_mode: paced\n",
            ":6: traffic[0].rate_mode: expected one of 'constant', 'stateful', got 'paced'",
        ),
        ("    bytes_per_pair: 10\n    bogus: 1\n", ":6: traffic[0].bogus: unknown key"),
    ],
)
def test_bad_pattern_in_a_file_names_key_and_line(
    tmp_path: Path, extra: str, expected: str
) -> None:
    assert scenario_error(tmp_path, BAD_PATTERN + extra).startswith(expected)


def test_bad_second_pattern_is_named_by_its_index(tmp_path: Path) -> None:
    text = (
        BAD_PATTERN
        + "    bytes_per_pair: 10\n  - name: b\n    kind: all_to_all\n    ranks: [1]\n"
        + "    bytes_per_pair: 10\n"
    )
    assert scenario_error(tmp_path, text) == (
        ":8: traffic[1].ranks: an all_to_all pattern needs at least two different ranks"
    )


def test_misplaced_receiver_is_named_receiver(tmp_path: Path) -> None:
    message = scenario_error(tmp_path, BAD_PATTERN + "    bytes_per_pair: 10\n    receiver: 3\n")
    assert message.startswith(":6: traffic[0].receiver: not a key of a pairs pattern")


def test_pair_of_equal_ranks_in_a_file_names_the_pairs_line(tmp_path: Path) -> None:
    text = "traffic:\n  - name: a\n    kind: pairs\n    pairs: [[0, 0]]\n    bytes_per_pair: 1\n"
    message = scenario_error(tmp_path, text)
    assert message.startswith(":4: traffic[0].pairs")


def test_pair_of_equal_ranks_in_a_file_is_one_line_naming_the_pattern(tmp_path: Path) -> None:
    text = "traffic:\n  - name: a\n    kind: pairs\n    pairs: [[0, 0]]\n    bytes_per_pair: 1\n"
    message = scenario_error(tmp_path, text)
    assert "traffic[0]" in message and "pair 0 is [0, 0], expected [src, dst]" in message


def test_two_patterns_with_one_name_are_refused(tmp_path: Path) -> None:
    one = "  - name: same\n    kind: pairs\n    pairs: [[0, 1]]\n    bytes_per_pair: 10\n"
    assert scenario_error(tmp_path, "traffic:\n" + one + one) == (
        ":1: traffic: two patterns are named 'same'"
    )


def test_neither_workload_nor_traffic_is_refused(tmp_path: Path) -> None:
    for text in ("name: nothing\n", "name: nothing\ntraffic: []\n"):
        assert scenario_error(tmp_path, text) == (
            ":1: workload: give a workload (a trace), traffic patterns or streams, or several"
        )
    with pytest.raises(ValueError, match="workload: give a workload"):
        Scenario()


# -- the schedule, driven by hand ------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """What a drive saw: each flow with its posting and completion times, and the delays."""

    posted: list[tuple[float, Flow]] = dataclasses.field(default_factory=list)
    completed: dict[int, float] = dataclasses.field(default_factory=dict)
    delays: list[tuple[float, StartDelay]] = dataclasses.field(default_factory=list)
    max_in_flight: dict[tuple[int, int, int], int] = dataclasses.field(default_factory=dict)
    end: float = 0.0

    def flows(self, src: int | None = None, qp: int | None = None) -> list[Flow]:
        return [
            f
            for _, f in self.posted
            if (src is None or f.src == src) and (qp is None or f.qp == qp)
        ]


def drive(
    schedule: TrafficSchedule | CombinedDriver,
    duration: Callable[[Flow, float], float],
    check: Callable[[float], None] | None = None,
) -> Run:
    """Poll at 0; a delay ends after its delay_s, a flow `duration(flow, posted)` after its
    posting; events in time order (ties: in posting order). `check(now)` runs before each
    event is delivered."""
    run = Run()
    events: list[tuple[float, int, str, int]] = []
    seq = 0
    in_flight: dict[tuple[int, int, int], int] = {}
    flow_of: dict[int, Flow] = {}
    now = 0.0

    def take(actions: list[Any]) -> None:
        nonlocal seq
        for action in actions:
            seq += 1
            if isinstance(action, StartDelay):
                run.delays.append((now, action))
                heapq.heappush(events, (now + action.delay_s, seq, "delay", action.token))
            else:
                run.posted.append((now, action))
                flow_of[action.id] = action
                key = (action.src, action.dst, action.qp)
                in_flight[key] = in_flight.get(key, 0) + 1
                run.max_in_flight[key] = max(run.max_in_flight.get(key, 0), in_flight[key])
                heapq.heappush(events, (now + duration(action, now), seq, "flow", action.id))

    take(list(schedule.poll(now)))
    for _ in range(MAX_STEPS):
        if not events:
            break
        now, _, kind, ident = heapq.heappop(events)
        if check is not None:
            check(now)
        if kind == "delay":
            schedule.delay_done(ident, now)
        else:
            flow = flow_of[ident]
            in_flight[(flow.src, flow.dst, flow.qp)] -= 1
            run.completed[ident] = now
            schedule.flow_done(ident, now)
        take(list(schedule.poll(now)))
    else:
        raise AssertionError(f"no end after {MAX_STEPS} events")
    run.end = now
    return run


def fixed(seconds: float) -> Callable[[Flow, float], float]:
    return lambda flow, posted: seconds


def test_bytes_are_split_over_qps_and_cut_into_messages() -> None:
    # 25 bytes over 3 QPs: 9, 8, 8 (the remainder to QP 0); messages of at most 4 bytes.
    p = pattern(qps=3, bytes_per_pair=25, message_bytes=4, pairs=((0, 1), (2, 3)))
    schedule = TrafficSchedule([p], line_rate_bps=LINE)
    run = drive(schedule, fixed(1 * US))
    for src in (0, 2):
        assert [f.bytes for f in run.flows(src, 0)] == [4, 4, 1]
        assert [f.bytes for f in run.flows(src, 1)] == [4, 4]
        assert [f.bytes for f in run.flows(src, 2)] == [4, 4]
        assert sum(f.bytes for f in run.flows(src)) == 25
        assert [f.iteration for f in run.flows(src, 0)] == [0, 1, 2]
    assert sum(f.bytes for _, f in run.posted) == 50
    assert schedule.finished
    assert len(schedule.results) == 14
    assert schedule.nodes_completed == 14
    # one message at a time per QP, 1 us each: QP 0 is the last, done at 3 us
    assert run.end == pytest.approx(3 * US)


def test_fewer_bytes_than_qps_leaves_the_last_qps_idle() -> None:
    schedule = TrafficSchedule([pattern(qps=4, bytes_per_pair=2)], line_rate_bps=LINE)
    run = drive(schedule, fixed(1 * US))
    assert [(f.qp, f.bytes) for _, f in run.posted] == [(0, 1), (1, 1)]
    assert schedule.finished


def test_message_bytes_dividing_the_share_leaves_no_empty_message() -> None:
    schedule = TrafficSchedule(
        [pattern(qps=2, bytes_per_pair=16, message_bytes=4)], line_rate_bps=LINE
    )
    run = drive(schedule, fixed(1 * US))
    assert [(f.qp, f.bytes) for _, f in run.posted] == [(0, 4), (1, 4), (0, 4), (1, 4)]


@pytest.mark.parametrize("window", [1, 3])
def test_messages_in_flight_bounds_each_qp(window: int) -> None:
    p = pattern(qps=2, bytes_per_pair=100, message_bytes=10, messages_in_flight=window)
    schedule = TrafficSchedule([p], line_rate_bps=LINE)
    first = schedule.poll(0.0)
    assert [(a.qp, a.bytes) for a in first if isinstance(a, Flow)] == [(0, 10)] * window + [
        (1, 10)
    ] * window
    # replay from a fresh schedule with uneven completion times
    schedule = TrafficSchedule([p], line_rate_bps=LINE)
    run = drive(schedule, lambda flow, posted: (1 + flow.id % 3) * US)
    assert run.max_in_flight == {(0, 1, 0): window, (0, 1, 1): window}
    assert len(run.posted) == 10
    assert schedule.finished


def test_window_is_refilled_only_by_completions() -> None:
    schedule = TrafficSchedule(
        [pattern(bytes_per_pair=50, message_bytes=10, messages_in_flight=2)], line_rate_bps=LINE
    )
    first = [a for a in schedule.poll(0.0) if isinstance(a, Flow)]
    assert len(first) == 2
    assert schedule.poll(1 * US) == []  # nothing completed: nothing new
    schedule.flow_done(first[1].id, 2 * US)
    again = [a for a in schedule.poll(2 * US) if isinstance(a, Flow)]
    assert [f.iteration for f in again] == [2]
    assert not schedule.finished


def test_duration_mode_posts_nothing_at_or_after_the_end() -> None:
    # duration 10 us, each message 3 us: posted at 0, 3, 6, 9 us; at 12 us the pair is done
    schedule = TrafficSchedule([pattern(duration_us=10.0, message_bytes=64)], line_rate_bps=LINE)
    run = drive(schedule, fixed(3 * US))
    assert [t for t, _ in run.posted] == pytest.approx([0.0, 3 * US, 6 * US, 9 * US])
    assert all(f.bytes == 64 for _, f in run.posted)
    assert run.end == pytest.approx(12 * US)
    assert schedule.finished


def test_duration_mode_completion_exactly_at_the_end_posts_no_more() -> None:
    schedule = TrafficSchedule([pattern(duration_us=10.0)], line_rate_bps=LINE)
    end_s = 0.0 + 10.0 * US  # as the schedule computes it
    (first,) = schedule.poll(0.0)
    assert isinstance(first, Flow)
    schedule.flow_done(first.id, end_s - 1e-12)  # just before the end: one more
    (second,) = schedule.poll(end_s - 1e-12)
    assert isinstance(second, Flow) and second.iteration == 1
    schedule.flow_done(second.id, end_s)  # at the end: none
    assert schedule.poll(end_s) == []
    assert schedule.finished


def test_duration_mode_counts_from_a_delayed_start() -> None:
    p = pattern(duration_us=10.0, start_us=20.0, pairs=((0, 1), (1, 0)), stagger_us=4.0)
    schedule = TrafficSchedule([p], line_rate_bps=LINE)
    run = drive(schedule, fixed(3 * US))
    assert [t for t, f in run.posted if f.src == 0] == pytest.approx(
        [20 * US, 23 * US, 26 * US, 29 * US]
    )
    assert [t for t, f in run.posted if f.src == 1] == pytest.approx(
        [24 * US, 27 * US, 30 * US, 33 * US]
    )


def test_staggered_starts_are_start_delays() -> None:
    first = pattern(name="a", pairs=((0, 1), (2, 3), (4, 5)), start_us=10.0, stagger_us=5.0, qps=2)
    second = pattern(name="b", pairs=((6, 7),), start_us=15.0)  # starts with a's second pair
    schedule = TrafficSchedule([first, second], line_rate_bps=LINE)
    actions = schedule.poll(0.0)
    assert all(isinstance(a, StartDelay) for a in actions)
    delays = [a for a in actions if isinstance(a, StartDelay)]
    assert [d.delay_s for d in delays] == pytest.approx([10 * US, 15 * US, 20 * US])
    assert [(d.rank, d.iteration, d.node_id) for d in delays] == [(-1, 0, -1)] * 3
    tokens = [d.token for d in delays]
    assert len(set(tokens)) == 3 and min(tokens) >= TRAFFIC_ID_BASE
    assert schedule.poll(1 * US) == []  # nothing before its delay
    assert not schedule.finished

    schedule.delay_done(tokens[0], 10 * US)
    posted = schedule.poll(10 * US)
    assert [(f.src, f.qp) for f in posted if isinstance(f, Flow)] == [(0, 0), (0, 1)]
    assert len(posted) == 2

    schedule.delay_done(tokens[1], 15 * US)  # the shared token starts (2, 3) and (6, 7)
    posted = schedule.poll(15 * US)
    assert sorted((f.src, f.qp) for f in posted if isinstance(f, Flow)) == [
        (2, 0),
        (2, 1),
        (6, 0),
    ]
    assert len(posted) == 3


def test_start_at_zero_with_stagger_has_no_delay_for_the_first_pair() -> None:
    p = pattern(pairs=((0, 1), (1, 2), (2, 3)), stagger_us=2.5)
    schedule = TrafficSchedule([p], line_rate_bps=LINE)
    actions = schedule.poll(0.0)
    flows = [a for a in actions if isinstance(a, Flow)]
    delays = [a for a in actions if isinstance(a, StartDelay)]
    assert [(f.src, f.dst) for f in flows] == [(0, 1)]
    assert [d.delay_s for d in delays] == pytest.approx([2.5 * US, 5.0 * US])
    run = drive(TrafficSchedule([p], line_rate_bps=LINE), fixed(1 * US))
    assert [(t, f.src) for t, f in run.posted] == [
        (0.0, 0),
        (pytest.approx(2.5 * US), 1),
        (pytest.approx(5.0 * US), 2),
    ]


def test_nothing_of_a_pair_is_posted_before_its_delay_is_done() -> None:
    p = pattern(pairs=((0, 1), (2, 3)), start_us=5.0, stagger_us=5.0, bytes_per_pair=30)
    schedule = TrafficSchedule([p], line_rate_bps=LINE)
    d0, d1 = schedule.poll(0.0)
    assert isinstance(d0, StartDelay) and isinstance(d1, StartDelay)
    # the later pair's delay delivered first: only its messages
    schedule.delay_done(d1.token, 10 * US)
    assert [(f.src, f.dst) for f in schedule.poll(10 * US) if isinstance(f, Flow)] == [(2, 3)]
    assert schedule.poll(11 * US) == []
    schedule.delay_done(d0.token, 12 * US)
    assert [(f.src, f.dst) for f in schedule.poll(12 * US) if isinstance(f, Flow)] == [(0, 1)]
    with pytest.raises(KeyError):
        schedule.delay_done(d0.token, 13 * US)  # a token is delivered once
    run = drive(TrafficSchedule([p], line_rate_bps=LINE), fixed(1 * US))
    starts = {f.src: t for t, f in reversed(run.posted)}
    assert starts == {0: pytest.approx(5 * US), 2: pytest.approx(10 * US)}


def test_qp_profiles() -> None:
    p = pattern(qps=4, qp_dscp=(10, 20), rate_percent=50.0, path_mtu_bytes=1024)
    assert pattern_profiles(p, LINE) == [
        QpProfile(10, 12.5e9, None, 1024),
        QpProfile(20, 12.5e9, None, 1024),
        QpProfile(20, 12.5e9, None, 1024),
        QpProfile(20, 12.5e9, None, 1024),
    ]
    full = pattern(qps=2, congestion_control="dcqcn")
    assert pattern_profiles(full, LINE) == [QpProfile(None, None, "dcqcn", None)] * 2
    constant = pattern(qps=1, rate_mode="constant", rate_percent=25.0)
    assert pattern_profiles(constant, 400e9) == [QpProfile(None, 100e9, "none", None)]
    constant_full = pattern(rate_mode="constant")
    assert pattern_profiles(constant_full, LINE) == [QpProfile(None, None, "none", None)]
    odd = pattern(qps=3, rate_percent=10.0)
    cap = pattern_profiles(odd, LINE)[0].max_rate_bps
    assert cap is not None and cap == pytest.approx(10e9 / 3, rel=1e-12)


def test_schedule_profiles_are_numbered_from_the_base_and_named_by_flows() -> None:
    a = pattern(name="a", qps=2, qp_dscp=(8,), rate_percent=40.0)
    b = pattern(name="b", qps=3, pairs=((2, 3),), rate_mode="constant")
    schedule = TrafficSchedule([a, b], line_rate_bps=LINE, profile_base=5)
    assert schedule.profiles == [*pattern_profiles(a, LINE), *pattern_profiles(b, LINE)]
    assert [schedule.max_rate_bps(i) for i in range(4, 11)] == [
        None,
        20e9,
        20e9,
        None,
        None,
        None,
        None,
    ]
    run = drive(schedule, fixed(1 * US))
    assert sorted({(f.src, f.qp, f.profile) for _, f in run.posted}) == [
        (0, 0, 5),
        (0, 1, 6),
        (2, 0, 7),
        (2, 1, 8),
        (2, 2, 9),
    ]


def test_each_qp_has_its_own_source_port_in_the_range() -> None:
    p = pattern(qps=16, pairs=((0, 1), (1, 0)), bytes_per_pair=64, message_bytes=2)
    schedule = TrafficSchedule([p], line_rate_bps=LINE, sport_range=(50_000, 50_999))
    run = drive(schedule, fixed(1 * US))
    by_qp: dict[tuple[int, int], set[int]] = {}
    for _, f in run.posted:
        by_qp.setdefault((f.src, f.qp), set()).add(f.udp_sport)
    assert len(by_qp) == 32
    assert all(len(ports) == 1 for ports in by_qp.values())  # one port for all of a QP's messages
    for src in (0, 1):
        ports = [next(iter(by_qp[(src, q)])) for q in range(16)]
        assert len(set(ports)) == 16
        assert all(50_000 <= port <= 50_999 for port in ports)
    # the ports do not depend on what else is scheduled
    alone = drive(TrafficSchedule([p], line_rate_bps=LINE, sport_range=(50_000, 50_999)), fixed(1))
    assert {(f.src, f.qp, f.udp_sport) for _, f in alone.posted} == {
        (f.src, f.qp, f.udp_sport) for _, f in run.posted
    }
    narrow = drive(TrafficSchedule([p], line_rate_bps=LINE, sport_range=(61_000, 61_000)), fixed(1))
    assert {f.udp_sport for _, f in narrow.posted} == {61_000}


def test_fixed_source_ports_and_verb_are_each_qps() -> None:
    """A tester's fixed ports (OTG's udp_source_port) replace the hashed ones, QP by QP, for every
    pair; the verb reaches the QP profiles (the transport's opcodes: SEND or RDMA WRITE)."""
    p = pattern(
        qps=2, pairs=((0, 1), (2, 1)), qp_udp_sport=(49_152, 49_152), verb="write", message_bytes=10
    )
    run = drive(TrafficSchedule([p], line_rate_bps=LINE), fixed(1 * US))
    assert {(f.src, f.qp, f.udp_sport) for _, f in run.posted} == {
        (0, 0, 49_152),
        (0, 1, 49_152),
        (2, 0, 49_152),
        (2, 1, 49_152),
    }
    assert [prof.verb for prof in pattern_profiles(p, LINE)] == ["write", "write"]
    assert pattern_profiles(pattern(), LINE)[0].verb == "send"


def test_instances_and_results() -> None:
    a = pattern(name="bulk", qps=2, bytes_per_pair=30, message_bytes=10, pairs=((0, 3),))
    b = pattern(name="inc", kind="incast", senders=(1, 2), receiver=0, bytes_per_pair=5)
    issued: list[tuple[int, int, float]] = []
    seen: list[CollectiveInstance] = []
    schedule = TrafficSchedule(
        [a, b],
        line_rate_bps=LINE,
        keep_instances=True,
        on_instance=seen.append,
        on_member_issued=lambda inst, rank, now: issued.append((inst, rank, now)),
        id_base=1000,
    )

    def check(now: float) -> None:
        del now
        assert not schedule.finished

    run = drive(schedule, lambda flow, posted: (2 if flow.src == 0 else 3) * US, check)
    assert schedule.finished
    assert seen == schedule.instances
    assert len(seen) == len(run.posted) == 4 + 2
    by_id = {inst.id: inst for inst in seen}
    for posted_at, flow in run.posted:
        inst = by_id[flow.instance]
        assert inst.flows == (flow,)
        assert inst.collective == "SEND_RECV"
        assert inst.members == (flow.src, flow.dst)
        assert inst.size_bytes == flow.bytes
        assert inst.iteration == flow.iteration
        node = -1 - ((0 if inst.group == "bulk" else MAX_QPS_PER_PAIR) + flow.qp)
        assert inst.nodes == ((flow.src, node), (flow.dst, node))
        assert flow.id >= 1000 and inst.id >= 1000
        assert issued.count((inst.id, flow.src, posted_at)) == 1
        assert issued.count((inst.id, flow.dst, posted_at)) == 1
    assert {i.group for i in seen} == {"bulk", "inc"}
    assert {i.algorithm for i in seen} == {"pairs/stateful", "incast/stateful"}
    assert len(issued) == 2 * len(seen)
    ids = [f.id for _, f in run.posted] + [i.id for i in seen]
    assert len(set(ids)) == len(ids)

    results = {r.id: r for r in schedule.results}
    assert len(results) == len(seen)
    for posted_at, flow in run.posted:
        r = results[flow.instance]
        assert r == InstanceResult(
            id=flow.instance,
            iteration=flow.iteration,
            collective="SEND_RECV",
            group=by_id[flow.instance].group,
            group_size=2,
            size_bytes=flow.bytes,
            algorithm=by_id[flow.instance].algorithm,
            flows=1,
            wire_bytes=flow.bytes,
            first_issue_s=posted_at,
            all_issued_s=posted_at,
            start_s=posted_at,
            end_s=run.completed[flow.id],
        )
    bulk = sorted((r.start_s, r.end_s) for r in schedule.results if r.group == "bulk")
    assert [t for pair in bulk for t in pair] == pytest.approx(
        [0.0, 2 * US, 0.0, 2 * US, 2 * US, 4 * US, 2 * US, 4 * US]
    )
    # bulk: 15 bytes per QP in messages of 10 and 5
    assert sorted(r.size_bytes for r in schedule.results if r.group == "bulk") == [5, 5, 10, 10]


def test_on_instance_precedes_the_flow() -> None:
    events: list[tuple[str, int]] = []
    schedule = TrafficSchedule(
        [pattern(bytes_per_pair=30, message_bytes=10, qps=2)],
        line_rate_bps=LINE,
        on_instance=lambda inst: events.append(("instance", inst.id)),
        on_member_issued=lambda inst, rank, now: events.append(("issued", inst)),
    )
    for _ in range(MAX_STEPS):
        flows = [a for a in schedule.poll(0.0) if isinstance(a, Flow)]
        if not flows:
            break
        for flow in flows:
            events.append(("flow", flow.instance))
        for flow in flows:
            schedule.flow_done(flow.id, 0.0)
    assert schedule.finished
    for i, (what, inst) in enumerate(events):
        if what == "flow":
            announced = events[:i]
            assert ("instance", inst) in announced and ("issued", inst) in announced
            assert announced.index(("instance", inst)) < announced.index(("issued", inst))
    assert sum(1 for what, _ in events if what == "flow") == 4


def test_finished_only_at_the_end() -> None:
    schedule = TrafficSchedule(
        [pattern(start_us=5.0, bytes_per_pair=20, message_bytes=10)], line_rate_bps=LINE
    )
    assert not schedule.finished  # a start delay pending
    (delay,) = schedule.poll(0.0)
    assert isinstance(delay, StartDelay) and not schedule.finished
    schedule.delay_done(delay.token, 5 * US)
    assert not schedule.finished
    (f1,) = schedule.poll(5 * US)
    assert isinstance(f1, Flow)
    schedule.flow_done(f1.id, 6 * US)
    assert not schedule.finished
    (f2,) = schedule.poll(6 * US)
    assert isinstance(f2, Flow)
    schedule.flow_done(f2.id, 7 * US)
    assert schedule.finished and schedule.poll(7 * US) == []
    assert [r.end_s for r in schedule.results] == [6 * US, 7 * US]
    assert not schedule.unstall()


def test_empty_schedule_is_finished() -> None:
    schedule = TrafficSchedule([], line_rate_bps=LINE)
    assert schedule.finished and schedule.poll(0.0) == [] and schedule.profiles == []


# -- the ideal model -------------------------------------------------------------------------------

FABRIC = ClosSpec(
    hosts_per_leaf=2, leaves=2, spines=2, host_link_gbps=100.0, fabric_link_gbps=100.0
)


def traffic_scenario(*patterns: TrafficPattern, **kw: Any) -> Scenario:
    return Scenario(traffic=patterns, fabric=FABRIC, **kw)


def test_incast_senders_share_the_receivers_link() -> None:
    size = 3 << 20
    p = pattern(
        name="incast",
        kind="incast",
        senders=(1, 2, 3),
        receiver=0,
        bytes_per_pair=size,
        message_bytes=size,
    )
    scenario = traffic_scenario(p)
    with trace_prefix(scenario) as prefix:
        assert prefix is None
        planned = plan_workload(scenario, prefix, 4, LINE)
    expected = size * 3 * 8 / 100e9
    assert planned.world_size == 4
    assert planned.ideal.job_time_s == pytest.approx(expected, rel=1e-6)
    assert len(planned.ideal.instances) == 3
    assert all(r.time_s == pytest.approx(expected, rel=1e-6) for r in planned.ideal.instances)
    assert planned.ideal.bytes_total == 3 * size and planned.ideal.flows_total == 3
    assert planned.collectives_by_type == {"SEND_RECV": 3}
    assert planned.profiles == (DEFAULT_PROFILE, QpProfile())
    assert planned.prefix is None


def test_incast_in_messages_takes_the_same_total_time() -> None:
    size = 1 << 20
    p = pattern(
        kind="incast", senders=(1, 2, 3), receiver=0, bytes_per_pair=4 * size, message_bytes=size
    )
    planned = plan_workload(traffic_scenario(p), None, 4, LINE)
    assert planned.ideal.job_time_s == pytest.approx(4 * size * 3 * 8 / 100e9, rel=1e-6)
    times = [r.time_s for r in planned.ideal.instances]
    assert times == pytest.approx([size * 3 * 8 / 100e9] * 12, rel=1e-6)
    assert planned.numbering.total == 4


@pytest.mark.parametrize("qps", [1, 2])
def test_quarter_rate_constant_pair_takes_four_times_as_long(qps: int) -> None:
    size = 1 << 20
    free = pattern(name="free", pairs=((0, 2),), bytes_per_pair=size, message_bytes=size, qps=qps)
    capped = dataclasses.replace(free, rate_percent=25.0, rate_mode="constant")
    t_free = plan_workload(traffic_scenario(free), None, 4, LINE).ideal.job_time_s
    planned = plan_workload(traffic_scenario(capped), None, 4, LINE)
    assert t_free == pytest.approx(size * 8 / 100e9, rel=1e-6)
    assert planned.ideal.job_time_s == pytest.approx(4 * t_free, rel=1e-6)
    assert planned.profiles[1:] == (QpProfile(None, 25e9 / qps, "none", None),) * qps


def test_capped_pair_leaves_the_rest_of_the_link_to_an_uncapped_one() -> None:
    size = 1 << 20
    capped = pattern(name="c", pairs=((1, 0),), bytes_per_pair=size, rate_percent=25.0)
    free = pattern(name="f", pairs=((2, 0),), bytes_per_pair=3 * size, message_bytes=3 * size)
    planned = plan_workload(traffic_scenario(capped, free), None, 4, LINE)
    # both at 25 and 75 Gb/s into rank 0: both done after size * 8 / 25e9
    times = {r.group: r.time_s for r in planned.ideal.instances}
    assert times == {
        "c": pytest.approx(size * 8 / 25e9, rel=1e-6),
        "f": pytest.approx(size * 8 / 25e9, rel=1e-6),
    }


def test_simulate_without_caps_ignores_rate_percent() -> None:
    size = 1 << 20
    capped = pattern(pairs=((0, 2),), bytes_per_pair=size, rate_percent=25.0)
    path = path_for_fabric(FABRIC, 4)
    plain = simulate(TrafficSchedule([capped], line_rate_bps=LINE), path)
    schedule = TrafficSchedule([capped], line_rate_bps=LINE)
    with_caps = simulate(schedule, path, max_rate_bps=schedule.max_rate_bps)
    assert plain.job_time_s == pytest.approx(size * 8 / 100e9, rel=1e-6)
    assert with_caps.job_time_s == pytest.approx(size * 8 / 25e9, rel=1e-6)


def combined_scenario(*patterns: TrafficPattern) -> Scenario:
    workload = WorkloadSpec(generate=AllreduceParams(ranks=4, size_bytes=1 << 20, iterations=2))
    return Scenario(workload=workload, traffic=patterns, fabric=FABRIC)


def test_traffic_next_to_a_generated_trace() -> None:
    # 256 KiB messages from rank 0 to rank 3 for 700 us: they share rank 0's uplink with the
    # All-Reduce (both at 50 Gb/s until about 503 us), then have it alone
    size = 256 << 10
    p = pattern(name="bg", pairs=((0, 3),), duration_us=700.0, message_bytes=size)
    scenario = combined_scenario(p)
    with trace_prefix(scenario) as prefix:
        assert prefix is not None and Path(prefix).name == "allreduce"
        planned = plan_workload(scenario, prefix, 4, LINE)
        seen: list[CollectiveInstance] = []
        driver = planned.schedule(scenario, seen.append)
        assert isinstance(driver, CombinedDriver)
        # a faster network: the duration-bound pair posts more messages than in the plan
        replay = simulate(driver, lambda s, d, port: [("wire", 1e12)] if s != d else [])
        assert driver.finished and len(seen) == len(replay.instances)
    assert planned.world_size == 4
    trace = [r for r in planned.ideal.instances if r.collective == "ALL_REDUCE"]
    traffic = [r for r in planned.ideal.instances if r.collective == "SEND_RECV"]
    assert len(trace) == 2 and all(r.id < TRAFFIC_ID_BASE for r in trace)
    assert traffic and all(r.id >= TRAFFIC_ID_BASE and r.group == "bg" for r in traffic)
    assert max(r.start_s for r in traffic) < 700 * US <= max(r.end_s for r in traffic)
    assert planned.collectives_by_type == {"ALL_REDUCE": 2, "SEND_RECV": len(traffic)}
    assert planned.numbering.total == len(traffic)
    # shared, then alone at line rate
    assert traffic[0].time_s == pytest.approx(size * 8 / 50e9, rel=1e-6)
    assert traffic[-1].time_s == pytest.approx(size * 8 / 100e9, rel=1e-6)

    mine = [i for i in seen if i.id >= TRAFFIC_ID_BASE]
    assert len(mine) > len(traffic)
    # one the ideal run posted: its own time
    first = next(i for i in mine if i.iteration == 0)
    assert planned.ideal_time(first) == pytest.approx(traffic[0].time_s, rel=1e-9)
    # one it did not: the QP's last ideal time, scaled by size
    late = mine[-1]
    assert late.iteration >= len(traffic)
    assert planned.ideal_time(late) == pytest.approx(traffic[-1].time_s, rel=1e-9)
    half = dataclasses.replace(late, size_bytes=size // 2)
    assert planned.ideal_time(half) == pytest.approx(traffic[-1].time_s / 2, rel=1e-9)
    # an unknown QP, and a trace instance missing from the plan: no time
    stranger = dataclasses.replace(late, nodes=((0, 99), (3, 99)))
    assert planned.ideal_time(stranger) is None
    trace_instance = next(i for i in seen if i.id < TRAFFIC_ID_BASE)
    assert planned.ideal_time(dataclasses.replace(trace_instance, iteration=77)) is None


def test_combined_driver_routes_delays_and_flows_by_id() -> None:
    workload = WorkloadSpec(generate=AllreduceParams(ranks=4, size_bytes=1 << 20, compute_us=10.0))
    p = pattern(name="late", pairs=((2, 3),), start_us=5.0, bytes_per_pair=1 << 20)
    scenario = Scenario(workload=workload, traffic=(p,), fabric=FABRIC)
    with trace_prefix(scenario) as prefix:
        planned = plan_workload(scenario, prefix, 4, LINE)
        driver = planned.schedule(scenario, lambda inst: None)
        assert isinstance(driver, CombinedDriver)
        first = driver.poll(0.0)
    delays = [a for a in first if isinstance(a, StartDelay)]
    assert len(delays) == len(first) == 5
    assert sorted((d.token >= TRAFFIC_ID_BASE, d.rank) for d in delays) == [
        (False, 0),
        (False, 1),
        (False, 2),
        (False, 3),
        (True, -1),
    ]
    assert not driver.finished
    (allreduce,) = [r for r in planned.ideal.instances if r.collective == "ALL_REDUCE"]
    (message,) = [r for r in planned.ideal.instances if r.collective == "SEND_RECV"]
    assert allreduce.start_s == pytest.approx(10 * US) and allreduce.id < TRAFFIC_ID_BASE
    assert message.start_s == pytest.approx(5 * US) and message.id >= TRAFFIC_ID_BASE
    assert planned.ideal.job_time_s == max(allreduce.end_s, message.end_s)
    assert planned.ideal.nodes_completed == 4 + 4 + 1  # compute and All-Reduce nodes, message


def test_traffic_and_trace_share_the_fabric_in_the_ideal_model() -> None:
    # a full-rate pair into rank 3 slows the All-Reduce's ring step into rank 3 down
    alone = (
        plan_workload(combined_scenario(pattern(pairs=((2, 1),), bytes_per_pair=1)), None, 4, LINE)
        if False
        else None
    )
    del alone
    quiet = pattern(name="q", pairs=((2, 1),), bytes_per_pair=1)
    busy = pattern(name="b", pairs=((1, 3),), bytes_per_pair=16 << 20, message_bytes=16 << 20)
    times = {}
    for name, p in (("quiet", quiet), ("busy", busy)):
        scenario = combined_scenario(p)
        with trace_prefix(scenario) as prefix:
            planned = plan_workload(scenario, prefix, 4, LINE)
        times[name] = [r.time_s for r in planned.ideal.instances if r.collective == "ALL_REDUCE"]
    assert times["busy"][0] > times["quiet"][0] * 1.01


def test_pattern_beyond_the_fabric_is_refused() -> None:
    good = pattern(name="good", pairs=((0, 1),))
    bad = pattern(name="far", kind="incast", senders=(1, 2), receiver=4)
    with pytest.raises(ScenarioError) as info:
        plan_workload(traffic_scenario(good, bad), None, 4, LINE)
    assert str(info.value) == (
        "scenario: traffic[1] (far): rank 4 is not on the fabric (ranks 0..3)"
    )
    edge = pattern(name="edge", pairs=((3, 0),))
    assert plan_workload(traffic_scenario(edge), None, 4, LINE).world_size == 4


def test_pattern_mtu_above_the_transports_is_refused() -> None:
    transport = TransportParams(path_mtu_bytes=1024)
    ok = pattern(name="ok", path_mtu_bytes=1024)
    big = pattern(name="big", path_mtu_bytes=2048)
    with pytest.raises(ScenarioError) as info:
        plan_workload(traffic_scenario(ok, big, transport=transport), None, 4, LINE)
    assert str(info.value) == (
        "scenario: traffic[1].path_mtu_bytes: 2048 is above transport.path_mtu_bytes (1024), "
        "the largest packet the receivers take"
    )
    planned = plan_workload(traffic_scenario(ok, transport=transport), None, 4, LINE)
    assert planned.profiles[1].path_mtu_bytes == 1024


def test_plan_errors_name_the_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "traffic:\n  - name: x\n    kind: pairs\n    pairs: [[0, 9]]\n    bytes_per_pair: 1\n"
    )
    scenario = dataclasses.replace(load_scenario(path), fabric=FABRIC)
    with pytest.raises(ScenarioError, match=rf"^{path}: traffic\[0\] \(x\): rank 9 is not"):
        plan_workload(scenario, None, 4, LINE)


def test_trace_and_traffic_instances_keep_their_own_ideal_times() -> None:
    workload = WorkloadSpec(generate=AllreduceParams(ranks=2, size_bytes=4 << 20))
    p = pattern(pairs=((0, 1),), qps=2, bytes_per_pair=2 << 20, message_bytes=1 << 20)
    scenario = Scenario(workload=workload, traffic=(p,), fabric=FABRIC)
    with trace_prefix(scenario) as prefix:
        planned = plan_workload(scenario, prefix, 4, LINE)
        seen: list[CollectiveInstance] = []
        driver = planned.schedule(scenario, seen.append)
        # the same run again: same ids, same times
        replay = simulate(driver, path_for_fabric(FABRIC, 2), max_rate_bps=lambda profile: None)
    assert [r.time_s for r in replay.instances] == [r.time_s for r in planned.ideal.instances]
    by_id = {r.id: r.time_s for r in planned.ideal.instances}
    allreduce = next(i for i in seen if i.collective == "ALL_REDUCE")
    assert planned.ideal_time(allreduce) == pytest.approx(by_id[allreduce.id], rel=1e-9)
    for inst in seen:
        if inst.id >= TRAFFIC_ID_BASE:
            assert planned.ideal_time(inst) == pytest.approx(by_id[inst.id], rel=1e-9)
