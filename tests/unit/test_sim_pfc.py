"""PFC accounting of the simulator's switch ingress (emulator/sim/port.py PfcIngress, SharedBuffer)
against the HPCC ns-3 MMU it implements, and the PFC headroom a tier gives a link (TierSpec).

The rules, from alibaba-edu/High-Precision-Congestion-Control,
simulation/src/point-to-point/model/switch-mmu.cc and switch-node.cc (reserve 0 here):
- UpdateIngressAdmission: a frame that would take the shared part past the PFC threshold is
  charged to the port's headroom, otherwise to the shared part (and to the switch's shared pool);
- CheckIngressAdmission: a frame is dropped when it fits neither (headroom full and past XOFF);
- SendToDev calls CheckAndSendPfc AFTER UpdateIngressAdmission, and CheckShouldPause is
  `!paused && (hdrm > 0 || shared >= GetPfcThreshold(port))`, the threshold read afresh;
- RemoveFromIngressAdmission takes a leaving frame's bytes from the headroom first;
- CheckShouldResume: `hdrm == 0 && (shared == 0 || shared + resume_offset <= threshold)`;
- GetPfcThreshold: (buffer - total headroom - total reserve - shared used) >> pfc_a_shift.
"""

from __future__ import annotations

from typing import cast

import pytest

from emulator.sim.port import Frame, PfcIngress, Port, SharedBuffer
from emulator.transport.wire import ECN_ECT0
from fabrics.spec import TierSpec

XOFF = 10_000
XON_OFFSET = 3_072  # HPCC switch-mmu.cc: resume_offset = 3 * 1024
HEADROOM = 5_000


class FakeUpstream:
    """Stands in for the upstream port: records every PFC signal the ingress sends it."""

    def __init__(self) -> None:
        self.signals: list[bool] = []

    def signal_pause(self, pause: bool) -> None:
        self.signals.append(pause)


def _frame(size_bytes: int) -> Frame:
    return Frame("h0", "h1", 49152, size_bytes, ECN_ECT0, b"")


def _ingress(
    xoff: int = XOFF,
    headroom: int = HEADROOM,
    pool: SharedBuffer | None = None,
) -> tuple[PfcIngress, FakeUpstream]:
    upstream = FakeUpstream()
    return PfcIngress(cast(Port, upstream), xoff, XON_OFFSET, headroom, pool), upstream


# -- pause -----------------------------------------------------------------------------------


def test_no_pause_below_xoff_and_one_pause_when_shared_reaches_it() -> None:
    # CheckShouldPause: shared >= threshold (equality pauses), and only when not paused yet
    ingress, upstream = _ingress()
    for _ in range(9):
        assert ingress.admit(_frame(1_000))
    assert (ingress.shared, ingress.hdrm, upstream.signals) == (9_000, 0, [])
    assert ingress.admit(_frame(1_000))
    assert (ingress.shared, ingress.hdrm) == (XOFF, 0)  # exactly XOFF still fits the shared part
    assert upstream.signals == [True] and ingress.paused
    ingress.admit(_frame(1_000))
    ingress.admit(_frame(1_000))
    assert upstream.signals == [True]  # already paused: no second PAUSE


def test_a_frame_past_xoff_goes_to_headroom_and_pauses() -> None:
    # UpdateIngressAdmission: new bytes past the threshold are headroom bytes; CheckShouldPause:
    # any headroom byte pauses, although the shared part is below XOFF
    ingress, upstream = _ingress()
    assert ingress.admit(_frame(9_000))
    assert upstream.signals == []
    frame = _frame(2_000)
    assert ingress.admit(frame)
    assert (ingress.shared, ingress.hdrm, ingress.held_bytes) == (9_000, 2_000, 11_000)
    assert upstream.signals == [True]
    assert frame.ingress is ingress  # the switch releases it here when it leaves


def test_drop_only_when_the_headroom_is_full() -> None:
    # CheckIngressAdmission: drop when psize + hdrm > headroom and psize + shared > threshold
    ingress, _ = _ingress()
    assert ingress.admit(_frame(XOFF))
    assert ingress.admit(_frame(HEADROOM - 1_000))
    assert ingress.admit(_frame(1_000))  # fills the headroom exactly: admitted
    assert (ingress.shared, ingress.hdrm, ingress.drops) == (XOFF, HEADROOM, 0)
    frame = _frame(1)
    assert not ingress.admit(frame)
    assert ingress.drops == 1
    assert (ingress.shared, ingress.hdrm) == (XOFF, HEADROOM)  # a dropped frame is not charged
    assert frame.ingress is None
    assert ingress.max_bytes == XOFF + HEADROOM


def test_max_bytes_is_the_most_ever_held() -> None:
    ingress, _ = _ingress()
    for size in (4_000, 4_000, 3_000):
        ingress.admit(_frame(size))
    ingress.release(4_000)
    ingress.admit(_frame(1_000))
    assert ingress.held_bytes == 8_000
    assert ingress.max_bytes == 11_000


# -- resume ----------------------------------------------------------------------------------


def test_release_empties_the_headroom_first() -> None:
    # RemoveFromIngressAdmission: from_hdrm = min(hdrm, psize), the rest from the shared part
    ingress, _ = _ingress()
    ingress.admit(_frame(9_000))
    ingress.admit(_frame(3_000))  # to headroom
    ingress.release(2_000)
    assert (ingress.shared, ingress.hdrm) == (9_000, 1_000)
    ingress.release(3_000)
    assert (ingress.shared, ingress.hdrm) == (7_000, 0)


def test_resume_needs_an_empty_headroom_and_shared_xon_offset_below_xoff() -> None:
    # CheckShouldResume: hdrm == 0 && shared + resume_offset <= threshold
    ingress, upstream = _ingress()
    ingress.admit(_frame(XOFF))
    ingress.admit(_frame(2_000))  # headroom
    assert upstream.signals == [True]
    ingress.release(1_000)  # headroom 1000 left
    assert upstream.signals == [True]
    ingress.release(1_000)  # headroom empty, shared = XOFF: above XON
    assert (ingress.shared, ingress.hdrm) == (XOFF, 0)
    assert upstream.signals == [True]
    ingress.release(XON_OFFSET - 1)  # shared + offset = XOFF + 1
    assert upstream.signals == [True] and ingress.paused
    ingress.release(1)  # shared + offset = XOFF exactly: resume
    assert ingress.shared == XOFF - XON_OFFSET
    assert upstream.signals == [True, False] and not ingress.paused
    ingress.release(1_000)
    assert upstream.signals == [True, False]  # no second RESUME


def test_a_paused_ingress_whose_shared_part_empties_resumes_whatever_the_offset() -> None:
    # CheckShouldResume: shared == 0 resumes even when the threshold is below resume_offset
    ingress, upstream = _ingress(xoff=2_000)
    ingress.admit(_frame(2_000))
    assert upstream.signals == [True]
    ingress.release(1_999)
    assert upstream.signals == [True]  # 1 + 3072 > 2000
    ingress.release(1)
    assert upstream.signals == [True, False]


def test_pause_resume_pause_again() -> None:
    ingress, upstream = _ingress()
    ingress.admit(_frame(XOFF))
    ingress.release(XON_OFFSET)
    ingress.admit(_frame(XON_OFFSET))
    assert upstream.signals == [True, False, True]


# -- dynamic threshold (HPCC's default) --------------------------------------------------------


def test_shared_buffer_threshold_is_free_buffer_over_two_to_the_shift() -> None:
    # GetPfcThreshold: (buffer_size - total_hdrm - total_rsrv - shared_used_bytes) >> pfc_a_shift
    pool = SharedBuffer(100_000, 20_000, 3)
    assert pool.threshold() == 80_000 >> 3
    pool.used = 16_000
    assert pool.threshold() == 64_000 >> 3
    assert SharedBuffer(10_000, 20_000, 3).threshold() == 0  # headroom larger than the buffer


def test_ingresses_of_one_switch_share_the_pool_and_its_threshold() -> None:
    pool = SharedBuffer(100_000, 20_000, 3)  # 80_000 free: XOFF 10_000 while nothing is held
    a, up_a = _ingress(xoff=0, pool=pool)
    b, up_b = _ingress(xoff=0, pool=pool)
    assert a.admit(_frame(4_000))
    assert pool.used == 4_000
    assert b.threshold() == (80_000 - 4_000) >> 3  # a's bytes lower b's XOFF
    assert b.admit(_frame(4_000))
    assert pool.used == 8_000
    a.admit(_frame(5_000))  # 4_000 + 5_000 <= (80_000 - 8_000) >> 3 = 9_000: shared part
    assert (a.shared, a.hdrm) == (9_000, 0)
    assert pool.used == 13_000
    assert up_a.signals == [True]  # 9_000 >= (80_000 - 13_000) >> 3 = 8_375
    assert up_b.signals == []  # 4_000 < 8_375
    a.admit(_frame(1_000))  # past XOFF: headroom bytes do not take from the pool
    assert (a.hdrm, pool.used) == (1_000, 13_000)
    a.release(1_000)
    a.release(4_000)
    assert (a.shared, a.hdrm, pool.used) == (5_000, 0, 9_000)
    # resume: 5_000 + 3_072 <= (80_000 - 9_000) >> 3 = 8_875
    assert up_a.signals == [True, False]


def test_the_pause_check_reads_the_threshold_after_the_frame_joined_the_pool() -> None:
    # switch-node.cc SendToDev: UpdateIngressAdmission first, then CheckAndSendPfc, whose
    # GetPfcThreshold already counts the new frame's shared bytes
    pool = SharedBuffer(100_000, 20_000, 3)
    ingress, upstream = _ingress(xoff=0, pool=pool)
    ingress.admit(_frame(8_000))  # threshold after: (80_000 - 8_000) >> 3 = 9_000 > 8_000
    assert upstream.signals == []
    # admitted to the shared part (8_900 <= 9_000, the threshold before it), after which the
    # threshold is (80_000 - 8_900) >> 3 = 8_887 <= 8_900: HPCC pauses now
    assert ingress.admit(_frame(900))
    assert (ingress.shared, ingress.hdrm) == (8_900, 0)
    assert ingress.shared >= pool.threshold() == 8_887
    assert upstream.signals == [True]


# -- headroom (fabrics/spec.py TierSpec.headroom_for) -----------------------------------------

# IEEE 802.3: a frame on the wire carries 14 header + 4 FCS bytes around its IP packet, plus an
# 8-byte preamble/SFD and a 12-byte inter-frame gap; a PFC frame (IEEE 802.1Qbb) is a minimum
# 64-byte MAC control frame, so 84 bytes of link time.
WIRE_FRAMING = 14 + 4 + 8 + 12
PFC_FRAME_ON_WIRE = 64 + 8 + 12


@pytest.mark.parametrize(
    ("rate_bps", "delay_s", "mtu"),
    [(100e9, 1e-6, 9000), (400e9, 2e-6, 9000), (25e9, 0.5e-6, 1500), (100e9, 0.0, 4200)],
)
def test_headroom_is_twice_the_bdp_two_max_frames_and_a_pfc_frame(
    rate_bps: float, delay_s: float, mtu: int
) -> None:
    # IEEE 802.1Qbb annex O delay model: after the ingress crosses XOFF, the PAUSE takes its own
    # time and the propagation delay to reach the upstream port, which finishes the frame it is
    # sending; what left meanwhile is still on the wire for one more delay. So: the round trip's
    # bytes (2 x rate x delay), one maximum frame at each end, and the PFC frame's time.
    bdp_bytes = rate_bps * delay_s / 8
    expected = int(2 * bdp_bytes) + 2 * (mtu + WIRE_FRAMING) + PFC_FRAME_ON_WIRE
    assert TierSpec().headroom_for(rate_bps, delay_s, mtu) == expected


def test_headroom_grows_with_the_link_round_trip() -> None:
    tier = TierSpec()
    near = tier.headroom_for(100e9, 1e-6, 9000)
    far = tier.headroom_for(100e9, 11e-6, 9000)
    assert far - near == 250_000  # 10 us more each way at 100 Gb/s: 2 x 125 KB more


def test_an_explicit_headroom_overrides_the_formula() -> None:
    assert TierSpec(pfc_headroom_bytes=12_345).headroom_for(400e9, 5e-6, 9000) == 12_345
