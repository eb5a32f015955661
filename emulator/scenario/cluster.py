"""`run.cluster:` in a scenario: the Ray cluster a run spreads over, and which server hosts what.

    run:
      cluster:
        address: 10.0.0.1:6379          # the head's GCS (`emulate run --cluster` overrides it)
        servers:
          - name: a                     # its Ray node offers the resource emulator-server-a
            leaves: [0]                 # emulated Clos: these leaves and their hosts live here
            spines: [0, 1]              # and these spines (default: on the first server)
            underlay: {interface: ens5, address: 192.168.10.1}
          - name: b
            leaves: [1]
            underlay: {interface: ens5, address: 192.168.10.2}

Plain data: emulator.backends.cluster.placement turns it and the fabric into each server's share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from emulator.config import param

SERVER_RESOURCE_PREFIX = "emulator-server-"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,7}$")  # it becomes part of namespace names


@dataclass(frozen=True)
class UnderlaySpec:
    """The server's interface that carries the fabric's cables to other servers (VXLAN)."""

    interface: str = param(
        doc="the interface (a NIC of the server; its MTU must carry the "
        "fabric's MTU + 50 bytes of VXLAN)"
    )
    address: str = param(doc="its IPv4 address, which the other servers' tunnels send to")
    netns: str | None = param(
        None,
        doc="the namespace the interface is in (default: the root namespace); for several "
        "servers emulated on one machine, as the tests do",
    )


@dataclass(frozen=True)
class ServerSpec:
    """One server of the cluster and what of the fabric it hosts."""

    name: str = param(
        doc="short name (a-z, 0-9, _; at most 8): its namespaces are prefixed with it"
    )
    resource: str = param(
        "",
        doc="the Ray custom resource its node offers (`ray start --resources`); default "
        f"{SERVER_RESOURCE_PREFIX}<name>",
    )
    leaves: tuple[int, ...] = param(
        (), doc="clos: the leaves (global index) hosted here, with their hosts (ranks)"
    )
    spines: tuple[int, ...] = param((), doc="clos: the spines (global index) hosted here")
    super_spines: tuple[int, ...] = param((), doc="clos: the super spines hosted here")
    interfaces: tuple[str, ...] = param(
        (), doc="dut: the fabric's interfaces on this server (their ranks run here)"
    )
    underlay: UnderlaySpec | None = param(
        None,
        doc="clos, when it has cables to other servers: {interface, address, netns}, the "
        "interface that carries them as VXLAN (its MTU >= the fabric's + 50), its IPv4 address, "
        "and its namespace (default the root one; tests emulate servers in namespaces)",
    )
    state_dir: str | None = param(
        None,
        doc="where its actor records what it creates (default /run/chakra-emulator, what "
        "`emulate clean` reads); give each its own when several servers share one machine",
    )

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"name: {self.name!r} must be 1-8 of a-z, 0-9, _")

    @property
    def ray_resource(self) -> str:
        return self.resource or f"{SERVER_RESOURCE_PREFIX}{self.name}"


@dataclass(frozen=True)
class ClusterSpec:
    """A run spread over several servers of a Ray cluster, one engine actor per server."""

    address: str = param(
        "", doc="the Ray cluster's address host:port (the head's GCS); `emulate run --cluster`"
    )
    servers: tuple[ServerSpec, ...] = param(
        (), doc="the servers and what each hosts; every leaf (clos) or interface (dut) on one"
    )
    workers_per_server: int = param(
        0, doc="engine workers on each server (0: one per core of that server)", min=0, max=256
    )
    start_timeout_s: float = param(
        120.0,
        doc="how long the servers' actors may take to be placed and ready",
        unit="s",
        min=1.0,
    )

    def __post_init__(self) -> None:
        names = [s.name for s in self.servers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"servers: {dup[0]!r} is named twice")
