"""The receive queue pairs whose common path the C fabric takes (emulator/native/simfab_rqp.c).

A data packet that arrives in order and ends no message changes its responder's state and
nothing else but, if it asks for one, an ACK (receiver.py: on_data's first branch, _accept and
_ack), and with a CE mark the notification point's CNP and its CnpSent event. The C fabric takes
such a packet at the host and never hands it to Python, sends the CNP and the ACK as the host
would (the frames Host.receive sends; native.py builds their packets where a Python sender takes
them), and raises the event into the replay's list as its first append would (native.py
bind_events): a CE-marked packet is taken only for a receiver whose events go there. The Python
ReceiveQueuePair stays the queue pair: C keeps a copy of the few fields that decide the common
path and counts what it took; this side folds those counts into the receiver (`read`) before the
receiver handles any other packet of its own, and for every queue pair at the end of each run
call, and copies the receiver's state back to C (`write`) after it handled one. Between those points nothing reads a receiver (the replay's
MessageReceived handler reads only what the common path never changes: CE and reordering
counts), so every table is the one the Python path writes (tests/integration/test_sim_native.py).

A queue pair is taken only when its receiver can take the common path at all: descriptors, not
wire bytes (the host decodes those); no delivery record; no sender of the same number at the
same host (the host would wake it on every packet); a number of 24 bits at most one host claims.
"""

from __future__ import annotations

from typing import Any

from emulator.native.rqp_slot import fold_taken, write_state
from emulator.transport.packets import FIRST_OPCODES, LAST_OPCODES, AckPacket, CnpPacket
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES


def data_flags_table(lib: Any) -> tuple[int, ...]:
    """A data packet's opcode -> the DATA_FIRST / DATA_LAST flags C reads (simfab_api.h)."""
    return tuple(
        (lib.DATA_FIRST if op in FIRST_OPCODES else 0)
        | (lib.DATA_LAST if op in LAST_OPCODES else 0)
        for op in range(256)
    )


class ReceiveOffload:
    """The receivers C takes the common path of, by QP number, and their synchronisation."""

    def __init__(self, ffi: Any, lib: Any, fab: Any) -> None:
        self.ffi, self.lib, self.fab = ffi, lib, fab
        self.host_index: dict[str, int] = {}  # set by NativeSimulator.connect
        # where C raises events (NativeSimulator.bind_events; None: nowhere, CE stays Python's)
        self.events: list[Any] | None = None
        assert lib.DATA_ACK_REQ == 1  # NativePort.send ORs a packet's ack_req (a bool) in
        # qpn -> the receiver; its state in C is lib.fab_rqp(fab, qpn), looked up each time:
        # the table moves when it grows, so a pointer into it is not kept
        self.receivers: dict[int, ReceiveQueuePair] = {}
        self._dirty = ffi.new("int32_t **")

    @property
    def taken(self) -> int:
        """Data packets C took without handing them to Python."""
        return int(self.fab.rx_taken)

    def take(self, host_index: int, qp: ReceiveQueuePair, host: Any = None) -> bool:
        """Let C take `qp`'s common path at host `host_index` (False: it stays Python's), and
        with the host (nodes.Host) answer the packets that ask for an ACK as it would.
        While its receiver records deliveries C hands it every packet (common_path says so,
        and the receiver tells when recording is switched)."""
        slot = self.lib.fab_rqp(self.fab, qp.qpn)
        if slot == self.ffi.NULL:
            return False  # not a 24-bit QP number (or out of memory): Python's, as before
        if slot.host != -1:
            # a second host with this number: neither is taken (C keys by number alone)
            if qp.qpn in self.receivers:
                self.read(qp.qpn)  # what C took for the first is folded in before it leaves
                del self.receivers[qp.qpn]
            slot.host, slot.eligible = -2, 0
            return False
        slot.host = host_index
        if host is not None:
            self._answer_as(slot, host, qp)
        self.receivers[qp.qpn] = qp
        self.write(qp.qpn)
        qp.on_recording = lambda: self._sync(qp.qpn)
        return True

    def _answer_as(self, slot: Any, host: Any, qp: ReceiveQueuePair) -> None:
        """How `host` sends `qp`'s ACK (nodes.Host.receive and _frame: from its NIC, on the
        receive route, as an ACK's DSCP and ECN say), for C to send it the same way."""
        peer, _address, sport, mhash, _tag = host._rx_route[qp.qpn]
        ack = AckPacket(qp.remote_qp, 0)
        slot.ack_port = host.nic.index
        slot.ack_src, slot.ack_dst = self.host_index[host.name], self.host_index[peer]
        slot.ack_sport, slot.ack_mhash = sport, mhash
        slot.ack_ecn, slot.ack_priority = host._ecn[1], host._priority[1]
        slot.ack_size = ack.udp_payload_bytes + IPV4_FRAME_OVERHEAD_BYTES
        slot.ack_dest_qp = qp.remote_qp
        slot.ack_ready = 1
        # its CNP on the same route (Host._frame of a CnpPacket), from its notification point
        if self.events is not None and qp.events is self.events:
            slot.cnp_ecn, slot.cnp_priority = host._ecn[2], host._priority[2]
            slot.cnp_size = CnpPacket(qp.remote_qp).udp_payload_bytes + IPV4_FRAME_OVERHEAD_BYTES
            slot.cnp_interval_s = qp.notification_point.interval_s
            slot.cnp_ready = 1

    def _sync(self, qpn: int) -> None:
        self.read(qpn)
        self.write(qpn)

    def read(self, qpn: int) -> None:
        """Fold what C took for `qpn` into its receiver."""
        if qpn not in self.receivers:
            return
        slot = self.lib.fab_rqp(self.fab, qpn)
        if not slot.packets:
            return
        receiver = self.receivers[qpn]
        if slot.ce_packets:
            receiver.took_marked(int(slot.ce_packets), int(slot.cnps), float(slot.last_cnp_s))
            slot.ce_packets = slot.cnps = 0
        fold_taken(receiver, slot)

    def write(self, qpn: int) -> None:
        """Copy the receiver's state to C after Python handled one of its packets."""
        receiver = self.receivers.get(qpn)
        if receiver is None:
            return
        slot = self.lib.fab_rqp(self.fab, qpn)
        write_state(receiver, slot)
        slot.last_cnp_s = receiver.notification_point.last_cnp_s

    def read_all(self) -> None:
        """Every receiver C took packets for since the last call, brought up to date."""
        n = self.lib.fab_rqp_dirty(self.fab, self._dirty)
        if n:
            for qpn in self.ffi.unpack(self._dirty[0], n):
                self.read(qpn)
            self.lib.fab_rqp_dirty_clear(self.fab)
