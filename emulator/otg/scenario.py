"""The scenario a traffic start runs: the server's base scenario (its fabric, run and metrics
sections) with the configuration's traffic patterns and transport settings written in.

Each stateful RoCEv2 flow is one `pairs` traffic pattern of one QP (emulator/traffic/spec.py):
its port's rank to its peer's, its DSCP and UDP source port, its verb and message size, posting
messages for the server's traffic duration (target time). A port's target line rate below 100%
is split evenly over its flows as a cap each; at 100% they share the port as they come.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from emulator.errors import InputError
from emulator.otg.model import OtgError, OtgPlan

OTG_SCENARIO_NAME = "otg"
# sections of the base that describe a workload: the configuration's flows replace them
WORKLOAD_KEYS = ("workload", "workloads", "traffic", "expect")


@dataclass(frozen=True)
class TrafficOptions:
    """How the server runs stateful flows (OTG gives them no duration: a tester sends until
    told to stop; here a start runs this long in target time)."""

    duration_us: float = 1000.0
    messages_in_flight: int = 1
    capture_packets: int = 10_000  # most packets a capture keeps per port


@dataclass(frozen=True)
class Base:
    """The server's base scenario: its document, and its fabric's ranks and line rate."""

    path: Path
    document: dict[str, Any]
    ranks: int
    line_rate_bps: float
    # rank -> the MAC of the switch port its link ends at, where the fabric fixes it (a Clos:
    # fabrics/netns.cable_mac); toward a switch under test only ARP tells, during a run
    gateway_macs: dict[int, str] = field(default_factory=dict)


def read_base(path: Path) -> Base:
    """The base scenario, refused now (the loader's one-line error naming the file) if its
    sections would be; its workload is left out (the configuration's flows replace it)."""
    from emulator.scenario import load_scenario

    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: {' '.join(str(exc).split())}") from None
    if not isinstance(document, dict):
        raise InputError(f"{path}: expected a mapping (a scenario)")
    if any(document.get(key) for key in WORKLOAD_KEYS[:3]):
        scenario = load_scenario(path)  # a whole scenario: checked as `emulate run` would
    else:
        # no workload: a placeholder pattern appended to the text, so the loader's line
        # numbers are the file's own
        placeholder = "traffic: [{name: base, kind: pairs, pairs: [[0, 1]], bytes_per_pair: 1}]"
        with tempfile.TemporaryDirectory() as folder:
            copy_path = Path(folder) / path.name
            text = path.read_text()
            separator = "" if text.endswith("\n") else "\n"
            copy_path.write_text(f"{text}{separator}{placeholder}\n")
            try:
                scenario = load_scenario(copy_path)
            except InputError as exc:
                raise InputError(str(exc).replace(str(copy_path), str(path))) from None
    return Base(
        path,
        document,
        scenario.fabric.ranks,
        scenario.fabric.rank_rate_bps,
        gateway_macs(scenario.fabric),
    )


def gateway_macs(fabric: Any) -> dict[int, str]:
    """Each rank's leaf port MAC on the emulated Clos (the same every run: the MAC plan of
    fabrics/netns.py; the simulator has no link layer and takes the same plan)."""
    from fabrics.netns import cable_mac
    from fabrics.spec import ClosSpec
    from fabrics.topology import build_clos

    if not isinstance(fabric, ClosSpec):
        return {}
    out = {}
    for index, cable in enumerate(build_clos(fabric).cables):
        for near, _far, end in ((cable.a, cable.b, 1), (cable.b, cable.a, 0)):
            if near.node.startswith("h") and near.node[1:].isdigit():
                out[int(near.node[1:])] = cable_mac(index, end)
    return out


def scenario_document(
    base: Mapping[str, Any],
    plan: OtgPlan,
    options: TrafficOptions,
    *,
    flow_names: Sequence[str] = (),
    capture_ports: Sequence[str] = (),
) -> dict[str, Any]:
    """The scenario document for the plan's flows (or those named); the DCQCN settings given in
    percent of line rate are converted at the plan's line rate."""
    doc = copy.deepcopy(dict(base))
    for key in WORKLOAD_KEYS:
        doc.pop(key, None)
    doc["name"] = OTG_SCENARIO_NAME
    doc["description"] = "traffic from an Open Traffic Generator configuration (emulate otg serve)"
    flows = [f for f in plan.flows if not flow_names or f.name in flow_names]
    patterns = []
    for flow in flows:
        rate = float(flow.port_rate_percent)
        if rate < 100.0:
            rate /= flow.port_flows
        patterns.append(
            {
                "name": flow.name,
                "kind": "pairs",
                "pairs": [[plan.port(flow.qp.port).rank, plan.port(flow.qp.peer_port).rank]],
                "qps": 1,
                "qp_dscp": [flow.qp.dscp],
                "qp_udp_sport": [flow.qp.udp_sport],
                "verb": flow.verb,
                "message_bytes": flow.message_bytes,
                "path_mtu_bytes": flow.qp.ib_mtu,
                "duration_us": options.duration_us,
                "rate_percent": rate,
                "rate_mode": "stateful",
                "congestion_control": "dcqcn" if flow.dcqcn else "none",
                "messages_in_flight": options.messages_in_flight,
            }
        )
    doc["traffic"] = patterns
    streams = []
    for f in plan.plain_flows:
        if flow_names and f.name not in flow_names:
            continue
        timing: dict[str, Any] = {"packets": f.packets} if f.packets is not None else {}
        if f.packets is None:
            # continuous: as long as a start runs (--duration-us), from its delay on
            duration = f.duration_us if f.duration_us is not None else options.duration_us
            if f.duration_us is None and duration <= f.start_us:
                raise OtgError(
                    [
                        f"flows {f.name!r}: its delay ({f.start_us:g} us) is past the start's "
                        f"{options.duration_us:g} us (--duration-us)"
                    ]
                )
            timing["duration_us"] = duration if f.duration_us is not None else duration - f.start_us
        pace = (
            {"rate_percent": f.rate_percent}
            if f.rate_percent is not None
            else {"rate_pps": f.rate_pps}
        )
        streams.append(
            {
                "name": f.name,
                "src": plan.port(f.port).rank,
                "dst": plan.port(f.rx_port).rank,
                "frame_bytes": f.frame_bytes,
                "dscp": f.dscp,
                "ecn": f.ecn,
                "udp_sport": f.udp_sport,
                "udp_sport_step": f.udp_sport_step,
                "udp_sport_count": f.udp_sport_count,
                "udp_dport": f.udp_dport,
                **pace,
                **timing,
                "start_us": f.start_us,
            }
        )
    if streams:
        doc["streams"] = streams
    pauses = [f for f in plan.pause_flows if not flow_names or f.name in flow_names]
    if pauses:
        run = dict(doc.get("run") or {})
        run["pfc_frames"] = [
            {
                "rank": plan.port(f.port).rank,
                "pause_quanta": dict(f.pause_quanta),
                "frames_per_s": f.frames_per_s,
                "start_us": f.start_us,
                **({"stop_us": f.stop_us} if f.stop_us is not None else {}),
            }
            for f in pauses
        ]
        doc["run"] = run
    transport = dict(doc.get("transport") or {})
    transport.update(plan.transport)
    dcqcn = dict(transport.get("dcqcn") or {})
    dcqcn.update(plan.dcqcn)
    for key, percent in plan.dcqcn_percent.items():
        dcqcn[key] = percent / 100.0 * plan.line_rate_bps / 1e6
    if dcqcn:
        transport["dcqcn"] = dcqcn
    doc["transport"] = transport
    fabric = dict(doc.get("fabric") or {})
    if fabric.get("kind", "clos") == "clos":
        if plan.link_gbps is not None:
            fabric["host_link_gbps"] = plan.link_gbps
        if plan.pfc:
            fabric["pfc"] = True
        # CNPs are served in strict priority here, as the run requires of their class
        cnp = transport.get("cnp_dscp")
        if cnp is not None:
            classes = list(fabric.get("priority_dscps", [48]))
            if cnp not in classes:
                fabric["priority_dscps"] = [*classes, cnp]
    doc["fabric"] = fabric
    if capture_ports and plan.capture is not None:
        metrics = dict(doc.get("metrics") or {})
        metrics["capture"] = {
            "ranks": sorted(plan.port(name).rank for name in capture_ports),
            "packets": options.capture_packets,
            "snap_bytes": plan.capture.snap_bytes,
        }
        doc["metrics"] = metrics
    return doc


def write_scenario(
    base: Mapping[str, Any],
    plan: OtgPlan,
    options: TrafficOptions,
    folder: Path,
    *,
    flow_names: Sequence[str] = (),
    capture_ports: Sequence[str] = (),
) -> Path:
    """Write the scenario into `folder` and load it back, so anything the run would refuse is
    refused now, as an OTG validation error."""
    from emulator.scenario import load_scenario

    folder.mkdir(parents=True, exist_ok=True)
    doc = scenario_document(base, plan, options, flow_names=flow_names, capture_ports=capture_ports)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        load_scenario(path)
    except InputError as exc:
        raise OtgError([f"the scenario this configuration makes: {exc}"]) from None
    return path
