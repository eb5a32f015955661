"""Collective algorithms: flow graphs against hand-computed small cases, and byte conservation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.schedule.algorithms import ALGORITHMS
from emulator.schedule.collectives import transfers_for
from emulator.schedule.params import CollectivesParams
from emulator.schedule.plan import Transfer

PARAMS = CollectivesParams()


def shape(transfers: list[Transfer]) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
    return [(t.step, t.src, t.dst, t.bytes, t.deps) for t in transfers]


def sent_by(transfers: list[Transfer], n: int) -> list[int]:
    return [sum(t.bytes for t in transfers if t.src == p) for p in range(n)]


def test_ring_allreduce_n3_by_hand() -> None:
    # S = 301 -> blocks 101, 100, 100. Reduce-scatter: p sends block p-s; all-gather: p+1-t.
    got = shape(transfers_for("ALL_REDUCE", "ring", 3, 301, 0, PARAMS))
    assert got == [
        (0, 0, 1, 101, ()),
        (0, 1, 2, 100, ()),
        (0, 2, 0, 100, ()),
        (1, 0, 1, 100, (2,)),
        (1, 1, 2, 101, (0,)),
        (1, 2, 0, 100, (1,)),
        (2, 0, 1, 100, (5,)),
        (2, 1, 2, 100, (3,)),
        (2, 2, 0, 101, (4,)),
        (3, 0, 1, 101, (8,)),
        (3, 1, 2, 100, (6,)),
        (3, 2, 0, 100, (7,)),
    ]


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_allreduce_each_rank_sends_2_n_minus_1_over_n(n: int) -> None:
    size = 8 * 3 * 1024  # divisible by every n here
    transfers = transfers_for("ALL_REDUCE", "ring", n, size, 0, PARAMS)
    assert sent_by(transfers, n) == [2 * (n - 1) * size // n] * n
    assert {t.step for t in transfers} == set(range(2 * (n - 1)))
    assert all(t.dst == (t.src + 1) % n for t in transfers)


def test_halving_doubling_n4_by_hand() -> None:
    got = shape(transfers_for("ALL_REDUCE", "halving_doubling", 4, 400, 0, PARAMS))
    assert got == [
        # recursive halving, distance 2: lower half keeps blocks 0-1, upper keeps 2-3
        (0, 0, 2, 200, ()),
        (0, 1, 3, 200, ()),
        (0, 2, 0, 200, ()),
        (0, 3, 1, 200, ()),
        # distance 1
        (1, 0, 1, 100, (2,)),
        (1, 1, 0, 100, (3,)),
        (1, 2, 3, 100, (0,)),
        (1, 3, 2, 100, (1,)),
        # recursive doubling: own block to distance 1, then two blocks to distance 2
        (2, 0, 1, 100, (5,)),
        (2, 1, 0, 100, (4,)),
        (2, 2, 3, 100, (7,)),
        (2, 3, 2, 100, (6,)),
        (3, 0, 2, 200, (9,)),
        (3, 1, 3, 200, (8,)),
        (3, 2, 0, 200, (11,)),
        (3, 3, 1, 200, (10,)),
    ]


def test_halving_doubling_n3_folds_the_extra_rank() -> None:
    got = shape(transfers_for("ALL_REDUCE", "halving_doubling", 3, 300, 0, PARAMS))
    assert got == [
        (0, 0, 1, 300, ()),  # rank 0 hands its whole buffer to rank 1
        (1, 1, 2, 150, (0,)),  # power-of-two phase between ranks 1 and 2
        (1, 2, 1, 150, ()),
        (2, 1, 2, 150, (2,)),
        (2, 2, 1, 150, (1,)),
        (3, 1, 0, 300, (4,)),  # and gets the result back once it has all of it
    ]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling", "direct"])
def test_allreduce_total_bytes_exact_with_remainders(n: int, algorithm: str) -> None:
    size = 1001  # not divisible by n: remainder bytes go to the first blocks
    transfers = transfers_for("ALL_REDUCE", algorithm, n, size, 0, PARAMS)
    assert sum(t.bytes for t in transfers) == 2 * (n - 1) * size


def test_direct_allreduce_n3_allgather_waits_for_its_reduce_scatter() -> None:
    transfers = transfers_for("ALL_REDUCE", "direct", 3, 300, 0, PARAMS)
    assert len(transfers) == 12
    step1 = [t for t in transfers if t.step == 1]
    for t in step1:
        incoming = {i for i, u in enumerate(transfers) if u.step == 0 and u.dst == t.src}
        assert set(t.deps) == incoming and len(incoming) == 2
        assert t.bytes == 100


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize(
    ("collective", "algorithm"),
    [
        ("ALL_GATHER", "ring"),
        ("ALL_GATHER", "direct"),
        ("REDUCE_SCATTER", "ring"),
        ("REDUCE_SCATTER", "direct"),
        ("ALL_TO_ALL", "parallel"),
        ("ALL_TO_ALL", "paced"),
    ],
)
def test_n_minus_one_collectives_move_n_minus_one_times_s(
    n: int, collective: str, algorithm: str
) -> None:
    size = 1003
    transfers = transfers_for(collective, algorithm, n, size, 0, PARAMS)
    assert sum(t.bytes for t in transfers) == (n - 1) * size


def test_allgather_ring_forwards_what_it_received() -> None:
    transfers = transfers_for("ALL_GATHER", "ring", 4, 400, 0, PARAMS)
    assert len(transfers) == 12 and all(t.bytes == 100 for t in transfers)
    for t in transfers:
        if t.step == 0:
            assert t.deps == ()
        else:
            (dep,) = t.deps
            assert transfers[dep].dst == t.src and transfers[dep].step == t.step - 1


def test_reducescatter_ring_ends_with_own_block() -> None:
    # Blocks of distinct sizes show which block moves: S = 10 on n = 4 -> 3, 3, 2, 2.
    transfers = transfers_for("REDUCE_SCATTER", "ring", 4, 10, 0, PARAMS)
    last = [t for t in transfers if t.step == 2]
    # In the last step rank p receives block p from p-1.
    assert sorted((t.dst, t.bytes) for t in last) == [(0, 3), (1, 3), (2, 2), (3, 2)]


def test_alltoall_parallel_and_paced() -> None:
    parallel = transfers_for("ALL_TO_ALL", "parallel", 4, 400, 0, PARAMS)
    assert len(parallel) == 12
    assert all(t.step == 0 and t.deps == () and t.bytes == 100 for t in parallel)
    paced = transfers_for(
        "ALL_TO_ALL", "paced", 4, 400, 0, CollectivesParams(alltoall_max_peers_in_flight=1)
    )
    rank0 = [(i, t) for i, t in enumerate(paced) if t.src == 0]
    assert [(t.dst, t.step) for _, t in rank0] == [(1, 0), (2, 1), (3, 2)]
    assert rank0[1][1].deps == (rank0[0][0],) and rank0[2][1].deps == (rank0[1][0],)


def test_broadcast_ring_tree_direct() -> None:
    ring = shape(transfers_for("BROADCAST", "ring", 4, 64, 1, PARAMS))
    assert ring == [(0, 1, 2, 64, ()), (1, 2, 3, 64, (0,)), (2, 3, 0, 64, (1,))]
    tree = shape(transfers_for("BROADCAST", "tree", 7, 64, 0, PARAMS))
    assert tree == [
        (0, 0, 1, 64, ()),
        (0, 0, 2, 64, ()),
        (1, 1, 3, 64, (0,)),
        (1, 1, 4, 64, (0,)),
        (1, 2, 5, 64, (1,)),
        (1, 2, 6, 64, (1,)),
    ]
    direct = shape(transfers_for("BROADCAST", "direct", 3, 64, 2, PARAMS))
    assert direct == [(0, 2, 0, 64, ()), (0, 2, 1, 64, ())]


def test_reduce_gather_scatter_by_hand() -> None:
    tree = shape(transfers_for("REDUCE", "tree", 4, 8, 0, PARAMS))
    assert tree == [(0, 3, 1, 8, ()), (1, 2, 0, 8, ()), (1, 1, 0, 8, (0,))]
    gather = shape(transfers_for("GATHER", "ring", 4, 400, 0, PARAMS))
    assert gather == [(0, 1, 2, 100, ()), (1, 2, 3, 200, (0,)), (2, 3, 0, 300, (1,))]
    scatter = shape(transfers_for("SCATTER", "ring", 4, 400, 0, PARAMS))
    assert scatter == [(0, 0, 1, 300, ()), (1, 1, 2, 200, (0,)), (2, 2, 3, 100, (1,))]
    assert sum(t[3] for t in shape(transfers_for("GATHER", "tree", 5, 500, 0, PARAMS))) == 600
    assert sum(t[3] for t in shape(transfers_for("SCATTER", "direct", 5, 500, 3, PARAMS))) == 400


@pytest.mark.parametrize(("n", "rounds"), [(2, 1), (5, 3), (8, 3)])
def test_barrier_dissemination(n: int, rounds: int) -> None:
    transfers = transfers_for("BARRIER", "dissemination", n, 0, 0, PARAMS)
    assert len(transfers) == n * rounds
    assert all(t.bytes == PARAMS.barrier_message_bytes for t in transfers)
    assert {(t.dst - t.src) % n for t in transfers if t.step == rounds - 1} == {
        2 ** (rounds - 1) % n
    }


def test_every_algorithm_is_empty_for_one_rank() -> None:
    for collective, names in ALGORITHMS.items():
        for name in names:
            assert transfers_for(collective, name, 1, 100, 0, PARAMS) == [], (collective, name)


def test_unknown_algorithm_is_refused_by_params() -> None:
    with pytest.raises(ValueError, match="algorithms: ALL_REDUCE: unknown algorithm 'bogus'"):
        CollectivesParams(algorithms={"ALL_REDUCE": "bogus"})
    with pytest.raises(ValueError, match="unknown collective type"):
        CollectivesParams(algorithms={"ALLREDUCE": "ring"})


def test_ring_allreduce_n2_by_hand() -> None:
    got = shape(transfers_for("ALL_REDUCE", "ring", 2, 10, 0, PARAMS))
    assert got == [(0, 0, 1, 5, ()), (0, 1, 0, 5, ()), (1, 0, 1, 5, (1,)), (1, 1, 0, 5, (0,))]


def test_halving_doubling_n8_partners_and_sizes() -> None:
    transfers = transfers_for("ALL_REDUCE", "halving_doubling", 8, 800, 0, PARAMS)
    by_step: dict[int, set[tuple[int, int]]] = {}
    for t in transfers:
        by_step.setdefault(t.step, set()).add((t.dst ^ t.src, t.bytes))
    # distance (XOR) and bytes per step: halving 4, 2, 1 then doubling 1, 2, 4
    assert by_step == {
        0: {(4, 400)},
        1: {(2, 200)},
        2: {(1, 100)},
        3: {(1, 100)},
        4: {(2, 200)},
        5: {(4, 400)},
    }
    assert sent_by(transfers, 8) == [1400] * 8


@given(
    n=st.integers(min_value=1, max_value=12),
    size=st.integers(min_value=0, max_value=10_000),
    root=st.integers(min_value=0, max_value=11),
)
@settings(max_examples=60, deadline=None)
def test_bytes_conserved_for_every_algorithm(n: int, size: int, root: int) -> None:
    root %= n
    expected = {
        "ALL_REDUCE": 2 * (n - 1) * size,
        "ALL_GATHER": (n - 1) * size,
        "REDUCE_SCATTER": (n - 1) * size,
        "ALL_TO_ALL": (n - 1) * size,
        "BROADCAST": None,
        "REDUCE": None,
        "GATHER": None,
        "SCATTER": None,
        "BARRIER": None,
    }
    for collective, names in ALGORITHMS.items():
        for name in names:
            transfers = transfers_for(collective, name, n, size, root, PARAMS)
            total = sum(t.bytes for t in transfers)
            if expected[collective] is not None:
                assert total == expected[collective], (collective, name)
            for index, t in enumerate(transfers):
                assert 0 <= t.src < n and 0 <= t.dst < n and t.src != t.dst
                assert all(dep < index for dep in t.deps)  # deps point backwards: a DAG
            if collective in ("BROADCAST", "REDUCE") and name != "tree":
                assert total == (n - 1) * size
            if collective in ("SCATTER", "GATHER") and name == "direct":
                assert total == size - size // n - (1 if root < size % n else 0)
