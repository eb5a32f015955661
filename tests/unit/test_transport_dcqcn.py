"""DCQCN reaction point, notification point and ECN marking, step by step at literal times
(issue 4, "what must be shown" 3)."""

from __future__ import annotations

import random

import pytest

from emulator.transport.congestion import CONGESTION_CONTROLS, create_congestion_control
from emulator.transport.dcqcn import NotificationPoint, ReactionPoint
from emulator.transport.marking import EcnMarker
from emulator.transport.params import (
    DcqcnParams,
    EcnMarkingParams,
    TransportParams,
    hpcc_ecn_marking,
)

US = 1e-6
LINE = 100e9
G = 5 / 1024  # (1024 - dce_tcp_g 1019) / 1024
BYTE_RESET = 32767 * 64


def alpha_after(
    alpha: float, first_period_us: int, last_period_us: int, cnp_periods: set[int]
) -> float:
    """Apply the 1 us alpha updates for periods [first, last) by the NVIDIA formula."""
    for start in range(first_period_us, last_period_us):
        alpha = (1 - G) * alpha + (G if start in cnp_periods else 0.0)
    return alpha


def test_rate_trajectory_follows_dcqcn_equations_at_literal_times() -> None:
    rp = ReactionPoint(DcqcnParams(), line_rate_bps=LINE)
    assert not rp.active and rp.current_rate_bps == LINE and rp.next_deadline_s() is None

    # t = 10 us, first CNP: alpha = 1023/1024, target = line rate, current = line (1 - alpha/2)
    assert rp.on_cnp(now=10 * US)
    alpha0 = 1023 / 1024
    current = LINE * (1 - alpha0 / 2)
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)
    assert current == pytest.approx(50.048828125e9)
    assert rp.target_rate_bps == LINE
    assert rp.next_deadline_s() == pytest.approx(310 * US)

    # t = 12 us: within rate_reduce_monitor_period (4 us): no decrease, but alpha sees the CNP
    assert not rp.on_cnp(now=12 * US)
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)

    # t = 20 us: decrease with alpha after periods 10..19 (CNPs in periods 10 and 12); no increase
    # since the last decrease, so the target stays (clamp_tgt_rate = 0)
    assert rp.on_cnp(now=20 * US)
    alpha = alpha_after(alpha0, 10, 20, {10, 12})
    assert rp.alpha == pytest.approx(alpha, rel=1e-12)
    current *= 1 - alpha / 2
    target = LINE
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)
    assert rp.target_rate_bps == target

    # t = 320 us: first timer event -> fast recovery
    assert not rp.on_timer(now=319 * US)
    assert rp.on_timer(now=320 * US)
    current = (target + current) / 2
    assert rp.last_reason == "fast_recovery"
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)

    # t = 620 us: second timer event (T=2 > rpg_threshold 1, BC=0) -> additive increase
    assert rp.on_timer(now=620 * US)
    target = min(target + 5e6, LINE)
    current = (target + current) / 2
    assert rp.last_reason == "additive_increase"
    assert (rp.target_rate_bps, rp.current_rate_bps) == pytest.approx((target, current))

    # byte counter: rpg_byte_reset bytes at 700 us -> BC=1: still additive (min(T,BC) = 1)
    assert not rp.on_bytes_sent(now=690 * US, size_bytes=BYTE_RESET - 1)
    assert rp.on_bytes_sent(now=700 * US, size_bytes=1)
    current = (target + current) / 2  # target already at line rate: AI cannot raise it
    assert rp.last_reason == "additive_increase"
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)

    # t = 920 us: T=3; 1000 us: BC=2 -> both counters past the threshold: hyper increase
    assert rp.on_timer(now=920 * US)
    current = (target + current) / 2
    assert rp.on_bytes_sent(now=1000 * US, size_bytes=BYTE_RESET)
    current = (target + current) / 2
    assert rp.last_reason == "hyper_increase"
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)

    # t = 1100 us: CNP after increases: target = current, then decrease with the decayed alpha
    assert rp.on_cnp(now=1100 * US)
    alpha = alpha_after(alpha, 20, 1100, {20})
    assert rp.alpha == pytest.approx(alpha, rel=1e-9)
    target = current
    current *= 1 - alpha / 2
    assert rp.target_rate_bps == pytest.approx(target, rel=1e-12)
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)


def test_additive_increase_raises_target_below_line_rate() -> None:
    rp = ReactionPoint(DcqcnParams(), line_rate_bps=LINE)
    rp.on_cnp(now=0.0)
    rp.on_timer(now=300 * US)  # FR: current = (100G + 50.05G) / 2
    rp.on_cnp(now=400 * US)  # increase happened: target = current
    target, current = rp.target_rate_bps, rp.current_rate_bps
    rp.on_timer(now=700 * US)  # FR
    current = (target + current) / 2
    rp.on_timer(now=1000 * US)  # AI
    target += 5e6
    current = (target + current) / 2
    assert rp.last_reason == "additive_increase"
    assert (rp.target_rate_bps, rp.current_rate_bps) == pytest.approx((target, current), rel=1e-12)


def test_rate_floor_and_return_to_line_rate() -> None:
    params = DcqcnParams(rpg_min_rate_mbps=40_000.0)
    rp = ReactionPoint(params, line_rate_bps=LINE)
    rp.on_cnp(now=0.0)
    assert rp.current_rate_bps == pytest.approx(50.048828125e9)
    rp.on_cnp(now=5 * US)
    assert rp.current_rate_bps == 40e9  # not below rpg_min_rate
    # fast recovery halves the gap to line rate each event; within rpg_min_rate it is released
    rp.on_timer(now=1.0)
    assert not rp.active and rp.current_rate_bps == LINE and rp.next_deadline_s() is None


def test_notification_point_paces_cnps_per_qp() -> None:
    np_ = NotificationPoint(DcqcnParams(min_time_between_cnps_us=4.0))
    times_us = [0.0, 1.0, 3.9, 4.0, 4.5, 8.1, 20.0]
    assert [np_.on_ce(now=t * US) for t in times_us] == [
        True,
        False,
        False,
        True,
        False,
        True,
        True,
    ]


def test_marking_probability_is_red_like_between_kmin_and_kmax() -> None:
    params = EcnMarkingParams(kmin_bytes=400_000, kmax_bytes=1_600_000, pmax=0.2)
    marker = EcnMarker(params, random.Random(7))
    assert marker.probability(400_000) == 0.0
    assert marker.probability(1_000_000) == pytest.approx(0.1)
    assert marker.probability(1_600_000) == pytest.approx(0.2)
    assert marker.probability(1_600_001) == 1.0
    assert not any(marker.should_mark(400_000) for _ in range(1000))
    assert all(marker.should_mark(2_000_000) for _ in range(1000))
    marks = sum(marker.should_mark(1_000_000) for _ in range(20_000))
    assert 1800 <= marks <= 2200  # 10 % of 20000, binomial sd ~42
    again = EcnMarker(params, random.Random(7))
    first = EcnMarker(params, random.Random(7))
    assert [again.should_mark(900_000) for _ in range(50)] == [
        first.should_mark(900_000) for _ in range(50)
    ]


def test_hpcc_thresholds_per_link_speed() -> None:
    assert (hpcc_ecn_marking(25e9).kmin_bytes, hpcc_ecn_marking(25e9).kmax_bytes) == (
        100_000,
        400_000,
    )
    assert (hpcc_ecn_marking(100e9).kmin_bytes, hpcc_ecn_marking(100e9).kmax_bytes) == (
        400_000,
        1_600_000,
    )
    assert (hpcc_ecn_marking(400e9).kmin_bytes, hpcc_ecn_marking(400e9).kmax_bytes) == (
        800_000,
        3_200_000,
    )
    assert hpcc_ecn_marking(400e9).pmax == 0.2


def test_congestion_control_registry() -> None:
    assert set(CONGESTION_CONTROLS) >= {"dcqcn", "none"}
    none = create_congestion_control(TransportParams(congestion_control="none"), line_rate_bps=LINE)
    assert not none.on_cnp(now=0.0) and none.rate_bps == LINE
    dcqcn = create_congestion_control(TransportParams(), line_rate_bps=LINE)
    assert dcqcn.on_cnp(now=0.0) and dcqcn.rate_bps < LINE


def test_params_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="path_mtu_bytes"):
        TransportParams(path_mtu_bytes=1500)
    with pytest.raises(ValueError, match="congestion_control"):
        TransportParams(congestion_control="cubic")
    with pytest.raises(ValueError, match="kmax_bytes"):
        EcnMarkingParams(kmin_bytes=10, kmax_bytes=5)


def test_traffic_classes_of_a_transport() -> None:
    from emulator.transport.params import TransportParams

    t = TransportParams(dscp=26, qp_dscp=(26, 10), data_ecn="ect1")
    assert [t.data_dscp(qp) for qp in range(4)] == [26, 10, 26, 26]  # past the list: dscp
    assert t.ack_dscp_value == 26 and t.data_ecn_bits == 0b01
    assert TransportParams(ack_dscp=46).ack_dscp_value == 46
    assert TransportParams(data_ecn="ce").data_ecn_bits == 0b11
    assert TransportParams().data_ecn_bits == 0b10  # ECT(0), what DCQCN expects
    with pytest.raises(ValueError, match="qp_dscp: 64 is not a DSCP"):
        TransportParams(qp_dscp=(26, 64))
