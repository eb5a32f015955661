"""The engine's own delay in the flows, judged per collective type (emulator.timescale.verdict): the
bytes-weighted share of FCT it makes and how far it moves the p99 FCT, against 5%."""

from __future__ import annotations

import pytest

from emulator.timescale.verdict import (
    ENGINE_DELAY_SHARE_LIMIT,
    engine_delay_reason,
    engine_delay_shares,
)

US = 1e-6


def test_the_share_is_bytes_weighted_and_the_tail_shift_is_the_p99s() -> None:
    # two flows of one type: 1 MB with 10% of its 100 us FCT the engine's, 3 MB with none
    flows = [("ALL_TO_ALL", 1_000_000, 100 * US, 10 * US), ("ALL_TO_ALL", 3_000_000, 200 * US, 0.0)]
    shares = engine_delay_shares(flows)
    assert shares["ALL_TO_ALL"]["fct_share"] == pytest.approx(0.10 * 1 / 4)
    # the p99 of two flows is the larger, 200 us, with or without the delay
    assert shares["ALL_TO_ALL"]["p99_fct_shift"] == pytest.approx(0.0)


def test_a_delayed_tail_is_a_reason_even_when_the_body_is_clean() -> None:
    """98 flows of 100 us untouched, two of 120 us of which 20 us was the engine's (a stalled
    worker at their end): the p99 FCT (the 99th of 100 by rank) is 120 us, 100 us without the
    delay: +20%, while the delay is 0.3% of the FCTs."""
    flows = [("ALL_REDUCE", 1000, 100 * US, 0.0)] * 98 + [
        ("ALL_REDUCE", 1000, 120 * US, 20 * US)
    ] * 2
    shares = engine_delay_shares(flows)
    assert shares["ALL_REDUCE"]["fct_share"] < ENGINE_DELAY_SHARE_LIMIT
    assert shares["ALL_REDUCE"]["p99_fct_shift"] == pytest.approx(120 / 100 - 1)
    reason = engine_delay_reason(shares)
    assert reason is not None and "ALL_REDUCE" in reason and "p99 FCT +20.0%" in reason


def test_within_the_limit_no_reason_and_a_simulation_has_nothing_to_judge() -> None:
    flows = [("ALL_TO_ALL", 1000, 100 * US, 4 * US)] * 10  # 4% everywhere
    shares = engine_delay_shares(flows)
    assert shares["ALL_TO_ALL"]["fct_share"] == pytest.approx(0.04)
    assert engine_delay_reason(shares) is None
    over = engine_delay_shares([("ALL_TO_ALL", 1000, 100 * US, 6 * US)] * 10)
    reason = engine_delay_reason(over)
    assert reason is not None and "ALL_TO_ALL 6.0% of its FCTs (bytes-weighted)" in reason
    # a simulation's flows carry no engine delay; unfinished flows have no FCT
    assert engine_delay_shares([("ALL_TO_ALL", 1000, 100 * US, None)]) == {}
    assert engine_delay_shares([("ALL_TO_ALL", 1000, None, 1 * US)]) == {}


def test_a_delay_longer_than_the_fct_counts_as_the_whole_fct() -> None:
    shares = engine_delay_shares([("ALL_TO_ALL", 1000, 10 * US, 50 * US)])
    assert shares["ALL_TO_ALL"]["fct_share"] == pytest.approx(1.0)
