"""Ranks on interfaces cabled to a switch under test, replayed by the engine (`dut`).

The switch is not ours: its drops and queues are not in our counters, and it runs in real time
(TDF 1). `engine.send_path: af_xdp` runs here only: every port is checked before a worker
starts (one line naming the interface and why it cannot), the ranks of one interface share one
NIC (one worker, one port), and the ports' XDP programs are recorded in the fabric's ledger as
the workers attach them; what the ports counted becomes fidelity reasons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collectors.nic import NetlinkCounters
from emulator.backends.base import (
    BackendContext,
    BackendOptions,
    Session,
    TimescaleRequest,
)
from emulator.backends.engine.backend import EngineBackend
from emulator.backends.engine.session import EngineSession, bring_up, engine_params
from emulator.backends.netns.backend import need_root, refuse_engine_entropy
from emulator.errors import ScenarioError
from emulator.scenario.model import Scenario
from emulator.timescale.tdf import TdfChoice


class DutSession(EngineSession):
    """Ports toward a switch under test: its drops and queues are not ours to read."""

    def __init__(self, context: BackendContext, live: Any) -> None:
        if context.scenario.engine.send_path == "af_xdp":
            check_af_xdp_ports(context, live)
        super().__init__(context, live)

    def _nic_of(self, rank: int) -> int | None:
        spec = self.live.spec
        if self.context.scenario.engine.send_path == "af_xdp":
            # one AF_XDP port per interface: its ranks share its arbiter, its worker, its cap
            return int(spec.interfaces.index(spec.rank_interface(rank)))
        return spec.port_of(rank) if spec.ranks_per_interface > 1 else None

    def _ledger(self) -> Callable[[list[dict[str, Any]]], None] | None:
        return self.live.ledger.record

    def _reasons(self, metadata: dict[str, Any]) -> list[str]:
        return af_xdp_reasons(metadata)

    def _nic_counters(self) -> dict[int, NetlinkCounters]:
        # one reading per port: ranks sharing a port are counted under its first rank
        spec = self.live.spec
        world = self.context.planned.world_size
        return {
            r: NetlinkCounters(spec.rank_interface(r), self.live.rank_netns(r))
            for r in range(0, world, spec.ranks_per_interface)
        }

    def _pfc_ifname(self, rank: int) -> str:
        return str(self.live.spec.rank_interface(rank))

    def _not_applicable(self) -> tuple[str, ...]:
        # a real switch under test is not ours: its drops are not in our counters
        return ("drops_in_lossless_fabric",)


def check_af_xdp_ports(context: BackendContext, live: Any) -> None:
    """Every local DUT port can run af_xdp (emulator.engine.af_xdp.check_interface: root, the
    native module, the interface up with its addresses, its MTU, no other XDP program, and
    multi-buffer where the path MTU needs it), before any worker starts: AfXdpUnavailable
    otherwise, one line naming the interface and why. What only the driver can say (its XDP
    modes, zero-copy) the workers find when they open the ports, still before any packet."""
    from emulator.engine.af_xdp import check_interface
    from emulator.engine.xdp_ports import port_config

    spec = live.spec
    engine = engine_params(context)
    ports: dict[tuple[str | None, str], list[str]] = {}
    for r in live.local_ranks:
        key = (live.rank_netns(r), spec.rank_interface(r))
        ports.setdefault(key, []).append(live.rank_address(r))
    config = port_config(engine, context.scenario.transport.path_mtu_bytes, live.max_rate_bps)
    for (netns, ifname), addresses in ports.items():
        check_interface(ifname, netns, addresses, config)


def af_xdp_reasons(metadata: dict[str, Any]) -> list[str]:
    """What the AF_XDP ports' counters (summary engine.af_xdp, engine.send_path af_xdp) say the
    run lost on this machine's side: packets the kernel dropped before the engine read them,
    packets for the ranks that went to the kernel for want of a socket on their receive queue,
    segments the transmit backlog refused or the device dropped, transmit descriptors the kernel
    rejected, received frames dropped as not valid RoCEv2 (a checksum or the ICRC wrong among
    them). Each is traffic the switch under test did not lose, which the run's losses and FCTs
    include."""
    # rx_malformed's finer counters (xsk_api.h struct xsk_counters), named when non-zero
    malformed_kinds = ("rx_bad_ip_checksum", "rx_bad_udp_checksum", "rx_bad_icrc")
    reasons: list[str] = []
    for port in (metadata.get("af_xdp") or {}).get("ports", []):
        c = port.get("counters") or {}
        name = port.get("interface", "?")
        if port.get("netns"):
            name += f" (namespace {port['netns']})"
        rx_lost = {
            k: int(c.get(k, 0)) for k in ("rx_dropped", "rx_ring_full", "rx_fill_ring_empty_descs")
        }
        if any(rx_lost.values()):
            said = ", ".join(f"{k} {v}" for k, v in rx_lost.items() if v)
            reasons.append(
                f"af_xdp port {name}: the kernel dropped received packets before the engine "
                f"read them ({said}): the worker did not read fast enough; lower the rate or "
                "give the port's worker a core"
            )
        if int(c.get("no_socket_passed", 0)):
            reasons.append(
                f"af_xdp port {name}: {c['no_socket_passed']} RoCEv2 packets for its ranks "
                "arrived on a receive queue without an XDP socket and went to the kernel "
                "(lost to the engine): the port's queues changed during the run"
            )
        tx_lost = {k: int(c.get(k, 0)) for k in ("tx_backlog_full", "tx_dropped")}
        if any(tx_lost.values()):
            said = ", ".join(f"{k} {v}" for k, v in tx_lost.items() if v)
            reasons.append(
                f"af_xdp port {name}: packets were lost before the wire ({said}: segments the "
                "transmit backlog refused, or the device dropped); the transport resent them"
            )
        invalid = int(c.get("tx_invalid_descs", 0))
        if invalid:
            reasons.append(
                f"af_xdp port {name}: the kernel rejected {invalid} transmit descriptors "
                "(tx_invalid_descs, XDP_STATISTICS): those packets never left; the port wrote a "
                "descriptor outside its UMEM or longer than a frame (a bug in the port)"
            )
        malformed = int(c.get("rx_malformed", 0))
        if malformed:
            kinds = "".join(f", {k} {int(c[k])}" for k in malformed_kinds if int(c.get(k, 0)))
            reasons.append(
                f"af_xdp port {name}: {malformed} received frames were dropped as malformed "
                f"(rx_malformed{kinds}): not valid RoCEv2 over IPv4/UDP, or a wrong IPv4 header "
                "checksum, UDP checksum or ICRC: corrupted on the way, or not from a RoCEv2 sender"
            )
    return reasons


def refuse_dilation(scenario: Scenario, options: BackendOptions) -> None:
    """A switch under test runs in real time (a physical switch cannot be slowed down): a time
    dilation factor other than 1, in the scenario or on the command line, is refused."""
    setting = scenario.run.time_dilation
    if setting not in ("auto", 1, 1.0):
        raise ScenarioError(f"run.time_dilation: {setting} cannot apply to a dut fabric; use 1")
    if options.tdf not in (None, 1.0):
        raise ScenarioError(f"--tdf {options.tdf:g} cannot apply to a dut fabric (real time)")


def real_time(request: TimescaleRequest) -> TdfChoice:
    """TDF 1: the switch under test's own time."""
    peak_bps = request.planned.world_size * request.scenario.fabric.rank_rate_bps
    return TdfChoice(1.0, "dut", peak_bps)


class DutEngineBackend(EngineBackend):
    """Ranks on interfaces cabled to a switch under test, replayed by the engine."""

    name = "dut"

    def check(self, scenario: Scenario, options: BackendOptions) -> None:
        refuse_dilation(scenario, options)
        refuse_engine_entropy(scenario)
        need_root()

    def timescale(self, request: TimescaleRequest) -> TdfChoice:
        return real_time(request)

    def open(self, context: BackendContext) -> Session:
        return DutSession(context, bring_up(context))
