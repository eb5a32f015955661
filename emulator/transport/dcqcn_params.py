"""DCQCN's parameters (the reaction and notification points), with their public sources.

Apart from the rest of `transport:` (emulator/transport/params.py) so that the DCQCN model
(emulator/transport/dcqcn.py) imports its parameters without importing the congestion-control
registry that TransportParams validates its `congestion_control` name against.
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

from emulator.config import param

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
