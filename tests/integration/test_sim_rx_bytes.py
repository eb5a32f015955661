"""The simulation's received bytes per rank (the NIC rx counter of nic.parquet): what the host's
downlink sent, less the bytes of the frames lost on that link (issue 33: it subtracted the count
of lost frames from the bytes)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from emulator.backends.sim.backend import SimSession
from emulator.events import NicSamples
from emulator.scenario import load_scenario
from emulator.sim.port import Frame

SCENARIO = """\
name: rx_bytes
workload: {generate: {kind: allreduce, ranks: 2, size_bytes: 65536}}
fabric:
  kind: clos
  hosts_per_leaf: 2
  leaves: 1
  spines: 1
  host_link_gbps: 100
  fabric_link_gbps: 100
run: {backend: sim}
metrics: {prometheus: {enabled: false}}
"""
FRAME_BYTES = 1000


def session(tmp_path: Path) -> SimSession:
    path = tmp_path / "rx.yaml"
    path.write_text(SCENARIO)
    # the session's fabric and readings need only the scenario (no plan, no replay)
    return SimSession(SimpleNamespace(scenario=load_scenario(path)))  # type: ignore[arg-type]


def rx_bytes(s: SimSession, rank: int) -> int:
    (sample,) = [e for e in s._samples(s.fabric.sim.now) if isinstance(e, NicSamples)]
    return int(sample.bytes[sample.nics.index((rank, "rx"))])


def test_three_lost_1000_byte_frames_are_3000_bytes_not_received(tmp_path: Path) -> None:
    s = session(tmp_path)
    sim = s.fabric.sim
    src, dst = (h.name for h in s.fabric.hosts[:2])
    down = s._downlink(dst)  # the leaf's port toward rank 1
    received: list[Any] = []
    down.peer = SimpleNamespace(receive=lambda frame, port: received.append(frame))

    def send(count: int) -> None:
        for _ in range(count):
            down.send(Frame(src, dst, 49152, FRAME_BYTES, 0, b""))
        sim.run(until_s=sim.now + 1e-3)

    down.loss_probability = 1.0  # two lost to the link's loss draw
    send(2)
    down.loss_probability = 0.0
    # one lost on the wire: the cable goes down while the frame is on it
    down.send(Frame(src, dst, 49152, FRAME_BYTES, 0, b""))
    sim.at(sim.now + 1e-9, down.set_up, False)
    sim.run(until_s=sim.now + 1e-3)
    down.set_up(True)
    send(2)  # and two delivered
    assert len(received) == 2 and down.losses == 3
    assert down.tx_bytes == 5 * FRAME_BYTES
    assert rx_bytes(s, 1) == down.tx_bytes - 3 * FRAME_BYTES == 2 * FRAME_BYTES
