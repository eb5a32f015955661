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
    """The Mellanox DCQCN of the HPCC ns-3 model (alibaba-edu/High-Precision-Congestion-Control,
    rdma-hw.cc): `cnp_received_mlx` only sets flags and, at the first CNP, starts the alpha timer
    (alpha = 1, CNP flag cleared) and the decrease check; `CheckRateDecreaseMlx` runs every
    rate_reduce_monitor_period from the first CNP and cuts once if a CNP arrived since the last
    check. NVIDIA DOCA 'DCQCN CC Parameters': "rate reduction will occur only if a CNP is received
    during the relevant time interval"."""
    rp = ReactionPoint(DcqcnParams(), line_rate_bps=LINE)
    assert not rp.active and rp.current_rate_bps == LINE and rp.next_deadline_s() is None

    # t = 10 us, first CNP: a rate limiter at line rate (rate_to_set_on_first_cnp 0), alpha
    # 1023/1024, the decrease check due one monitor period later
    assert not rp.on_cnp(now=10 * US)
    assert rp.active and rp.current_rate_bps == LINE and rp.target_rate_bps == LINE
    assert rp.next_deadline_s() == pytest.approx(14 * US)
    alpha0 = 1023 / 1024

    # t = 12 us: a CNP inside the period is remembered, not dropped
    assert not rp.on_cnp(now=12 * US)
    assert not rp.on_timer(now=13.9 * US)
    assert rp.current_rate_bps == LINE

    # t = 14 us: the check cuts with alpha after periods 10..13 (the first CNP does not count as
    # a CNP in its period; the one at 12 us does); no increase yet, so the target stays
    assert rp.on_timer(now=14 * US)
    alpha = alpha_after(alpha0, 10, 14, {12})
    assert rp.alpha == pytest.approx(alpha, rel=1e-12)
    current = LINE * (1 - alpha / 2)
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)
    assert rp.target_rate_bps == LINE and rp.last_reason == "cnp"
    assert rp.next_deadline_s() == pytest.approx(314 * US)  # increase timer restarted

    # t = 18 us: no CNP in the period 14..18: no cut
    assert not rp.on_timer(now=18 * US)

    # CNPs at 19 and 21 us (one period): exactly one cut, at 22 us
    rp.on_cnp(now=19 * US)
    rp.on_cnp(now=21 * US)
    assert rp.next_deadline_s() == pytest.approx(22 * US)
    assert rp.on_timer(now=22.5 * US)  # a late tick applies the cut of the 22 us check
    alpha = alpha_after(alpha, 14, 22, {19, 21})
    assert rp.alpha == pytest.approx(alpha, rel=1e-12)
    current *= 1 - alpha / 2
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)
    assert not rp.on_timer(now=26 * US)
    target = LINE

    # t = 322 us: first timer event -> fast recovery
    assert not rp.on_timer(now=321 * US)
    assert rp.on_timer(now=322 * US)
    current = (target + current) / 2
    assert rp.last_reason == "fast_recovery"
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)

    # t = 622 us: second timer event (T=2 > rpg_threshold 1, BC=0) -> additive increase
    assert rp.on_timer(now=622 * US)
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

    # t = 922 us: T=3; 1000 us: BC=2 -> both counters past the threshold: hyper increase
    assert rp.on_timer(now=922 * US)
    current = (target + current) / 2
    assert rp.on_bytes_sent(now=1000 * US, size_bytes=BYTE_RESET)
    current = (target + current) / 2
    assert rp.last_reason == "hyper_increase"
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)

    # CNP at 1100 us after increases: the check at 1102 us (10 + 273 x 4) sets target = current
    # (ns-3: clamp when m_rpTimeStage != 0), then cuts with the decayed alpha
    assert not rp.on_cnp(now=1100 * US)
    assert rp.next_deadline_s() == pytest.approx(1102 * US)
    assert rp.on_timer(now=1102 * US)
    alpha = alpha_after(alpha, 22, 1102, {1100})
    assert rp.alpha == pytest.approx(alpha, rel=1e-9)
    target = current
    current *= 1 - alpha / 2
    assert rp.target_rate_bps == pytest.approx(target, rel=1e-12)
    assert rp.current_rate_bps == pytest.approx(current, rel=1e-12)


def test_cnps_inside_the_monitor_period_are_not_lost() -> None:
    """A steady CNP stream (one per 1 us, the NP's fastest here) cuts once per monitor period:
    25 periods in 100 us give 25 cuts, where dropping in-period CNPs and cutting on the next one
    gives a different count and cut times."""
    params = DcqcnParams(min_time_between_cnps_us=1.0)
    rp = ReactionPoint(params, line_rate_bps=LINE)
    cuts = []
    for t_us in range(0, 100):
        rp.on_timer(now=t_us * US)
        before = rp.current_rate_bps
        rp.on_cnp(now=(t_us + 0.5) * US)
        assert rp.current_rate_bps == before  # a CNP never cuts at once
        if rp.on_timer(now=(t_us + 1) * US) and rp.last_reason == "cnp":
            cuts.append(t_us + 1)
    # checks at 0.5 + 4k us, each seen by the on_timer call at the next whole microsecond
    assert cuts == list(range(5, 98, 4)) and len(cuts) == 24


def test_rate_to_set_on_first_cnp() -> None:
    """NVIDIA DOCA: rate_to_set_on_first_cnp sets current and target when the first CNP
    allocates the rate limiter; the cut still waits for the decrease check."""
    rp = ReactionPoint(DcqcnParams(rate_to_set_on_first_cnp_mbps=20_000.0), line_rate_bps=LINE)
    assert rp.on_cnp(now=0.0)
    assert rp.current_rate_bps == rp.target_rate_bps == 20e9
    assert rp.last_reason == "first_cnp"
    assert rp.on_timer(now=4 * US)
    assert rp.current_rate_bps == pytest.approx(20e9 * (1 - (1023 / 1024) * (1 - G) ** 4 / 2))
    # above line rate it is capped
    capped = ReactionPoint(DcqcnParams(rate_to_set_on_first_cnp_mbps=1e6), line_rate_bps=LINE)
    capped.on_cnp(now=0.0)
    assert capped.current_rate_bps == LINE


def test_zero_monitor_period_cuts_at_once() -> None:
    rp = ReactionPoint(DcqcnParams(rate_reduce_monitor_period_us=0.0), line_rate_bps=LINE)
    assert rp.on_cnp(now=0.0)
    assert rp.current_rate_bps == pytest.approx(LINE * (1 - (1023 / 1024) / 2))
    assert rp.on_cnp(now=1 * US)
    assert rp.current_rate_bps < LINE * 0.3


def test_byte_counter_unit_is_64_bytes() -> None:
    """rpg_byte_reset counts 64-byte units: NVIDIA's default 32767 is about 2 MB between
    byte-counter increases, what Spirent TestCenter's DCQCN profile defaults to (ByteResetInMb 2);
    the DCQCN paper's B is 10 MB. Read as bytes it would be 32 KB: 8 packets of 4 KB."""
    default = DcqcnParams().rpg_byte_reset_bytes
    assert default == 32767 * 64
    assert 2.0e6 <= default <= 2.2e6


def test_additive_increase_raises_target_below_line_rate() -> None:
    rp = ReactionPoint(DcqcnParams(), line_rate_bps=LINE)
    rp.on_cnp(now=0.0)
    rp.on_timer(now=4 * US)  # the first cut
    rp.on_timer(now=304 * US)  # FR: current = (100G + cut) / 2
    rp.on_cnp(now=400 * US)  # a CNP at a check instant waits for the next check (404 us)
    assert rp.next_deadline_s() == pytest.approx(404 * US)
    before = rp.current_rate_bps
    assert rp.on_timer(now=404 * US) and rp.last_reason == "cnp"
    assert rp.target_rate_bps == before  # an increase happened since the last cut: clamp
    target, current = rp.target_rate_bps, rp.current_rate_bps
    rp.on_timer(now=704 * US)  # FR
    current = (target + current) / 2
    rp.on_timer(now=1004 * US)  # AI
    target += 5e6
    current = (target + current) / 2
    assert rp.last_reason == "additive_increase"
    assert (rp.target_rate_bps, rp.current_rate_bps) == pytest.approx((target, current), rel=1e-12)


def test_rate_floor_and_return_to_line_rate() -> None:
    params = DcqcnParams(rpg_min_rate_mbps=40_000.0)
    rp = ReactionPoint(params, line_rate_bps=LINE)
    rp.on_cnp(now=0.0)
    rp.on_timer(now=4 * US)
    alpha = (1023 / 1024) * (1 - G) ** 4
    assert rp.current_rate_bps == pytest.approx(LINE * (1 - alpha / 2))
    rp.on_cnp(now=5 * US)
    rp.on_timer(now=8 * US)
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
    assert not dcqcn.on_cnp(now=0.0) and dcqcn.next_deadline_s() == pytest.approx(4 * US)
    assert dcqcn.on_timer(now=4 * US) and dcqcn.rate_bps < LINE


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
