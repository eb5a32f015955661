"""`engine.send_path: af_xdp` end to end: scenarios/moe_mix_dut.yaml (shrunk, as
test_run_dut.py runs it) against the software DUT with the ranks' packets sent and received
through AF_XDP ports in copy mode.

- The run delivers every byte of the same flows as the UDP GSO path does (and with the native
  data path off too); a capture of rank 0's cable on the DUT's side shows only valid RoCEv2
  (every ICRC checked, scapy on a sample), as many packets as the port's counters say it sent,
  and never more than cap x W + 2 x depth on the wire in any 2 ms window; summary.json says
  af_xdp with every port's counters.
- A port that cannot do it (an MTU below the path MTU's packets, another XDP program attached)
  is refused at start in one line naming the interface, and nothing is left behind.
- A SIGKILL mid-replay followed by `emulate clean` leaves no XDP program attached or loaded.

The capture is taken on the DUT's port, which has no XDP program (copy-mode transmits skip the
sender's own taps), with GRO off so every packet is seen as sent; rates are judged on the
capture's timestamps against the configured cap (correctness, not a wall-clock threshold).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP

from emulator.engine.af_xdp import wire_bytes
from emulator.engine.af_xdp_setup import AfXdpUnavailable, attached_prog_id
from emulator.native import load
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario
from emulator.transport.wire import parse_ipv4_packet
from fabrics.iproute import ip, run
from fabrics.spec import DutSpec
from tests.system.prereq import require
from tests.system.software_dut import DUT_RATE_BPS, PORTS, port_address, software_dut
from tests.system.test_af_xdp import Capture

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
RANK0 = "192.168.70.2"
WINDOW_NS = 2_000_000


@pytest.fixture
def dut(fabric_env: str) -> Iterator[tuple[str, list[str]]]:
    """The software DUT, with the AF_XDP extension built (else a visible skip)."""
    mod, why = load("xsk")
    if mod is None:
        require(f"AF_XDP extension: {why}")
    with software_dut(fabric_env) as made:
        yield made


def dut_scenario(cables: list[str], **engine: Any) -> Scenario:
    """moe_mix_dut.yaml with the lab keys replaced and the workload shrunk (test_run_dut.py)."""
    shipped = load_scenario(REPO / "scenarios" / "moe_mix_dut.yaml")
    assert isinstance(shipped.fabric, DutSpec) and shipped.workload is not None
    fabric = dataclasses.replace(
        shipped.fabric,
        interfaces=tuple(cables),
        addresses=tuple(port_address(i) for i in range(PORTS)),
        gateways=tuple(f"192.168.{70 + i}.1" for i in range(PORTS)),
        routes=("192.168.64.0/20",),
        allowlist=("192.168.64.0/20",),
        max_rate_gbps=2 * DUT_RATE_BPS / 1e9,  # NICs twice the DUT's ports: queues and marks
    )
    generate = dataclasses.replace(
        shipped.workload.generate,
        ranks=PORTS,
        expert_parallel_size=2,
        dispatch_bytes=128 << 10,
        allreduce_bytes=512 << 10,
        iterations=2,
    )
    return dataclasses.replace(
        shipped,
        fabric=fabric,
        # a 100 Mb/s port holding Kmax (80 KB) queues for 6.4 ms (test_run_dut.py)
        transport=dataclasses.replace(shipped.transport, retransmit_timeout_s=0.1),
        workload=dataclasses.replace(shipped.workload, generate=generate),
        engine=dataclasses.replace(shipped.engine, **engine),
        metrics=dataclasses.replace(
            shipped.metrics,
            prometheus=dataclasses.replace(shipped.metrics.prometheus, port=0),
        ),
    )


def _run(scenario: Scenario, out: Path, prefix: str) -> Any:
    options = RunOptions(out_dir=out, progress=False, fabric_prefix=prefix, say=lambda m: None)
    result = run_scenario(scenario, options)
    assert not result.partial
    return result


def _flows(out: Path) -> list[tuple[int, ...]]:
    rows = pq.read_table(out / "flows.parquet").to_pylist()
    keys = ("flow_id", "collective_id", "src_rank", "dst_rank", "qp", "udp_sport", "bytes")
    return sorted(tuple(r[k] for k in keys) for r in rows)


def _every_byte_delivered(out: Path) -> None:
    """Every queue pair received and had acknowledged exactly its flows' bytes."""
    planned: collections.Counter[tuple[int, ...]] = collections.Counter()
    for f in pq.read_table(out / "flows.parquet").to_pylist():
        planned[(f["src_rank"], f["dst_rank"], f["qp"], f["udp_sport"])] += f["bytes"]
    qps = pq.read_table(out / "queue_pairs.parquet").to_pylist()
    assert qps and len(qps) == len(planned)
    for q in qps:
        key = (q["src_rank"], q["dst_rank"], q["qp"], q["udp_sport"])
        assert q["data_bytes_received"] == q["data_bytes_acked"] == planned[key], key
    collectives = pq.read_table(out / "collectives.parquet").to_pylist()
    assert len(collectives) == 12 and all(c["complete"] for c in collectives)


def _worst_window_bytes(frames: list[tuple[int, bytes]], window_ns: int) -> int:
    """The most wire bytes (Ethernet framing included) in any window of window_ns starting at a
    packet: a sliding window over the capture's timestamps."""
    times = [t for t, _ in frames]
    costs = [wire_bytes(len(f)) for _, f in frames]
    worst = in_window = j = 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] <= t + window_ns:
            in_window += costs[j]
            j += 1
        worst = max(worst, in_window)
        in_window -= costs[i]
    return worst


def test_af_xdp_delivers_the_same_flows_as_udp_gso_valid_and_within_the_cap(
    dut: tuple[str, list[str]], fabric_env: str, tmp_path: Path
) -> None:
    dut_ns, cables = dut
    gso = _run(dut_scenario(cables), tmp_path / "udp_gso", fabric_env)
    subprocess.run(
        ["ip", "netns", "exec", dut_ns, "ethtool", "-K", "p0", "gro", "off"],
        check=True,
        capture_output=True,
    )
    capture = Capture(dut_ns, "p0", tmp_path / "p0.pcap")
    try:
        xdp = _run(dut_scenario(cables, send_path="af_xdp"), tmp_path / "af_xdp", fabric_env)
    finally:
        frames = capture.stop()
    python = _run(
        dut_scenario(cables, send_path="af_xdp", native="off"), tmp_path / "python", fabric_env
    )
    # the same flows, every byte delivered, on both data paths
    assert (
        _flows(tmp_path / "af_xdp") == _flows(tmp_path / "udp_gso") == _flows(tmp_path / "python")
    )
    for out in ("udp_gso", "af_xdp", "python"):
        _every_byte_delivered(tmp_path / out)
    assert gso.summary["engine"]["send_path"] == "udp_gso"
    assert python.summary["engine"]["data_path"]["path"] == "python"
    # the run says af_xdp, with every port's info and counters
    engine = xdp.summary["engine"]
    assert engine["send_path"] == "af_xdp" and engine["data_path"]["path"] == "native"
    ports = {p["interface"]: p for p in engine["af_xdp"]["ports"]}
    assert sorted(ports) == sorted(cables)
    for port in ports.values():
        assert port["ledger_recorded"] is True  # in the fabric's state file before attaching
        assert not port["zero_copy"] and port["xdp_mode"] in ("native", "generic")
        assert port["counters"]["tx_packets"] > 0 and port["counters"]["rx_packets"] > 0
        assert port["counters"]["tx_dropped"] == port["counters"]["tx_backlog_full"] == 0
        assert port["counters"]["rx_malformed"] == port["counters"]["no_socket_passed"] == 0
    assert "user-space read" in engine["af_xdp"]["rx_time"]
    # rank 0's packets as the DUT saw them: valid RoCEv2, counted exactly
    assert capture.kernel_drops == 0
    mine = [(t, f) for t, f in frames if f[12:14] == b"\x08\x00" and parse_src(f) == RANK0]
    port0 = ports[cables[0]]
    assert len(mine) == port0["counters"]["tx_packets"]
    assert sum(len(f) for _, f in mine) == port0["counters"]["tx_frame_bytes"]
    for _, frame in mine:
        packet = parse_ipv4_packet(frame[14:])
        assert packet.icrc_ok, f"bad ICRC on the wire (IP id {packet.ip_id})"
        assert packet.address.dont_fragment and packet.address.sport != 4791
    for _, frame in mine[::53] + mine[-1:]:  # scapy, the oracle, on a sample
        again = IP(frame[14:]).copy()
        assert BTH in again
        again[BTH].icrc = None  # recomputed on build
        assert raw(again)[-4:] == frame[-4:]
    # the cap over every 2 ms window: the bucket passes at most rate x W + depth in any window
    # of its decisions; a capture stamps a packet a few microseconds after its decision (more
    # if the worker is preempted in between), so up to one more depth decided before the
    # window opened can land in it: rate x W + 2 x depth
    rate_bps, depth = port0["rate_bps"], port0["burst_bytes"]
    assert rate_bps == pytest.approx(2 * DUT_RATE_BPS)
    allowed = rate_bps / 8 * WINDOW_NS / 1e9 + 2 * depth
    worst = _worst_window_bytes(mine, WINDOW_NS)
    print(
        f"af_xdp cap check: worst 2 ms window {worst} wire bytes = "
        f"{worst * 8 / (WINDOW_NS / 1e9) / 1e6:.1f} Mb/s against the cap {rate_bps / 1e6:g} Mb/s "
        f"(bound {allowed:.0f} bytes = cap x 2 ms + 2 x {depth}-byte depth); "
        f"{len(mine)} packets"
    )
    assert worst <= allowed


def parse_src(frame: bytes) -> str:
    return ".".join(str(b) for b in frame[26:30])


def test_a_port_that_cannot_do_it_is_refused_at_start_and_nothing_stays(
    dut: tuple[str, list[str]], fabric_env: str, tmp_path: Path
) -> None:
    _, cables = dut
    state = Path(os.environ["CHAKRA_EMULATOR_STATE_DIR"]) / "state.json"
    # an interface MTU below the packets of a 4096-byte path MTU
    small = dut_scenario(cables, send_path="af_xdp")
    assert isinstance(small.fabric, DutSpec)
    small = dataclasses.replace(small, fabric=dataclasses.replace(small.fabric, mtu_bytes=1500))
    with pytest.raises(AfXdpUnavailable) as refused:
        _run(small, tmp_path / "small", fabric_env)
    text = str(refused.value)
    assert "\n" not in text and text.startswith("engine.send_path af_xdp on ")
    assert cables[0] in text and "MTU 1500 is below" in text
    _nothing_left(cables, state)
    # another XDP program on one cable: named, and left alone
    obj = _pass_program(tmp_path)
    # generic mode: a driver-mode program that is not multi-buffer aware refuses a 9000 MTU
    run(ip("link", "set", "dev", cables[2], "xdpgeneric", "obj", str(obj), "sec", "xdp"))
    try:
        theirs = attached_prog_id(cables[2], None)
        assert theirs
        with pytest.raises(AfXdpUnavailable) as refused:
            _run(dut_scenario(cables, send_path="af_xdp"), tmp_path / "taken", fabric_env)
        text = str(refused.value)
        assert "\n" not in text and cables[2] in text
        assert f"another XDP program (id {theirs}) is attached" in text
        assert attached_prog_id(cables[2], None) == theirs  # untouched
    finally:
        run(ip("link", "set", "dev", cables[2], "xdpgeneric", "off"), check=False)
    _nothing_left(cables, state)


def _pass_program(tmp_path: Path) -> Path:
    """An XDP program that passes everything, someone else's attachment."""
    source = tmp_path / "pass.bpf.c"
    source.write_text(
        "#include <linux/bpf.h>\n"
        '__attribute__((section("xdp"), used)) int pass(struct xdp_md *c) { return XDP_PASS; }\n'
        'char _license[] __attribute__((section("license"), used)) = "GPL";\n'
    )
    obj = tmp_path / "pass.o"
    argv = ["clang", "-O2", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c"]
    subprocess.run([*argv, str(source), "-o", str(obj)], check=True, capture_output=True)
    return obj


def _nothing_left(cables: list[str], state: Path) -> None:
    """The fabric is released: no state file, every cable back here, without an XDP program
    of ours."""
    assert not state.exists()
    for name in cables:
        assert run(ip("-o", "link", "show", "dev", name)).strip()
        assert attached_prog_id(name, None) == 0


def _loaded_programs() -> set[int]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    return {int(p["id"]) for p in json.loads(out.stdout or "[]")}


def test_a_killed_run_leaves_no_xdp_program_after_emulate_clean(
    dut: tuple[str, list[str]], fabric_env: str, tmp_path: Path
) -> None:
    _, cables = dut
    state_dir = Path(os.environ["CHAKRA_EMULATOR_STATE_DIR"])
    doc = yaml.safe_load((REPO / "scenarios" / "moe_mix_dut.yaml").read_text())
    doc["fabric"].update(
        interfaces=cables,
        addresses=[port_address(i) for i in range(PORTS)],
        gateways=[f"192.168.{70 + i}.1" for i in range(PORTS)],
        routes=["192.168.64.0/20"],
        allowlist=["192.168.64.0/20"],
        max_rate_gbps=DUT_RATE_BPS / 1e9,
    )
    # a replay of several seconds at 100 Mb/s: long enough to be killed in the middle
    doc["workload"]["generate"].update(
        ranks=PORTS, expert_parallel_size=2, dispatch_bytes=1 << 20, allreduce_bytes=8 << 20
    )
    doc["transport"]["retransmit_timeout_s"] = 0.1
    doc.setdefault("engine", {})["send_path"] = "af_xdp"
    doc.setdefault("metrics", {}).setdefault("prometheus", {})["port"] = 0
    scenario = tmp_path / "moe_mix_dut_af_xdp.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    before = _loaded_programs()
    argv = [str(Path(sys.executable).parent / "emulate"), "run", str(scenario), "--out"]
    argv += [str(tmp_path / "out"), "--no-progress", "--netns-prefix", fabric_env]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )
    ours: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        netns = [f"{fabric_env}r{p}" for p in range(PORTS)]
        while time.monotonic() < deadline and len(ours) < PORTS and proc.poll() is None:
            ours = {attached_prog_id(c, ns) for c, ns in zip(cables, netns, strict=True)} - {0}
            time.sleep(0.05)
        assert len(ours) == PORTS, "the run never attached its ports"
        assert '"kind": "xdp"' in (state_dir / "state.json").read_text()  # recorded first
        time.sleep(0.5)  # in the middle of the replay
        assert proc.poll() is None, "the replay ended before the kill"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    clean = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "clean"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert clean.returncode == 0, clean.stderr
    _nothing_left(cables, state_dir / "state.json")
    assert not (ours & _loaded_programs()), "an XDP program of the killed run is still loaded"
    assert _loaded_programs() <= before
