"""The engine through a router whose egress is a bottleneck (HTB), with and without ECN marking,
and the same plan at two time dilation factors.

sender a -- router r -- receiver b; r's egress toward b is HTB at the bottleneck rate with a
bfifo queue and, for DCQCN, the fabrics' eBPF phantom-queue marker. Rates on the wire are what
the router's qdisc counts; the engine's events give CE marks, CNPs, rates and completion times.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from collectors.events import RateSample
from emulator.engine.coordinator import RunOutcome, run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import NetnsBed, RoutedInfo, routed
from emulator.transport.params import TransportParams
from fabrics.ecn.markers import EbpfMarker
from fabrics.iproute import run, tc
from fabrics.queues import EcnThresholds, EgressPort, drop_tail, htb_commands
from tests.system.noise import on_a_noisy_machine

pytestmark = pytest.mark.system

MTU_BYTES = 4096
IP_PACKET_BYTES = 20 + 8 + 12 + MTU_BYTES + 4
# HTB counts the Ethernet header with the IP packet
HTB_PER_SENT = (IP_PACKET_BYTES + 14) / (IP_PACKET_BYTES + 38)


@pytest.fixture
def bed(system: None) -> Iterator[RoutedInfo]:
    b = NetnsBed()
    try:
        yield routed(b)
    finally:
        b.close()


def _on_fresh_beds(check: Callable[[RoutedInfo], None]) -> None:
    """`check` on a new routed testbed per try (timing claims; see on_a_noisy_machine)."""

    def one_try() -> None:
        with NetnsBed() as b:
            check(routed(b))

    on_a_noisy_machine(one_try)


def _shape(
    info: RoutedInfo, rate_bps: float, buffer_bytes: int, ecn: EcnThresholds | None
) -> tuple[EgressPort, EbpfMarker | None]:
    port = EgressPort(
        "r", info.router_ns, info.router_egress_if, rate_bps, buffer_bytes, 9000, 0.0, ecn
    )
    marker = EbpfMarker() if ecn is not None else None
    cmds = htb_commands(port, drop_tail(port))
    if marker is not None:
        cmds += marker.attach(port)[0]
    for cmd in cmds:
        run(cmd)
    if marker is not None:
        marker.configure([port])
    return port, marker


def _qdisc_root(info: RoutedInfo) -> dict[str, int]:
    for q in json.loads(
        run(tc("-s", "-j", "qdisc", "show", "dev", info.router_egress_if, netns=info.router_ns))
    ):
        if q.get("root"):
            return {"bytes": int(q["bytes"]), "drops": int(q["drops"])}
    raise AssertionError("no root qdisc on the router egress")


def _run_sampling(
    info: RoutedInfo,
    ranks: list[RankEndpoint],
    flows: list[EngineFlow],
    transport: TransportParams,
    engine: EngineParams,
) -> tuple[RunOutcome, list[tuple[float, int]]]:
    """Run in a thread; sample the bottleneck's sent bytes every ~20 ms meanwhile."""
    result: dict[str, object] = {}

    def go() -> None:
        try:
            result["outcome"] = run_plan(ranks, flows, transport=transport, engine=engine)
        except BaseException as e:
            result["error"] = e

    thread = threading.Thread(target=go)
    samples: list[tuple[float, int]] = []
    thread.start()
    deadline = time.monotonic() + 90
    while thread.is_alive() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        sent = _qdisc_root(info)["bytes"]
        samples.append(((t0 + time.perf_counter()) / 2, sent))
        time.sleep(0.02)
    thread.join(timeout=10)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    outcome = result["outcome"]
    assert isinstance(outcome, RunOutcome)
    return outcome, samples


def _rate(samples: list[tuple[float, int]], t_from: float, t_to: float) -> float:
    a = next(s for s in samples if s[0] >= t_from)
    b = [s for s in samples if s[0] <= t_to][-1]
    return (b[1] - a[1]) * 8 / (b[0] - a[0])


def _ranks(info: RoutedInfo, line_rate_bps: float) -> list[RankEndpoint]:
    return [
        RankEndpoint(0, info.sender_addr, info.sender_ns, line_rate_bps),
        RankEndpoint(1, info.receiver_addr, info.receiver_ns, line_rate_bps),
    ]


BOTTLENECK_BPS = 200e6
LINE_BPS = 1e9


@pytest.mark.parametrize("tdf", [1.0, 10.0], ids=["tdf1", "tdf10"])
def test_ecn_marks_make_dcqcn_settle_at_the_bottleneck_rate(system: None, tdf: float) -> None:
    """A 1 Gb/s sender into a 200 Mb/s bottleneck (wall rates; the target fabric is TDF times
    faster). At TDF 1 the engine's 1 ms tick is far slower than DCQCN's microsecond loop, so
    nearly every packet ends up marked, the rate swings and the queue may overflow: DCQCN still
    reacts and go-back-N still delivers every byte, but the settled rate and the bounded queue
    are only claimed where the loop is resolved (TDF 10: marks are rare)."""
    _on_fresh_beds(lambda bed: _settles(bed, tdf))


def _settles(bed: RoutedInfo, tdf: float) -> None:
    ecn = EcnThresholds(kmin_bytes=20_000, kmax_bytes=80_000, pmax=0.2)
    port, marker = _shape(bed, BOTTLENECK_BPS, 4_000_000, ecn)
    assert marker is not None
    size = 40_000_000  # about 1.6 s at the bottleneck
    flows = [EngineFlow(1, 0, 1, 0, 50300, size)]
    transport = TransportParams(path_mtu_bytes=MTU_BYTES, retransmit_timeout_s=0.05)
    outcome, samples = _run_sampling(
        bed, _ranks(bed, LINE_BPS * tdf), flows, transport, EngineParams(workers=2, tdf=tdf)
    )
    done = outcome.finished[1]
    assert outcome.received_bytes[1] == size
    assert done.ce_marks > 0 and done.cnps_sent > 0 and done.cnps_received > 0
    rates = [e.rate_bps for e in outcome.events if isinstance(e, RateSample)]
    assert rates and min(rates) <= 0.5 * LINE_BPS * tdf  # DCQCN cut the (target) rate
    if tdf < 10:
        return
    assert done.ce_marks < 0.5 * done.packets
    # throughput settles at the bottleneck: the second half of the transfer keeps it busy
    t_start = next(t for t, b in samples if b > samples[0][1] + 10 * IP_PACKET_BYTES)
    t_end = samples[-1][0]
    for t, b in samples:
        if b >= samples[-1][1]:
            t_end = t
            break
    settled = _rate(samples, (t_start + t_end) / 2, t_end)
    assert settled == pytest.approx(BOTTLENECK_BPS * HTB_PER_SENT, rel=0.1)
    # the queue stayed bounded: nothing dropped, the phantom queue never near the buffer
    assert _qdisc_root(bed)["drops"] == 0
    counters = marker.read(port, {})
    assert counters is not None and counters.marks > 0
    assert counters.peak_queue_bytes is not None and counters.peak_queue_bytes < 4_000_000
    assert outcome.metadata["counters"].get("go_back_n_timeout", 0) == 0


def test_without_marking_drops_and_go_back_n_still_deliver_every_byte(bed: RoutedInfo) -> None:
    _shape(bed, BOTTLENECK_BPS, 100_000, None)
    size = 6_000_000
    flows = [EngineFlow(1, 0, 1, 0, 50301, size)]
    transport = TransportParams(
        path_mtu_bytes=MTU_BYTES, retransmit_timeout_s=0.02, window_packets=64
    )
    outcome = run_plan(
        _ranks(bed, LINE_BPS), flows, transport=transport, engine=EngineParams(workers=2)
    )
    assert _qdisc_root(bed)["drops"] > 0
    done = outcome.finished[1]
    assert done.retransmitted_packets > 0 and done.ce_marks == 0 and done.cnps_sent == 0
    counters = outcome.metadata["counters"]
    assert counters.get("go_back_n_nak", 0) + counters.get("go_back_n_timeout", 0) > 0
    assert outcome.metadata["drops"].get("out_of_sequence", 0) > 0
    assert outcome.received_bytes[1] == size


TARGET_LINK_BPS = 500e6


def _tdf_run(bed: RoutedInfo, tdf: float) -> RunOutcome:
    """Two flows in sequence with a 30 ms compute gap, then a third after another 20 ms, through
    a link that is TARGET_LINK_BPS / tdf on the wire."""
    flows = [
        EngineFlow(1, 0, 1, 0, 50400, 6_000_000),
        EngineFlow(2, 0, 1, 0, 50400, 6_000_000, deps=(1,), start_delay_s=0.03),
        EngineFlow(3, 1, 0, 0, 50401, 1_000_000, deps=(2,), start_delay_s=0.02),
    ]
    transport = TransportParams(path_mtu_bytes=MTU_BYTES, retransmit_timeout_s=0.05)
    return run_plan(
        _ranks(bed, TARGET_LINK_BPS),
        flows,
        transport=transport,
        engine=EngineParams(workers=2, tdf=tdf),
    )


def test_tdf_10_gives_the_same_completion_times_as_tdf_1(system: None) -> None:
    _on_fresh_beds(_same_completion_times)


def _same_completion_times(bed: RoutedInfo) -> None:
    _shape(bed, TARGET_LINK_BPS, 2_000_000, None)
    real = _tdf_run(bed, 1.0)
    run(tc("qdisc", "del", "dev", bed.router_egress_if, "root", netns=bed.router_ns))
    _shape(bed, TARGET_LINK_BPS / 10, 2_000_000, None)
    dilated = _tdf_run(bed, 10.0)
    assert dilated.metadata["tdf"] == 10.0
    # the dilated run really took ten times its target duration on the wall clock
    assert dilated.metadata["wall_s"] > 10 * dilated.finished[3].time_s
    for fid in (1, 2, 3):
        assert dilated.finished[fid].time_s == pytest.approx(real.finished[fid].time_s, rel=0.1)
        assert dilated.started[fid].time_s == pytest.approx(
            real.started[fid].time_s, rel=0.1, abs=0.002
        )
    # the compute gaps are target time in both
    for fid, gap in ((2, 0.03), (3, 0.02)):
        prev = real.finished[fid - 1].time_s
        assert real.started[fid].time_s - prev == pytest.approx(gap, abs=0.003)
        prev10 = dilated.finished[fid - 1].time_s
        assert dilated.started[fid].time_s - prev10 == pytest.approx(gap, abs=0.0005)
