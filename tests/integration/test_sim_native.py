"""The simulated fabric in C (emulator/native/simfab.c, sim.native_fabric) against the Python
fabric it replaces (emulator/sim/port.py, fabric.py, engine.py): the same scenario run both ways
writes the same results, bit for bit (every table, the summary but for the wall clock, the
packet capture), across what the fabric models: PFC with the dynamic and a static threshold, ECN
marking on departure and on arrival, switch latency and link delay, tail drops and go-back-N
without PFC, random loss, a cable going down and up with reroutes, per-packet entropy, streams
and real encoded bytes, and the hosts' senders in C at a small window with frequent AckReq and
early marking, and under selective repeat with loss. And it says which code ran, falls back when it cannot run a fabric, and
refuses `on` in one line then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.errors import ScenarioError
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.sim import native

MODULE, WHY_NOT = native.load_module()
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native simfab absent: {WHY_NOT}")

BASE: dict[str, Any] = {
    "name": "native_vs_python",
    "workload": {
        "generate": {
            "kind": "moe_mix",
            "ranks": 8,
            "expert_parallel_size": 4,
            "dispatch_bytes": 262144,
            "allreduce_bytes": 2097152,
            "iterations": 2,
        }
    },
    "fabric": {
        "kind": "clos",
        "hosts_per_leaf": 4,
        "leaves": 2,
        "spines": 2,
        "host_link_gbps": 100,
        "fabric_link_gbps": 100,
    },
    "run": {"backend": "sim", "seed": 5},
    "sim": {"sample_interval_us": 50},
    "metrics": {"prometheus": {"enabled": False}},
}

# each case: what it adds to BASE (merged one level deep)
CASES: dict[str, dict[str, Any]] = {
    # PFC with HPCC's dynamic threshold, marks on departure, attribution on every switch port
    "base": {},
    "arrival_latency_delay": {
        "fabric": {"ecn_mark_point": "arrival", "switch_latency_ns": 300, "link_delay_us": 1.0}
    },
    # a static XOFF low enough to pause
    "static_xoff": {
        "fabric": {"leaf": {"pfc_xoff_bytes": 20000}, "spine": {"pfc_xoff_bytes": 20000}}
    },
    # no PFC and small buffers: tail drops, go-back-N; random loss on the spines' ports
    "lossy": {
        "fabric": {
            "pfc": False,
            "leaf": {"buffer_bytes": 60000},
            "spine": {"buffer_bytes": 60000, "loss_probability": 0.002},
        }
    },
    "link_events": {
        "fabric": {
            "link_events": [
                {"port": "l0-s1", "down_at_us": 40, "up_at_us": 400, "reroute_after_us": 20}
            ]
        }
    },
    "per_packet_entropy": {"transport": {"entropy": "per_packet"}},
    # the hosts' senders in C (emulator/sim/native_sqp.py) where grants end most often: a small
    # window, frequent AckReq, small packets, two queue pairs per peer, DCQCN marking early
    "window_acks_dcqcn": {
        "transport": {
            "window_packets": 5,
            "ack_every_packets": 3,
            "path_mtu_bytes": 1024,
            "congestion_control": "dcqcn",
        },
        "collectives": {"qps_per_peer": 2},
        "fabric": {"leaf": {"ecn": {"kmin_bytes": 2000, "kmax_bytes": 30000, "pmax": 0.5}}},
    },
    # selective repeat under random loss, no PFC: resends and SACKs between grants
    "selective_loss": {
        "transport": {"reliability": "selective", "window_packets": 64},
        "fabric": {"pfc": False, "spine": {"loss_probability": 0.003}},
    },
    # an incast of queue pairs each with many messages queued, bound by a small window: the ACK
    # that completes a flow lets its NIC send the next one's granted packets at once, before the
    # replay reads the flow's packet count (it settles the queue pair first)
    "incast_queued_messages": {
        "workload": None,
        # window-bound: the ACK that completes a flow unblocks its queue pair at once
        "transport": {"window_packets": 4, "ack_every_packets": 2},
        "traffic": [
            {
                "name": "incast",
                "kind": "incast",
                "senders": [1, 2, 5, 6],
                "receiver": 0,
                "qps": 1,
                "message_bytes": 65536,
                "bytes_per_pair": 1_048_576,
                "congestion_control": "dcqcn",
            }
        ],
    },
    # real encoded bytes (a capture) and a tester's stream beside the job
    "capture_streams": {
        "metrics": {
            "prometheus": {"enabled": False},
            "capture": {"ranks": [0, 5], "packets": 100000, "snap_bytes": 96},
        },
        "streams": [
            {
                "name": "s",
                "src": 1,
                "dst": 5,
                "ecn": 2,
                "dscp": 3,
                "rate_percent": 20,
                "packets": 2000,
            }
        ],
    },
}

# what reads the wall clock or says which code ran
WALL = (
    "wall_s",
    "replay_wall_s",
    "cpu_s",
    "packet_hops_per_wall_s",
    "max_rss_kb",
    "gc_pauses",
    "fabric_code",
    "data_packets_taken_in_c",
    "data_packets_sent_in_c",
    "dcqcn_timers_in_c",
)


def scenario(tmp_path: Path, case: str, code: str) -> Path:
    doc = json.loads(json.dumps(BASE))
    for key, value in CASES[case].items():
        if value is None:
            del doc[key]
        elif isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    doc["sim"] = {**doc["sim"], "native_fabric": code}
    path = tmp_path / f"{case}-{code}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(tmp_path: Path, case: str, code: str) -> tuple[dict[str, Any], Path]:
    path = scenario(tmp_path, case, code)
    out = tmp_path / f"{case}-{code}"
    run_scenario(load_scenario(path), RunOptions(out_dir=out, progress=False, report=False))
    return json.loads((out / "summary.json").read_text()), out


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what reads the wall clock (or says which code ran)."""
    summary = {k: v for k, v in summary.items() if k not in ("wall_time", "scenario_file")}
    summary["engine"] = {k: v for k, v in summary["engine"].items() if k not in WALL}
    return summary


@needs_native
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_c_fabric_gives_the_python_fabrics_results_bit_for_bit(
    tmp_path: Path, case: str
) -> None:
    ours, ours_dir = run(tmp_path, case, "on")
    theirs, theirs_dir = run(tmp_path, case, "off")
    assert ours["engine"]["fabric_code"] == "native"
    assert theirs["engine"]["fabric_code"].startswith("python")
    # the receive queue pairs' common path ran in C (never with encoded bytes: the host decodes)
    taken = ours["engine"]["data_packets_taken_in_c"]
    assert taken == 0 if case == "capture_streams" else taken > 0
    assert theirs["engine"]["data_packets_taken_in_c"] == 0
    # and the senders' granted packets (not with encoded bytes, nor per-packet entropy)
    sent = ours["engine"]["data_packets_sent_in_c"]
    assert sent == 0 if case in ("capture_streams", "per_packet_entropy") else sent > 0
    assert theirs["engine"]["data_packets_sent_in_c"] == 0
    # and the DCQCN timers of granted queue pairs, where DCQCN cut a rate
    cuts = ours["engine"]["counters"].get("cnps_received", 0)
    timers = ours["engine"]["dcqcn_timers_in_c"]
    assert timers > 0 if cuts and sent else timers == 0, (cuts, timers)
    assert theirs["engine"]["dcqcn_timers_in_c"] == 0
    assert ours["flows"]["finished"] == ours["flows"]["planned"] > 0
    assert ours["engine"]["packet_hops"] > 0
    tables = sorted(p.name for p in theirs_dir.glob("*.parquet") if p.name != "cpu.parquet")
    assert "flows.parquet" in tables and "ports.parquet" in tables
    for table in tables:
        assert (ours_dir / table).read_bytes() == (theirs_dir / table).read_bytes(), table
    assert json.dumps(comparable(ours), sort_keys=True) == json.dumps(
        comparable(theirs), sort_keys=True
    )
    for pcap in sorted((theirs_dir / "capture").glob("*.pcap")):
        assert (ours_dir / "capture" / pcap.name).read_bytes() == pcap.read_bytes(), pcap.name
    # the case reached what it is about
    e, pfc = ours["engine"], ours.get("pfc") or {}
    if case == "static_xoff":
        assert pfc["pause_frames"] > 0
    if case in ("lossy", "selective_loss"):
        assert e["counters"].get("packets_resent_planned", 0) > 0
    if case == "window_acks_dcqcn":
        assert e["counters"].get("cnps_received", 0) > 0
    if case == "link_events":
        assert ours["impairments"]["link_events"]
    if case == "capture_streams":
        assert list((ours_dir / "capture").glob("*.pcap"))


@needs_native
def test_a_fabric_c_cannot_run_falls_back_and_on_refuses(tmp_path: Path) -> None:
    spray = {"fabric": {**BASE["fabric"], "leaf": {"load_balancing": {"mode": "spray"}}}}
    CASES["spray"] = spray
    try:
        summary, _ = run(tmp_path, "spray", "auto")
        code = summary["engine"]["fabric_code"]
        assert code.startswith("python") and "load_balancing" in code and "spray" in code
        with pytest.raises(ScenarioError, match=r"^sim.native_fabric: on, .*spray"):
            run(tmp_path, "spray", "on")
        assert not (tmp_path / "spray-on").exists()
    finally:
        del CASES["spray"]
