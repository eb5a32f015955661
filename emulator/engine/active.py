"""The send queue pairs with something posted, kept per NIC in queue-pair order.

A worker's send path serves each NIC's active queue pairs in turn at every tick and after every
read (emulator/engine/send_path.py); the tick runs their timers. Grouping them by NIC, sorting
them and sweeping the idle out on every such call walked every active queue pair several times
per call, a quarter of a worker's CPU at the calibration's loads (a py-spy profile, 240 queue
pairs a worker). Here the grouping and the order are kept as queue pairs come and go, and only a
queue pair whose message completed can have gone idle (a queue pair is idle when every message
posted to it is acknowledged), so only those are looked at when the idle leave.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, ValuesView

from emulator.engine.nicpacer import NicPacer
from emulator.engine.ranks import SendConn


class NicQueuePairs:
    """One NIC's active queue pairs: by QP number, and the numbers in order."""

    __slots__ = ("conns", "nic", "qpns")

    def __init__(self, nic: NicPacer) -> None:
        self.nic = nic
        self.qpns: list[int] = []
        self.conns: dict[int, SendConn] = {}


class ActiveQueuePairs:
    """A mapping of QP number -> SendConn (what the flows post to), grouped by NIC."""

    def __init__(self) -> None:
        self._all: dict[int, SendConn] = {}
        self._by_nic: dict[int, NicQueuePairs] = {}
        self._maybe_idle: set[int] = set()
        # NICs a message was posted to since the last serve of them all (see nics_after_read)
        self._touched: dict[int, NicQueuePairs] = {}

    # -- the mapping the flows and the tick use -----------------------------------------------
    def __setitem__(self, qpn: int, conn: SendConn) -> None:
        """A message was posted to the queue pair: it is active and its NIC has work."""
        nic = conn.rank.nic
        if qpn in self._all:
            self._touched[id(nic)] = self._by_nic[id(nic)]
            return
        self._all[qpn] = conn
        group = self._by_nic.get(id(nic))
        if group is None:
            group = self._by_nic[id(nic)] = NicQueuePairs(nic)
        bisect.insort(group.qpns, qpn)
        group.conns[qpn] = conn
        self._touched[id(nic)] = group

    def __delitem__(self, qpn: int) -> None:
        conn = self._all.pop(qpn)
        group = self._by_nic[id(conn.rank.nic)]
        del group.conns[qpn]
        del group.qpns[bisect.bisect_left(group.qpns, qpn)]

    def __contains__(self, qpn: object) -> bool:
        return qpn in self._all

    def __len__(self) -> int:
        return len(self._all)

    def __bool__(self) -> bool:
        return bool(self._all)

    def __iter__(self) -> Iterator[int]:
        return iter(self._all)

    def values(self) -> ValuesView[SendConn]:
        return self._all.values()

    def get(self, qpn: int) -> SendConn | None:
        return self._all.get(qpn)

    # -- what the send path uses ----------------------------------------------------------------
    def nics(self) -> list[NicQueuePairs]:
        """The NICs with an active queue pair, in the order their first one came."""
        return [group for group in self._by_nic.values() if group.qpns]

    def nics_after_read(self, nic: NicPacer) -> list[NicQueuePairs]:
        """What a read on one rank's socket may have given work to: its own NIC (the ACKs and
        CNPs it read are for its queue pairs) and every NIC a message was posted to since
        (a completion the read made released a dependent flow). The others have nothing new;
        the tick serves them."""
        groups = [group for group in self._touched.values() if group.qpns]
        own = self._by_nic.get(id(nic))
        if own is not None and own.qpns and id(nic) not in self._touched:
            groups.append(own)
        self._touched.clear()
        return groups

    def served_all(self) -> None:
        """Every NIC was just served: none is left with a post it has not seen."""
        self._touched.clear()

    def completed(self, qpn: int) -> None:
        """A message of this queue pair completed: it may have nothing left."""
        self._maybe_idle.add(qpn)

    def sweep_idle(self) -> None:
        """Those with nothing queued and nothing unacknowledged leave."""
        if not self._maybe_idle:
            return
        for qpn in self._maybe_idle:
            conn = self._all.get(qpn)
            if conn is not None and conn.qp.idle:
                del self[qpn]
        self._maybe_idle.clear()
