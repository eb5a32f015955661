"""An Open Traffic Generator configuration in this project's terms.

snappi (the OTG model's own Python package) parses and validates the body a client posts; this
module then reads the validated document and maps what it implements (docs/otg.md, "What maps
to what"): ports to ranks, RoCEv2 peers and QPs with their stateful flows to traffic patterns,
the per-port RoCEv2 options to the transport section, layer 1's speed to the host links. Any
other part of the model is refused unless it holds its default, which asks for nothing: snappi
serializes every default, so a client that never touched a field still sends it.

Errors are OTG `Error` bodies (code, kind, errors[]) whose lines name the object path, as
`devices[0].rocev2.ipv4_interfaces[0].ib_mtu: ...`.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.otg.model import (
    ECN,
    IB_MTUS,
    SPEEDS,
    UNIT_BYTES,
    VERBS,
    CapturePlan,
    OtgError,
    OtgPlan,
    Port,
    Qp,
    Reader,
    RocFlow,
)
from emulator.otg.pause import pause_flows
from emulator.otg.plain import plain_flows
from emulator.otg.port_options import PortSettings, per_port, transport_section


def parse(body: bytes | str) -> dict[str, Any]:
    """The posted configuration, validated by snappi, as the JSON document snappi writes back
    (every default filled in)."""
    import snappi

    try:
        raw = json.loads(body)
    except ValueError as exc:
        raise OtgError([f"config: not JSON: {exc}"]) from None
    if not isinstance(raw, dict):
        raise OtgError(["config: expected a JSON object"])
    config = snappi.Config()
    try:
        config.deserialize(raw)
        config.validate()
    except Exception as exc:  # snappi raises TypeError/ValueError/Exception with its message
        raise OtgError([f"config: {' '.join(str(exc).split())}"]) from None
    document: dict[str, Any] = json.loads(config.serialize())
    return document


def plan(
    document: Mapping[str, Any], ranks: int, line_rate_bps: float, *, layer1_sets_rate: bool = True
) -> OtgPlan:
    """Map a parsed configuration onto a fabric of `ranks` ranks whose hosts send at
    `line_rate_bps`, or at layer1's speed where it sets the host links (`layer1_sets_rate`: an
    emulated or simulated Clos, not a switch under test's NICs). OtgError lists every problem."""
    r = Reader()
    r.rest(
        document,
        "config",
        "Config",
        ("ports", "devices", "stateful_flows", "options", "layer1", "flows", "captures"),
    )
    ports = _ports(r, document.get("ports", []), ranks)
    link_gbps, pfc = _layer1(r, document.get("layer1", []), ports)
    addresses = _devices(r, document.get("devices", []), ports)
    qps = _qps(r, document.get("devices", []), addresses)
    settings = per_port(r, document.get("options", {}), ports)
    flows = _flows(r, document.get("stateful_flows", {}), ports, qps, settings)
    rate = link_gbps * 1e9 if layer1_sets_rate and link_gbps is not None else line_rate_bps
    pauses = pause_flows(r, document.get("flows", []), ports, rate)
    plains = plain_flows(r, document.get("flows", []), ports, addresses, rate)
    capture = _captures(r, document.get("captures", []), ports)
    names = [f.name for f in flows] + [f.name for f in pauses] + [f.name for f in plains]
    for name in {n for n in names if names.count(n) > 1}:
        r.refuse("flows", f"{name!r} names two flows (stateful or not: names are unique)")
    transport, dcqcn, percent = transport_section(r, qps, settings)
    if r.errors:
        raise OtgError(r.errors)
    return OtgPlan(
        ports=ports,
        qps=tuple(qps.values()),
        flows=flows,
        pause_flows=pauses,
        plain_flows=plains,
        capture=capture,
        transport=transport,
        dcqcn=dcqcn,
        dcqcn_percent=percent,
        link_gbps=link_gbps,
        line_rate_bps=rate,
        pfc=pfc,
        addresses={port: address for port, address, _ in addresses.values()},
        warnings=tuple(r.warnings),
    )


def _ports(r: Reader, items: Sequence[Mapping[str, Any]], ranks: int) -> tuple[Port, ...]:
    """Ports are ranks in the order listed, or the rank a location `rank:N` names."""
    out: list[Port] = []
    taken: dict[int, str] = {}
    for i, port in enumerate(items):
        path = f"ports[{i}]"
        r.rest(port, path, "Port", ("name", "location"))
        location = str(port.get("location", "") or "")
        rank = i
        if location.startswith("rank:"):
            try:
                rank = int(location[5:])
            except ValueError:
                r.refuse(f"{path}.location", f"{location!r}: expected rank:N")
                continue
        if not 0 <= rank < ranks:
            r.refuse(
                f"{path}.location" if location.startswith("rank:") else path,
                f"rank {rank} is not one of the fabric's {ranks} ranks",
            )
            continue
        if rank in taken:
            r.refuse(f"{path}.location", f"rank {rank} is port {taken[rank]!r}'s already")
            continue
        taken[rank] = port["name"]
        out.append(Port(port["name"], rank, location))
    return tuple(out)


def _layer1(
    r: Reader, items: Sequence[Mapping[str, Any]], ports: Sequence[Port]
) -> tuple[float | None, bool | None]:
    speeds: set[float] = set()
    pfc: bool | None = None
    names = {p.name for p in ports}
    for i, l1 in enumerate(items):
        path = f"layer1[{i}]"
        r.rest(
            l1,
            path,
            "Layer1",
            ("name", "port_names", "speed", "flow_control", "mtu"),
            # the PHY's settings: there is no PHY to set in an emulated or simulated fabric
            ("auto_negotiate", "ieee_media_defaults", "auto_negotiation", "media", "promiscuous"),
        )
        for j, name in enumerate(l1.get("port_names", [])):
            if name not in names:
                r.refuse(f"{path}.port_names[{j}]", f"{name!r} is not a port")
        if "speed" in l1:
            speed = SPEEDS.get(l1["speed"])
            if speed is None:
                r.refuse(f"{path}.speed", f"{l1['speed']} is not a speed this tester knows")
            else:
                speeds.add(speed)
        flow_control = l1.get("flow_control")
        if flow_control:
            choice = flow_control.get("choice")
            if choice == "ieee_802_1qbb":
                pfc = True
                r.rest(
                    flow_control.get("ieee_802_1qbb", {}),
                    f"{path}.flow_control.ieee_802_1qbb",
                    "Layer1Ieee8021qbb",
                    (),
                )
            elif choice is not None:
                r.refuse(f"{path}.flow_control.choice", f"{choice}: only ieee_802_1qbb (PFC)")
    if len(speeds) > 1:
        r.refuse("layer1", f"ports at different speeds {sorted(speeds)} Gb/s: one host link rate")
    return (next(iter(speeds)) if speeds else None), pfc


def _devices(
    r: Reader, items: Sequence[Mapping[str, Any]], ports: Sequence[Port]
) -> dict[str, tuple[str, str, str]]:
    """IPv4 interface name -> (its port, its address, its device's name)."""
    names = {p.name for p in ports}
    out: dict[str, tuple[str, str, str]] = {}
    by_address: dict[str, str] = {}
    for i, device in enumerate(items):
        path = f"devices[{i}]"
        r.rest(device, path, "Device", ("name", "ethernets", "rocev2"))
        for j, eth in enumerate(device.get("ethernets", [])):
            epath = f"{path}.ethernets[{j}]"
            # mac and mtu: a rank's interface has the fabric's own (docs/otg.md)
            r.rest(
                eth,
                epath,
                "DeviceEthernet",
                ("name", "connection", "ipv4_addresses"),
                ("mac", "mtu"),
            )
            connection = eth.get("connection", {})
            port = (
                connection.get("port_name")
                if connection.get("choice", "port_name") == "port_name"
                else None
            )
            if port is None:
                r.refuse(f"{epath}.connection", "expected a port_name connection")
                continue
            if port not in names:
                r.refuse(f"{epath}.connection.port_name", f"{port!r} is not a port")
                continue
            for k, ip in enumerate(eth.get("ipv4_addresses", [])):
                ipath = f"{epath}.ipv4_addresses[{k}]"
                # gateway and prefix: the fabric routes between ranks (docs/otg.md)
                r.rest(ip, ipath, "DeviceIpv4", ("name", "address"), ("gateway", "prefix"))
                address = ip.get("address", "")
                try:
                    ipaddress.IPv4Address(address)
                except ValueError:
                    r.refuse(f"{ipath}.address", f"{address!r} is not an IPv4 address")
                    continue
                if address in by_address:
                    r.refuse(f"{ipath}.address", f"{address} is {by_address[address]!r}'s already")
                    continue
                by_address[address] = ip["name"]
                out[ip["name"]] = (port, address, device.get("name", ""))
    return out


def _qps(
    r: Reader,
    devices: Sequence[Mapping[str, Any]],
    addresses: Mapping[str, tuple[str, str, str]],
) -> dict[str, Qp]:
    port_of_address = {address: port for port, address, _ in addresses.values()}
    out: dict[str, Qp] = {}
    for i, device in enumerate(devices):
        roce = device.get("rocev2")
        if not roce:
            continue
        path = f"devices[{i}].rocev2"
        r.rest(roce, path, "DeviceRocev2Peer", ("ipv4_interfaces",))
        for j, iface in enumerate(roce.get("ipv4_interfaces", [])):
            ipath = f"{path}.ipv4_interfaces[{j}]"
            r.rest(iface, ipath, "Rocev2V4Interface", ("ipv4_name", "ib_mtu", "peers"))
            own = addresses.get(iface.get("ipv4_name", ""))
            if own is None:
                r.refuse(f"{ipath}.ipv4_name", f"{iface.get('ipv4_name')!r} is no device's IPv4")
                continue
            mtu = int(iface.get("ib_mtu", 1024))
            if mtu < IB_MTUS[0]:  # said; its QPs are still read, for their own problems
                r.refuse(f"{ipath}.ib_mtu", f"{mtu} is below the smallest IB path MTU (256)")
            elif mtu not in IB_MTUS:
                # OTG allows custom sizes (sonic-mgmt's RoCEv2 tests ask 5000); RoCE payloads
                # are IB path MTUs (IBTA vol. 1 9.7), so the largest one not above it
                fitted = max(m for m in IB_MTUS if m <= mtu)
                r.warnings.append(
                    f"{ipath}.ib_mtu: {mtu} is not an IB path MTU {list(IB_MTUS)}: its QPs "
                    f"carry {fitted} bytes per packet"
                )
                mtu = fitted
            port, src_ip, _ = own
            for k, peer in enumerate(iface.get("peers", [])):
                ppath = f"{ipath}.peers[{k}]"
                r.rest(peer, ppath, "Rocev2V4Peer", ("name", "destination_ip_address", "qps"))
                dst_ip = peer.get("destination_ip_address", "")
                dst_port = port_of_address.get(dst_ip)
                if dst_port is None:
                    r.refuse(
                        f"{ppath}.destination_ip_address",
                        f"{dst_ip} is no device's IPv4 address (a peer is one of these ports)",
                    )
                    continue
                if dst_port == port:
                    r.refuse(f"{ppath}.destination_ip_address", f"{dst_ip} is its own port's")
                    continue
                for m, qp in enumerate(peer.get("qps", [])):
                    qpath = f"{ppath}.qps[{m}]"
                    made = _qp(
                        r, qp, qpath, port, peer.get("name", ""), src_ip, dst_ip, dst_port, mtu
                    )
                    if made is None:
                        continue
                    if made.name in out:
                        r.refuse(f"{qpath}.qp_name", f"{made.name!r} names another QP already")
                        continue
                    out[made.name] = made
    return out


def _qp(
    r: Reader,
    qp: Mapping[str, Any],
    path: str,
    port: str,
    peer: str,
    src_ip: str,
    dst_ip: str,
    dst_port: str,
    mtu: int,
) -> Qp | None:
    r.rest(qp, path, "Rocev2QPs", ("qp_name", "connection_type"))
    connection = qp.get("connection_type", {})
    if connection.get("choice", "reliable_connection") != "reliable_connection":
        r.refuse(f"{path}.connection_type.choice", "only reliable_connection (RC)")
        return None
    params = connection.get("reliable_connection", {})
    cpath = f"{path}.connection_type.reliable_connection"
    r.rest(
        params,
        cpath,
        "Rocev2QPParameters",
        ("source_qp_number", "dscp", "ecn", "udp_source_port"),
        # no memory is registered: a WRITE's RETH carries the engine's own (docs/otg.md)
        ("virtual_address", "remote_key"),
    )
    sport = int(params.get("udp_source_port", 49152))
    if sport == 0:
        r.refuse(f"{cpath}.udp_source_port", "0 is not a source port")
        return None
    return Qp(
        name=qp["qp_name"],
        port=port,
        peer=peer,
        peer_port=dst_port,
        src_ipv4=src_ip,
        dst_ipv4=dst_ip,
        source_qp_number=int(params.get("source_qp_number", 2)),
        dscp=int(params.get("dscp", 24)),
        ecn=ECN[params.get("ecn", "ect_1")],
        udp_sport=sport,
        ib_mtu=mtu,
    )


def _flows(
    r: Reader,
    stateful: Mapping[str, Any],
    ports: Sequence[Port],
    qps: Mapping[str, Qp],
    settings: Mapping[str, PortSettings],
) -> tuple[RocFlow, ...]:
    if not stateful:
        return ()
    r.rest(stateful, "stateful_flows", "StatefulFlow", ("choice", "rocev2"))
    names = {p.name for p in ports}
    out: list[RocFlow] = []
    seen: set[str] = set()
    used_qps: dict[str, str] = {}
    for i, group in enumerate(stateful.get("rocev2", [])):
        gpath = f"stateful_flows.rocev2[{i}]"
        r.rest(group, gpath, "Rocev2Flows", ("tx_ports",))
        for j, tx in enumerate(group.get("tx_ports", [])):
            tpath = f"{gpath}.tx_ports[{j}]"
            r.rest(tx, tpath, "Rocev2TxPorts", ("port_name", "transmit_type"))
            port = tx.get("port_name", "")
            if port not in names:
                r.refuse(f"{tpath}.port_name", f"{port!r} is not a port")
                continue
            transmit = tx.get("transmit_type", {})
            if transmit.get("choice", "target_line_rate") != "target_line_rate":
                r.refuse(f"{tpath}.transmit_type.choice", "only target_line_rate")
                continue
            line = transmit.get("target_line_rate", {})
            lpath = f"{tpath}.transmit_type.target_line_rate"
            r.rest(line, lpath, "Rocev2TargetLineRate", ("value", "flows"))
            rate = int(line.get("value", 98))
            if rate <= 0:
                r.refuse(f"{lpath}.value", f"{rate}%: nothing would be sent")
                continue
            flows = line.get("flows", [])
            port_settings = settings.get(port)
            for k, flow in enumerate(flows):
                fpath = f"{lpath}.flows[{k}]"
                made = _flow(r, flow, fpath, port, qps, rate, len(flows), port_settings)
                if made is None:
                    continue
                if made.name in seen:
                    r.refuse(f"{fpath}.name", f"{made.name!r} names another flow already")
                    continue
                if made.qp.name in used_qps:
                    r.refuse(
                        f"{fpath}.tx_endpoint",
                        f"QP {made.qp.name!r} carries flow {used_qps[made.qp.name]!r} already",
                    )
                    continue
                seen.add(made.name)
                used_qps[made.qp.name] = made.name
                out.append(made)
    return tuple(out)


def _flow(
    r: Reader,
    flow: Mapping[str, Any],
    path: str,
    port: str,
    qps: Mapping[str, Qp],
    rate: int,
    port_flows: int,
    settings: PortSettings | None,
) -> RocFlow | None:
    r.rest(
        flow,
        path,
        "Rocev2Flow",
        ("tx_endpoint", "rx_endpoint", "name", "rocev2_verb", "message_size", "message_size_unit"),
    )
    # the verb and the size first: each problem of the flow is said, not only the first
    ok = True
    verb = flow.get("rocev2_verb", {}).get("choice", "write")
    if verb not in VERBS:
        r.refuse(
            f"{path}.rocev2_verb.choice",
            f"{verb} is not implemented: the transport sends SEND and RDMA WRITE without "
            "immediate data, and no READ",
        )
        ok = False
    size = int(flow.get("message_size", 1)) * UNIT_BYTES[flow.get("message_size_unit", "mb")]
    if size <= 0:
        r.refuse(f"{path}.message_size", "0: a message carries at least one byte")
        ok = False
    qp = qps.get(flow.get("tx_endpoint", ""))
    if qp is None:
        r.refuse(f"{path}.tx_endpoint", f"{flow.get('tx_endpoint')!r} is not a QP")
        return None
    if qp.port != port:
        r.refuse(f"{path}.tx_endpoint", f"QP {qp.name!r} is on port {qp.port!r}, not {port!r}")
        return None
    rx = flow.get("rx_endpoint")
    if rx and rx != qp.peer_port and rx not in qps:
        r.refuse(f"{path}.rx_endpoint", f"{rx!r} is neither the peer's port nor a QP on it")
        return None
    if rx and rx in qps and qps[rx].port != qp.peer_port:
        r.refuse(f"{path}.rx_endpoint", f"QP {rx!r} is not on the peer's port {qp.peer_port!r}")
        return None
    if not ok:
        return None
    return RocFlow(
        name=flow["name"],
        qp=qp,
        message_bytes=size,
        verb=VERBS[verb],
        port_rate_percent=rate,
        port_flows=port_flows,
        dcqcn=settings.enable_dcqcn if settings is not None else True,
    )


MAX_SNAP_BYTES = 65535


def _captures(
    r: Reader, items: Sequence[Mapping[str, Any]], ports: Sequence[Port]
) -> CapturePlan | None:
    """captures[]: one capture of the listed ports' packets per run (pcap, the largest
    packet_size of them; none given: whole packets)."""
    names = {p.name for p in ports}
    captured: list[str] = []
    snap = 0
    for i, capture in enumerate(items):
        path = f"captures[{i}]"
        # overwrite: each run's capture replaces the last one's anyway
        r.rest(
            capture,
            path,
            "Capture",
            ("name", "port_names", "format", "packet_size"),
            ("overwrite",),
        )
        if capture.get("format", "pcap") != "pcap":
            r.refuse(f"{path}.format", f"{capture.get('format')}: only pcap")
        for j, port in enumerate(capture.get("port_names", [])):
            if port not in names:
                r.refuse(f"{path}.port_names[{j}]", f"{port!r} is not a port")
            elif port not in captured:
                captured.append(port)
        size = capture.get("packet_size")
        snap = max(snap, int(size) if size else MAX_SNAP_BYTES)
    if not captured:
        return None
    if snap < 64:
        r.refuse("captures", f"packet_size {snap}: at least 64 bytes (the headers)")
    return CapturePlan(tuple(captured), min(snap, MAX_SNAP_BYTES))
