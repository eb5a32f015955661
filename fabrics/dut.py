"""The DUT backend: ranks on existing interfaces cabled to a device under test.

Each rank's interface (physical port, VLAN or macvlan) is optionally moved into its own network
namespace, given the scenario's address and routes, and capped at the scenario's rate with HTB.
The DUT does the switching and ECN marking. Traffic may only go to destinations inside the
scenario's allowlist and only out of the rank's own interface: `check_destination` refuses
anything else before a packet is sent, and `GuardedSocket` calls it on every send.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from fabrics.iproute import Cmd, in_netns, ip, run, run_batch, run_grouped
from fabrics.ownership import Ledger
from fabrics.queues import EgressPort, drop_tail, htb_commands
from fabrics.spec import DutSpec

DEFAULT_PREFIX = "emu-"
RANK_QUEUE_BYTES = 4_194_304


class DestinationRefused(ScenarioError):
    """A send toward an address or out of an interface the scenario did not allow."""


@dataclass
class LiveDut:
    spec: DutSpec
    netns: tuple[str | None, ...]
    ledger: Ledger
    ports: tuple[int, ...] | None = None  # the ports brought up here (None: all of them)

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """The ranks whose interface is on this server (every rank without `ports`)."""
        ranks = range(self.spec.rank_count)
        if self.ports is None:
            return tuple(ranks)
        return tuple(r for r in ranks if self.spec.port_of(r) in self.ports)

    @property
    def marker_name(self) -> str:
        return "dut"

    @property
    def max_rate_bps(self) -> float:
        return self.spec.rank_rate_bps

    # The engine-facing rank API, shared with fabrics.netns.LiveFabric.
    @property
    def ranks(self) -> int:
        return self.spec.rank_count

    def rank_netns(self, rank: int) -> str | None:
        return self.netns[rank]

    def rank_address(self, rank: int) -> str:
        return str(ipaddress.IPv4Interface(self.spec.rank_cidr(rank)).ip)

    def rank_rate_bps(self, rank: int) -> float:
        del rank
        return self.max_rate_bps

    def check_destination(self, rank: int, dst: str, ifname: str | None = None) -> None:
        """Raise DestinationRefused unless `dst` is in the allowlist and `ifname` (when given) is
        the rank's declared interface. Call before anything is sent."""
        check_destination(self.spec, rank, dst, ifname)

    def socket(self, rank: int) -> GuardedSocket:
        """A UDP socket in the rank's namespace, bound to its address and interface."""
        ns = self.netns[rank]
        if ns is None:
            sock = _bound_socket(self.spec, rank)
        else:
            with in_netns(ns):
                sock = _bound_socket(self.spec, rank)
        return GuardedSocket(self, rank, sock)

    def metadata(self) -> dict[str, Any]:
        local = {} if self.ports is None else {"local_ports": list(self.ports)}
        return {
            "backend": "dut",
            "marker": "dut",
            "ranks": self.spec.rank_count,
            "ports": len(self.spec.interfaces),
            **local,
        }

    def close(self) -> list[str]:
        return self.ledger.release()

    def __enter__(self) -> LiveDut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_destination(spec: DutSpec, rank: int, dst: str, ifname: str | None = None) -> None:
    if not 0 <= rank < spec.rank_count:
        raise DestinationRefused(f"rank {rank}: the dut fabric has {spec.rank_count} ranks")
    try:
        addr = ipaddress.ip_address(dst)
    except ValueError:
        raise DestinationRefused(f"destination {dst!r} is not an IP address") from None
    if not any(addr in ipaddress.ip_network(p, strict=False) for p in spec.allowlist):
        raise DestinationRefused(
            f"destination {addr} (rank {rank}) is outside fabric.allowlist "
            f"({', '.join(spec.allowlist)}); refused before sending"
        )
    if ifname is not None and ifname != spec.rank_interface(rank):
        raise DestinationRefused(
            f"interface {ifname} is not rank {rank}'s declared interface "
            f"{spec.rank_interface(rank)} (fabric.interfaces); refused before sending"
        )


class GuardedSocket:
    """A UDP socket whose every send is checked against the allowlist first."""

    def __init__(self, live: LiveDut, rank: int, sock: socket.socket) -> None:
        self.live, self.rank, self.sock = live, rank, sock

    def sendto(self, data: bytes, address: tuple[str, int]) -> int:
        self.live.check_destination(self.rank, address[0])
        return self.sock.sendto(data, address)

    def close(self) -> None:
        self.sock.close()


def _bound_socket(spec: DutSpec, rank: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_BINDTODEVICE, spec.rank_interface(rank).encode()
        )
        sock.bind((str(ipaddress.IPv4Interface(spec.rank_cidr(rank)).ip), 0))
    except OSError:
        sock.close()
        raise
    return sock


def _check_spec(spec: DutSpec) -> None:
    """Every rank is a destination of the others, so every rank address must be allowed."""
    for rank in range(spec.rank_count):
        check_destination(spec, rank, str(ipaddress.IPv4Interface(spec.rank_cidr(rank)).ip))
    if not spec.namespaces and len(spec.interfaces) > 1 and spec.gateways:
        raise ScenarioError(
            "fabric.namespaces: ranks with gateways need their own namespaces (namespaces: true)"
        )


def _link_info(dev: str) -> dict[str, Any]:
    out = run(ip("-j", "link", "show", "dev", dev), check=False)
    if not out.strip():
        raise ScenarioError(f"fabric.interfaces: {dev} does not exist on this machine")
    info: dict[str, Any] = json.loads(out)[0]
    return info


def bring_up_dut(
    spec: DutSpec, *, prefix: str = DEFAULT_PREFIX, ports: Sequence[int] | None = None
) -> LiveDut:
    """Bind the ranks to their interfaces; on any error release what was done and re-raise.
    `ports`: only these interfaces (indexes into spec.interfaces), the ones this server owns
    when a run spreads over several (emulator.backends.cluster); the allowlist is checked for all."""
    _check_spec(spec)
    local = tuple(range(len(spec.interfaces))) if ports is None else tuple(sorted(ports))
    infos = {p: _link_info(spec.interfaces[p]) for p in local}
    ledger = Ledger.claim("dut")
    try:
        live = _bring_up(spec, infos, ledger, prefix, local)
        if ports is not None:
            live.ports = local
        return live
    except BaseException as exc:
        # Release what was made; if that fails too, the state file keeps the rest for
        # `emulate clean` and the original error is still the one reported.
        try:
            ledger.release()
        except EnvironmentProblem as release_error:
            exc.add_note(f"releasing the partial fabric also failed: {release_error}")
        raise


def _bring_up(
    spec: DutSpec,
    infos: dict[int, dict[str, Any]],
    ledger: Ledger,
    prefix: str,
    ports: tuple[int, ...],
) -> LiveDut:
    per_port = spec.ranks_per_interface
    # every port's namespace name (those of other servers' ports are never made here)
    port_ns: tuple[str | None, ...] = tuple(
        f"{prefix}r{p}" if spec.namespaces else None for p in range(len(spec.interfaces))
    )
    netns = tuple(port_ns[spec.port_of(r)] for r in range(spec.rank_count))
    if spec.namespaces:
        ledger.record({"kind": "netns", "name": port_ns[p]} for p in ports)
        run_batch([ip("netns", "add", str(port_ns[p])) for p in ports])
        ledger.record(
            {"kind": "moved_link", "netns": port_ns[p], "name": spec.interfaces[p]} for p in ports
        )
        run_batch(
            [ip("link", "set", "dev", spec.interfaces[p], "netns", str(port_ns[p])) for p in ports]
        )
    cmds: list[Cmd] = []
    records: list[dict[str, Any]] = []
    for p in ports:
        ns, dev = port_ns[p], spec.interfaces[p]
        if spec.mtu_bytes is not None:
            records.append({"kind": "mtu", "netns": ns, "dev": dev, "mtu": int(infos[p]["mtu"])})
            cmds.append(ip("link", "set", "dev", dev, "mtu", str(spec.mtu_bytes), netns=ns))
        for r in range(p * per_port, (p + 1) * per_port):
            cidr = spec.rank_cidr(r)
            records.append({"kind": "address", "netns": ns, "dev": dev, "cidr": cidr})
            cmds.append(ip("addr", "add", cidr, "dev", dev, netns=ns))
        cmds.append(ip("link", "set", "dev", dev, "up", netns=ns))
        if ns is not None:
            cmds.append(ip("link", "set", "lo", "up", netns=ns))
        gateway = spec.rank_gateway(p * per_port)
        if gateway is not None:
            for prefix_ in spec.routes:
                records.append({"kind": "route", "netns": ns, "prefix": prefix_})
                cmds.append(ip("route", "add", prefix_, "via", gateway, "dev", dev, netns=ns))
    ledger.record(records)
    run_grouped(cmds)
    # Cap each port's sending rate at max_rate_gbps with HTB on its egress.
    queues: list[Cmd] = []
    records = []
    for p in ports:
        ns, dev = port_ns[p], spec.interfaces[p]
        mtu = spec.mtu_bytes or int(infos[p]["mtu"])
        port = EgressPort(
            f"r{p}", ns or "", dev, spec.rank_rate_bps, RANK_QUEUE_BYTES, mtu, 0.0, None
        )
        records.append({"kind": "qdisc", "netns": ns, "dev": dev, "parent": "root"})
        queues += [Cmd(c.tool, c.args, ns) for c in htb_commands(port, drop_tail(port))]
    ledger.record(records)
    run_grouped(queues)
    if not spec.namespaces:
        return LiveDut(spec, netns, ledger)
    for p in ports:
        out = run(
            ip("-o", "link", "show", "dev", spec.interfaces[p], netns=port_ns[p]), check=False
        )
        if not out:
            raise EnvironmentProblem(f"{spec.interfaces[p]} did not arrive in {port_ns[p]}")
    return LiveDut(spec, netns, ledger)
