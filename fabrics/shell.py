"""A Mininet-style CLI over a live fabric: `h0 ping h5`, `pingall`, `counters`, `nodes`.

A word that names a node is replaced by its address, as in Mininet's CLI; commands run in the
first word's namespace as an argv list (no shell), so pipes and redirections are not available.
"""

from __future__ import annotations

import cmd
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

from fabrics.counters import read_port_counters
from fabrics.netns import LiveFabric


class FabricShell(cmd.Cmd):
    intro = "fabric is up. `help` lists commands; `NODE CMD ARGS` runs CMD in NODE (e.g. h0 ping -c1 h5)."
    prompt = "emulate> "

    def __init__(self, live: LiveFabric) -> None:
        super().__init__()
        self.live = live
        topo = live.topology
        self.addresses = {h: str(topo.host_address(h)) for h in topo.hosts}

    def do_nodes(self, arg: str) -> None:
        """nodes: every node and its namespace."""
        del arg
        for node in self.live.topology.nodes:
            addr = self.addresses.get(node.name, "")
            print(f"{node.name:8} {node.role:12} {self.live.netns_of(node.name):24} {addr}")

    def do_counters(self, arg: str) -> None:
        """counters: per switch port tx packets, drops, ECN marks, peak phantom queue."""
        del arg
        for (node, dev), c in sorted(read_port_counters(self.live).items()):
            print(
                f"{node:6} {dev:16} tx {c.tx_packets:10} drops {c.drops:6} marks {c.ecn_marks:8} "
                f"peak_q {c.peak_phantom_queue_bytes or 0:10} B"
            )

    def do_pingall(self, arg: str) -> None:
        """pingall: one ping from every host to every other (16 at a time)."""
        del arg

        def ping(pair: tuple[str, str]) -> bool:
            argv = ["ip", "netns", "exec", self.live.netns_of(pair[0]), "ping", "-c1", "-W1"]
            done = subprocess.run(
                [*argv, self.addresses[pair[1]]], capture_output=True, check=False
            )
            return done.returncode == 0

        pairs = [(a, b) for a in self.addresses for b in self.addresses if a != b]
        with ThreadPoolExecutor(max_workers=16) as pool:
            replies = sum(pool.map(ping, pairs))
        print(f"{replies}/{len(pairs)} replies")

    def do_exit(self, arg: str) -> bool:
        """exit: tear the fabric down and leave."""
        del arg
        return True

    do_EOF = do_exit

    def default(self, line: str) -> None:
        words = shlex.split(line)
        if not words or words[0] not in self.live.netns:
            print(f"unknown command or node: {line}")
            return
        argv = [self.addresses.get(w, w) for w in words[1:]]
        if not argv:
            print("usage: NODE CMD ARGS")
            return
        subprocess.run(["ip", "netns", "exec", self.live.netns_of(words[0]), *argv], check=False)

    def emptyline(self) -> bool:
        return False
