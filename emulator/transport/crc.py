"""CRC-32 for the RoCEv2 ICRC: IEEE 802.3's polynomial, zlib.crc32's values, from ISA-L.

The ICRC (IBA vol. 1 annex A17) is the Ethernet CRC-32 over the packet's invariant fields. Measured
here on the codec's inputs (bench numbers in the README): python-isal's crc32 takes about a sixth
of zlib.crc32's time on a 1024-byte packet and a tenth on a 4096-byte one; on the few-byte pieces
the codec chains (pseudo-header, BTH, the masked byte) both cost the call. Same arguments and
results as zlib.crc32 (data, running value).
"""

from __future__ import annotations

from isal.isal_zlib import crc32

__all__ = ["crc32"]
