"""`engine.send_path: af_xdp` without root: the scenario keys and their refusals, how a port is
set up for a worker (depth, backlog, drain gap), the ledger's round trip through a worker's pipe,
the coordinator's handling of it, the send path's branch (bytes whose ICRCs are right for the IP
ids the port writes, native and Python), replies ahead of data, what a full backlog or a dead
link counts, reads routed to their rank like GRO reads, the pacing loop's bookkeeping, the run
metadata and the fidelity reasons from the ports' counters. The ports themselves are
tests/system/test_af_xdp.py's, the whole run tests/system/test_run_dut_af_xdp.py's."""

from __future__ import annotations

import errno
import ipaddress
import pickle
import struct
import threading
from collections import Counter
from multiprocessing import Pipe
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from emulator.backends.dut.backend import af_xdp_reasons
from emulator.backends.netns.backend import check_send_path
from emulator.engine.af_xdp import AfXdpConfig, RxRun, wire_bytes
from emulator.engine.af_xdp_setup import AfXdpUnavailable, max_frame_bytes
from emulator.engine.coordinator import Coordinator, _WorkerHandle
from emulator.engine.native_path import DataPath
from emulator.engine.params import EngineParams
from emulator.engine.plan import RankEndpoint
from emulator.engine.ranks import RecvConn, SendConn
from emulator.engine.send_errors import SendFailures
from emulator.engine.send_path import SendPath
from emulator.engine.xdp_path import ACK_BYTES, XdpPacer, XdpSender
from emulator.engine.xdp_ports import (
    DEPTH_S,
    PipeRecorder,
    XdpNic,
    backlog_limit,
    ledger_items,
    ledger_message,
    min_gap_s,
    port_config,
)
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.native import load
from emulator.native.acks import NativeReplies
from emulator.native.burst import NativeBursts
from emulator.scenario import load_scenario
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer, BurstWriter
from emulator.transport.packets import AckPacket, CnpPacket, Opcode
from emulator.transport.wire import FlowAddress, IcrcContext, parse_ipv4_packet

ROOT = Path(__file__).resolve().parents[2]
SRC, DST, SPORT = "10.0.0.1", "10.0.0.2", 50000
TOS = 26 << 2 | 2


# --- the scenario keys ---------------------------------------------------------------------


def _scenario(tmp_path: Path, name: str, engine: str) -> Any:
    """The shipped scenario with `engine` (YAML lines under `engine:`) over its engine keys."""
    data = yaml.safe_load((ROOT / "scenarios" / name).read_text())
    data["engine"] = {
        **(data.get("engine") or {}),
        **yaml.safe_load(f"engine:\n{engine}")["engine"],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_scenario(path)


def test_send_path_is_udp_gso_unless_a_dut_scenario_asks_for_af_xdp(tmp_path: Path) -> None:
    assert EngineParams().send_path == "udp_gso"
    dut = _scenario(
        tmp_path,
        "moe_mix_dut.yaml",
        "  send_path: af_xdp\n  af_xdp_burst_bytes: 30000\n  af_xdp_mode: generic\n",
    )
    assert dut.engine.send_path == "af_xdp" and dut.engine.af_xdp_burst_bytes == 30000
    assert dut.engine.af_xdp_mode == "generic" and not dut.engine.af_xdp_zero_copy
    check_send_path(dut)  # a DUT may
    with pytest.raises(ScenarioError) as e:
        _scenario(tmp_path, "moe_mix_dut.yaml", "  send_path: dpdk\n")
    assert "engine.send_path" in str(e.value)


def test_af_xdp_on_the_emulated_clos_is_refused_in_one_line_naming_the_key(
    tmp_path: Path,
) -> None:
    clos = _scenario(tmp_path, "moe_mix.yaml", "  send_path: af_xdp\n")
    with pytest.raises(ScenarioError) as e:
        check_send_path(clos)
    text = str(e.value)
    assert "\n" not in text and text.startswith("engine.send_path: af_xdp")
    assert "dut" in text
    check_send_path(_scenario(tmp_path, "moe_mix.yaml", "  send_path: udp_gso\n"))


# --- a worker's port: depth, backlog, drain gap ----------------------------------------------


def test_a_port_is_capped_at_the_rank_rate_with_the_engines_depth() -> None:
    p = EngineParams()
    slow = port_config(p, 4096, 200e6)
    largest = wire_bytes(max_frame_bytes(4096))
    assert slow.rate_bps == 200e6 and slow.depth_bytes() == 4 * largest  # four frames
    fast = port_config(p, 4096, 10e9)
    assert fast.depth_bytes() == int(10e9 / 8 * DEPTH_S)  # 200 us at the cap
    assert port_config(EngineParams(af_xdp_burst_bytes=30000), 4096, 10e9).depth_bytes() == 30000
    # the drain sleeps at most half the depth: a late wakeup finds the rest in the bucket
    assert min_gap_s(fast) == pytest.approx(DEPTH_S / 2)
    assert min_gap_s(slow) == pytest.approx(4 * largest * 8 / 200e6 / 2)
    assert min_gap_s(AfXdpConfig(1024)) == 0.0  # no cap: nothing to wait for
    # frames for twice the backlog's limit (three ticks at the cap) and a TX ring in flight
    assert slow.tx_frames == 4096
    huge = port_config(p, 4096, 100e9)  # 2 x 8942 packets x 2 chunks + 2048: 65536
    assert huge.tx_frames == 1 << 16
    assert backlog_limit(huge, p.tick_s) * 2 <= huge.tx_frames - huge.ring_size
    zero_copy = port_config(EngineParams(af_xdp_zero_copy=True, af_xdp_mode="native"), 1024, 1e9)
    assert zero_copy.zero_copy and zero_copy.xdp_mode == "native"


def test_the_backlog_holds_three_ticks_at_the_cap_within_its_frames() -> None:
    slow = port_config(EngineParams(), 4096, 200e6)
    # 3 ms at 200 Mb/s is 75 KB: 18 frames of 4194 wire bytes
    assert backlog_limit(slow, 0.001) == 18
    assert backlog_limit(port_config(EngineParams(), 1024, 1e6), 0.001) == 8  # at least eight
    assert backlog_limit(port_config(EngineParams(), 4096, 100e9), 0.001) == 8942
    # never more than its frames hold: a 4170-byte frame takes two 4096-byte chunks
    few = AfXdpConfig(4096, rate_bps=100e9, tx_frames=4096)
    assert backlog_limit(few, 0.001) == (4096 - few.ring_size) // 2


# --- the ledger through a worker's pipe ------------------------------------------------------

ENTRY = {"kind": "xdp", "netns": "emu-r0", "dev": "eth1", "ifindex": 4, "id": 77, "tag": "ab"}


def test_a_ledger_message_is_told_from_every_pickled_message() -> None:
    assert ledger_items(ledger_message([ENTRY])) == [ENTRY]
    for message in (("ready", {}), ("events", [], {}), ("ledger_ok", True)):
        assert ledger_items(pickle.dumps(message)) is None


def test_the_recorder_waits_for_the_record_before_anything_is_attached() -> None:
    mine, theirs = Pipe(duplex=True)
    got: list[Any] = []

    def answer(reply: tuple[Any, ...]) -> None:
        got.append(ledger_items(theirs.recv_bytes()))
        theirs.send(reply)

    recorder = PipeRecorder(mine, timeout_s=10.0)
    t = threading.Thread(target=answer, args=(("ledger_ok", True),))
    t.start()
    recorder.record([ENTRY])
    t.join()
    assert got == [[ENTRY]] and recorder.recorded is True
    t = threading.Thread(target=answer, args=(("ledger_failed", "OSError: disk full"),))
    t.start()
    with pytest.raises(EnvironmentProblem, match="could not record an XDP attachment"):
        recorder.record([ENTRY])
    t.join()
    silent = PipeRecorder(mine, timeout_s=0.01)  # nobody answers: never attached
    with pytest.raises(EnvironmentProblem, match="did not acknowledge"):
        silent.record([ENTRY])


def _coordinator(on_ledger: Any = None) -> tuple[Coordinator, _WorkerHandle, Any]:
    ranks = [RankEndpoint(0, "10.0.0.1"), RankEndpoint(1, "10.0.0.2")]
    c = Coordinator(ranks, [], engine=EngineParams(workers=1), on_ledger=on_ledger)
    near, far = Pipe(duplex=True)
    w = _WorkerHandle(0, SimpleNamespace(), near, (0, 1))  # type: ignore[arg-type]
    c.workers = [w]
    return c, w, far


def test_the_coordinator_records_a_workers_entries_then_acknowledges() -> None:
    recorded: list[dict[str, Any]] = []
    c, w, worker_end = _coordinator(recorded.extend)
    worker_end.send_bytes(ledger_message([ENTRY]))
    worker_end.send(("ready", {"pid": 1, "send_path": "af_xdp"}))
    c._drain(w)
    assert recorded == [ENTRY] and w.ready
    assert worker_end.recv() == ("ledger_ok", True)
    # no ledger (a bare coordinator, a benchmark): acknowledged as not recorded
    c, w, worker_end = _coordinator()
    worker_end.send_bytes(ledger_message([ENTRY]))
    c._drain(w)
    assert worker_end.recv() == ("ledger_ok", False)

    def broken(_items: Any) -> None:
        raise OSError("No space left on device")

    c, w, worker_end = _coordinator(broken)
    worker_end.send_bytes(ledger_message([ENTRY]))
    c._drain(w)
    assert worker_end.recv()[0] == "ledger_failed"


def test_a_workers_refusal_is_the_runs_one_line_refusal() -> None:
    c, w, worker_end = _coordinator()
    line = "engine.send_path af_xdp on eth1 (namespace emu-r0): the interface is down"
    worker_end.send(("refused", line))
    with pytest.raises(AfXdpUnavailable) as e:
        c._drain(w)
    assert str(e.value) == line and e.value.exit_code == 2


def test_the_metadata_says_af_xdp_with_every_ports_counters() -> None:
    c, w, _ = _coordinator()
    w.info = {"pid": 1, "gso": True, "send_path": "af_xdp"}
    port = {"interface": "eth1", "netns": "emu-r0", "counters": {"tx_packets": 5}}
    w.stats = {"af_xdp": [port]}
    meta = c.metadata()
    assert meta["send_path"] == "af_xdp"
    assert meta["af_xdp"]["ports"] == [port] and "read" in meta["af_xdp"]["rx_time"]
    w.info = {"pid": 1, "gso": True, "send_path": "udp_gso"}
    w.stats = {}
    meta = c.metadata()
    assert meta["send_path"] == "udp_gso" and "af_xdp" not in meta


# --- the send path's branch ------------------------------------------------------------------


class _Port:
    """An AfXdpPort as the send path sees it: what it was handed, segment by segment with the
    IP id it would write, and how many it takes."""

    def __init__(self, take: int | None = None, error: OSError | None = None) -> None:
        self.take = take
        self.error = error
        self.sends: list[dict[str, Any]] = []
        self.backlog = 0

    def send(
        self,
        flow: Any,
        tos: int,
        data: Any,
        nbytes: int,
        segment_bytes: int,
        ip_id_first: int = 0,
        now_ns: int = 0,
        *,
        ahead: bool = False,
    ) -> int:
        del now_ns
        if self.error is not None:
            raise self.error
        raw = bytes(data[:nbytes])
        segments = [raw[i : i + segment_bytes] for i in range(0, nbytes, segment_bytes)]
        self.sends.append(
            {"flow": flow, "tos": tos, "segments": segments, "first": ip_id_first, "ahead": ahead}
        )
        return len(segments) if self.take is None else self.take


def _on_the_wire(payload: bytes, tos: int, ip_id: int, src: str, dst: str) -> bytes:
    """IPv4 + UDP in front of a UDP payload, as xsk_write_headers writes them (DF, TTL 64)."""
    total = 28 + len(payload)
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        tos,
        total,
        ip_id,
        0x4000,
        64,
        17,
        0,
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    )
    return hdr + struct.pack("!HHHH", SPORT, 4791, 8 + len(payload), 0) + payload


def _valid_on_the_wire(send: dict[str, Any], src: str = SRC, dst: str = DST) -> None:
    for i, segment in enumerate(send["segments"]):
        wire = _on_the_wire(segment, send["tos"], send["first"] + i, src, dst)
        assert parse_ipv4_packet(wire).icrc_ok, f"segment {i}: ICRC not for IP id {i}"


class _Sender:
    """A SendPath and its XdpSender, native or Python, for one rank whose port is `port`."""

    def __init__(self, port: _Port, native: bool) -> None:
        self.counters: Counter[str] = Counter()
        self.gso_buf = BurstBuffer(8 * 65536)
        self.reply_buf = bytearray(65535)
        self.tos_ack = 0xB8
        self.tos_cnp = 48 << 2
        self.max_packet_wire_bytes = 4096 + 100
        data_path = DataPath(None, None, None, "engine.native: off")
        if native:
            module, why = load("burst")
            if module is None:
                pytest.skip(f"native module: {why}")
            bursts = NativeBursts(module, self.gso_buf)
            data_path = DataPath(bursts, None, NativeReplies(module, self.reply_buf), "native")
        failures = SendFailures(self.counters, 4096)
        self.xdp = XdpSender(
            self.counters,
            self._count_class,
            failures,
            data_path,
            self.gso_buf,
            self.reply_buf,
            latency=False,
            tos_ack=self.tos_ack,
            tos_cnp=self.tos_cnp,
            max_packet_wire_bytes=self.max_packet_wire_bytes,
        )
        self.recv_conns: dict[int, RecvConn] = {}
        params = SimpleNamespace(
            gso_max_segments=64,
            one_way_latency=False,
            burst_ticks=1.0,
            tick_s=1e-3,
            tdf=1.0,
            nic_quantum_bytes=0,
        )
        self.send = SendPath(
            params,  # type: ignore[arg-type]
            SimpleNamespace(gso=True),  # type: ignore[arg-type]
            self.counters,
            self._count_class,
            failures,
            self.xdp,
            data_path,
            self.gso_buf,
            self.reply_buf,
            {},
            self.recv_conns,
            tos_ack=self.tos_ack,
            tos_cnp=self.tos_cnp,
            max_packet_wire_bytes=self.max_packet_wire_bytes,
        )
        nic = SimpleNamespace(port=port, backlog_limit=12)
        self.rank = SimpleNamespace(spec=SimpleNamespace(rank=0), xdp=nic)
        self.classes: list[tuple[int, int, int]] = []

    def _count_class(self, tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None:
        self.classes.append((tos, packets, udp_bytes))

    def conn(self) -> SendConn:
        icrc = IcrcContext(FlowAddress(SRC, DST, SPORT, dscp=26))
        writer = BurstWriter(icrc, self.gso_buf, 64)
        return SendConn(0, self.rank, None, None, (DST, 4791), icrc, writer, tos=TOS, xdp="flow")  # type: ignore[arg-type]

    def recv_conn(self) -> RecvConn:
        icrc = IcrcContext(FlowAddress(DST, SRC, SPORT, dscp=0, ecn=0))
        return RecvConn(0, self.rank, None, None, (SRC, 4791), icrc, xdp="ack flow")  # type: ignore[arg-type]


def _burst(count: int, segment: int = 1040, last: int = 1024, psn: int = 100) -> Burst:
    ops = bytes([Opcode.SEND_MIDDLE]) * count
    return Burst(7, psn, count, segment, 1024, last, ops, [count - 1])


@pytest.mark.parametrize(
    ("native", "count", "last"),
    [
        (False, 1, 1024),
        (False, 64, 1024),
        (False, 5, 300),
        (True, 1, 1024),
        (True, 64, 1024),
        (True, 5, 300),
        # the native path polls several GSO buffers at once: IP ids run on through them
        (True, 300, 1024),
        (True, 300, 40),
    ],
)
def test_a_burst_is_laid_out_for_the_ip_ids_the_port_writes(
    native: bool, count: int, last: int
) -> None:
    port = _Port()
    sender = _Sender(port, native)
    used = sender.send._send_burst(sender.conn(), _burst(count, last=last))
    (send,) = port.sends
    assert send["flow"] == "flow" and send["tos"] == TOS and send["first"] == 0
    assert not send["ahead"] and len(send["segments"]) == count
    assert used == sum(len(s) for s in send["segments"])
    _valid_on_the_wire(send)
    assert sender.counters["data_packets_sent"] == count and not sender.counters["gso_sends"]
    assert sender.classes == [(TOS, count, used)]


def test_native_and_python_hand_the_port_the_same_bytes() -> None:
    sent = []
    for native in (False, True):
        port = _Port()
        sender = _Sender(port, native)
        sender.send._send_burst(sender.conn(), _burst(40, last=500))
        sent.append(port.sends[0]["segments"])
    assert sent[0] == sent[1]


def test_a_full_backlog_is_a_full_socket_buffer_and_a_dead_link_no_path() -> None:
    port = _Port(take=3)
    sender = _Sender(port, native=False)
    sender.send._send_burst(sender.conn(), _burst(10))
    assert sender.counters["send_buffer_full"] == 1
    assert sender.counters["xdp_segments_refused"] == 7
    assert sender.counters["data_packets_sent"] == 10  # sent as far as the transport knows
    down = _Sender(_Port(error=OSError(errno.ENETDOWN, "Network is down")), native=False)
    down.send._send_burst(down.conn(), _burst(4))
    down.xdp.send_replies(down.recv_conn(), [CnpPacket(3)])
    assert down.counters["send_no_path"] == 2
    other = _Sender(_Port(error=OSError(errno.EINVAL, "Invalid argument")), native=False)
    with pytest.raises(OSError):
        other.send._send_burst(other.conn(), _burst(4))


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_acks_leave_as_one_run_ahead_of_the_data_and_a_cnp_alone(native: bool) -> None:
    port = _Port()
    sender = _Sender(port, native)
    conn = sender.recv_conn()
    sender.recv_conns[9] = conn
    acks = [AckPacket(9, psn, msn=psn) for psn in range(10, 15)]
    sender.send.send_replies([*acks, CnpPacket(9)])
    run, cnp = port.sends
    assert run["ahead"] and cnp["ahead"]
    assert run["tos"] == sender.tos_ack and len(run["segments"]) == 5
    assert all(len(s) == ACK_BYTES for s in run["segments"])
    assert cnp["tos"] == sender.tos_cnp and len(cnp["segments"]) == 1
    for send in (run, cnp):
        _valid_on_the_wire(send, src=DST, dst=SRC)
    assert sender.classes == [(0xB8, 5, 5 * ACK_BYTES), (48 << 2, 1, len(cnp["segments"][0]))]


def test_the_arbiter_releases_no_more_than_the_backlog_holds() -> None:
    port = _Port()
    sender = _Sender(port, native=False)
    nic = sender.rank.xdp
    pw = sender.max_packet_wire_bytes
    # a budget of b bytes lets the arbiter send 1 + b // packet more packets (NicPacer)
    port.backlog = 5
    assert sender.xdp.budget(nic, 100 * pw) == 6 * pw  # 7 more: 12 in all
    assert sender.xdp.budget(nic, 2 * pw) == 2 * pw
    port.backlog = 11
    assert sender.xdp.budget(nic, 100 * pw) == 0  # one more
    port.backlog = 12
    assert sender.xdp.budget(nic, 100 * pw) == -1  # full: the NIC is line-rate bound


# --- receive and pace ------------------------------------------------------------------------


class _RxPort:
    def __init__(self, batches: list[list[tuple[RxRun, bytes]]]) -> None:
        self.batches = batches

    def receive(self, buf: bytearray) -> list[RxRun]:
        if not self.batches:
            return []
        runs = []
        for run, payload in self.batches.pop(0):
            buf[run.offset : run.offset + run.nbytes] = payload
            runs.append(run)
        return runs


class _Reader:
    """An XdpPacer over one port whose ranks are `ranks`, its reads recorded, not handled;
    `ticks` says whether the run started and when the next tick is due."""

    def __init__(
        self, nic: XdpNic, ranks: dict[str, Any], group: Any = None, ticks: Any = None
    ) -> None:
        self.counters: Counter[str] = Counter()
        self.reads: list[tuple[Any, ...]] = []
        self.after: list[float] = []
        self.ticked = 0
        self.pacer = XdpPacer(
            {nic: ranks},
            group,
            ticks or SimpleNamespace(started=False, clock=None, next_tick_wall=0.0),
            self.counters,
            bytearray(1 << 16),
            self._one_read,
            self.after.append,
            self._tick_now,
            latency=False,
        )

    def _one_read(self, rank: Any, now: float, data: Any, *args: Any) -> None:
        self.reads.append((rank, now, bytes(data), *args))

    def _tick_now(self) -> None:
        self.ticked += 1


def test_a_ports_runs_go_to_their_ranks_as_gro_reads() -> None:
    runs = [
        (RxRun(("10.0.0.9", 50001), "10.0.0.1", TOS, 0, 100, 40, 3), bytes(range(100))),
        (RxRun(("10.0.0.9", 50002), "10.0.0.3", 0, 100, 20, 20, 1), bytes(20)),
        (RxRun(("10.0.0.8", 50003), "10.0.0.7", 0, 120, 20, 20, 1), bytes(20)),
    ]
    nic = XdpNic(_RxPort([runs]), AfXdpConfig(1024), 8)  # type: ignore[arg-type]
    reader = _Reader(nic, {"10.0.0.1": "rank a", "10.0.0.3": "rank b"})
    assert reader.pacer.read(nic, 1.5)
    assert reader.reads == [
        ("rank a", 1.5, bytes(range(100)), 100, 40, TOS, 0, ("10.0.0.9", 50001)),
        ("rank b", 1.5, bytes(20), 20, 0, 0, 0, ("10.0.0.9", 50002)),  # one segment: gso 0
    ]
    assert reader.counters["xdp_not_for_a_rank"] == 1
    assert not reader.pacer.read(nic, 1.6)


class _Group:
    def __init__(self, results: list[tuple[int, list[Any]]]) -> None:
        self.results = results
        self.backlog = 1

    def drain(self, timeout_s: float, *, stop_on_rx: bool) -> tuple[int, list[Any]]:
        assert timeout_s > 0 and stop_on_rx
        return self.results.pop(0)


class _Loop:
    def __init__(self) -> None:
        self.soon: list[Any] = []

    def call_soon(self, callback: Any) -> str:
        self.soon.append(callback)
        return "handle"


def _pacer(results: list[tuple[int, list[Any]]], due_in_s: float) -> tuple[_Reader, _Group]:
    import time

    group = _Group(results)
    ticks = SimpleNamespace(
        started=True,
        clock=SimpleNamespace(now=lambda: 2.0),
        next_tick_wall=time.perf_counter() + due_in_s,
    )
    nic = XdpNic(_RxPort([]), AfXdpConfig(1024), 8)  # type: ignore[arg-type]
    return _Reader(nic, {}, group, ticks), group


def test_pacing_stops_when_the_backlog_is_sent_and_counts_a_dead_link() -> None:
    reader, group = _pacer([(5, [("nic", errno.ENETDOWN)]), (0, [])], due_in_s=60.0)
    reader.pacer.pace()
    assert reader.counters["send_no_path"] == 1 and not group.results
    assert reader.ticked == 0  # all sent before the tick: it comes on its own timer
    assert not reader.pacer._draining


def test_pacing_up_to_the_tick_starts_the_tick_at_once() -> None:
    reader, _ = _pacer([], due_in_s=-0.001)  # the tick is due: nothing to drain
    reader.pacer.pace()
    assert reader.ticked == 1


# --- fidelity --------------------------------------------------------------------------------


def test_the_ports_counters_give_fidelity_reasons() -> None:
    clean = {"interface": "eth1", "netns": None, "counters": {"tx_packets": 9, "rx_packets": 9}}
    assert af_xdp_reasons({"af_xdp": {"ports": [clean]}}) == []
    assert af_xdp_reasons({}) == []
    bad = {
        "interface": "eth2",
        "netns": "emu-r1",
        "counters": {
            "rx_dropped": 2,
            "rx_fill_ring_empty_descs": 1,
            "no_socket_passed": 3,
            "tx_backlog_full": 4,
        },
    }
    reasons = af_xdp_reasons({"af_xdp": {"ports": [clean, bad]}})
    assert len(reasons) == 3
    assert all(r.startswith("af_xdp port eth2 (namespace emu-r1): ") for r in reasons)
    assert "rx_dropped 2, rx_fill_ring_empty_descs 1" in reasons[0]
    assert "3 RoCEv2 packets" in reasons[1] and "tx_backlog_full 4" in reasons[2]
