"""NIC byte counters: where they are read from (injectable) and the sampler that reads them.

Sources: sysfs (/sys/class/net/IF/statistics/{tx,rx}_bytes, for an interface visible in the
caller's namespace), rtnetlink (any named network namespace, IFLA_STATS64), and a
fixture for tests. The sampler turns readings into NicSample events stamped with the target time
the caller passes in (the collectors never read a clock themselves).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from emulator.errors import EnvironmentProblem
from emulator.events import NicSample
from emulator.rtnetlink import RouteSocket


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


class NetlinkCounters:
    """The byte counters of one interface over rtnetlink (emulator.rtnetlink), in the named
    network namespace (None: the current one): found once in a dump of the namespace's links,
    then each read is one RTM_GETLINK request for its index on a socket made inside the
    namespace, decoded by hand: about 5 us a read against pyroute2's 250 us, and the sampler
    reads every rank ten times a second on the run's own CPU (profiled: pyroute2's reads were
    most of the coordinator's CPU in a 16-rank run, competing with the engine's workers).

    Holds one socket; close() releases it.
    """

    def __init__(self, ifname: str, netns: str | None = None) -> None:
        self.ifname = ifname
        self.netns = netns
        route = RouteSocket(netns)
        try:
            found = [i for i, link in route.links().items() if link.name == ifname]
            if not found:
                raise EnvironmentProblem(f"no interface {ifname} in {route.where}")
        except OSError as exc:
            route.close()
            raise EnvironmentProblem(f"interface {ifname}: rtnetlink read: {exc}") from exc
        except BaseException:
            route.close()
            raise
        self._route = route
        self._index = found[0]

    def read(self) -> tuple[int, int]:
        try:
            link = self._route.link(self._index)
        except OSError as exc:
            raise EnvironmentProblem(f"interface {self.ifname}: rtnetlink read: {exc}") from exc
        if not link.stats:
            raise EnvironmentProblem(f"interface {self.ifname}: rtnetlink reports no statistics")
        return link.tx_bytes, link.rx_bytes

    def close(self) -> None:
        self._route.close()


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
