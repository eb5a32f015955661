"""Switch-test expectations judged on hand-made evidence: each check's PASS, FAIL and NOT
APPLICABLE, `holds: false`, `needs_pfc`, pattern scoping; and the PFC counter parser."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from collectors.expectations import (
    Evidence,
    Expectation,
    judge,
    report,
    sender_rates_bps,
)
from collectors.queue_pairs import QpRow
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from fabrics.pfc_counters import parse_rx_pfc_frames


def qp(src: int, dst: int, **counters: int) -> QpRow:
    base = dict.fromkeys(
        (f.name for f in dataclasses.fields(QpRow) if f.name not in ("pattern",)), 0
    )
    base.update(src_rank=src, dst_rank=dst, qp=0, udp_sport=50000 + src, qpn=src + 1)
    base.update(counters)
    return QpRow(**base)  # type: ignore[arg-type]


def evidence(**changes: object) -> Evidence:
    rows = [
        qp(
            1,
            0,
            data_packets_sent=100,
            data_packets_received=100,
            ce_received=5,
            cnps_sent=2,
            cnps_received=2,
        ),
        qp(2, 0, data_packets_sent=100, data_packets_received=100),
    ]
    base = Evidence(
        queue_pairs=rows,
        qp_pattern={(1, 0, 0, 50001): "incast", (2, 0, 0, 50002): "other"},
        sender_rates_bps={"": {1: 10e9, 2: 8e9}, "incast": {1: 10e9}},
        uplink_bytes={"l0": {"l0-s0": 100, "l0-s1": 60}, "l1": {"l1-s0": 5, "l1-s1": 0}},
        pfc_sent={0: 12},
        pfc_received={0: None, 1: None, 2: None},
        patterns=frozenset({"incast", "other"}),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def statuses(expectations: list[Expectation], ev: Evidence) -> list[str]:
    return [v.status for v in judge(expectations, ev)]


def test_counters_checks_pass_fail_and_invert() -> None:
    ev = evidence()
    checks = [
        Expectation("no_loss"),
        Expectation("no_nak"),
        Expectation("ce_seen"),
        Expectation("ce_seen", holds=False),
        Expectation("ce_seen", pattern="other"),
        Expectation("cnps_match_ce"),
    ]
    assert statuses(checks, ev) == ["PASS", "PASS", "PASS", "FAIL", "FAIL", "PASS"]
    lossy = evidence(queue_pairs=[qp(1, 0, data_packets_sent=10, lost_packets=1)])
    verdict = judge([Expectation("no_loss")], lossy)[0]
    assert verdict.status == "FAIL" and verdict.detail == "1 lost, 0 retransmitted of 10 sent"
    naks = evidence(queue_pairs=[qp(1, 0, naks_sent=1, naks_received=1)])
    assert statuses([Expectation("no_nak")], naks) == ["FAIL"]


@pytest.mark.parametrize(
    "row",
    [
        {"ce_received": 3},  # CE without a CNP
        {"cnps_sent": 1, "cnps_received": 1},  # a CNP without CE
        {"ce_received": 3, "cnps_sent": 2, "cnps_received": 1},  # a CNP lost on the way back
        {"ce_received": 1, "cnps_sent": 2, "cnps_received": 2},  # more CNPs than CE
    ],
)
def test_cnps_not_matching_ce_fail(row: dict[str, int]) -> None:
    verdict = judge([Expectation("cnps_match_ce")], evidence(queue_pairs=[qp(1, 0, **row)]))[0]
    assert verdict.status == "FAIL" and "1 QPs do not match, e.g. rank 1 -> 0" in verdict.detail


def test_fairness_bound_and_scope() -> None:
    ev = evidence()  # 8 of 10 Gb/s: within 30%, not within 10%
    assert statuses(
        [Expectation("fairness", within_percent=30), Expectation("fairness", within_percent=10)],
        ev,
    ) == ["PASS", "FAIL"]
    only_one = judge([Expectation("fairness", pattern="incast", within_percent=30)], ev)[0]
    assert only_one.status == "NOT APPLICABLE"


def test_uplink_spread_judges_sending_leaves_only() -> None:
    ev = evidence()  # l0: 60 of 100 (60%); l1 sends a twentieth of l0: only ACKs, not judged
    checks = [
        Expectation("uplink_spread", within_percent=50),
        Expectation("uplink_spread", within_percent=30),
        Expectation("uplink_spread", within_percent=30, holds=False),
    ]
    assert statuses(checks, ev) == ["PASS", "FAIL", "PASS"]
    verdict = judge(checks[:1], ev)[0]
    assert "l0 60%" in verdict.detail and "l1" not in verdict.detail
    assert statuses(checks[:1], evidence(uplink_bytes=None)) == ["NOT APPLICABLE"]


def test_link_balance_bounds_the_max_to_mean_ratio_of_each_sending_leaf() -> None:
    # l0: 100 and 60 -> mean 80, MMR 1.25, JFI 160^2 / (2 x 13600) = 0.941; l1 only ACKs
    ev = evidence()
    checks = [
        Expectation("link_balance", max_mmr=1.3),
        Expectation("link_balance", max_mmr=1.2),
    ]
    assert statuses(checks, ev) == ["PASS", "FAIL"]
    detail = judge(checks[:1], ev)[0].detail
    assert "l0 MMR 1.250, JFI 0.941" in detail and "l1" not in detail
    even = evidence(uplink_bytes={"l0": {"a": 50, "b": 50, "c": 50, "d": 50}})
    assert statuses(checks[1:], even) == ["PASS"]
    assert statuses(checks[:1], evidence(uplink_bytes=None)) == ["NOT APPLICABLE"]
    with pytest.raises(ValueError, match="max_mmr"):
        Expectation("link_balance")


def test_reordering_reports_the_share_and_extent_and_bounds_it() -> None:
    rows = [
        qp(
            1,
            0,
            data_packets_received=100,
            reordered_packets=6,
            reorder_extent_sum=18,
            reorder_extent_max=5,
            held_out_of_order=6,
        ),
        qp(
            2,
            0,
            data_packets_received=100,
            reordered_packets=4,
            reorder_extent_sum=2,
            reorder_extent_max=1,
        ),
    ]
    ev = evidence(queue_pairs=rows)
    checks = [
        Expectation("reordering", within_percent=5),
        Expectation("reordering", within_percent=4),
        Expectation("reordering", within_percent=50, pattern="other"),
    ]
    assert statuses(checks, ev) == ["PASS", "FAIL", "PASS"]
    detail = judge(checks[:1], ev)[0].detail
    assert detail.startswith("10 of 200 data packets arrived after a later one (5.00%")
    assert "extent mean 2.0, max 5 packets); 6 held out of order" in detail
    none = evidence(queue_pairs=[qp(1, 0)])
    assert statuses(checks[:1], none) == ["NOT APPLICABLE"]


def test_pfc_checks_are_never_passed_without_pfc_counters() -> None:
    ev = evidence()
    checks = [
        Expectation("pfc_frames_sent"),
        Expectation("pfc_frames_received", ranks=(1,)),
        Expectation("no_loss", needs_pfc=True),
    ]
    assert statuses(checks, ev) == ["PASS", "NOT APPLICABLE", "NOT APPLICABLE"]
    real = evidence(pfc_received={0: 0, 1: 7, 2: 0}, pfc_capable=True)
    assert statuses(checks, real) == ["PASS", "PASS", "PASS"]
    paused_nobody = evidence(pfc_received={0: 0, 1: 0, 2: 0}, pfc_capable=True)
    assert statuses(checks[1:2], paused_nobody) == ["FAIL"]
    assert statuses(checks[:1], evidence(pfc_sent={})) == ["NOT APPLICABLE"]
    assert statuses(checks[:1], evidence(pfc_sent={0: 0})) == ["FAIL"]


def test_report_counts_each_status() -> None:
    verdicts = judge(
        [
            Expectation("no_loss"),
            Expectation("ce_seen", holds=False),
            Expectation("pfc_frames_received", ranks=(1,)),
        ],
        evidence(),
    )
    text = report(verdicts)
    assert text.splitlines()[-1] == "  1 passed, 1 failed, 1 not applicable"
    assert "  FAIL           not ce_seen: 5 CE-marked packets of 200 received" in text


def test_sender_rates_per_pattern() -> None:
    flows: list[dict[str, Any]] = [
        {"collective_id": 7, "src_rank": 1, "bytes": 1000, "start_s": 0.0, "end_s": 1e-6},
        {"collective_id": 8, "src_rank": 1, "bytes": 1000, "start_s": 1e-6, "end_s": 2e-6},
        {"collective_id": 9, "src_rank": 2, "bytes": 500, "start_s": 0.0, "end_s": None},
    ]
    rates = sender_rates_bps(flows, {7: "a", 8: "b"})
    assert rates[""] == {1: pytest.approx(8e9)}
    assert rates["a"] == {1: pytest.approx(8e9)} and rates["b"] == {1: pytest.approx(8e9)}


def test_expectation_keys_are_checked_in_the_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    head = "traffic:\n  - {name: a, kind: pairs, pairs: [[0, 1]], bytes_per_pair: 1}\nexpect:\n"
    path.write_text(head + "  - {check: fairness}\n")
    with pytest.raises(ScenarioError, match=r":4: expect\[0\]\.within_percent: fairness needs"):
        load_scenario(path)
    path.write_text(head + "  - {check: no_loss, pattern: b}\n")
    with pytest.raises(ScenarioError, match=r"expect: no traffic pattern is named 'b'"):
        load_scenario(path)
    path.write_text(head + "  - {check: magic}\n")
    with pytest.raises(ScenarioError, match=r"expect\[0\]\.check: expected one of"):
        load_scenario(path)


def test_pfc_counter_names_of_common_drivers() -> None:
    mlx5 = "NIC statistics:\n     rx_prio3_pause: 12\n     rx_prio3_pause_duration: 900\n"
    mlx5 += "     tx_prio3_pause: 4\n     rx_prio0_pause: 1\n     rx_pause_ctrl_phy: 9\n"
    assert parse_rx_pfc_frames(mlx5) == 13
    assert parse_rx_pfc_frames("     rx_priority_3_xoff.nic: 7\n") == 7
    assert parse_rx_pfc_frames("     rx_pfc_ena_frames_pri3: 5\n") == 5
    veth = "NIC statistics:\n     peer_ifindex: 5\n     rx_queue_0_xdp_packets: 0\n"
    assert parse_rx_pfc_frames(veth) is None
