"""PFC frame generators of a run: one thread per generator, each with an AF_PACKET socket on
its rank's interface, sending the frames its schedule releases (emulator.transport.pfc)."""

from __future__ import annotations

import socket
import threading
import time

from emulator.errors import EnvironmentProblem
from emulator.transport.pfc import PfcSchedule, interval_for_duty_cycle, pfc_frame
from fabrics.iproute import in_netns


class PfcGenerator:
    """Sends `frame` on `ifname` (in namespace `netns`, None: this one) on a schedule whose
    times are the target's: wall = start + t x tdf."""

    def __init__(
        self,
        netns: str | None,
        ifname: str,
        pause_quanta: dict[int, int],
        *,
        interval_s: float,
        start_s: float,
        stop_s: float | None,
        tdf: float,
    ) -> None:
        # protocol 0: a send-only packet socket (ETH_P_ALL would also get a copy of every frame
        # the interface carries, data path included)
        if netns is None:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        else:
            with in_netns(netns):
                self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            self.sock.bind((ifname, 0))
        except OSError as exc:
            self.sock.close()
            raise EnvironmentProblem(
                f"cannot bind a raw socket to {ifname} to send PFC frames: {exc.strerror}"
            ) from None
        mac = self.sock.getsockname()[4]
        self.frame = pfc_frame(mac, pause_quanta)
        self.schedule = PfcSchedule(interval_s, start_s, stop_s)
        self.tdf = tdf
        self.errors: list[str] = []
        self.sent = 0  # frames the kernel took
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, start_wall_s: float) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(start_wall_s,), name="pfc", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()

    def _run(self, start_wall_s: float) -> None:
        while not self._stop.is_set():
            now = (time.perf_counter() - start_wall_s) / self.tdf
            if self.schedule.due(now):
                try:
                    self.sock.send(self.frame)
                    self.sent += 1
                except OSError as exc:  # counted, not fatal: the run goes on
                    self.errors.append(exc.strerror or str(exc))
                    if len(self.errors) > 20:
                        return
            wait = self.schedule.wait_s(now)
            if wait is None:
                return
            self._stop.wait(min(wait * self.tdf, 0.5))


def interval_s(
    frames_per_s: float | None, duty_cycle: float | None, quanta: int, link_bps: float
) -> float:
    """Target seconds between frames: from a rate, or from the share of time the largest pause
    of a frame should keep its priorities paused on a link of `link_bps` (target speed)."""
    if frames_per_s is not None:
        return 1.0 / frames_per_s
    assert duty_cycle is not None
    return interval_for_duty_cycle(quanta, link_bps, duty_cycle)
