"""The OTG server's state between requests: the configuration, the protocols' and the traffic's
state, and the run a traffic start makes.

A traffic start writes the scenario (emulator.otg.scenario) and runs it with `emulate run` as a
child process the service owns, and returns when the run has ended: the traffic has then run
its duration in target time, whatever the wall time was (a simulator runs slower than real time,
the emulated fabric at its time dilation factor). A stop while the run goes interrupts it as
Ctrl-C does (partial results, the fabric released); closing the service does the same.
Metrics read the last run's results; rates are those of its traffic while the traffic state is
`start`, and zero once stopped, as a tester's are.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from emulator.otg import metrics
from emulator.otg.config import parse, plan
from emulator.otg.model import OtgError, OtgPlan
from emulator.otg.scenario import TrafficOptions, write_scenario

STOP_GRACE_S = 60.0  # an interrupted run writes its partial results and releases its fabric


def _error(message: str) -> OtgError:
    return OtgError([message])


@dataclass(frozen=True)
class ServiceOptions:
    base: Mapping[str, Any]  # the base scenario's document
    ranks: int  # its fabric's ranks
    link_gbps: float  # its ranks' line rate
    work_dir: Path  # runs go to work_dir/runs/NNN
    traffic: TrafficOptions = field(default_factory=TrafficOptions)
    backend: str | None = None  # `emulate run --backend`
    tdf: float | None = None  # `emulate run --tdf`
    netns_prefix: str | None = None  # `emulate run --netns-prefix`
    gateway_macs: Mapping[int, str] = field(default_factory=dict)  # rank -> its switch port's


class OtgService:
    def __init__(self, options: ServiceOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._document: dict[str, Any] | None = None
        self._plan: OtgPlan | None = None
        self._protocols_up = False
        self._transmitting = False
        self._child: subprocess.Popen[bytes] | None = None
        self._runs = 0
        self._last_run: Path | None = None
        self._stopping = False
        self._tables = metrics.RunTables()
        self._capturing: set[str] = set()  # ports whose capture is started

    # -- configuration -------------------------------------------------------------------------
    def set_config(self, body: bytes) -> dict[str, Any]:
        document = parse(body)
        fabric = self.options.base.get("fabric") or {}
        made = plan(
            document,
            self.options.ranks,
            self.options.link_gbps * 1e9,
            layer1_sets_rate=fabric.get("kind", "clos") == "clos",
        )
        self._check_addresses(made)
        warnings = self._warnings(made)
        with self._lock:
            if self._child is not None:
                raise _error("traffic is running: stop it before setting a configuration")
            self._document, self._plan = document, made
            self._protocols_up = self._transmitting = False
            self._last_run, self._tables = None, metrics.RunTables()
            self._capturing = set()
        return {"warnings": warnings}

    def _check_addresses(self, made: OtgPlan) -> None:
        """Toward a switch under test the ranks send from the fabric's addresses: a device's
        address must be its port's (the switch routes by them)."""
        fabric = self.options.base.get("fabric") or {}
        if fabric.get("kind") != "dut":
            return
        given = [str(a).split("/")[0] for a in fabric.get("addresses", [])]
        errors = []
        for port in made.ports:
            address = made.addresses.get(port.name)
            if address is not None and port.rank < len(given) and address != given[port.rank]:
                errors.append(
                    f"devices: port {port.name!r} (rank {port.rank}) has {address}, but the "
                    f"fabric's interface for it has {given[port.rank]}"
                )
        if errors:
            raise OtgError(errors)

    def _warnings(self, made: OtgPlan) -> list[str]:
        """Settings that are valid but cripple the traffic: snappi's DCQCN defaults give a QP
        0.002% of line rate after its first CNP."""
        out = list(made.warnings)
        link_bps = made.line_rate_bps
        percent = made.dcqcn_percent.get("rate_to_set_on_first_cnp_mbps")
        if percent is not None and 0 < percent < 1:
            out.append(
                f"dcqcn_settings.initial_rate_after_first_cnp: {percent:g}% of "
                f"{link_bps / 1e9:g} Gb/s: a QP's first CNP sets it to "
                f"{percent / 100 * link_bps / 1e6:g} Mb/s (the value is in percent of line "
                "rate; 0 keeps the line rate until the first decrease)"
            )
        return out

    def get_config(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._document or {})

    # -- control -------------------------------------------------------------------------------
    def set_control_state(self, body: bytes) -> dict[str, Any]:
        raw = _request(body, "ControlState", "control_state")
        choice = raw.get("choice")
        if choice == "protocol":
            protocol = raw.get("protocol", {})
            if protocol.get("choice") != "all":
                raise _error(
                    f"control_state.protocol.choice: {protocol.get('choice')} is not "
                    "implemented (only all: the QPs come up with the traffic)"
                )
            with self._lock:
                self._require_config()
                self._protocols_up = protocol.get("all", {}).get("state") == "start"
            return {"warnings": []}
        if choice == "traffic":
            transmit = raw.get("traffic", {}).get("flow_transmit", {})
            wanted = list(transmit.get("flow_names", []))
            action = transmit.get("state")
            if action == "start":
                return self._start(wanted)
            if action == "stop":
                self._stop()
                return {"warnings": []}
            raise _error(
                f"control_state.traffic.flow_transmit.state: {action} is not implemented "
                "(start and stop)"
            )
        if choice == "port" and raw.get("port", {}).get("choice") == "capture":
            return self._capture_state(raw["port"].get("capture", {}))
        raise _error(
            f"control_state.choice: {choice} is not implemented (protocol, traffic, port capture)"
        )

    def _capture_state(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Start or stop capturing on ports (all configured ones when none is named): a
        started capture records the next traffic start's packets."""
        with self._lock:
            made = self._require_config()
            configured = made.capture.ports if made.capture is not None else ()
            names = list(request.get("port_names", [])) or list(configured)
            missing = [n for n in names if n not in configured]
            if missing:
                raise _error(
                    f"control_state.port.capture.port_names: {missing} have no capture in the "
                    "configuration (captures[].port_names)"
                )
            if request.get("state") == "start":
                self._capturing.update(names)
            else:
                self._capturing.difference_update(names)
        return {"warnings": []}

    def _require_config(self) -> OtgPlan:
        if self._plan is None:
            raise _error("no configuration: POST /config first")
        return self._plan

    def _start(self, names: list[str]) -> dict[str, Any]:
        with self._lock:
            made = self._require_config()
            if self._child is not None:
                raise _error("traffic is running already")
            stateful = {f.name for f in made.flows} | {f.name for f in made.plain_flows}
            known = stateful | {f.name for f in made.pause_flows}
            unknown = [n for n in names if n not in known]
            if unknown:
                raise _error(
                    f"control_state.traffic.flow_transmit.flow_names: {unknown} are not flows "
                    "of the configuration"
                )
            if not (stateful & set(names) if names else stateful):
                raise _error(
                    "control_state.traffic.flow_transmit: a start needs a stateful RoCEv2 flow "
                    "or a plain flow (PFC pause flows run beside them)"
                )
            self._runs += 1
            folder = self.options.work_dir / "runs" / f"{self._runs:03d}"
            scenario = write_scenario(
                self.options.base,
                made,
                self.options.traffic,
                folder,
                flow_names=names,
                capture_ports=sorted(self._capturing),
            )
            out_dir = folder / "results"
            command = [sys.executable, "-m", "emulator.cli", "run", str(scenario)]
            command += ["--out", str(out_dir), "--no-progress"]
            if self.options.backend:
                command += ["--backend", self.options.backend]
            if self.options.tdf:
                command += ["--tdf", f"{self.options.tdf:g}"]
            if self.options.netns_prefix:
                command += ["--netns-prefix", self.options.netns_prefix]
            log = open(folder / "run.log", "wb")  # noqa: SIM115 (closed when the run ends)
            # its own session: a Ctrl-C at the terminal reaches the server alone, which then
            # interrupts the run once (service.close), not twice
            self._child = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            child, self._stopping = self._child, False
            self._protocols_up = True  # the QPs come up with the traffic
            self._transmitting = True
        try:
            code = child.wait()
        finally:
            log.close()
            with self._lock:
                self._child = None
                stopped = self._stopping
                if out_dir.is_dir():
                    self._last_run = out_dir
                    self._tables = metrics.RunTables.read(out_dir)
                if stopped:
                    self._transmitting = False
        if code not in (0, 1) and not (stopped and code == EXIT_INTERRUPTED):
            with self._lock:
                self._transmitting = False
            lines = (folder / "run.log").read_text(errors="replace").strip().splitlines()
            if code == EXIT_BAD_INPUT:
                # what the run refused (a backend that cannot do what the configuration asks):
                # its own one line, as a validation error
                said = [line for line in lines if ": error: " in line] or lines[-1:]
                raise OtgError([f"the run refused it: {said[-1]}"])
            raise OtgError(
                [f"the run ended with exit code {code}: " + " | ".join(lines[-3:])],
                kind="internal",
                code=500,
            )
        return {"warnings": [f"results: {out_dir}"]}

    def _stop(self) -> None:
        with self._lock:
            self._transmitting = False
            child = self._child
            if child is None:
                return
            self._stopping = True
        _interrupt(child)

    def close(self) -> None:
        """Stop a run that goes (its fabric released as after Ctrl-C)."""
        self._stop()

    # -- monitoring ----------------------------------------------------------------------------
    def get_metrics(self, body: bytes) -> dict[str, Any]:
        raw = _request(body, "MetricsRequest", "metrics_request")
        choice = raw.get("choice", "port")
        with self._lock:
            made = self._require_config()
            tables, on, up = self._tables, self._transmitting, self._protocols_up
        if choice == "rocev2_flow":
            columns = raw.get("rocev2_flow", {}).get("per_qp", {}).get("column_names", [])
            rows = metrics.per_qp(made, tables, transmitting=on, columns=columns)
            return {"choice": "rocev2_flow_per_qp_metrics", "rocev2_flow_per_qp_metrics": rows}
        if choice == "rocev2_ipv4":
            request = raw.get("rocev2_ipv4", {}).get("per_peer", {})
            rows = metrics.per_peer(
                made,
                protocols_up=up,
                peer_names=request.get("peer_names", []),
                columns=request.get("column_names", []),
            )
            return {
                "choice": "rocev2_ipv4_per_peer_metrics",
                "rocev2_ipv4_per_peer_metrics": rows,
            }
        if choice == "port":
            request = raw.get("port", {})
            names = request.get("port_names", [])
            unknown = [n for n in names if n not in {p.name for p in made.ports}]
            if unknown:
                raise _error(f"metrics_request.port.port_names: {unknown} are not ports")
            rows = metrics.ports(
                made,
                tables,
                transmitting=on,
                capturing=self._capturing_now(),
                link_gbps=made.line_rate_bps / 1e9,
                port_names=names,
                columns=request.get("column_names", []),
            )
            return {"choice": "port_metrics", "port_metrics": rows}
        if choice == "flow":
            request = raw.get("flow", {})
            names = request.get("flow_names", [])
            flows = {f.name for f in made.pause_flows} | {f.name for f in made.plain_flows}
            unknown = [n for n in names if n not in flows]
            if unknown:
                raise _error(
                    f"metrics_request.flow.flow_names: {unknown} are not flows (stateful RoCEv2 "
                    "flows report under rocev2_flow)"
                )
            columns = request.get("metric_names", [])
            rows = metrics.pause_flows(
                made, tables, transmitting=on, flow_names=names, columns=columns
            ) + metrics.plain_flows(
                made, tables, transmitting=on, flow_names=names, columns=columns
            )
            return {"choice": "flow_metrics", "flow_metrics": rows}
        raise _error(f"metrics_request.choice: {choice} is not implemented")

    def _capturing_now(self) -> set[str]:
        with self._lock:
            return set(self._capturing)

    def get_capture(self, body: bytes) -> bytes:
        """POST /monitor/capture: the last run's packets at a port, a pcap file (target time)."""
        raw = _request(body, "CaptureRequest", "capture_request")
        port = raw.get("port_name", "")
        with self._lock:
            made = self._require_config()
            last = self._last_run
        if port not in {p.name for p in made.ports}:
            raise _error(f"capture_request.port_name: {port!r} is not a port")
        path = None if last is None else last / "capture" / f"rank-{made.port(port).rank}.pcap"
        if path is None or not path.is_file():
            raise _error(
                f"capture_request.port_name: no capture of {port!r}: configure captures[] for it, "
                "start its capture (control_state port.capture), then start traffic"
            )
        return path.read_bytes()

    def get_states(self, body: bytes) -> dict[str, Any]:
        raw = _request(body, "StatesRequest", "states_request")
        if raw.get("choice") != "ipv4_neighbors":
            raise _error(f"states_request.choice: {raw.get('choice')} is not implemented")
        with self._lock:
            document = self._document or {}
            made = self._require_config()
        wanted = raw.get("ipv4_neighbors", {}).get("ethernet_names", [])
        rows = []
        for device in document.get("devices", []):
            for eth in device.get("ethernets", []):
                if wanted and eth.get("name") not in wanted:
                    continue
                port = (eth.get("connection") or {}).get("port_name")
                rank = next((p.rank for p in made.ports if p.name == port), None)
                mac = self.options.gateway_macs.get(rank) if rank is not None else None
                for ip in eth.get("ipv4_addresses", []):
                    row = {"ethernet_name": eth["name"], "ipv4_address": ip.get("gateway")}
                    # the switch port the rank's link ends at: fixed on a Clos; toward a switch
                    # under test only ARP during a run tells: unresolved (docs/otg.md)
                    if mac is not None:
                        row["link_layer_address"] = mac
                    rows.append(row)
        return {"choice": "ipv4_neighbors", "ipv4_neighbors": rows}


def _request(body: bytes, model: str, what: str) -> dict[str, Any]:
    """A request body as JSON, validated by snappi's `model` class (OTG errors name `what`)."""
    import snappi

    try:
        raw = json.loads(body)
        getattr(snappi, model)().deserialize(raw)
    except Exception as exc:  # snappi raises TypeError/ValueError/Exception with its message
        raise _error(f"{what}: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise _error(f"{what}: expected a JSON object")
    return raw


def _interrupt(child: subprocess.Popen[bytes]) -> None:
    """Ctrl-C the run (it writes partial results and releases what it made); kill it only if
    it has not ended after STOP_GRACE_S."""
    try:
        child.send_signal(signal.SIGINT)
    except ProcessLookupError:
        return
    try:
        child.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
