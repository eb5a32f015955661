"""NIC utilization from fixture counters, and the real counter sources read on loopback."""

from __future__ import annotations

import socket

import pytest

from collectors.nic import FixtureCounters, NetlinkCounters, NicSampler, SysfsCounters
from collectors.samples import NicTable
from emulator.errors import EnvironmentProblem
from emulator.events import NicSample


def test_utilization_from_fixture_counters() -> None:
    # 8 Gb/s line = 1e9 bytes/s; samples every 1 ms.
    sampler = NicSampler(
        {
            0: FixtureCounters([(0, 0), (500_000, 0), (1_250_000, 100_000)]),
            1: FixtureCounters([(10, 20), (10, 1_000_020), (10, 1_000_020)]),
        }
    )
    table = NicTable(line_rate_bps=8e9)
    for i in range(3):
        for sample in sampler.sample(i * 1e-3):
            table.add(sample)
    got = {(r.time_s, r.rank, r.direction): r.utilization for r in table.rows}
    assert got == pytest.approx(
        {
            (1e-3, 0, "tx"): 0.5,
            (1e-3, 0, "rx"): 0.0,
            (2e-3, 0, "tx"): 0.75,
            (2e-3, 0, "rx"): 0.1,
            (1e-3, 1, "tx"): 0.0,
            (1e-3, 1, "rx"): 1.0,
            (2e-3, 1, "tx"): 0.0,
            (2e-3, 1, "rx"): 0.0,
        }
    )
    # The first reading is only a baseline: 2 ranks x 2 directions x 2 intervals rows.
    assert len(table.rows) == 8
    assert table.rows[0].delta_bytes == 500_000 and table.rows[0].interval_s == pytest.approx(1e-3)


def test_counter_reset_restarts_the_baseline() -> None:
    table = NicTable(line_rate_bps=8e9)
    assert table.add(NicSample(0.0, 0, "tx", 1_000)) is None
    assert table.add(NicSample(1e-3, 0, "tx", 10)) is None  # went backwards: new baseline
    row = table.add(NicSample(2e-3, 0, "tx", 100_010))
    assert row is not None and row.delta_bytes == 100_000 and row.utilization == pytest.approx(0.1)


def test_fixture_exhaustion_is_reported() -> None:
    source = FixtureCounters([(1, 2)])
    assert source.read() == (1, 2)
    with pytest.raises(EnvironmentProblem, match="exhausted"):
        source.read()


def _send_loopback(datagrams: int, size: int) -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        rx.bind(("127.0.0.1", 0))
        for _ in range(datagrams):
            tx.sendto(b"x" * size, rx.getsockname())
        rx.settimeout(1.0)
        for _ in range(datagrams):
            rx.recv(size)


@pytest.mark.parametrize("make", [lambda: SysfsCounters("lo"), lambda: NetlinkCounters("lo")])
def test_real_sources_count_loopback_traffic(make: object) -> None:
    source = make()  # type: ignore[operator]
    try:
        tx0, rx0 = source.read()
        _send_loopback(20, 1000)
        tx1, rx1 = source.read()
    finally:
        if isinstance(source, NetlinkCounters):
            source.close()
    # 20 datagrams of 1000 payload bytes (+28 bytes of headers each) crossed lo both ways.
    assert tx1 - tx0 >= 20 * 1000
    assert rx1 - rx0 >= 20 * 1000


def test_missing_interfaces_are_environment_problems(tmp_path: object) -> None:
    with pytest.raises(EnvironmentProblem, match="nosuchif0"):
        SysfsCounters("nosuchif0").read()
    with pytest.raises(EnvironmentProblem, match="nosuchif0"):
        NetlinkCounters("nosuchif0")


def test_port_samples_from_fabric_counters() -> None:
    from collectors.samples import PortTable, port_samples
    from fabrics.counters import PortCounters

    def counters(tx: int, phantom: int | None) -> PortCounters:
        return PortCounters("leaf0", "eth3", tx, tx // 1000, 2, 1500, 7, phantom, None, None)

    table = PortTable(default_line_rate_bps=8e9)
    for t, c in [(0.0, counters(0, 40_000)), (1e-3, counters(250_000, None))]:
        for sample in port_samples([c], t):
            table.add(sample)
    first, second = table.rows
    assert (first.switch, first.port, first.queue_bytes) == ("leaf0", "eth3", 40_000)
    assert second.queue_bytes == 1500  # no phantom queue: the qdisc backlog
    assert second.utilization == pytest.approx(0.25) and second.ecn_marks == 7


def test_readings_are_stamped_mid_read_and_stalled_ones_are_left_out() -> None:
    clock = [0.0]

    class Slow:
        """Readings that take `took` seconds each of the (fake) clock."""

        def __init__(self, took: list[float]) -> None:
            self.took = iter(took)
            self.count = 0

        def read(self) -> tuple[int, int]:
            clock[0] += next(self.took)
            self.count += 1
            return 100 * self.count, 50 * self.count

    # every read is slower than max_read_s on this busy machine (5 ms against 1 ms): kept, until
    # one takes 40 ms, 8x the usual
    source = Slow([0.005] * 10 + [0.040, 0.005])
    sampler = NicSampler({0: source})
    stamps = []
    for i in range(12):
        clock[0] = float(i)
        stamps += [s.time_s for s in sampler.sample(float(i), lambda: clock[0], max_read_s=0.001)]
    assert sampler.skipped == 1
    assert stamps[:2] == [pytest.approx(0.0025)] * 2  # tx and rx, mid-read
    expected = [t + 0.0025 for t in range(12) if t != 10]
    assert stamps[::2] == pytest.approx(expected)
    # without a limit nothing is left out
    quiet = NicSampler({0: Slow([0.005] * 10 + [0.040])})
    for i in range(11):
        quiet.sample(float(i), lambda: clock[0])
    assert quiet.skipped == 0


def test_raw_link_stats_match_pyroute2() -> None:
    """NetlinkCounters' hand-decoded RTM_GETLINK reply against pyroute2's decoding of the same
    interface (the oracle); the messages themselves: tests/unit/test_rtnetlink.py."""
    from pyroute2 import IPRoute

    source = NetlinkCounters("lo")
    try:
        ours = source.read()
        with IPRoute() as ipr:
            (link,) = ipr.get_links(ipr.link_lookup(ifname="lo")[0])
            stats = link.get_attr("IFLA_STATS64")
        # lo may move between the two reads (other tests): never backwards, within a little
        assert 0 <= stats["tx_bytes"] - ours[0] < 1 << 20
        assert 0 <= stats["rx_bytes"] - ours[1] < 1 << 20
    finally:
        source.close()
