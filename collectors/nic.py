"""NIC byte counters: where they are read from (injectable) and the sampler that reads them.

Sources: sysfs (/sys/class/net/IF/statistics/{tx,rx}_bytes, for an interface visible in the
caller's namespace), rtnetlink (any named network namespace, IFLA_STATS64), and a
fixture for tests. The sampler turns readings into NicSample events stamped with the target time
the caller passes in (the collectors never read a clock themselves).
"""

from __future__ import annotations

import os
import socket
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from emulator.errors import EnvironmentProblem
from emulator.events import NicSample


class CounterSource(Protocol):
    """Cumulative (tx_bytes, rx_bytes) of one interface."""

    def read(self) -> tuple[int, int]: ...


class SysfsCounters:
    """Reads /sys/class/net/IF/statistics; sysfs shows the namespace it was mounted in."""

    def __init__(self, ifname: str, sys_class_net: Path = Path("/sys/class/net")) -> None:
        self.ifname = ifname
        self._dir = sys_class_net / ifname / "statistics"

    def read(self) -> tuple[int, int]:
        try:
            tx = int((self._dir / "tx_bytes").read_text())
            rx = int((self._dir / "rx_bytes").read_text())
        except (OSError, ValueError) as exc:
            raise EnvironmentProblem(
                f"cannot read the byte counters of interface {self.ifname} in {self._dir}: {exc}"
            ) from exc
        return tx, rx


# rtnetlink (include/uapi/linux/netlink.h, rtnetlink.h, if_link.h)
_RTM_GETLINK, _NLMSG_ERROR, _NLM_F_REQUEST = 18, 2, 1
_IFLA_STATS, _IFLA_STATS64 = 1, 23
_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
_RTATTR = struct.Struct("=HH")  # length, type


def link_stats_request(index: int, seq: int) -> bytes:
    """An RTM_GETLINK request for one interface index."""
    length = _NLMSGHDR.size + _IFINFOMSG.size
    return _NLMSGHDR.pack(length, _RTM_GETLINK, _NLM_F_REQUEST, seq, 0) + _IFINFOMSG.pack(
        0, 0, index, 0, 0
    )


def parse_link_stats(data: bytes, seq: int) -> tuple[int, int] | None:
    """(tx_bytes, rx_bytes) from an RTM_NEWLINK reply with sequence `seq` (None: another
    message); raises EnvironmentProblem for an error reply or one without statistics.
    rtnl_link_stats64 starts rx_packets, tx_packets, rx_bytes, tx_bytes (u64; u32 in the older
    IFLA_STATS)."""
    if len(data) < _NLMSGHDR.size:
        raise EnvironmentProblem("rtnetlink: short reply")
    length, kind, _flags, got_seq, _pid = _NLMSGHDR.unpack_from(data, 0)
    if got_seq != seq:
        return None
    if kind == _NLMSG_ERROR:
        (errno,) = struct.unpack_from("=i", data, _NLMSGHDR.size)
        raise EnvironmentProblem(f"rtnetlink: RTM_GETLINK failed: {os.strerror(-errno)}")
    end = min(length, len(data))
    off = _NLMSGHDR.size + _IFINFOMSG.size
    fallback = None
    while off + _RTATTR.size <= end:
        size, kind = _RTATTR.unpack_from(data, off)
        if size < _RTATTR.size or off + size > end:
            break
        if kind == _IFLA_STATS64 and size >= _RTATTR.size + 32:
            _rxp, _txp, rx, tx = struct.unpack_from("=QQQQ", data, off + _RTATTR.size)
            return tx, rx
        if kind == _IFLA_STATS and size >= _RTATTR.size + 16:
            _rxp, _txp, rx, tx = struct.unpack_from("=IIII", data, off + _RTATTR.size)
            fallback = (tx, rx)
        off += (size + 3) & ~3
    if fallback is not None:
        return fallback
    raise EnvironmentProblem("rtnetlink: the interface reports no statistics")


class NetlinkCounters:
    """IFLA_STATS64 of one interface over rtnetlink, in the named network namespace (None: the
    current one). pyroute2 finds the interface once; each read is then one RTM_GETLINK request on
    a raw NETLINK_ROUTE socket created inside the namespace (a socket stays in the namespace it
    was made in), decoded by hand: about 5 us a read against pyroute2's 250 us, and the sampler
    reads every rank ten times a second on the run's own CPU (profiled: pyroute2's reads were
    most of the coordinator's CPU in a 16-rank run, competing with the engine's workers).

    Holds one socket; close() releases it.
    """

    def __init__(self, ifname: str, netns: str | None = None) -> None:
        from pyroute2 import IPRoute
        from pyroute2.netns import popns, pushns

        self.ifname = ifname
        self.netns = netns
        self._seq = 0
        if netns:
            pushns(netns)
        try:
            with IPRoute() as ipr:
                indexes = ipr.link_lookup(ifname=ifname)
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        finally:
            if netns:
                popns()
        if not indexes:
            sock.close()
            where = f"namespace {netns}" if netns else "this namespace"
            raise EnvironmentProblem(f"no interface {ifname} in {where}")
        sock.bind((0, 0))
        sock.settimeout(2.0)
        self._sock = sock
        self._index = int(indexes[0])

    def read(self) -> tuple[int, int]:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        try:
            self._sock.send(link_stats_request(self._index, self._seq))
            for _ in range(16):  # skip replies to requests an earlier timeout abandoned
                stats = parse_link_stats(self._sock.recv(65536), self._seq)
                if stats is not None:
                    return stats
        except OSError as exc:
            raise EnvironmentProblem(f"interface {self.ifname}: rtnetlink read: {exc}") from exc
        raise EnvironmentProblem(f"interface {self.ifname}: no rtnetlink reply to its request")

    def close(self) -> None:
        self._sock.close()


class FixtureCounters:
    """Replays given (tx_bytes, rx_bytes) readings, one per read(); for tests."""

    def __init__(self, readings: Iterable[tuple[int, int]]) -> None:
        self._readings: Iterator[tuple[int, int]] = iter(readings)

    def read(self) -> tuple[int, int]:
        try:
            return next(self._readings)
        except StopIteration:
            raise EnvironmentProblem("fixture counters exhausted") from None


# A read slower than STALL_FACTOR x the median of the last reads (at least STALL_HISTORY_MIN of
# them) lost the CPU while reading; a uniformly slow machine only makes every read slow.
STALL_FACTOR = 4.0
STALL_HISTORY_MIN = 8


class NicSampler:
    """Reads every rank's counters once per sample() call."""

    def __init__(self, sources: Mapping[int, CounterSource]) -> None:
        self.sources = dict(sources)
        self.skipped = 0  # readings left out because their time was uncertain
        self._read_s: deque[float] = deque(maxlen=64)  # how long recent reads took

    def sample(
        self,
        time_s: float,
        clock: Callable[[], float] | None = None,
        max_read_s: float | None = None,
    ) -> list[NicSample]:
        """One reading per rank at `time_s`; with `clock`, each reading is stamped with the
        middle of the time it took (reading many namespaces on a busy machine takes long enough
        to matter for a per-interval utilization). A reading that took longer than `max_read_s`
        (clock units) and than STALL_FACTOR times the median of recent reads (the thread lost the
        CPU or the GIL while reading) is left out: where in that time the kernel copied the
        counters is unknown, and stamped at either end such a reading made a NIC read 150% of its
        line rate. The next reading covers both intervals."""
        samples: list[NicSample] = []
        for rank in sorted(self.sources):
            if clock is None:
                tx, rx = self.sources[rank].read()
                t = time_s
            else:
                before = clock()
                tx, rx = self.sources[rank].read()
                after = clock()
                if self._stalled(after - before, max_read_s):
                    self.skipped += 1
                    continue
                t = (before + after) / 2
            samples.append(NicSample(t, rank, "tx", tx))
            samples.append(NicSample(t, rank, "rx", rx))
        return samples

    def _stalled(self, took_s: float, max_read_s: float | None) -> bool:
        recent = sorted(self._read_s)
        self._read_s.append(took_s)
        if max_read_s is None or took_s <= max_read_s or len(recent) < STALL_HISTORY_MIN:
            return False
        return took_s > STALL_FACTOR * recent[len(recent) // 2]
