"""AF_XDP ports (emulator/engine/af_xdp.py) on a veth pair in copy mode: what leaves is valid
RoCEv2 and counted exactly, a rate cap holds over every 2 ms window of a capture, the other end
receives every payload through its own port with the right source and ToS, a frame with a wrong
IPv4 header checksum, UDP checksum or ICRC is counted and dropped, an interface that cannot do it
is refused in one line, and nothing stays attached after close, an exception or a
SIGKILL followed by `emulate clean`'s release.

Captures are taken on the receiving veth without a port there (an XDP program would take the
packets before the capture sees them; a copy-mode transmit skips the sender's own taps), with GRO
off so every packet is seen as it was sent. Rates are judged on the capture's timestamps against
the configured cap: correctness, never a wall-clock threshold.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from emulator.engine.af_xdp import (
    AfXdpConfig,
    AfXdpPort,
    AfXdpUnavailable,
    RxRun,
    probe,
    wire_bytes,
)
from emulator.engine.af_xdp_setup import attached_prog_id
from emulator.engine.sockets import SO_TIMESTAMPNS
from emulator.engine.testbed import PairInfo
from emulator.native import load
from emulator.transport.burst_wire import BurstBuffer, BurstWriter
from emulator.transport.packets import DataPacket, Opcode
from emulator.transport.params import TransportParams
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES, SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext, ipv4_packet, parse_ipv4_packet
from fabrics import ownership
from fabrics.iproute import in_netns
from fabrics.ownership import Ledger, clean_state
from tests.system.prereq import require

pytestmark = pytest.mark.system

SPORT = 49500
TOS = 26 << 2 | 2  # DSCP 26, ECT(0)


@pytest.fixture
def xdp_pair(veth_pair: PairInfo) -> Iterator[PairInfo]:
    """The veth pair with the AF_XDP extension built, GRO off on the receiving side."""
    mod, why = load("xsk")
    if mod is None:
        require(f"AF_XDP extension: {why}")
    subprocess.run(
        ["ip", "netns", "exec", veth_pair.receiver_ns, "ethtool", "-K", "b0", "gro", "off"],
        check=True,
        capture_output=True,
    )
    yield veth_pair


def payload_bursts(p: PairInfo, path_mtu: int, packets: int) -> Iterator[tuple[bytes, int]]:
    """Real RoCEv2 bursts of one QP (BurstWriter: ICRC for IP ids 0, 1, ... of each burst) as
    (payloads laid out back to back, segment size)."""
    transport = TransportParams(
        congestion_control="none", path_mtu_bytes=path_mtu, window_packets=1 << 20
    )
    qp = SendQueuePair(qpn=3, dest_qp=3, params=transport, line_rate_bps=1e15)
    qp.post_send(now=0.0, message_id=1, size_bytes=path_mtu * packets)
    address = FlowAddress(p.sender_addr, p.receiver_addr, SPORT, dscp=26, ecn=2)
    writer = BurstWriter(IcrcContext(address), BurstBuffer(65535 * 2), 64)
    while True:
        burst = qp.poll_burst(now=1.0, floor_s=0.0, max_packets=64, max_bytes=GSO_MAX_BUFFER_BYTES)
        if burst is None:
            return
        used = writer.write(burst)
        yield bytes(writer.buf[:used]), burst.segment_bytes


def send_all(port: AfXdpPort, p: PairInfo, path_mtu: int, packets: int) -> list[bytes]:
    """Send every burst through the port (bounded in time); returns the payloads sent."""
    flow = port.flow(p.sender_addr, p.receiver_addr, SPORT)
    sent: list[bytes] = []
    deadline = time.monotonic() + 60
    for data, segment in payload_bursts(p, path_mtu, packets):
        at = 0
        while at < len(data) and time.monotonic() < deadline:
            # the rest of a burst keeps its IP ids: the ICRCs were computed for them
            taken = port.send(flow, TOS, data[at:], len(data) - at, segment, at // segment)
            sent += [data[at + i * segment : at + (i + 1) * segment] for i in range(taken)]
            at += taken * segment
            if at < len(data):
                port.drain(0.01)
    port.drain(10.0)
    assert port.backlog == 0 and len(sent) == packets
    return sent


class Capture:
    """tcpdump with nanosecond timestamps into a pcap file, owned by its pid.

    A socket with SO_TIMESTAMPNS is held open meanwhile: while one exists the kernel stamps
    every received skb when the veth enqueues it (netif_rx, in the sender's sendto) rather
    than when the backlog is processed, so the capture's times are the send times
    (net.core.netdev_tstamp_prequeue, Documentation/admin-guide/sysctl/net.rst)."""

    def __init__(self, netns: str, ifname: str, path: Path):
        self.path = path
        with in_netns(netns):
            self.stamper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.stamper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        argv = ["ip", "netns", "exec", netns, "tcpdump", "-i", ifname, "-w", str(path)]
        argv += ["-s", "0", "-B", "262144", "-U", "--immediate-mode", "-n"]
        argv += ["--time-stamp-precision", "nano", "udp port 4791"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        if "listening" not in line:
            self.proc.kill()
            self.proc.wait(5)
            raise RuntimeError(f"tcpdump did not start: {line.strip()}")
        self.kernel_drops = -1

    def stop(self) -> list[tuple[int, bytes]]:
        """(timestamp ns, Ethernet frame) of every packet, once the file stopped growing."""
        size, deadline = -1, time.monotonic() + 5
        while time.monotonic() < deadline and self.path.stat().st_size != size:
            size = self.path.stat().st_size
            time.sleep(0.3)
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=10)
        self.stamper.close()
        for line in (err or "").splitlines():
            if "dropped by kernel" in line:
                self.kernel_drops = int(line.split()[0])
        return read_pcap(self.path)


def read_pcap(path: Path) -> list[tuple[int, bytes]]:
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    assert magic == 0xA1B23C4D, "expected a nanosecond pcap"
    out, at = [], 24
    while at + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, at)
        out.append((sec * 10**9 + frac, data[at + 16 : at + 16 + incl]))
        at += 16 + incl
    return out


def _scapy_icrc_ok(ip_packet: bytes) -> bool:
    again = IP(ip_packet).copy()
    again[BTH].icrc = None  # scapy recomputes it on build
    return raw(again)[-4:] == ip_packet[-4:]


@pytest.mark.parametrize("path_mtu", [1024, 4096], ids=["mtu1024", "mtu4096-multibuffer"])
def test_every_packet_is_valid_rocev2_and_counted(xdp_pair: PairInfo, tmp_path, path_mtu) -> None:
    p = xdp_pair
    packets = 3000
    capture = Capture(p.receiver_ns, p.receiver_if, tmp_path / "b0.pcap")
    try:
        # capped so that tcpdump on a busy 2-core machine keeps up (what is checked is bytes)
        config = AfXdpConfig(path_mtu_bytes=path_mtu, rate_bps=500e6)
        with AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config) as port:
            assert port.info["multi_buffer"] == (path_mtu == 4096)
            assert not port.info["zero_copy"]
            sent = send_all(port, p, path_mtu, packets)
            counters = port.counters()
    finally:
        frames = capture.stop()
    assert capture.kernel_drops == 0
    assert counters["tx_packets"] == counters["tx_taken"] == len(frames) == packets
    assert counters["tx_dropped"] == counters["tx_invalid_descs"] == 0
    assert counters["tx_frame_bytes"] == sum(len(f) for _, f in frames)
    ids = []
    for (_, frame), payload in zip(frames, sent, strict=True):
        d = parse_ipv4_packet(frame[14:])
        assert d.icrc_ok, f"bad ICRC on the wire (IP id {d.ip_id})"
        assert d.udp_payload == payload  # in order, byte for byte
        assert (d.address.src, d.address.dst, d.address.sport) == (
            p.sender_addr,
            p.receiver_addr,
            SPORT,
        )
        assert d.address.dscp == 26 and d.ecn == 2 and d.address.dont_fragment
        ids.append(d.ip_id)
    # each burst's segments carry IP ids 0, 1, 2, ... (what their ICRCs were computed for)
    assert ids[0] == 0 and all(b in (a + 1, 0) for a, b in itertools.pairwise(ids))
    assert max(ids) >= 10
    for _, frame in frames[::97] + frames[-1:]:  # scapy, the oracle, on a sample
        assert BTH in IP(frame[14:]) and _scapy_icrc_ok(frame[14:])


@pytest.mark.parametrize(
    ("rate_bps", "path_mtu", "packets"),
    [(100e6, 1024, 3000), (1e9, 4096, 6000)],
    ids=["100M", "1G"],
)
def test_rate_cap_holds_over_every_2ms_window(
    xdp_pair: PairInfo, tmp_path, rate_bps, path_mtu, packets
) -> None:
    p = xdp_pair
    config = AfXdpConfig(path_mtu_bytes=path_mtu, rate_bps=rate_bps)
    capture = Capture(p.receiver_ns, p.receiver_if, tmp_path / "b0.pcap")
    try:
        with AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config) as port:
            send_all(port, p, path_mtu, packets)
            counters = port.counters()
    finally:
        frames = capture.stop()
    assert capture.kernel_drops == 0 and len(frames) == packets == counters["tx_packets"]
    assert counters["tx_bucket_waits"] > 0  # the cap, not the machine, set the pace
    # The bucket lets through at most rate x W + depth in any window W of decisions; the
    # capture stamps each packet when the kernel sends it, a few microseconds after its
    # decision, or later if the sender is preempted in between, so what was decided but not
    # yet sent (at most one more depth) can join a window: rate x W + 2 x depth (xsk_tx.c, pump).
    window_ns = 2_000_000
    allowed = rate_bps / 8 * window_ns / 1e9 + 2 * config.depth_bytes()
    times = [t for t, _ in frames]
    costs = [wire_bytes(len(f)) for _, f in frames]
    worst, j, in_window = 0.0, 0, 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] <= t + window_ns:
            in_window += costs[j]
            j += 1
        worst = max(worst, in_window)
        in_window -= costs[i]
    assert worst <= allowed, f"{worst:.0f} wire bytes in a 2 ms window, bound {allowed:.0f}"
    # and over the whole capture (how close to the cap it gets depends on the machine: the
    # unit tests check that the bucket loses no tokens)
    span_s = (times[-1] - times[0]) / 1e9
    assert (sum(costs) - costs[-1]) * 8 <= rate_bps * span_s + 2 * config.depth_bytes() * 8


@pytest.mark.parametrize("path_mtu", [1024, 4096])
def test_the_other_end_receives_every_payload(xdp_pair: PairInfo, path_mtu) -> None:
    p = xdp_pair
    packets = 3000
    config = AfXdpConfig(path_mtu_bytes=path_mtu)
    with (
        AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config) as tx,
        AfXdpPort.open(p.receiver_if, p.receiver_ns, [p.receiver_addr], config) as rx,
    ):
        # ARP and ICMP still go through the kernel on both ends
        ping = ["ip", "netns", "exec", p.sender_ns, "ping", "-c", "1", "-W", "2", p.receiver_addr]
        assert subprocess.run(ping, capture_output=True, check=False).returncode == 0
        flow = tx.flow(p.sender_addr, p.receiver_addr, SPORT)
        got: list[bytes] = []
        buf = bytearray(1 << 20)
        sent: list[bytes] = []
        deadline = time.monotonic() + 60
        for data, segment in payload_bursts(p, path_mtu, packets):
            taken = tx.send(flow, TOS, data, len(data), segment)
            assert taken == -(-len(data) // segment)
            tx.drain(1.0)
            sent += [data[i : i + segment] for i in range(0, len(data), segment)]
            for run in rx.receive(buf):
                assert run.source == (p.sender_addr, SPORT) and run.dest == p.receiver_addr
                assert run.tos == TOS and run.segments == -(-run.nbytes // run.segment_bytes)
                chunk = bytes(buf[run.offset : run.offset + run.nbytes])
                got += [
                    chunk[i : i + run.segment_bytes]
                    for i in range(0, run.nbytes, run.segment_bytes)
                ]
        while len(got) < len(sent) and time.monotonic() < deadline:
            for run in rx.receive(buf):
                chunk = bytes(buf[run.offset : run.offset + run.nbytes])
                got += [
                    chunk[i : i + run.segment_bytes]
                    for i in range(0, run.nbytes, run.segment_bytes)
                ]
        counters = rx.counters()
    assert got == sent
    assert counters["rx_packets"] == counters["redirected"] == packets
    assert counters["rx_malformed"] == counters["rx_dropped"] == 0
    assert counters["frames_recycled"] >= packets
    assert counters["rx_runs"] < packets  # runs of several, like GRO reads
    assert counters["non_roce_passed"] >= 1  # the ping (and ARP) went to the kernel


def _one_line(e: AfXdpUnavailable, ifname: str) -> str:
    text = str(e)
    assert "\n" not in text and ifname in text and text.startswith("engine.send_path af_xdp on")
    return text


def test_interfaces_that_cannot_do_it_are_refused_in_one_line(xdp_pair: PairInfo) -> None:
    p = xdp_pair
    ns = p.sender_ns
    config = AfXdpConfig(path_mtu_bytes=1024)
    with pytest.raises(AfXdpUnavailable) as e:
        AfXdpPort.open("nosuch0", ns, [p.sender_addr], config)
    assert "no such interface" in _one_line(e.value, "nosuch0")
    subprocess.run(
        ["ip", "-n", ns, "link", "add", "a9", "type", "veth", "peer", "name", "a8"], check=True
    )
    with pytest.raises(AfXdpUnavailable) as e:
        AfXdpPort.open("a9", ns, [p.sender_addr], config)
    assert "down" in _one_line(e.value, "a9")
    with pytest.raises(AfXdpUnavailable) as e:
        AfXdpPort.open(p.sender_if, ns, ["10.1.2.3"], config)
    assert "10.1.2.3 is not an address" in _one_line(e.value, p.sender_if)
    subprocess.run(["ip", "-n", ns, "link", "set", p.sender_if, "mtu", "1500"], check=True)
    with pytest.raises(AfXdpUnavailable) as e:
        AfXdpPort.open(p.sender_if, ns, [p.sender_addr], AfXdpConfig(path_mtu_bytes=4096))
    assert "MTU 1500 is below" in _one_line(e.value, p.sender_if)
    subprocess.run(["ip", "-n", ns, "link", "set", p.sender_if, "mtu", "9000"], check=True)
    with AfXdpPort.open(p.sender_if, ns, [p.sender_addr], config) as first:
        with pytest.raises(AfXdpUnavailable) as e:
            AfXdpPort.open(p.sender_if, ns, [p.sender_addr], config)
        assert f"another XDP program (id {first.info['prog_id']})" in _one_line(
            e.value, p.sender_if
        )
        assert attached_prog_id(p.sender_if, ns) == first.info["prog_id"]  # left untouched
        with pytest.raises(AfXdpUnavailable) as e:
            first.flow(p.sender_addr, "10.77.0.99", SPORT)  # nobody answers ARP there
        assert "did not answer ARP" in _one_line(e.value, p.sender_if)
    with pytest.raises(AfXdpUnavailable) as e:
        AfXdpPort.open(p.sender_if, ns, [p.sender_addr], AfXdpConfig(1024, zero_copy=True))
    assert "zero-copy" in _one_line(e.value, p.sender_if)  # veth has no zero-copy AF_XDP
    assert attached_prog_id(p.sender_if, ns) == 0


def _loaded_programs() -> set[int]:
    out = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True, check=True)
    return {int(line.split(":")[0]) for line in out.stdout.splitlines() if line[:1].isdigit()}


def _gone(prog_id: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if prog_id not in _loaded_programs():
            return True
        time.sleep(0.05)
    return False


def test_nothing_stays_attached_after_close_or_an_exception(xdp_pair: PairInfo) -> None:
    p = xdp_pair
    config = AfXdpConfig(path_mtu_bytes=1024)
    port = AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config)
    prog = port.info["prog_id"]
    assert attached_prog_id(p.sender_if, p.sender_ns) == prog
    port.close()
    port.close()  # idempotent
    assert attached_prog_id(p.sender_if, p.sender_ns) == 0 and _gone(prog)
    with (
        pytest.raises(RuntimeError),
        AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config) as port,
    ):
        prog = port.info["prog_id"]
        raise RuntimeError("the run failed")
    assert attached_prog_id(p.sender_if, p.sender_ns) == 0 and _gone(prog)
    # the start-up probe opens and closes a port; the run's port opens right after it
    info = probe(p.sender_if, p.sender_ns, [p.sender_addr], config)
    assert info["xdp_mode"] == "native" and not info["zero_copy"]
    assert attached_prog_id(p.sender_if, p.sender_ns) == 0
    with AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config) as port:
        assert attached_prog_id(p.sender_if, p.sender_ns) == port.info["prog_id"]
    assert attached_prog_id(p.sender_if, p.sender_ns) == 0


_CHILD = """
import sys, time
from emulator.engine.af_xdp import AfXdpConfig, AfXdpPort
from fabrics.ownership import Ledger
ledger = Ledger.claim("dut")
port = AfXdpPort.open(sys.argv[1], sys.argv[2], [sys.argv[3]], AfXdpConfig(1024), ledger=ledger)
print(port.info["prog_id"], flush=True)
time.sleep(120)
"""


def test_a_killed_owner_leaves_nothing_after_clean(
    xdp_pair: PairInfo, fabric_env: str, tmp_path
) -> None:
    """SIGKILL: the BPF link dies with the process; `emulate clean` (clean_state) then finds
    the recorded program gone and removes the state file."""
    del fabric_env  # a private state file under tmp_path
    p = xdp_pair
    argv = [sys.executable, "-c", _CHILD, p.sender_if, p.sender_ns, p.sender_addr]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert child.stdout is not None
        prog = int(child.stdout.readline())
        assert attached_prog_id(p.sender_if, p.sender_ns) == prog
        state = tmp_path / "state.json"
        assert '"kind": "xdp"' in state.read_text()
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert attached_prog_id(p.sender_if, p.sender_ns) == 0
    outcome = clean_state(state)
    assert outcome is not None and outcome[1] == child.pid
    assert not state.exists() and _gone(prog)


def test_release_detaches_a_program_whose_link_is_still_held(
    xdp_pair: PairInfo, fabric_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger's release (what `emulate clean` runs, e.g. for a link a forked child still
    holds) detaches the recorded program through its BPF link, found by program id."""
    del fabric_env
    p = xdp_pair
    ledger = Ledger.claim("dut")
    port = AfXdpPort.open(
        p.sender_if, p.sender_ns, [p.sender_addr], AfXdpConfig(1024), ledger=ledger
    )
    # the program itself stays loaded while this process holds it: do not wait for its unload
    monkeypatch.setattr(ownership, "_programs_still_loaded", lambda *a, **k: [])
    try:
        assert attached_prog_id(p.sender_if, p.sender_ns) == port.info["prog_id"]
        assert [r["kind"] for r in ledger.resources] == ["xdp"]
        removed, remaining = ownership.release_resources(ledger.resources)
        assert attached_prog_id(p.sender_if, p.sender_ns) == 0
        assert remaining == [] and removed == [
            f"XDP program {port.info['prog_id']} on a0 in {p.sender_ns}"
        ]
    finally:
        port.close()
        ledger.path.unlink(missing_ok=True)


def test_a_link_going_down_is_a_lost_send_not_a_dead_port(xdp_pair: PairInfo) -> None:
    """ENETDOWN while the link is down (what the engine counts as send_no_path; the backlog's
    packets are dropped and counted), and sending works again once it is back up."""
    p = xdp_pair
    with AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], AfXdpConfig(1024)) as port:
        flow = port.flow(p.sender_addr, p.receiver_addr, SPORT)
        data, segment = next(payload_bursts(p, 1024, 64))
        link = ["ip", "-n", p.sender_ns, "link", "set", p.sender_if]
        subprocess.run([*link, "down"], check=True)
        with pytest.raises(OSError) as e:
            port.send(flow, TOS, data, len(data), segment)
        assert e.value.errno == errno.ENETDOWN
        # the backlog is dropped (counted); what already sat on the TX ring stays there (the
        # kernel sends it once the link is back: late duplicates the transport ignores)
        assert port.backlog <= 1 and port.counters()["tx_dropped"] > 0
        subprocess.run([*link, "up"], check=True)
        deadline = time.monotonic() + 10
        sent = 0
        while time.monotonic() < deadline and not sent:
            try:
                sent = port.send(flow, TOS, data, len(data), segment)
            except OSError:
                time.sleep(0.05)  # the carrier comes back a moment after `up`
        assert sent == -(-len(data) // segment)
        assert port.drain(5.0) == 0


def test_drain_returns_when_a_packet_arrives(xdp_pair: PairInfo) -> None:
    """A port pacing a long backlog at 10 Mb/s stops draining as soon as its peer's packet is
    on its RX ring (the engine reads it, then drains again), and the pacing goes on after."""
    p = xdp_pair
    slow = AfXdpConfig(path_mtu_bytes=1024, rate_bps=10e6)
    with (
        AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], slow) as a,
        AfXdpPort.open(p.receiver_if, p.receiver_ns, [p.receiver_addr], AfXdpConfig(1024)) as b,
    ):
        to_b = a.flow(p.sender_addr, p.receiver_addr, SPORT)
        to_a = b.flow(p.receiver_addr, p.sender_addr, SPORT)
        bursts = payload_bursts(p, 1024, 200)
        data, segment = next(bursts)
        a.send(to_b, TOS, data, len(data), segment)  # 62 packets: 55 ms at 10 Mb/s
        assert a.backlog > 1
        # its own packet, with the ICRC of the b -> a flow (the ICRC covers both addresses)
        back = dataclasses.replace(p, sender_addr=p.receiver_addr, receiver_addr=p.sender_addr)
        reply, _ = next(payload_bursts(back, 1024, 1))
        b.send(to_a, TOS, reply, len(reply), len(reply))
        b.drain(1.0)
        buf = bytearray(1 << 16)
        left = a.drain(5.0, stop_on_rx=True)
        assert left > 0  # stopped for the packet, not because the backlog was sent
        runs = a.receive(buf)
        assert [(r.source, r.segments) for r in runs] == [((p.receiver_addr, SPORT), 1)]
        assert a.drain(5.0) == 0


def test_malformed_rocev2_is_counted_and_dropped_other_udp_passes(xdp_pair: PairInfo) -> None:
    """A datagram to port 4791 too short to be RoCEv2 is counted and dropped by the receiving
    port, never fatal; UDP to another port goes to the kernel; valid packets still arrive."""
    p = xdp_pair
    with AfXdpPort.open(p.receiver_if, p.receiver_ns, [p.receiver_addr], AfXdpConfig(1024)) as rx:
        with in_netns(p.sender_ns):
            plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            plain.sendto(b"short", (p.receiver_addr, 4791))
            plain.sendto(bytes(100), (p.receiver_addr, 9))
        finally:
            plain.close()
        data, segment = next(payload_bursts(p, 1024, 8))
        with AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], AfXdpConfig(1024)) as tx:
            tx.send(tx.flow(p.sender_addr, p.receiver_addr, SPORT), TOS, data, len(data), segment)
            tx.drain(1.0)
        buf = bytearray(1 << 16)
        runs: list[RxRun] = []
        deadline = time.monotonic() + 5
        while sum(r.segments for r in runs) < 8 and time.monotonic() < deadline:
            runs += rx.receive(buf)
        counters = rx.counters()
    assert sum(r.segments for r in runs) == 8 and all(r.source[1] == SPORT for r in runs)
    assert counters["rx_malformed"] == 1
    assert counters["non_roce_passed"] >= 1  # the datagram to port 9 (and ARP)


# --- checksums: what a socket's stack would check, and RoCEv2's ICRC -------------------------


def _mac(netns: str, ifname: str) -> bytes:
    out = subprocess.run(
        ["ip", "-n", netns, "-j", "link", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=True,
    )
    return bytes.fromhex(json.loads(out.stdout)[0]["address"].replace(":", ""))


def _with_udp_checksum(ip_packet: bytes) -> bytes:
    """The packet with its UDP checksum computed (scapy, RFC 768), every other byte kept."""
    again = IP(ip_packet)
    again[UDP].chksum = None
    out = raw(again)
    assert out[:26] == ip_packet[:26] and out[28:] == ip_packet[28:] and out[26:28] != b"\0\0"
    return out


def _break(ip_packet: bytes, what: str) -> bytes:
    """One field made wrong: the IPv4 header checksum, a non-zero UDP checksum or the ICRC
    (never into a value meaning the same: 0 is "no UDP checksum", RFC 768)."""
    b = bytearray(ip_packet)
    if what == "ip_checksum":
        b[10] ^= 0x01
        b[11] ^= 0x01
    elif what == "udp_checksum":
        right = struct.unpack_from("!H", b, 26)[0]
        assert right != 0
        struct.pack_into("!H", b, 26, right ^ 0x0101 if right != 0x0101 else 0x0303)
    elif what == "icrc":
        b[-1] ^= 0xFF
    return bytes(b)


def _rocev2(p: PairInfo, psn: int, payload_bytes: int, udp_checksum: bool) -> bytes:
    """An IPv4 packet of one RoCEv2 SEND ONLY from the sender to the receiver, as the project's
    codec writes it (the ICRC for its IP id, UDP checksum 0), or with its UDP checksum."""
    address = FlowAddress(p.sender_addr, p.receiver_addr, SPORT, dscp=26, ecn=2)
    packet = DataPacket(
        dest_qp=3,
        psn=psn,
        opcode=Opcode.SEND_ONLY,
        ack_req=False,
        payload_bytes=payload_bytes,
        payload=bytes([psn]) * payload_bytes,
    )
    ip = ipv4_packet(packet, address, ip_id=psn)
    assert parse_ipv4_packet(ip).icrc_ok and _scapy_icrc_ok(ip)
    return _with_udp_checksum(ip) if udp_checksum else ip


def _inject(p: PairInfo, frames: list[bytes]) -> None:
    """Ethernet frames sent as they are from the sender's veth (AF_PACKET: no stack, no
    checksum offload touches them)."""
    with in_netns(p.sender_ns):
        raw_sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        try:
            raw_sock.bind((p.sender_if, 0))
            for frame in frames:
                raw_sock.send(frame)
        finally:
            raw_sock.close()


def _receive_until(port: AfXdpPort, packets: int, timeout_s: float = 5.0) -> list[bytes]:
    """The payloads the port hands over until `packets` were received or dropped."""
    buf = bytearray(1 << 16)
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in port.receive(buf):
            chunk = bytes(buf[run.offset : run.offset + run.nbytes])
            got += [
                chunk[i : i + run.segment_bytes] for i in range(0, run.nbytes, run.segment_bytes)
            ]
        c = port.counters()
        if c["rx_packets"] + c["rx_malformed"] >= packets:
            break
        time.sleep(0.01)
    return got


@pytest.mark.parametrize(
    ("path_mtu", "sizes"),
    [(1024, (1024, 60)), (4096, (4096, 3784))],
    ids=["mtu1024", "mtu4096-multibuffer"],
)
def test_checksums_are_checked_and_bad_ones_counted_and_dropped(
    xdp_pair: PairInfo, path_mtu, sizes
) -> None:
    """Valid RoCEv2, with its UDP checksum 0 ("none computed", RFC 768) or right, is handed
    over; a wrong IPv4 header checksum, a wrong non-zero UDP checksum or a wrong ICRC is counted
    in rx_malformed (and its own counter), never handed over, and its frames are recycled. With
    multi-buffer, the packets span two UMEM frames (3784 bytes of data: the ICRC lies about the
    3840-byte frame room's end, where the CRC and the sum go on across the parts)."""
    p = xdp_pair
    head = _mac(p.receiver_ns, p.receiver_if) + _mac(p.sender_ns, p.sender_if) + b"\x08\x00"
    big, other = sizes
    sent = [
        ("valid, UDP checksum 0", _rocev2(p, 1, big, udp_checksum=False)),
        ("wrong IPv4 header checksum", _break(_rocev2(p, 2, big, False), "ip_checksum")),
        ("valid, UDP checksum right", _rocev2(p, 3, big, udp_checksum=True)),
        ("wrong UDP checksum", _break(_rocev2(p, 4, big, True), "udp_checksum")),
        ("wrong ICRC", _break(_rocev2(p, 5, big, False), "icrc")),
        ("valid, other size", _rocev2(p, 6, other, udp_checksum=True)),
        (
            "wrong ICRC, UDP checksum right",
            _with_udp_checksum(_break(_rocev2(p, 7, other, False), "icrc")),
        ),
    ]
    valid = [ip[28:] for what, ip in sent if what.startswith("valid")]
    config = AfXdpConfig(path_mtu_bytes=path_mtu)
    with AfXdpPort.open(p.receiver_if, p.receiver_ns, [p.receiver_addr], config) as rx:
        room = rx.info["rx_frame_room_bytes"]
        assert rx.info["multi_buffer"] == (path_mtu == 4096)
        _inject(p, [head + ip for _, ip in sent])
        got = _receive_until(rx, len(sent))
        counters = rx.counters()
    psns = [int.from_bytes(payload[9:12], "big") for payload in got]
    assert psns == [1, 3, 6], f"PSNs handed over: {psns}, the valid ones are 1, 3 and 6"
    assert got == valid  # in order, byte for byte
    assert counters["rx_packets"] == len(valid) == 3
    assert counters["redirected"] == len(sent)  # every one reached the port
    bad = {k: counters[k] for k in ("rx_bad_ip_checksum", "rx_bad_udp_checksum", "rx_bad_icrc")}
    assert counters["rx_malformed"] == 4, f"rx_malformed {counters['rx_malformed']}, {bad}"
    assert bad == {"rx_bad_ip_checksum": 1, "rx_bad_udp_checksum": 1, "rx_bad_icrc": 2}
    parts = sum(-(-(14 + len(ip)) // room) for _, ip in sent)
    assert path_mtu == 1024 or parts > len(sent)  # multi-buffer frames were received
    assert counters["frames_recycled"] == parts  # the dropped ones' frames too
