"""snappi scripts in the shape of sonic-mgmt's RoCEv2 tests, and a running `emulate otg serve`.

`qp_fairness` follows tests/snappi_tests/rocev2/test_rocev2_qp_fairness_dcqcn.py (N:1 incast,
DCQCN on, every sender a lossless rank): the same objects (layer1, devices with an IPv4 and a
RoCEv2 interface per port, one peer, QPs, stateful flows at a target line rate, per-port CNP,
ACK/NAK and DCQCN options) and the same checks on the per-QP metrics: message_fail == 0,
frame_sequence_error within 1% of the data frames received, ACKs present and consistent,
ecn_ce_rx > 0, cnp_tx and cnp_rx > 0, and each sending port's rate within 30% of the others'.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60.0
SEQ_ERR_TOLERANCE_PCT = 1.0
FAIRNESS_DEVIATION_PCT = 30.0


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]
    work_dir: Path | None
    log: list[str]


@contextlib.contextmanager
def serve(
    base: Path, *extra: str, tmp_path: Path, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """`emulate otg serve BASE --listen 127.0.0.1:0 ...` until the block ends; then SIGTERM,
    and the server must exit as interrupted (130) having removed its temporary work folder."""
    command = [sys.executable, "-m", "emulator.cli", "otg", "serve", str(base)]
    command += ["--listen", "127.0.0.1:0", *extra]
    run_env = {**os.environ, "TMPDIR": str(tmp_path), **(env or {})}
    process = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=run_env,
        # the default Ctrl-C disposition, whatever the caller's (a background shell ignores it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stderr is not None
    log: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    url = work = None
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        log.append(line)
        found = re.search(r"serving (\S+) .*runs in (\S+)\)", line)
        if found:
            url, work = found.group(1), Path(found.group(2))
            break
    if url is None:
        process.kill()
        process.wait()
        raise AssertionError("the server did not start:\n" + "".join(log))
    try:
        yield Server(url, process, work, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            rest = process.communicate(timeout=120)[1]
        except subprocess.TimeoutExpired:
            process.kill()
            rest = process.communicate()[1]
        log.append(rest)
    assert process.returncode == 130, "".join(log)
    if "--work-dir" not in extra:
        assert work is not None and not work.exists(), f"{work} left behind"


def api_for(url: str) -> Any:
    import snappi

    return snappi.api(location=url, verify=False)


def qp_fairness_config(
    api: Any,
    *,
    senders: int = 2,
    qps_per_port: int = 2,
    message_kb: int = 1024,
    verb: str = "send",
    rate_percent: int = 100,
) -> Any:
    """Port 0 receives; ports 1..senders send, each with qps_per_port QPs to it."""
    config = api.config()
    n = senders + 1
    for i in range(n):
        config.ports.port(name=f"Port {i}", location=f"tester;{i}")
    layer1 = config.layer1.layer1(name="l1")[-1]
    layer1.port_names = [p.name for p in config.ports]
    layer1.speed = layer1.SPEED_100_GBPS
    layer1.mtu = 9000
    for i in range(n):
        device = config.devices.device(name=f"Device Port {i}")[-1]
        eth = device.ethernets.add(name=f"Eth {i}", mac=f"00:00:00:00:01:{i:02x}", mtu=9000)
        eth.connection.port_name = f"Port {i}"
        eth.ipv4_addresses.add(
            name=f"IPv4 {i}", address=f"10.20.{i}.2", gateway=f"10.20.{i}.1", prefix=24
        )
    for i in range(1, n):
        iface = config.devices[i].rocev2.ipv4_interfaces.add(ipv4_name=f"IPv4 {i}", ib_mtu=4096)
        peer = iface.peers.add(name=f"RoCEv2 {i}", destination_ip_address="10.20.0.2")
        names = []
        for q in range(qps_per_port):
            qp = peer.qps.add(qp_name=f"QP{i}_{q}")
            rc = qp.connection_type.reliable_connection
            rc.source_qp_number = 33 + q
            rc.dscp = 26
            rc.ecn = "ect_0"
            rc.udp_source_port = 49152 + 16 * i + q
            names.append(qp.qp_name)
        stateful = config.stateful_flows.rocev2.add()
        tx = stateful.tx_ports.add(port_name=f"Port {i}")
        tx.transmit_type.target_line_rate.value = rate_percent
        for name in names:
            flow = tx.transmit_type.target_line_rate.flows.add(tx_endpoint=name, name=name)
            flow.rocev2_verb.choice = verb
            flow.message_size_unit = "kb"
            flow.message_size = message_kb
        options = config.options.per_port_options.add(port_name=f"Port {i}")
        protocol = options.protocols.add()
        protocol.choice = "rocev2"
        protocol.rocev2.cnp.ip_dscp.value = 48
        protocol.rocev2.cnp.ecn_value = "ect_0"
        protocol.rocev2.cnp.cnp_delay_timer = 50
        rc_options = protocol.rocev2.connection_type.reliable_connection
        for reply in (rc_options.ack, rc_options.nak):
            reply.ip_dscp.value = 26
            reply.ecn_value = "non_ect"
        rc_options.enable_retransmission_timeout = True
        rc_options.retransmission_timeout_value = 40
        dcqcn = protocol.rocev2.dcqcn_settings
        dcqcn.enable_dcqcn = True
        dcqcn.alpha_g = 1019
        dcqcn.initial_alpha = 1023
        dcqcn.maximum_rate_decrement_at_time = 50
        # NVIDIA's defaults in OTG's units (percent of line rate): line rate kept until the
        # first decrease, 1 / 5 / 50 Mb/s at 100 Gb/s (snappi's own are 0.002% after a CNP)
        dcqcn.initial_rate_after_first_cnp = 0
        dcqcn.minimum_rate_limmit = 0.001
        dcqcn.additive_increment_rate = 0.005
        dcqcn.hyper_increment_rate = 0.05
        dcqcn.rate_increment_threshold = 1
        dcqcn.rate_increment_time = 300
    return config


def plain_incast_config(
    api: Any,
    *,
    senders: int = 2,
    rate_percent: int = 60,
    seconds: float = 0.0005,
    frame_bytes: int = 1024,
    dscp: int = 3,
    ecn: int = 2,
    streams: int = 4,
) -> Any:
    """Plain flows as sonic-mgmt's ECN and PFC tests build them (tests/snappi_tests/ecn/files/
    helper.py, pfc/files/helper.py): Ethernet / IPv4 / UDP, the lossless priority's DSCP, ECT,
    incrementing UDP source ports over `streams`, a fixed size and a rate in percent of line
    rate for fixed seconds; here ports 1..senders each at `rate_percent` into port 0 (an
    incast above line rate when the sum passes 100%), and a capture on port 0."""
    config = api.config()
    for i in range(senders + 1):
        config.ports.port(name=f"Port {i}", location=f"tester;{i}")
    layer1 = config.layer1.layer1(name="l1")[-1]
    layer1.port_names = [p.name for p in config.ports]
    layer1.speed = layer1.SPEED_100_GBPS
    layer1.mtu = 9000
    for i in range(1, senders + 1):
        flow = config.flows.flow(name=f"Test Flow {i} -> 0")[-1]
        flow.tx_rx.port.tx_name = f"Port {i}"
        flow.tx_rx.port.rx_names = ["Port 0"]
        eth, ipv4, udp = flow.packet.ethernet().ipv4().udp()
        eth.src.value = f"00:00:00:00:01:{i:02x}"
        eth.dst.value = "00:00:00:00:01:00"
        eth.pfc_queue.value = dscp
        ipv4.priority.choice = ipv4.priority.DSCP
        ipv4.priority.dscp.phb.values = [dscp]
        ipv4.priority.dscp.ecn.value = ecn
        udp.src_port.increment.start = 5000 + i * streams
        udp.src_port.increment.step = 1
        udp.src_port.increment.count = streams
        udp.dst_port.value = 7000
        flow.size.fixed = frame_bytes
        flow.rate.percentage = rate_percent
        flow.duration.fixed_seconds.seconds = seconds
        flow.metrics.enable = True
        flow.metrics.loss = True
    config.captures.add(name="rx", port_names=["Port 0"]).packet_size = 128
    return config


def run_plain_incast(api: Any, config: Any, pcap: Path) -> list[Any]:
    """Set the configuration, capture at port 0, run the flows; their flow metrics, and the
    capture written to `pcap`."""
    api.set_config(config)
    cs = api.control_state()
    cs.choice = cs.PORT
    cs.port.choice = cs.port.CAPTURE
    cs.port.capture.state = cs.port.capture.START
    api.set_control_state(cs)
    start_stop(api, "traffic", "start")
    request = api.metrics_request()
    request.flow.flow_names = []
    rows = list(api.get_metrics(request).flow_metrics)
    capture = api.capture_request()
    capture.port_name = "Port 0"
    pcap.write_bytes(api.get_capture(capture).read())
    return rows


def plain_incast_failures(rows: Sequence[Any], pcap: Path, *, dscp: int = 3) -> list[str]:
    """sonic-mgmt's checks: no loss on the lossless priority (every frame sent arrived), the
    flows shared the congested port (rates within 30%), and the captured frames at the receiver
    carry the flows' DSCP with some marked CE (the ECN test's check)."""
    from scapy.layers.inet import IP, UDP
    from scapy.utils import rdpcap

    failures = []
    for r in rows:
        if r.frames_tx == 0 or r.frames_rx != r.frames_tx or r.loss != 0:
            failures.append(f"{r.name}: {r.frames_tx} sent, {r.frames_rx} received, loss {r.loss}")
    rates = [r.rx_rate_bps for r in rows]
    if rates and min(rates) < (1 - FAIRNESS_DEVIATION_PCT / 100) * max(rates):
        failures.append(f"receive rates {rates} differ by more than {FAIRNESS_DEVIATION_PCT}%")
    packets = [p for p in rdpcap(str(pcap)) if UDP in p and p[UDP].dport == 7000]
    if not packets:
        failures.append("the capture holds none of the flows' frames")
    if any(p[IP].tos >> 2 != dscp for p in packets):
        failures.append(f"a captured frame's DSCP is not {dscp}")
    if not any(p[IP].tos & 3 == 3 for p in packets):
        failures.append("no captured frame was marked CE")
    return failures


def add_pfc_storm(
    config: Any, *, port: str = "Port 0", priorities: Sequence[int] = (3,), gbps: int = 100
) -> Any:
    """A PFC pause flow as sonic-mgmt's PFC tests build one (tests/snappi_tests/pfc/files/
    helper.py): from the receiving port, every listed priority paused for 0xffff quanta, two
    frames per pause time at the port's speed, for as long as the traffic runs."""
    flow = config.flows.flow(name="PFC storm")[-1]
    flow.tx_rx.port.tx_name = port
    flow.tx_rx.port.rx_name = "Port 1"
    pause = flow.packet.pfcpause()[-1]
    pause.src.value = "00:00:fa:ce:fa:ce"
    pause.dst.value = "01:80:C2:00:00:01"
    pause.class_enable_vector.value = sum(1 << p for p in priorities)
    for p in range(8):
        getattr(pause, f"pause_class_{p}").value = 0xFFFF if p in priorities else 0
    pause_s = 65535 * 64 * 8.0 / (gbps * 1e9)
    flow.rate.pps = int(2 / pause_s)
    flow.size.fixed = 64
    flow.duration.choice = flow.duration.CONTINUOUS
    flow.metrics.enable = True
    return flow


def start_stop(api: Any, what: str, state: str) -> Any:
    cs = api.control_state()
    if what == "protocols":
        cs.choice = cs.PROTOCOL
        cs.protocol.choice = cs.protocol.ALL
        cs.protocol.all.state = state
    else:
        cs.choice = cs.TRAFFIC
        cs.traffic.choice = cs.traffic.FLOW_TRANSMIT
        cs.traffic.flow_transmit.state = state
    return api.set_control_state(cs)


def per_qp(api: Any, columns: Sequence[str] = ()) -> list[Any]:
    request = api.metrics_request()
    request.rocev2_flow.per_qp.column_names = list(columns)
    return list(api.get_metrics(request).rocev2_flow_per_qp_metrics)


@dataclass
class FairnessRun:
    rows: list[Any]  # the per-QP metrics after the stop
    running: list[Any]  # the per-QP metrics while the traffic state was start
    live_rates: dict[str, float]  # port -> its QPs' data_tx_rate while traffic ran (Mb/s)


def run_qp_fairness(api: Any, config: Any) -> FairnessRun:
    """What the sonic-mgmt helper does: set the config, start protocols and traffic, sample
    rates while it runs, stop, read the per-QP metrics."""
    api.set_config(config)
    start_stop(api, "protocols", "start")
    start_stop(api, "traffic", "start")
    running = per_qp(api)
    assert any(float(r.data_tx_rate) > 0 for r in running), "traffic never seen running"
    rates: dict[str, float] = defaultdict(float)
    for row in running:
        rates[row.port_tx] += float(row.data_tx_rate)
    start_stop(api, "traffic", "stop")
    return FairnessRun(per_qp(api), running, dict(rates))


def fairness_failures(run: FairnessRun) -> list[str]:
    """The sonic-mgmt QP-fairness checks; each failure as a line."""
    failed = []
    for r in run.rows:
        name = r.flow_name
        if r.message_fail != 0:
            failed.append(f"{name}: message_fail {r.message_fail}")
        if (
            r.data_frames_rx
            and r.frame_sequence_error / r.data_frames_rx * 100 > SEQ_ERR_TOLERANCE_PCT
        ):
            failed.append(f"{name}: frame_sequence_error {r.frame_sequence_error}")
        if r.ack_tx == 0 or r.ack_rx != r.ack_tx:
            failed.append(f"{name}: ack_tx {r.ack_tx} ack_rx {r.ack_rx}")
        if r.ecn_ce_rx == 0:
            failed.append(f"{name}: ecn_ce_rx 0")
        if r.cnp_tx == 0 or r.cnp_rx == 0:
            failed.append(f"{name}: cnp_tx {r.cnp_tx} cnp_rx {r.cnp_rx}")
        if r.message_complete_rx == 0:
            failed.append(f"{name}: no message completed")
    rates = list(run.live_rates.values())
    mean = sum(rates) / len(rates)
    deviation = (max(rates) - min(rates)) / mean * 100 if mean else 100.0
    if deviation > FAIRNESS_DEVIATION_PCT:
        failed.append(f"rank rates {run.live_rates} deviate {deviation:.1f}%")
    if any(float(r.data_tx_rate) != 0 for r in run.rows):
        failed.append("data_tx_rate not 0 after the stop")
    return failed
