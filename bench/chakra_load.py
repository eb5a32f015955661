"""Chakra trace loading speed against a bare protobuf parse of the same bytes (the floor).

Run from the repository root: `python -m bench.chakra_load [--nodes N] [--repeat R]`.

Ours: `read_rank` - read the file, frame and parse every record, check node types, and build the
dependency index (data and ctrl deps resolved to positions, dangling/self-loop warnings), i.e.
everything `emulate validate` and the feeder need before they start.
Floor: what chakra's own protolib decodeMessage does per record (mlcommons/chakra
src/third_party/utils/protolib.py): `_DecodeVarint32` then `Node().ParseFromString(record)`, on the
same file, with no checks and no index. The ratio is floor time / our time (higher is better;
the issue #2 target is >= 0.33, i.e. within 3x of the floor).
Inputs: the largest real trace, ../shared/traces/mlcommons-chakra/tests/data/chakra.0.et (3664
nodes, 181,878 data deps), and a synthetic trace of --nodes nodes written to a temp dir.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from emulator.chakra import pb, read_rank, write_rank
from emulator.chakra.delimited import _DecodeVarint32

REAL_TRACE = (
    Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "traces"
    / "mlcommons-chakra"
    / "tests"
    / "data"
    / "chakra.0.et"
)
BENCH = "chakra_load"
FLOOR = "bare protobuf parse (per record _DecodeVarint32 + Node.ParseFromString, GC paused)"


def bare_parse(path: Path) -> int:
    """The floor: Chakra protolib's decode loop over the whole file; returns the node count.

    Run with the cyclic GC paused, as read_rank does, so the floor is not slowed by collections.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode_loop(path)
    finally:
        if was_enabled:
            gc.enable()


def _decode_loop(path: Path) -> int:
    data = path.read_bytes()
    view = memoryview(data)
    length, pos = _DecodeVarint32(data, 0)
    pb.GlobalMetadata().ParseFromString(view[pos : pos + length])  # type: ignore[arg-type]
    pos += length
    nodes = []
    end = len(data)
    while pos < end:
        length, pos = _DecodeVarint32(data, pos)
        node = pb.Node()
        node.ParseFromString(view[pos : pos + length])  # type: ignore[arg-type]
        nodes.append(node)
        pos += length
    return len(nodes)


def full_load(path: Path) -> int:
    """Ours: read_rank builds the dependency index (trace.index) before it returns."""
    trace = read_rank(path)
    assert len(trace.index) == len(trace.nodes)
    return len(trace.nodes)


def best_time(function: Callable[[Path], int], path: Path, repeat: int) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        count = function(path)
        best = min(best, time.perf_counter() - start)
    return best, count


def synthetic_nodes(count: int, seed: int = 1) -> Iterator[pb.Node]:
    """A training-iteration-like graph: compute chains with fan-in, a collective every 16 nodes."""
    rng = random.Random(seed)
    for i in range(count):
        comm = i % 16 == 15
        node = pb.Node(
            id=i + 1,
            name=f"coll_{i}" if comm else f"op_{i}",
            type=pb.COMM_COLL_NODE if comm else pb.COMP_NODE,
            duration_micros=0 if comm else 1 + i % 97,
        )
        if i:
            node.data_deps.append(i)
        if i > 64 and rng.random() < 0.3:
            node.data_deps.append(i - rng.randrange(2, 64))
        if i % 8 == 0 and i:
            node.ctrl_deps.append(i - 7)
        node.attr.add(name="is_cpu_op", bool_val=not comm and i % 3 == 0)
        if comm:
            node.attr.add(name="comm_type", int64_val=(0, 6)[i // 16 % 2])
            node.attr.add(name="comm_size", int64_val=1 << (16 + i % 8))
            node.attr.add(name="pg_name", string_val="0")
        yield node


def measure(label: str, path: Path, repeat: int) -> dict[str, Any]:
    floor_s, floor_nodes = best_time(bare_parse, path, repeat)
    ours_s, our_nodes = best_time(full_load, path, repeat)
    assert floor_nodes == our_nodes, (floor_nodes, our_nodes)
    print(
        f"{label}: {our_nodes} nodes, {path.stat().st_size} bytes; full load {ours_s:.4f} s "
        f"({our_nodes / ours_s:,.0f} nodes/s), floor {floor_s:.4f} s "
        f"({floor_nodes / floor_s:,.0f} nodes/s), ratio {floor_s / ours_s:.2f}",
        file=sys.stderr,
    )
    return {
        "bench": BENCH,
        "metric": f"full load incl. dependency index, {label} "
        "(ratio = floor time / our time, higher is better, target >= 0.33)",
        "value": round(our_nodes / ours_s),
        "unit": "nodes/s",
        "peer": FLOOR,
        "peer_value": round(floor_nodes / floor_s),
        "ratio": round(floor_s / ours_s, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1_000_000, help="synthetic trace size")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    args = parser.parse_args(argv)
    results = []
    if REAL_TRACE.is_file():
        results.append(measure("chakra.0.et (3664 nodes)", REAL_TRACE, max(args.repeat, 5)))
    else:
        print(f"skipping the real trace: {REAL_TRACE} is absent", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="chakra_load_") as folder:
        path = Path(folder) / "synthetic.0.et"
        start = time.perf_counter()
        write_rank(path, pb.GlobalMetadata(version="0.0.4"), synthetic_nodes(args.nodes))
        write_s = time.perf_counter() - start
        print(f"wrote {args.nodes} synthetic nodes in {write_s:.1f} s", file=sys.stderr)
        results.append(measure(f"synthetic {args.nodes} nodes", path, args.repeat))
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
