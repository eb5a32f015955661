"""The fidelity verdict's reading of the AF_XDP ports' counters (emulator/timescale/verdict.py
af_xdp_reasons): transmit descriptors the kernel rejected (tx_invalid_descs, XDP_STATISTICS) and
received frames dropped as not valid RoCEv2 (rx_malformed, checksums and ICRC included) each
become a reason naming the port and the count; zero says nothing.

The counters reach the verdict by field name: AfXdpPort.counters() reads every field of the C
structs (emulator/engine/af_xdp.py), XdpNic.report() and run_metadata carry them to summary
engine.af_xdp.ports[].counters. The last test checks the fields exist where the module is built.
"""

from __future__ import annotations

from typing import Any

import pytest

from emulator.backends.dut.backend import af_xdp_reasons
from emulator.native import load

MODULE, WHY_NOT = load("xsk")


def _metadata(**counters: int) -> dict[str, Any]:
    """A run's metadata with one port (as xdp_ports.summarize writes it) and these counters."""
    port = {
        "interface": "eth2",
        "netns": "emu-r1",
        "counters": {"tx_packets": 9, "rx_packets": 9, **counters},
    }
    return {"af_xdp": {"ports": [port], "rx_time": "user-space read"}}


def test_rejected_transmit_descriptors_are_a_reason_with_their_count() -> None:
    reasons = af_xdp_reasons(_metadata(tx_invalid_descs=7))
    assert len(reasons) == 1
    assert reasons[0].startswith("af_xdp port eth2 (namespace emu-r1): ")
    assert "rejected 7 transmit descriptors" in reasons[0]
    assert "tx_invalid_descs" in reasons[0] and "never left" in reasons[0]


def test_no_rejected_transmit_descriptor_no_reason() -> None:
    assert af_xdp_reasons(_metadata(tx_invalid_descs=0)) == []


def test_malformed_received_frames_are_a_reason_with_their_count_and_kinds() -> None:
    reasons = af_xdp_reasons(
        _metadata(rx_malformed=5, rx_bad_ip_checksum=0, rx_bad_udp_checksum=1, rx_bad_icrc=3)
    )
    assert len(reasons) == 1
    assert reasons[0].startswith("af_xdp port eth2 (namespace emu-r1): ")
    assert "5 received frames were dropped as malformed" in reasons[0]
    # the finer counters that are not zero, and what the frames were
    assert "rx_malformed, rx_bad_udp_checksum 1, rx_bad_icrc 3)" in reasons[0]
    assert "rx_bad_ip_checksum" not in reasons[0]
    assert "not valid RoCEv2" in reasons[0] and "ICRC" in reasons[0]


def test_malformed_without_the_finer_counters_still_names_the_count() -> None:
    (reason,) = af_xdp_reasons(_metadata(rx_malformed=2))
    assert "2 received frames were dropped as malformed (rx_malformed)" in reason


def test_no_malformed_frame_no_reason() -> None:
    assert af_xdp_reasons(_metadata(rx_malformed=0, rx_bad_icrc=0)) == []


@pytest.mark.skipif(MODULE is None, reason=f"AF_XDP extension absent: {WHY_NOT}")
def test_the_counters_read_are_fields_of_the_ports_structs() -> None:
    """AfXdpPort.counters() names its keys after these fields: the verdict's keys must be
    among them (tx_invalid_descs from XDP_STATISTICS, the rest the port's own)."""
    assert MODULE is not None
    ffi = MODULE.ffi
    port = {f for f, _ in ffi.typeof("struct xsk_counters").fields}
    kernel = {f for f, _ in ffi.typeof("struct xsk_kernel_stats").fields}
    assert {"rx_malformed", "rx_bad_ip_checksum", "rx_bad_udp_checksum", "rx_bad_icrc"} <= port
    assert "tx_invalid_descs" in kernel
