"""Pacing: one queue pair at a fixed rate delivers that rate at the receiver, within 2% over 1 s.

The rate is the congestion control's (`none`: the rank's line rate), counted as the sender does:
UDP payload + IPv4/UDP headers + Ethernet framing (header, FCS, preamble, inter-frame gap). The
receiver's veth counts Ethernet header + IP packet, so the expected counter rate is scaled by
(IP + 14) / (IP + 38). Samples of the receiver's kernel counter are taken from the test while the
engine runs in a thread, each with a snapshot of the machine's CPU (tests/system/cpu_contention.py),
so that what other processes and the hypervisor took is known over exactly the measured window.

The claim is retried (tests/system/noise.py: a majority of 3 tries must pass, every try is
printed). When the majority misses, the test skips only if each missing try was short, its
worker ticks came later than a token bucket lasts, and something outside the test measurably
took at least as much CPU during the window as the sending time that was missing; otherwise it
fails.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from emulator.engine.coordinator import RunOutcome, run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import NetnsBed, PairInfo, link_bytes, pair
from emulator.transport.packets import BTH_BYTES, ETHERNET_OVERHEAD_BYTES, ICRC_BYTES
from emulator.transport.params import TransportParams
from tests.system.cpu_contention import RESOLUTION_S, Contention, CpuSnapshot, between, snapshot
from tests.system.noise import (
    NoisyMachineWarning,
    Try,
    describe,
    majority_of_tries,
    majority_passed,
)
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


@dataclass(frozen=True)
class Sample:
    t: float  # perf_counter, the middle of the counter read
    rx_bytes: int
    cpu: CpuSnapshot  # taken right after the counter read


def _run_and_sample(p: PairInfo, rate_bps: float) -> tuple[RunOutcome, list[Sample]]:
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
    samples: list[Sample] = []
    thread.start()
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        rx, _ = link_bytes(p.receiver_ns, p.receiver_if)
        samples.append(Sample((t0 + time.perf_counter()) / 2, rx, snapshot()))
        time.sleep(0.02)
    thread.join(timeout=10)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    outcome = result["outcome"]
    assert isinstance(outcome, RunOutcome)
    return outcome, samples


def _window(samples: list[Sample]) -> tuple[float, float, Contention]:
    """(rate in b/s, window in s, the CPU contention) over WINDOW_S after WARMUP_S."""
    base = samples[0].rx_bytes
    # the first data packets, not a stray ARP/IPv6 packet the namespace sends on its own
    moving = [s for s in samples if s.rx_bytes > base + 8 * IP_PACKET_BYTES]
    assert moving, "the receiver counted no bytes"
    t_first = moving[0].t
    start = next(s for s in samples if s.t >= t_first + WARMUP_S)
    end = next(s for s in samples if s.t >= start.t + WINDOW_S)
    window_s = end.t - start.t
    return (end.rx_bytes - start.rx_bytes) * 8 / window_s, window_s, between(start.cpu, end.cpu)


TRIES = 3  # a majority must pass: a shared machine can starve a worker, a pacer error repeats
TOLERANCE = 0.02


@pytest.mark.parametrize("rate_bps", [10e6, 100e6, 1e9], ids=["10M", "100M", "1G"])
def test_single_qp_paced_rate_within_2_percent_at_receiver(
    veth_pair: PairInfo, rate_bps: float
) -> None:
    expected = rate_bps * COUNTED_PER_SENT
    bucket_s = ENGINE.burst_ticks * ENGINE.tick_s
    # A worker that is not scheduled for longer than its token bucket lasts loses sending time
    # it may not make up (that would be a burst above the rate). Whether that is the machine's
    # fault is measured, not assumed: a try is "starved" only if something outside the test
    # took at least as much CPU during the window as the sending time the try was short of,
    # and more than the measurement's resolution (10 ms per process that ran: two of them). On
    # a quiet machine it reads 0.00 to 0.01 s per 1 s window while this test runs at 1 Gb/s.
    starved: dict[int, str] = {}

    def one_try(tr: Try) -> None:
        outcome, samples = _run_and_sample(veth_pair, rate_bps)
        timeouts = outcome.metadata["counters"].get("go_back_n_timeout", 0)
        if timeouts:  # not a timing claim: fails the test at once, whatever the other tries do
            pytest.fail(f"{timeouts} go-back-N timeouts on an unloaded veth")
        measured, window_s, cpu = _window(samples)
        gap_s = outcome.metadata["max_tick_gap_s"]
        missing_s = max(0.0, 1 - measured / expected) * window_s  # sending time short of
        tr.note(
            rate_of_expected=measured / expected,
            missing_ms=missing_s * 1e3,
            max_tick_gap_ms=gap_s * 1e3,
            fct_s=outcome.fct_s(1),
            outside_cpu_s=cpu.taken_s,
            other_processes_s=cpu.others_s,
            steal_s=cpu.steal_s,
            test_cpu_s=cpu.own_s,
            kernel_threads_s=cpu.kernel_s,
            machine_busy_s=cpu.busy_s,
            window_s=window_s,
        )
        if (
            measured < expected
            and gap_s > bucket_s
            and cpu.taken_s >= max(missing_s, 2 * RESOLUTION_S)
        ):
            starved[tr.index] = (
                f"try {tr.index}: {missing_s * 1e3:.0f} ms of sending missing, {cpu}"
            )
        assert measured == pytest.approx(expected, rel=TOLERANCE), (
            f"{measured / expected:.4f} of the rate"
        )

    what = f"{rate_bps / 1e6:g} Mb/s"
    done = majority_of_tries(one_try, TRIES, what)
    if majority_passed(done):
        if not all(t.passed for t in done):
            warnings.warn(f"{what} {describe(done)}", NoisyMachineWarning, stacklevel=1)
        return
    failed = [t.index for t in done if not t.passed]
    if all(i in starved for i in failed):
        pytest.skip(
            f"{what}: the machine, not the pacer, was short in every missed try (worker ticks "
            f"later than the {bucket_s * 1e3:.1f} ms bucket lasts, and outside CPU at least the "
            f"missing sending time): "
            + "; ".join(starved[i] for i in failed)
            + f" -- {describe(done)}"
        )
    pytest.fail(f"{what} missed by more than 2%: {describe(done)}")
