"""PFC frames (IEEE 802.1Qbb) as bytes, checked against scapy, and the schedule that sends them."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.transport.pfc import (
    PfcSchedule,
    interval_for_duty_cycle,
    pause_s,
    pfc_frame,
)

MAC = bytes.fromhex("020000000001")


def test_a_frame_is_what_scapy_reads_as_class_based_flow_control() -> None:
    frame = pfc_frame(MAC, {3: 65535, 5: 100})
    assert len(frame) == 60
    parsed = Ether(frame)
    assert parsed.dst == "01:80:c2:00:00:01" and parsed.src == "02:00:00:00:00:01"
    assert parsed.type == 0x8808
    pfc = parsed[MACControlClassBasedFlowControl]
    enabled = [getattr(pfc, f"c{p}_enabled") for p in range(8)]
    times = [getattr(pfc, f"c{p}_pause_time") for p in range(8)]
    assert enabled == [0, 0, 0, 1, 0, 1, 0, 0]
    assert times == [0, 0, 0, 65535, 0, 100, 0, 0]
    # and scapy builds the same bytes for the same fields
    again = Ether(
        dst="01:80:c2:00:00:01", src="02:00:00:00:00:01"
    ) / MACControlClassBasedFlowControl(
        c3_enabled=1, c3_pause_time=65535, c5_enabled=1, c5_pause_time=100
    )
    assert bytes(again).ljust(60, b"\0") == frame


@pytest.mark.parametrize(
    ("quanta", "says"),
    [({8: 1}, "priority 8"), ({3: 70000}, "pause quanta 70000"), ({-1: 1}, "priority -1")],
)
def test_bad_frames_are_refused(quanta: dict[int, int], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        pfc_frame(MAC, quanta)


def test_duty_cycle_and_pause_time() -> None:
    assert pause_s(65535, 400e9) == pytest.approx(65535 * 512 / 400e9)  # about 84 us
    assert interval_for_duty_cycle(65535, 400e9, 0.5) == pytest.approx(2 * 65535 * 512 / 400e9)
    with pytest.raises(ValueError, match="duty cycle"):
        interval_for_duty_cycle(1, 1e9, 0.0)


def test_schedule_sends_on_time_stops_and_never_bursts_when_late() -> None:
    s = PfcSchedule(0.01, start_s=0.005, stop_s=0.098)
    assert s.due(0.0) == 0 and s.wait_s(0.0) == pytest.approx(0.005)
    assert [s.due(t) for t in (0.005, 0.006, 0.015, 0.025)] == [1, 0, 1, 1]
    assert s.due(0.040) == 1 and s.next_s == pytest.approx(0.045)  # a little late: on the grid
    assert s.due(0.040) == 0
    assert s.due(0.080) == 1  # three frames late: one frame, the missed ones are skipped
    assert s.due(0.080) == 0 and s.next_s == pytest.approx(0.090)
    assert s.due(0.095) == 1 and s.due(0.101) == 0 and s.wait_s(0.101) is None  # stop_s
    assert s.sent == 6


def test_pfc_generators_in_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    head = "workload: {generate: {kind: allreduce}}\nrun:\n  pfc_frames:\n"
    path.write_text(head + "    - {rank: 1, pause_quanta: {3: 65535}, duty_cycle: 0.5}\n")
    [spec] = load_scenario(path).run.pfc_frames
    assert spec.quanta_by_priority == {3: 65535} and spec.duty_cycle == 0.5
    for bad, says in (
        ("{rank: 1, pause_quanta: {3: 1}}", "exactly one of frames_per_s and duty_cycle"),
        ("{rank: 1, pause_quanta: {9: 1}, frames_per_s: 10}", "priority '9' is not 0..7"),
        ("{rank: 1, pause_quanta: {3: 70000}, frames_per_s: 10}", "70000 is not 0..65535"),
        ("{rank: 1, pause_quanta: {}, frames_per_s: 10}", "name at least one priority"),
    ):
        path.write_text(head + f"    - {bad}\n")
        with pytest.raises(ScenarioError, match=says):
            load_scenario(path)
