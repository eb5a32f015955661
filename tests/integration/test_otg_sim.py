"""`emulate otg serve` on the packet simulator, driven by snappi as a sonic-mgmt script drives a
hardware tester: the QP-fairness test's checks hold, SEND and RDMA WRITE both run, a malformed
or unimplemented configuration comes back as an OTG error naming the object, and the server
leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.otg_scripts import (
    ROOT,
    add_pfc_storm,
    api_for,
    fairness_failures,
    per_qp,
    plain_incast_config,
    plain_incast_failures,
    qp_fairness_config,
    run_plain_incast,
    run_qp_fairness,
    serve,
    start_stop,
)

BASE = ROOT / "scenarios" / "otg" / "clos_sim.yaml"


def test_qp_fairness_script_passes_on_the_simulator(tmp_path: Path) -> None:
    with serve(BASE, "--duration-us", "2000", tmp_path=tmp_path) as server:
        api = api_for(server.url)
        run = run_qp_fairness(api, qp_fairness_config(api))
        failures = fairness_failures(run)
        assert not failures, failures
        rows = {r.flow_name: r for r in run.rows}
        assert sorted(rows) == ["QP1_0", "QP1_1", "QP2_0", "QP2_1"]
        for r in rows.values():
            assert r.port_rx == "Port 0" and r.dest_ipv4 == "10.20.0.2"
            assert r.data_frames_tx == r.data_frames_rx  # nothing lost in the lossless fabric
            assert r.tx_bytes == r.message_tx * (1 << 20)
        # each of 4 QPs into one 100 Gb/s port: about a quarter of it while the traffic ran
        for r in run.running:
            assert 15_000 < r.data_tx_rate < 30_000, (r.flow_name, r.data_tx_rate)
        # the port metrics count the same frames from the NICs' side
        request = api.metrics_request()
        request.port.port_names = []
        ports = {p.name: p for p in api.get_metrics(request).port_metrics}
        assert (
            ports["Port 1"].frames_tx == rows["QP1_0"].data_frames_tx + rows["QP1_1"].data_frames_tx
        )
        assert ports["Port 0"].frames_rx == sum(r.data_frames_rx for r in rows.values())
        assert all(p.transmit == "stopped" for p in ports.values())


def test_write_verb_and_errors(tmp_path: Path) -> None:
    import snappi

    with serve(BASE, "--duration-us", "300", tmp_path=tmp_path) as server:
        api = api_for(server.url)
        config = qp_fairness_config(api, senders=1, qps_per_port=1, message_kb=64, verb="write")
        api.set_config(config)
        start_stop(api, "traffic", "start")
        (row,) = per_qp(api)
        assert row.message_complete_rx > 0 and row.message_fail == 0
        # an unimplemented verb, a bad MTU and a flow without headers: one error naming each
        bad = qp_fairness_config(api, senders=1, qps_per_port=1, verb="send_with_immediate")
        bad.devices[1].rocev2.ipv4_interfaces[0].ib_mtu = 200
        plain = bad.flows.flow(name="plain")[-1]
        plain.tx_rx.port.tx_name = "Port 0"
        with pytest.raises(Exception) as info:
            api.set_config(bad)
        error = info.value.args[0]
        assert isinstance(error, snappi.Error) and error.kind == "validation"
        text = " ".join(error.errors)
        assert (
            "flows[0].packet: []: plain flows are [ethernet, ipv4, udp] here (or [pfcpause])"
            in text
        )
        assert (
            "devices[1].rocev2.ipv4_interfaces[0].ib_mtu: 200 is below the smallest IB path MTU"
            in text
        )
        assert (
            "stateful_flows.rocev2[0].tx_ports[0].transmit_type.target_line_rate.flows[0]"
            ".rocev2_verb.choice: send_with_immediate is not implemented" in text
        )
        # the previous configuration still holds after a refused one
        assert api.get_config().devices[1].rocev2.ipv4_interfaces[0].ib_mtu == 4096
        # a custom IB MTU (sonic-mgmt's RoCEv2 tests ask 5000) runs at the largest IB path MTU
        # below it, and set_config says so
        custom = qp_fairness_config(api, senders=1, qps_per_port=1, message_kb=64)
        custom.devices[1].rocev2.ipv4_interfaces[0].ib_mtu = 5000
        warnings = api.set_config(custom).warnings
        assert (
            "devices[1].rocev2.ipv4_interfaces[0].ib_mtu: 5000 is not an IB path MTU "
            "[256, 512, 1024, 2048, 4096]: its QPs carry 4096 bytes per packet" in warnings
        )


def test_a_pfc_storm_is_refused_by_the_simulator_in_one_line(tmp_path: Path) -> None:
    """The simulator does not generate PFC frames from a rank: the configuration is valid, and
    the start comes back as a validation error carrying the run's own reason."""
    import snappi

    with serve(BASE, "--duration-us", "200", tmp_path=tmp_path) as server:
        api = api_for(server.url)
        config = qp_fairness_config(api, senders=1, qps_per_port=1, message_kb=64)
        add_pfc_storm(config)
        api.set_config(config)
        with pytest.raises(Exception) as info:
            start_stop(api, "traffic", "start")
        error = info.value.args[0]
        assert isinstance(error, snappi.Error) and error.kind == "validation"
        (line,) = error.errors
        assert line.startswith("the run refused it: ") and "run.pfc_frames" in line
        assert "\n" not in line
        # flow names: a pause flow may be named beside stateful ones, not alone
        cs = api.control_state()
        cs.choice = cs.TRAFFIC
        cs.traffic.flow_transmit.flow_names = ["PFC storm"]
        cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.START
        with pytest.raises(Exception) as info:
            api.set_control_state(cs)
        assert info.value.args[0].errors == [
            "control_state.traffic.flow_transmit: a start needs a stateful RoCEv2 flow or a "
            "plain flow (PFC pause flows run beside them)"
        ]
        cs.traffic.flow_transmit.flow_names = ["nothing"]
        with pytest.raises(Exception) as info:
            api.set_control_state(cs)
        assert "['nothing'] are not flows of the configuration" in info.value.args[0].errors[0]


def test_a_capture_through_snappi_holds_the_ports_rocev2_packets(tmp_path: Path) -> None:
    """captures[] on the receiving port, its capture started, traffic started: get_capture
    returns a pcap of the RoCEv2 packets that crossed it (raw IPv4, target time), as scapy
    reads them: the QPs' WRITE data with their DSCP and ECN field, and the ACKs going back."""
    import snappi
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.utils import rdpcap

    import emulator.transport.scapy_layers  # noqa: F401 (binds BTH to UDP 4791)

    with serve(BASE, "--duration-us", "100", tmp_path=tmp_path) as server:
        api = api_for(server.url)
        config = qp_fairness_config(api, senders=1, qps_per_port=1, message_kb=16, verb="write")
        capture = config.captures.add(name="rx", port_names=["Port 0"])
        capture.packet_size = 128
        api.set_config(config)
        request = api.capture_request()
        request.port_name = "Port 0"
        with pytest.raises(Exception) as info:  # nothing captured yet
            api.get_capture(request)
        assert isinstance(info.value.args[0], snappi.Error)
        cs = api.control_state()
        cs.choice = cs.PORT
        cs.port.choice = cs.port.CAPTURE
        cs.port.capture.port_names = ["Port 0"]
        cs.port.capture.state = cs.port.capture.START
        api.set_control_state(cs)
        start_stop(api, "traffic", "start")
        pcap = tmp_path / "port0.pcap"
        pcap.write_bytes(api.get_capture(request).read())
    packets = rdpcap(str(pcap))
    data = [p for p in packets if p[UDP].dport == 4791 and p[BTH].opcode in (6, 7, 8, 10)]
    acks = [p for p in packets if p[BTH].opcode == 0x11]
    assert data and acks
    assert {p[IP].tos for p in data} == {26 << 2 | 0b10}  # DSCP 26, ECT(0): the QP's settings
    assert data[0][BTH].opcode in (6, 10)  # RDMA WRITE first or only: the flow's verb
    times = [float(p.time) for p in packets]
    assert times == sorted(times) and 0 < times[-1] < 200e-6  # target time, inside the run


def test_plain_flows_script_on_the_simulator(tmp_path: Path) -> None:
    """Plain flows as the sonic-mgmt ECN test sends them, two ports at 60% into a third: every
    frame arrives in the lossless fabric (PFC on), the two share the port, and the capture at
    the receiver holds their frames with CE marks; the flow metrics count both ends."""
    with serve(BASE, "--duration-us", "300", tmp_path=tmp_path) as server:
        api = api_for(server.url)
        config = plain_incast_config(api)
        rows = run_plain_incast(api, config, tmp_path / "rx.pcap")
        failures = plain_incast_failures(rows, tmp_path / "rx.pcap")
        assert not failures, failures
        assert sorted(r.name for r in rows) == ["Test Flow 1 -> 0", "Test Flow 2 -> 0"]
        # 500 us at 60% of 100 Gb/s in 1024-byte frames (1044 on the wire with the gap)
        expected = int(500e-6 / (1044 * 8 / 60e9))
        for r in rows:
            assert r.port_tx.startswith("Port ") and r.port_rx == "Port 0"
            assert abs(r.frames_tx - expected) <= 1 and r.bytes_tx == r.frames_tx * 1024
            # 120% offered into one port: each gets half of it while both send
            assert 45e9 < r.rx_rate_bps < 55e9 and 59e9 < r.tx_rate_bps < 61e9
            assert 0 < r.latency.minimum_ns <= r.latency.average_ns <= r.latency.maximum_ns
            assert r.transmit == "started"
        start_stop(api, "traffic", "stop")
        request = api.metrics_request()
        request.flow.flow_names = ["Test Flow 1 -> 0"]
        (stopped,) = api.get_metrics(request).flow_metrics
        assert stopped.transmit == "stopped" and stopped.rx_rate_bps == 0
        assert stopped.frames_rx == rows[0].frames_rx
        # the ports count the plain flows' frames at each end
        request = api.metrics_request()
        request.port.port_names = []
        ports = {p.name: p for p in api.get_metrics(request).port_metrics}
        assert ports["Port 0"].frames_rx == sum(r.frames_rx for r in rows)
        assert ports["Port 1"].frames_tx == rows[0].frames_tx
        # a plain flow of a kind not implemented is refused naming the object
        config.flows[0].packet[1].time_to_live.value = 3
        config.flows[0].size.increment.start = 64
        import snappi

        with pytest.raises(Exception) as info:
            api.set_config(config)
        error = info.value.args[0]
        assert isinstance(error, snappi.Error)
        assert error.errors == [
            "flows[0].packet[1].ipv4.time_to_live: not implemented by this tester (docs/otg.md)",
            "flows[0].size.choice: increment: only a fixed frame size here",
        ]
