"""fabrics/link_watch.py: links whose carrier changed during a run, unless the scenario's own link
events took them down, are a fidelity reason with the packets they dropped."""

from __future__ import annotations

from fabrics.link_watch import LinkState, unannounced_downs


def test_a_carrier_change_nobody_announced_is_a_reason_naming_the_link() -> None:
    before = {
        ("l0", "l0-s1"): LinkState(2, 0),
        ("s1", "s1-l0"): LinkState(2, 5),
        ("l0", "l0-h0"): LinkState(2, 0),
    }
    after = {
        ("l0", "l0-s1"): LinkState(4, 0),
        ("s1", "s1-l0"): LinkState(4, 117),
        ("l0", "l0-h0"): LinkState(2, 9),
    }
    reason = unannounced_downs(before, after)
    assert reason is not None
    assert "l0:l0-s1 2x, s1:s1-l0 2x" in reason and "112 packets dropped" in reason
    assert "l0-h0" not in reason  # drops without a carrier change are the drop check's


def test_links_that_stayed_up_or_that_link_events_took_down_are_no_reason() -> None:
    state = {("l0", "l0-s1"): LinkState(2, 0)}
    assert unannounced_downs(state, state) is None
    after = {("l0", "l0-s1"): LinkState(4, 3)}
    assert unannounced_downs(state, after, announced=[("l0", "l0-s1")]) is None
    # an interface that appeared after the first reading is not judged
    assert unannounced_downs({}, after) is None
