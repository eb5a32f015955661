"""cffi builder of emulator.native._xsk: the AF_XDP port (xsk_port.c, xsk_tx.c, xsk_rx.c), its
token bucket and header writer (xsk_frame.c), linked against Debian's libxdp, libbpf and zlib
(packages libxdp-dev, libbpf-dev, zlib1g-dev).

`python -m emulator.native.build` compiles it with every other build_*.py here (or, alone,
`python emulator/native/build_xsk.py`). The declarations are xsk_api.h's, read as they are, so
cdef and C cannot disagree. The XDP program (xsk_rocev2.bpf.c) is not part of this module: it is
compiled with clang -target bpf when a port first opens (emulator/engine/af_xdp_setup.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
API = HERE / "xsk_api.h"
C_FILES = tuple(HERE / f"xsk_{part}.c" for part in ("frame", "port", "tx", "rx"))
SOURCES = (*C_FILES, API, HERE / "xsk_internal.h")  # what the module is built from

ffibuilder = FFI()
ffibuilder.cdef(API.read_text())
ffibuilder.set_source(
    "emulator.native._xsk",
    '#include <stdint.h>\n#include "xsk_api.h"\n',
    sources=[str(c) for c in C_FILES],
    include_dirs=[str(HERE)],
    libraries=["xdp", "bpf", "z"],  # z: zlib's crc32 for the received packets' ICRC
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)

if __name__ == "__main__":
    # alone, while developing: the shared object goes next to this file, like the runner's
    sys.path.insert(0, str(HERE.parents[1]))
    from emulator.native.build import build

    print(build("xsk"))
