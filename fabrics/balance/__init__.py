"""Load balancing among equal-cost next hops in the emulated fabric: spray, flowlet, adaptive.

A tier whose `load_balancing.mode` is not ecmp gets an eBPF program at the tc ingress of every
port of its switches (balancer.c) that picks the next hop and forwards the packet itself; the
kernel's multipath route (and its L4 hash) keeps whatever the program leaves to it. maps.py
holds the maps' layouts and the next-hop sets built from the Topology's routes; program.py
builds, attaches and finds the program; live.py wires it into a live fabric.
docs/multipath.md, "In the emulated fabric", says how it works and what it costs.
"""

from fabrics.balance.live import Balancer, attach_balancers, check_balancing
from fabrics.balance.maps import BalanceCounters

__all__ = ["BalanceCounters", "Balancer", "attach_balancers", "check_balancing"]
