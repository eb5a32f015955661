"""Bench: Clos fabric bring-up and teardown seconds for 16, 64 and 128 hosts, against bare namespaces.

Run as root from the repository root: `python -m bench.fabric_bringup [--hosts 16,64,128]`.

Ours: `fabrics.netns.bring_up` of a two-tier Clos (8 hosts per leaf, 2 spines, so 16/64/128 hosts
have 2/8/16 leaves) with everything a run needs: namespaces, veths, addresses, ECMP routes,
sysctls, offloads, HTB on every egress, the eBPF ECN marker on every switch port (compiled
object cached beforehand) with its parameters written, and the state file kept; then teardown
by the ledger (reverse order, verified).
Peer, measured in the same run: the same number of namespaces (hosts + switches) and veth pairs
built with plain `ip netns add` / `ip link add ... netns` / `ip netns del` commands, one process
each, as a shell script would: the bare minimum without any configuration.
Prints one JSON object per figure:
  bringup_s_<N>_hosts   (peer: bare namespaces+veths; ratio = peer/ours, higher is better)
  teardown_s_<N>_hosts  (peer: deleting the bare namespaces; ratio = peer/ours, higher is better)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from fabrics.ecn.ebpf import compiled_object
from fabrics.netns import bring_up
from fabrics.ownership import STATE_DIR_ENV
from fabrics.spec import ClosSpec
from fabrics.topology import Topology, build_clos

BENCH = "fabric_bringup"
PEER = "bare `ip netns add` + `ip link add veth` per namespace/link (no config)"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def bare(topo: Topology, prefix: str) -> tuple[float, float]:
    """The peer: the same namespaces and veth pairs, one `ip` process per object."""
    t0 = time.perf_counter()
    names = {n.name: f"{prefix}{n.name}" for n in topo.nodes}
    for ns in names.values():
        _ip("netns", "add", ns)
    for c in topo.cables:
        _ip(
            "-n",
            names[c.a.node],
            "link",
            "add",
            c.a.ifname,
            "type",
            "veth",
            "peer",
            "name",
            c.b.ifname,
            "netns",
            names[c.b.node],
        )
    up = time.perf_counter() - t0
    t0 = time.perf_counter()
    for ns in names.values():
        _ip("netns", "del", ns)
    return up, time.perf_counter() - t0


def ours(topo: Topology, prefix: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    live = bring_up(topo, rate_scale=0.01, prefix=prefix)
    up = time.perf_counter() - t0
    t0 = time.perf_counter()
    live.close()
    return up, time.perf_counter() - t0


def emit(metric: str, value: float, peer_value: float, note: str) -> None:
    print(
        json.dumps(
            {
                "bench": BENCH,
                "metric": metric,
                "value": round(value, 3),
                "unit": "s",
                "peer": PEER,
                "peer_value": round(peer_value, 3),
                "ratio": round(peer_value / value, 3),
                "note": note,
            }
        ),
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="16,64,128", help="comma-separated host counts")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("fabric_bringup: needs root (network namespaces, tc, BPF)", file=sys.stderr)
        return 2
    compiled_object()  # compile once, outside the timings (a run does it at first use)
    with tempfile.TemporaryDirectory() as state_dir:
        os.environ[STATE_DIR_ENV] = state_dir
        for hosts in (int(h) for h in args.hosts.split(",")):
            spec = ClosSpec(
                hosts_per_leaf=8,
                leaves=max(1, hosts // 8),
                spines=2,
                host_link_gbps=100,
                fabric_link_gbps=400,
            )
            topo = build_clos(spec)
            prefix = f"fb{os.getpid() % 10000}-"
            bare_up, bare_down = bare(topo, prefix + "b")
            our_up, our_down = ours(topo, prefix)
            note = f"{len(topo.nodes)} namespaces, {len(topo.cables)} veth pairs, ratio = peer/ours"
            emit(
                f"bringup_s_{hosts}_hosts (ratio peer/ours, higher is better)",
                our_up,
                bare_up,
                note,
            )
            emit(
                f"teardown_s_{hosts}_hosts (ratio peer/ours, higher is better)",
                our_down,
                bare_down,
                note,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
