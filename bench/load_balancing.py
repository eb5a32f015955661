"""What a leaf's load balancer costs per packet, against the kernel's own forwarding (ECMP)
measured in the same run.

Run as root from the repository root: `python -m bench.load_balancing [--seconds S] [--rounds N]`.

A 2-host Clos (2 leaves, 2 spines, 100 Gb/s links at TDF 1: HTB never binds), one UDP flow
h0 -> h1 on the RoCEv2 port. The leaf tier forwards it with ECMP (the kernel: ip_rcv, the FIB's
multipath lookup, ip_forward) or with each balancer mode (balancer.c at the port's tc ingress,
then bpf_redirect_neigh); the spines and everything else are the same in every run. Two figures
per mode, each the median of N rounds (modes alternate within a round, a fresh fabric each):

- path_ns_per_packet: wall ns per packet through the fabric at saturation, from one sender
  pushing UDP GSO sends of 64 x 200-byte segments flat out (the host segments them; each leaf
  forwards 64 packets) for S seconds, counted at l0's uplinks. On this machine the sender's CPU
  also runs the receive softirqs of every hop, so this is the whole path's CPU per packet;
  the modes differ only at l0, so the difference to ECMP is the balancer's net cost there;
- program_ns_per_packet: the balancer program's own mean run time at l0's host port (the
  kernel's BPF run-time statistics, BPF_ENABLE_STATS, over a second phase of S / 2 seconds:
  they add two clock reads per run, which is why the first figure is taken without them).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from fabrics.counters import read_port_counters
from fabrics.ecn import bpf_syscall
from fabrics.iproute import Cmd, in_netns, run
from fabrics.netns import LiveFabric, bring_up
from fabrics.ownership import STATE_DIR_ENV
from fabrics.spec import ClosSpec, LoadBalancingSpec, TierSpec
from fabrics.topology import Topology, build_clos

BENCH = "load_balancing"
BPF_ENABLE_STATS = 32  # include/uapi/linux/bpf.h
BPF_STATS_RUN_TIME = 0
UDP_SEGMENT = 103  # include/uapi/linux/udp.h
SEGMENT_BYTES = 200
SEGMENTS = 64  # UDP GSO's limit per send in older kernels (UDP_MAX_SEGMENTS)
SPORT, DPORT = 49152, 4791
MODES: dict[str, dict[str, str]] = {
    "ecmp": {"mode": "ecmp"},
    "spray_random": {"mode": "spray"},
    "spray_round_robin": {"mode": "spray", "spray_order": "round_robin"},
    "flowlet": {"mode": "flowlet"},
    "adaptive_packet": {"mode": "adaptive"},
    "adaptive_flowlet": {"mode": "adaptive", "adaptive_granularity": "flowlet"},
}
UPLINKS = ("l0-s0", "l0-s1")


def emit(metric: str, value: float, unit: str, **peer: Any) -> None:
    print(
        json.dumps(
            {"bench": BENCH, "metric": metric, "value": round(value, 4), "unit": unit, **peer}
        ),
        flush=True,
    )


class _EnableStats(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32)]


@contextlib.contextmanager
def run_time_stats() -> Iterator[None]:
    """The kernel's BPF run-time statistics on while inside (an fd keeps them on)."""
    fd = bpf_syscall._bpf(BPF_ENABLE_STATS, _EnableStats(BPF_STATS_RUN_TIME))
    try:
        yield
    finally:
        os.close(fd)


def topology(lb: dict[str, str]) -> Topology:
    return build_clos(
        ClosSpec(
            hosts_per_leaf=1,
            leaves=2,
            spines=2,
            host_link_gbps=100,
            fabric_link_gbps=100,
            leaf=TierSpec(load_balancing=LoadBalancingSpec(**lb)),  # type: ignore[arg-type]
        )
    )


def flood(live: LiveFabric, topo: Topology, seconds: float) -> int:
    """Send the flow flat out for `seconds`; the packets l0's uplinks sent meanwhile."""
    with in_netns(live.netns_of("h1")):
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with in_netns(live.netns_of("h0")):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # a receiver that never reads: packets end at its full buffer, not in ICMP unreachables
        sink.bind(("0.0.0.0", DPORT))
        s.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, SEGMENT_BYTES)
        s.bind((str(topo.host_address("h0")), SPORT))
        s.connect((str(topo.host_address("h1")), DPORT))
        payload = bytes(SEGMENT_BYTES * SEGMENTS)
        before = read_port_counters(live, ["l0"])
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(16):
                with contextlib.suppress(OSError):  # ENOBUFS when a queue is full: try again
                    s.send(payload)
        time.sleep(0.05)  # what is in flight reaches the uplinks
        after = read_port_counters(live, ["l0"])
    finally:
        s.close()
        sink.close()
    return sum(after[("l0", d)].tx_packets - before[("l0", d)].tx_packets for d in UPLINKS)


def program_ns(live: LiveFabric) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of the balancer at l0's host port."""
    assert live.balancer is not None
    [prog] = [p for p in live.balancer.switches["l0"].programs if p.dev == "l0-h0"]
    doc = json.loads(run(Cmd("bpftool", ("-j", "prog", "show", "id", str(prog.prog_id)))))
    return int(doc.get("run_time_ns", 0)), int(doc.get("run_cnt", 0))


def one_round(name: str, seconds: float, prefix: str) -> tuple[float, float | None]:
    """(wall ns per packet at saturation, the program's ns per packet or None for ECMP)."""
    topo = topology(MODES[name])
    with bring_up(topo, prefix=prefix) as live:
        flood(live, topo, 0.2)  # warm up: neighbours, caches, the flowlet entry
        t0 = time.perf_counter()
        packets = flood(live, topo, seconds)
        path_ns = (time.perf_counter() - t0) * 1e9 / max(packets, 1)
        if live.balancer is None:
            return path_ns, None
        with run_time_stats():
            t_ns, n0 = program_ns(live)
            flood(live, topo, seconds / 2)
            t1_ns, n1 = program_ns(live)
        return path_ns, (t1_ns - t_ns) / max(n1 - n0, 1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per round and mode")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.load_balancing needs root (network namespaces, BPF)", file=sys.stderr)
        return 2
    path: dict[str, list[float]] = {m: [] for m in MODES}
    prog: dict[str, list[float]] = {m: [] for m in MODES}
    # a private state file: this bench's fabrics never meet anyone else's
    with tempfile.TemporaryDirectory() as state:
        os.environ[STATE_DIR_ENV] = state
        for _ in range(args.rounds):
            for name in MODES:
                ns, own = one_round(name, args.seconds, f"lbb{os.getpid() % 10000}-")
                path[name].append(ns)
                if own is not None:
                    prog[name].append(own)
    ecmp = statistics.median(path["ecmp"])
    emit(
        "path_ns_per_packet_ecmp (kernel forwarding at the leaf)",
        ecmp,
        "ns/packet",
        rounds=[round(v, 1) for v in path["ecmp"]],
    )
    for name in list(MODES)[1:]:
        mine = statistics.median(path[name])
        emit(
            f"path_ns_per_packet_{name} (lower is better; ratio ours/peer)",
            mine,
            "ns/packet",
            peer="ecmp: the kernel's multipath forwarding at the leaf, same run",
            peer_value=round(ecmp, 1),
            ratio=round(mine / ecmp, 3),
            rounds=[round(v, 1) for v in path[name]],
        )
        emit(
            f"program_ns_per_packet_{name}",
            statistics.median(prog[name]),
            "ns/packet",
            rounds=[round(v, 1) for v in prog[name]],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
