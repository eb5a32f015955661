"""Scenario section `transport:`: queue-pair settings, DCQCN parameters and switch ECN thresholds.

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
from emulator.transport.wire import ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT

NVIDIA_DCQCN = "NVIDIA DOCA 'DCQCN CC Parameters' (ConnectX-4 and later)"
HPCC_CONFIG = (
    "HPCC simulator config (Li et al., SIGCOMM 2019; alibaba-edu/High-Precision-Congestion-Control)"
)

# Fixed-point scale NVIDIA uses for dce_tcp_g and initial_alpha_value (10 fraction bits).
ALPHA_SCALE = 1024

# rpg_byte_reset: NVIDIA's firmware default is 32767 and the counter counts 64-byte units. Read as
# bytes it would be 32 KB, eight 4 KB packets between increase events, far from the DCQCN paper's
# byte counter B = 10 MB (Zhu et al., section 4); 32767 x 64 B = 2.1 MB is what a commercial
# RoCEv2 tester's DCQCN profile defaults to (Spirent TestCenter Rocev2DcqcnProfile, ByteResetInMb
# default 2, "megabytes sent since the last rate reduction").
RPG_BYTE_RESET_UNIT_BYTES = 64
RPG_BYTE_RESET_DEFAULT_BYTES = 32767 * RPG_BYTE_RESET_UNIT_BYTES


# The two ECN bits of the IP ToS byte (RFC 3168) for each data_ecn choice.
DATA_ECN_BITS = {"not_ect": ECN_NOT_ECT, "ect1": ECN_ECT1, "ect0": ECN_ECT0, "ce": ECN_CE}


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN reaction point (sender) and notification point (receiver) parameters."""

    dce_tcp_g: int = param(
        1019,
        doc="Alpha keeps dce_tcp_g/1024 of itself each update period; a CNP in the period adds "
        "(1024-dce_tcp_g)/1024 (the paper's g is (1024-dce_tcp_g)/1024)",
        unit="1/1024",
        source=NVIDIA_DCQCN,
        min=0,
        max=1023,
    )
    dce_tcp_rtt_us: float = param(
        1.0, doc="Alpha update period", unit="us", source=NVIDIA_DCQCN, min=0, min_exclusive=True
    )
    initial_alpha_value: int = param(
        1023,
        doc="Alpha used at the first CNP of a flow",
        unit="1/1024",
        source=NVIDIA_DCQCN,
        min=0,
        max=1023,
    )
    rate_reduce_monitor_period_us: float = param(
        4.0,
        doc="Rate-decrease check period, from a QP's first CNP: a CNP received in a period "
        "cuts the rate once at the period's end (0: at once)",
        unit="us",
        source=NVIDIA_DCQCN + "; HPCC ns-3 rdma-hw.cc CheckRateDecreaseMlx",
        min=0,
    )
    rate_to_set_on_first_cnp_mbps: float = param(
        0.0,
        doc="Current and target rate set when a QP's first CNP allocates its rate limiter "
        "(0: keep line rate until the first decrease check)",
        unit="Mb/s",
        source=NVIDIA_DCQCN,
        min=0,
    )
    rpg_min_dec_fac: int = param(
        50,
        doc="One decrease keeps at least this percentage of the current rate",
        unit="%",
        source=NVIDIA_DCQCN,
        min=0,
        max=100,
    )
    rpg_min_rate_mbps: float = param(
        1.0, doc="Lowest rate a QP is cut to", unit="Mb/s", source=NVIDIA_DCQCN, min=0
    )
    rpg_time_reset_us: float = param(
        300.0,
        doc="Rate-increase timer period",
        unit="us",
        source=NVIDIA_DCQCN,
        min=0,
        min_exclusive=True,
    )
    rpg_byte_reset_bytes: int = param(
        RPG_BYTE_RESET_DEFAULT_BYTES,
        doc="Rate-increase byte counter: bytes sent between increase events (NVIDIA's default "
        "32767 in 64-byte units, about 2 MB)",
        unit="bytes",
        source=NVIDIA_DCQCN + "; Spirent TestCenter Rocev2DcqcnProfile ByteResetInMb default 2",
        min=1,
    )
    rpg_threshold: int = param(
        1,
        doc="Increase events (per timer or byte counter) spent in fast recovery before additive "
        "increase; hyper increase once both counters passed it",
        source=NVIDIA_DCQCN,
        min=1,
    )
    rpg_ai_rate_mbps: float = param(
        5.0,
        doc="Additive increase step of the target rate",
        unit="Mb/s",
        source=NVIDIA_DCQCN,
        min=0,
    )
    rpg_hai_rate_mbps: float = param(
        50.0, doc="Hyper increase step of the target rate", unit="Mb/s", source=NVIDIA_DCQCN, min=0
    )
    clamp_tgt_rate: bool = param(
        False,
        doc="If true, every rate decrease sets the target rate to the current rate; if false, only "
        "the first decrease of a congestion episode and one after an increase event do",
        source=NVIDIA_DCQCN + "; behaviour as alibaba-edu HPCC ns-3 rdma-hw.cc (clamp target)",
    )
    clamp_tgt_rate_after_time_inc: bool = param(
        True,
        doc="Timer-driven increases (not only byte-counter ones) make the next decrease clamp the "
        "target rate",
        source=NVIDIA_DCQCN,
    )
    min_time_between_cnps_us: float = param(
        4.0,
        doc="Notification point: at most one CNP per QP in this interval",
        unit="us",
        source=NVIDIA_DCQCN,
        min=0,
    )

    @property
    def g(self) -> float:
        """The paper's alpha gain g."""
        return (ALPHA_SCALE - self.dce_tcp_g) / ALPHA_SCALE


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

    def __post_init__(self) -> None:
        for value in self.qp_dscp:
            if not 0 <= value <= 63:
                raise ValueError(f"qp_dscp: {value} is not a DSCP (0..63)")
        mtu = self.path_mtu_bytes
        if mtu not in (256, 512, 1024, 2048, 4096):
            raise ValueError("path_mtu_bytes: must be one of 256, 512, 1024, 2048, 4096")
        from emulator.transport.congestion import CONGESTION_CONTROLS

        if self.congestion_control not in CONGESTION_CONTROLS:
            names = ", ".join(sorted(CONGESTION_CONTROLS))
            raise ValueError(
                f"congestion_control: unknown {self.congestion_control!r} (known: {names})"
            )
