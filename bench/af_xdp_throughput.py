"""AF_XDP port speed on a veth pair in copy mode, against xdp-trafficgen and the bare Python GSO
loop on the same veth in the same run.

Run as root from the repository root: `python -m bench.af_xdp_throughput [--seconds S]
[--trafficgen PATH]`. Prints JSON lines like bench/engine_throughput.py.

Ours: a process that opens an AfXdpPort (emulator/engine/af_xdp.py) on the sender's veth and
hands it the same RoCEv2 burst again and again (64 KB of 1024- or 4096-byte SEND segments laid
out by BurstWriter, as the engine lays out a GSO send), flat out, no cap: what the AF_XDP layer
costs per packet from Python, without the engine's protocol work. Measured over the middle
`seconds` of the run, for every sender alike: frames/s and Gb/s that crossed the veth (its
receiving end's counters; a UDP_GRO reader takes them off, as bare_gso_floor's reader does for
the floor, so every sender pays the same receiving costs), and the sender process's CPU
seconds; also the datagrams/s the reader got (the floor's own figure).
Peers, same veth, same run:
- `xdp-trafficgen udp` (xdp-tools): UDP frames of the same size sent by XDP_TX from
  BPF_PROG_RUN live frames, the kernel's own packet generator for XDP; IPv6 only in udp mode,
  and at most about 3.5 KB per frame (one page less its headroom): at 4096 B it runs at its
  largest frame and the line says so. Debian 12's xdp-tools 1.3.1 does not load on Linux >= 6.16
  (its stats program needs the xdp_redirect_map tracepoints, removed then; fixed upstream by
  xdp-tools commit 48b3086, PR #513) and its udp mode has no packet size option (upstream
  063ec71) and a probe that newer kernels refuse (upstream 4f7f5cb): `--trafficgen` names a
  build of 1.3.1 with those three commits applied when the installed one fails.
- the bare Python GSO sendmsg loop of the same segments (bench.engine_throughput.bare_gso_floor,
  with the veth's counters read during its run): the most a Python GSO sender reaches here.
Also: sender CPU seconds per Gb/s (ours and xdp-trafficgen), and the pacing error of the port's
token bucket at 10 Mb/s, 100 Mb/s and 1 Gb/s (frames and their Ethernet framing counted on the
receiving veth over 1 s against the cap, in %).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from bench.engine_throughput import bare_gso_floor
from emulator.engine.af_xdp import AfXdpConfig, AfXdpPort
from emulator.engine.sockets import (
    ANCILLARY_BYTES,
    SO_RCVBUFFORCE,
    SOL_UDP,
    UDP_GRO,
    open_udp,
    read_ancillary,
)
from emulator.engine.testbed import NetnsBed, PairInfo, pair
from emulator.netns import entered
from emulator.transport.burst_wire import BurstBuffer, BurstWriter
from emulator.transport.packets import ROCEV2_UDP_PORT
from emulator.transport.params import TransportParams
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES, SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext

BENCH = "af_xdp_throughput"
SPORT = 50800
ETHERNET_WIRE_EXTRA_BYTES = 24  # FCS, preamble and SFD, inter-frame gap
CLK_TCK = os.sysconf("SC_CLK_TCK")


def emit(metric: str, value: float, unit: str, **peer: Any) -> None:
    print(
        json.dumps(
            {"bench": BENCH, "metric": metric, "value": round(value, 4), "unit": unit, **peer}
        ),
        flush=True,
    )


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _rx(netns: str, ifname: str) -> tuple[int, int]:
    out = subprocess.run(
        ["ip", "-n", netns, "-s", "-j", "link", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rx = json.loads(out)[0]["stats64"]["rx"]
    return int(rx["packets"]), int(rx["bytes"])


def _measure(
    pid: int, p: PairInfo, sink: Sink | None, warmup_s: float, seconds: float
) -> dict[str, float]:
    """Over `seconds` after `warmup_s`: frames/s and Gb/s that crossed the veth (its receiving
    end's counters), wire bits/s (frames + Ethernet framing), datagrams/s the sink read, and
    the sending process's CPU seconds."""
    time.sleep(warmup_s)
    packets0, bytes0 = _rx(p.receiver_ns, p.receiver_if)
    got0 = sink.delivered() if sink else 0
    cpu0, t0 = _cpu_s(pid), time.perf_counter()
    time.sleep(seconds)
    packets1, bytes1 = _rx(p.receiver_ns, p.receiver_if)
    got1 = sink.delivered() if sink else 0
    cpu1, t1 = _cpu_s(pid), time.perf_counter()
    wall = t1 - t0
    frames, frame_bytes = packets1 - packets0, bytes1 - bytes0
    return {
        "pps": frames / wall,
        "gbps": frame_bytes * 8 / wall / 1e9,
        "read_pps": (got1 - got0) / wall if sink else 0.0,
        "wire_bps": (frame_bytes + ETHERNET_WIRE_EXTRA_BYTES * frames) * 8 / wall,
        "cpu_s": cpu1 - cpu0,
        "wall_s": wall,
    }


def _sink(p: PairInfo, stop_at: float, delivered: Any, pipe: Connection) -> None:
    """UDP_GRO readers of port 4791 on the receiver (IPv4 for ours, IPv6 for xdp-trafficgen),
    counting the datagrams they read into `delivered`: the reader bare_gso_floor gives the
    floor, so every sender here is measured where the floor is, and pays the same receiving
    costs on the veth."""
    socks = [
        open_udp(p.receiver_ns, p.receiver_addr, ROCEV2_UDP_PORT, gro=True, buffer_bytes=32 << 20)
    ]
    with entered(p.receiver_ns):
        six = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    six.setsockopt(SOL_UDP, UDP_GRO, 1)
    six.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
    six.bind(("fd00:77::2", ROCEV2_UDP_PORT))
    six.setblocking(False)
    socks.append(six)
    buf = bytearray(65535 * 2)
    count = 0
    pipe.send("ready")
    while time.perf_counter() < stop_at:
        ready, _, _ = select.select(socks, [], [], 0.2)
        for sock in ready:
            for _ in range(64):
                try:
                    nbytes, anc, _, _ = sock.recvmsg_into([buf], ANCILLARY_BYTES)
                except BlockingIOError:
                    break
                _, gso_size, _ = read_ancillary(anc)
                count += -(-nbytes // gso_size) if 0 < gso_size < nbytes else 1
        delivered.value = count
    for sock in socks:
        sock.close()


class Sink:
    """_sink in a process of its own, for a `with` block; `delivered()` is its count so far."""

    def __init__(self, p: PairInfo, limit_s: float):
        ctx = multiprocessing.get_context("fork")
        ours_end, theirs = ctx.Pipe()
        self.count = ctx.Value("q", 0, lock=False)
        stop_at = time.perf_counter() + limit_s
        self.proc = ctx.Process(target=_sink, args=(p, stop_at, self.count, theirs))
        self.proc.start()
        if not ours_end.poll(10):
            self.proc.kill()
            raise RuntimeError("the receiver did not start")

    def delivered(self) -> int:
        return int(self.count.value)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.join(5)


def one_burst(p: PairInfo, payload: int) -> tuple[bytes, int]:
    """A GSO buffer's worth of RoCEv2 SEND segments (ICRCs for IP ids 0, 1, ...)."""
    transport = TransportParams(congestion_control="none", path_mtu_bytes=payload)
    qp = SendQueuePair(qpn=1, dest_qp=1, params=transport, line_rate_bps=1e15)
    qp.post_send(now=0.0, message_id=1, size_bytes=payload * 1000)
    qp.poll_burst(now=0.0, floor_s=-1.0, max_packets=1, max_bytes=GSO_MAX_BUFFER_BYTES)
    burst = qp.poll_burst(now=0.0, floor_s=-1.0, max_packets=64, max_bytes=GSO_MAX_BUFFER_BYTES)
    assert burst is not None  # SEND middle segments, all of one size
    address = FlowAddress(p.sender_addr, p.receiver_addr, SPORT)
    writer = BurstWriter(IcrcContext(address), BurstBuffer(65535 * 2), 64)
    return bytes(writer.buf[: writer.write(burst)]), burst.segment_bytes


def _xdp_sender(
    p: PairInfo, payload: int, rate_bps: float | None, stop_at: float, pipe: Connection
) -> None:
    config = AfXdpConfig(path_mtu_bytes=payload, rate_bps=rate_bps)
    data, segment = one_burst(p, payload)
    count = -(-len(data) // segment)
    with AfXdpPort.open(p.sender_if, p.sender_ns, [p.sender_addr], config) as port:
        flow = port.flow(p.sender_addr, p.receiver_addr, SPORT)
        pipe.send(port.info)
        send, drain = port.send, port.drain
        while time.perf_counter() < stop_at:
            if send(flow, 2, data, len(data), segment) < count:
                drain(0.002)  # the backlog is full (capped): paced in C for up to 2 ms
        pipe.send(port.counters())


def ours(
    p: PairInfo, payload: int, seconds: float, sink: Sink, rate_bps: float | None = None
) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    ours_end, theirs = ctx.Pipe()
    warmup = 0.5
    stop_at = time.perf_counter() + warmup + seconds + 0.5 + 2.0  # + opening the port
    sender = ctx.Process(target=_xdp_sender, args=(p, payload, rate_bps, stop_at, theirs))
    sender.start()
    try:
        if not ours_end.poll(15):
            raise RuntimeError("the AF_XDP sender did not start")
        info = ours_end.recv()
        assert sender.pid is not None
        out = _measure(sender.pid, p, sink, warmup, seconds)
        sender.join(stop_at - time.perf_counter() + 10)
        counters = ours_end.recv() if ours_end.poll(5) else {}
    finally:
        if sender.is_alive():
            sender.kill()
            sender.join(5)
    out["multi_buffer"] = float(info["multi_buffer"])
    out["tx_dropped"] = float(counters.get("tx_dropped", -1))
    return out


def _trafficgen_argv(binary: str, p: PairInfo, mac: str, frame: int, count: int) -> list[str]:
    return [
        "ip",
        "netns",
        "exec",
        p.sender_ns,
        binary,
        "udp",
        "-m",
        mac,
        "-a",
        "fd00:77::2",
        "-A",
        "fd00:77::1",
        "-p",
        "4791",
        "-s",
        str(frame),
        "-n",
        str(count),
        p.sender_if,
    ]


def trafficgen_works(binary: str, p: PairInfo, mac: str, frame: int) -> str:
    """ "" when xdp-trafficgen delivers `frame`-byte frames here; else its complaint. (It exits
    1 even when it sent everything: the receiving veth's counter decides.)"""
    before, _ = _rx(p.receiver_ns, p.receiver_if)
    try:
        proc = subprocess.run(
            _trafficgen_argv(binary, p, mac, frame, 100),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError:
        return f"{binary} is not installed"
    after, _ = _rx(p.receiver_ns, p.receiver_if)
    if after - before >= 100:
        return ""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    bad = [line for line in lines if "rror" in line or "nly" in line or "ouldn't" in line]
    return (bad or lines or [f"exit status {proc.returncode}, nothing delivered"])[0].strip()


def trafficgen_largest(binary: str, p: PairInfo, mac: str, frame: int) -> int:
    """The largest frame up to `frame` that xdp-trafficgen sends (64-byte steps)."""
    while frame > 64 and trafficgen_works(binary, p, mac, frame):
        frame -= 64
    return frame


def trafficgen(
    binary: str, p: PairInfo, mac: str, frame: int, seconds: float, sink: Sink
) -> dict[str, float]:
    argv = _trafficgen_argv(binary, p, mac, frame, 0)  # 0: until stopped
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _measure(proc.pid, p, sink, 1.0, seconds)
    finally:
        proc.send_signal(signal.SIGINT)  # its handler removes its lock file
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def floor_at_veth(p: PairInfo, payload: int, seconds: float) -> tuple[float, float]:
    """bench.engine_throughput.bare_gso_floor, measured where ours is too: (frames/s that
    crossed the veth in the middle `seconds` of its run, its own reader's datagrams/s)."""
    sample: dict[str, float] = {}

    def watch() -> None:
        # its sender runs from its start to start + seconds + 1: the middle `seconds`
        time.sleep(0.5)
        packets0, _ = _rx(p.receiver_ns, p.receiver_if)
        t0 = time.perf_counter()
        time.sleep(seconds)
        packets1, _ = _rx(p.receiver_ns, p.receiver_if)
        sample["pps"] = (packets1 - packets0) / (time.perf_counter() - t0)

    thread = threading.Thread(target=watch)
    thread.start()
    read = bare_gso_floor(p, payload, seconds)
    thread.join()
    return sample["pps"], read


def _mac(netns: str, ifname: str) -> str:
    out = subprocess.run(
        ["ip", "-n", netns, "-j", "link", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return str(json.loads(out)[0]["address"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument(
        "--trafficgen",
        default=shutil.which("xdp-trafficgen") or "xdp-trafficgen",
        help="the xdp-trafficgen binary (see the module docstring)",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.af_xdp_throughput needs root (network namespaces, XDP)", file=sys.stderr)
        return 2
    with NetnsBed() as bed:
        p = pair(bed)
        for ns, ifname, addr in ((p.sender_ns, p.sender_if, "1"), (p.receiver_ns, "b0", "2")):
            subprocess.run(
                ["ip", "-n", ns, "addr", "add", f"fd00:77::{addr}/64", "dev", ifname, "nodad"],
                check=True,
            )
        mac = _mac(p.receiver_ns, p.receiver_if)
        why_not = trafficgen_works(args.trafficgen, p, mac, 1082)
        if why_not:
            print(
                f"xdp-trafficgen ({args.trafficgen}) does not run here: {why_not}", file=sys.stderr
            )
        for payload in (1024, 4096):
            with Sink(p, args.seconds + 30) as sink:
                us = ours(p, payload, args.seconds, sink)
            frame = 14 + 20 + 8 + 12 + payload + 4  # a SEND middle segment's frame
            floor, floor_read = floor_at_veth(p, payload, args.seconds)
            emit(
                f"af_xdp_rocev2_packets_per_s_{payload}B_of_bare_gso_floor (higher is better)",
                us["pps"],
                "packets/s",
                peer=f"bare Python GSO sendmsg loop, {payload} B",
                peer_value=round(floor, 1),
                ratio=round(us["pps"] / floor, 3),
            )
            emit(
                f"af_xdp_rocev2_datagrams_read_per_s_{payload}B (at a UDP_GRO reader; higher "
                "is better)",
                us["read_pps"],
                "datagrams/s",
                peer=f"bare Python GSO sendmsg loop, {payload} B (bare_gso_floor)",
                peer_value=round(floor_read, 1),
                ratio=round(us["read_pps"] / floor_read, 3),
            )
            us_cpu = us["cpu_s"] / us["wall_s"] / us["gbps"]
            if why_not:
                emit(
                    f"af_xdp_sender_cpu_per_gbps_{payload}B (lower is better)",
                    us_cpu,
                    "cores per Gb/s",
                )
                continue
            peer_frame = trafficgen_largest(args.trafficgen, p, mac, frame)
            with Sink(p, args.seconds + 30) as sink:
                them = trafficgen(args.trafficgen, p, mac, peer_frame, args.seconds, sink)
            name = f"xdp-trafficgen udp -s {peer_frame}" + (
                " (its largest frame)" if peer_frame != frame else ""
            )
            emit(
                f"af_xdp_rocev2_packets_per_s_{payload}B (frames of {frame} B; higher is better)",
                us["pps"],
                "packets/s",
                peer=name,
                peer_value=round(them["pps"], 1),
                ratio=round(us["pps"] / them["pps"], 3),
            )
            them_cpu = them["cpu_s"] / them["wall_s"] / them["gbps"]
            emit(
                f"af_xdp_sender_cpu_per_gbps_{payload}B (lower is better; ratio peer/ours)",
                us_cpu,
                "cores per Gb/s",
                peer=name,
                peer_value=round(them_cpu, 4),
                ratio=round(them_cpu / us_cpu, 3),
            )
        for rate in (10e6, 100e6, 1e9):
            with Sink(p, 30) as sink:
                capped = ours(p, 4096, 1.0, sink, rate_bps=rate)
            emit(
                f"af_xdp_pacing_error_{rate / 1e6:g}Mbps (receiver, 1 s, wire bits incl. "
                "Ethernet framing)",
                (capped["wire_bps"] / rate - 1) * 100,
                "%",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
