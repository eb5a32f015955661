"""The OTG server's HTTP side, in process on loopback: who may call it, what an endpoint it does
not have answers, what a bad request answers (OTG Error bodies, never a traceback), and HTTPS
with its generated certificate as snappi expects."""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import InputError
from emulator.otg.scenario import read_base
from emulator.otg.server import MAX_BODY_BYTES, OtgHttpServer, ServerOptions
from emulator.otg.service import OtgService, ServiceOptions
from tests.otg_scripts import ROOT, api_for, qp_fairness_config

BASE = ROOT / "scenarios" / "otg" / "clos_sim.yaml"


@contextlib.contextmanager
def running(tmp_path: Path, **options: Any) -> Iterator[OtgHttpServer]:
    base = read_base(BASE)
    service = OtgService(ServiceOptions(base.document, base.ranks, 100.0, tmp_path))
    server = OtgHttpServer(ServerOptions(port=0, **options), service, tmp_path / "tls")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def call(
    server: OtgHttpServer, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, dict[str, Any]]:
    host, port = server.server_address[:2]
    if server.options.tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            str(host), port, context=context, timeout=30
        )
    else:
        conn = http.client.HTTPConnection(str(host), port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_errors_are_otg_error_bodies(tmp_path: Path) -> None:
    with running(tmp_path, tls=False) as server:
        status, body = call(server, "POST", "/config", b"{nope")
        assert status == 400 and body["kind"] == "validation"
        assert body["errors"][0].startswith("config: not JSON")
        assert call(server, "POST", "/nowhere", b"{}") == (
            404,
            {"code": 404, "kind": "validation", "errors": ["POST /nowhere: no such endpoint"]},
        )
        status, body = call(server, "POST", "/control/action", b"{}")
        assert status == 501 and body["errors"] == [
            "POST /control/action: control actions is not implemented"
        ]
        status, body = call(server, "POST", "/monitor/metrics", b'{"choice": "port"}')
        assert status == 400 and body["errors"] == ["no configuration: POST /config first"]
        status, body = call(
            server, "POST", "/config", b"", **{"Content-Length": str(MAX_BODY_BYTES + 1)}
        )
        assert status == 413
        status, body = call(
            server,
            "POST",
            "/control/state",
            json.dumps({"choice": "port", "port": {"choice": "link"}}).encode(),
        )
        assert status == 400 and "control_state" in body["errors"][0]


def test_a_token_is_required_when_set(tmp_path: Path) -> None:
    with running(tmp_path, tls=False, token="s3cret") as server:
        status, body = call(server, "GET", "/capabilities/version")
        assert status == 401 and body["errors"] == [
            "authorization: a valid Bearer token is required"
        ]
        status, _ = call(server, "GET", "/capabilities/version", Authorization="Bearer wrong")
        assert status == 401
        status, body = call(server, "GET", "/capabilities/version", Authorization="Bearer s3cret")
        assert status == 200 and body["api_spec_version"]


def test_snappi_over_https_with_the_generated_certificate(tmp_path: Path) -> None:
    import socket

    with running(tmp_path) as server, socket.create_connection(server.server_address[:2]):
        # a client that connected and says nothing (no TLS handshake) holds no one up
        assert server.url.startswith("https://127.0.0.1:")
        key = tmp_path / "tls" / "server.key"
        assert key.stat().st_mode & 0o077 == 0  # the key is its owner's alone
        api = api_for(server.url)
        assert api.get_version().app_version
        config = qp_fairness_config(api, senders=1, qps_per_port=1)
        api.set_config(config)
        assert [p.name for p in api.get_config().ports] == ["Port 0", "Port 1"]
        request = api.metrics_request()
        request.rocev2_ipv4.per_peer.column_names = ["qp_configured", "qp_up"]
        (peer,) = api.get_metrics(request).rocev2_ipv4_per_peer_metrics
        assert (peer.name, peer.qp_configured, peer.qp_up) == ("RoCEv2 1", 1, 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"host": "0.0.0.0"}, "--listen 0.0.0.0: a non-loopback address needs --token-file"),
        ({"host": "0.0.0.0", "tls": False, "token": "t"}, "--http: plain HTTP only on loopback"),
        ({"cert": Path("c.pem")}, "--cert and --key: give both or neither"),
        ({"tls": False, "client_ca": Path("ca.pem")}, "--client-ca: client certificates need"),
    ],
)
def test_unsafe_listening_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        ServerOptions(**options).check()
    assert str(info.value).startswith(message)


def test_drain_waits_for_the_request_in_progress(tmp_path: Path) -> None:
    """On shutdown the server waits for a request being handled (a traffic start whose run is
    being stopped) so no request thread still works while the interpreter finalizes."""
    with running(tmp_path, tls=False) as server:
        entered, release = threading.Event(), threading.Event()

        def slow_config() -> dict[str, Any]:
            entered.set()
            release.wait(timeout=30)
            return {"slow": True}

        server.service.get_config = slow_config  # type: ignore[method-assign]
        replies: list[tuple[int, dict[str, Any]]] = []
        client = threading.Thread(target=lambda: replies.append(call(server, "GET", "/config")))
        client.start()
        assert entered.wait(timeout=10)
        assert server.drain(0.2) is False  # still in progress: not drained
        release.set()
        assert server.drain(10) is True
        client.join(timeout=10)
        assert replies == [(200, {"slow": True})]
        assert server.drain(0) is True  # nothing in progress: at once
