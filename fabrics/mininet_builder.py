"""The Clos's nodes and cables made through Mininet's Python API (`fabric.builder: mininet`).

Each node is a Mininet `Node`: a shell Mininet starts in a new network namespace (`mnexec -cdn`),
the way Mininet's own `linuxrouter.py` example makes routers (this kernel has no Open vSwitch;
every switch is a Linux router). Each cable is a Mininet `Link`: a veth pair made inside the
first node's namespace with its peer sent straight into the second's, named and addressed as the
topology says (fabrics/topology.py, netns.cable_mac). The node's namespace is then given the
fabric's name (`ip netns attach`), so everything after the nodes and cables (sysctls, addresses,
routes, static neighbours, offloads, HTB, the ECN marker, the engine's sockets, the counters,
`emulate clean`) is the netns fabric's own code, unchanged: the same results, verdict and
teardown.

What Mininet creates is owned by the run: each node shell is recorded in the state file with its
pid and start time as soon as it exists (Ctrl-C held meanwhile), its namespace name before it is
attached; the release terminates the shells through Mininet (`Node.terminate`: SIGHUP to the
shell's session, its pty closed, the shell reaped) and the ledger kills any left by pid (after a
SIGKILL of the run, `emulate clean` does it from the state file). Mininet's cleanup (`mn -c`,
which hunts processes and interfaces by name) is never used, nor the `Mininet` container, whose
start-up raises system-wide limits and sysctls (mininet.util.fixLimits) the run would not own.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.signals import signals_deferred
from fabrics.iproute import ip, run_batch, run_grouped
from fabrics.ownership import Ledger, process_start_ticks
from fabrics.topology import Cable, Topology

MININET_MISSING = (
    "fabric.builder: mininet needs Mininet's Python API and its mnexec (Debian package "
    "`mininet`, which ./setup.sh installs); {why}. Use builder: netns (the same fabric without "
    "Mininet)"
)


def mininet_api() -> tuple[Any, Any]:
    """Mininet's Node and Link classes, or one line saying what is missing."""
    try:
        node = importlib.import_module("mininet.node")
        link = importlib.import_module("mininet.link")
    except ImportError as exc:
        raise EnvironmentProblem(MININET_MISSING.format(why=f"import failed: {exc}")) from None
    for tool in ("mnexec", "ifconfig"):
        if shutil.which(tool) is None:
            raise EnvironmentProblem(MININET_MISSING.format(why=f"{tool} is not on PATH"))
    return node.Node, link.Link


@dataclass
class MininetNodes:
    """The Mininet nodes of a fabric, by topology node name."""

    nodes: dict[str, Any] = field(default_factory=dict)

    def pids(self) -> dict[str, int]:
        return {name: int(node.pid) for name, node in self.nodes.items()}

    def terminate(self) -> None:
        """Mininet's own stop for each node: SIGHUP to its shell's session, its pty closed, the
        shell reaped (Node.terminate); what survives is killed by the ledger by pid."""
        for node in self.nodes.values():
            node.terminate()
        self.nodes.clear()


def make_nodes(
    topo: Topology, local: Iterable[str], netns: dict[str, str], ledger: Ledger, made: MininetNodes
) -> None:
    """One Mininet Node per topology node in `local` (into `made` as each exists, so a failure
    halfway terminates those made), its namespace named netns[node]."""
    node_cls, _ = mininet_api()
    for name in (n.name for n in topo.nodes if n.name in set(local)):
        with signals_deferred():  # a shell started and not recorded would outlive the run
            node = node_cls(name, inNamespace=True)
            made.nodes[name] = node
            ledger.record(
                [
                    {
                        "kind": "process",
                        "name": f"mininet node {name}",
                        "pid": int(node.pid),
                        "start_ticks": process_start_ticks(int(node.pid)),
                    }
                ]
            )
    ledger.record({"kind": "netns", "name": netns[n]} for n in made.nodes)
    run_batch([ip("netns", "attach", netns[n], str(node.pid)) for n, node in made.nodes.items()])


def make_cables(
    cables: Iterable[tuple[int, Cable]],
    made: MininetNodes,
    netns: dict[str, str],
    ledger: Ledger,
    mtu_bytes: int,
    mac_of: Any,
) -> None:
    """One Mininet Link per cable (both ends on this machine), with the fabric's names, MACs
    and MTU; recorded before it is made (each dies with its namespace)."""
    _, link_cls = mininet_api()
    cables = list(cables)
    ledger.record({"kind": "veth", "netns": netns[c.a.node], "name": c.a.ifname} for _, c in cables)
    for i, c in cables:
        try:
            link_cls(
                made.nodes[c.a.node],
                made.nodes[c.b.node],
                intfName1=c.a.ifname,
                intfName2=c.b.ifname,
                addr1=mac_of(i, 0),
                addr2=mac_of(i, 1),
            )
        except Exception as exc:  # Mininet raises a bare Exception with ip's message
            raise EnvironmentProblem(f"Mininet could not make cable {c.a.ifname}: {exc}") from None
    run_grouped(
        ip("link", "set", "dev", end.ifname, "mtu", str(mtu_bytes), netns=netns[end.node])
        for _, c in cables
        for end in (c.a, c.b)
    )


def refuse_part() -> None:
    raise ScenarioError(
        "fabric.builder: mininet builds a fabric on one machine; a fabric split over servers "
        "(run.cluster) uses builder: netns"
    )
