"""The engine's choice of data path (engine.native) and the native send's error handling: the
same counters and refusals as the Python path's, from -errno instead of an OSError."""

from __future__ import annotations

import errno
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

import emulator.engine.native_path as native_path
from collectors.report import summary_table
from emulator.engine.native_path import DataPath, choose_data_path, summarize
from emulator.engine.send_errors import SendFailures
from emulator.engine.send_path import SendPath
from emulator.errors import EnvironmentProblem
from emulator.native import load
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.packets import AckPacket, CnpPacket
from emulator.transport.wire import FlowAddress, IcrcContext, encode

MODULE, WHY_NOT = load("burst")


def test_off_is_the_python_path_and_says_so() -> None:
    path = choose_data_path("off", BurstBuffer(1024), bytearray(1024), bytearray(1024), 64)
    assert path.bursts is None and path.reader is None and path.replies is None
    assert path.to_json() == {"path": "python", "reason": "engine.native: off"}


def test_a_missing_module_falls_back_under_auto_and_refuses_under_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    why = "emulator.native._burst is not built (./setup.sh builds it)"
    monkeypatch.setattr(native_path, "load", lambda name: (None, why))
    auto = choose_data_path("auto", BurstBuffer(1024), bytearray(1024), bytearray(1024), 64)
    assert auto.to_json() == {"path": "python", "reason": why}
    with pytest.raises(EnvironmentProblem, match=r"engine.native: on, but .*not built"):
        choose_data_path("on", BurstBuffer(1024), bytearray(1024), bytearray(1024), 64)


def test_a_failed_self_check_falls_back_and_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_path, "load", lambda name: (object(), ""))
    monkeypatch.setattr(native_path, "self_check", lambda module, max_segments: "it differs")
    path = choose_data_path("auto", BurstBuffer(1024), bytearray(1024), bytearray(1024), 64)
    assert path.bursts is None
    assert path.reason == "emulator.native._burst failed its self-check: it differs"


@pytest.mark.skipif(MODULE is None, reason=f"native path absent: {WHY_NOT}")
def test_auto_takes_the_built_module() -> None:
    path = choose_data_path(
        "auto", BurstBuffer(65535 * 2), bytearray(65535 * 2), bytearray(65535), 64
    )
    assert path.bursts is not None and path.reader is not None and path.replies is not None
    assert path.name == "native"
    assert (
        choose_data_path(
            "on", BurstBuffer(65535 * 2), bytearray(65535 * 2), bytearray(65535), 64
        ).name
        == "native"
    )


def test_the_runs_data_path_from_its_workers() -> None:
    native = {"path": "native", "reason": "self-checked"}
    python = {"path": "python", "reason": "engine.native: off"}
    assert summarize([native, native]) == native
    assert summarize([native, python]) == {
        "path": "mixed",
        "reason": "engine.native: off; self-checked",
    }
    assert summarize([{}, {}])["path"] == "unknown"


class _Flow:
    """A NativeFlow whose C calls return what the kernel would have: `results`, one per GSO
    buffer of a send (bytes taken or -errno)."""

    def __init__(self, *results: int) -> None:
        self.results = list(results)
        self.calls: list[str] = []

    def layout_send(self, burst: Burst, departed_ns: int, spacing_ns: int, per_buffer: int) -> int:
        self.calls.append(f"layout_send {per_buffer}")
        return len(self.results)

    def write(self, burst: Burst, **kw: Any) -> int:
        self.calls.append(f"write {kw.get('ids_every', 0)}")
        return burst.wire_bytes

    def send(self, used: int, segment_bytes: int, per_buffer: int) -> int:
        self.calls.append(f"send {used} {segment_bytes} {per_buffer}")
        return len(self.results)


class _Conn(SimpleNamespace):
    __hash__ = object.__hash__  # a SendConn: hashed by identity (dataclass eq=False)


class _NativeSender(SendPath):
    """A SendPath on the native path whose C calls are `flow`'s, with one socket queue pair."""

    def __init__(self, flow: _Flow) -> None:
        counters: Counter[str] = Counter()
        self.tally: list[tuple[int, int, int, bool]] = []  # what it counts per traffic class
        params = SimpleNamespace(
            gso_max_segments=64,
            one_way_latency=False,
            burst_ticks=1.0,
            tick_s=1e-4,
            tdf=1.0,
            nic_quantum_bytes=0,
        )
        super().__init__(
            params,  # type: ignore[arg-type]
            SimpleNamespace(gso=True),  # type: ignore[arg-type]
            counters,
            lambda tos, count, nbytes, *, sent: self.tally.append((tos, count, nbytes, sent)),
            SendFailures(counters, path_mtu_bytes=1024),
            SimpleNamespace(budget=None, send_burst=None, send_replies=None),  # type: ignore[arg-type]
            DataPath(object(), None, object(), "test"),  # type: ignore[arg-type]
            BurstBuffer(4 * 65536),
            bytearray(65535),
            {},
            {},
            tos_ack=0xB8,
            tos_cnp=0xB8,
            max_packet_wire_bytes=1024 + 100,
        )
        self.conn = _Conn(
            tos=0,
            tos_cmsgs=(),
            dest=("10.0.0.2", 4791),
            rank=SimpleNamespace(spec=SimpleNamespace(rank=3)),
            xdp=None,  # a socket's queue pair, not an AF_XDP port's
            entropy=None,  # one source port (transport.entropy per_qp)
        )
        self._native_flows = {self.conn: flow}  # type: ignore[dict-item]


def _burst(count: int = 4, last_payload: int = 1024) -> Burst:
    return Burst(1, 0, count, 1040, 1024, last_payload, bytes(count), [count - 1])


@pytest.mark.parametrize(
    ("result", "counter"),
    [
        (4 * 1040, "gso_sends"),
        (-errno.EAGAIN, "send_buffer_full"),
        (-errno.ENOBUFS, "send_no_buffers"),
        (-errno.ENETUNREACH, "send_no_path"),
        (-errno.EHOSTUNREACH, "send_no_path"),
    ],
)
def test_native_send_results_count_as_the_python_paths(result: int, counter: str) -> None:
    flow = _Flow(result)
    sender = _NativeSender(flow)
    assert sender._send_burst(sender.conn, _burst()) == 4 * 1040  # type: ignore[arg-type]
    assert flow.calls == ["layout_send 62"]  # 62 segments of 1040 bytes fill a 64 KB buffer
    assert sender.counters[counter] == 1
    assert sender.counters["data_packets_sent"] == 4
    if counter != "gso_sends":
        assert sender.counters["gso_sends"] == 0


def test_native_send_refuses_a_send_above_the_mtu_with_the_python_paths_message() -> None:
    sender = _NativeSender(_Flow(-errno.EMSGSIZE))
    with pytest.raises(EnvironmentProblem, match=r"rank 3: a 4160-byte RoCEv2 send .* MTU"):
        sender._send_burst(sender.conn, _burst())  # type: ignore[arg-type]
    other = _NativeSender(_Flow(-errno.EPERM))
    with pytest.raises(PermissionError):
        other._send_burst(other.conn, _burst())  # type: ignore[arg-type]


def test_a_shorter_last_segment_is_written_then_sent() -> None:
    flow = _Flow(3 * 1040 + 116)
    sender = _NativeSender(flow)
    burst = _burst(4, 100)
    sender._send_burst(sender.conn, burst)  # type: ignore[arg-type]
    assert flow.calls == ["write 62", f"send {burst.wire_bytes} 1040 62"]
    assert sender.counters["gso_sends"] == 1


def test_a_burst_of_several_gso_buffers_counts_each_as_a_send() -> None:
    """150 segments leave as GSO buffers of 62, 62 and 26; the second refused (a full socket
    buffer) is lost and counted as such, the others are sends; a buffer of one segment is a
    plain datagram, not a GSO send."""
    flow = _Flow(62 * 1040, -errno.EAGAIN, 26 * 1040)
    sender = _NativeSender(flow)
    assert sender._send_burst(sender.conn, _burst(150)) == 150 * 1040  # type: ignore[arg-type]
    assert sender.counters["gso_sends"] == 2 and sender.counters["send_buffer_full"] == 1
    assert sender.counters["data_packets_sent"] == 150
    lone = _NativeSender(_Flow(62 * 1040, 1040))
    lone._send_burst(lone.conn, _burst(63))  # type: ignore[arg-type]
    assert lone.counters["gso_sends"] == 1
    too_big = _NativeSender(_Flow(62 * 1040, -errno.EMSGSIZE))
    # the refused buffer's size in the message: 11 segments of 1040 bytes
    with pytest.raises(EnvironmentProblem, match=r"a 11440-byte RoCEv2 send"):
        too_big._send_burst(too_big.conn, _burst(73))  # type: ignore[arg-type]


def test_the_printed_summary_says_which_data_path_ran() -> None:
    def printed(data_path: dict[str, str]) -> list[str]:
        return summary_table({"collectives": {}, "engine": {"data_path": data_path}}).splitlines()

    native = printed({"path": "native", "reason": "C burst layout and GSO send, self-checked"})
    assert "engine data path: native" in native
    python = printed({"path": "python", "reason": "engine.native: off"})
    assert "engine data path: python (engine.native: off)" in python
    assert not any("data path" in line for line in printed({"path": "unknown", "reason": "x"}))
    assert "data path" not in summary_table({"collectives": {}})


class _AckFlow:
    """A NativeAckFlow whose send returns `result` (bytes taken or -errno)."""

    def __init__(self, result: int | None = None) -> None:
        self.result = result
        self.sends: list[list[int]] = []

    def send(self, acks: list[AckPacket]) -> int:
        self.sends.append([a.psn for a in acks])
        return 20 * len(acks) if self.result is None else self.result


class _Socket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendmsg(self, buffers: list[bytes], *_args: Any) -> int:
        self.sent.append(b"".join(buffers))
        return len(self.sent[-1])


def _replier(flow: _AckFlow) -> tuple[_NativeSender, Any]:
    sender = _NativeSender(_Flow())
    conn = _Conn(
        rank=SimpleNamespace(spec=SimpleNamespace(rank=4)),
        sock=_Socket(),
        dest=("10.0.0.1", 4791),
        icrc=IcrcContext(FlowAddress("10.0.0.2", "10.0.0.1", 50000)),
        xdp=None,  # a socket's queue pair, not an AF_XDP port's
    )
    sender.recv_conns[5] = conn
    sender._native_ack_flows = {conn: flow}  # type: ignore[dict-item]
    return sender, conn


def test_native_acks_of_a_read_leave_in_one_send_and_count_as_the_python_paths() -> None:
    flow = _AckFlow()
    sender, conn = _replier(flow)
    acks = [AckPacket(5, psn) for psn in (15, 31, 47)]
    sender.send_replies([*acks, CnpPacket(5), AckPacket(5, 63)])
    assert flow.sends == [[15, 31, 47], [63]]  # the CNP between them goes through the codec
    assert conn.sock.sent == [encode(CnpPacket(5), conn.icrc, 0)]
    cnp = len(conn.sock.sent[0])
    assert sender.tally == [(0xB8, 3, 3 * 20, True), (0xB8, 1, cnp, True), (0xB8, 1, 20, True)]
    refused, _ = _replier(_AckFlow(-errno.ENOBUFS))
    refused.send_replies(acks)
    assert refused.counters["send_no_buffers"] == 1
