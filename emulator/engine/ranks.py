"""A worker's ranks and their sockets: what a rank and each of its queue pairs hold, and the
opening and closing of the rank sockets (the send and receive paths only use them).

A rank receives every RoCEv2 packet on one socket bound to ADDRESS:4791; its queue pairs send
from one socket per UDP source port, which their ACKs and CNPs come back to on the reversed
5-tuple (the module docstring of emulator/engine/worker.py says why). Ranks that name one NIC
share its NicPacer. With `engine.send_path: af_xdp` a rank has no UDP socket: the AF_XDP port
of its interface (emulator/engine/xdp_ports.py) sends and receives for every rank on it, and
each queue pair holds its flow there (the same 5-tuples as the sockets would use).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from emulator.engine.af_xdp import XdpFlow
from emulator.engine.entropy_ports import EntropyPorts
from emulator.engine.nicpacer import NicPacer
from emulator.engine.params import EngineParams
from emulator.engine.plan import RankEndpoint
from emulator.engine.sockets import SO_TIMESTAMPNS, Offloads, open_udp
from emulator.engine.xdp_ports import PipeRecorder, PortGroup, XdpNic, open_ports
from emulator.latency import LatencyHistogram
from emulator.transport.burst_wire import BurstWriter
from emulator.transport.endpoint import RoceEndpoint
from emulator.transport.events import TransportEvent
from emulator.transport.packets import ROCEV2_UDP_PORT
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import IcrcContext

RECV_BUFFER_BYTES = 65535 * 2


@dataclass(eq=False)
class Rank:
    """A rank of the worker's shard: its endpoint (queue pairs), sockets and NIC."""

    spec: RankEndpoint
    endpoint: RoceEndpoint
    rx_sock: socket.socket | None  # None: its interface's AF_XDP port receives (xdp)
    nic: NicPacer
    sport_socks: dict[int, socket.socket] = field(default_factory=dict)
    ns_per_byte: float = 0.0  # wall time of one byte on its link (line rate, dilated)
    xdp: XdpNic | None = None  # its interface's AF_XDP port (engine.send_path af_xdp)


@dataclass(eq=False)
class SendConn:
    """A send queue pair: its rank, the socket it sends from and what its reports need."""

    conn_id: int
    rank: Rank
    qp: SendQueuePair
    sock: socket.socket | None  # None: it sends through `xdp`
    dest: tuple[str, int]
    icrc: IcrcContext
    writer: BurstWriter
    xdp: XdpFlow | None = None  # its flow on the rank's AF_XDP port (af_xdp)
    # per-packet source ports (transport.entropy: per_packet): `sock` is then the home port's
    entropy: EntropyPorts | None = None
    next_ordinal: int = 0
    cnps_received: int = 0
    # target seconds of credit its NIC lost while it had a packet due (emulator.engine.nicpacer)
    nic_lost_s: float = 0.0
    snapshot: tuple[int, int, int, float] = (0, 0, 0, 0.0)
    ordinals: dict[int, int] = field(default_factory=dict)
    last_rate_sample_s: float = float("-inf")
    tos: int = 0  # ToS byte of its data: its class's DSCP and the data ECN field
    tos_cmsgs: tuple[tuple[int, int, bytes], ...] = ()  # () when the socket's default is it
    ahead: bool = False  # opened before the run from the plan (reported only if it sent)


@dataclass(eq=False)
class RecvConn:
    """A receive queue pair: its rank, the socket its ACKs and CNPs leave from, its counters."""

    conn_id: int
    rank: Rank
    qp: ReceiveQueuePair
    sock: socket.socket | None  # None: its ACKs and CNPs leave through `xdp`
    dest: tuple[str, int]
    icrc: IcrcContext
    cnps_sent: int = 0
    snapshot: tuple[int, int, int] = (0, 0, 0)  # CE, CNPs sent, reordered packets
    latency: LatencyHistogram | None = None  # one-way latency of its data packets
    xdp: XdpFlow | None = None  # its ACK flow on the rank's AF_XDP port (af_xdp)
    ahead: bool = False  # opened before the run from the plan (reported only if it received)


class RankSockets:
    """The worker's ranks, opened at construction: each rank's receive socket, or with
    `engine.send_path: af_xdp` its interface's AF_XDP port; a socket per UDP source port on
    demand (sport_socket); all closed by close()."""

    def __init__(
        self,
        ranks: Sequence[RankEndpoint],
        destinations: Iterable[str],
        params: EngineParams,
        path_mtu_bytes: int,
        offloads: Offloads,
        events: list[TransportEvent],
        tos_data: int,
        pipe: Connection,
    ) -> None:
        self.params = params
        self.tos_data = tos_data  # the sockets' default ToS: the data class's
        self.ranks: dict[int, Rank] = {}
        # the AF_XDP ports (engine.send_path af_xdp), each with its ranks by address (what it
        # receives is theirs by destination), and drained together (PortGroup)
        self.xdp_ports: dict[XdpNic, dict[str, Rank]] = {}
        self.xdp_nics: list[XdpNic] = []
        self.xdp_group: PortGroup | None = None
        self.xdp_recorded: bool | None = None  # the ports' ledger entries: recorded
        self._open(ranks, destinations, path_mtu_bytes, offloads, events, pipe)

    def _open(
        self,
        specs: Sequence[RankEndpoint],
        destinations: Iterable[str],
        path_mtu_bytes: int,
        offloads: Offloads,
        events: list[TransportEvent],
        pipe: Connection,
    ) -> None:
        p = self.params
        nics: dict[object, NicPacer] = {}  # ranks naming one NIC share its arbiter
        ports: dict[str, XdpNic] = {}
        if p.send_path == "af_xdp":
            # opened here, in the worker: a port opened before the fork would leave its BPF
            # link with the parent as well
            recorder = PipeRecorder(pipe, p.start_timeout_s)
            ports = open_ports(
                specs,
                p,
                path_mtu_bytes,
                recorder,
                destinations,  # every peer's next hop, before the run
            )
            self.xdp_nics = list({id(n): n for n in ports.values()}.values())
            self.xdp_ports = {nic: {} for nic in self.xdp_nics}
            self.xdp_group = PortGroup(self.xdp_nics)
            self.xdp_recorded = recorder.recorded
        for r in specs:
            key = ("nic", r.nic) if r.nic is not None else ("rank", r.rank)
            nic = nics.get(key)
            if nic is None:
                nic = nics[key] = NicPacer(r.line_rate_bps)
            xdp = ports.get(r.address)
            if xdp is not None:
                rank = self.ranks[r.rank] = Rank(
                    r,
                    RoceEndpoint(events),
                    None,
                    nic,
                    ns_per_byte=8e9 * p.tdf / r.line_rate_bps,
                    xdp=xdp,
                )
                self.xdp_ports[xdp][r.address] = rank
                continue
            sock = open_udp(
                r.netns,
                r.address,
                ROCEV2_UDP_PORT,
                gro=offloads.gro,
                buffer_bytes=p.socket_buffer_bytes,
            )
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos_data)
            # the kernel's receive stamp: each read's wait in the socket (receive_path.py),
            # and with one_way_latency the packets' one-way latency
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.ranks[r.rank] = Rank(
                r,
                RoceEndpoint(events),
                sock,
                nic,
                ns_per_byte=8e9 * p.tdf / r.line_rate_bps,
            )

    def sport_socket(self, rank: Rank, sport: int) -> socket.socket:
        """The socket a queue pair of `rank` with UDP source port `sport` sends from (its ACKs
        and CNPs come back to it): the receive socket for 4791, else one per port."""
        if sport == ROCEV2_UDP_PORT and rank.rx_sock is not None:
            return rank.rx_sock
        sock = rank.sport_socks.get(sport)
        if sock is None:
            s = rank.spec
            sock = open_udp(
                s.netns, s.address, sport, gro=False, buffer_bytes=self.params.socket_buffer_bytes
            )
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos_data)
            rank.sport_socks[sport] = sock
        return sock

    def close(self) -> None:
        for rank in self.ranks.values():
            if rank.rx_sock is not None:
                rank.rx_sock.close()
            for s in rank.sport_socks.values():
                s.close()
        for nic in self.xdp_nics:
            nic.port.close()  # detaches the program (idempotent)
