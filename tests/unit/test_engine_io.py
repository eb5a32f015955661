"""Engine I/O helpers without sockets in namespaces: GRO segment splitting, control messages,
offload choice, the dilated clock."""

from __future__ import annotations

import socket
import struct

import pytest

from emulator.engine.clock import DilatedClock
from emulator.engine.sockets import (
    IP_TOS,
    SOL_UDP,
    UDP_GRO,
    detect_offloads,
    read_ancillary,
    segments,
)
from emulator.errors import EnvironmentProblem


def test_gro_reads_split_at_gso_size_with_a_short_last_segment() -> None:
    assert segments(3 * 1040 + 20, 1040) == [(0, 1040), (1040, 2080), (2080, 3120), (3120, 3140)]
    assert segments(1040, 1040) == [(0, 1040)]
    assert segments(500, 0) == [(0, 500)]


def test_ancillary_gives_tos_and_gro_segment_size() -> None:
    anc = [(socket.IPPROTO_IP, IP_TOS, bytes([0x6B])), (SOL_UDP, UDP_GRO, struct.pack("=i", 4112))]
    assert read_ancillary(anc) == (0x6B, 4112, 0)
    assert read_ancillary([]) == (0, 0, 0)


def test_offload_choices() -> None:
    off = detect_offloads("off", "off")
    assert off.gso is False and off.gro is False
    auto = detect_offloads("auto", "auto")
    on_ok = detect_offloads("on" if auto.gso else "auto", "on" if auto.gro else "auto")
    assert (on_ok.gso, on_ok.gro) == (auto.gso, auto.gro)
    if not auto.gso:
        with pytest.raises(EnvironmentProblem, match=r"engine\.gso"):
            detect_offloads("on", "auto")


def test_dilated_clock_runs_tdf_times_slower() -> None:
    clock = DilatedClock(10.0, start_wall_s=100.0)
    assert clock.to_wall_s(0.004) == pytest.approx(0.04)
    assert clock.wall_at(0.5) == pytest.approx(105.0)
    with pytest.raises(ValueError, match="tdf"):
        DilatedClock(0.0)
