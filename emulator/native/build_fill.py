"""cffi builder of emulator.native._fill (fill.c): the planner's max-min progressive filling
over path classes, in C (emulator/schedule/fluid.py falls back to its numpy version).

`python -m emulator.native.build` compiles it with every other build_*.py here.
"""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fill.c"

ffibuilder = FFI()
ffibuilder.cdef(
    """
    long fill_rates(long n_inc, const int64_t *inc_class, const int64_t *inc_link,
                    const double *weight, long n_links, const double *capacity, long n_classes,
                    uint8_t *fixed, double *rate, double tie, double min_share);
    """
)
ffibuilder.set_source(
    "emulator.native._fill",
    SOURCE.read_text(),
    # the sums must be the numpy fallback's, bit for bit: no fast math, no fused multiply-add
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-ffp-contract=off"],
)
