"""OTG metrics from a run's results: the tester's per-QP counters (queue_pairs.parquet), its
messages (flows.parquet), its NICs (nic.parquet).

Times and rates are the run's target time, as every table of the results: a rate is the bytes a
QP or port moved over the time it was moving them (first message posted to last completed), not
a live sample (docs/otg.md). Latencies and completion times are in nanoseconds, as IxNetwork's
RoCEv2 statistics report them; rates in Mb/s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.otg.model import OtgPlan
from emulator.transport.stream import PREAMBLE_GAP_BYTES

NS = 1e9


@dataclass
class RunTables:
    """What a metrics request reads of a finished (or stopped) run."""

    queue_pairs: list[dict[str, Any]] = field(default_factory=list)
    flows: list[dict[str, Any]] = field(default_factory=list)
    nic: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, out_dir: Path | None) -> RunTables:
        if out_dir is None:
            return cls()
        import pyarrow.parquet as pq

        def rows(name: str) -> list[dict[str, Any]]:
            path = out_dir / f"{name}.parquet"
            return pq.read_table(path).to_pylist() if path.is_file() else []

        import json

        summary = out_dir / "summary.json"
        document = json.loads(summary.read_text()) if summary.is_file() else {}
        return cls(rows("queue_pairs"), rows("flows"), rows("nic"), document)


def _messages(tables: RunTables) -> dict[tuple[int, int, int, int], list[dict[str, Any]]]:
    out: dict[tuple[int, int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for f in tables.flows:
        out[(f["src_rank"], f["dst_rank"], f["qp"], f["udp_sport"])].append(f)
    return out


def _span_s(messages: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    starts = [m["start_s"] for m in messages if m.get("start_s") is not None]
    ends = [m["end_s"] for m in messages if m.get("end_s") is not None]
    return (min(starts) if starts else None), (max(ends) if ends else None)


def _rate_mbps(nbytes: float, first: float | None, last: float | None, on: bool) -> float:
    if not on or first is None or last is None or last <= first:
        return 0.0
    return round(nbytes * 8 / (last - first) / 1e6, 3)


def per_qp(
    plan: OtgPlan,
    tables: RunTables,
    *,
    transmitting: bool,
    columns: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """rocev2_flow per_qp: one row per configured stateful flow (zeros before any run)."""
    by_pattern = {row["pattern"]: row for row in tables.queue_pairs}
    messages = _messages(tables)
    out = []
    for flow in plan.flows:
        qp = flow.qp
        row = by_pattern.get(flow.name, {})
        sent = (
            messages.get((row["src_rank"], row["dst_rank"], row["qp"], row["udp_sport"]), [])
            if row
            else []
        )
        done = [m for m in sent if m.get("end_s") is not None]
        first, last = _span_s(sent)
        fcts = [m["fct_s"] for m in done if m.get("fct_s") is not None]
        tx_frames = int(row.get("data_packets_sent", 0))
        rx_frames = int(row.get("data_packets_received", 0))
        tx_bytes = sum(int(m["bytes"]) for m in sent)
        rx_bytes = int(row.get("data_bytes_received", 0))
        # one-way latency where the run measured it (metrics.one_way_latency); its histogram keeps
        # no minimum, so min_latency is left out rather than made up
        latency = {
            "avg_latency": row.get("latency_avg_us"),
            "max_latency": row.get("latency_max_us"),
        }
        metric: dict[str, Any] = {
            "flow_name": flow.name,
            "port_tx": qp.port,
            "port_rx": qp.peer_port,
            "src_qp": int(row.get("qpn", 0)),
            "dest_qp": int(row.get("qpn", 0)),
            "src_ipv4": qp.src_ipv4,
            "dest_ipv4": qp.dst_ipv4,
            "data_frames_tx": tx_frames,
            "data_frames_rx": rx_frames,
            "frame_delta": tx_frames - rx_frames,
            "data_frames_retransmitted": int(row.get("packets_retransmitted", 0)),
            "frame_sequence_error": int(row.get("sequence_errors", 0)),
            "tx_bytes": tx_bytes,
            "rx_bytes": rx_bytes,
            "data_tx_rate": _rate_mbps(tx_bytes, first, last, transmitting),
            "data_rx_rate": _rate_mbps(rx_bytes, first, last, transmitting),
            "message_tx": len(sent),
            "message_complete_rx": len(done),
            "message_fail": len(sent) - len(done),
            "flow_completion_time": round(sum(fcts) / len(fcts) * NS) if fcts else 0,
            "ecn_ce_rx": int(row.get("ce_received", 0)),
            "cnp_tx": int(row.get("cnps_sent", 0)),
            "cnp_rx": int(row.get("cnps_received", 0)),
            "ack_tx": int(row.get("acks_sent", 0)),
            "ack_rx": int(row.get("acks_received", 0)),
            "nak_tx": int(row.get("naks_sent", 0)),
            "nak_rx": int(row.get("naks_received", 0)),
            "first_timestamp": "" if first is None else f"{first:.9f}",
            "last_timestamp": "" if last is None else f"{last:.9f}",
        }
        for name, value_us in latency.items():
            if value_us is not None:
                metric[name] = round(value_us * 1e3)
        out.append(_only(metric, columns, keep=("flow_name",)))
    return out


def per_peer(
    plan: OtgPlan,
    *,
    protocols_up: bool,
    peer_names: Sequence[str] = (),
    columns: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """rocev2_ipv4 per_peer: the QPs configured toward each peer and how many are up. No
    connection manager runs here (QPs are set up with the traffic), so its message counters
    are zero: none were sent."""
    peers: dict[str, int] = defaultdict(int)
    for qp in plan.qps:
        peers[qp.peer] += 1
    out = []
    for name, configured in peers.items():
        if peer_names and name not in peer_names:
            continue
        metric: dict[str, Any] = {"name": name, "qp_configured": configured}
        metric["qp_up"] = configured if protocols_up else 0
        metric["qp_down"] = 0 if protocols_up else configured
        for counter in (
            "connect_request_tx",
            "connect_request_rx",
            "connect_reply_tx",
            "connect_reply_rx",
            "ready_tx",
            "ready_rx",
            "disconnect_request_tx",
            "disconnect_request_rx",
            "disconnect_reply_tx",
            "disconnect_reply_rx",
            "reject_tx",
            "unknown_msg_rx",
        ):
            metric[counter] = 0
        out.append(_only(metric, columns, keep=("name",)))
    return out


def ports(
    plan: OtgPlan,
    tables: RunTables,
    *,
    transmitting: bool,
    link_gbps: float,
    capturing: set[str] | frozenset[str] = frozenset(),
    port_names: Sequence[str] = (),
    columns: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """port metrics: frames from the QPs' counters on the side each happens (data sent by the
    sender, ACKs, NAKs and CNPs by the receiver) and the plain flows' frames sent and received,
    bytes from the NIC counters."""
    frames: dict[int, dict[str, int]] = defaultdict(lambda: {"tx": 0, "rx": 0})
    for row in tables.queue_pairs:
        replies_rx = row["acks_received"] + row["naks_received"] + row["cnps_received"]
        replies_tx = row["acks_sent"] + row["naks_sent"] + row["cnps_sent"]
        frames[row["src_rank"]]["tx"] += row["data_packets_sent"]
        frames[row["src_rank"]]["rx"] += replies_rx
        frames[row["dst_rank"]]["rx"] += row["data_packets_received"]
        frames[row["dst_rank"]]["tx"] += replies_tx
    for stream in tables.summary.get("streams") or []:  # plain flows: their frames each end
        frames[stream["src"]]["tx"] += stream["frames_tx"]
        frames[stream["dst"]]["rx"] += stream["frames_rx"]
    nbytes: dict[tuple[int, str], int] = defaultdict(int)
    moving: dict[tuple[int, str], list[float]] = defaultdict(list)
    for sample in tables.nic:
        key = (sample["rank"], sample["direction"])
        nbytes[key] = max(nbytes[key], int(sample["bytes"]))
        if sample["delta_bytes"]:
            moving[key] += [sample["time_s"] - sample["interval_s"], sample["time_s"]]
    out = []
    for port in plan.ports:
        if port_names and port.name not in port_names:
            continue
        metric: dict[str, Any] = {
            "name": port.name,
            "location": port.location,
            "link": "up",
            "capture": "started" if port.name in capturing else "stopped",
            "transmit": "started" if transmitting else "stopped",
            "speed": int(link_gbps * 1000),  # Mb/s
        }
        for direction in ("tx", "rx"):
            key = (port.rank, direction)
            span = moving.get(key)
            first, last = (min(span), max(span)) if span else (None, None)
            metric[f"frames_{direction}"] = frames[port.rank][direction]
            metric[f"bytes_{direction}"] = nbytes[key]
            seconds = (last - first) if first is not None and last is not None else 0.0
            live = transmitting and seconds > 0
            metric[f"frames_{direction}_rate"] = (
                round(frames[port.rank][direction] / seconds, 3) if live else 0.0
            )
            metric[f"bytes_{direction}_rate"] = round(nbytes[key] / seconds, 3) if live else 0.0
        out.append(_only(metric, columns, keep=("name",)))
    return out


def pause_flows(
    plan: OtgPlan,
    tables: RunTables,
    *,
    transmitting: bool,
    flow_names: Sequence[str] = (),
    columns: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """flow metrics of the PFC pause flows: the frames their rank's generator sent (summary.json
    ranks.N.pfc_frames_sent). No tester port receives them (the switch consumes them)."""
    ranks = tables.summary.get("ranks", {})
    seconds = float(tables.summary.get("job_time_s") or 0.0)
    out = []
    for flow in plan.pause_flows:
        if flow_names and flow.name not in flow_names:
            continue
        sent = int((ranks.get(str(plan.port(flow.port).rank)) or {}).get("pfc_frames_sent") or 0)
        live = transmitting and seconds > 0
        metric: dict[str, Any] = {
            "name": flow.name,
            "port_tx": flow.port,
            "port_rx": flow.rx_port or "",
            "transmit": "started" if transmitting else "stopped",
            "frames_tx": sent,
            "frames_rx": 0,
            "bytes_tx": sent * 64,
            "bytes_rx": 0,
            "frames_tx_rate": round(sent / seconds, 3) if live else 0.0,
            "frames_rx_rate": 0.0,
        }
        out.append(_only(metric, columns, keep=("name",)))
    return out


def plain_flows(
    plan: OtgPlan,
    tables: RunTables,
    *,
    transmitting: bool,
    flow_names: Sequence[str] = (),
    columns: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """flow metrics of the plain flows: what the run counted of each stream (summary.json
    streams: frames and bytes at both ends, loss in percent, latency in ns, first and last
    frame in ns of target time; rates over the time from the first frame to the last)."""
    rows = {row["name"]: row for row in tables.summary.get("streams") or []}
    out = []
    for flow in plan.plain_flows:
        if flow_names and flow.name not in flow_names:
            continue
        row = rows.get(flow.name, {})
        latency = row.get("latency_ns") or {}
        tx_bps, rx_bps = row.get("tx_rate_bps") or 0.0, row.get("rx_rate_bps") or 0.0
        frame_bits = (flow.frame_bytes + PREAMBLE_GAP_BYTES) * 8
        live = transmitting and bool(row)
        rx_times = [row.get("first_rx_us"), row.get("last_rx_us")]
        metric: dict[str, Any] = {
            "name": flow.name,
            "port_tx": flow.port,
            "port_rx": flow.rx_port,
            "transmit": "started" if transmitting else "stopped",
            "frames_tx": int(row.get("frames_tx", 0)),
            "frames_rx": int(row.get("frames_rx", 0)),
            "bytes_tx": int(row.get("bytes_tx", 0)),
            "bytes_rx": int(row.get("bytes_rx", 0)),
            "frames_tx_rate": round(tx_bps / frame_bits, 3) if live else 0.0,
            "frames_rx_rate": round(rx_bps / frame_bits, 3) if live else 0.0,
            "loss": round(float(row.get("loss_percent", 0.0)), 6),
            "tx_rate_bps": round(tx_bps, 3) if live else 0.0,
            "rx_rate_bps": round(rx_bps, 3) if live else 0.0,
            "latency": {
                "minimum_ns": float(latency.get("min") or 0.0),
                "maximum_ns": float(latency.get("max") or 0.0),
                "average_ns": float(latency.get("avg") or 0.0),
            },
        }
        if None not in rx_times:
            first, last = (float(t) * 1e3 for t in rx_times)
            metric["timestamps"] = {"first_timestamp_ns": first, "last_timestamp_ns": last}
        out.append(_only(metric, columns, keep=("name",)))
    return out


def _only(metric: dict[str, Any], columns: Sequence[str], *, keep: Sequence[str]) -> dict[str, Any]:
    if not columns:
        return metric
    wanted = set(columns) | set(keep)
    return {k: v for k, v in metric.items() if k in wanted}
