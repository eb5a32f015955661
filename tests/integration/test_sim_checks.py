"""Checks the packet-level simulator (emulator/sim) must pass: each one asserts what a public
source says the modelled fabric does, on a fabric built from a ClosSpec as `emulate run
--backend sim` builds it (fabrics.topology.build_clos -> emulator.sim.fabric.build_fabric) and
driven by emulator.sim.replay.SimReplay with a static driver.

Sources: the RoCEv2 wire format (InfiniBand Architecture Specification vol. 1 annex A17, IEEE
802.3 framing) for line rate; Jain, Chiu and Hawe, "A Quantitative Measure of Fairness and
Discrimination for Resource Allocation in Shared Computer Systems", DEC-TR-301, 1984, for the
fairness index; Zhu et al., "Congestion Control for Large-Scale RDMA Deployments" (DCQCN),
SIGCOMM 2015, for DCQCN's convergence and the marking band; IEEE 802.1Qbb and the HPCC ns-3 MMU
(alibaba-edu/High-Precision-Congestion-Control, simulation/src/point-to-point/model/switch-mmu.cc)
for PFC; Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, for pause spreading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from emulator.errors import EmulatorError
from emulator.sim.fabric import SimFabric, SimFabricParams, build_fabric
from emulator.sim.replay import ReplayOutputs, SimReplay
from emulator.transport.dcqcn_params import ALPHA_SCALE, DcqcnParams
from emulator.transport.packets import BTH_BYTES, ICRC_BYTES
from emulator.transport.params import TransportParams
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES
from fabrics.spec import PFC_A_SHIFT, ClosSpec, EcnSpec, TierSpec
from fabrics.topology import build_clos

GBPS = 1e9
# HPCC's simulated fat tree (alibaba-edu/High-Precision-Congestion-Control simulation/mix/fat.txt):
# 100 Gb/s host links and 400 Gb/s fabric links, each 1000 ns of propagation delay.
LINK_DELAY_US = 1.0
SPORT = 49152


# -- a static driver and a run ---------------------------------------------------------------


@dataclass(frozen=True)
class StaticFlow:
    """The fields of emulator.schedule.plan.Flow a replayer reads."""

    id: int
    src: int
    dst: int
    bytes: int
    udp_sport: int = SPORT
    qp: int = 0
    deps: tuple[int, ...] = ()
    profile: int = 0
    instance: int = 0  # its collective (attribution)


class StaticDriver:
    """emulator.schedule.driver.FlowDriver releasing every flow at once, at time 0."""

    def __init__(self, flows: Sequence[StaticFlow]) -> None:
        self.flows = tuple(flows)
        self.released = False
        self.done_at: dict[int, float] = {}

    @property
    def finished(self) -> bool:
        return self.released and len(self.done_at) == len(self.flows)

    def poll(self, now: float) -> Sequence[StaticFlow]:
        if self.released:
            return ()
        self.released = True
        return self.flows

    def delay_done(self, token: int, now: float) -> None:
        raise AssertionError("a static driver has no compute delays")

    def flow_done(self, flow_id: int, now: float) -> None:
        assert flow_id not in self.done_at, f"flow {flow_id} completed twice"
        self.done_at[flow_id] = now

    def unstall(self) -> bool:
        return False

    def stall_error(self) -> EmulatorError:
        return EmulatorError(f"stalled with {len(self.done_at)}/{len(self.flows)} flows done")


@dataclass
class Run:
    fabric: SimFabric
    replay: SimReplay
    driver: StaticDriver
    samples: list[tuple[float, int]] = field(default_factory=list)

    def receiver_bytes(self) -> list[int]:
        """Bytes each flow's receiver delivered so far, in flow order."""
        return [c.receiver.delivered_bytes for c in self.replay.connections.values()]

    def to_completion(self, limit_s: float) -> None:
        t = 0.0
        while not self.replay.done:
            assert t < limit_s, f"not done after {limit_s * 1e3:g} ms of simulated time"
            t += 1e-3
            self.replay.advance(t)

    def sample_queue(self, node: str, ifname: str, every_s: float) -> None:
        """Record the port's queued data bytes every `every_s` of simulated time."""
        sim = self.fabric.sim
        port = self.fabric.ports[(node, ifname)]

        def sample() -> None:
            self.samples.append((sim.now, port.queued_bytes))
            sim.at(sim.now + every_s, sample)

        sim.at(0.0, sample)


def start(
    spec: ClosSpec, flows: Sequence[StaticFlow], transport: TransportParams, seed: int
) -> Run:
    topology = build_clos(spec)
    events = SimReplay.event_list()
    fabric = build_fabric(topology, SimFabricParams(pfc=spec.pfc), seed=seed, events=events)
    driver = StaticDriver(flows)
    outputs = ReplayOutputs(lambda *_: None, lambda *_: None, lambda *_: None)
    replay = SimReplay(fabric, events, driver, outputs, transport=transport)
    run = Run(fabric, replay, driver)
    replay.start()
    return run


def one_switch(hosts: int, **kw: object) -> ClosSpec:
    """`hosts` hosts under one leaf (its one spine carries nothing): one switch between them."""
    base: dict[str, object] = {
        "hosts_per_leaf": hosts,
        "leaves": 1,
        "spines": 1,
        "host_link_gbps": 100.0,
        "fabric_link_gbps": 100.0,
        "link_delay_us": LINK_DELAY_US,
    }
    base.update(kw)
    return ClosSpec(**base)  # type: ignore[arg-type]


def payload_share(mtu: int) -> float:
    """Payload over bytes on the wire of a full path-MTU RoCEv2 SEND packet: a 12-byte BTH and a
    4-byte ICRC (IBA vol. 1 annex A17) in UDP/IPv4 in an Ethernet frame with preamble and
    inter-frame gap (IEEE 802.3), as the transport counts them."""
    return mtu / (mtu + BTH_BYTES + ICRC_BYTES + IPV4_FRAME_OVERHEAD_BYTES)


def jain_index(xs: Sequence[float]) -> float:
    """Jain, Chiu and Hawe 1984: (sum x)^2 / (n sum x^2); 1 when all equal, 1/n when one has all."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


# -- 1. line rate ----------------------------------------------------------------------------


def test_one_flow_reaches_line_rate_minus_headers() -> None:
    # Goodput cannot exceed line rate x payload/(payload + per-packet headers) (payload_share),
    # and a single uncongested flow should get within 3% of it.
    transport = TransportParams()  # DCQCN on: an uncongested flow is never marked
    mtu = transport.path_mtu_bytes
    size = 32 << 20
    assert size % mtu == 0  # every packet full: SEND FIRST/MIDDLE/LAST, none carries a RETH
    ideal_bps = 100 * GBPS * payload_share(mtu)
    run = start(one_switch(2), [StaticFlow(0, 0, 1, size)], transport, seed=1)
    run.to_completion(limit_s=0.05)
    fct_s = run.driver.done_at[0]
    goodput_bps = size * 8 / fct_s
    assert run.receiver_bytes() == [size]
    assert goodput_bps >= 0.97 * ideal_bps, (goodput_bps / GBPS, ideal_bps / GBPS)
    assert goodput_bps <= ideal_bps * (1 + 1e-9)  # and no faster than the wire allows
    assert run.replay.finished[0].ce_marks == 0


# -- 2. DCQCN converges: fair shares, queue in the marking band ------------------------------


# The DCQCN paper's own parameters (Zhu et al. 2015, section 5, chosen with its fluid model for
# stability and fairness): Kmin 5 KB, Kmax 200 KB, Pmax 1%, g 1/256, rate-increase timer 55 us
# and byte counter 10 MB (so the rate-independent timer drives recovery, which is what makes
# the shares equal), alpha updated every 55 us, at most one CNP per 50 us, R_AI 40 Mb/s, F = 5
# fast-recovery steps, and every cut sets the target to the current rate (the paper's
# algorithm: R_T = R_C on a CNP, cut at once). R_HAI, which the paper leaves open, is the
# authors' released ns-3 configuration's (bobzhuyb/ns3-rdma mix/config.txt: RATE_HAI 200Mb/s,
# the same CNP_INTERVAL 50, ALPHA_RESUME_INTERVAL 55, DCTCP_GAIN 1/256, FAST_RECOVERY_TIMES 5,
# RATE_AI 40Mb/s).
PAPER_DCQCN = DcqcnParams(
    rpg_time_reset_us=55.0,
    rpg_byte_reset_bytes=10_000_000,
    dce_tcp_g=ALPHA_SCALE - ALPHA_SCALE // 256,
    dce_tcp_rtt_us=55.0,
    rate_reduce_monitor_period_us=0.0,
    min_time_between_cnps_us=50.0,
    rpg_ai_rate_mbps=40.0,
    rpg_hai_rate_mbps=200.0,
    rpg_threshold=5,
    clamp_tgt_rate=True,
    clamp_tgt_rate_after_time_inc=False,
)
PAPER_ECN = EcnSpec(kmin_bytes=5_000, kmax_bytes=200_000, pmax=0.01)

# With the transport's default (NVIDIA) parameters and HPCC's production marking, 8 flows meet the
# same bound, but 2 and 4 do not (measured, seeds 1-3, second half of 40 ms: n=2 Jain
# 0.940-0.957 and a queue of 304-361 KB under Kmin 400 KB; n=4 Jain 0.983-0.992, 380-412 KB):
# NVIDIA's 2 MB byte counter fires the faster flow's increases sooner than its 300 us timer
# fires anyone's, the unfairness the paper's section 5 chose a dominant timer against. That is a
# finding about those parameters (README, "Simulation"), not a bound the model must meet.
CONVERGENCE_CASES = [
    pytest.param(2, PAPER_DCQCN, PAPER_ECN, id="paper-2"),
    pytest.param(4, PAPER_DCQCN, PAPER_ECN, id="paper-4"),
    pytest.param(8, PAPER_DCQCN, PAPER_ECN, id="paper-8"),
    pytest.param(8, DcqcnParams(), EcnSpec(), id="nvidia-hpcc-8"),
]


@pytest.mark.parametrize(("n", "dcqcn", "ecn"), CONVERGENCE_CASES)
def test_dcqcn_flows_into_one_port_converge_to_fair_shares_in_the_marking_band(
    n: int, dcqcn: DcqcnParams, ecn: EcnSpec
) -> None:
    # Zhu et al. 2015 (DCQCN's fluid model): flows sharing a bottleneck converge to a fixed point
    # with equal rates and a marking probability between 0 and Pmax, i.e. a queue between Kmin
    # and Kmax. Fairness is Jain's index (Jain, Chiu, Hawe 1984) over the run's second half, the
    # queue its mean over the same half (a packet-level queue saw-tooths around the fluid
    # model's fixed point; the paper's author on its ns-3 code: bobzhuyb/ns3-rdma issue 9).
    run_s = 0.04
    tier = TierSpec(ecn=ecn)
    kmin_bytes, kmax_bytes = ecn.thresholds_bytes(100.0)
    receiver = n
    flows = [StaticFlow(i, i, receiver, 1 << 36, udp_sport=SPORT + i) for i in range(n)]
    transport = TransportParams(dcqcn=dcqcn)
    run = start(one_switch(n + 1, leaf=tier, spine=tier), flows, transport, seed=1)
    run.sample_queue("l0", f"l0-h{receiver}", every_s=1e-6)
    run.replay.advance(run_s / 2)
    half = run.receiver_bytes()
    run.replay.advance(run_s)
    end = run.receiver_bytes()
    assert not run.replay.finished, "every flow must still be sending at the end"
    rates_bps = [(b - a) * 8 / (run_s / 2) for a, b in zip(half, end, strict=True)]
    fairness = jain_index(rates_bps)
    window = [q for t, q in run.samples if t >= run_s / 2]
    queue_avg = sum(window) / len(window)
    shown = (
        f"n={n}: Jain {fairness:.4f}, rates Gb/s {[round(r / GBPS, 2) for r in rates_bps]}, "
        f"queue avg {queue_avg / 1e3:.0f} KB (Kmin {kmin_bytes / 1e3:.0f} KB, "
        f"Kmax {kmax_bytes / 1e3:.0f} KB)"
    )
    print(shown)
    line_goodput_bps = 100 * GBPS * payload_share(transport.path_mtu_bytes)
    assert sum(rates_bps) >= 0.95 * line_goodput_bps, shown  # the port stays busy
    assert fairness >= 0.95, shown
    assert kmin_bytes <= queue_avg <= kmax_bytes, shown


# -- 3. incast: PFC makes it lossless; without PFC, go-back-N recovers every byte once -------

INCAST_SENDERS = 8
INCAST_BYTES = 2_000_000


def _incast(spec: ClosSpec, size: int) -> Run:
    receiver = INCAST_SENDERS
    flows = [StaticFlow(i, i, receiver, size, udp_sport=SPORT + i) for i in range(INCAST_SENDERS)]
    return start(spec, flows, TransportParams(congestion_control="none"), seed=1)


def _headroom(rate_bps: float, mtu: int) -> int:
    # IEEE 802.1Qbb annex O delay model: the round trip's bytes on the link, a maximum frame at
    # each end and the PFC frame itself (see tests/unit/test_sim_pfc.py for the terms)
    max_frame = mtu + 14 + 4 + 8 + 12  # IEEE 802.3: header, FCS, preamble/SFD, inter-frame gap
    pfc_frame = 64 + 8 + 12  # a minimum MAC control frame on the wire
    return int(2 * rate_bps * LINK_DELAY_US * 1e-6 / 8) + 2 * max_frame + pfc_frame


@pytest.mark.parametrize(
    "tier",
    [
        pytest.param(TierSpec(pfc_xoff_bytes=100_000), id="static-xoff"),
        # HPCC's dynamic threshold, over a shared buffer small enough for 8 x 2 MB to fill it
        pytest.param(TierSpec(shared_buffer_bytes=4_000_000), id="dynamic-xoff"),
    ],
)
def test_incast_with_pfc_and_no_congestion_control_drops_nothing(tier: TierSpec) -> None:
    # IEEE 802.1Qbb: an ingress above XOFF pauses its upstream; with headroom for the pause's
    # round trip the lossless class never drops (HPCC switch-mmu.cc drops only on a full
    # headroom). The ingress never holds more than XOFF + headroom.
    spec = one_switch(INCAST_SENDERS + 1, leaf=tier, spine=tier)
    run = _incast(spec, INCAST_BYTES)
    run.to_completion(limit_s=0.05)
    fabric = run.fabric
    assert run.receiver_bytes() == [INCAST_BYTES] * INCAST_SENDERS
    assert {k: p.drops for k, p in fabric.ports.items() if p.drops} == {}
    assert [i.drops for i in fabric.ingresses if i.drops] == []
    assert run.replay.counters["packets_resent_planned"] == 0
    nics = [fabric.ports[(f"h{i}", "eth0")] for i in range(INCAST_SENDERS)]
    assert all(nic.pause_frames > 0 for nic in nics), [nic.pause_frames for nic in nics]
    headroom = _headroom(100 * GBPS, spec.mtu_bytes)
    leaf = fabric.switches["l0"]
    if tier.pfc_xoff_bytes is not None:
        xoff = tier.pfc_xoff_bytes
    else:  # the largest the dynamic threshold gets: nothing else held
        xoff = (tier.shared_buffer_bytes - headroom * len(leaf.ingress)) >> PFC_A_SHIFT
    held = {nic.name: leaf.ingress[nic].max_bytes for nic in nics}
    assert all(b <= xoff + headroom for b in held.values()), (xoff, headroom, held)
    if tier.pfc_xoff_bytes is not None:
        # the bytes in flight while the PAUSE travelled landed above XOFF, in the headroom
        assert all(b > xoff for b in held.values()), (xoff, held)


def test_incast_without_pfc_drops_and_go_back_n_delivers_every_byte_once() -> None:
    # Without PFC a full drop-tail egress loses packets; RC's go-back-N (IBA vol. 1 9.7.5) sends
    # from the first lost PSN again and the responder accepts each PSN once, in order.
    buffer_bytes = 200_000
    small = TierSpec(buffer_bytes=buffer_bytes)
    spec = one_switch(INCAST_SENDERS + 1, pfc=False, leaf=small, spine=small)
    size = 1_000_000
    run = _incast(spec, size)
    connections = list(run.replay.connections.values())
    for conn in connections:
        conn.receiver.deliveries = []  # before any packet arrives: start() only posted
    run.to_completion(limit_s=0.2)
    fabric = run.fabric
    assert fabric.ingresses == []
    bottleneck = fabric.ports[("l0", f"l0-h{INCAST_SENDERS}")]
    assert bottleneck.drops > 0
    assert bottleneck.max_queued_bytes <= buffer_bytes
    counters = run.replay.counters
    assert counters["go_back_n_nak"] + counters["go_back_n_timeout"] > 0, dict(counters)
    assert sum(c.sender.packets_retransmitted for c in connections) > 0
    mtu = TransportParams().path_mtu_bytes
    for conn in connections:
        assert conn.receiver.delivered_bytes == size
        deliveries = conn.receiver.deliveries
        assert deliveries is not None
        offsets = [offset for _, offset, _ in deliveries]
        assert offsets == list(range(0, size, mtu))  # each chunk once, in order
        assert {index for index, _, _ in deliveries} == {0}
        assert sum(p.payload_bytes for _, _, p in deliveries) == size
    assert sorted(run.driver.done_at) == list(range(INCAST_SENDERS))


# -- 4. pauses spread hop by hop ---------------------------------------------------------------


def test_pfc_pauses_spread_from_the_receiver_leaf_to_the_spine_to_the_sender_leaf() -> None:
    # Guo et al., SIGCOMM 2016 (PFC's congestion spreading): the congested switch pauses its
    # upstream, whose queue then fills and pauses its own upstream, hop by hop to the senders.
    # Four senders under l0 send to one receiver under l1 through s0; the fabric links are 4x
    # the host links, so the only bottleneck is l1's port to the receiver.
    tier = TierSpec(pfc_xoff_bytes=50_000)
    senders = 4
    spec = ClosSpec(
        hosts_per_leaf=senders,
        leaves=2,
        spines=1,
        host_link_gbps=100.0,
        fabric_link_gbps=400.0,
        link_delay_us=LINK_DELAY_US,
        leaf=tier,
        spine=tier,
    )
    receiver = senders  # h4, first host of l1
    flows = [StaticFlow(i, i, receiver, 2_000_000, udp_sport=SPORT + i) for i in range(senders)]
    run = start(spec, flows, TransportParams(congestion_control="none"), seed=1)
    fabric = run.fabric
    first_pause: dict[tuple[str, str], float] = {}

    def watch() -> None:
        for key, port in fabric.ports.items():
            if port.pause_frames and key not in first_pause:
                first_pause[key] = fabric.sim.now
        fabric.sim.at(fabric.sim.now + 0.25e-6, watch)

    fabric.sim.at(0.0, watch)
    run.to_completion(limit_s=0.05)
    assert run.receiver_bytes() == [2_000_000] * senders
    assert sum(p.drops for p in fabric.ports.values()) == 0
    assert sum(i.drops for i in fabric.ingresses) == 0
    roles = fabric.topology.node_by_name
    paused_tiers = {roles[node].role for node, _ in first_pause}
    assert {"spine", "leaf", "host"} <= paused_tiers, first_pause
    spine_down = fabric.ports[("s0", "s0-l1")]  # paused by the receiver's leaf
    leaf_up = fabric.ports[("l0", "l0-s0")]  # paused by the spine
    assert spine_down.pause_frames > 0 and leaf_up.pause_frames > 0
    nic_first = min(first_pause[(f"h{i}", "eth0")] for i in range(senders))
    # hop by hop: l1 pauses s0 first, then s0 pauses l0, then l0 pauses the senders
    assert first_pause[("s0", "s0-l1")] < first_pause[("l0", "l0-s0")] < nic_first, first_pause


# -- 5. determinism ----------------------------------------------------------------------------


PortCounters = tuple[tuple[str, str], int, int, int, int, int, int]


def _counters_and_fcts(
    seed: int,
) -> tuple[tuple[PortCounters, ...], tuple[tuple[int, float], ...]]:
    n = 4
    flows = [StaticFlow(i, i, n, 3_000_000, udp_sport=SPORT + i) for i in range(n)]
    run = start(one_switch(n + 1), flows, TransportParams(), seed=seed)
    run.to_completion(limit_s=0.05)
    ports = tuple(
        (key, p.tx_frames, p.tx_bytes, p.marks, p.drops, p.pause_frames, p.max_queued_bytes)
        for key, p in sorted(run.fabric.ports.items())
    )
    return ports, tuple(sorted(run.driver.done_at.items()))


def test_same_seed_same_counters_and_fcts_and_another_seed_differs() -> None:
    # docs/architecture.md, "Simulator": deterministic for a seed (one generator per port from the seed). The
    # only random draws here are the ECN marks between Kmin and Kmax (DCQCN's probabilistic CP).
    first = _counters_and_fcts(7)
    assert sum(p[3] for p in first[0]) > 0  # the marker drew
    assert _counters_and_fcts(7) == first
    assert _counters_and_fcts(8) != first
