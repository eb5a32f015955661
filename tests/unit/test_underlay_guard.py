"""The underlay guard's nftables table (fabrics/underlay_guard.py), as data: what it admits and
what the ledger records. Its effect on real frames is tests/system/test_fabric_part.py's."""

from __future__ import annotations

import json

from fabrics.ownership import describe
from fabrics.underlay_guard import (
    VNI_AT_BITS,
    dropped_packets,
    release_cmd,
    underlay_guards,
)
from fabrics.vxlan import TunnelEnd


def _ends() -> list[TunnelEnd]:
    return [
        TunnelEnd(0x100003, "10.0.0.1", "10.0.0.2", "ul0", "nsA"),
        TunnelEnd(0x100001, "10.0.0.1", "10.0.0.3", "ul0", "nsA"),
        TunnelEnd(0x100002, "10.0.1.1", "10.0.1.2", "eth1", None),
    ]


def test_one_table_per_underlay_namespace_named_by_process_and_lowest_vni() -> None:
    guards = underlay_guards(_ends(), pid=0xABC)
    assert sorted((str(g.netns), g.table) for g in guards) == [
        ("None", "chakra_vxlan_abc_100002"),
        ("nsA", "chakra_vxlan_abc_100001"),
    ]
    guard = next(g for g in guards if g.netns == "nsA")
    assert guard.tunnels == ((4789, 0x100001, "10.0.0.3"), (4789, 0x100003, "10.0.0.2"))


def test_the_table_drops_our_vnis_unless_from_each_tunnels_remote() -> None:
    guard = next(g for g in underlay_guards(_ends(), pid=1) if g.netns == "nsA")
    cmd = guard.create()
    assert cmd.argv()[:5] == ["ip", "netns", "exec", "nsA", "nft"]
    (script,) = cmd.args
    # the VNI: after the UDP header (8 bytes) and the VXLAN flags and reserved bytes (4)
    assert VNI_AT_BITS == 96 and "@th,96,24" in script
    assert script.startswith(f"create table ip {guard.table}; ")  # refuses an existing table
    assert "elements = { 4789 . 0x100001, 4789 . 0x100003 }" in script
    assert "elements = { 4789 . 0x100001 . 10.0.0.3, 4789 . 0x100003 . 10.0.0.2 }" in script
    assert "hook input priority raw; policy accept;" in script
    assert "ip saddr != @peers counter drop" in script


def test_the_ledger_record_names_what_release_deletes() -> None:
    guard = next(g for g in underlay_guards(_ends(), pid=1) if g.netns is None)
    record = guard.record()
    assert record == {"kind": "nft_table", "netns": None, "family": "ip", "name": guard.table}
    assert release_cmd(record).argv() == ["nft", f"delete table ip {guard.table}"]
    assert describe(record) == f"nftables table ip {guard.table} in the root namespace"


def test_dropped_frames_are_the_drop_rules_counter() -> None:
    listed = {
        "nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"chain": {"name": "underlay_in"}},
            {"rule": {"expr": [{"match": {}}, {"counter": {"packets": 5, "bytes": 600}}]}},
        ]
    }
    assert dropped_packets(json.dumps(listed)) == 5
    assert dropped_packets("") == 0
