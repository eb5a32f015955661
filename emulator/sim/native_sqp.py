"""The hosts' NIC arbiters and the send queue pairs' granted packets in the C fabric
(emulator/native/simfab_sqp.c).

A host's round robin over its active send queue pairs (nodes.Host._pull) runs in C. Python
describes each queue pair in the ring with a grant (emulator.transport.grant): the new packets C
may send for it at their pacing times with nothing but sending changing it, and when it is due or
whether it then has nothing to send. C sends granted packets with no Python packet object (their
frames carry the BTH fields; `packet` builds the DataPacket a Python receiver needs) and hands
the whole pull to Python when the round robin reaches a queue pair that is due and not granted
(the host's on_idle, its Python pull, which reads and writes the ring here).

Python folds what C sent into a queue pair (`fold`) before it reads it: the host folds the one
it revokes, grants or settles (the replay settles a queue pair before it reads its counts), its
Python pull folds the queue pairs in its ring first, and the fabric's run loop folds everything at
the end of each run call. It revokes a queue pair's grant before it changes the queue pair (an ACK, a CNP, a
timer, a post, a packet its own pull sends) and grants again after (`grant`). So every queue
pair, event and table is the one the Python host's path gives (tests/integration/
test_sim_native.py: the C fabric's results against the Python fabric's, bit for bit).

A host is arbitrated here unless it carries real encoded bytes; a queue pair gets packets
granted only while its host captures nothing and its packets carry one source port (per-packet
entropy picks one per packet in Python).

Its timers are armed here (`arm`: in the heap where sim.at would put them), and C hands one to
Python (`fire`: Host._timer) only when it is not stale. A DCQCN queue pair whose events go to the
replay's list has its reaction point in its slot (native_dcqcn.NativeReactionPoint is its
controller's from its first grant on), and C runs a timer only that controller acts on
(simfab_sqp.c sqp_timer), which `fold` then reads back: the pacing clock and the timer armed.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from emulator.sim import native_dcqcn
from emulator.transport.grant import Decision, decide, fold, next_psn, opcodes
from emulator.transport.packets import (
    AETH_ACK,
    RETH_OPCODES,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
)
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES

ACKNOWLEDGE = int(Opcode.ACKNOWLEDGE)
CNP = int(Opcode.CNP)

if TYPE_CHECKING:
    from emulator.sim.nodes import Host
    from emulator.transport.sender import SendQueuePair


class SendOffload:
    """The hosts whose arbiters run in C, their send queue pairs' slots, and the folding."""

    def __init__(self, ffi: Any, lib: Any, fab: Any, host_index: dict[str, int]) -> None:
        self.ffi, self.lib, self.fab = ffi, lib, fab
        self.host_index = host_index  # a host's name -> its number (a frame's src and dst)
        n_hosts = len(host_index)
        if lib.fab_hosts(fab, n_hosts):
            raise MemoryError("the native simulated fabric: out of memory")
        self.python, self.granted = lib.SQP_PYTHON, lib.SQP_GRANTED
        self.qps: list[SendQueuePair] = []  # by slot id
        self.hosts: list[Host | None] = []  # the host that armed each one's timer
        # the replay's event list (NativeSimulator.bind_events): a queue pair whose events go
        # there may have its DCQCN timers run in C (they raise RateChanged into it)
        self.events: list[Any] | None = None
        self._slots: list[Any] = []  # the C slot of each (they never move)
        self._ids: dict[SendQueuePair, int] = {}
        self._ring = ffi.new("int32_t **")
        self._dirty = ffi.new("int32_t **")

    @property
    def sent(self) -> int:
        """Data packets C sent from grants."""
        return int(self.fab.tx_granted)

    @property
    def timers(self) -> int:
        """DCQCN timers of granted queue pairs C ran (simfab_sqp.c sqp_timer)."""
        return int(self.fab.timers_in_c)

    def arbitrate(self, host: Host, index: int, nic_index: int) -> None:
        """Run `host`'s round robin here (host number `index`, its NIC port `nic_index`)."""
        h = self.lib.fab_host(self.fab, index)
        h.nic = nic_index
        self.fab.ports[nic_index].arbiter = index
        host.arbiter = index
        host.send_offload = self

    def _slot(self, qp: SendQueuePair) -> tuple[int, Any]:
        i = self._ids.get(qp)
        if i is None:
            i = len(self.qps)
            s = self.lib.fab_sqp(self.fab, i)
            if s == self.ffi.NULL:
                raise MemoryError("the native simulated fabric: out of memory")
            self._ids[qp] = i
            self.qps.append(qp)
            self.hosts.append(None)
            self._slots.append(s)
            return i, s
        return i, self._slots[i]

    # -- the round robin -------------------------------------------------------------------
    def pull(self, host: Host) -> None:
        """Host._kick's pull: in C, or in Python when C cannot decide. (What C sends is folded
        in where Python next reads a queue pair: see fold_dirty.)"""
        if self.lib.fab_host_pull(self.fab, host.arbiter):
            host._pull()

    def load_ring(self, host: Host) -> None:
        """Before Python's pull: the ring as Host._active (its queue pairs up to date: the pull
        reads no other), and the wake-up."""
        n = self.lib.fab_ring_get(self.fab, host.arbiter, self._ring)
        if n < 0:
            raise MemoryError("the native simulated fabric: out of memory")
        ids = self.ffi.unpack(self._ring[0], n)
        slots = self._slots
        for i in ids:
            if slots[i].sent or slots[i].rp_dirty:
                self._fold(i)
        qps = self.qps
        host._active = deque(qps[i] for i in ids)
        host._active_set = {qp.qpn for qp in host._active}
        host._wakeup_at = self.lib.fab_host(self.fab, host.arbiter).wakeup_at

    def store_ring(self, host: Host) -> None:
        """After Python's pull: its ring back. The queue pairs its pull only looked at keep
        their grants (looking changes nothing); those that left the ring are Python's again."""
        ids = [self._ids[qp] for qp in host._active]
        if self.lib.fab_ring_set(self.fab, host.arbiter, self.ffi.new("int32_t[]", ids), len(ids)):
            raise MemoryError("the native simulated fabric: out of memory")

    def wake(self, host: Host, when_s: float) -> None:
        """Python's pull schedules the host's wake-up (C runs it)."""
        host._wakeup_at = when_s
        self.lib.fab_host_wake(self.fab, host.arbiter, when_s)

    def activate(self, host: Host, qp: SendQueuePair) -> None:
        """Host._activate: into the ring if it is not there and has something to send."""
        i, s = self._slot(qp)
        if (
            not s.in_ring
            and qp.next_transmit_s() is not None
            and self.lib.fab_ring_append(self.fab, host.arbiter, i)
        ):
            raise MemoryError("the native simulated fabric: out of memory")

    # -- timers ------------------------------------------------------------------------------
    def arm(self, host: Host, qp: SendQueuePair, when_s: float) -> None:
        """Host._arm_timer: `qp`'s timer at when_s, in the heap where sim.at would put it; C
        runs it (`fire`) unless an earlier one replaced it or it ran (Host._timer's stale
        check, made in C from the slot's timer_at, Host._timer_at's copy)."""
        i, _ = self._slot(qp)
        self.hosts[i] = host
        self.lib.fab_sqp_timer(self.fab, i, when_s)

    def disarm(self, qp: SendQueuePair) -> None:
        """Host._timer ran `qp`'s timer: none armed until the next `arm`."""
        self._slot(qp)[1].timer_at = math.inf

    def fire(self, i: int) -> None:
        """C found slot i's timer due and left it to Python (RET_TIMER)."""
        host = self.hosts[i]
        assert host is not None
        s = self._slots[i]
        if s.sent or s.rp_dirty:
            self._fold(i)  # what C changed, before Host._timer reads it
        host._timer(self.qps[i])

    # -- grants ------------------------------------------------------------------------------
    def settle(self, qp: SendQueuePair) -> None:
        """Fold in what C sent for `qp` (Host.settle: a reader outside the host's own paths)."""
        i = self._ids.get(qp)
        if i is not None and (self._slots[i].sent or self._slots[i].rp_dirty):
            self._fold(i)

    def revoke(self, qp: SendQueuePair) -> None:
        """Python is about to change `qp`: C sends nothing more for it until `grant`."""
        i, s = self._slot(qp)
        if s.sent or s.rp_dirty:
            self._fold(i)
        s.state = self.python
        s.remaining = 0

    def grant(self, host: Host, qp: SendQueuePair) -> None:
        """Describe `qp` to C after Python changed it: the packets C may send for it, when it is
        due, or that it has nothing to send (emulator.transport.grant: the fields of its
        SendGrant, read from the queue pair itself)."""
        i, s = self._slot(qp)
        if s.sent or s.rp_dirty:
            self._fold(i)
        if s.qpn < 0:  # once: whether its reaction point moves to C (the slot holds it)
            s.qpn = qp.qpn
            cc: Any = qp.cc
            rp = getattr(cc, "reaction_point", None)
            if rp is not None and self.events is not None and qp.events is self.events:
                address = self.ffi.addressof(s, "rp")
                cc.reaction_point = native_dcqcn.NativeReactionPoint(
                    rp, self.ffi, self.lib, address, self.fab
                )
                s.has_rp = 1
        if s.has_rp:
            self._rto_into(qp, s)
        count = 0
        # a capture records each packet's bytes, and per-packet entropy picks each one's port
        if host.capture is None and qp.qpn not in host._qp_entropy:
            d = decide(qp, now=host.sim.now, timer_armed_s=host._timer_at.get(qp.qpn, math.inf))
            count = d.granted
        if count:
            self._write(host, qp, s, d)
            s.after_idle = d.after_idle
        else:
            s.after_idle = qp.next_transmit_s() is None
        s.remaining = s.granted = count
        s.next_tx_s = qp.pacing_due_s
        s.state = self.granted

    def _write(self, host: Host, qp: SendQueuePair, s: Any, d: Decision) -> None:
        """The slot's fields as grant() would describe them (SendGrant's, the same order)."""
        if s.host < 0:  # what does not change from grant to grant, once
            dst, _addr, sport, mhash, _tag = host._qp_route[qp.qpn]
            ops = opcodes(qp)
            s.host = host.arbiter
            s.dst = self.host_index[dst]
            s.sport, s.mhash = sport, mhash
            s.ecn, s.priority = host._ecn[0], host._priority[0]
            s.dest_qp, s.mtu = qp.dest_qp, qp._mtu
            s.opcodes = ops
            s.reth_mask = sum(1 << j for j, op in enumerate(ops) if op in RETH_OPCODES)
            s.frame_overhead = IPV4_FRAME_OVERHEAD_BYTES
            s.pace_overhead = qp._overhead
            s.ack_every = qp._ack_every
            s.max_burst_s = qp._max_burst_s
        m = d.message
        tag = host.message_tags.get(m.message_id)
        s.tag = host._qp_route[qp.qpn][4] if tag is None else tag
        s.flow = m.message_id
        s.msg_packets, s.msg_bytes, s.k, s.psn = m.packets, m.size_bytes, m.sent, next_psn(qp)
        s.ack_next, s.ack_last = d.ack_next, d.ack_last
        s.last_tx_s, s.last_tx_bits, s.rate_bps = qp._last_tx_s, qp._last_tx_bits, qp.cc.rate_bps
        s.cc_deadline_s, s.cc_slack_s, s.byte_budget = d.quiet
        s.granted_bytes = 0

    # -- folding -------------------------------------------------------------------------------
    def fold_dirty(self) -> None:
        """Every queue pair C sent for since the last call, brought up to date."""
        n = self.lib.fab_sqp_dirty(self.fab, self._dirty)
        if n:
            for i in self.ffi.unpack(self._dirty[0], n):
                self._fold(i)
            self.lib.fab_sqp_dirty_clear(self.fab)

    def _fold(self, i: int) -> None:
        s = self._slots[i]
        qp = self.qps[i]
        count = s.sent
        if count:
            fold(
                qp,
                count=count,
                # a reaction point in C counted them itself (the slot holds its state)
                paced_bytes=0 if s.has_rp else s.sent_bytes,
                ack_k=s.ack_k,
                ack_sent_s=s.ack_sent_s,
                last_tx_s=s.last_tx_s,
                last_tx_bits=s.last_tx_bits,
                next_tx_s=s.next_tx_s,
            )
            if s.has_rp and s.ack_k >= 0:  # the retransmission timer it restarted
                s.rto_running = 1
                s.rto_base_s = max(s.ack_sent_s, s.last_progress_s)
            s.sent = 0
            s.sent_bytes = 0
            s.ack_k = -1
        if s.rp_dirty:  # a timer ran in C: the pacing clock and the timer it armed
            qp._next_tx_s = s.next_tx_s
            host = self.hosts[i]
            assert host is not None
            host._timer_at[qp.qpn] = s.timer_at
            s.rp_dirty = 0

    @staticmethod
    def _rto_into(qp: SendQueuePair, s: Any) -> None:
        """The retransmission timer as `qp` stands (C restarts it on the AckReq it sends)."""
        running = qp._rto_deadline_s() is not None
        s.rto_running = running
        s.rto_s = qp._rto_s
        s.last_progress_s = qp._last_progress_s
        if running:
            s.rto_base_s = max(qp._ack_req_sent_s, qp._last_progress_s)

    # -- a granted packet a Python receiver takes ---------------------------------------------
    @staticmethod
    def packet(out: Any) -> DataPacket | AckPacket | CnpPacket:
        """The packet of a frame C built: a grant's DataPacket (its fields as
        SendQueuePair._packet sets them), or a receive queue pair's ACK or CNP (native_rqp.py)."""
        opcode = out.opcode
        if opcode == ACKNOWLEDGE:
            return AckPacket(out.dest_qp, out.psn, AETH_ACK, out.msn)
        if opcode == CNP:
            return CnpPacket(out.dest_qp)
        ack_req = bool(out.data_flags & 1)  # DATA_ACK_REQ
        if out.opcode in RETH_OPCODES:
            return DataPacket(
                out.qpn,
                out.psn,
                out.opcode,
                ack_req,
                out.payload_bytes,
                out.offset,
                None,
                0,
                0,
                out.msg_bytes,
            )
        return DataPacket(out.qpn, out.psn, out.opcode, ack_req, out.payload_bytes, out.offset)
