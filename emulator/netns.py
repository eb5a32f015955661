"""Enter a network namespace for the duration of a block (to create sockets there).

A socket belongs to the namespace it was created in for its whole life, so one process can serve
ranks in many namespaces: enter, create the socket, return. setns(2) switches only the calling
thread. Python 3.11 has no os.setns, hence ctypes.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

from emulator.errors import EnvironmentProblem

CLONE_NEWNET = 0x40000000  # include/uapi/linux/sched.h
NETNS_RUN_DIR = "/run/netns"  # where `ip netns add` mounts named namespaces

_libc = ctypes.CDLL(None, use_errno=True)


def netns_path(netns: str) -> str:
    """The namespace file of a name (under /run/netns) or an absolute path (/proc/PID/ns/net)."""
    return netns if netns.startswith("/") else os.path.join(NETNS_RUN_DIR, netns)


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise EnvironmentProblem(f"cannot enter network namespace {what}: {os.strerror(err)}")


@contextmanager
def entered(netns: str | None) -> Iterator[None]:
    """Run the block inside `netns` (None: stay where we are), then come back."""
    if netns is None:
        yield
        return
    path = netns_path(netns)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise EnvironmentProblem(f"network namespace {netns}: {e.strerror} ({path})") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target, netns)
        try:
            yield
        finally:
            _setns(home, "of the engine (returning)")
    finally:
        os.close(target)
        os.close(home)
