"""Time dilation of transport parameters: times multiplied, rates divided, sizes kept."""

from __future__ import annotations

import pytest

from emulator.transport.params import DcqcnParams, TransportParams
from tests.integration.dilation import dilate


def test_dilate_scales_by_declared_unit() -> None:
    base = TransportParams()
    slow = dilate(base, 10.0)
    assert slow.retransmit_timeout_s == pytest.approx(base.retransmit_timeout_s * 10)
    d, b = slow.dcqcn, base.dcqcn
    assert d.dce_tcp_rtt_us == pytest.approx(10.0)
    assert d.rate_reduce_monitor_period_us == pytest.approx(40.0)
    assert d.rpg_time_reset_us == pytest.approx(3000.0)
    assert d.min_time_between_cnps_us == pytest.approx(b.min_time_between_cnps_us * 10)
    assert d.rpg_ai_rate_mbps == pytest.approx(0.5)
    assert d.rpg_hai_rate_mbps == pytest.approx(5.0)
    assert d.rpg_min_rate_mbps == pytest.approx(0.1)
    # sizes, counts, fractions and switches unchanged
    assert d.rpg_byte_reset_bytes == b.rpg_byte_reset_bytes
    assert (d.dce_tcp_g, d.rpg_threshold, d.rpg_min_dec_fac) == (1019, 1, 50)
    assert d.clamp_tgt_rate == b.clamp_tgt_rate
    assert slow.path_mtu_bytes == base.path_mtu_bytes
    assert slow.ack_every_packets == base.ack_every_packets
    assert dilate(DcqcnParams(), 1.0) == DcqcnParams()
    with pytest.raises(ValueError, match="tdf"):
        dilate(base, 0.0)
