"""The OTG server's vocabulary: what a configuration becomes (ports as ranks, QPs, flows, the
plan), the OTG Error it answers with, and the reader that walks a configuration collecting every
problem by its object path."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

IB_MTUS = (256, 512, 1024, 2048, 4096)  # IBTA vol. 1 9.7 (path MTU values); OTG allows others
UNIT_BYTES = {"bytes": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
ECN = {"non_ect": "not_ect", "ect_0": "ect0", "ect_1": "ect1", "ce": "ce"}
VERBS = {"send": "send", "write": "write"}  # OTG verb -> the transport's
# layer1 speed names (the OTG model's Layer1.speed enum) -> Gb/s
SPEEDS = {
    "speed_10_fd_mbps": 0.01,
    "speed_10_hd_mbps": 0.01,
    "speed_100_fd_mbps": 0.1,
    "speed_100_hd_mbps": 0.1,
    **{f"speed_{n}_gbps": float(n) for n in (1, 10, 25, 40, 50, 100, 200, 400, 800)},
}


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
class PauseFlow:
    """A flow of PFC pause frames from one port (the scenario's run.pfc_frames)."""

    name: str
    port: str
    rx_port: str | None
    pause_quanta: dict[str, int]  # priority -> quanta of 512 bit times
    frames_per_s: float  # target time
    start_us: float
    stop_us: float | None


@dataclass(frozen=True)
class PlainFlow:
    """A plain flow: IPv4/UDP datagrams at a fixed rate from one port to another (the
    scenario's streams). Neither packets nor duration: continuous (as long as the start)."""

    name: str
    port: str
    rx_port: str
    frame_bytes: int
    dscp: int
    ecn: int  # the raw two-bit field
    udp_sport: int
    udp_sport_step: int
    udp_sport_count: int
    udp_dport: int
    rate_percent: float | None
    rate_pps: float | None
    packets: int | None
    duration_us: float | None
    start_us: float


@dataclass(frozen=True)
class CapturePlan:
    """captures[]: the ports whose packets a run keeps (once capture is started on them)."""

    ports: tuple[str, ...]
    snap_bytes: int


@dataclass(frozen=True)
class OtgPlan:
    """What a configuration asks of a run, in this project's terms."""

    ports: tuple[Port, ...]
    qps: tuple[Qp, ...]
    flows: tuple[RocFlow, ...]
    pause_flows: tuple[PauseFlow, ...] = ()
    plain_flows: tuple[PlainFlow, ...] = ()
    capture: CapturePlan | None = None
    transport: dict[str, Any] = field(default_factory=dict)  # the transport section's keys
    dcqcn: dict[str, Any] = field(default_factory=dict)  # transport.dcqcn's keys, from OTG's
    # percentages of line rate in the DCQCN settings (converted once the line rate is known)
    dcqcn_percent: dict[str, float] = field(default_factory=dict)
    link_gbps: float | None = None  # layer1 speed of every port
    line_rate_bps: float = 0.0  # the ranks' line rate the configuration runs at (plan())
    pfc: bool | None = None  # layer1 flow_control ieee_802_1qbb: True
    addresses: dict[str, str] = field(default_factory=dict)  # port -> its device's IPv4
    warnings: tuple[str, ...] = ()  # what the configuration asks that a user may not expect

    def port(self, name: str) -> Port:
        return next(p for p in self.ports if p.name == name)


def model_defaults(class_name: str) -> dict[str, Any]:
    import snappi.snappi as model

    cls = getattr(model, class_name, None)
    return dict(getattr(cls, "_DEFAULTS", {}) or {})


def same_value(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):
        return bool(value) == bool(default)
    return str(value) == str(default)


class Reader:
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
        defaults = model_defaults(class_name)
        skip = set(used) | set(no_effect)
        for key, value in obj.items():
            if key in skip:
                continue
            if value in ([], {}, None):
                continue
            if key in defaults and same_value(value, defaults[key]):
                continue
            self.refuse(f"{path}.{key}", "not implemented by this tester (docs/otg.md)")
