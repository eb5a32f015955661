"""The scenario's streams in the simulator: what a lossless fabric and a lossy one do to a
tester's stateless frames, counted at the receiver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emulator.cli import main

FABRIC = """\
name: streams
fabric:
  kind: clos
  hosts_per_leaf: 2
  leaves: 2
  spines: 1
  host_link_gbps: 100
  fabric_link_gbps: 100
{extra}
streams:
  - {{name: a, src: 0, dst: 3, ecn: 2, dscp: 3, rate_percent: 100, packets: {n}}}
  - {{name: b, src: 1, dst: 3, ecn: 2, dscp: 3, rate_percent: 100, packets: {n}}}
run:
  backend: sim
metrics:
  prometheus: {{enabled: false}}
"""


def run(tmp_path: Path, extra: str, n: int) -> dict[str, Any]:
    path = tmp_path / "s.yaml"
    path.write_text(FABRIC.format(extra=extra, n=n))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "summary.json").read_text())


def test_a_lossless_fabric_delivers_an_incast_in_full(tmp_path: Path) -> None:
    # two line-rate bursts of 20000 frames into one port: 20 MB wait, PFC pauses upstream, and
    # the run counts until they could all have crossed the receiver's link (then 1 ms)
    summary = run(tmp_path, "  pfc: true", 20000)
    for s in summary["streams"]:
        assert s["frames_tx"] == s["frames_rx"] == 20000 and s["frames_lost"] == 0
        assert s["ce_rx"] > 0 and s["out_of_order"] == 0
        # 40000 frames of 1044 wire bytes through one 100 Gb/s link: the last after 3.34 ms
        assert 3340 < s["last_rx_us"] < 3400
    assert summary["pfc"]["pause_frames"] > 0
    assert summary["fidelity"]["verdict"] == "ok"


def test_a_full_nic_holds_its_stream_instead_of_dropping() -> None:
    """A NIC whose queue is full (paused by its switch) holds the stream's generator, as a NIC's
    transmit ring does: its frames leave late, none is dropped at the sender."""
    from emulator.sim.engine import Simulator
    from emulator.sim.nodes import Host
    from emulator.sim.port import Port
    from emulator.transport.stream import StreamSink, StreamSource

    sim = Simulator()
    sender, receiver = Host(sim, "h0", "10.0.0.1"), Host(sim, "h1", "10.0.0.2")
    nic = Port(sim, "h0-eth0", rate_bps=100e9, delay_s=0.0, buffer_bytes=4096)
    nic.peer = receiver
    sender.attach(nic)
    receiver.stream_sink = StreamSink(frozenset({0}))
    source = StreamSource(0, 1024, 1e-9, 0.0, 50, (5000,))  # far faster than the link
    nic._set_paused(True)  # its switch's PFC frame arrived
    sender.add_stream(source, dst=receiver, dport=7000, dscp=0, ecn=0, priority=False)
    sim.run(until_s=10e-6)
    assert nic.drops == 0 and nic.queued_bytes <= 4096 and source.sent < 50
    nic._set_paused(False)
    sim.run(until_s=100e-6)
    assert source.sent == 50 and source.late_packets > 0 and nic.drops == 0


def test_a_lossy_fabric_drops_what_its_buffer_cannot_hold(tmp_path: Path) -> None:
    summary = run(tmp_path, "  pfc: false\n  leaf: {buffer_bytes: 200000}", 2000)
    lost = [s["frames_lost"] for s in summary["streams"]]
    # 2 x 2000 frames arrive while 2000 leave: about 2000 queue, 200 kB holds about 190
    assert 1500 < sum(lost) < 2000
    assert summary["totals"]["switch_drops"] == sum(lost)
    assert all(s["frames_tx"] == 2000 for s in summary["streams"])
