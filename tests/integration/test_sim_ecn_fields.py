"""The ECN field of each kind of packet in the simulator, read from its capture: data leave with
transport.data_ecn, ACKs and NAKs with ack_ecn, CNPs with cnp_ecn; a congested port marks ECT(0)
and ECT(1) alike and leaves not-ECT packets unmarked (RFC 3168 section 5 and 6.1.1: either ECT
codepoint means ECN-capable; the eBPF marker does the same, fabrics/ecn/phantom_marker.c)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario

INCAST = {
    "name": "ecn_fields",
    "fabric": {
        "kind": "clos",
        "hosts_per_leaf": 2,
        "leaves": 2,
        "spines": 2,
        "host_link_gbps": 100,
        "fabric_link_gbps": 100,
    },
    "run": {"backend": "sim"},
    "metrics": {
        "prometheus": {"enabled": False},
        "capture": {"ranks": [0, 1], "packets": 100000, "snap_bytes": 64},
    },
    # three senders into rank 0 at line rate: its port queues past Kmin
    "traffic": [
        {
            "name": "incast",
            "kind": "incast",
            "senders": [1, 2, 3],
            "receiver": 0,
            "message_bytes": 1 << 20,
            "bytes_per_pair": 4 << 20,
        }
    ],
}


def run(tmp_path: Path, **transport: str) -> tuple[dict[str, int], list[tuple[int, int, int]]]:
    """(the run's totals, (opcode, ECN field, at rank) of every captured packet)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.utils import rdpcap

    doc = {**INCAST, "transport": transport}
    path = tmp_path / f"{'-'.join(transport.values())}.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run_scenario(
        load_scenario(path), RunOptions(out_dir=tmp_path / path.stem, progress=False, report=False)
    )
    packets = []
    for rank in (0, 1):
        for p in rdpcap(str(result.out_dir / "capture" / f"rank-{rank}.pcap")):
            packets.append((p[BTH].opcode, p[IP].tos & 3, rank))
    return result.summary["queue_pair_totals"], packets


def test_each_kind_of_packet_leaves_with_its_ecn_field(tmp_path: Path) -> None:
    totals, packets = run(tmp_path, data_ecn="ect1", ack_ecn="ect0", cnp_ecn="ect1")
    sent_data = {ecn for op, ecn, rank in packets if rank == 1 and op < 0x10}
    acks = {ecn for op, ecn, rank in packets if rank == 0 and op == 0x11}
    cnps = {ecn for op, ecn, rank in packets if rank == 0 and op == 0x81}
    assert sent_data == {0b01}  # ECT(1) as it leaves the sender
    assert acks == {0b10} and cnps == {0b01}
    # ECT(1) data are marked at the congested port like ECT(0): CE arrives, CNPs go back
    arrived = {ecn for op, ecn, rank in packets if rank == 0 and op < 0x10}
    assert 0b11 in arrived and totals["ce_received"] > 0 and totals["cnps_sent"] > 0


def test_not_ect_data_are_never_marked(tmp_path: Path) -> None:
    totals, packets = run(tmp_path, data_ecn="not_ect")
    assert {ecn for op, ecn, _ in packets if op < 0x10} == {0}
    assert totals["ce_received"] == 0 and totals["cnps_sent"] == 0


@pytest.mark.parametrize("field", ["ack_ecn", "cnp_ecn"])
def test_a_bad_ecn_value_is_one_line(tmp_path: Path, field: str) -> None:
    from emulator.errors import InputError

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**INCAST, "transport": {field: "ect2"}}))
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert f"transport.{field}" in str(info.value) and "\n" not in str(info.value)
