"""cffi builder of emulator.native._simfab (simfab.c): the packet simulator's fabric (event
heap, ports, ECMP switches, PFC accounts) in C, with the receive queue pairs' common path
(simfab_rqp.c); emulator/sim/native.py is its Python side and
emulator/sim/fabric.py falls back to the Python fabric when it is not built.

`python -m emulator.native.build` compiles it with every other build_*.py here.
"""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SOURCES = [
    HERE / "simfab.c",
    HERE / "simfab_rqp.c",
    HERE / "simfab_sqp.c",
    HERE / "simfab_dcqcn.c",
]
API = HERE / "simfab_api.h"  # the declarations, read as they are: cdef and C cannot disagree

ffibuilder = FFI()
ffibuilder.cdef(API.read_text())
ffibuilder.set_source(
    "emulator.native._simfab",
    '#include <stdint.h>\n#include "simfab_api.h"\n',
    sources=[str(p) for p in SOURCES],
    include_dirs=[str(HERE)],
    # the simulated times must be the Python fabric's, bit for bit: no fused multiply-add
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-ffp-contract=off"],
)
