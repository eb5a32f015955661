"""Per-tier load balancing in a simulated run: one queue pair (one UDP source port: entropy
per_qp) from h0 under leaf l0 to h1 under leaf l1, over four spines. The leaf's ECMP hash keeps
every data packet of the QP on one uplink; spraying puts them on all four; flowlet switching
keeps a flow paced back to back (gaps far below flowlet_gap_us) on the hash's uplink. The leaf
uplinks' own transmit counters (Port.tx_frames, what ports.parquet reports) say so.
"""

from __future__ import annotations

from emulator.transport.params import TransportParams
from fabrics.spec import ClosSpec, LoadBalancingSpec, TierSpec
from tests.integration.test_sim_checks import LINK_DELAY_US, Run, StaticFlow, start

UPLINKS = ("l0-s0", "l0-s1", "l0-s2", "l0-s3")
SIZE = 1 << 20  # 256 packets of 4 KiB


def one_qp(balancing: LoadBalancingSpec, seed: int = 1, sport: int = 49152) -> Run:
    spec = ClosSpec(
        hosts_per_leaf=1,
        leaves=2,
        spines=4,
        host_link_gbps=100.0,
        fabric_link_gbps=100.0,
        link_delay_us=LINK_DELAY_US,
        leaf=TierSpec(load_balancing=balancing),
    )
    run = start(spec, [StaticFlow(0, 0, 1, SIZE, udp_sport=sport)], TransportParams(), seed=seed)
    run.to_completion(limit_s=0.01)
    assert run.receiver_bytes() == [SIZE]
    return run


def uplink_frames(run: Run) -> list[int]:
    return [run.fabric.ports[("l0", u)].tx_frames for u in UPLINKS]


def test_ecmp_keeps_the_qp_on_one_uplink_and_spray_uses_every_uplink() -> None:
    ecmp = uplink_frames(one_qp(LoadBalancingSpec()))
    packets = sum(ecmp)
    assert packets >= SIZE // TransportParams().path_mtu_bytes
    assert sorted(ecmp)[:3] == [0, 0, 0]  # one uplink carries the whole QP

    rr = one_qp(LoadBalancingSpec(mode="spray", spray_order="round_robin"))
    frames = uplink_frames(rr)
    # in turn: each uplink a quarter of the packets (of any retransmissions too), to one
    assert max(frames) - min(frames) <= 1, frames
    assert sum(frames) >= packets

    spray = uplink_frames(one_qp(LoadBalancingSpec(mode="spray")))
    assert min(spray) > 0, spray  # drawn at random: every uplink used
    assert spray != uplink_frames(one_qp(LoadBalancingSpec(mode="spray"), seed=2))


def test_a_back_to_back_flow_is_one_flowlet_on_the_hash_uplink() -> None:
    taken = set()
    for sport in range(49152, 49156):
        ecmp = uplink_frames(one_qp(LoadBalancingSpec(), sport=sport))
        flowlet = one_qp(LoadBalancingSpec(mode="flowlet", flowlet_gap_us=100.0), sport=sport)
        assert uplink_frames(flowlet) == ecmp
        taken.add(ecmp.index(max(ecmp)))
        # adaptive per flowlet: one flowlet, so one uplink too (the least queued at its start)
        adaptive = LoadBalancingSpec(mode="adaptive", adaptive_granularity="flowlet")
        assert sorted(uplink_frames(one_qp(adaptive, sport=sport)))[:3] == [0, 0, 0]
    assert len(taken) > 1  # the source ports hash to different uplinks


def test_a_qp_kept_on_one_path_has_no_reordered_flow() -> None:
    run = one_qp(LoadBalancingSpec())
    assert [r.reordered_packets for r in run.replay.finished.values()] == [0]


def sprayed_cross_leaf(reliability: str, seed: int) -> Run:
    """The cross-leaf step of an All-Reduce: each of four hosts under l0 sends 1 MiB to its
    partner under l1 at line rate, every packet sprayed at random over the leaf's four uplinks
    (queues that differ by a packet or two reorder what arrives)."""
    spec = ClosSpec(
        hosts_per_leaf=4,
        leaves=2,
        spines=4,
        host_link_gbps=100.0,
        fabric_link_gbps=100.0,
        link_delay_us=LINK_DELAY_US,
        leaf=TierSpec(load_balancing=LoadBalancingSpec(mode="spray")),
    )
    flows = [StaticFlow(i, i, 4 + i, SIZE, udp_sport=49152 + i) for i in range(4)]
    transport = TransportParams(reliability=reliability)  # type: ignore[arg-type]
    run = start(spec, flows, transport, seed=seed)
    run.to_completion(limit_s=0.05)
    return run


def test_a_sprayed_all_reduce_step_completes_with_fewer_resends_when_selective() -> None:
    for seed in (1, 2):
        gbn = sprayed_cross_leaf("go_back_n", seed)
        sel = sprayed_cross_leaf("selective", seed)
        for run in (gbn, sel):
            assert run.receiver_bytes() == [SIZE] * 4  # every byte, once, in every message
        conns = {
            name: list(run.replay.connections.values())
            for name, run in (("gbn", gbn), ("sel", sel))
        }
        reordered = sum(c.receiver.reordered_packets for c in conns["sel"])
        assert reordered > 0  # spraying did reorder
        # each flow's record carries its share (one message per QP here: all of it)
        assert sorted(r.reordered_packets for r in sel.replay.finished.values()) == sorted(
            c.receiver.reordered_packets for c in conns["sel"]
        )
        resent = {k: sum(c.sender.packets_retransmitted for c in v) for k, v in conns.items()}
        # go-back-N answers reordering with NAKs and resends of the window; selective holds the
        # early packets and resends nothing that was only late
        assert sum(c.receiver.naks_sent for c in conns["gbn"]) > 0
        assert resent["sel"] < resent["gbn"], resent
        assert sum(c.receiver.held_packets for c in conns["sel"]) > 0
        done = {k: run.replay.fabric.sim.now for k, run in (("gbn", gbn), ("sel", sel))}
        assert done["sel"] <= done["gbn"], done
