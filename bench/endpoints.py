"""Bench: memory and CPU of the engine per 1,000 endpoints sharing one interface, against bare
Python UDP sockets doing the same sends, measured in the same run.

Run as root from the repository root: `python -m bench.endpoints [--endpoints 1024]`.

Setup: two namespaces joined by one veth; N endpoint addresses on each side (a tester's many
endpoints behind one port), endpoint i on side a sends one 16 KiB RoCEv2 message (4 packets of
4 KiB) to endpoint i on side b, each on its own queue pair, all sharing the port's 1 Gb/s.
Ours: the engine (two workers, one per side, each endpoint its own receive socket and QP
source-port socket, transport state, per-QP counters), measured at a small N and at N: the
growth of the workers' peak resident memory and CPU seconds (set-up plus run), scaled to 1,000
endpoints, so the interpreter's own size cancels out.
Peer: one bare Python process per side that opens the same sockets (a receive socket per
endpoint and a source-port socket per sender) and sends/receives the same number of datagrams
of the same size; its resident memory growth from before the sockets, and its CPU, over the
same two sizes. Both sides pin their neighbours (Linux keeps one machine-wide table of 1,024
learned ones, which 2,048 endpoints would overflow).
Prints one JSON object per figure; ratio = ours / peer (lower is better).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import multiprocessing
import os
import resource
import socket
import sys
import time
from typing import Any

from emulator.engine.coordinator import run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import NetnsBed
from emulator.netns import entered
from emulator.transport.params import TransportParams

BENCH = "endpoints"
SMALL = 64
MESSAGE_BYTES = 16 << 10
PACKET_BYTES = 4096 + 16  # payload + BTH + ICRC
SPORT = 50000


def emit(metric: str, value: float, unit: str, **peer: Any) -> None:
    print(
        json.dumps(
            {"bench": BENCH, "metric": metric, "value": round(value, 4), "unit": unit, **peer}
        ),
        flush=True,
    )


def _addresses(base: str, n: int) -> list[str]:
    first = ipaddress.IPv4Address(base)
    return [str(first + i) for i in range(n)]


def _bed(bed: NetnsBed, n: int) -> tuple[str, str, list[str], list[str]]:
    a, b = bed.netns("a"), bed.netns("b")
    bed.link(a, "a0", "10.90.0.1/16", b, "b0", "10.91.0.1/16", 9000)
    bed.host_offloads(a, "a0")
    bed.host_offloads(b, "b0")
    for ns, dev, via in ((a, "a0", "10.91.0.0/16"), (b, "b0", "10.90.0.0/16")):
        bed.ns_run(ns, "ip", "route", "add", via, "dev", dev)
    left, right = _addresses("10.90.1.0", n), _addresses("10.91.1.0", n)
    for ns, dev, addrs in ((a, "a0", left), (b, "b0", right)):
        batch = "".join(f"addr add {x}/16 dev {dev}\n" for x in addrs)
        bed.ns_run(ns, "ip", "-batch", "-", input_text=batch)
    # Linux keeps one machine-wide table of 1,024 learned neighbours: pinned (permanent)
    # entries for the other side's endpoints do not count toward it, and need no ARP
    for ns, dev, peer_ns, peer_dev, addrs in ((a, "a0", b, "b0", right), (b, "b0", a, "a0", left)):
        mac = json.loads(bed.ns_run(peer_ns, "ip", "-j", "link", "show", "dev", peer_dev))[0]
        batch = "".join(
            f"neigh replace {x} lladdr {mac['address']} nud permanent dev {dev}\n" for x in addrs
        )
        bed.ns_run(ns, "ip", "-batch", "-", input_text=batch)
    return a, b, left, right


def ours(n: int) -> tuple[float, float]:
    """(peak RSS MiB, CPU s) summed over the engine's workers for n endpoint pairs."""
    with NetnsBed() as bed:
        a, b, left, right = _bed(bed, n)
        ranks = [RankEndpoint(i, left[i], a, 1e9, nic=0) for i in range(n)] + [
            RankEndpoint(n + i, right[i], b, 1e9, nic=1) for i in range(n)
        ]
        flows = [EngineFlow(i + 1, i, n + i, 0, SPORT + i % 10000, MESSAGE_BYTES) for i in range(n)]
        out = run_plan(
            ranks,
            flows,
            transport=TransportParams(congestion_control="none", retransmit_timeout_s=1.0),
            engine=EngineParams(workers=2),
        )
        assert len(out.finished) == n, f"{n - len(out.finished)} messages did not finish"
        rss = sum(out.metadata["worker_max_rss_kb"]) / 1024
        cpu = sum(out.metadata["worker_cpu_s"])
        return rss, cpu


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peer_side(netns: str, mine: list[str], theirs: list[str], send: bool, conn: Any) -> None:
    before = _rss_mib()
    with entered(netns):
        rx = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in mine]
        tx = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in mine] if send else []
    for s, addr in zip(rx, mine, strict=True):
        s.bind((addr, 4791))
        s.setblocking(False)
    for i, s in enumerate(tx):
        s.bind((mine[i], SPORT + i % 10000))
    conn.send("ready")
    conn.recv()
    payload = bytes(PACKET_BYTES)
    packets = MESSAGE_BYTES // 4096
    got = 0
    deadline = time.monotonic() + 30
    if send:
        for s, dst in zip(tx, theirs, strict=True):
            for _ in range(packets):
                s.sendto(payload, (dst, 4791))
                time.sleep(0)  # share the veth like a paced sender
    else:
        want = len(mine) * packets
        import selectors

        sel = selectors.DefaultSelector()
        for s in rx:
            sel.register(s, selectors.EVENT_READ)
        while got < want and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                try:
                    while True:
                        key.fileobj.recv(65535)  # type: ignore[union-attr]
                        got += 1
                except BlockingIOError:
                    pass
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # its memory growth from before the sockets (the interpreter's own size is not the peer's)
    conn.send((_rss_mib() - before, usage.ru_utime + usage.ru_stime, got))


def peer(n: int) -> tuple[float, float]:
    with NetnsBed() as bed:
        a, b, left, right = _bed(bed, n)
        ctx = multiprocessing.get_context("spawn")
        pipes, procs = [], []
        for ns, mine, theirs, send in ((b, right, left, False), (a, left, right, True)):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_peer_side, args=(ns, mine, theirs, send, child))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        for p in pipes:
            assert p.poll(60), "a peer process did not open its sockets"
            p.recv()
        for p in pipes:
            p.send("go")
        results = []
        for p in pipes:
            assert p.poll(120), "a peer process did not finish"
            results.append(p.recv())
        for proc in procs:
            proc.join(10)
        return sum(r[0] for r in results), sum(r[1] for r in results)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=1024, help="endpoints per side (>= 128)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.endpoints needs root (network namespaces)", file=sys.stderr)
        return 2
    n = max(args.endpoints, 2 * SMALL)
    ours_small, ours_big = ours(SMALL), ours(n)
    peer_small, peer_big = peer(SMALL), peer(n)
    # both sides of each pair count: 2n endpoints, growth over 2(n - SMALL)
    scale = 1000 / (2 * (n - SMALL))
    mem = (ours_big[0] - ours_small[0]) * scale
    peer_mem = (peer_big[0] - peer_small[0]) * scale
    cpu = (ours_big[1] - ours_small[1]) * scale
    peer_cpu = (peer_big[1] - peer_small[1]) * scale
    name = "bare Python UDP sockets, same sockets and datagrams"
    emit(
        "memory_mib_per_1000_endpoints (lower is better; ratio ours/peer)",
        mem,
        "MiB",
        peer=name,
        peer_value=round(peer_mem, 3),
        ratio=round(mem / peer_mem, 2) if peer_mem > 0 else None,
    )
    emit(
        "cpu_s_per_1000_endpoints (lower is better; ratio ours/peer)",
        cpu,
        "CPU s",
        peer=name,
        peer_value=round(peer_cpu, 3),
        ratio=round(cpu / peer_cpu, 2) if peer_cpu > 0 else None,
    )
    emit(f"engine_peak_rss_mib_{2 * n}_endpoints", ours_big[0], "MiB")
    emit(f"engine_cpu_s_{2 * n}_endpoints", ours_big[1], "CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
