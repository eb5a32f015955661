"""Packet capture at a rank's interface for the engine backends (metrics.capture): dumpcap (from
Wireshark, which the set-up installs) in the rank's network namespace, its first N packets of S
bytes each, into a private temporary folder. The run owns each capture process: stopped (SIGINT,
so the file is complete; killed if it lingers) when the replay ends or on any error, by its pid,
never by name."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from emulator.errors import EnvironmentProblem

START_TIMEOUT_S = 10.0  # dumpcap writes its file's header once the interface is open
STOP_TIMEOUT_S = 5.0


class RankCapture:
    def __init__(
        self,
        rank: int,
        netns: str | None,
        ifname: str,
        folder: Path,
        *,
        packets: int,
        snap_bytes: int,
    ) -> None:
        self.rank = rank
        self.path = folder / f"rank-{rank}.pcap"
        command = ["dumpcap", "-q", "-P", "-i", ifname, "-s", str(snap_bytes)]
        command += ["-c", str(packets), "-w", str(self.path)]
        if netns is not None:
            command = ["ip", "netns", "exec", netns, *command]
        try:
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except FileNotFoundError:
            raise EnvironmentProblem(
                "metrics.capture: dumpcap is not installed (Debian package wireshark-common; "
                "./setup.sh installs it)"
            ) from None
        self._wait_started(ifname)

    def _wait_started(self, ifname: str) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                said = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
                lines = [line for line in said.strip().splitlines() if line.strip()]
                self._process = None
                raise EnvironmentProblem(
                    f"metrics.capture: rank {self.rank}: dumpcap on {ifname} ended at once: "
                    + (lines[-1] if lines else f"exit code {process.returncode}")
                )
            if self.path.is_file() and self.path.stat().st_size >= 24:
                return
            time.sleep(0.02)
        self.stop()
        raise EnvironmentProblem(
            f"metrics.capture: rank {self.rank}: dumpcap did not open {ifname} in "
            f"{START_TIMEOUT_S:g} s"
        )

    def stop(self) -> None:
        """End the capture (idempotent): its file then holds every packet it kept."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def read(self) -> bytes | None:
        return self.path.read_bytes() if self.path.is_file() else None
