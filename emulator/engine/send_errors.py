"""What a send the kernel refuses costs a worker, on a socket or an AF_XDP port alike.

A send that fails because a buffer is full or the path is down loses its packets as a congested
or dead wire would (counted by why; the transport recovers them); a send above the path MTU is
the environment's problem, named; anything else is fatal.
"""

from __future__ import annotations

import errno
from collections import Counter

from emulator.engine.ranks import Rank
from emulator.errors import EnvironmentProblem

# no way to the destination right now (a link down, no route): the send is lost, not fatal
NO_PATH_ERRNOS = frozenset({errno.ENETDOWN, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN})


class SendFailures:
    """The worker's policy for refused sends, counting into its counters."""

    def __init__(self, counters: Counter[str], path_mtu_bytes: int) -> None:
        self.counters = counters
        self.path_mtu_bytes = path_mtu_bytes  # named in the message of a send above it

    def failed(
        self,
        e: OSError,
        buffers: list[bytes] | list[memoryview],
        dest: tuple[str, int],
        rank: Rank,
    ) -> None:
        if isinstance(e, BlockingIOError | InterruptedError):
            # The socket buffer is full: the packets are lost like on a congested NIC; the
            # transport recovers them (NAK or timeout). Counted so a run can say so.
            self.counters["send_buffer_full"] += 1
            return
        if e.errno == errno.EMSGSIZE:
            raise EnvironmentProblem(
                f"rank {rank.spec.rank}: a {sum(len(b) for b in buffers)}-byte RoCEv2 send "
                f"to {dest[0]} exceeds the path MTU: raise the interface MTU or lower "
                f"transport.path_mtu_bytes ({self.path_mtu_bytes})"
            ) from None
        if e.errno == errno.ENOBUFS:  # qdisc or device queue full
            self.counters["send_no_buffers"] += 1
            return
        if e.errno in NO_PATH_ERRNOS:
            # The rank's link is down or no route leads there (a link-event impairment, or a
            # switch under test that lost a port): lost like on a dead wire; the transport
            # retransmits once the path is back, or the run's deadline names the flow.
            self.counters["send_no_path"] += 1
            return
        raise e
