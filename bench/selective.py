"""Bench: the selective-repeat responder's packets per second against go-back-N's, in one run.

Run from the repository root: `python -m bench.selective [--packets N] [--rounds R] [--json PATH]`.

Both responders (emulator.transport.receiver.ReceiveQueuePair, `reliability` go_back_n and
selective) take the same streams of data-packet descriptors, one `on_data` call per packet
(the path every packet takes in the simulator and the engine's slow path), and, in order, one
`on_data_run` call per 16 packets (the engine's GRO fast path):
- in order: what both see on an ECMP path; the peer is go-back-N on the same stream;
- reordered: each packet delayed by up to `--spread` packet times at random (seeded), as
  spraying over paths with different queues does. Go-back-N drops everything past a gap and
  NAKs; the selective responder holds it. The two do different work here, so the table gives
  each one's own rate and the selective one's against go-back-N's in-order rate.
Rounds alternate the two (R rounds, the median kept): a 2-core machine's noise hits both.
Nothing is asserted: a table is printed, and --json PATH writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from emulator.transport.packets import DataPacket, Opcode
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair

MTU = 4096
RUN = 16  # packets per GRO read on the fast path
MESSAGE_PACKETS = 256  # a 1 MiB message
PARAMS = {
    "go_back_n": TransportParams(path_mtu_bytes=MTU),
    "selective": TransportParams(path_mtu_bytes=MTU, reliability="selective"),
}


def stream(packets: int, spread: int, seed: int) -> list[DataPacket]:
    """1 MiB SEND messages back to back (AckReq every 16th and on each last packet); with
    spread > 0 each packet's arrival is its send slot plus a draw of up to `spread` slots."""
    out = []
    for psn in range(packets):
        k = psn % MESSAGE_PACKETS
        last = k == MESSAGE_PACKETS - 1
        opcode = Opcode.SEND_FIRST if k == 0 else Opcode.SEND_LAST if last else Opcode.SEND_MIDDLE
        out.append(DataPacket(1, psn, int(opcode), last or psn % 16 == 15, MTU))
    if spread:
        rng = random.Random(seed)
        keyed = sorted((i + rng.uniform(0, spread), i) for i in range(packets))
        out = [out[i] for _, i in keyed]
    return out


def per_packet(mode: str, packets: list[DataPacket]) -> tuple[float, ReceiveQueuePair]:
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=PARAMS[mode])
    on_data = rx.on_data
    t0 = time.perf_counter()
    for p in packets:
        on_data(now=0.0, packet=p, ce=False)
    return time.perf_counter() - t0, rx


def runs(mode: str, packets: int) -> tuple[float, ReceiveQueuePair]:
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=PARAMS[mode])
    opcodes_middle = [int(Opcode.SEND_MIDDLE)] * RUN
    t0 = time.perf_counter()
    for psn in range(0, packets, RUN):
        k = psn % MESSAGE_PACKETS
        opcodes = list(opcodes_middle)
        if k == 0:
            opcodes[0] = int(Opcode.SEND_FIRST)
        if k + RUN == MESSAGE_PACKETS:
            opcodes[-1] = int(Opcode.SEND_LAST)
        rx.on_data_run(
            now=0.0,
            psn=psn,
            opcodes=opcodes,
            ack_req_at=[RUN - 1],
            payload_bytes=MTU,
            last_payload_bytes=MTU,
            ce=False,
        )
    return time.perf_counter() - t0, rx


def median_rate(
    rounds: int, packets: int, cases: dict[str, Callable[[], tuple[float, ReceiveQueuePair]]]
) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    last: dict[str, ReceiveQueuePair] = {}
    for _ in range(rounds):
        for name, case in cases.items():  # alternating: the machine's drift hits every case
            seconds, last[name] = case()
            times[name].append(seconds)
    out = {}
    for name, ts in times.items():
        rx = last[name]
        out[name] = {
            "packets_per_s": packets / statistics.median(ts),
            "delivered_bytes": rx.delivered_bytes,
            "held_out_of_order": rx.held_packets,
            "reordered_packets": rx.reordered_packets,
            "dropped": sum(rx.drops.values()),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=65_536)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--spread", type=int, default=8, help="reordering: packet times of delay")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    n = args.packets - args.packets % MESSAGE_PACKETS
    in_order = stream(n, 0, 1)
    reordered = stream(n, args.spread, 1)
    cases: dict[str, Callable[[], tuple[float, ReceiveQueuePair]]] = {
        "go_back_n, in order, per packet": lambda: per_packet("go_back_n", in_order),
        "selective, in order, per packet": lambda: per_packet("selective", in_order),
        "go_back_n, in order, runs of 16": lambda: runs("go_back_n", n),
        "selective, in order, runs of 16": lambda: runs("selective", n),
        "go_back_n, reordered, per packet": lambda: per_packet("go_back_n", reordered),
        "selective, reordered, per packet": lambda: per_packet("selective", reordered),
    }
    out = median_rate(args.rounds, n, cases)
    peer = out["go_back_n, in order, per packet"]["packets_per_s"]
    peer_runs = out["go_back_n, in order, runs of 16"]["packets_per_s"]
    print(
        f"{n} packets of {MTU} B, median of {args.rounds} rounds; reordering spread {args.spread}"
    )
    print(
        f"{'case':<36} {'Mpkt/s':>7} {'/ gbn':>6} {'delivered MiB':>13} {'held':>6} {'dropped':>8}"
    )
    for name, r in out.items():
        base = peer_runs if "runs" in name else peer
        print(
            f"{name:<36} {r['packets_per_s'] / 1e6:7.3f} {r['packets_per_s'] / base:6.2f} "
            f"{r['delivered_bytes'] / 2**20:13.0f} {r['held_out_of_order']:6.0f} "
            f"{r['dropped']:8.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"bench": "selective", "cases": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
