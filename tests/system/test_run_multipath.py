"""Multipath on the emulated fabric, end to end through the engine: per-packet entropy over the
kernel's ECMP (the tester supplies entropy, the switches hash it), and spraying switches with
go-back-N against selective repeat. Real packets through namespaces this test creates.

One 8-rank ring All-Reduce over 2 leaves, 2 spines and 2 parallel links (4 uplinks per leaf):
the ring crosses each leaf once each way, one queue pair on one ECMP path (per_qp), on every
uplink per packet (per_packet entropy), on every uplink sprayed by the leaves. Go-back-N under
spraying answers reordering with NAKs and resends; selective repeat holds the early packets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.tables import column, read_tables
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario

pytestmark = pytest.mark.system

TDF = 2000
SIZE = 8 << 20
SCENARIO = """\
name: multipath
workload: {{generate: {{kind: allreduce, ranks: 8, size_bytes: {size}}}}}
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 2
  parallel_links: 2
  host_link_gbps: 100
  fabric_link_gbps: 100
  leaf: {{load_balancing: {{mode: {mode}}}}}
transport: {{reliability: {reliability}, entropy: {entropy}, entropy_values: 16}}
run: {{time_dilation: {tdf}}}
"""
UPLINKS = ("l0-s0-0", "l0-s0-1", "l0-s1-0", "l0-s1-1")


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path) -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces)")
    saved = os.environ.get("CHAKRA_EMULATOR_STATE_DIR")
    os.environ["CHAKRA_EMULATOR_STATE_DIR"] = str(tmp_path / "state")
    yield
    if saved is None:
        os.environ.pop("CHAKRA_EMULATOR_STATE_DIR", None)
    else:
        os.environ["CHAKRA_EMULATOR_STATE_DIR"] = saved


def run(tmp: Path, mode: str, reliability: str, entropy: str) -> tuple[dict, dict, list[int]]:
    """summary, queue_pair totals, and the bytes each uplink of leaf l0 sent."""
    name = f"{mode}-{reliability}-{entropy}"
    path = tmp / f"{name}.yaml"
    path.write_text(
        SCENARIO.format(size=SIZE, mode=mode, reliability=reliability, entropy=entropy, tdf=TDF)
    )
    out = tmp / name
    result = run_scenario(
        load_scenario(path),
        RunOptions(out_dir=out, progress=False, fabric_prefix=f"mp{os.getpid() % 100000}-"),
    )
    ports = read_tables(out).ports
    sent: dict[str, int] = {}
    for port, switch, tx in zip(
        column(ports, "port"), column(ports, "switch"), column(ports, "tx_bytes"), strict=True
    ):
        if switch == "l0":
            sent[port] = tx  # the last sample of each port: its total
    return result.summary, result.summary["queue_pair_totals"], [sent[u] for u in UPLINKS]


def test_per_packet_entropy_spreads_one_queue_pair_over_every_uplink(tmp_path: Path) -> None:
    _, one_path, per_qp = run(tmp_path, "ecmp", "go_back_n", "per_qp")
    summary, spread, per_packet = run(tmp_path, "ecmp", "selective", "per_packet")
    # one ring queue pair leaves l0 for l1: on one uplink with its own port (the others carry
    # only the ACKs of the queue pair coming the other way), on all four when each packet
    # carries one of 16 ports (the kernel's hash of each)
    assert max(per_qp) > 0.99 * sum(per_qp) and max(per_qp) > SIZE // 8, per_qp
    assert min(per_packet) > 0.05 * sum(per_packet), per_packet
    for totals in (one_path, spread):
        assert totals["data_packets_received"] == totals["data_packets_sent"]
        assert totals["data_bytes_received"] == totals["data_bytes_acked"]
    assert spread["packets_retransmitted"] == 0
    assert summary["collectives"]["ALL_REDUCE"]["instances_complete"] == 1


def test_spraying_switches_collapse_go_back_n_and_not_selective_repeat(tmp_path: Path) -> None:
    _, gbn, sprayed = run(tmp_path, "spray", "go_back_n", "per_qp")
    summary, sel, _ = run(tmp_path, "spray", "selective", "per_qp")
    assert min(sprayed) > 0, sprayed  # the leaf sprayed the ring's queue pair
    assert gbn["naks_sent"] > 0 and gbn["packets_retransmitted"] > 0
    assert sel["naks_sent"] == 0 and sel["held_out_of_order"] > 0
    assert sel["packets_retransmitted"] < gbn["packets_retransmitted"] / 10, (sel, gbn)
    assert sel["data_bytes_received"] == sel["data_bytes_acked"]
    assert summary["collectives"]["ALL_REDUCE"]["instances_complete"] == 1
