"""Pacing: one queue pair at a fixed rate delivers that rate at the receiver, within 2% over 1 s.

The rate is the congestion control's (`none`: the rank's line rate), counted as the sender does:
UDP payload + IPv4/UDP headers + Ethernet framing (header, FCS, preamble, inter-frame gap). The
receiver's veth counts Ethernet header + IP packet, so the expected counter rate is scaled by
(IP + 14) / (IP + 38). Samples of the receiver's kernel counter are taken from the test while the
engine runs in a thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from emulator.engine.coordinator import RunOutcome, run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import NetnsBed, PairInfo, link_bytes, pair
from emulator.transport.packets import BTH_BYTES, ETHERNET_OVERHEAD_BYTES, ICRC_BYTES
from emulator.transport.params import TransportParams
from tests.system.prereq import require

pytestmark = pytest.mark.system

MTU_BYTES = 4096
IP_PACKET_BYTES = 20 + 8 + BTH_BYTES + MTU_BYTES + ICRC_BYTES
COUNTED_PER_SENT = (IP_PACKET_BYTES + 14) / (IP_PACKET_BYTES + ETHERNET_OVERHEAD_BYTES)
WINDOW_S = 1.0
WARMUP_S = 0.2
ENGINE = EngineParams(workers=2)


@pytest.fixture(scope="module")
def veth_pair() -> Iterator[PairInfo]:
    import os

    if os.geteuid() != 0:
        require("system test needs root (network namespaces)")
    bed = NetnsBed()
    try:
        yield pair(bed)
    finally:
        bed.close()


def _run_and_sample(p: PairInfo, rate_bps: float) -> tuple[RunOutcome, list[tuple[float, int]]]:
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, line_rate_bps=rate_bps),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, line_rate_bps=rate_bps),
    ]
    size = int(rate_bps * (WINDOW_S + WARMUP_S + 0.4) / 8 * MTU_BYTES / IP_PACKET_BYTES)
    flow = EngineFlow(id=1, src=0, dst=1, qp=0, udp_sport=50100, bytes=size)
    transport = TransportParams(
        congestion_control="none", path_mtu_bytes=MTU_BYTES, retransmit_timeout_s=0.1
    )
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["outcome"] = run_plan(ranks, [flow], transport=transport, engine=ENGINE)
        except BaseException as e:  # handed to the test thread
            result["error"] = e

    thread = threading.Thread(target=run)
    samples: list[tuple[float, int]] = []
    thread.start()
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        rx, _ = link_bytes(p.receiver_ns, p.receiver_if)
        samples.append(((t0 + time.perf_counter()) / 2, rx))
        time.sleep(0.02)
    thread.join(timeout=10)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    outcome = result["outcome"]
    assert isinstance(outcome, RunOutcome)
    return outcome, samples


def _rate_over_window(samples: list[tuple[float, int]]) -> float:
    base = samples[0][1]
    # the first data packets, not a stray ARP/IPv6 packet the namespace sends on its own
    moving = [(t, b) for t, b in samples if b > base + 8 * IP_PACKET_BYTES]
    assert moving, "the receiver counted no bytes"
    t_first = moving[0][0]
    start = next(s for s in samples if s[0] >= t_first + WARMUP_S)
    end = next(s for s in samples if s[0] >= start[0] + WINDOW_S)
    return (end[1] - start[1]) * 8 / (end[0] - start[0])


ATTEMPTS = 3  # a shared machine can starve a worker for tens of ms; a pacer error repeats


@pytest.mark.parametrize("rate_bps", [10e6, 100e6, 1e9], ids=["10M", "100M", "1G"])
def test_single_qp_paced_rate_within_2_percent_at_receiver(
    veth_pair: PairInfo, rate_bps: float
) -> None:
    expected = rate_bps * COUNTED_PER_SENT
    bucket_s = ENGINE.burst_ticks * ENGINE.tick_s
    misses: list[str] = []
    starved = 0
    for _ in range(ATTEMPTS):
        outcome, samples = _run_and_sample(veth_pair, rate_bps)
        assert outcome.metadata["counters"].get("go_back_n_timeout", 0) == 0
        measured = _rate_over_window(samples)
        if measured == pytest.approx(expected, rel=0.02):
            return
        gap_s = outcome.metadata["max_tick_gap_s"]
        # A worker that is not scheduled for longer than its token bucket lasts loses sending
        # time it may not make up (that would be a burst above the rate): the machine, not the
        # pacer, is short then. The run's metadata reports it the same way.
        starved += measured < expected and gap_s > bucket_s
        t0 = samples[0][0]
        series = " ".join(f"{t - t0:.2f}:{b - samples[0][1]}" for t, b in samples[::4])
        misses.append(
            f"{measured / expected:.3f} of the rate (max tick gap {gap_s * 1e3:.1f} ms, "
            f"fct {outcome.fct_s(1):.3f} s, samples {series})"
        )
    if starved == ATTEMPTS:
        pytest.skip(
            f"machine too busy for {rate_bps / 1e6:g} Mb/s in {ATTEMPTS} attempts: a worker "
            f"tick came later than its {bucket_s * 1e3:.1f} ms bucket lasts each time: {misses}"
        )
    pytest.fail(f"{rate_bps / 1e6:g} Mb/s missed by more than 2% in {ATTEMPTS} attempts: {misses}")
