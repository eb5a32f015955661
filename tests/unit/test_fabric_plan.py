"""Commands as data: egress queues scaled by the TDF, marker parameters, allowlist, state file."""

from __future__ import annotations

import dataclasses
import os
import stat
import struct
from pathlib import Path

import pytest

from fabrics.dut import DestinationRefused, check_destination
from fabrics.ecn.ebpf import PARAMS, STATE, MarkerParams, MarkerState
from fabrics.ecn.markers import NoMarker, RedMarker
from fabrics.iproute import Cmd, _batch_line, ip, tc
from fabrics.ownership import FabricActive, Ledger, describe
from fabrics.queues import EgressPort, egress_ports, htb_commands, netem_delay
from fabrics.spec import ClosSpec, DutSpec, EcnSpec, TierSpec
from fabrics.topology import build_clos


def test_egress_ports_scale_rates_and_mark_only_on_switches() -> None:
    spec = ClosSpec(
        hosts_per_leaf=2,
        leaves=2,
        spines=1,
        host_link_gbps=100,
        fabric_link_gbps=400,
        spine=TierSpec(ecn=EcnSpec(enabled=False)),
        link_delay_us=2.0,
    )
    topo = build_clos(spec)
    ports = {
        (p.node, p.dev): p
        for p in egress_ports(topo, {n.name: f"x-{n.name}" for n in topo.nodes}, 0.01, 100)
    }
    assert len(ports) == 2 * len(topo.cables)
    host = ports[("h0", "eth0")]
    assert (host.rate_bps, host.ecn, host.buffer_bytes, host.netns) == (
        1e9,
        None,
        spec.host_buffer_bytes,
        "x-h0",
    )
    leaf_down = ports[("l0", "l0-h0")]
    assert leaf_down.rate_bps == 1e9 and leaf_down.ecn is not None
    assert (leaf_down.ecn.kmin_bytes, leaf_down.ecn.kmax_bytes) == (400_000, 1_600_000)  # 100G row
    leaf_up = ports[("l0", "l0-s0")]
    assert (
        leaf_up.rate_bps == 4e9 and leaf_up.ecn is not None and leaf_up.ecn.kmax_bytes == 3_200_000
    )
    assert ports[("s0", "s0-l0")].ecn is None  # marking disabled on the spine tier
    assert leaf_up.delay_s == pytest.approx(200e-6)  # 2 us x TDF 100


def test_htb_commands_are_argv_data() -> None:
    port = EgressPort("l0", "ns", "l0-s0", 4e9, 1_000_000, 9000, 0.0, None)
    cmds = [" ".join(c.argv()) for c in htb_commands(port, ("bfifo", "limit", "1000000"))]
    shape = "burst 50000b cburst 50000b"
    tail = "quantum 9014 overhead 24"
    assert cmds == [
        "tc -n ns qdisc add dev l0-s0 root handle 1: htb default 20",
        f"tc -n ns class add dev l0-s0 parent 1: classid 1:1 htb rate 4000000000bit "
        f"ceil 4000000000bit {shape} {tail}",
        # strict priority: the whole rate as its own, prio 0
        f"tc -n ns class add dev l0-s0 parent 1:1 classid 1:10 htb rate 4000000000bit "
        f"ceil 4000000000bit {shape} prio 0 {tail}",
        # data: 1% its own, the rest borrowed from the link class (what priority leaves)
        f"tc -n ns class add dev l0-s0 parent 1:1 classid 1:20 htb rate 40000000bit "
        f"ceil 4000000000bit {shape} prio 1 {tail}",
        "tc -n ns qdisc add dev l0-s0 parent 1:20 handle 10: bfifo limit 1000000",
        "tc -n ns qdisc add dev l0-s0 parent 1:10 handle 11: bfifo limit 1000000",
        # DSCP 48 is ToS 0xc0 under the mask of the DSCP bits (RFC 2474)
        "tc -n ns filter add dev l0-s0 parent 1: protocol ip prio 1 u32 match ip dsfield "
        "0xc0 0xfc flowid 1:10",
    ]
    # HTB's `default` is a hex minor, as classids are: 20 names 1:20
    assert cmds[0].endswith("default 20")
    none = dataclasses.replace(port, priority_dscps=())
    assert not any("filter" in " ".join(c.argv()) for c in htb_commands(none, ("bfifo",)))
    delayed = EgressPort("l0", "ns", "d", 1e9, 90140, 9000, 250e-6, None)
    assert netem_delay(delayed) == ("netem", "delay", "250us", "limit", "10")
    assert NoMarker().leaf_qdisc(port) == ("bfifo", "limit", "1000000")


def test_red_marker_parameters() -> None:
    from fabrics.queues import EcnThresholds

    port = EgressPort(
        "s0", "ns", "s0-l0", 1e9, 800_000, 1500, 0.0, EcnThresholds(100_000, 400_000, 0.2)
    )
    args = RedMarker().leaf_qdisc(port)
    # ecn, and nodrop: our non-ECT ACKs, NAKs and CNPs must not be dropped where ECT is marked
    assert args[0] == "red" and args[-2:] == ("ecn", "nodrop")
    kv = dict(zip(args[1:-2:2], args[2:-2:2], strict=True))
    assert kv == {
        "limit": "800000",
        "min": "100000",
        "max": "400000",
        "avpkt": "1000",
        "burst": "101",
        "probability": "0.2",
        "bandwidth": "1000000000bit",
    }


def test_marker_map_layouts_match_the_c_structs() -> None:
    # 4 x u64 + 4 x u32 + 2 x u64; lock+pad + 12 x u64 + last class+pad + 64 x 7 x u64
    assert PARAMS.size == 64 and STATE.size == 104 + 8 + 64 * 56
    no_classes = bytes(8) + bytes(64 * 56)  # last_class, pad and the per-class counters
    raw = MarkerParams(8e9, 100, 400, 0.5, 1000, xoff_bytes=700, overhead_bytes=24).pack()
    drain, kmin, kmax, buf, pmax, enabled, loss, mark_ect, xoff, overhead = PARAMS.unpack(raw)
    assert drain == 1 << 24  # 8 Gb/s is 1 byte per ns
    assert (kmin, kmax, buf, enabled, loss, mark_ect, xoff) == (100, 400, 1000, 1, 0, 1, 700)
    assert overhead == 24
    assert pmax == round(0.5 * 0xFFFFFFFF)
    lossy = PARAMS.unpack(
        MarkerParams(8e9, 0, 0, 0.0, 1000, loss_probability=0.25, mark_ect=False).pack()
    )
    assert lossy[6:] == (1 << 30, 0, 0, 0)  # a quarter of 2^32; no marking; no XOFF or overhead
    s = MarkerState.unpack(
        struct.pack("=II12Q", 0, 0, 1_000, 5_000, 9_000, 1, 2, 3, 4, 5, 6, 700, 2, 1) + no_classes
    )
    assert (s.queue_bytes, s.peak_queue_bytes, s.marks, s.overflows) == (5_000, 9_000, 4, 5)
    assert (s.loss_drops, s.pause_ns, s.pause_events, s.above_xoff) == (6, 700, 2, 1)
    assert s.queue_bytes_at(1_000 + 2_000, 8e9) == 3_000  # 2 us at 1 byte/ns drains 2000 bytes
    assert s.queue_bytes_at(10**9, 8e9) == 0
    # above XOFF 4000 since the last packet: 1000 bytes above it drain in 1 us at 1 byte/ns
    assert s.pause_ns_at(1_000 + 600, 8e9, 4_000) == 700 + 600
    assert s.pause_ns_at(10**9, 8e9, 4_000) == 700 + 1_000
    below = MarkerState.unpack(
        struct.pack("=II12Q", 0, 0, 1_000, 3_000, 9_000, *[0] * 6, 700, 2, 0) + no_classes
    )
    assert below.pause_ns_at(10**9, 8e9, 4_000) == 700


def test_batch_lines_refuse_arguments_a_batch_would_split() -> None:
    assert _batch_line(ip("link", "set", "x", "up")) == "link set x up"
    with pytest.raises(ValueError, match="cannot go through -batch"):
        _batch_line(ip("link", "set", "x y", "up"))
    assert Cmd("ethtool", ("-K", "eth0", "gro", "off"), "ns").argv()[:4] == [
        "ip",
        "netns",
        "exec",
        "ns",
    ]
    assert tc("qdisc", "show").argv() == ["tc", "qdisc", "show"]


def test_allowlist_checks_destination_and_interface() -> None:
    spec = DutSpec(
        interfaces=("eth1", "eth2"),
        addresses=("10.1.0.2/24", "10.2.0.2/24"),
        allowlist=("10.1.0.0/24", "10.2.0.0/24"),
    )
    check_destination(spec, 0, "10.2.0.2", "eth1")
    with pytest.raises(DestinationRefused, match=r"8\.8\.8\.8.*outside fabric\.allowlist"):
        check_destination(spec, 0, "8.8.8.8")
    with pytest.raises(DestinationRefused, match="eth2 is not rank 0"):
        check_destination(spec, 0, "10.2.0.2", "eth2")
    with pytest.raises(DestinationRefused, match="rank 5"):
        check_destination(spec, 5, "10.2.0.2")


def test_ledger_claims_once_records_before_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    ledger = Ledger.claim("clos", path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(FabricActive, match=f"active \\(pid {os.getpid()}"):
        Ledger.claim("clos", path)
    ledger.record([{"kind": "netns", "name": "never-created-ns"}])
    assert "never-created-ns" in path.read_text()
    assert describe(ledger.resources[0]) == "namespace never-created-ns"
    assert ledger.release() == []  # it never existed: nothing removed, nothing left
    assert not path.exists()


def test_fabric_registry_picks_the_backend_by_spec_kind() -> None:
    from emulator.errors import ScenarioError
    from fabrics.registry import FABRICS, bring_up_fabric, kind_of

    assert set(FABRICS) == {"clos", "dut"}
    assert kind_of(ClosSpec()) == "clos"
    spec = DutSpec(interfaces=("eth1",), addresses=("10.1.0.2/24",), allowlist=("10.1.0.0/24",))
    assert kind_of(spec) == "dut"
    with pytest.raises(ScenarioError, match="time_dilation: 4 cannot apply to a dut"):
        bring_up_fabric(spec, time_dilation=4)
    with pytest.raises(ScenarioError, match="must be at least 1"):
        bring_up_fabric(ClosSpec(), time_dilation=0.5)
    with pytest.raises(ScenarioError, match="not a known fabric kind"):
        kind_of(object())


def test_owner_alive_tells_a_reused_pid_from_the_owner() -> None:
    from fabrics.ownership import owner_alive, process_start_ticks

    me = {"pid": os.getpid(), "pid_start_ticks": process_start_ticks(os.getpid())}
    assert owner_alive(me)
    assert not owner_alive({**me, "pid_start_ticks": (me["pid_start_ticks"] or 0) + 1})
    assert not owner_alive({"pid": 0})
