"""PFC frames on the wire: a generator on a rank's interface sends IEEE 802.1Qbb frames at its
rate, a capture at the far end of the veth holds exactly as many, and scapy reads each as class
based flow control with the priorities and pause times asked for. In a run, the summary counts
them and the run says the emulated fabric does not pause for them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.utils import rdpcap

from emulator.backends.engine.pfc_generator import PfcGenerator
from emulator.engine.testbed import Capture, PairInfo
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from tests.system.test_run_end_to_end import MINI

pytestmark = pytest.mark.system


def test_frames_leave_at_their_rate_and_parse_as_pfc(veth_pair: PairInfo, tmp_path: Path) -> None:
    p = veth_pair
    path = os.path.join(tmp_path, "pfc.pcap")
    capture = Capture(p.receiver_ns, p.receiver_if, path, bpf_filter="ether proto 0x8808")
    generator = PfcGenerator(
        p.sender_ns, p.sender_if, {3: 65535, 4: 1000}, interval_s=0.005, start_s=0.0,
        stop_s=0.5, tdf=1.0,
    )  # fmt: skip
    try:
        generator.start(time.perf_counter())
        time.sleep(0.8)
    finally:
        generator.stop()
        capture.stop()
    frames = rdpcap(path)
    assert capture.kernel_drops == 0
    # 200 frames/s for 0.5 s: 100, fewer if a busy machine starves the thread (late frames are
    # skipped, never bunched), never more
    assert len(frames) == generator.sent and 60 <= generator.sent <= 101
    for frame in frames:
        assert frame.dst == "01:80:c2:00:00:01" and frame.type == 0x8808
        pfc = frame[MACControlClassBasedFlowControl]
        assert [getattr(pfc, f"c{q}_enabled") for q in range(8)] == [0, 0, 0, 1, 1, 0, 0, 0]
        assert (pfc.c3_pause_time, pfc.c4_pause_time) == (65535, 1000)
    assert not generator.errors


def test_a_run_sends_and_counts_pfc_frames(fabric_env: str, tmp_path: Path) -> None:
    path = tmp_path / "pfc.yaml"
    path.write_text(
        (MINI % "8000").replace(
            "run:\n",
            "run:\n  pfc_frames:\n    - {rank: 2, pause_quanta: {3: 65535}, frames_per_s: 20000}\n",
        )
    )
    messages: list[str] = []
    result = run_scenario(
        load_scenario(path),
        RunOptions(
            out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env, say=messages.append
        ),
    )
    # 20,000 frames per target second at TDF 8000: 2.5 per wall second, over a run of seconds
    assert result.summary["pfc_frames_sent"]["2"] >= 3
    assert any("does not pause" in m for m in messages)
