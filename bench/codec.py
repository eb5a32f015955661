"""RoCEv2 codec speed: packets/s laying out UDP GSO buffers (BTH + payload + ICRC per segment) and
parsing them back (decode without copying the payload + ICRC check), against the floor of bare zlib.crc32 plus a memory copy
of the same bytes.

Run from the repo root: python -m bench.codec. Prints one JSON object per figure; ratio is
ours/floor (higher is better, 1.0 would mean the codec costs nothing beyond CRC and copy).
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable

from emulator.transport.packets import BTH_BYTES, ICRC_BYTES, DataPacket, Opcode
from emulator.transport.wire import FlowAddress, IcrcContext, decode, layout_gso

GSO_BUFFER_BYTES = 65_000
MIN_SECONDS = 0.4


def rate(fn: Callable[[], int]) -> float:
    """Packets per second of fn (which returns how many packets it handled), best of 3 runs."""
    best = 0.0
    for _ in range(3):
        packets = 0
        start = time.perf_counter()
        elapsed = 0.0
        while elapsed < MIN_SECONDS:
            packets += fn()
            elapsed = time.perf_counter() - start
        best = max(best, packets / elapsed)
    return best


def bench_segment(segment_payload_bytes: int) -> list[dict[str, object]]:
    ctx = IcrcContext(FlowAddress("10.0.0.1", "10.0.0.2", 49152, dscp=26))
    segment_bytes = BTH_BYTES + segment_payload_bytes + ICRC_BYTES
    count = GSO_BUFFER_BYTES // segment_bytes
    payload = bytes(range(256)) * (segment_payload_bytes // 256)
    packets = [
        DataPacket(0x42, i, Opcode.SEND_MIDDLE, i % 16 == 15, segment_payload_bytes, 0, payload)
        for i in range(count)
    ]
    buf = bytearray(count * segment_bytes)
    scratch = bytearray(len(buf))
    used, size = layout_gso(buf, packets, ctx, ip_id_first=0)
    assert size == segment_bytes and used == len(buf)
    view = memoryview(buf)

    def build() -> int:
        layout_gso(buf, packets, ctx, ip_id_first=7)
        return count

    def parse() -> int:
        check = ctx.check
        for i in range(count):
            segment = view[i * segment_bytes : (i + 1) * segment_bytes]
            decode(segment, with_payload=False)
            if not check(i, segment):
                raise AssertionError("ICRC mismatch")
        return count

    def floor() -> int:
        for i in range(count):
            at = i * segment_bytes
            scratch[at : at + segment_bytes] = view[at : at + segment_bytes]
            zlib.crc32(view[at : at + segment_bytes])
        return count

    layout_gso(buf, packets, ctx, ip_id_first=0)  # parse() checks ids 0..count-1
    floor_pps = rate(floor)
    results = []
    for name, fn in (("build_gso", build), ("parse_gso", parse)):
        if name == "parse_gso":
            layout_gso(buf, packets, ctx, ip_id_first=0)
        ours = rate(fn)
        results.append(
            {
                "bench": "codec",
                "metric": f"{name}_{segment_payload_bytes}B_packets_per_s (ratio ours/floor, higher better)",
                "value": round(ours),
                "unit": "packets/s",
                "peer": "zlib.crc32 + memory copy of the same bytes",
                "peer_value": round(floor_pps),
                "ratio": round(ours / floor_pps, 3),
            }
        )
    return results


def main() -> None:
    for size in (1024, 4096):
        for row in bench_segment(size):
            print(json.dumps(row))


if __name__ == "__main__":
    main()
