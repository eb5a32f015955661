"""The AF_XDP port's pure parts (emulator/engine/af_xdp.py, emulator/native/xsk_*.c): the headers
it writes (checked with scapy's parser), its token bucket (a simulated clock, never the wall
clock), its transmit backlog's reordering (ACKs and CNPs ahead of waiting data), frame sizes
and the multi-buffer refusal, the refusal lines.

The C parts skip with the reason when emulator.native._xsk is not built (./setup.sh builds it
where libxdp-dev is installed); the Python bucket is the C bucket's reference and always runs.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.engine import af_xdp
from emulator.engine.af_xdp import AfXdpConfig, AfXdpUnavailable, TokenBucket, _reason, wire_bytes
from emulator.engine.af_xdp_setup import (
    LinkState,
    frame_room,
    max_frame_bytes,
    multi_buffer_refusal,
    needs_multi_buffer,
)
from emulator.native import load

MODULE, WHY_NOT = load("xsk")
needs_native = pytest.mark.skipif(MODULE is None, reason=f"AF_XDP extension absent: {WHY_NOT}")


def _flow(mod, src=(10, 1, 0, 1), dst=(10, 1, 0, 2), sport=49152, ttl=64):
    ffi = mod.ffi
    return ffi.new(
        "struct xsk_flow *",
        {
            "dst_mac": [0x02, 0, 0, 0, 0, 0x22],
            "src_mac": [0x02, 0, 0, 0, 0, 0x11],
            "src_ip_be": int.from_bytes(bytes(src), "little"),
            "dst_ip_be": int.from_bytes(bytes(dst), "little"),
            "sport": sport,
            "dport": 4791,
            "ttl": ttl,
        },
    )


@needs_native
@settings(max_examples=200, deadline=None)
@given(
    tos=st.integers(0, 255),
    ip_id=st.integers(0, 0xFFFF),
    payload=st.integers(16, 9000 - 28),
    sport=st.integers(1, 0xFFFF),
    ttl=st.integers(1, 255),
)
def test_headers_parse_in_scapy_with_valid_checksum(tos, ip_id, payload, sport, ttl) -> None:
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    frame = ffi.new("uint8_t[]", 42 + payload)
    assert (
        lib.xsk_write_headers(frame, _flow(MODULE, sport=sport, ttl=ttl), tos, ip_id, payload) == 42
    )
    data = bytes(ffi.buffer(frame, 42 + payload))
    pkt = Ether(data)
    assert pkt.dst == "02:00:00:00:00:22" and pkt.src == "02:00:00:00:00:11"
    assert pkt.type == 0x0800
    ip = pkt[IP]
    assert (ip.version, ip.ihl, ip.tos, ip.id, ip.ttl, ip.proto) == (4, 5, tos, ip_id, ttl, 17)
    assert ip.flags == "DF" and ip.frag == 0
    assert ip.len == 20 + 8 + payload
    assert (ip.src, ip.dst) == ("10.1.0.1", "10.1.0.2")
    # scapy recomputes the checksum when it is deleted: ours must be the same
    again = IP(bytes(ip))
    del again.chksum
    assert IP(bytes(again)).chksum == ip.chksum
    udp = pkt[UDP]
    assert (udp.sport, udp.dport, udp.len, udp.chksum) == (sport, 4791, 8 + payload, 0)


def test_frame_sizes_and_multi_buffer() -> None:
    # BTH 12 + RETH 16 + payload + ICRC 4 behind Ethernet 14 + IPv4 20 + UDP 8
    assert max_frame_bytes(1024) == 1024 + 32 + 42
    assert max_frame_bytes(4096) == 4170
    assert frame_room(4096) == (3840, 4096)  # copy mode keeps 256 bytes of headroom on receive
    assert not needs_multi_buffer(2048, 4096)
    assert needs_multi_buffer(4096, 4096)
    assert needs_multi_buffer(2048, 2048)
    assert wire_bytes(1098) == 1098 + 24 and wire_bytes(50) == 60 + 24


def test_multi_buffer_refusal_names_the_limit() -> None:
    line = multi_buffer_refusal(4096, 4096, "Linux 6.1 < 6.6")
    assert "\n" not in line
    assert line.startswith("path MTU 4096 needs frames of 4170 bytes; ")
    assert "UMEM frame holds 3840" in line and "Linux 6.1 < 6.6" in line
    assert "transport.path_mtu_bytes <= 2048" in line and "udp_gso" in line


def test_refusal_reasons_from_the_c_side() -> None:
    mtu4k = AfXdpConfig(path_mtu_bytes=4096)
    zc = AfXdpConfig(path_mtu_bytes=1024, zero_copy=True)
    assert "XDP_USE_SG" in _reason("bind queue 0: Invalid argument", mtu4k)
    assert "zero-copy" in _reason("bind queue 0: Operation not supported", zc)
    assert "another XDP program" in _reason(
        "attach the XDP program: Device or resource busy", mtu4k
    )
    assert "needs root" in _reason("load the XDP program: Operation not permitted", mtu4k)
    assert "another AF_XDP socket holds that queue" in _reason(
        "bind queue 2: Device or resource busy", mtu4k
    )
    assert _reason("map the UMEM: Cannot allocate memory", mtu4k).startswith("cannot map the")


def test_receive_frames_shrink_per_queue_on_many_queue_nics() -> None:
    cfg = AfXdpConfig(path_mtu_bytes=1024)
    assert [cfg.rx_frames(q) for q in (1, 2, 3, 4, 16, 64)] == [2048, 2048, 1024, 1024, 256, 256]
    assert AfXdpConfig(path_mtu_bytes=1024, rx_frames_per_queue=64).rx_frames(64) == 64


def test_bucket_depth_default_is_four_frames_or_50us_at_the_cap() -> None:
    assert AfXdpConfig(path_mtu_bytes=4096, rate_bps=1e9).depth_bytes() == 4 * wire_bytes(4170)
    assert AfXdpConfig(path_mtu_bytes=4096, rate_bps=100e9).depth_bytes() == 625_000
    # never below one largest frame, whatever is asked
    assert AfXdpConfig(path_mtu_bytes=4096, burst_bytes=10).depth_bytes() == wire_bytes(4170)


# --- the token bucket: RFC 2697's committed bucket, as a shaper -----------------------------


def test_bucket_starts_full_then_refills_at_its_rate() -> None:
    b = TokenBucket(rate_bytes_per_s=1_000_000, depth_bytes=3000, last_ns=0)
    assert b.take(0, 1000) and b.take(0, 1000) and b.take(0, 1000)
    assert not b.take(0, 1)
    # 1 MB/s: 1 byte per microsecond
    assert not b.take(999_000, 1000)  # 999 bytes by then
    assert b.take(1_000_000, 1000)
    assert b.ready_ns(1000) == 2_000_000
    assert not b.take(1_999_999, 1000) and b.take(2_000_000, 1000)


def test_bucket_never_exceeds_its_depth_and_ignores_time_going_back() -> None:
    b = TokenBucket(rate_bytes_per_s=10**9, depth_bytes=5000, last_ns=0)
    b.refill(10**12)
    assert b.tokens_nb == 5000 * 10**9
    b.take(10**12, 4000)
    b.refill(10**11)  # earlier: nothing
    assert b.tokens_nb == 1000 * 10**9


@settings(max_examples=60, deadline=None)
@given(
    rate=st.sampled_from([1_250_000, 12_500_000, 125_000_000, 1_250_000_000]),
    frame=st.sampled_from([84, 1122, 4194]),
    depth_frames=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
)
def test_no_window_carries_more_than_rate_times_window_plus_depth(
    rate, frame, depth_frames, seed
) -> None:
    """A greedy sender polling at random instants: over every window, the bytes let through
    stay within rate x window + depth (the bucket's guarantee), and the long-run rate meets
    the cap (no tokens lost while a packet waits)."""
    rng = random.Random(seed)
    depth = depth_frames * frame
    b = TokenBucket(rate_bytes_per_s=rate, depth_bytes=depth, last_ns=0)
    now = 0
    sent: list[int] = []
    horizon = 2000 * frame * 10**9 // rate
    while now < horizon:
        while b.take(now, frame):
            sent.append(now)
        now = max(now + 1, b.ready_ns(frame)) + rng.randrange(0, 3 * frame * 10**9 // rate)
    # every window of W ns starting at a send: sends in [t, t + W] times frame bytes
    for window in (10**5, 10**6, 2 * 10**6):
        j = 0
        for i, t in enumerate(sent):
            while j < len(sent) and sent[j] <= t + window:
                j += 1
            assert (j - i) * frame <= rate * window / 1e9 + depth + 1e-9
    # the sender polled late by up to 3 frames each time, yet kept at least 1/4 of the rate
    assert len(sent) * frame >= rate * sent[-1] / 1e9 / 4


@needs_native
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rate=st.integers(1, 10**11), depth=st.integers(84, 10**6))
def test_c_bucket_is_the_python_bucket(seed, rate, depth) -> None:
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    rng = random.Random(seed)
    c = ffi.new("struct xsk_bucket *")
    lib.xsk_bucket_init(c, rate, depth, 1000)
    py = TokenBucket(rate_bytes_per_s=rate, depth_bytes=depth, last_ns=1000)
    now = 1000
    for _ in range(300):
        now += rng.choice([0, 1, rng.randrange(10**3), rng.randrange(10**7), -5])
        nbytes = rng.choice([64, 1122, 4194, depth + 1])
        assert bool(lib.xsk_bucket_take(c, now, nbytes)) == py.take(now, nbytes)
        assert c.tokens_nb == py.tokens_nb and c.last_ns == py.last_ns
        assert lib.xsk_bucket_ready_ns(c, nbytes) == py.ready_ns(nbytes)


# --- start-up detection: every refusal is one line naming the interface ----------------------


def _link(**over: object) -> LinkState:
    base = dict(
        ifname="p1",
        netns="emu-r1",
        ifindex=7,
        up=True,
        ethernet=True,
        mac=bytes(6),
        mtu_bytes=9000,
        rx_queues=4,
        tx_queues=4,
        xdp_prog_id=0,
        addresses=frozenset({"10.1.0.1"}),
    )
    base.update(over)
    return LinkState(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "link", "config", "reason"),
    [
        ({"address": "fd00::1"}, {}, {}, "fd00::1 is not IPv4"),
        ({"euid": 1000}, {}, {}, "needs root"),
        ({"module": None}, {}, {}, "emulator.native._xsk is not built"),
        ({}, {"ethernet": False}, {}, "not an Ethernet interface"),
        ({}, {"up": False}, {}, "the interface is down"),
        ({}, {"addresses": frozenset()}, {}, "10.1.0.1 is not an address of the interface"),
        ({}, {"mtu_bytes": 1500}, {"path_mtu_bytes": 4096}, "MTU 1500 is below the 4156-byte"),
        ({}, {"xdp_prog_id": 42}, {}, "another XDP program (id 42) is attached"),
        ({"kernel": (6, 1)}, {}, {"path_mtu_bytes": 4096}, "(Linux 6.1 < 6.6)"),
        ({}, {}, {"path_mtu_bytes": 4096, "zero_copy": True}, "not offered with zero-copy"),
    ],
)
def test_check_interface_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch, env, link, config, reason
) -> None:
    monkeypatch.setattr(af_xdp.os, "geteuid", lambda: env.get("euid", 0))
    missing = (None, "emulator.native._xsk is not built (./setup.sh builds it)")
    monkeypatch.setattr(af_xdp, "load", lambda name: missing if "module" in env else (object(), ""))
    monkeypatch.setattr(af_xdp, "link_state", lambda ifname, netns: _link(**link))
    monkeypatch.setattr(af_xdp, "kernel_release", lambda: env.get("kernel", (6, 18)))
    cfg = AfXdpConfig(**{"path_mtu_bytes": 1024, **config})
    with pytest.raises(AfXdpUnavailable) as e:
        af_xdp.check_interface("p1", "emu-r1", [env.get("address", "10.1.0.1")], cfg)
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith("engine.send_path af_xdp on p1 (namespace emu-r1): ")
    assert reason in text


def test_check_interface_passes_a_capable_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(af_xdp.os, "geteuid", lambda: 0)
    monkeypatch.setattr(af_xdp, "load", lambda name: (object(), ""))
    monkeypatch.setattr(af_xdp, "link_state", lambda ifname, netns: _link())
    monkeypatch.setattr(af_xdp, "kernel_release", lambda: (6, 6))
    af_xdp.check_interface("p1", "emu-r1", ["10.1.0.1"], AfXdpConfig(path_mtu_bytes=4096))


# --- the transmit backlog: descriptors queued ahead of those waiting (xsk_port_send) ----------

DESC_WORDS = 4  # a struct xdp_desc is 16 bytes: u64 addr, u32 len, u32 options
FREE_SLOT = 0xFFFFFFFF
WAITING_LABEL, ADDED_LABEL = 1 << 20, 2 << 20


def _label_name(label: int) -> str:
    if label == FREE_SLOT:
        return "free"
    return ("W" if label < ADDED_LABEL else "A") + str(label % (1 << 20))


def _c_move_ahead(
    cap: int, head: int, waiting: int, added: int, words: int = DESC_WORDS
) -> tuple[int, list[str]]:
    """xsk_backlog_move_ahead over a ring of `cap` slots of `words` uint32 whose FIFO from
    `head` holds W0.. then A0..; the new head and the FIFO read from it."""
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    ring = ffi.new("uint32_t[]", [FREE_SLOT] * (cap * words))
    fifo = [WAITING_LABEL + i for i in range(waiting)] + [ADDED_LABEL + i for i in range(added)]
    for n, label in enumerate(fifo):
        at = (head + n) % cap * words
        ring[at : at + words] = [label] * words
    new_head = lib.xsk_backlog_move_ahead(ring, 4 * words, cap, head, waiting, added)
    out = []
    for n in range(len(fifo)):
        at = (new_head + n) % cap * words
        slot = ring[at : at + words]
        assert len(set(slot)) == 1, f"slot {at // words} mixes two descriptors: {slot}"
        out.append(_label_name(slot[0]))
    return new_head, out


def _model_move_ahead(cap: int, head: int, waiting: int, added: int) -> tuple[int, list[str]]:
    """What the move means: the added ones first, in their order, then the waiting ones, the
    head moved back by `added` (unchanged when there is nothing to move past)."""
    new_head = (head - added) % cap if waiting and added else head
    return new_head, [f"A{i}" for i in range(added)] + [f"W{i}" for i in range(waiting)]


@needs_native
@pytest.mark.parametrize(
    ("cap", "waiting", "added"),
    [(10, 5, 3), (4096, 4000, 64)],
    ids=["cap10-overlap-by-1", "cap4096-overlap-by-32"],
)
def test_backlog_moves_new_descriptors_ahead_without_losing_one(cap, waiting, added) -> None:
    """The new descriptors' old and new places overlap when 0 < cap - descs < added: a
    forward copy read descriptors it had already overwritten (A0 twice, A2 lost)."""
    new_head, fifo = _c_move_ahead(cap, 0, waiting, added)
    assert new_head == cap - added
    want = [f"A{i}" for i in range(added)] + [f"W{i}" for i in range(waiting)]
    assert fifo == want, f"FIFO after moving ahead: {fifo[: added + 2]} ..."


@st.composite
def _backlogs(draw: st.DrawFn) -> tuple[int, int, int, int]:
    cap = draw(st.integers(1, 80))
    head = draw(st.integers(0, cap - 1))
    waiting = draw(st.integers(0, cap))
    added = draw(st.integers(0, cap - waiting))
    return cap, head, waiting, added


@needs_native
@settings(max_examples=300, deadline=None)
@given(backlog=_backlogs(), words=st.sampled_from([1, DESC_WORDS]))
def test_backlog_move_ahead_is_the_model(backlog, words) -> None:
    cap, head, waiting, added = backlog
    assert _c_move_ahead(cap, head, waiting, added, words) == _model_move_ahead(*backlog)
