"""OTG flows of PFC pause frames (`flows[]` whose packet is one `pfcpause` header): the rank of
their tx port sends IEEE 802.1Qbb frames during the run (the scenario's `run.pfc_frames`,
docs/switch-tests.md). A switch under test pauses for them; the emulated Linux fabric does not,
and the simulator refuses them (the run says so).

Other plain flows (Ethernet/IPv4/UDP) are emulator.otg.plain's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.otg.model import PauseFlow, Port, Reader

PFC_FRAME_BYTES = 64  # IEEE 802.1Qbb: a MAC control frame, padded to the minimum
# on the wire with preamble and inter-frame gap (IEEE 802.3 clause 4: 8 + 12 bytes)
PFC_WIRE_BITS = (PFC_FRAME_BYTES + 20) * 8
PFC_DST = "01:80:c2:00:00:01"  # IEEE 802.1Qbb / 802.3 annex 31B: the MAC control address
RATE_UNITS_BPS = {"bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}


def pause_flows(
    r: Reader, flows: Sequence[Mapping[str, Any]], ports: Sequence[Port], line_rate_bps: float
) -> tuple[PauseFlow, ...]:
    by_name = {p.name: p for p in ports}
    out: list[PauseFlow] = []
    taken: dict[str, str] = {}
    for i, flow in enumerate(flows):
        path = f"flows[{i}]"
        headers = [h.get("choice") for h in flow.get("packet", [])]
        if headers != ["pfcpause"]:
            continue  # a plain flow (emulator.otg.plain)
        made = _pause_flow(r, flow, path, by_name, line_rate_bps)
        if made is None:
            continue
        if made.port in taken:
            r.refuse(
                f"{path}.tx_rx.port.tx_name",
                f"port {made.port!r} sends pause flow {taken[made.port]!r} already (one per port)",
            )
            continue
        taken[made.port] = made.name
        out.append(made)
    return tuple(out)


def _pause_flow(
    r: Reader,
    flow: Mapping[str, Any],
    path: str,
    ports: Mapping[str, Port],
    line_rate_bps: float,
) -> PauseFlow | None:
    # metrics: what the tester counts (frames sent); no effect on what is sent
    r.rest(
        flow, path, "Flow", ("name", "tx_rx", "packet", "size", "rate", "duration"), ("metrics",)
    )
    ok = True
    tx_rx = flow.get("tx_rx", {})
    port = tx_rx.get("port", {}).get("tx_name") if tx_rx.get("choice", "port") == "port" else None
    if port not in ports:
        r.refuse(f"{path}.tx_rx", f"{port!r}: expected a port tx_name naming a port")
        ok = False
    rx = tx_rx.get("port", {}).get("rx_name")
    header = flow["packet"][0].get("pfcpause", {})
    hpath = f"{path}.packet[0].pfcpause"
    # src: the frame leaves with its rank's interface MAC, as a NIC's own pause frames do
    r.rest(header, hpath, "FlowPfcPause", _PAUSE_FIELDS, ("src",))
    dst = _value(r, header, "dst", hpath, PFC_DST)
    if dst is not None and str(dst).lower() != PFC_DST:
        r.refuse(f"{hpath}.dst", f"{dst}: PFC frames go to {PFC_DST}")
        ok = False
    for key, standard in (("ether_type", 0x8808), ("control_op_code", 0x0101)):
        value = _value(r, header, key, hpath, standard)
        if value is not None and int(value) != standard:
            r.refuse(f"{hpath}.{key}", f"{value}: a PFC frame has {standard:#06x}")
            ok = False
    vector = _value(r, header, "class_enable_vector", hpath, 0)
    quanta: dict[str, int] = {}
    for priority in range(8):
        q = _value(r, header, f"pause_class_{priority}", hpath, 0)
        if vector is not None and q is not None and int(vector) >> priority & 1:
            quanta[str(priority)] = int(q)
    if vector is not None and not quanta:
        r.refuse(f"{hpath}.class_enable_vector", f"{vector}: enables no priority")
        ok = False
    size = flow.get("size", {})
    if size.get("choice", "fixed") != "fixed" or int(size.get("fixed", 64)) != PFC_FRAME_BYTES:
        r.refuse(f"{path}.size", f"a PFC frame is {PFC_FRAME_BYTES} bytes (fixed)")
        ok = False
    pps = _frames_per_s(r, flow.get("rate", {}), f"{path}.rate", line_rate_bps)
    timing = _timing(r, flow.get("duration", {}), f"{path}.duration", pps, line_rate_bps)
    if not ok or pps is None or timing is None or port is None:
        return None
    start_us, stop_us = timing
    return PauseFlow(
        name=flow["name"],
        port=port,
        rx_port=rx,
        pause_quanta=quanta,
        frames_per_s=pps,
        start_us=start_us,
        stop_us=stop_us,
    )


_PAUSE_FIELDS = (
    "dst",
    "ether_type",
    "control_op_code",
    "class_enable_vector",
    *(f"pause_class_{p}" for p in range(8)),
)


def _value(r: Reader, header: Mapping[str, Any], key: str, path: str, default: Any) -> Any:
    """A header field's single value (OTG patterns: `value`); counters and lists refused."""
    pattern = header.get(key)
    if not pattern:
        return default
    choice = pattern.get("choice", "value")
    if choice != "value":
        r.refuse(f"{path}.{key}.choice", f"{choice}: only one value per field here")
        return None
    return pattern.get("value", default)


def _frames_per_s(
    r: Reader, rate: Mapping[str, Any], path: str, line_rate_bps: float
) -> float | None:
    choice = rate.get("choice", "pps")
    if choice == "pps":
        pps = float(rate.get("pps", 1000))
    elif choice == "percentage":
        pps = float(rate.get("percentage", 100.0)) / 100.0 * line_rate_bps / PFC_WIRE_BITS
    else:
        pps = float(rate.get(choice, 0)) * RATE_UNITS_BPS[choice] / PFC_WIRE_BITS
    if pps <= 0:
        r.refuse(f"{path}.{choice}", "0: no frame would be sent")
        return None
    return pps


def _timing(
    r: Reader,
    duration: Mapping[str, Any],
    path: str,
    pps: float | None,
    line_rate_bps: float,
) -> tuple[float, float | None] | None:
    """(start, stop) in target microseconds from the run's start (OTG's seconds are the run's
    target time, as every time here)."""
    read = flow_duration(r, duration, path, line_rate_bps)
    if read is None:
        return None
    start_us, packets, length_us = read
    if packets is not None:
        return None if pps is None else (start_us, start_us + packets / pps * 1e6)
    return start_us, None if length_us is None else start_us + length_us


def flow_duration(
    r: Reader, duration: Mapping[str, Any], path: str, line_rate_bps: float
) -> tuple[float, int | None, float | None] | None:
    """A flow's `duration` as (start, packets, length in us): fixed_packets gives the packets,
    fixed_seconds the length, continuous neither (it runs as long as the start)."""
    choice = duration.get("choice", "continuous")
    if choice not in ("continuous", "fixed_seconds", "fixed_packets"):
        r.refuse(f"{path}.choice", f"{choice}: continuous, fixed_seconds or fixed_packets")
        return None
    part = duration.get(choice, {})
    # gap: the inter-frame gap, which the flow's rate already spaces
    r.rest(
        part,
        f"{path}.{choice}",
        {"continuous": "FlowContinuous", "fixed_seconds": "FlowFixedSeconds"}.get(
            choice, "FlowFixedPackets"
        ),
        ("delay", "seconds", "packets"),
        ("gap",),
    )
    start_us = delay_us(r, part.get("delay", {}), f"{path}.{choice}.delay", line_rate_bps)
    if start_us is None:
        return None
    if choice == "fixed_packets":
        return start_us, int(part.get("packets", 1)), None
    if choice == "fixed_seconds":
        return start_us, None, float(part.get("seconds", 1.0)) * 1e6
    return start_us, None, None


def delay_us(r: Reader, delay: Mapping[str, Any], path: str, line_rate_bps: float) -> float | None:
    if not delay:
        return 0.0
    choice = delay.get("choice", "bytes")
    value = float(delay.get(choice, 0))
    if choice == "nanoseconds":
        return value / 1e3
    if choice == "microseconds":
        return value
    if choice == "bytes":
        return value * 8 / line_rate_bps * 1e6
    r.refuse(f"{path}.choice", f"{choice}: bytes, nanoseconds or microseconds")
    return None
