"""The rank NIC's shared budget: never above line rate over any window, no catch-up bursts."""

from __future__ import annotations

import pytest

from emulator.engine.nicpacer import NicPacer

RATE_BPS = 400e9
TICK_S = 1e-6


def test_many_greedy_senders_together_get_line_rate() -> None:
    nic = NicPacer(RATE_BPS)
    packet = 4096 + 62
    sent = 0
    now = 0.0
    for _ in range(10_000):  # 10 ms of ticks, 14 queue pairs all wanting to send
        now += TICK_S
        for _qp in range(14):
            budget = nic.budget_bytes(now, now - 2 * TICK_S)
            if budget < 0:
                break
            n = 1 + budget // packet
            nic.consume(now - 2 * TICK_S, n * packet)
            sent += n * packet
    rate = sent * 8 / now
    assert rate == pytest.approx(RATE_BPS, rel=0.01)
    assert rate <= RATE_BPS * (1 + 2 * TICK_S / now) + packet * 8 / now


def test_idle_nic_gets_no_more_than_the_burst_of_credit() -> None:
    nic = NicPacer(RATE_BPS)
    assert nic.budget_bytes(1.0, 1.0 - 2 * TICK_S) == pytest.approx(
        2 * TICK_S * RATE_BPS / 8, abs=1
    )
    nic.consume(1.0 - 2 * TICK_S, 300_000)  # one send larger than the credit: the NIC owes the rest
    assert nic.budget_bytes(1.0, 1.0 - 2 * TICK_S) < 0
    owed_s = 300_000 * 8 / RATE_BPS - 2 * TICK_S
    t = 1.0 + owed_s * 0.99
    assert nic.budget_bytes(t, t - 2 * TICK_S) < 0
    t = 1.0 + owed_s + TICK_S
    assert nic.budget_bytes(t, t - 2 * TICK_S) >= 0


def test_rate_must_be_positive() -> None:
    with pytest.raises(ValueError):
        NicPacer(0.0)


def test_credit_lost_while_backlogged_is_the_pacing_deficit() -> None:
    """A NIC that ended its last serve line-rate bound and is served again late loses the
    credit the floor cuts; an idle NIC loses nothing (it had nothing to send)."""
    nic = NicPacer(8e9)  # 1 byte per ns
    nic.consume(0.0, 1000)  # free at 1 us
    nic.start_tick(floor_s=5e-6)
    assert nic.lost_wire_bytes == 0.0  # not backlogged: idle time is not a deficit
    nic.backlogged = True
    nic.start_tick(floor_s=5e-6)  # 4 us of line rate cut: 4000 bytes
    assert nic.lost_wire_bytes == pytest.approx(4000.0)
    nic.consume(5e-6, 1000)
    nic.start_tick(floor_s=5.5e-6)  # still owes time: nothing lost
    assert nic.lost_wire_bytes == pytest.approx(4000.0)
