"""OTG plain flows (`flows[]` whose packet is Ethernet / IPv4 / UDP): the scenario's streams
(emulator.transport.stream), stateless datagrams at a fixed rate, counted at the receiving port
for loss, reordering, ECN CE and latency: what the sonic-mgmt PFC and ECN tests send.

The frames leave with the fabric's own addresses (the sending rank's MAC and IPv4, the route's
next hop): a flow's Ethernet addresses and PFC queue are taken as written and not put on the
wire (a warning says so), its IPv4 addresses must be the ports' own where the devices name them.
The ECN value is the raw two-bit field (RFC 3168: 1 is ECT(1), 2 ECT(0), 3 CE); OTG's names for
them are only labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.otg.model import PlainFlow, Port, Reader, model_defaults, same_value
from emulator.otg.pause import RATE_UNITS_BPS, flow_duration
from emulator.transport.packets import ROCEV2_UDP_PORT
from emulator.transport.stream import MIN_FRAME_BYTES, PREAMBLE_GAP_BYTES

HEADERS = ["ethernet", "ipv4", "udp"]
# the header classes' fields this tester reads; any other must hold the pattern's default
_USED = {
    "ethernet": ("src", "dst", "pfc_queue", "ether_type"),
    "ipv4": ("priority", "src", "dst"),
    "udp": ("src_port", "dst_port"),
}
_CLASS = {"ethernet": "Ethernet", "ipv4": "Ipv4", "udp": "Udp"}


def plain_flows(
    r: Reader,
    flows: Sequence[Mapping[str, Any]],
    ports: Sequence[Port],
    addresses: Mapping[str, tuple[str, str, str]],
    line_rate_bps: float,
) -> tuple[PlainFlow, ...]:
    """The plain flows among `flows` (PFC pause flows are emulator.otg.pause's)."""
    by_name = {p.name: p for p in ports}
    out = []
    for i, flow in enumerate(flows):
        headers = [h.get("choice") for h in flow.get("packet", [])]
        if headers == ["pfcpause"]:
            continue
        path = f"flows[{i}]"
        if headers != HEADERS:
            r.refuse(
                f"{path}.packet",
                f"{headers}: plain flows are [ethernet, ipv4, udp] here (or [pfcpause])",
            )
            continue
        made = _plain(r, flow, path, by_name, addresses, line_rate_bps)
        if made is not None:
            out.append(made)
    return tuple(out)


def _plain(
    r: Reader,
    flow: Mapping[str, Any],
    path: str,
    ports: Mapping[str, Port],
    addresses: Mapping[str, tuple[str, str, str]],
    line_rate_bps: float,
) -> PlainFlow | None:
    # metrics: what the tester reports; every counter is kept whatever it asks
    r.rest(
        flow, path, "Flow", ("name", "tx_rx", "packet", "size", "rate", "duration"), ("metrics",)
    )
    ends = _ends(r, flow.get("tx_rx", {}), f"{path}.tx_rx", ports, addresses)
    packet = flow["packet"]
    for k, name in enumerate(HEADERS):
        header = packet[k].get(name, {})
        _defaults_only(r, header, f"{path}.packet[{k}].{name}", name)
    eth, ip, udp = (packet[k].get(name, {}) for k, name in enumerate(HEADERS))
    if any(key in eth for key in ("src", "dst", "pfc_queue")):
        r.warnings.append(
            f"{path}.packet[0].ethernet: the frames carry the fabric's own MAC addresses, and "
            "their DSCP picks their class (the Ethernet addresses and pfc_queue are not sent)"
        )
    ether_type = _single(r, eth, "ether_type", f"{path}.packet[0].ethernet", 0x0800)
    if ether_type is not None and int(ether_type) != 0x0800:
        r.refuse(f"{path}.packet[0].ethernet.ether_type", f"{ether_type}: IPv4 is 0x0800")
    dscp, ecn = _priority(r, ip.get("priority", {}), f"{path}.packet[1].ipv4.priority")
    if ends is not None:
        _addresses(r, ip, f"{path}.packet[1].ipv4", ends, addresses)
    sports = _sports(r, udp, f"{path}.packet[2].udp")
    dport = _single(r, udp, "dst_port", f"{path}.packet[2].udp", 0)
    if (dport is not None and not 1 <= int(dport) <= 65535) or dport == ROCEV2_UDP_PORT:
        r.refuse(
            f"{path}.packet[2].udp.dst_port",
            f"{dport}: a plain flow's destination port is 1..65535 and not RoCEv2's 4791",
        )
        dport = None
    size = flow.get("size", {})
    choice = size.get("choice", "fixed")
    frame: int | None = int(size.get("fixed", 64))
    if choice != "fixed":
        r.refuse(f"{path}.size.choice", f"{choice}: only a fixed frame size here")
        frame = None
    elif frame is not None and frame < MIN_FRAME_BYTES:
        r.refuse(f"{path}.size.fixed", f"{frame}: a frame is {MIN_FRAME_BYTES} bytes or more")
        frame = None
    rate = _rate(r, flow.get("rate", {}), f"{path}.rate", frame or MIN_FRAME_BYTES)
    timing = flow_duration(r, flow.get("duration", {}), f"{path}.duration", line_rate_bps)
    if None in (ends, dscp, ecn, sports, dport, frame, rate, timing):
        return None
    assert ends is not None and sports is not None and rate is not None and timing is not None
    percent, pps = rate
    start_us, packets, duration_us = timing
    return PlainFlow(
        name=flow["name"],
        port=ends[0],
        rx_port=ends[1],
        frame_bytes=int(frame or 0),
        dscp=int(dscp or 0),
        ecn=int(ecn or 0),
        udp_sport=sports[0],
        udp_sport_step=sports[1],
        udp_sport_count=sports[2],
        udp_dport=int(dport or 0),
        rate_percent=percent,
        rate_pps=pps,
        packets=packets,
        duration_us=duration_us,
        start_us=start_us,
    )


def _ends(
    r: Reader,
    tx_rx: Mapping[str, Any],
    path: str,
    ports: Mapping[str, Port],
    addresses: Mapping[str, tuple[str, str, str]],
) -> tuple[str, str] | None:
    """(tx port, rx port): named as ports, or as devices' IPv4 interfaces (one each)."""
    choice = tx_rx.get("choice", "port")
    part = tx_rx.get(choice, {})
    if choice == "port":
        tx, rx = part.get("tx_name"), part.get("rx_names") or [part.get("rx_name")]
        rx = [n for n in rx if n]
    elif choice == "device":
        r.rest(part, f"{path}.device", "FlowRouter", ("tx_names", "rx_names", "mode"))
        txs, rxs = part.get("tx_names", []), part.get("rx_names", [])
        tx = addresses[txs[0]][0] if len(txs) == 1 and txs[0] in addresses else None
        rx = [addresses[n][0] for n in rxs if n in addresses]
        if tx is None or len(rx) != len(rxs):
            r.refuse(f"{path}.device", "expected one tx and one rx name of devices' IPv4")
            return None
    else:
        r.refuse(f"{path}.choice", f"{choice}: port or device")
        return None
    if tx not in ports:
        r.refuse(f"{path}.{choice}", f"{tx!r}: the tx end is not a port")
        return None
    if len(rx) != 1 or rx[0] not in ports:
        r.refuse(f"{path}.{choice}", f"{rx}: expected one receiving port")
        return None
    if rx[0] == tx:
        r.refuse(f"{path}.{choice}", f"{tx!r} sends to itself")
        return None
    return tx, rx[0]


def _defaults_only(r: Reader, header: Mapping[str, Any], path: str, name: str) -> None:
    """Refuse a header field this tester does not read unless it holds its default pattern."""
    for key, value in header.items():
        if key in _USED[name] or value in ({}, None):
            continue
        cls = f"PatternFlow{_CLASS[name]}{''.join(p.title() for p in key.split('_'))}"
        default = model_defaults(cls)
        if value.get("choice", "value") == "value" and same_value(
            value.get("value"), default.get("value")
        ):
            continue
        r.refuse(f"{path}.{key}", "not implemented by this tester (docs/otg.md)")


def _single(r: Reader, header: Mapping[str, Any], key: str, path: str, default: Any) -> Any:
    """A field's one value: `value`, or `values` with one item."""
    pattern = header.get(key)
    if not pattern:
        return default
    choice = pattern.get("choice", "value")
    if choice == "values" and len(pattern.get("values", [])) == 1:
        return pattern["values"][0]
    if choice != "value":
        r.refuse(f"{path}.{key}.choice", f"{choice}: one value per field here")
        return None
    return pattern.get("value", default)


def _priority(r: Reader, priority: Mapping[str, Any], path: str) -> tuple[int | None, int | None]:
    choice = priority.get("choice", "dscp")
    if choice != "dscp":
        r.refuse(f"{path}.choice", f"{choice}: give the DSCP and ECN (priority.dscp)")
        return None, None
    dscp = priority.get("dscp", {})
    phb = _single(r, dscp, "phb", f"{path}.dscp", 0)
    ecn = _single(r, dscp, "ecn", f"{path}.dscp", 0)
    return (None if phb is None else int(phb)), (None if ecn is None else int(ecn))


def _addresses(
    r: Reader,
    ip: Mapping[str, Any],
    path: str,
    ends: tuple[str, str],
    addresses: Mapping[str, tuple[str, str, str]],
) -> None:
    """A source or destination written must be the port's device address where one is known;
    else the rank's own address is used and a warning says so."""
    own = {port: address for port, address, _ in addresses.values()}
    for key, port in zip(("src", "dst"), ends, strict=True):
        value = _single(r, ip, key, path, None)
        if value is None:
            continue
        if port in own and value != own[port]:
            r.refuse(f"{path}.{key}", f"{value}: the address of port {port!r} is {own[port]}")
        elif port not in own:
            r.warnings.append(
                f"{path}.{key}: {value} is sent as rank {port!r}'s own address (the fabric "
                "routes those)"
            )


def _sports(r: Reader, udp: Mapping[str, Any], path: str) -> tuple[int, int, int] | None:
    """(first, step, count) of the source ports (value, one value, or increment)."""
    pattern = udp.get("src_port") or {}
    if pattern.get("choice") == "increment":
        inc = pattern.get("increment", {})
        start, step, count = (
            int(inc.get(k, d)) for k, d in (("start", 0), ("step", 1), ("count", 1))
        )
    else:
        value = _single(r, udp, "src_port", path, 49152)
        if value is None:
            return None
        start, step, count = int(value), 1, 1
    top = start + step * (count - 1)
    if not (start >= 1 and top <= 65535 and 1 <= count <= 1024 and step >= 0):
        r.refuse(
            f"{path}.src_port", f"ports {start}..{top} ({count}): 1..65535, at most 1024 of them"
        )
        return None
    return start, step, count


def _rate(
    r: Reader, rate: Mapping[str, Any], path: str, frame_bytes: int
) -> tuple[float | None, float | None] | None:
    """(percent of line rate, None) or (None, frames per second): bit rates count the wire,
    preamble and gap included, as a percentage does."""
    choice = rate.get("choice", "pps")
    value = float(rate.get(choice, 1000 if choice == "pps" else 100))
    if value <= 0:
        r.refuse(f"{path}.{choice}", f"{value:g}: no frame would be sent")
        return None
    if choice == "percentage":
        if value > 100:
            r.refuse(f"{path}.percentage", f"{value:g}: at most 100% of line rate")
            return None
        return value, None
    if choice == "pps":
        return None, value
    return None, value * RATE_UNITS_BPS[choice] / ((frame_bytes + PREAMBLE_GAP_BYTES) * 8)
