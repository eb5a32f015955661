"""A real Prometheus server (Debian package `prometheus`) on loopback for the system tests: a
temporary data dir, one scrape job, stopped by its process handle; and the polling they need."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

PROMETHEUS = Path("/usr/bin/prometheus")
SCRAPE_INTERVAL_S = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def wait_until(what: str, check: Any, timeout_s: float) -> Any:
    """Poll check() until it returns a truthy value; bounded in time."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            last = exc
        if last and not isinstance(last, BaseException):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class PrometheusServer:
    def __init__(self, workdir: Path, target_port: int) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {int(SCRAPE_INTERVAL_S * 1000)}ms\n"
            f"  scrape_timeout: {int(SCRAPE_INTERVAL_S * 1000)}ms\n"
            "scrape_configs:\n"
            "  - job_name: emulator\n"
            "    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n"
        )
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = get_json(url)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_range(
        self, promql: str, start_s: float, end_s: float, step_s: float
    ) -> list[dict[str, Any]]:
        """A range query, as Grafana sends a time-series panel's: one series per label set."""
        url = f"{self.base}/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": promql, "start": start_s, "end": end_s, "step": step_s}
        )
        body = get_json(url)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_at(self, promql: str, time_s: float) -> list[dict[str, Any]]:
        """An instant query at a given time (a table or bar gauge panel's)."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql, "time": time_s}
        )
        body = get_json(url)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, promql: str) -> float:
        (row,) = self.query(promql)
        return float(row["value"][1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
