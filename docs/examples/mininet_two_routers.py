"""A network built in a Mininet script, then a training step's traffic on it.

Two Linux routers (Mininet's linuxrouter example: a Node with IP forwarding), two hosts behind
each, 100 Mb/s links (TCLink). At time dilation 1000 the engine treats them as a 100 Gb/s
fabric: host_link_gbps 100 over the links' 100 Mb/s. Run as root from the repository:

    .venv/bin/python docs/examples/mininet_two_routers.py [results-dir]

The run names the four hosts' namespaces, reads both routers' ports and puts the project's ECN
marker on them, replays an All-Reduce and All-to-All step, writes the results folder and gives
everything back; the script then stops its network (docs/mininet.md).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from mininet.link import TCLink
from mininet.net import Mininet
from mininet.node import Node
from mininet.topo import Topo

from emulator.mininet import run_on_mininet

SCENARIO = """\
name: mininet_two_routers
workload:
  generate:
    kind: moe_mix
    ranks: 4
    expert_parallel_size: 2
    dispatch_bytes: 262144
    allreduce_bytes: 1048576
    iterations: 2
    overlap: true
fabric:
  kind: mininet
  hosts: [h1, h2, h3, h4]
  host_link_gbps: 100
  switch: {ecn: {kmin_bytes: 20000, kmax_bytes: 200000, pmax: 0.2}}
transport:
  congestion_control: dcqcn
  path_mtu_bytes: 1024
metrics:
  prometheus: {port: 0}
run:
  time_dilation: auto   # from the links: 100 Gb/s over 100 Mb/s = 1000
"""


class LinuxRouter(Node):
    """A node that forwards IPv4 (Mininet's examples/linuxrouter.py)."""

    def config(self, **params):  # type: ignore[no-untyped-def]
        super().config(**params)
        self.cmd("sysctl -q -w net.ipv4.ip_forward=1")

    def terminate(self) -> None:
        self.cmd("sysctl -q -w net.ipv4.ip_forward=0")
        super().terminate()


class TwoRouters(Topo):
    """r1 (h1 on 10.1.1.0/24, h2 on 10.1.2.0/24) -- 10.9.0.0/30 -- r2 (h3 on 10.2.3.0/24, h4
    on 10.2.4.0/24), every link 100 Mb/s."""

    def build(self, **_opts):  # type: ignore[no-untyped-def]
        link = {"cls": TCLink, "bw": 100}
        r1 = self.addNode("r1", cls=LinuxRouter, ip="10.9.0.1/30")
        r2 = self.addNode("r2", cls=LinuxRouter, ip="10.9.0.2/30")
        self.addLink(
            r1,
            r2,
            intfName1="r1-r2",
            intfName2="r2-r1",
            **link,
            params1={"ip": "10.9.0.1/30"},
            params2={"ip": "10.9.0.2/30"},
        )
        for i, router, net in (
            (1, r1, "10.1.1"),
            (2, r1, "10.1.2"),
            (3, r2, "10.2.3"),
            (4, r2, "10.2.4"),
        ):
            host = self.addHost(f"h{i}", ip=f"{net}.10/24", defaultRoute=f"via {net}.1")
            self.addLink(
                host, router, intfName2=f"{router}-h{i}", **link, params2={"ip": f"{net}.1/24"}
            )


def add_routes(net: Mininet) -> None:
    """Each router reaches the other's hosts through the link between them."""
    net["r1"].cmd("ip route add 10.2.0.0/16 via 10.9.0.2")
    net["r2"].cmd("ip route add 10.1.0.0/16 via 10.9.0.1")


def main() -> int:
    net = Mininet(topo=TwoRouters(), controller=None, autoSetMacs=True)
    net.start()
    try:
        add_routes(net)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "scenario.yaml"
            path.write_text(SCENARIO)
            out = sys.argv[1] if len(sys.argv) > 1 else None
            result = run_on_mininet(net, path, out_dir=out)
        print(f"verdict {result.summary['fidelity']['verdict']}, results in {result.out_dir}")
        return 0
    finally:
        net.stop()


if __name__ == "__main__":
    sys.exit(main())
