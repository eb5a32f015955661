"""The `fabric:` section: defaults from the HPCC thresholds, cross-field checks, DUT allowlist."""

from __future__ import annotations

import dataclasses

import pytest

from emulator.config import param_info
from fabrics.spec import (
    FABRIC_SPECS,
    ClosSpec,
    DutSpec,
    EcnSpec,
    MininetSpec,
    TierSpec,
    hpcc_thresholds_bytes,
)


def test_registry_and_every_field_has_a_param_with_a_default() -> None:
    assert {"clos": ClosSpec, "dut": DutSpec, "mininet": MininetSpec} == FABRIC_SPECS
    for cls in (ClosSpec, EcnSpec, TierSpec, MininetSpec):
        instance = cls(hosts=("h1",)) if cls is MininetSpec else cls()
        for f in dataclasses.fields(cls):
            assert hasattr(instance, f.name)
            if not dataclasses.is_dataclass(f.type) and f.name not in (
                "leaf",
                "spine",
                "super_spine",
                "ecn",
                "switch",
            ):
                assert param_info(f) is not None, f"{cls.__name__}.{f.name}"


@pytest.mark.parametrize(
    ("gbps", "kmin", "kmax"),
    [
        (25, 100_000, 400_000),
        (100, 400_000, 1_600_000),
        (400, 800_000, 3_200_000),
        (10, 100_000, 400_000),
    ],
)
def test_ecn_defaults_follow_hpcc_thresholds_for_the_link_speed(
    gbps: float, kmin: int, kmax: int
) -> None:
    assert hpcc_thresholds_bytes(gbps) == (kmin, kmax)
    assert EcnSpec().thresholds_bytes(gbps) == (kmin, kmax)
    assert EcnSpec().pmax == 0.2
    # the buffer comes before the marking ramp's end and the PFC threshold after it
    tier = TierSpec()
    assert kmax < tier.xoff_bytes < tier.buffer_for(gbps)


def test_buffer_and_xoff_follow_their_sources() -> None:
    """Dynamic thresholds (Choudhury and Hahne 1998): a lone congested queue q settles where
    q = alpha (B - q); alpha 1 gives half of Tomahawk 3's 64 MB. HPCC ns-3 switch-mmu.cc pauses
    when the queue's shared use reaches (B - shared used) >> 3: T = (B - T) / 8."""
    tier = TierSpec()
    shared = tier.shared_buffer_bytes
    assert shared == 64 * 1024 * 1024
    q = tier.buffer_for(400)
    assert abs(q - 1.0 * (shared - q)) <= 1
    t = tier.xoff_bytes
    assert abs(t - ((shared - t) >> 3)) <= 1
    assert TierSpec(buffer_bytes=5000, pfc_xoff_bytes=3000).buffer_for(400) == 5000
    assert TierSpec(pfc_xoff_bytes=3000).xoff_bytes == 3000
    smaller = TierSpec(shared_buffer_bytes=12 * 1024 * 1024)  # HPCC's own default buffer
    assert smaller.buffer_for(100) == 6 * 1024 * 1024


def test_ecn_overrides_and_crossing_thresholds() -> None:
    assert EcnSpec(kmin_bytes=10, kmax_bytes=20).thresholds_bytes(400) == (10, 20)
    with pytest.raises(ValueError, match="kmin_bytes"):
        EcnSpec(kmin_bytes=20, kmax_bytes=20)
    with pytest.raises(ValueError, match="kmin_bytes"):
        EcnSpec(kmin_bytes=5_000_000).thresholds_bytes(400)  # above the default Kmax


def test_clos_cross_field_checks() -> None:
    assert (
        ClosSpec(
            hosts_per_leaf=8, spines=2, host_link_gbps=100, fabric_link_gbps=400
        ).derived_oversubscription
        == 1.0
    )
    ClosSpec(
        hosts_per_leaf=8, spines=2, host_link_gbps=100, fabric_link_gbps=100, oversubscription=4
    )
    with pytest.raises(ValueError, match="oversubscription: 2 does not match"):
        ClosSpec(
            hosts_per_leaf=8, spines=2, host_link_gbps=100, fabric_link_gbps=100, oversubscription=2
        )
    with pytest.raises(ValueError, match="super_spines"):
        ClosSpec(pods=2)
    with pytest.raises(ValueError, match="super_spines"):
        ClosSpec(super_spines=2)
    assert ClosSpec(hosts_per_leaf=2, leaves=3, pods=2, super_spines=1).host_count == 12


def dut(**kw: object) -> DutSpec:
    base: dict[str, object] = {
        "interfaces": ("eth1", "eth2"),
        "addresses": ("10.1.0.2/24", "10.2.0.2/24"),
        "allowlist": ("10.0.0.0/8",),
    }
    base.update(kw)
    return DutSpec(**base)  # type: ignore[arg-type]


def test_dut_needs_an_allowlist_and_consistent_ranks() -> None:
    assert dut().max_rate_gbps == 10.0
    with pytest.raises(ValueError, match="allowlist: a dut fabric needs"):
        dut(allowlist=())
    with pytest.raises(ValueError, match="addresses: 1 given for 2"):
        dut(addresses=("10.1.0.2/24",))
    with pytest.raises(ValueError, match="gateways"):
        dut(gateways=("10.1.0.1",))
    with pytest.raises(ValueError, match="allowlist: 'ten' is not valid"):
        dut(allowlist=("ten",))
    with pytest.raises(ValueError, match="interfaces: 'a very long name!'"):
        dut(interfaces=("a very long name!", "eth2"))
