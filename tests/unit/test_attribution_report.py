"""The attribution section as a reader sees it: the printed summary's lines and the run page's
section, from a summary's `attribution` (shares, top interferer, jobs, CNPs, reconciliation)."""

from __future__ import annotations

from typing import Any

from collectors.pages.run import _attribution
from collectors.report import attribution_lines

SECTION: dict[str, Any] = {
    "measured": True,
    "source": "simulated: exact",
    "ports": [
        {
            "switch": "s1",
            "port": "s1-l0-0",
            "queue_byte_s": 3992.1,
            "queue_share": {"ALL_TO_ALL": 0.28, "ALL_REDUCE": 0.72},
            "ecn_marks": {"ALL_REDUCE": 398, "ALL_TO_ALL": 162},
            "top_interferer": "ALL_REDUCE",
            "queue_share_by_job": {"moe": 0.28, "dense": 0.72},
            "top_interfering_job": "dense",
        }
    ],
    "ports_with_queue": 29,
    "cnps_by_marked_collective": {"ALL_REDUCE": 290, "ALL_TO_ALL": 232},
    "marks_reconciled": {"switch_marks": 683, "receiver_ce": 683, "holds": True},
    "slowest_all_to_all": [{"flow_id": 1, "marked_at": {"x": {}}}, {"flow_id": 2, "marked_at": {}}],
}


def test_the_printed_summary_names_each_port_s_shares_top_interferer_and_job() -> None:
    lines = attribution_lines(SECTION)
    assert lines[0].startswith("attribution (simulated: exact)")
    assert lines[1] == (
        "  s1:s1-l0-0: ALL_REDUCE 72%, ALL_TO_ALL 28% (top interferer ALL_REDUCE); "
        "by job dense 72%, moe 28%"
    )
    assert "CNPs by the marked collective: ALL_REDUCE 290, ALL_TO_ALL 232" in lines[2]
    assert lines[3].endswith("switch ECN marks 683, receiver CE 683: reconciled")
    bad = {**SECTION, "marks_reconciled": {"switch_marks": 1, "receiver_ce": 2, "holds": False}}
    assert attribution_lines(bad)[-1].endswith("DISCREPANCY")
    assert attribution_lines({"measured": False, "why": "no tags"}) == []


def test_the_run_page_has_the_same_numbers_and_says_why_when_not_measured() -> None:
    page = _attribution({"attribution": SECTION})
    for text in (
        "s1:s1-l0-0",
        "ALL_REDUCE 72%, ALL_TO_ALL 28%",
        "dense 72%, moe 28%",
        "ALL_REDUCE 398, ALL_TO_ALL 162",
        "683 / 683 (reconciled)",
        "2, of which 1 had a packet marked",
    ):
        assert text in page, text
    off = _attribution({"attribution": {"measured": False, "why": "the DUT <backend>"}})
    assert "the DUT &lt;backend&gt;" in off
    assert _attribution({}) == ""
