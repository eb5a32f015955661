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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

IB_MTUS = (256, 512, 1024, 2048, 4096)  # IBTA vol. 1 9.7 (path MTU values); OTG allows others
UNIT_BYTES = {"bytes": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
ECN = {"non_ect": "not_ect", "ect_0": "ect0", "ect_1": "ect1", "ce": "ce"}
VERBS = {"send": "send", "write": "write"}  # OTG verb -> the transport's
# layer1 speed names -> Gb/s
SPEEDS = {
    f"speed_{n}_{unit}": float(n) / (1000.0 if unit == "mbps" else 1.0)
    for n, unit in (
        (10, "mbps"),
        (100, "mbps"),
        (1000, "mbps"),
        (10, "gbps"),
        (25, "gbps"),
        (40, "gbps"),
        (50, "gbps"),
        (100, "gbps"),
        (200, "gbps"),
        (400, "gbps"),
        (800, "gbps"),
    )
}
SPEEDS["speed_1_gbps"] = 1.0


class OtgError(Exception):
    """An OTG Error body: HTTP status, kind (validation | internal) and one line per problem."""

    def __init__(self, errors: Sequence[str], *, kind: str = "validation", code: int = 400):
        super().__init__("; ".join(errors))
        self.errors = list(errors)
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "kind": self.kind, "errors": self.errors}


@dataclass(frozen=True)
class Port:
    name: str
    rank: int
    location: str


@dataclass(frozen=True)
class Qp:
    """A RoCEv2 QP of a device's IPv4 interface toward one peer."""

    name: str
    port: str  # the tester port it sends from
    peer: str  # the peer's name
    peer_port: str  # the tester port of the peer's address
    src_ipv4: str
    dst_ipv4: str
    source_qp_number: int
    dscp: int
    ecn: str  # the transport's spelling (not_ect, ect0, ect1, ce)
    udp_sport: int
    ib_mtu: int


@dataclass(frozen=True)
class RocFlow:
    """A stateful RoCEv2 flow: one QP posting messages at its port's target line rate."""

    name: str
    qp: Qp
    message_bytes: int
    verb: str
    port_rate_percent: int  # the tx port's target line rate
    port_flows: int  # flows sharing that rate
    dcqcn: bool


@dataclass(frozen=True)
class OtgPlan:
    """What a configuration asks of a run, in this project's terms."""

    ports: tuple[Port, ...]
    qps: tuple[Qp, ...]
    flows: tuple[RocFlow, ...]
    transport: dict[str, Any] = field(default_factory=dict)  # the transport section's keys
    dcqcn: dict[str, Any] = field(default_factory=dict)  # transport.dcqcn's keys, from OTG's
    # percentages of line rate in the DCQCN settings (converted once the line rate is known)
    dcqcn_percent: dict[str, float] = field(default_factory=dict)
    link_gbps: float | None = None  # layer1 speed of every port
    pfc: bool | None = None  # layer1 flow_control ieee_802_1qbb: True
    addresses: dict[str, str] = field(default_factory=dict)  # port -> its device's IPv4
    warnings: tuple[str, ...] = ()  # what the configuration asks that a user may not expect

    def port(self, name: str) -> Port:
        return next(p for p in self.ports if p.name == name)


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


def _defaults(class_name: str) -> dict[str, Any]:
    import snappi.snappi as model

    cls = getattr(model, class_name, None)
    return dict(getattr(cls, "_DEFAULTS", {}) or {})


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):
        return bool(value) == bool(default)
    return str(value) == str(default)


class _Reader:
    """Walks the document and collects every problem (all of them, not the first)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def refuse(self, path: str, why: str) -> None:
        self.errors.append(f"{path}: {why}")

    def rest(
        self,
        obj: Mapping[str, Any],
        path: str,
        class_name: str,
        used: Iterable[str],
        no_effect: Iterable[str] = (),
    ) -> None:
        """Refuse every key of `obj` not used nor documented as without effect, unless it holds
        the model's default (or is an empty list or object)."""
        defaults = _defaults(class_name)
        skip = set(used) | set(no_effect)
        for key, value in obj.items():
            if key in skip:
                continue
            if value in ([], {}, None):
                continue
            if key in defaults and _same(value, defaults[key]):
                continue
            self.refuse(f"{path}.{key}", "not implemented by this tester (docs/otg.md)")


def plan(document: Mapping[str, Any], ranks: int) -> OtgPlan:
    """Map a parsed configuration onto a fabric of `ranks` ranks (OtgError lists every problem)."""
    r = _Reader()
    r.rest(
        document,
        "config",
        "Config",
        ("ports", "devices", "stateful_flows", "options", "layer1", "flows"),
    )
    for key in ("flows",):
        if document.get(key):
            r.refuse(
                key,
                "plain (stateless) flows are not implemented yet: use stateful_flows.rocev2",
            )
    ports = _ports(r, document.get("ports", []), ranks)
    link_gbps, pfc = _layer1(r, document.get("layer1", []), ports)
    addresses = _devices(r, document.get("devices", []), ports)
    qps = _qps(r, document.get("devices", []), addresses)
    settings = _per_port(r, document.get("options", {}), ports)
    flows = _flows(r, document.get("stateful_flows", {}), ports, qps, settings)
    transport, dcqcn, percent = _transport(r, qps, settings)
    if r.errors:
        raise OtgError(r.errors)
    return OtgPlan(
        ports=ports,
        qps=tuple(qps.values()),
        flows=flows,
        transport=transport,
        dcqcn=dcqcn,
        dcqcn_percent=percent,
        link_gbps=link_gbps,
        pfc=pfc,
        addresses={port: address for port, address, _ in addresses.values()},
        warnings=tuple(r.warnings),
    )


def _ports(r: _Reader, items: Sequence[Mapping[str, Any]], ranks: int) -> tuple[Port, ...]:
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
    r: _Reader, items: Sequence[Mapping[str, Any]], ports: Sequence[Port]
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
    r: _Reader, items: Sequence[Mapping[str, Any]], ports: Sequence[Port]
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
    r: _Reader,
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
    r: _Reader,
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


@dataclass(frozen=True)
class PortSettings:
    """A port's RoCEv2 options (options.per_port_options[].protocols[].rocev2) in our terms."""

    path: str  # where they were given, for errors
    transport: dict[str, Any]
    dcqcn: dict[str, Any]
    dcqcn_percent: dict[str, float]
    enable_dcqcn: bool


# OTG Rocev2.DCQCN -> transport.dcqcn (emulator/transport/dcqcn_params.py, NVIDIA's names), by
# the OTG model's own descriptions (models device/rocev2: "Unit is microseconds", "percentage of
# rate"): (our key, factor) for plain values; percentages of line rate are converted to Mb/s once
# the line rate is known (OtgPlan.dcqcn_percent)
DCQCN_VALUES: dict[str, tuple[str, type, float]] = {
    # alpha keeps g/1024 of itself per period (NVIDIA dce_tcp_g)
    "alpha_g": ("dce_tcp_g", int, 1.0),
    "initial_alpha": ("initial_alpha_value", int, 1.0),
    "alpha_update_period": ("dce_tcp_rtt_us", float, 1.0),
    "rate_reduction_time_period": ("rate_reduce_monitor_period_us", float, 1.0),
    "rate_increment_time": ("rpg_time_reset_us", float, 1.0),
    # NVIDIA's rpg_byte_reset counts 64-byte units; OTG's default 32767 is NVIDIA's default
    "rate_increment_byte_counter": ("rpg_byte_reset_bytes", int, 64.0),
    "rate_increment_threshold": ("rpg_threshold", int, 1.0),
}
DCQCN_PERCENT: dict[str, str] = {
    "initial_rate_after_first_cnp": "rate_to_set_on_first_cnp_mbps",
    "minimum_rate_limmit": "rpg_min_rate_mbps",
    "additive_increment_rate": "rpg_ai_rate_mbps",
    "hyper_increment_rate": "rpg_hai_rate_mbps",
}


def _per_port(
    r: _Reader, options: Mapping[str, Any], ports: Sequence[Port]
) -> dict[str, PortSettings]:
    r.rest(
        options,
        "options",
        "ConfigOptions",
        ("per_port_options",),
        # which ports a session may take over, and starting protocols at set_config: no effect
        # here (the ports are this tester's; QPs come up with the traffic)
        ("port_options", "protocol_options"),
    )
    names = {p.name for p in ports}
    out: dict[str, PortSettings] = {}
    for i, per_port in enumerate(options.get("per_port_options", [])):
        path = f"options.per_port_options[{i}]"
        r.rest(per_port, path, "PerPortOptions", ("port_name", "protocols"))
        port = per_port.get("port_name", "")
        if port not in names:
            r.refuse(f"{path}.port_name", f"{port!r} is not a port")
            continue
        for j, protocol in enumerate(per_port.get("protocols", [])):
            ppath = f"{path}.protocols[{j}]"
            if protocol.get("choice") != "rocev2":
                r.refuse(f"{ppath}.choice", f"{protocol.get('choice')}: only rocev2")
                continue
            if port in out:
                r.refuse(ppath, f"a second rocev2 entry for port {port!r}")
                continue
            out[port] = _rocev2_settings(r, protocol.get("rocev2", {}), f"{ppath}.rocev2")
    return out


def _rocev2_settings(r: _Reader, settings: Mapping[str, Any], path: str) -> PortSettings:
    r.rest(settings, path, "Rocev2PerPortSettings", ("cnp", "connection_type", "dcqcn_settings"))
    transport: dict[str, Any] = {}
    cnp = settings.get("cnp", {})
    if cnp:
        r.rest(
            cnp, f"{path}.cnp", "Rocev2CNP", ("choice", "ip_dscp", "ecn_value", "cnp_delay_timer")
        )
        transport["cnp_dscp"] = int(cnp.get("ip_dscp", {}).get("value", 48))
        transport["cnp_ecn"] = ECN[cnp.get("ecn_value", "ect_1")]
    delay_us = float(cnp.get("cnp_delay_timer", 55)) if cnp else None
    connection = settings.get("connection_type", {})
    if connection:
        cpath = f"{path}.connection_type"
        if connection.get("choice", "reliable_connection") != "reliable_connection":
            r.refuse(f"{cpath}.choice", "only reliable_connection (RC)")
        rc = connection.get("reliable_connection", {})
        rpath = f"{cpath}.reliable_connection"
        r.rest(
            rc,
            rpath,
            "Rocev2AckAndNak",
            ("ack", "nak", "enable_retransmission_timeout", "retransmission_timeout_value"),
            # the transport retries until the run ends; a message that never completes counts
            # in message_fail (docs/otg.md)
            ("retransmission_retry_count",),
        )
        ack, nak = rc.get("ack", {}), rc.get("nak", {})
        for name, part in (("ack", ack), ("nak", nak)):
            if part:
                r.rest(
                    part,
                    f"{rpath}.{name}",
                    f"Rocev2{name.upper()}",
                    ("choice", "ip_dscp", "ecn_value"),
                )
        if ack:
            transport["ack_dscp"] = int(ack.get("ip_dscp", {}).get("value", 0))
            transport["ack_ecn"] = ECN[ack.get("ecn_value", "ect_1")]
        if nak and ack:
            # the transport sends ACKs and NAKs in one class (transport.ack_dscp, ack_ecn)
            for key, ours in (("ip_dscp", "ack_dscp"), ("ecn_value", "ack_ecn")):
                value = (
                    nak.get(key, {}).get("value", 0)
                    if key == "ip_dscp"
                    else ECN[nak.get(key, "ect_1")]
                )
                if value != transport[ours]:
                    r.refuse(
                        f"{rpath}.nak.{key}",
                        f"{value} differs from ack.{key} {transport[ours]}: ACKs and NAKs "
                        "travel in one class here",
                    )
        if not rc.get("enable_retransmission_timeout", True):
            r.refuse(
                f"{rpath}.enable_retransmission_timeout",
                "false: the transport always retransmits after its timeout",
            )
        timeout_ms = rc.get("retransmission_timeout_value")
        if timeout_ms is not None:
            if int(timeout_ms) <= 0:
                r.refuse(f"{rpath}.retransmission_timeout_value", f"{timeout_ms} ms: must be > 0")
            else:
                transport["retransmit_timeout_s"] = int(timeout_ms) / 1000.0
    dcqcn: dict[str, Any] = {}
    percent: dict[str, float] = {}
    enable = True
    given = settings.get("dcqcn_settings", {})
    if given:
        dpath = f"{path}.dcqcn_settings"
        r.rest(
            given,
            dpath,
            "Rocev2DCQCN",
            (
                "enable_dcqcn",
                "maximum_rate_decrement_at_time",
                "clamp_target_rate",
                *DCQCN_VALUES,
                *DCQCN_PERCENT,
            ),
        )
        enable = bool(given.get("enable_dcqcn", True))
        for key, (ours, kind, factor) in DCQCN_VALUES.items():
            if key in given:  # 64-bit integers arrive as strings (the OTG JSON mapping)
                dcqcn[ours] = kind(float(given[key]) * factor)
        for key, ours in DCQCN_PERCENT.items():
            if key in given:
                percent[ours] = float(given[key])
        if "maximum_rate_decrement_at_time" in given:
            # "the maximum that line rate can be decreased" per reduction, in percent: one
            # decrease keeps at least the rest (NVIDIA's rpg_min_dec_fac, our reading of it)
            dcqcn["rpg_min_dec_fac"] = 100 - int(given["maximum_rate_decrement_at_time"])
        if "clamp_target_rate" in given:
            dcqcn["clamp_tgt_rate"] = bool(given["clamp_target_rate"])
    if delay_us is not None:
        dcqcn["min_time_between_cnps_us"] = delay_us
    return PortSettings(path, transport, dcqcn, percent, enable)


def _flows(
    r: _Reader,
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
    r: _Reader,
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


def _transport(
    r: _Reader, qps: Mapping[str, Qp], settings: Mapping[str, PortSettings]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
    """One transport section for the whole tester: the ports' RoCEv2 options must agree (ports
    without any take the others'), and so must the QPs' ECN field."""
    transport: dict[str, Any] = {}
    dcqcn: dict[str, Any] = {}
    percent: dict[str, float] = {}
    first: dict[str, str] = {}  # key -> the path that gave it
    for port_settings in settings.values():
        for section, values in (
            ("", port_settings.transport),
            ("dcqcn.", port_settings.dcqcn),
            ("dcqcn%", port_settings.dcqcn_percent),
        ):
            target = transport if section == "" else dcqcn if section == "dcqcn." else percent
            for key, value in values.items():
                if key in target and target[key] != value:
                    r.refuse(
                        port_settings.path,
                        f"its {section.rstrip('.%')}{'.' if section else ''}{key} {value} differs "
                        f"from {target[key]} at {first[key]}: the transport's settings are one "
                        "set for every port",
                    )
                    continue
                target[key] = value
                first.setdefault(key, port_settings.path)
    ecns = {qp.ecn for qp in qps.values()}
    if len(ecns) > 1:
        r.refuse("devices", f"QPs with different ecn {sorted(ecns)}: data ECN is one setting here")
    elif ecns:
        transport["data_ecn"] = next(iter(ecns))
    if qps:
        transport["path_mtu_bytes"] = max(qp.ib_mtu for qp in qps.values())
    return transport, dcqcn, percent
