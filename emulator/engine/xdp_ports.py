"""A worker's AF_XDP ports (`engine.send_path: af_xdp`): one per interface its ranks are on, how
each is set up, recorded, paced and reported.

- Opened in the worker process, never before a fork or spawn (a child would hold the BPF link and
  keep the program attached), all ranks of one interface in the worker that owns it (the DUT
  backend gives them one NIC, so the launcher keeps them together).
- Recorded before attached: the port hands its ledger entry to a `PipeRecorder`, which sends it
  to whoever holds the run's ledger (the coordinator on one machine, the server's engine actor
  in a cluster, each with its own state file) and waits for the acknowledgement; only then is
  the program attached. A SIGKILLed run leaves the entry for `emulate clean`, and the kernel
  detaches the program with the dead process's link.
- Paced: the port's token bucket caps the interface at the rank's line rate (the DUT's
  max_rate_gbps); its depth is `DEPTH_S` at the cap (or four frames), and the worker's drain
  wakes at most every half of that (PortGroup.drain), sleeping in between, so one worker paces
  all its ports without spinning.
- Reported: each port's info and counters, for the run's metadata and its fidelity verdict.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from emulator.engine.af_xdp import AfXdpConfig, AfXdpPort, XdpFlow, wire_bytes
from emulator.engine.af_xdp_setup import (
    AfXdpUnavailable,
    frame_room,
    max_frame_bytes,
    next_hop_mac,
)
from emulator.engine.params import EngineParams
from emulator.engine.plan import RankEndpoint
from emulator.errors import EnvironmentProblem

# A worker's ledger message: these bytes, then the entries as JSON. Every other message on a
# worker's pipe is a pickle, which starts with 0x80, so a reader of raw bytes (the cluster's
# engine actor) tells it apart without unpickling anything.
LEDGER_TAG = b"xdp-ledger:"
# The bucket's depth in time at the cap (at least four frames, as the port's own default): the
# drain wakes every half of it, which a sleep on a shared VM overshoots by tens of microseconds,
# and any window W on the wire carries at most cap x W + 2 x depth (PortGroup.drain).
DEPTH_S = 200e-6
LARGEST_TX_FRAMES = 1 << 16
BACKLOG_TICKS = 3  # what a port's backlog may hold, in ticks at the cap (backlog_limit)
RX_TIME = "user-space read time (AF_XDP copy mode has no kernel receive stamp)"


def ledger_message(items: Iterable[dict[str, Any]]) -> bytes:
    return LEDGER_TAG + json.dumps(list(items)).encode()


def ledger_items(data: bytes) -> list[dict[str, Any]] | None:
    """The entries of a worker's ledger message (None: another message)."""
    if not data.startswith(LEDGER_TAG):
        return None
    items: list[dict[str, Any]] = json.loads(data[len(LEDGER_TAG) :])
    return items


class PipeRecorder:
    """The ledger as a worker sees it (af_xdp.Recorder): each record goes over the worker's pipe
    and is acknowledged before the port attaches anything."""

    def __init__(self, pipe: Connection, timeout_s: float) -> None:
        self.pipe = pipe
        self.timeout_s = timeout_s
        self.recorded: bool | None = None  # False: nobody holds a ledger (a bare Coordinator)

    def record(self, items: Iterable[dict[str, Any]]) -> None:
        self.pipe.send_bytes(ledger_message(items))
        if not self.pipe.poll(self.timeout_s):
            raise EnvironmentProblem(
                f"the run did not acknowledge an XDP attachment's ledger record within "
                f"{self.timeout_s:g} s (engine.start_timeout_s): not attached"
            )
        answer = self.pipe.recv()
        if answer[0] != "ledger_ok":
            raise EnvironmentProblem(f"the run could not record an XDP attachment: {answer[1]}")
        self.recorded = bool(answer[1])


def ledger_answer(
    record: Callable[[list[dict[str, Any]]], None] | None, items: list[dict[str, Any]]
) -> tuple[str, Any]:
    """What a worker waiting in PipeRecorder.record is told once whoever holds the run's ledger
    (`record`; None: nobody) has recorded its entries: ("ledger_ok", recorded) or
    ("ledger_failed", why)."""
    if record is None:
        return ("ledger_ok", False)
    try:
        record(items)
    except Exception as e:
        return ("ledger_failed", f"{type(e).__name__}: {e}")
    return ("ledger_ok", True)


def port_config(params: EngineParams, path_mtu_bytes: int, rate_bps: float) -> AfXdpConfig:
    """A port capped at `rate_bps` (wall bits/s, Ethernet framing included) with the engine's
    depth, and frames for twice what its backlog may hold (backlog_limit) besides a TX ring's
    worth in flight."""
    base = AfXdpConfig(
        path_mtu_bytes,
        rate_bps=rate_bps,
        zero_copy=params.af_xdp_zero_copy,
        xdp_mode=params.af_xdp_mode,
    )
    depth = params.af_xdp_burst_bytes or max(base.depth_bytes(), int(rate_bps / 8 * DEPTH_S))
    held = _backlog_packets(rate_bps, params.tick_s, path_mtu_bytes)
    needed = 2 * held * _frames_per_packet(base) + base.ring_size
    tx_frames = min(max(base.tx_frames, 1 << (needed - 1).bit_length()), LARGEST_TX_FRAMES)
    return dataclasses.replace(base, burst_bytes=depth, tx_frames=tx_frames)


def min_gap_s(config: AfXdpConfig) -> float:
    """The drain's shortest sleep: half the bucket's depth in time at the cap (0: no cap)."""
    if not config.rate_bps:
        return 0.0
    return config.depth_bytes() * 8 / config.rate_bps / 2


def backlog_limit(config: AfXdpConfig, tick_s: float) -> int:
    """Packets the NIC arbiter may keep waiting in a port's backlog: BACKLOG_TICKS ticks at the
    cap (at least eight), within what its frames hold: the tick it releases ahead, the tick
    being sent and a margin. The worker drains between ticks, so more would only queue: a
    deeper backlog delays every packet behind it (its queue pairs' RTT; a receiver's ACKs go
    ahead) as an HTB queue does on the socket path."""
    c = config
    # a TX ring's worth in flight
    capacity = max(1, (c.tx_frames - c.ring_size) // _frames_per_packet(c))
    wanted = _backlog_packets(c.rate_bps or 0, tick_s, c.path_mtu_bytes)
    return min(capacity, max(8, wanted))


def _frames_per_packet(config: AfXdpConfig) -> int:
    """UMEM frames the largest packet of the path MTU takes (more than one: multi-buffer)."""
    largest = max_frame_bytes(config.path_mtu_bytes)
    return math.ceil(largest / frame_room(config.frame_bytes)[1])


def _backlog_packets(rate_bps: float, tick_s: float, path_mtu_bytes: int) -> int:
    """The largest packets BACKLOG_TICKS ticks at `rate_bps` carry."""
    largest = max_frame_bytes(path_mtu_bytes)
    return math.ceil(rate_bps / 8 * BACKLOG_TICKS * tick_s / wire_bytes(largest))


def interface_of(address: str, netns: str | None) -> str:
    """The interface holding `address` in `netns` (a rank's port, where no one said which)."""
    from emulator.engine.af_xdp_setup import _ip

    for entry in json.loads(_ip(netns, "-j", "-4", "addr", "show") or "[]"):
        if any(a.get("local") == address for a in entry.get("addr_info", [])):
            return str(entry["ifname"])
    where = f" in namespace {netns}" if netns else ""
    raise EnvironmentProblem(
        f"engine.send_path af_xdp: no interface{where} holds the rank address {address}"
    )


@dataclass(eq=False)
class XdpNic:
    """One open port and what the worker keeps with it: the next hop's MAC by destination, and
    how many packets its backlog may hold (its ranks by address are the worker's:
    emulator.engine.ranks.RankSockets.xdp_ports)."""

    port: AfXdpPort
    config: AfXdpConfig
    backlog_limit: int  # packets the NIC arbiter keeps waiting there at most (open_ports)
    macs: dict[str, bytes] = field(default_factory=dict)

    def flow(self, src: str, dst: str, sport: int) -> XdpFlow:
        """The port's flow src:sport -> dst:4791 (the next hop resolved once per destination:
        the ranks of one port share its namespace's routes)."""
        flow = self.port.flow(src, dst, sport, dst_mac=self.macs.get(dst))
        self.macs[dst] = flow.dst_mac
        return flow

    def resolve(self, source: str, destinations: Iterable[str]) -> None:
        """The next hops toward `destinations` from `source` (one of the port's addresses) at
        once, before the run: the routes in one `ip -batch`, then each distinct next hop's
        neighbour (one ARP probe where it is missing). A flow created during the run then
        costs no lookup. Raises AfXdpUnavailable (one line) for a next hop that does not
        answer; what does not resolve here is left to `flow`, which names why."""
        port = self.port
        todo = [d for d in dict.fromkeys(destinations) if d not in self.macs and d != source]
        if not todo:
            return
        argv = ["ip", *(["-n", port.netns] if port.netns else []), "-j", "-force", "-batch", "-"]
        commands = "".join(f"route get {d} from {source}\n" for d in todo)
        proc = subprocess.run(
            argv, input=commands, capture_output=True, text=True, timeout=60, check=False
        )
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if len(lines) != len(todo):
            return  # a lookup failed: each flow finds its own (and names the failure)
        by_hop: dict[str, list[str]] = {}
        for dst, line in zip(todo, lines, strict=True):
            route = (json.loads(line) or [{}])[0]
            if route.get("dev") == port.ifname:
                by_hop.setdefault(str(route.get("gateway", dst)), []).append(dst)
        for dsts in by_hop.values():
            mac = next_hop_mac(port.ifname, port.netns, source, dsts[0])
            self.macs.update((d, mac) for d in dsts)

    def report(self) -> dict[str, Any]:
        return {**self.port.info, "counters": self.port.counters()}


def open_ports(
    ranks: Sequence[RankEndpoint],
    params: EngineParams,
    path_mtu_bytes: int,
    recorder: PipeRecorder | None,
    destinations: Iterable[str] = (),
) -> dict[str, XdpNic]:
    """A port per interface of `ranks` (by namespace and name), each capped at its ranks' line
    rate (wall time), with its next hops toward `destinations` resolved, by rank address.
    Raises AfXdpUnavailable (one line) and closes what it opened when one cannot open."""
    destinations = list(destinations)
    groups: dict[tuple[str | None, str], list[RankEndpoint]] = {}
    for r in ranks:
        groups.setdefault((r.netns, interface_of(r.address, r.netns)), []).append(r)
    opened: dict[str, XdpNic] = {}
    try:
        for (netns, ifname), members in groups.items():
            rate_bps = min(m.line_rate_bps for m in members) / params.tdf
            config = port_config(params, path_mtu_bytes, rate_bps)
            addresses = [m.address for m in members]
            port = AfXdpPort.open(ifname, netns, addresses, config, ledger=recorder)
            # whether the run's ledger holds its XDP program (None: no recorder was given)
            port.info["ledger_recorded"] = None if recorder is None else recorder.recorded
            nic = XdpNic(port, config, backlog_limit(config, params.tick_s))
            opened.update((a, nic) for a in addresses)
            nic.resolve(addresses[0], destinations)
    except BaseException:
        for nic in {id(n): n for n in opened.values()}.values():
            nic.port.close()
        raise
    return opened


class PortGroup:
    """A worker's ports drained together (xsk_ports_drain): one call paces them all until a
    deadline, a receive or an empty backlog."""

    def __init__(self, nics: Sequence[XdpNic]) -> None:
        self.nics = list(nics)
        mod = self.nics[0].port.module
        self._ffi, self._lib = mod.ffi, mod.lib
        self._handles = self._ffi.new("struct xsk_port *[]", [n.port.handle for n in self.nics])
        self._rcs = self._ffi.new("int64_t[]", len(self.nics))
        self.min_gap_ns = int(min(min_gap_s(n.config) for n in self.nics) * 1e9)

    @property
    def backlog(self) -> int:
        return sum(n.port.backlog for n in self.nics)

    def drain(self, timeout_s: float, *, stop_on_rx: bool) -> tuple[int, list[tuple[XdpNic, int]]]:
        """Pace every port's backlog for at most timeout_s (with stop_on_rx, until something
        arrived): (packets left, [(port, errno)] for the ports whose link went down, their
        backlog dropped and counted)."""
        lib = self._lib
        for i in range(len(self.nics)):
            self._rcs[i] = 0
        deadline = lib.xsk_now_ns() + int(timeout_s * 1e9)
        n = len(self.nics)
        left = lib.xsk_ports_drain(
            self._handles, n, deadline, int(stop_on_rx), self.min_gap_ns, self._rcs
        )
        failed = [(nic, -int(self._rcs[i])) for i, nic in enumerate(self.nics) if self._rcs[i] < 0]
        return int(left), failed


def summarize(ports: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's af_xdp section: every port's info and counters, and what the receive time of
    the one-way latency is."""
    return {"ports": ports, "rx_time": RX_TIME}


__all__ = [
    "DEPTH_S",
    "LEDGER_TAG",
    "AfXdpUnavailable",
    "PipeRecorder",
    "PortGroup",
    "XdpNic",
    "backlog_limit",
    "interface_of",
    "ledger_answer",
    "ledger_items",
    "ledger_message",
    "min_gap_s",
    "open_ports",
    "port_config",
    "summarize",
]
