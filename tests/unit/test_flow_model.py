"""The fluid model's pieces against their sources: the NIC arbiter's max-min shares (hand
computed), the marking law (Zhu et al. 2015, as emulator.transport.marking states it), a fluid
queue (Zhu et al. 2016: dq/dt = arrivals - capacity), and the reaction point's rules step by
step against the packet model's own ReactionPoint (NVIDIA's DCQCN, emulator.transport.dcqcn)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from emulator.flow.model import FluidFabric, FluidLinks, cnp_probability, max_min_share
from emulator.transport.dcqcn import NotificationPoint, ReactionPoint
from emulator.transport.dcqcn_params import DcqcnParams
from emulator.transport.marking import EcnMarker
from emulator.transport.params import EcnMarkingParams

INF = np.inf
DT = 4e-6


def links(*caps: float, kmin: float = INF, kmax: float = INF, pmax: float = 0.0) -> FluidLinks:
    n = len(caps)
    return FluidLinks(
        np.array(caps, dtype=float),
        np.full(n, kmin),
        np.full(n, kmax),
        np.full(n, pmax),
        np.full(n, INF),
        np.full(n, INF),
    )


def fabric(lk: FluidLinks, hops: int = 2, params: DcqcnParams | None = None) -> FluidFabric:
    return FluidFabric(lk, params or DcqcnParams(), mtu_bytes=4096, dt_s=DT, seed=1, max_hops=hops)


@pytest.mark.parametrize(
    ("demand", "group", "capacity", "share"),
    [
        # everything fits: each keeps its demand
        ([100, 50], [0, 0], [400], [100, 50]),
        # equal demands over capacity: equal shares
        ([400, 400, 400, 400], [0, 0, 0, 0], [400], [100, 100, 100, 100]),
        # one below its fair share keeps it, the others split the rest
        ([50, 400, 400, 200], [0, 0, 0, 0], [400], [50, 116.6667, 116.6667, 116.6667]),
        # two NICs at once, each its own water level
        ([300, 300, 10, 500], [0, 0, 1, 1], [400, 300], [200, 200, 10, 290]),
    ],
)
def test_the_nic_arbiter_is_max_min_fair(
    demand: list[float], group: list[int], capacity: list[float], share: list[float]
) -> None:
    got = max_min_share(np.array(demand, float), np.array(group), np.array(capacity, float))
    assert got == pytest.approx(share, rel=1e-4)


def test_the_marking_law_is_the_packet_models() -> None:
    """0 at or below Kmin, linear to Pmax at Kmax, 1 above (Zhu et al., SIGCOMM 2015, sec. 3)."""
    kmin, kmax, pmax = 100_000, 400_000, 0.2
    model = fabric(links(1e11, kmin=kmin, kmax=kmax, pmax=pmax))
    marker = EcnMarker(EcnMarkingParams(kmin, kmax, pmax), random.Random(0))
    queues = np.array([0, kmin, 150_000, 250_000, kmax, kmax + 1, 5e6], dtype=float)
    for q in queues:
        ours = model._marking(np.array([q]))[0]
        assert ours == pytest.approx(marker.probability(int(q)), abs=1e-9), q


def test_a_fluid_queue_grows_by_the_excess_and_the_sources_send_at_their_rate() -> None:
    """Two queue pairs from two NICs at 100 Gb/s into one 100 Gb/s link: the link sends its
    rate, the queue grows by the excess every step, and each source sends at its own rate (a
    lossless queue below XOFF holds nobody back: what a source sends above its share waits in
    the queue; it was credited only its share while the queue also grew, counting those bytes
    twice)."""
    lk = links(100e9, 100e9, 100e9)  # NIC a, NIC b, the shared link
    model = fabric(lk)
    model.reacts = False
    for nic in (0, 1):
        i = model.add([nic, 2], 100e9)
        model.active[i] = True
    for k in range(1, 4):
        result = model.step()
        assert model.queue_bytes[2] == pytest.approx(100e9 * DT / 8 * k)
        assert result.link_tx_bytes[2] == pytest.approx(100e9 * DT / 8)
        assert result.delivered_bytes[:2] == pytest.approx([100e9 * DT / 8] * 2)
    # what reaches the receivers is the link's rate, half each: the packets (CE, CNPs) of a step
    assert result.ce_packets.sum() == 0


def test_a_queue_pair_sends_no_more_than_it_has_left() -> None:
    """A step sends at most a queue pair's backlog: a message that ends inside a step does not
    send the rest of the step at line rate into the queues (200 KB at 400 Gb/s)."""
    model = fabric(links(400e9, 400e9))
    model.reacts = False
    i = model.add([0, 1], 400e9)
    model.backlog[i] = 50_000.0
    model.active[i] = True
    result = model.step()
    assert result.delivered_bytes[0] == pytest.approx(50_000.0)
    assert model.backlog[i] == 0.0
    assert result.link_tx_bytes[1] == pytest.approx(50_000.0)


def test_pfc_holds_the_queue_at_xoff_and_counts_the_pause() -> None:
    lk = links(100e9, 100e9, 100e9)
    lk.xoff_bytes[2] = 100_000
    model = fabric(lk)
    model.reacts = False
    for nic in (0, 1):
        model.active[model.add([nic, 2], 100e9)] = True
    for _ in range(10):
        result = model.step()
    assert model.queue_bytes[2] == pytest.approx(100_000)
    assert model.pauses[2] == 1 and model.paused_s[2] > 0
    # held at XOFF, the sources send at their share of the link: PFC's back pressure
    assert result.delivered_bytes[:2] == pytest.approx([100e9 * DT / 16] * 2)


def rp_after(events: list[tuple[float, str]], params: DcqcnParams, line: float) -> float:
    """The packet model's reaction point's current rate after CNPs and timer runs."""
    rp = ReactionPoint(params, line_rate_bps=line)
    for t, what in events:
        if what == "cnp":
            rp.on_cnp(now=t)
        rp.on_timer(now=t)
    return rp.current_rate_bps


def test_a_first_cnp_then_quiet_follows_the_reaction_points_rules() -> None:
    """One CNP at the start, then nothing: the cut at the end of the first decrease period
    (alpha at its initial value, decayed for the period), then fast recovery toward the line
    rate at every rpg_time_reset, exactly as emulator.transport.dcqcn.ReactionPoint."""
    params = DcqcnParams()
    line = 100e9
    model = fabric(links(line))
    i = model.add([0], line)
    steps = round(3 * params.rpg_time_reset_us * 1e-6 / DT) + 1
    zero = np.zeros(1)
    for k in range(steps):
        model.react(np.array([k == 0]), zero)
        t = (k + 1) * DT
        want = rp_after([(0.0, "cnp"), (t, "timer")], params, line)
        assert model.rc[i] == pytest.approx(want, rel=1e-6), (k, t)
    assert model.rt[i] == line  # the episode's first cut keeps the target


def test_a_cut_after_an_increase_event_clamps_the_target() -> None:
    """A second CNP after the first timer increase: the target follows the current rate (NVIDIA:
    only a cut after an increase event since the last one sets it)."""
    params = DcqcnParams()
    line = 100e9
    model = fabric(links(line))
    i = model.add([0], line)
    period = round(params.rpg_time_reset_us * 1e-6 / DT)
    zero = np.zeros(1)
    for k in range(period + 2):
        model.react(np.array([k in (0, period + 1)]), zero)
    t_second = (period + 1) * DT
    rp = ReactionPoint(params, line_rate_bps=line)
    rp.on_cnp(now=0.0)
    rp.on_timer(now=t_second)
    before = rp.current_rate_bps
    rp.on_cnp(now=t_second)
    rp.on_timer(now=t_second + DT)
    assert model.rt[i] == pytest.approx(before, rel=1e-6)
    assert model.rc[i] == pytest.approx(rp.current_rate_bps, rel=1e-3)


def test_no_congestion_control_never_draws_a_cnp() -> None:
    lk = links(100e9, 100e9, 100e9, kmin=0.0, kmax=1.0, pmax=1.0)
    model = fabric(lk)
    model.reacts = False
    for nic in (0, 1):
        model.active[model.add([nic, 2], 100e9)] = True
    for _ in range(20):
        result = model.step()
        assert not result.cnps.any()
    assert (model.rc[:2] == 100e9).all()


@pytest.mark.parametrize("packets_per_step", [0.1, 0.25, 0.7, 1.0, 2.5])
@pytest.mark.parametrize("p_mark", [0.05, 0.5, 1.0])
def test_cnps_per_step_follow_the_notification_point_on_paced_packets(
    packets_per_step: float, p_mark: float
) -> None:
    """The packet model's notification point (a CNP for a CE packet, at most one per
    min_time_between_cnps: NVIDIA's DCQCN), fed paced packets each marked with p_mark, sends a
    CNP in the fraction of 4 us intervals the fluid law gives (a queue pair below a packet a
    step behind a full queue gets one in that fraction of steps, not in every step; one at 2.5
    packets a step in 5 steps of 6, the interval after a CNP passing over the next two)."""
    params = DcqcnParams()
    interval = params.min_time_between_cnps_us * 1e-6
    rng = random.Random(7)
    np_ = NotificationPoint(params)
    steps = 20_000
    gap = interval / packets_per_step
    with_cnp: set[int] = set()
    t = gap * 0.5
    while t < steps * interval:
        if rng.random() < p_mark and np_.on_ce(now=t):
            with_cnp.add(int(t / interval))
        t += gap
    measured = len(with_cnp) / steps
    fluid = float(cnp_probability(np.array([1.0 - p_mark]), np.array([packets_per_step]))[0])
    # 20,000 steps: the measured fraction's standard error is under 0.004
    assert measured == pytest.approx(fluid, rel=0.05, abs=0.01), (measured, fluid)
