"""Scenario section `transport:`: queue-pair settings, DCQCN parameters and switch ECN thresholds.

DcqcnParams lives in emulator/transport/dcqcn_params.py (re-exported here).

DCQCN fields keep NVIDIA's parameter names (so a user can copy values from a NIC's
configuration) with the unit added to the name. Sources:
- NVIDIA, "DCQCN CC Parameters" (DOCA SDK documentation, ConnectX-4 and later), also published as
  Mellanox community DOC-2790 "DCQCN Parameters";
- Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015 (the algorithm);
- HPCC simulator configuration (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019,
  github.com/alibaba-edu/High-Precision-Congestion-Control, mix/config.txt) for ECN thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from emulator.config import param
from emulator.transport.congestion import CONGESTION_CONTROLS
from emulator.transport.dcqcn_params import (
    ALPHA_SCALE,
    HPCC_CONFIG,
    NVIDIA_DCQCN,
    RPG_BYTE_RESET_DEFAULT_BYTES,
    RPG_BYTE_RESET_UNIT_BYTES,
    DcqcnParams,
)
from emulator.transport.wire import ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT

# DCQCN's parameters and sources are re-exported: they are part of `transport:`.
__all__ = [
    "ALPHA_SCALE",
    "DATA_ECN_BITS",
    "HPCC_CONFIG",
    "NVIDIA_DCQCN",
    "RPG_BYTE_RESET_DEFAULT_BYTES",
    "RPG_BYTE_RESET_UNIT_BYTES",
    "DcqcnParams",
    "EcnMarkingParams",
    "TransportParams",
    "hpcc_ecn_marking",
]

# The most packets past the cumulative acknowledgement a SACK's bitmap describes (its 16
# 64-bit words, emulator/transport/packets.py SACK_MAX_WORDS): the selective window's bound.
SACK_MAX_PACKETS = 1024

# The two ECN bits of the IP ToS byte (RFC 3168) for each data_ecn choice.
DATA_ECN_BITS = {"not_ect": ECN_NOT_ECT, "ect1": ECN_ECT1, "ect0": ECN_ECT0, "ce": ECN_CE}


@dataclass(frozen=True)
class EcnMarkingParams:
    """Switch ECN marking (RED-like, as DCQCN's congestion point): probability 0 at or below Kmin,
    linear to Pmax at Kmax, 1 above Kmax. Defaults are the HPCC production values for 100 Gb/s."""

    kmin_bytes: int = param(
        400_000,
        doc="Marking starts above this queue length",
        unit="bytes",
        source=HPCC_CONFIG,
        min=0,
    )
    kmax_bytes: int = param(
        1_600_000,
        doc="Queue length at which marking reaches pmax",
        unit="bytes",
        source=HPCC_CONFIG,
        min=0,
    )
    pmax: float = param(0.2, doc="Marking probability at kmax", source=HPCC_CONFIG, min=0, max=1)

    def __post_init__(self) -> None:
        if self.kmax_bytes < self.kmin_bytes:
            raise ValueError("kmax_bytes: must be at least kmin_bytes")


# HPCC simulator production thresholds by link speed (Kmin, Kmax in bytes, Pmax); the HPCC
# config writes them in KB per speed (KMAX_MAP/KMIN_MAP/PMAX_MAP).
HPCC_ECN_THRESHOLDS: dict[int, tuple[int, int, float]] = {
    25_000_000_000: (100_000, 400_000, 0.2),
    100_000_000_000: (400_000, 1_600_000, 0.2),
    400_000_000_000: (800_000, 3_200_000, 0.2),
}


def hpcc_ecn_marking(link_rate_bps: float) -> EcnMarkingParams:
    """The HPCC production thresholds for the nearest tabulated speed at or above the link rate
    (the fastest entry for faster links)."""
    speeds = sorted(HPCC_ECN_THRESHOLDS)
    chosen = next((s for s in speeds if s >= link_rate_bps), speeds[-1])
    kmin, kmax, pmax = HPCC_ECN_THRESHOLDS[chosen]
    return EcnMarkingParams(kmin_bytes=kmin, kmax_bytes=kmax, pmax=pmax)


@dataclass(frozen=True)
class TransportParams:
    """Queue-pair behaviour and congestion control of every rank's RoCEv2 transport."""

    congestion_control: str = param(
        "dcqcn", doc="Congestion control by registry name: dcqcn or none (line rate)"
    )
    path_mtu_bytes: int = param(
        4096,
        doc="Payload bytes per packet (IB path MTU: 256, 512, 1024, 2048 or 4096); 4096 needs an "
        "interface MTU of about 4200 or more",
        unit="bytes",
        source="InfiniBand Architecture Specification vol. 1, path MTU",
        min=256,
        max=4096,
    )
    ack_every_packets: int = param(
        16, doc="Sender sets AckReq on every Nth packet and on the last of a message", min=1
    )
    window_packets: int = param(512, doc="Most unacknowledged packets per QP", min=1, max=(1 << 22))
    retransmit_timeout_s: float = param(
        0.004,
        doc="Go back to the oldest unacknowledged packet after this long without progress",
        unit="s",
        min=0,
        min_exclusive=True,
    )
    reliability: Literal["go_back_n", "selective"] = param(
        "go_back_n",
        doc="go_back_n: the responder takes packets in PSN order only and NAKs the first gap; "
        "the requester resends everything from the oldest unacknowledged packet (RC, IBTA vol. "
        "1 9.7.5). selective: the responder keeps out-of-order packets within the window (a "
        "bitmap), acknowledges cumulatively plus what it holds beyond (a SACK, "
        "docs/multipath.md), and the requester resends only what is missing, once "
        "reorder_allowance_packets later packets were acknowledged past it or at the timeout",
        source="OCP Multipath Reliable Connection (MRC) 1.0 and Ultra Ethernet 1.0 PDS: "
        "selective acknowledgement for sprayed packets",
    )
    reorder_allowance_packets: int = param(
        64,
        doc="selective: how many packets acknowledged beyond a missing one make it lost "
        "(before that it is taken as reordered, not resent). Spraying over queues of different "
        "depth reorders by tens of packets: moe_mix_ecmp sprayed at both tiers in simulation "
        "reorders by up to 81, and an allowance of 8 resent 149,899 packets that were only "
        "late (64: none)",
        source="RFC 6675 section 4 (IsLost after DupThresh, 3, SACKed segments above), scaled "
        "for spraying: docs/multipath.md",
        min=1,
    )
    entropy: Literal["per_qp", "per_packet"] = param(
        "per_qp",
        doc="per_qp: every packet of a queue pair carries its UDP source port, so ECMP keeps "
        "it on one path; per_packet: each packet's source port is one of entropy_values "
        "values of the queue pair in turn (by PSN), so hashing switches spread it over paths "
        "(the ICRC covers each)",
        source="OCP MRC 1.0: 128-256 entropy values per queue pair; Meta MetaRoCE (2026): "
        "per-path UDP source ports",
    )
    entropy_values: int = param(
        128,
        doc="per_packet: source ports per queue pair, consecutive from its own (wrapping in "
        "49152-65535)",
        min=2,
        max=16384,
    )
    dscp: int = param(
        26,
        doc="DSCP of data packets (of every QP qp_dscp does not name); CNPs use cnp_dscp",
        min=0,
        max=63,
    )
    qp_dscp: tuple[int, ...] = param(
        (),
        doc="traffic class per queue pair: DSCP of the data of a peer's QP 0, 1, ... (QPs past "
        "the list use dscp); with qps_per_peer 2, [26, 24] puts each peer's second QP in class 24",
    )
    ack_dscp: int | None = param(
        None, doc="DSCP of ACKs and NAKs (default: dscp, as they follow their data)", min=0, max=63
    )
    data_ecn: Literal["not_ect", "ect0", "ect1", "ce"] = param(
        "ect0",
        doc="ECN field data packets leave with: ect0 (ECN-capable, what DCQCN expects), ect1, "
        "not_ect (switches drop instead of marking), ce (already marked: every packet asks for "
        "a CNP)",
    )
    cnp_dscp: int = param(
        48,
        doc="DSCP of CNPs",
        source=NVIDIA_DCQCN + "; a ConnectX-4 Lx CNP capture carries ToS 0xc2",
        min=0,
        max=63,
    )
    ack_ecn: Literal["not_ect", "ect0", "ect1", "ce"] = param(
        "not_ect",
        doc="ECN field ACKs and NAKs leave with (a tester sets it: OTG's ack/nak ecn_value); "
        "an ECN-capable one may be marked on the way, which changes nothing",
    )
    cnp_ecn: Literal["not_ect", "ect0", "ect1", "ce"] = param(
        "not_ect",
        doc="ECN field CNPs leave with (OTG's cnp ecn_value; a ConnectX-4 Lx sends ect0, ToS 0xc2)",
    )
    dcqcn: DcqcnParams = param(
        doc="DCQCN parameters (used when congestion_control is dcqcn)",
        default_factory=DcqcnParams,
    )

    def data_dscp(self, qp: int) -> int:
        """The DSCP of a queue pair's data (qp: its index among a peer's QPs)."""
        return self.qp_dscp[qp] if qp < len(self.qp_dscp) else self.dscp

    @property
    def ack_dscp_value(self) -> int:
        return self.dscp if self.ack_dscp is None else self.ack_dscp

    @property
    def data_ecn_bits(self) -> int:
        return DATA_ECN_BITS[self.data_ecn]

    @property
    def ack_ecn_bits(self) -> int:
        return DATA_ECN_BITS[self.ack_ecn]

    @property
    def cnp_ecn_bits(self) -> int:
        return DATA_ECN_BITS[self.cnp_ecn]

    def __post_init__(self) -> None:
        for value in self.qp_dscp:
            if not 0 <= value <= 63:
                raise ValueError(f"qp_dscp: {value} is not a DSCP (0..63)")
        mtu = self.path_mtu_bytes
        if mtu not in (256, 512, 1024, 2048, 4096):
            raise ValueError("path_mtu_bytes: must be one of 256, 512, 1024, 2048, 4096")
        if self.reliability == "selective" and self.window_packets > SACK_MAX_PACKETS:
            raise ValueError(
                f"window_packets: {self.window_packets} is more than a selective "
                f"acknowledgement's bitmap holds ({SACK_MAX_PACKETS} packets)"
            )
        if self.congestion_control not in CONGESTION_CONTROLS:
            names = ", ".join(sorted(CONGESTION_CONTROLS))
            raise ValueError(
                f"congestion_control: unknown {self.congestion_control!r} (known: {names})"
            )
