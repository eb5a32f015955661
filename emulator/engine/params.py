"""Engine settings: time dilation, workers, ticks, GSO/GRO use, the native path, socket buffers.

Defaults come from what was measured on this class of machine (docs/architecture.md, "Data path speed"): uvloop timers tick in
about 1 ms steps (so pacing refills per millisecond tick), a 64 KB UDP GSO buffer is the unit of
one send, and GRO needs a socket that asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from emulator.config import param

OffloadChoice = Literal["auto", "on", "off"]
SendPath = Literal["udp_gso", "af_xdp"]


@dataclass(frozen=True)
class EngineParams:
    """How the engine runs a plan on real sockets."""

    tdf: float = param(
        1.0,
        doc="Time dilation factor: core timers run TDF times slower than the target fabric's and "
        "reported durations are divided by it (the fabric divides link rates by it)",
        min=1.0,
        internal=True,  # a scenario sets it as run.time_dilation
    )
    workers: int = param(
        0, doc="Worker processes (0: one per core, at most one per rank)", min=0, max=1024
    )
    tick_s: float = param(
        0.001,
        doc="Wall-clock period of the pacing/timer tick (uvloop timers resolve about 1 ms)",
        unit="s",
        min=0.0001,
        max=0.1,
    )
    # 4 ticks: on this 2-core VM a worker's ticks come 2.5 ms late at p99 and 6-7 ms at most
    # while it is 13% busy (timer and scheduling, not load); with 2 ticks (+ 1 of lateness
    # credit) those ticks lost 1-7% of what the rates allowed in a 4 s job, from run to run.
    # The burst it allows after idle is 4 ms of the rate in wall time: 4 ms / TDF of target
    # time (at TDF 1000, 200 KB at 400 Gb/s, a quarter of the 400G Kmin of 800 KB).
    burst_ticks: float = param(
        4.0,
        doc="Token-bucket depth of every queue pair's pacer, in ticks of its current rate",
        min=0.1,
        max=100.0,
    )
    # The NIC's transmit arbiter serves its queue pairs round robin; with one packet per turn
    # and every queue pair of an All-to-All backlogged, each packet was its own send, skb and
    # trip through the fabric's namespaces: the engine's CPU went per packet, not per byte
    # (0.7 of a core per delivered Gb/s at 16 ranks against 0.09 at 2). A turn of a few packets
    # (deficit round robin, Shreedhar & Varghese, SIGCOMM 1995) leaves as one GSO send. The NIC
    # still never exceeds line rate (the turn borrows from its next ticks' budget); what moves
    # is the order within it: runs of 32 KB at 400 Gb/s are 0.66 us, 4% of the 800 KB Kmin the
    # 400G ports mark from (fabrics/spec.py), and within the engine's tick lateness at the TDFs
    # it runs at. docs/fidelity.md compares the main job with and without it to the simulator.
    nic_quantum_bytes: int = param(
        32768,
        doc="Payload bytes a NIC's transmit arbiter gives one backlogged queue pair per turn "
        "(deficit round robin; at least one packet): its packets leave as one GSO send. The "
        "NIC's line rate holds over the turns; 0 or one packet's worth: packet by packet. The "
        "UDP send path only: an AF_XDP port's backlog bounds its turns (engine.send_path)",
        unit="bytes",
        min=0,
        max=1 << 16,
    )
    gso: OffloadChoice = param(
        "auto", doc="UDP GSO (one send per batch of segments): auto uses it when the kernel has it"
    )
    gro: OffloadChoice = param(
        "auto", doc="UDP GRO on the receive sockets: auto uses it when the kernel has it"
    )
    native: OffloadChoice = param(
        "auto",
        doc="The native (C) data path: bursts laid out with their ICRCs and sent, several GSO "
        "buffers per call, socket reads and ACKs in C (emulator/native/, built by ./setup.sh). "
        "auto uses it when it is built and passes its self-check at worker start, else the "
        "pure-Python path; on refuses to run without it; off is the Python path. The run's "
        "metadata says which ran and why (engine.data_path)",
    )
    native_drain: bool = param(
        True,
        doc="With the native path: the reads of in-order data that ends no message, and their "
        "ACKs, taken in C without a Python call per read (emulator/native/burst_drain.c; not "
        "with one-way latency stamps or per-packet entropy); off reads each in Python",
    )
    send_path: SendPath = param(
        "udp_gso",
        doc="How a rank's packets leave and arrive toward a switch under test: udp_gso (UDP "
        "sockets with GSO and GRO through the kernel's stack; HTB on each interface caps the "
        "rate) or af_xdp (opt-in: an XDP socket per interface, around the kernel's UDP stack "
        "and qdiscs, the rate capped at fabric.max_rate_gbps by the engine's own token bucket; "
        "fabric kind dut only, needs root, Linux >= 6.6 for a 4096-byte path MTU and the "
        "native module (emulator/native/, libxdp). An interface that cannot do it is refused "
        "at start in one line naming it and why; the run's metadata reports each port's "
        "counters (engine.af_xdp)",
    )
    af_xdp_zero_copy: bool = param(
        False,
        doc="af_xdp: bind in zero-copy mode (XDP_ZEROCOPY; the driver must support it, else the "
        "run is refused at start); off is copy mode, which every XDP-capable driver has",
    )
    af_xdp_mode: Literal["auto", "native", "generic"] = param(
        "auto",
        doc="af_xdp: how the XDP program attaches: native (in the driver), generic (after the "
        "driver builds an skb: slower, works everywhere) or auto (native when the driver has it)",
    )
    af_xdp_burst_bytes: int | None = param(
        None,
        doc="af_xdp: depth of the port's token bucket (what it may send back to back at line "
        "speed after idling), Ethernet framing included. Empty: four of the largest frames or "
        "200 us at fabric.max_rate_gbps, whichever is more. Any window of W seconds carries at "
        "most max_rate x W plus two depths on the wire",
        unit="bytes",
        min=1,
    )
    gso_max_segments: int = param(
        64,
        doc="Most segments in one GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or more)",
        source="Linux include/linux/udp.h UDP_MAX_SEGMENTS",
        min=1,
        max=128,
    )
    socket_buffer_bytes: int = param(
        32 << 20,
        doc="SO_SNDBUF/SO_RCVBUF of every socket (forced as root)",
        unit="bytes",
        min=65536,
    )
    event_batch_s: float = param(
        0.02,
        doc="Wall-clock period at which workers send their events to the coordinator",
        unit="s",
        min=0.001,
        max=10.0,
    )
    stats_period_s: float = param(
        0.1,
        doc="Wall-clock period at which workers send their counters, histograms and CPU with "
        "their events (what the live metrics read; each worker's last report at the end holds "
        "the run's totals)",
        unit="s",
        min=0.001,
        max=10.0,
    )
    rate_sample_s: float = param(
        0.001,
        doc="Least target-time between two rate samples of one queue pair (cuts are always sent)",
        unit="s",
        min=0.0,
    )
    one_way_latency: bool = param(
        False,
        doc="stamp every data packet with its send time and histogram one-way latency per QP "
        "and class (set by the run from metrics.one_way_latency)",
        internal=True,
    )
    start_timeout_s: float = param(
        30.0, doc="Wall-clock limit for every worker to open its sockets", unit="s", min=0.1
    )
    run_timeout_s: float = param(
        3600.0, doc="Wall-clock limit for the whole plan", unit="s", min=0.1
    )
    start_method: Literal["spawn", "fork", "forkserver"] = param(
        "spawn", doc="multiprocessing start method of the workers"
    )
