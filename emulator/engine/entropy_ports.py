"""A queue pair's per-packet source ports on the engine's socket path (transport.entropy).

Each packet of such a queue pair leaves from the UDP socket bound to its own source port
(emulator.transport.entropy.entropy_sport: by PSN, over entropy_values ports), with its ICRC for
that port: one datagram per packet, no GSO (a GSO buffer has one UDP header). Sockets are the
rank's, shared with every queue pair of the rank that uses the same port, opened at first use
(RankSockets.sport_socket); each port has its own ICRC context and burst writer, laid out in the
worker's send buffer like every burst.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable

from emulator.transport.burst_wire import BurstBuffer, BurstWriter
from emulator.transport.entropy import entropy_sport
from emulator.transport.wire import FlowAddress, IcrcContext


class EntropyPorts:
    __slots__ = ("_address", "_buffer", "_max_segments", "_open", "_ports", "base_sport", "values")

    def __init__(
        self,
        address: FlowAddress,
        values: int,
        open_socket: Callable[[int], socket.socket],
        buffer: BurstBuffer,
        max_segments: int,
    ) -> None:
        self._address = address  # the queue pair's own (its source port the base)
        self.base_sport = address.sport
        self.values = values
        self._open = open_socket
        self._buffer = buffer
        self._max_segments = max_segments
        self._ports: dict[int, tuple[socket.socket, BurstWriter]] = {}

    @property
    def home_sport(self) -> int:
        """Value 0: the port ACKs, SACKs and CNPs come back to (emulator.transport.entropy)."""
        return entropy_sport(self.base_sport, 0, self.values)

    def port(self, psn: int) -> tuple[socket.socket, BurstWriter]:
        """The socket and writer of the packet with this PSN."""
        sport = entropy_sport(self.base_sport, psn, self.values)
        got = self._ports.get(sport)
        if got is None:
            icrc = IcrcContext(dataclasses.replace(self._address, sport=sport))
            writer = BurstWriter(icrc, self._buffer, self._max_segments)
            got = self._ports[sport] = (self._open(sport), writer)
        return got
