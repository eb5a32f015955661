"""The two bpf(2) map commands the marker needs, through ctypes (no libbpf binding in the venv).

Reading counters by map id this way costs microseconds, where a `bpftool map lookup` process costs
milliseconds per port; collectors read every port every sample. Layouts: include/uapi/linux/bpf.h.
"""

from __future__ import annotations

import ctypes
import os
import platform

# bpf(2) syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h)
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_GET_FD_BY_ID = 14
BPF_ANY = 0
BPF_F_LOCK = 4  # copy the value under its bpf_spin_lock

_libc = ctypes.CDLL(None, use_errno=True)


class _MapElemAttr(ctypes.Structure):
    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class _GetIdAttr(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint32),
        ("next_id", ctypes.c_uint32),
        ("open_flags", ctypes.c_uint32),
    ]


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise OSError(f"bpf(2) syscall number unknown for {platform.machine()}")
    ret = int(_libc.syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf cmd {cmd}: {os.strerror(err)}")
    return ret


class BpfMap:
    """An open BPF map, found by its id; closes its fd on close()."""

    def __init__(self, map_id: int) -> None:
        self.map_id = map_id
        self.fd = _bpf(BPF_MAP_GET_FD_BY_ID, _GetIdAttr(map_id, 0, 0))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def lookup(self, key: bytes, value_size: int, *, lock: bool = False) -> bytes:
        kbuf = ctypes.create_string_buffer(key, len(key))
        vbuf = ctypes.create_string_buffer(value_size)
        attr = _MapElemAttr(
            self.fd, 0, ctypes.addressof(kbuf), ctypes.addressof(vbuf), BPF_F_LOCK if lock else 0
        )
        _bpf(BPF_MAP_LOOKUP_ELEM, attr)
        return vbuf.raw

    def update(self, key: bytes, value: bytes) -> None:
        kbuf = ctypes.create_string_buffer(key, len(key))
        vbuf = ctypes.create_string_buffer(value, len(value))
        attr = _MapElemAttr(self.fd, 0, ctypes.addressof(kbuf), ctypes.addressof(vbuf), BPF_ANY)
        _bpf(BPF_MAP_UPDATE_ELEM, attr)
