"""Linux's multipath hash in C (emulator/native/ecmphash.c) against fabrics/ecmp.py's Python, its
reference (itself held to this kernel's choices by tests/system/test_fabric_clos.py): the same
31-bit hash for any addresses, protocol, ports and seed, both directions of a flow alike.

Without the extension the comparison skips with the reason, except `test_extension_is_built`,
which fails wherever a C compiler is present (CI runs ./setup.sh, which builds it).
"""

from __future__ import annotations

import ipaddress
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.native import HERE, built_path, load, stale
from fabrics import ecmp

MODULE, WHY_NOT = load("ecmphash")
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native ecmphash absent: {WHY_NOT}")


def test_extension_is_built() -> None:
    if not (HERE / "ecmphash.c").exists() or shutil.which("gcc") is None:
        pytest.skip("no native sources or no gcc here: the Python hash is the only one")
    assert not stale("ecmphash"), f"{built_path('ecmphash')} is missing or stale: {WHY_NOT}"
    assert MODULE is not None and ecmp._NATIVE is not None, WHY_NOT


addresses = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
ports = st.integers(0, 65535)


@needs_native
@settings(max_examples=2000, deadline=None)
@given(
    addresses, addresses, st.sampled_from([0, 6, 17, 255]), ports, ports, st.integers(0, 2**32 - 1)
)
def test_the_c_hash_is_the_python_one(
    src: ipaddress.IPv4Address,
    dst: ipaddress.IPv4Address,
    proto: int,
    sport: int,
    dport: int,
    seed: int,
) -> None:
    ours = ecmp.l4_multipath_hash(src, dst, proto, sport, dport, seed)
    assert ours == ecmp.l4_multipath_hash_py(src, dst, proto, sport, dport, seed)
    assert 0 <= ours < 2**31
    # the keys are made consistent first: the reverse direction hashes alike
    assert ours == ecmp.l4_multipath_hash(dst, src, proto, dport, sport, seed)
