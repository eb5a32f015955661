"""Packet capture at a rank's interface for the engine backends (metrics.capture): tcpdump (the
set-up installs it) in the rank's network namespace, its first N packets of S bytes each, into a
private temporary folder. In immediate mode and packet-buffered: each packet is written as it
arrives (dumpcap, tried first, buffered its packets and lost a short run's at SIGINT). The run
owns each capture process: stopped (SIGINT, so the file is complete; killed if it lingers) when
the replay ends or on any error, by its pid, never by name."""

from __future__ import annotations

import select
import signal
import subprocess
import time
from pathlib import Path

from emulator.errors import EnvironmentProblem

START_TIMEOUT_S = 10.0  # tcpdump says "listening on" once its capture is active
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
        command = ["tcpdump", "-i", ifname, "-w", str(self.path), "-s", str(snap_bytes)]
        command += ["-c", str(packets), "--immediate-mode", "-U", "-n", "-Z", "root"]
        command += ["--time-stamp-precision=nano"]
        if netns is not None:
            command = ["ip", "netns", "exec", netns, *command]
        try:
            self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except FileNotFoundError:
            raise EnvironmentProblem(
                "metrics.capture: tcpdump is not installed (Debian package tcpdump; ./setup.sh "
                "installs it)"
            ) from None
        self._wait_started(ifname)

    def _wait_started(self, ifname: str) -> None:
        """Until tcpdump says it is listening (its capture is then active), or it ended."""
        process = self._process
        assert process is not None and process.stderr is not None
        said = b""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stderr], [], [], 0.05)
            if ready:
                chunk = process.stderr.read1(4096)  # type: ignore[attr-defined]
                said += chunk
                if b"listening on" in said:
                    return
                if not chunk:  # its stderr closed: it ended
                    process.wait()
            if process.poll() is not None:
                lines = [line for line in said.decode(errors="replace").splitlines() if line]
                self._process = None
                raise EnvironmentProblem(
                    f"metrics.capture: rank {self.rank}: tcpdump on {ifname} ended at once: "
                    + (lines[-1] if lines else f"exit code {process.returncode}")
                )
        self.stop()
        raise EnvironmentProblem(
            f"metrics.capture: rank {self.rank}: tcpdump did not open {ifname} in "
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
