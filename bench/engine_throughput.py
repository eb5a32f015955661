"""Engine data-path speed over a veth pair, against `iperf3 -u` on the same path in the same run.

Run as root from the repository root: `python -m bench.engine_throughput [--seconds S]`.

Ours: one queue pair, congestion control `none` at a line rate far above what the machine can
carry (so the sender runs flat out), RoCEv2 SEND packets of 1024 and 4096 payload bytes with
their ICRC computed for the IP id and length the wire carries (tests/system/test_engine_wire.py
checks them on a capture), sent as UDP GSO batches and received with UDP GRO by the engine's own
receiver, which ACKs them (go-back-N transport, every byte delivered). Measured: data packets
delivered per second (the flow's payload / MTU over its completion time), Gb/s of payload, and the
sender worker's CPU seconds from the common start on (per core = per CPU-second).
Peer: `iperf3 -u -b 0 -l <payload>` between the same namespaces, same duration; its delivered
packets/s (sent minus lost) and its sender CPU share (iperf3's own cpu_utilization_percent).
Ratios are ours / iperf3's (higher is better); the issue #6 target is >= 4 on packets/s.
Also: sender CPU seconds per Gb/s, the pacing error at 10 Mb/s, 100 Mb/s and 1 Gb/s
(receiver-measured rate over 1 s against the configured rate, in %), and what the attribution
tag costs (the same flow with its BTH reserved bits set, as on the emulated fabric, against
without: packets/s).
Floor: a bare Python loop that only calls sendmsg with pre-built 64 KB GSO buffers of the same
RoCEv2 segments (and a bare UDP_GRO reader on the other side) over the same veth: the most any
Python sender using GSO can reach here, whatever it computes; ours is also given against it.
Both data paths side by side (issue #20): the native one (engine.native: on, emulator/native/)
and the pure-Python one (engine.native: off), every line tagged with its "path"; the native
path's packets/s against the Python path's, each against the floor; the sender's and the
receiver's worker busy share (run CPU over wall) on the packets/s lines say which side bound
the rate. Without the native path built it says so and measures the Python path alone.
The engine over AF_XDP (engine.send_path: af_xdp, copy mode on the same veth, lines tagged
"send_path"): packets/s and sender CPU per Gb/s against the engine's GSO path on the same data
path in the same run, and the pacing error of its ports' token buckets at 10 Mb/s, 100 Mb/s and
1 Gb/s; `--only-af-xdp` measures just these (and the GSO path they are compared with).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from emulator.engine.coordinator import run_plan
from emulator.engine.native_path import NATIVE, PYTHON
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.sockets import ANCILLARY_BYTES, gso_cmsg, open_udp, read_ancillary
from emulator.engine.testbed import NetnsBed, PairInfo, link_bytes, pair
from emulator.native import load
from emulator.transport.burst_wire import BurstBuffer, BurstWriter
from emulator.transport.packets import ETHERNET_OVERHEAD_BYTES, ROCEV2_UDP_PORT
from emulator.transport.params import TransportParams
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES, SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext

BENCH = "engine_throughput"


def emit(metric: str, value: float, unit: str, **peer: Any) -> None:
    """One JSON line: the metric, and the peer it is compared with (or the data path it is of)."""
    print(
        json.dumps(
            {"bench": BENCH, "metric": metric, "value": round(value, 4), "unit": unit, **peer}
        ),
        flush=True,
    )


def ours(
    p: PairInfo,
    payload: int,
    seconds: float,
    latency: bool = True,
    tag: int = 0,
    path: str = NATIVE,
    send_path: str = "udp_gso",
) -> dict[str, float]:
    """Flat-out single QP: (delivered packets/s, payload Gb/s, sender run CPU s, wall s);
    `latency`: with the one-way latency stamps and histograms (the default) or without; `tag`:
    the attribution tag its packets carry (emulator.planning.attribution; 0: none); `path`: the
    engine's data path (native or python); `send_path`: udp_gso or af_xdp."""
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, 100e9),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, 100e9),
    ]
    # size the flow from a short probe so the measured run lasts about `seconds`
    transport = TransportParams(
        congestion_control="none",
        path_mtu_bytes=payload,
        retransmit_timeout_s=0.05,
        window_packets=2048,
    )
    engine = EngineParams(
        workers=2,
        one_way_latency=latency,
        native="on" if path == NATIVE else "off",
        send_path=send_path,  # type: ignore[arg-type]
    )
    size = payload * 20_000
    for _ in range(2):
        out = run_plan(
            ranks,
            [EngineFlow(1, 0, 1, 0, 50500, size, tag=tag)],
            transport=transport,
            engine=engine,
        )
        fct = out.fct_s(1)
        if fct >= 0.5 * seconds:
            break
        size = int(size * seconds / max(fct, 1e-3)) // payload * payload
    packets = size // payload
    ran = out.metadata["data_path"]["path"]
    if ran != path:
        raise RuntimeError(f"asked for the {path} data path, the engine ran {ran}")
    cpu = out.metadata["worker_run_cpu_s"][0]  # rank 0's worker sends
    busy = out.metadata["worker_busy_ratio"]
    return {
        "pps": packets / fct,
        "gbps": size * 8 / fct / 1e9,
        "cpu_s": cpu,
        "wall_s": fct,
        "retransmitted": out.finished[1].retransmitted_packets,
        "sender_busy": busy[0],
        "receiver_busy": busy[1],
    }


def iperf3(p: PairInfo, payload: int, seconds: float) -> dict[str, float]:
    server = subprocess.Popen(
        ["ip", "netns", "exec", p.receiver_ns, "iperf3", "-s", "-1", "-B", p.receiver_addr],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        doc: dict[str, Any] = {}
        for _ in range(50):  # wait for the server to listen (bounded: 5 s)
            time.sleep(0.1)
            proc = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    p.sender_ns,
                    "iperf3",
                    "-u",
                    "-b",
                    "0",
                    "-l",
                    str(payload),
                    "-t",
                    f"{seconds:g}",
                    "-c",
                    p.receiver_addr,
                    "-J",
                ],
                capture_output=True,
                text=True,
                timeout=seconds + 30,
                check=False,
            )
            doc = json.loads(proc.stdout or "{}")
            if "error" not in doc and "end" in doc:
                break
        end = doc["end"]["sum"]
        delivered = end["packets"] - end["lost_packets"]
        cpu_share = doc["end"]["cpu_utilization_percent"]["host_total"] / 100
        return {
            "pps": delivered / end["seconds"],
            "gbps": delivered * payload * 8 / end["seconds"] / 1e9,
            "cpu_s": cpu_share * end["seconds"],
            "wall_s": end["seconds"],
        }
    finally:
        server.kill()
        server.wait(5)


def _floor_receiver(p: PairInfo, stop_at: float, pipe: Connection) -> None:
    sock = open_udp(
        p.receiver_ns, p.receiver_addr, ROCEV2_UDP_PORT, gro=True, buffer_bytes=32 << 20
    )
    sock.setblocking(True)
    sock.settimeout(0.2)
    buf = bytearray(65535 * 2)
    segments = 0
    first = last = 0.0
    pipe.send("ready")
    while time.perf_counter() < stop_at + 0.5:
        try:
            nbytes, anc, _, _ = sock.recvmsg_into([buf], ANCILLARY_BYTES)
        except TimeoutError:
            continue
        _, gso_size, _ = read_ancillary(anc)
        last = time.perf_counter()
        if not segments:
            first = last
        segments += -(-nbytes // gso_size) if 0 < gso_size < nbytes else 1
    sock.close()
    pipe.send((segments, last - first))


def _floor_sender(p: PairInfo, payload: int, stop_at: float) -> None:
    # one GSO buffer of real RoCEv2 segments, built once and sent again and again
    transport = TransportParams(congestion_control="none", path_mtu_bytes=payload)
    qp = SendQueuePair(qpn=1, dest_qp=1, params=transport, line_rate_bps=1e15)
    qp.post_send(now=0.0, message_id=1, size_bytes=payload * 1000)
    burst = qp.poll_burst(now=0.0, floor_s=-1.0, max_packets=64, max_bytes=GSO_MAX_BUFFER_BYTES)
    assert burst is not None
    address = FlowAddress(p.sender_addr, p.receiver_addr, 50700)
    writer = BurstWriter(IcrcContext(address), BurstBuffer(65535 * 2), 64)
    data = bytes(writer.buf[: writer.write(burst)])
    cmsg = [gso_cmsg(burst.segment_bytes)]
    sock = open_udp(p.sender_ns, p.sender_addr, 50700, gro=False, buffer_bytes=32 << 20)
    dest = (p.receiver_addr, ROCEV2_UDP_PORT)
    while time.perf_counter() < stop_at:
        try:
            while time.perf_counter() < stop_at:
                sock.sendmsg([data], cmsg, 0, dest)
        except OSError:
            continue  # the socket buffer is full: try again (a floor, not a protocol)
    sock.close()


def bare_gso_floor(p: PairInfo, payload: int, seconds: float) -> float:
    """Segments/s a bare Python sendmsg loop of 64 KB GSO buffers delivers over the veth."""
    ctx = multiprocessing.get_context("fork")
    ours_end, theirs = ctx.Pipe()
    stop_at = time.perf_counter() + seconds + 1.0
    receiver = ctx.Process(target=_floor_receiver, args=(p, stop_at, theirs))
    receiver.start()
    try:
        if not ours_end.poll(10):
            raise RuntimeError("the floor's receiver did not start")
        ours_end.recv()
        sender = ctx.Process(target=_floor_sender, args=(p, payload, stop_at))
        sender.start()
        sender.join(seconds + 10)
        if not ours_end.poll(10):
            raise RuntimeError("the floor's receiver did not report")
        segments, span_s = ours_end.recv()
    finally:
        receiver.join(5)
        if receiver.is_alive():
            receiver.kill()
    return float(segments / span_s) if span_s > 0 else 0.0


def pacing_error(
    p: PairInfo, rate_bps: float, path: str = NATIVE, send_path: str = "udp_gso"
) -> float:
    """Receiver-measured rate over 1 s vs the configured rate, in percent, on a data path and
    send path."""
    mtu = 4096
    ip_bytes = 20 + 8 + 12 + mtu + 4
    counted_per_sent = (ip_bytes + 14) / (ip_bytes + ETHERNET_OVERHEAD_BYTES)
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, rate_bps),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, rate_bps),
    ]
    size = int(rate_bps * 1.8 / 8 * mtu / ip_bytes)
    transport = TransportParams(
        congestion_control="none", path_mtu_bytes=mtu, retransmit_timeout_s=0.1
    )
    samples: list[tuple[float, int]] = []
    thread = threading.Thread(
        target=lambda: run_plan(
            ranks,
            [EngineFlow(1, 0, 1, 0, 50600, size)],
            transport=transport,
            engine=EngineParams(
                workers=2,
                native="on" if path == NATIVE else "off",
                send_path=send_path,  # type: ignore[arg-type]
            ),
        )
    )
    thread.start()
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        rx, _ = link_bytes(p.receiver_ns, p.receiver_if)
        samples.append(((t0 + time.perf_counter()) / 2, rx))
        time.sleep(0.02)
    thread.join(10)
    base = samples[0][1]
    t_first = next(t for t, b in samples if b > base + 8 * ip_bytes)
    a = next(s for s in samples if s[0] >= t_first + 0.2)
    b = next(s for s in samples if s[0] >= a[0] + 1.0)
    measured = (b[1] - a[1]) * 8 / (b[0] - a[0])
    return (measured / (rate_bps * counted_per_sent) - 1) * 100


def _per_path(
    payload: int, path: str, us: dict[str, float], peer: dict[str, float], floor: float
) -> None:
    """The lines of one data path at one payload size."""
    name = f"iperf3 -u -b 0 -l {payload}"
    emit(
        f"rocev2_data_packets_per_s_{payload}B (higher is better)",
        us["pps"],
        "packets/s",
        path=path,
        peer=name,
        peer_value=round(peer["pps"], 1),
        ratio=round(us["pps"] / peer["pps"], 3),
        sender_busy=us["sender_busy"],
        receiver_busy=us["receiver_busy"],
    )
    us_core = us["pps"] * us["wall_s"] / max(us["cpu_s"], 1e-9)
    peer_core = peer["pps"] * peer["wall_s"] / max(peer["cpu_s"], 1e-9)
    emit(
        f"rocev2_data_packets_per_sender_cpu_s_{payload}B (higher is better)",
        us_core,
        "packets/cpu-s",
        path=path,
        peer=name,
        peer_value=round(peer_core, 1),
        ratio=round(us_core / peer_core, 3),
    )
    emit(
        f"payload_gbps_{payload}B (higher is better)",
        us["gbps"],
        "Gb/s",
        path=path,
        peer=name,
        peer_value=round(peer["gbps"], 4),
        ratio=round(us["gbps"] / peer["gbps"], 3),
    )
    cpu_per_gbps = us["cpu_s"] / us["wall_s"] / us["gbps"]
    peer_cpu_per_gbps = peer["cpu_s"] / peer["wall_s"] / peer["gbps"]
    emit(
        f"sender_cpu_per_gbps_{payload}B (lower is better; ratio peer/ours)",
        cpu_per_gbps,
        "cores per Gb/s",
        path=path,
        peer=name,
        peer_value=round(peer_cpu_per_gbps, 4),
        ratio=round(peer_cpu_per_gbps / cpu_per_gbps, 3),
    )
    emit(f"retransmitted_packets_{payload}B", us["retransmitted"], "packets", path=path)
    emit(
        f"rocev2_data_packets_per_s_{payload}B_of_bare_gso_floor (higher is better)",
        us["pps"],
        "packets/s",
        path=path,
        peer=f"bare Python GSO sendmsg loop, {payload} B",
        peer_value=round(floor, 1),
        ratio=round(us["pps"] / floor, 3),
    )


def af_xdp_lines(
    p: PairInfo, payload: int, seconds: float, gso: dict[str, float], path: str
) -> None:
    """The engine over AF_XDP against its GSO path (`gso`, measured in this run), one size."""
    xdp = ours(p, payload, seconds, path=path, send_path="af_xdp")
    peer = f"the engine's UDP GSO path ({path})"
    emit(
        f"af_xdp_rocev2_data_packets_per_s_{payload}B (higher is better)",
        xdp["pps"],
        "packets/s",
        path=path,
        send_path="af_xdp",
        peer=peer,
        peer_value=round(gso["pps"], 1),
        ratio=round(xdp["pps"] / gso["pps"], 3),
        sender_busy=xdp["sender_busy"],
        receiver_busy=xdp["receiver_busy"],
    )
    ours_cpu = xdp["cpu_s"] / xdp["wall_s"] / xdp["gbps"]
    peer_cpu = gso["cpu_s"] / gso["wall_s"] / gso["gbps"]
    emit(
        f"af_xdp_sender_cpu_per_gbps_{payload}B (lower is better; ratio peer/ours)",
        ours_cpu,
        "cores per Gb/s",
        path=path,
        send_path="af_xdp",
        peer=peer,
        peer_value=round(peer_cpu, 4),
        ratio=round(peer_cpu / ours_cpu, 3),
    )
    emit(
        f"af_xdp_retransmitted_packets_{payload}B",
        xdp["retransmitted"],
        "packets",
        path=path,
        send_path="af_xdp",
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument(
        "--only-af-xdp",
        action="store_true",
        help="only the engine over AF_XDP and the GSO path it is compared with",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.engine_throughput needs root (network namespaces)", file=sys.stderr)
        return 2
    _, why_not = load("burst")
    paths = [NATIVE, PYTHON]
    if why_not:
        print(
            f"bench.engine_throughput: no native path ({why_not}): the Python path alone",
            file=sys.stderr,
        )
        paths = [PYTHON]
    main_path = paths[0]  # what the engine runs by default: the costs below are measured on it
    _, why_no_xsk = load("xsk")
    if why_no_xsk:
        print(f"bench.engine_throughput: no AF_XDP ({why_no_xsk})", file=sys.stderr)
        if args.only_af_xdp:
            return 2
    with NetnsBed() as bed:
        p = pair(bed)
        if args.only_af_xdp:
            for payload in (1024, 4096):
                gso = ours(p, payload, args.seconds, path=main_path)
                af_xdp_lines(p, payload, args.seconds, gso, main_path)
            _af_xdp_pacing(p, main_path)
            return 0
        for payload in (1024, 4096):
            peer = iperf3(p, payload, args.seconds)
            floor = bare_gso_floor(p, payload, args.seconds)
            name = f"iperf3 -u -b 0 -l {payload}"
            emit(
                f"bare_gso_floor_packets_per_s_{payload}B (a Python ceiling; ratio floor/iperf3)",
                floor,
                "packets/s",
                peer=name,
                peer_value=round(peer["pps"], 1),
                ratio=round(floor / peer["pps"], 3),
            )
            measured = {path: ours(p, payload, args.seconds, path=path) for path in paths}
            for path, us in measured.items():
                _per_path(payload, path, us, peer, floor)
            if len(measured) == 2:
                emit(
                    f"native_over_python_packets_per_s_{payload}B (higher is better)",
                    measured[NATIVE]["pps"] / measured[PYTHON]["pps"],
                    "ratio",
                    path=NATIVE,
                    peer="the engine's Python path (engine.native: off)",
                    peer_value=round(measured[PYTHON]["pps"], 1),
                    ratio=round(measured[NATIVE]["pps"] / measured[PYTHON]["pps"], 3),
                )
            us = measured[main_path]
            plain = ours(p, payload, args.seconds, latency=False, path=main_path)
            emit(
                f"one_way_latency_cost_{payload}B (packets/s with latency stamps / without)",
                us["pps"] / plain["pps"],
                "ratio",
                path=main_path,
                peer="the engine without engine.one_way_latency",
                peer_value=round(plain["pps"], 1),
                ratio=round(us["pps"] / plain["pps"], 3),
            )
            tagged = ours(p, payload, args.seconds, tag=1, path=main_path)
            emit(
                f"attribution_tag_cost_{payload}B (packets/s with the BTH tag / without)",
                tagged["pps"] / us["pps"],
                "ratio",
                path=main_path,
                peer="the engine without attribution tags",
                peer_value=round(us["pps"], 1),
                ratio=round(tagged["pps"] / us["pps"], 3),
            )
            if not why_no_xsk:
                af_xdp_lines(p, payload, args.seconds, us, main_path)
        if not why_no_xsk:
            _af_xdp_pacing(p, main_path)
        for path in paths:
            for rate in (10e6, 100e6, 1e9):
                emit(
                    f"pacing_error_{rate / 1e6:g}Mbps (receiver, 1 s window)",
                    pacing_error(p, rate, path),
                    "%",
                    path=path,
                )
    return 0


def _af_xdp_pacing(p: PairInfo, path: str) -> None:
    for rate in (10e6, 100e6, 1e9):
        emit(
            f"af_xdp_pacing_error_{rate / 1e6:g}Mbps (receiver, 1 s window)",
            pacing_error(p, rate, path, send_path="af_xdp"),
            "%",
            path=path,
            send_path="af_xdp",
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
