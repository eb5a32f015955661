"""The kernel's multipath hash reproduced: SipHash vectors, hash-threshold bounds, spreading."""

from __future__ import annotations

import dataclasses
import ipaddress
import struct
from collections import Counter

import pytest

from fabrics.ecmp import hash_threshold_index, l4_multipath_hash, siphash24
from fabrics.spec import ClosSpec
from fabrics.topology import build_clos

KEY: tuple[int, int] = struct.unpack("<QQ", bytes(range(16)))


@pytest.mark.parametrize(
    ("length", "expected"),
    # SipHash-2-4 reference vectors (key 00..0f, message 00..len-1), read as little-endian u64.
    [(0, 0x726FDB47DD0E0E31), (8, 0x93F5F5799A932462), (15, 0xA129CA6149BE45E5)],
)
def test_siphash_reference_vectors(length: int, expected: int) -> None:
    assert siphash24(KEY[0], KEY[1], bytes(range(length))) == expected


def test_hash_threshold_splits_the_31_bit_space_evenly() -> None:
    assert [hash_threshold_index(h, 2) for h in (0, (1 << 30) - 1, 1 << 30, (1 << 31) - 1)] == [
        0,
        0,
        1,
        1,
    ]
    third = round((1 << 31) / 3) - 1  # upper bound of the first of three next hops
    assert (hash_threshold_index(third, 3), hash_threshold_index(third + 1, 3)) == (0, 1)
    assert hash_threshold_index(0, 1) == 0


def test_hash_is_symmetric_31_bit_and_seeded() -> None:
    a, b = ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("10.0.1.1")
    h = l4_multipath_hash(a, b, 17, 50000, 4791, 1)
    assert 0 < h < 1 << 31
    assert h == l4_multipath_hash(b, a, 17, 4791, 50000, 1)  # __flow_hash_consistentify
    assert h != l4_multipath_hash(a, b, 17, 50000, 4791, 2)
    assert h != l4_multipath_hash(a, b, 17, 50001, 4791, 1)


@pytest.mark.parametrize("seed", [0, 1, 0xDEADBEEF])
def test_paths_spread_source_ports_evenly_with_any_seed(seed: int) -> None:
    spec = dataclasses.replace(ClosSpec(hosts_per_leaf=4, leaves=4, spines=4), ecmp_hash_seed=seed)
    topo = build_clos(spec)
    spines = Counter(topo.path("h0", "h4", sport)[1].dst for sport in range(49152, 49152 + 4096))
    assert set(spines) == {"s0", "s1", "s2", "s3"}
    assert min(spines.values()) > 0.2 * 4096
