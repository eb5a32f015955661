"""Linux's IPv4 multipath choice for a UDP flow, reproduced in Python so paths can be predicted.

With net.ipv4.fib_multipath_hash_policy=1 and a fixed net.ipv4.fib_multipath_hash_seed (kernels
6.11+), a forwarded packet's next hop is (Linux net/ipv4/route.c fib_multipath_hash, policy 1;
net/core/flow_dissector.c __flow_hash_from_keys; net/ipv4/fib_semantics.c fib_select_multipath):
  1. struct flow_keys zeroed, then addr_type IPv4, ip_proto, src/dst address and port filled in;
  2. __flow_hash_consistentify: addresses swapped if dst < src, ports swapped if dst < src,
     each compared as the raw big-endian value read as a host (little-endian) integer;
  3. SipHash-2-4 over the struct from `basic` on, flow_keys_hash_length() bytes (48 for IPv4:
     the 8-byte-aligned struct's tail padding included), keyed by (seed << 32 | seed) twice;
     the low 32 bits, 0 mapped to 1, shifted right by one;
  4. hash-threshold: the first next hop whose upper bound, round(w_cum * 2^31 / w_total) - 1,
     is at least the hash.
Verified against this kernel by tests/system/test_fabric_clos.py (every source port's spine).
emulator/native/ecmphash.c computes the same hash when it is built (the balanced source-port
policy asks for up to 256 ports per queue pair); this Python is its fallback and its reference.
The kernel skips all this when the skb already carries an L4 hash: a CONNECTED UDP socket stamps
its random sk_txhash on every packet, so flows from connected sockets take unpredictable (but
still spread) paths. Send with unconnected sockets (sendto/sendmsg) for predictable paths.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

from emulator.native import load

_M64 = (1 << 64) - 1
_NATIVE: Any = load("ecmphash")[0]


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _M64


def siphash24(k0: int, k1: int, data: bytes) -> int:
    """SipHash-2-4 with 64-bit output (Aumasson and Bernstein, 2012); key as two u64 words."""
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & _M64
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _M64
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _M64
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _M64
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)

    end = len(data) - len(data) % 8
    for (m,) in struct.iter_unpack("<Q", data[:end]):
        v3 ^= m
        rounds(2)
        v0 ^= m
    last = ((len(data) & 0xFF) << 56) | int.from_bytes(data[end:], "little")
    v3 ^= last
    rounds(2)
    v0 ^= last
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


def l4_multipath_hash(
    src: ipaddress.IPv4Address,
    dst: ipaddress.IPv4Address,
    proto: int,
    sport: int,
    dport: int,
    seed: int,
) -> int:
    """The 31-bit hash fib_multipath_hash() gives a forwarded packet under policy 1."""
    if _NATIVE is not None:
        return int(_NATIVE.lib.l4_multipath_hash(int(src), int(dst), proto, sport, dport, seed))
    return l4_multipath_hash_py(src, dst, proto, sport, dport, seed)


def l4_multipath_hash_py(
    src: ipaddress.IPv4Address,
    dst: ipaddress.IPv4Address,
    proto: int,
    sport: int,
    dport: int,
    seed: int,
) -> int:
    """l4_multipath_hash in Python (the native module's fallback and reference)."""
    s, d = src.packed, dst.packed
    sp, dp = struct.pack("!H", sport), struct.pack("!H", dport)
    if int.from_bytes(d, "little") < int.from_bytes(s, "little"):
        s, d = d, s
    if int.from_bytes(dp, "little") < int.from_bytes(sp, "little"):
        sp, dp = dp, sp
    # basic (n_proto 0, ip_proto, pad), tags, vlan, cvlan, keyid, ports, icmp, v4 addrs, tail pad
    keys = struct.pack("<HBx4x8x8x4x", 0, proto) + sp + dp + bytes(4) + s + d + bytes(4)
    key = ((seed & 0xFFFFFFFF) << 32) | (seed & 0xFFFFFFFF)
    h = siphash24(key, key, keys) & 0xFFFFFFFF
    return (h or 1) >> 1


def hash_threshold_index(mhash: int, count: int) -> int:
    """Which of `count` equal-weight next hops fib_select_multipath picks for `mhash`."""
    for i in range(1, count + 1):
        upper_bound = ((i << 31) + count // 2) // count - 1  # DIV_ROUND_CLOSEST_ULL
        if mhash <= upper_bound:
            return i - 1
    return count - 1
