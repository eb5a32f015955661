"""The per-port RoCEv2 options (options.per_port_options[].protocols[].rocev2) as the transport
section: CNP, ACK and NAK classes, the retransmission timeout, DCQCN's settings in NVIDIA's terms
(docs/otg.md, "What maps to what"). One set for every port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.otg.model import ECN, Port, Qp, Reader


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


def per_port(
    r: Reader, options: Mapping[str, Any], ports: Sequence[Port]
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


def _rocev2_settings(r: Reader, settings: Mapping[str, Any], path: str) -> PortSettings:
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


def transport_section(
    r: Reader, qps: Mapping[str, Qp], settings: Mapping[str, PortSettings]
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
