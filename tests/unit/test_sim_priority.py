"""Which queue a simulated port puts a frame in (emulator/sim/port.py, emulator/sim/nodes.py).

The source (fabrics/spec.py DEFAULT_PRIORITY_DSCPS): NVIDIA's default RoCE configuration maps
CNPs (DSCP 48, switch priority 6) to traffic class 6, scheduled in strict priority, while RoCE
traffic (data, and the responder's ACKs and NAKs, which carry their QP's class) shares traffic
class 3 (Cumulus Linux user guide, "RDMA over Converged Ethernet - RoCE", Port ETS). So at a
port holding a data backlog a CNP leaves next, and an ACK leaves after the backlog. The emulated
fabric does the same with HTB classes (fabrics/queues.py htb_commands; tests/system/
test_priority_queue.py).
"""

from __future__ import annotations

from emulator.sim.engine import Simulator
from emulator.sim.nodes import Host
from emulator.sim.port import Frame, Port
from emulator.transport.packets import AckPacket, CnpPacket, DataPacket
from emulator.transport.wire import ECN_ECT0

RATE_BPS = 1e9
ROUTE = ("h1", "10.0.0.2", 49152, 0, -1)


class Sink:
    name = "h1"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.arrivals: list[tuple[str, float]] = []

    def receive(self, frame: Frame, port: Port) -> None:
        del port
        self.arrivals.append((type(frame.packet).__name__, self.sim.now))


def _host_and_port(**dscps: object) -> tuple[Simulator, Host, Port, Sink]:
    sim = Simulator()
    host = Host(sim, "h0", "10.0.0.1", **dscps)  # type: ignore[arg-type]
    port = Port(sim, "h0:eth0", rate_bps=RATE_BPS, delay_s=0.0, buffer_bytes=10**9)
    sink = Sink(sim)
    port.peer = sink
    return sim, host, port, sink


def _data(psn: int) -> DataPacket:
    return DataPacket(dest_qp=7, psn=psn, opcode=4, ack_req=False, payload_bytes=4096)


def test_a_cnp_overtakes_a_data_backlog_and_an_ack_waits_behind_it() -> None:
    sim, host, port, sink = _host_and_port()
    for psn in range(10):
        port.send(host._frame(_data(psn), ROUTE, data=True))
    port.send(host._frame(AckPacket(dest_qp=3, psn=0), ROUTE, data=False))
    port.send(host._frame(CnpPacket(dest_qp=3), ROUTE, data=False))
    sim.run(until_s=1.0)
    order = [kind for kind, _ in sink.arrivals]
    # the first data frame was already on the wire; the CNP goes next, the ACK last
    assert order == ["DataPacket", "CnpPacket", *["DataPacket"] * 9, "AckPacket"]


def test_the_classes_follow_the_dscps_not_the_packet_kind() -> None:
    # ACKs given the CNP's DSCP (transport.ack_dscp: 48) ride the priority queue too; with no
    # priority DSCPs (fabric.priority_dscps: []) the CNP waits behind the data like the rest
    sim, host, port, sink = _host_and_port(ack_dscp=48)
    for psn in range(3):
        port.send(host._frame(_data(psn), ROUTE, data=True))
    port.send(host._frame(AckPacket(dest_qp=3, psn=0), ROUTE, data=False))
    sim.run(until_s=1.0)
    assert [k for k, _ in sink.arrivals] == ["DataPacket", "AckPacket", "DataPacket", "DataPacket"]

    sim, host, port, sink = _host_and_port(priority_dscps=frozenset())
    for psn in range(3):
        port.send(host._frame(_data(psn), ROUTE, data=True))
    port.send(host._frame(CnpPacket(dest_qp=3), ROUTE, data=False))
    sim.run(until_s=1.0)
    assert [k for k, _ in sink.arrivals][-1] == "CnpPacket"


def test_only_the_data_queue_counts_for_the_buffer() -> None:
    # the priority class has its own queue: a CNP neither fills nor is refused by the data buffer
    sim = Simulator()
    host = Host(sim, "h0", "10.0.0.1")
    port = Port(sim, "s0:p", rate_bps=RATE_BPS, delay_s=0.0, buffer_bytes=10_000)
    port.peer = Sink(sim)
    for psn in range(3):
        port.send(host._frame(_data(psn), ROUTE, data=True))
    held = port.queued_bytes
    port.send(host._frame(CnpPacket(dest_qp=3), ROUTE, data=False))
    assert port.queued_bytes == held and port.drops == 0
    port.send(host._frame(AckPacket(dest_qp=3, psn=0), ROUTE, data=False))
    assert port.queued_bytes > held
    assert host._frame(_data(9), ROUTE, data=True).ecn == ECN_ECT0
