"""Transfers -> flows: queue pairs, source ports, chunk pipelining, zero-byte blocks; busbw."""

from __future__ import annotations

import zlib

import pytest

from emulator.schedule.busbw import algbw_bytes_per_s, busbw_bytes_per_s, busbw_factor
from emulator.schedule.collectives import FlowExpander, transfers_for
from emulator.schedule.params import CollectivesParams
from emulator.schedule.plan import Flow, Transfer
from emulator.schedule.sports import HashSports, SequentialSports


def expand(transfers: list[Transfer], n: int, **params: object) -> list[Flow]:
    p = CollectivesParams(**params)  # type: ignore[arg-type]
    expander = FlowExpander(p, SequentialSports(p.udp_sport_min, p.udp_sport_max))
    nodes = [(rank, 100 + rank) for rank in range(n)]
    return expander.expand(transfers, list(range(n)), 7, 2, nodes)


def test_transfer_split_over_queue_pairs_with_own_ports() -> None:
    flows = expand([Transfer(0, 0, 1, 10)], 2, qps_per_peer=3)
    assert [(f.qp, f.bytes) for f in flows] == [(0, 4), (1, 3), (2, 3)]
    assert len({f.udp_sport for f in flows}) == 3
    assert all(49152 <= f.udp_sport <= 65535 for f in flows)
    assert all(f.instance == 7 and f.iteration == 2 for f in flows)
    # Rendezvous: each flow waits for the sender's and the receiver's node.
    assert flows[0].node_deps == ((0, 100), (1, 101))


def test_chunks_pipeline_along_a_chain() -> None:
    chain = [Transfer(0, 0, 1, 250), Transfer(1, 1, 2, 250, (0,))]
    flows = expand(chain, 3, chunk_bytes=100)
    assert [f.bytes for f in flows] == [84, 83, 83, 84, 83, 83]
    a0, a1, a2, b0, b1, b2 = flows
    assert a0.deps == () and a1.deps == (a0.id,) and a2.deps == (a1.id,)
    # chunk c of the second hop waits for chunk c of the first, and its own previous chunk
    assert b0.deps == (a0.id,)
    assert b1.deps == (a1.id, b0.id)
    assert b2.deps == (a2.id, b1.id)


def test_zero_byte_blocks_send_nothing_and_pass_dependencies_on() -> None:
    # S = 2 on 4 ranks: blocks 1, 1, 0, 0.
    transfers = transfers_for("ALL_REDUCE", "ring", 4, 2, 0, CollectivesParams())
    flows = expand(transfers, 4)
    assert sum(f.bytes for f in flows) == 2 * 3 * 2
    assert all(f.bytes > 0 for f in flows)
    ids = {f.id for f in flows}
    assert all(set(f.deps) <= ids for f in flows)
    # The last flow still (transitively) waits for earlier steps.
    assert flows[-1].deps


def test_eager_flows_wait_only_for_the_sender() -> None:
    p = CollectivesParams()
    expander = FlowExpander(p, HashSports(p.udp_sport_min, p.udp_sport_max))
    (flow,) = expander.expand(
        [Transfer(0, 0, 1, 5)], [3, 5], 0, 0, [(3, 1), (5, 9)], rendezvous=False
    )
    assert (flow.src, flow.dst, flow.node_deps) == (3, 5, ((3, 1),))


def test_source_port_policies_are_deterministic() -> None:
    hashed = HashSports(50000, 50009)
    assert hashed(1, 2, 0) == hashed(1, 2, 0)
    assert all(
        50000 <= hashed(s, d, q) <= 50009 for s in range(4) for d in range(4) for q in range(2)
    )
    seq = SequentialSports(60000, 60001)
    assert [seq(0, 1, 0), seq(0, 2, 0), seq(0, 3, 0), seq(0, 1, 0), seq(1, 0, 0)] == [
        60000,
        60001,
        60000,
        60000,
        60000,
    ]


def test_a_seed_is_another_draw_of_the_source_ports_and_seed_0_the_plain_hash() -> None:
    keys = [(s, d, q) for s in range(8) for d in range(8) if s != d for q in range(2)]
    plain, zero = HashSports(0xC000, 0xFFFF), HashSports(0xC000, 0xFFFF, 0)
    # seed 0 keeps the placement every run had before seeds reached the ports
    assert all(
        plain(*k) == zero(*k) == 0xC000 + zlib.crc32(f"{k[0]}:{k[1]}:{k[2]}".encode()) % 16384
        for k in keys
    )
    one, two = HashSports(0xC000, 0xFFFF, 1), HashSports(0xC000, 0xFFFF, 2)
    assert one(1, 2, 0) == HashSports(0xC000, 0xFFFF, 1)(1, 2, 0)  # a seed is repeatable
    # another seed moves nearly every port, and not by one common offset (a fresh draw)
    moved = [k for k in keys if one(*k) != two(*k)]
    assert len(moved) >= 0.95 * len(keys)
    assert len({(one(*k) - two(*k)) % 16384 for k in keys}) > len(keys) // 2
    shifted = SequentialSports(60000, 60003, 2)
    assert [shifted(0, 1, 0), shifted(0, 2, 0), shifted(0, 3, 0)] == [60002, 60003, 60000]


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        ("ALL_REDUCE", 8, 1.75),
        ("ALL_GATHER", 8, 0.875),
        ("REDUCE_SCATTER", 4, 0.75),
        ("ALL_TO_ALL", 2, 0.5),
        ("BROADCAST", 8, 1.0),
        ("REDUCE", 8, 1.0),
        ("SEND_RECV", 2, 1.0),
    ],
)
def test_busbw_factors_follow_nccl_tests(collective: str, n: int, factor: float) -> None:
    assert busbw_factor(collective, n) == pytest.approx(factor)
    assert busbw_bytes_per_s(collective, n, 1000, 1e-6) == pytest.approx(1e9 * factor)


def test_busbw_undefined_cases() -> None:
    assert busbw_factor("BARRIER", 8) is None
    assert algbw_bytes_per_s(1000, 0.0) is None
    assert busbw_bytes_per_s("ALL_REDUCE", 1, 1000, 0.0) is None
