"""cffi builder of emulator.native._ecmphash (ecmphash.c): Linux's IPv4 multipath hash for a UDP
flow (SipHash-2-4 over the flow keys), which fabrics/ecmp.py computes in Python when it is not
built; the balanced source-port policy asks it for up to 256 ports per queue pair.

`python -m emulator.native.build` compiles it with every other build_*.py here.
"""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ecmphash.c"

ffibuilder = FFI()
ffibuilder.cdef(
    """
    uint32_t l4_multipath_hash(uint32_t src, uint32_t dst, int proto, int sport, int dport,
                               uint32_t seed);
    """
)
ffibuilder.set_source(
    "emulator.native._ecmphash",
    SOURCE.read_text(),
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)
