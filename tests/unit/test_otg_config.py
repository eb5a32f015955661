"""The OTG configuration in this project's terms (emulator.otg.config, emulator.otg.scenario):
what each OTG object maps to, with units converted, and every refusal naming its object path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import InputError
from emulator.otg.config import parse, plan
from emulator.otg.model import OtgError
from emulator.otg.scenario import TrafficOptions, read_base, scenario_document
from emulator.otg.service import OtgService, ServiceOptions
from tests.otg_scripts import ROOT, add_pfc_storm, qp_fairness_config

BASE = ROOT / "scenarios" / "otg" / "clos_sim.yaml"


def api() -> Any:
    import snappi

    return snappi.api(location="https://127.0.0.1:1", verify=False)


def document(config: Any) -> dict[str, Any]:
    return parse(config.serialize())


def errors_of(config: Any, ranks: int = 8) -> list[str]:
    with pytest.raises(OtgError) as info:
        plan(document(config), ranks, 100e9)
    assert info.value.kind == "validation" and info.value.code == 400
    return info.value.errors


def test_snappi_runs_on_this_projects_protobuf() -> None:
    """snappi pins protobuf 6; setup.sh installs it without its pins next to protobuf 7 (the
    Chakra code's). Its generated gRPC model must still import."""
    import google.protobuf
    from snappi import otg_pb2

    assert int(google.protobuf.__version__.split(".")[0]) >= 7
    assert otg_pb2.Config is not None


def test_the_qp_fairness_configuration_maps_onto_ranks_patterns_and_the_transport() -> None:
    made = plan(document(qp_fairness_config(api(), rate_percent=40)), 8, 100e9)
    assert [(p.name, p.rank) for p in made.ports] == [("Port 0", 0), ("Port 1", 1), ("Port 2", 2)]
    assert [f.name for f in made.flows] == ["QP1_0", "QP1_1", "QP2_0", "QP2_1"]
    qp = made.flows[3].qp
    assert (qp.port, qp.peer_port, qp.dscp, qp.ecn, qp.udp_sport, qp.ib_mtu) == (
        "Port 2",
        "Port 0",
        26,
        "ect0",
        49152 + 33,
        4096,
    )
    assert made.link_gbps == 100.0
    assert made.transport == {
        "cnp_dscp": 48,
        "cnp_ecn": "ect0",
        "ack_dscp": 26,
        "ack_ecn": "not_ect",
        "retransmit_timeout_s": 0.04,  # OTG: milliseconds
        "data_ecn": "ect0",
        "path_mtu_bytes": 4096,
    }
    # OTG's DCQCN in NVIDIA's terms (docs/otg.md): microseconds kept, the byte counter in
    # 64-byte units, the largest cut per step as the share a step keeps
    assert made.dcqcn == {
        "dce_tcp_g": 1019,
        "initial_alpha_value": 1023,
        "dce_tcp_rtt_us": 21.0,
        "rate_reduce_monitor_period_us": 21.0,
        "rpg_time_reset_us": 300.0,
        "rpg_byte_reset_bytes": 32767 * 64,
        "rpg_threshold": 1,
        "rpg_min_dec_fac": 50,
        "clamp_tgt_rate": False,
        "min_time_between_cnps_us": 50.0,
    }
    assert made.dcqcn_percent == {
        "rate_to_set_on_first_cnp_mbps": 0.0,
        "rpg_min_rate_mbps": 0.001,
        "rpg_ai_rate_mbps": 0.005,
        "rpg_hai_rate_mbps": 0.05,
    }


def test_the_scenario_has_one_pattern_per_flow_and_the_rates_converted() -> None:
    base = read_base(BASE)
    made = plan(document(qp_fairness_config(api(), rate_percent=40)), base.ranks, 100e9)
    doc = scenario_document(base.document, made, TrafficOptions(duration_us=250.0))
    assert "workload" not in doc and doc["name"] == "otg"
    pattern = doc["traffic"][0]
    assert pattern == {
        "name": "QP1_0",
        "kind": "pairs",
        "pairs": [[1, 0]],
        "qps": 1,
        "qp_dscp": [26],
        "qp_udp_sport": [49168],
        "verb": "send",
        "message_bytes": 1 << 20,
        "path_mtu_bytes": 4096,
        "duration_us": 250.0,
        "rate_percent": 20.0,  # the port's 40% split over its two flows
        "rate_mode": "stateful",
        "congestion_control": "dcqcn",
        "messages_in_flight": 1,
    }
    dcqcn = doc["transport"]["dcqcn"]
    assert dcqcn["rpg_ai_rate_mbps"] == pytest.approx(5.0)  # 0.005% of 100 Gb/s
    assert dcqcn["rpg_hai_rate_mbps"] == pytest.approx(50.0)
    assert dcqcn["rate_to_set_on_first_cnp_mbps"] == 0.0  # 0: keep line rate
    full = plan(document(qp_fairness_config(api(), rate_percent=100)), base.ranks, 100e9)
    doc = scenario_document(base.document, full, TrafficOptions(), flow_names=["QP2_1"])
    assert [p["name"] for p in doc["traffic"]] == ["QP2_1"]
    assert doc["traffic"][0]["rate_percent"] == 100.0  # at line rate the QPs share the port


def test_ports_take_the_rank_a_location_names() -> None:
    config = qp_fairness_config(api())
    config.ports[0].location = "rank:5"
    made = plan(document(config), 8, 100e9)
    assert [p.rank for p in made.ports] == [5, 1, 2]
    config.ports[2].location = "rank:5"
    assert "ports[2].location: rank 5 is port 'Port 0''s already" in errors_of(config)
    config.ports[2].location = "rank:8"
    assert "ports[2].location: rank 8 is not one of the fabric's 8 ranks" in errors_of(config)


def test_every_problem_is_named_by_its_object_path() -> None:
    config = qp_fairness_config(api())
    config.devices[1].rocev2.ipv4_interfaces[0].peers[0].qps[
        0
    ].connection_type.reliable_connection.initial_psn = 7
    config.devices[2].rocev2.ipv4_interfaces[0].peers[0].destination_ip_address = "10.99.0.2"
    options = config.options.per_port_options[1].protocols[0]  # snappi: the choice's object
    options.dcqcn_settings.alpha_g = 1000
    options.connection_type.reliable_connection.nak.ip_dscp.value = 3
    options.connection_type.reliable_connection.enable_retransmission_timeout = False
    config.layer1[0].speed = "speed_400_gbps"
    second = config.layer1.layer1(name="l2")[-1]
    second.port_names = ["Port 9"]
    second.speed = "speed_100_gbps"
    assert errors_of(config) == [
        "layer1[1].port_names[0]: 'Port 9' is not a port",
        "layer1: ports at different speeds [100.0, 400.0] Gb/s: one host link rate",
        "devices[1].rocev2.ipv4_interfaces[0].peers[0].qps[0].connection_type."
        "reliable_connection.initial_psn: not implemented by this tester (docs/otg.md)",
        "devices[2].rocev2.ipv4_interfaces[0].peers[0].destination_ip_address: 10.99.0.2 is no "
        "device's IPv4 address (a peer is one of these ports)",
        "options.per_port_options[1].protocols[0].rocev2.connection_type.reliable_connection."
        "nak.ip_dscp: 3 differs from ack.ip_dscp 26: ACKs and NAKs travel in one class here",
        "options.per_port_options[1].protocols[0].rocev2.connection_type.reliable_connection."
        "enable_retransmission_timeout: false: the transport always retransmits after its "
        "timeout",
        "stateful_flows.rocev2[1].tx_ports[0].transmit_type.target_line_rate.flows[0]."
        "tx_endpoint: 'QP2_0' is not a QP",
        "stateful_flows.rocev2[1].tx_ports[0].transmit_type.target_line_rate.flows[1]."
        "tx_endpoint: 'QP2_1' is not a QP",
        "options.per_port_options[1].protocols[0].rocev2: its dcqcn.dce_tcp_g 1000 differs "
        "from 1019 at options.per_port_options[0].protocols[0].rocev2: the transport's "
        "settings are one set for every port",
    ]


def test_flows_are_refused_for_what_they_ask_not_only_the_first() -> None:
    config = qp_fairness_config(api(), senders=1, qps_per_port=2, verb="read")
    flows = config.stateful_flows.rocev2[0].tx_ports[0].transmit_type.target_line_rate.flows
    flows[0].message_size = 0
    flows[1].tx_endpoint = "QP1_0"
    path = "stateful_flows.rocev2[0].tx_ports[0].transmit_type.target_line_rate.flows"
    errors = errors_of(config)
    assert errors[:3] == [
        f"{path}[0].rocev2_verb.choice: read is not implemented: the transport sends SEND and "
        "RDMA WRITE without immediate data, and no READ",
        f"{path}[0].message_size: 0: a message carries at least one byte",
        f"{path}[1].rocev2_verb.choice: read is not implemented: the transport sends SEND and "
        "RDMA WRITE without immediate data, and no READ",
    ]


def test_one_qp_carries_one_flow() -> None:
    config = qp_fairness_config(api(), senders=1, qps_per_port=2)
    flows = config.stateful_flows.rocev2[0].tx_ports[0].transmit_type.target_line_rate.flows
    flows[1].tx_endpoint = "QP1_0"
    assert errors_of(config) == [
        "stateful_flows.rocev2[0].tx_ports[0].transmit_type.target_line_rate.flows[1]."
        "tx_endpoint: QP 'QP1_0' carries flow 'QP1_0' already"
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "config: not JSON"),
        (b"[1, 2]", "config: expected a JSON object"),
        (
            json.dumps({"ports": [{"name": "p", "location": 3}]}).encode(),
            "config: property location shall be of type <class 'str'>",
        ),
        (
            json.dumps(
                {
                    "devices": [
                        {
                            "name": "d",
                            "rocev2": {"ipv4_interfaces": [{"ipv4_name": "x", "ib_mtu": 99999}]},
                        }
                    ]
                }
            ).encode(),
            "config: Invalid 99999 format, expected uint32",
        ),
    ],
)
def test_snappi_validates_the_body(body: bytes, message: str) -> None:
    with pytest.raises(OtgError) as info:
        parse(body)
    assert info.value.errors[0].startswith(message)


def test_set_config_warns_of_snappis_dcqcn_default_and_checks_a_duts_addresses(
    tmp_path: Path,
) -> None:
    base = read_base(BASE)
    service = OtgService(ServiceOptions(base.document, base.ranks, 100.0, tmp_path))
    config = qp_fairness_config(api())
    for options in config.options.per_port_options:
        options.protocols[0].dcqcn_settings.initial_rate_after_first_cnp = 0.002
    reply = service.set_config(config.serialize().encode())
    assert reply["warnings"] == [
        "dcqcn_settings.initial_rate_after_first_cnp: 0.002% of 100 Gb/s: a QP's first CNP sets "
        "it to 2 Mb/s (the value is in percent of line rate; 0 keeps the line rate until the "
        "first decrease)"
    ]
    dut = read_base(ROOT / "scenarios" / "otg" / "dut.yaml")
    service = OtgService(ServiceOptions(dut.document, dut.ranks, 10.0, tmp_path))
    config = qp_fairness_config(api())
    config.devices[2].ethernets[0].ipv4_addresses[0].address = "10.20.9.2"
    config.devices[1].rocev2.ipv4_interfaces[0].peers[0].destination_ip_address = "10.20.0.2"
    with pytest.raises(OtgError) as info:
        service.set_config(config.serialize().encode())
    assert info.value.errors == [
        "devices: port 'Port 2' (rank 2) has 10.20.9.2, but the fabric's interface for it has "
        "10.20.2.2"
    ]


def test_a_bad_base_scenario_is_one_line_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "base.yaml"
    path.write_text("fabric: {kind: clos, hosts_per_leaf: 0}\n")
    with pytest.raises(InputError) as info:
        read_base(path)
    assert str(info.value).startswith(f"{path}:1:") and "hosts_per_leaf" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_pfc_pause_flow_is_the_runs_pfc_frames() -> None:
    config = qp_fairness_config(api(), senders=1, qps_per_port=1)
    storm = add_pfc_storm(config, priorities=(3, 4))
    made = plan(document(config), 8, 100e9)
    (pause,) = made.pause_flows
    assert (pause.name, pause.port, pause.rx_port) == ("PFC storm", "Port 0", "Port 1")
    assert pause.pause_quanta == {"3": 0xFFFF, "4": 0xFFFF}
    assert pause.frames_per_s == int(2 / (65535 * 64 * 8 / 100e9))
    assert (pause.start_us, pause.stop_us) == (0.0, None)
    base = read_base(BASE)
    doc = scenario_document(base.document, made, TrafficOptions())
    assert doc["run"]["pfc_frames"] == [
        {
            "rank": 0,
            "pause_quanta": {"3": 0xFFFF, "4": 0xFFFF},
            "frames_per_s": pause.frames_per_s,
            "start_us": 0.0,
        }
    ]
    # a rate in percent of line rate counts frames on the wire (64 bytes + preamble and gap);
    # fixed_seconds after a delay: from the delay, for that long (target time)
    storm.rate.percentage = 1.0
    storm.duration.fixed_seconds.seconds = 0.0005
    storm.duration.fixed_seconds.delay.nanoseconds = 100_000
    (pause,) = plan(document(config), 8, 100e9).pause_flows
    assert pause.frames_per_s == pytest.approx(0.01 * 100e9 / (84 * 8))
    assert (pause.start_us, pause.stop_us) == pytest.approx((100.0, 600.0))
    storm.duration.fixed_packets.packets = 10
    storm.rate.pps = 1000
    (pause,) = plan(document(config), 8, 100e9).pause_flows
    assert (pause.start_us, pause.stop_us) == pytest.approx((0.0, 10_000.0))


def test_pause_flows_are_refused_for_what_a_pfc_frame_cannot_be() -> None:
    config = qp_fairness_config(api(), senders=1, qps_per_port=1)
    storm = add_pfc_storm(config)
    storm.size.fixed = 128
    storm.packet[0].dst.value = "01:80:c2:00:00:02"
    storm.packet[0].class_enable_vector.value = 0
    other = config.flows.flow(name="data")[-1]
    other.tx_rx.port.tx_name = "Port 1"
    other.packet.ethernet()
    other.packet.ipv4()
    assert errors_of(config) == [
        "flows[0].packet[0].pfcpause.dst: 01:80:c2:00:00:02: PFC frames go to 01:80:c2:00:00:01",
        "flows[0].packet[0].pfcpause.class_enable_vector: 0: enables no priority",
        "flows[0].size: a PFC frame is 64 bytes (fixed)",
        "flows[1].packet: ['ethernet', 'ipv4']: plain flows are [ethernet, ipv4, udp] here "
        "(or [pfcpause])",
    ]


def test_captures_name_ports_and_the_largest_packet_size() -> None:
    config = qp_fairness_config(api(), senders=2, qps_per_port=1)
    first = config.captures.add(name="a", port_names=["Port 0", "Port 1"])
    first.packet_size = 96
    config.captures.add(name="b", port_names=["Port 1"]).packet_size = 200
    capture = plan(document(config), 8, 100e9).capture
    assert capture is not None
    assert (capture.ports, capture.snap_bytes) == (("Port 0", "Port 1"), 200)
    base = read_base(BASE)
    doc = scenario_document(
        base.document,
        plan(document(config), 8, 100e9),
        TrafficOptions(capture_packets=500),
        capture_ports=["Port 1"],
    )
    assert doc["metrics"]["capture"] == {"ranks": [1], "packets": 500, "snap_bytes": 200}
    config.captures[1].format = "pcapng"
    config.captures[1].port_names = ["Port 7"]
    assert errors_of(config) == [
        "captures[1].format: pcapng: only pcap",
        "captures[1].port_names[0]: 'Port 7' is not a port",
    ]


def test_every_layer1_speed_of_the_model_has_a_rate() -> None:
    import snappi.snappi as model

    from emulator.otg.model import SPEEDS

    assert set(SPEEDS) == set(model.Layer1._TYPES["speed"]["enum"])


def test_plain_flows_map_onto_streams() -> None:
    """sonic-mgmt's plain flows: the DSCP and the raw ECN field, incrementing source ports, a
    rate in percent or bits per second (the wire's, preamble and gap included), fixed packets,
    fixed seconds or continuous (as long as the start, from the flow's delay)."""
    from tests.otg_scripts import plain_incast_config

    config = plain_incast_config(api(), senders=3, streams=4, ecn=1)
    config.flows[1].rate.gbps = 10
    config.flows[1].duration.fixed_packets.packets = 500
    config.flows[2].duration.continuous.delay.microseconds = 100
    made = plan(document(config), 8, 100e9)
    assert [f.name for f in made.plain_flows] == [f"Test Flow {i} -> 0" for i in (1, 2, 3)]
    doc = scenario_document(read_base(BASE).document, made, TrafficOptions(duration_us=400.0))
    first, second, third = doc["streams"]
    assert first == {
        "name": "Test Flow 1 -> 0",
        "src": 1,
        "dst": 0,
        "frame_bytes": 1024,
        "dscp": 3,
        "ecn": 1,
        "udp_sport": 5004,
        "udp_sport_step": 1,
        "udp_sport_count": 4,
        "udp_dport": 7000,
        "rate_percent": 60.0,
        "duration_us": 500.0,
        "start_us": 0.0,
    }
    assert second["rate_pps"] == pytest.approx(10e9 / (1044 * 8)) and second["packets"] == 500
    assert (third["start_us"], third["duration_us"]) == (100.0, 300.0)
    assert doc["traffic"] == [] and "pfc_frames" not in doc.get("run", {})
    # a flow asked from a device's IPv4 to another's sends between their ports
    devices = qp_fairness_config(api(), senders=1, qps_per_port=1)
    flow = devices.flows.flow(name="by device")[-1]
    flow.tx_rx.device.tx_names = ["IPv4 1"]
    flow.tx_rx.device.rx_names = ["IPv4 0"]
    _, ipv4, udp = flow.packet.ethernet().ipv4().udp()
    ipv4.src.value = "10.20.1.2"
    udp.dst_port.value = 9000
    flow.rate.pps = 1000
    flow.duration.fixed_packets.packets = 10
    (made_flow,) = plan(document(devices), 8, 100e9).plain_flows
    assert (made_flow.port, made_flow.rx_port, made_flow.udp_dport) == ("Port 1", "Port 0", 9000)


def test_plain_flows_are_refused_for_what_this_tester_does_not_send() -> None:
    config = qp_fairness_config(api(), senders=1, qps_per_port=1)
    flow = config.flows.flow(name="bad")[-1]
    flow.tx_rx.port.tx_name = "Port 1"
    flow.tx_rx.port.rx_names = ["Port 0"]
    _, ipv4, udp = flow.packet.ethernet().ipv4().udp()
    ipv4.dst.value = "10.20.0.9"
    ipv4.priority.choice = ipv4.priority.TOS
    udp.dst_port.value = 4791
    udp.src_port.values = [1, 2]
    flow.rate.percentage = 120
    flow.duration.burst.packets = 10
    loop = config.flows.flow(name="loop")[-1]
    loop.tx_rx.port.tx_name = "Port 1"
    loop.tx_rx.port.rx_names = ["Port 1"]
    loop.packet.ethernet().ipv4().udp()
    assert errors_of(config) == [
        "flows[0].packet[1].ipv4.priority.choice: tos: give the DSCP and ECN (priority.dscp)",
        "flows[0].packet[1].ipv4.dst: 10.20.0.9: the address of port 'Port 0' is 10.20.0.2",
        "flows[0].packet[2].udp.src_port.choice: values: one value per field here",
        "flows[0].packet[2].udp.dst_port: 4791: a plain flow's destination port is 1..65535 "
        "and not RoCEv2's 4791",
        "flows[0].rate.percentage: 120: at most 100% of line rate",
        "flows[0].duration.choice: burst: continuous, fixed_seconds or fixed_packets",
        "flows[1].tx_rx.port: 'Port 1' sends to itself",
        # OTG's default destination port is 0, which no socket receives on
        "flows[1].packet[2].udp.dst_port: 0: a plain flow's destination port is 1..65535 and "
        "not RoCEv2's 4791",
    ]


def test_ipv4_neighbors_resolve_to_the_leaf_ports_fixed_mac(tmp_path: Path) -> None:
    """sonic-mgmt's scripts wait until every device's gateway is resolved before traffic: on a
    Clos the answer is the MAC of the leaf port the rank's link ends at (the emulated fabric's
    fixed plan, fabrics/netns.cable_mac); toward a switch under test it stays unresolved."""
    from fabrics.netns import cable_mac
    from fabrics.topology import build_clos

    base = read_base(BASE)
    options = ServiceOptions(
        base.document, base.ranks, 100.0, tmp_path, gateway_macs=base.gateway_macs
    )
    service = OtgService(options)
    service.set_config(qp_fairness_config(api(), senders=2).serialize().encode())
    request = api().states_request()
    request.ipv4_neighbors.ethernet_names = []
    reply = service.get_states(request.serialize().encode())
    rows = reply["ipv4_neighbors"]
    assert [(r["ethernet_name"], r["ipv4_address"]) for r in rows] == [
        ("Eth 0", "10.20.0.1"),
        ("Eth 1", "10.20.1.1"),
        ("Eth 2", "10.20.2.1"),
    ]
    # rank 1's cable: its leaf end's MAC, as the emulated fabric sets it (ip link ... address)
    from emulator.scenario import load_scenario

    cables = build_clos(load_scenario(BASE).fabric).cables
    (index, cable) = next((i, c) for i, c in enumerate(cables) if "h1" in (c.a.node, c.b.node))
    leaf_end = 1 if cable.a.node == "h1" else 0
    assert rows[1]["link_layer_address"] == cable_mac(index, leaf_end)
    assert len({r["link_layer_address"] for r in rows}) == 3
    assert not read_base(ROOT / "scenarios" / "otg" / "dut.yaml").gateway_macs
