"""The OTG HTTP(S) server: snappi's HTTP transport on one side, the service on the other.

Loopback by default. Over HTTPS (what snappi expects) with a certificate generated for the
address on first start, or one given; plain HTTP only on loopback. Any other address needs a
token (`Authorization: Bearer ...`) or client certificates signed by a given CA, so that nobody
else on the network can make this machine send traffic.
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import ipaddress
import json
import os
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from emulator import __version__
from emulator.errors import InputError
from emulator.otg.model import OtgError
from emulator.otg.service import OtgService

MAX_BODY_BYTES = 16 << 20
CONNECTION_TIMEOUT_S = 30.0
# the OTG endpoints this server does not implement (answered with an OTG error, not a 404)
NOT_IMPLEMENTED = {
    ("PATCH", "/config"): "updating a configuration (set it again)",
    ("PATCH", "/config/append"): "appending to a configuration (set it again)",
    ("PATCH", "/config/delete"): "deleting from a configuration (set it again)",
    ("POST", "/control/action"): "control actions",
}


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8443
    tls: bool = True
    cert: Path | None = None  # with key: the server's own certificate instead of a generated one
    key: Path | None = None
    token: str | None = None  # required as a Bearer token when set
    client_ca: Path | None = None  # client certificates must be signed by this CA

    def check(self) -> None:
        loopback = _is_loopback(self.host)
        if not loopback and not self.tls:
            raise InputError(f"--http: plain HTTP only on loopback, not on {self.host}")
        if not loopback and self.token is None and self.client_ca is None:
            raise InputError(
                f"--listen {self.host}: a non-loopback address needs --token-file or --client-ca"
            )
        if self.client_ca is not None and not self.tls:
            raise InputError("--client-ca: client certificates need HTTPS (drop --http)")
        if (self.cert is None) != (self.key is None):
            raise InputError("--cert and --key: give both or neither")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def generate_certificate(folder: Path, host: str) -> tuple[Path, Path]:
    """A self-signed certificate for `host` (and localhost), valid 90 days; the key readable by
    its owner only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "emulate otg serve")])
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = folder / "server.key", folder / "server.crt"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _version() -> dict[str, Any]:
    """The OTG model version served (the snappi this server validates with) and ours."""
    import snappi

    local = snappi.api().get_local_version()
    return {
        "api_spec_version": local.api_spec_version,
        "sdk_version": local.sdk_version,
        "app_version": __version__,
    }


class OtgHttpServer(ThreadingHTTPServer):
    # connection threads are daemons (an idle keep-alive client must not hold the exit); a
    # request in progress is waited for by drain() instead: a daemon thread still in pyarrow or
    # numpy when the interpreter finalizes can abort it ("PyGILState_Release ... finalizing")
    daemon_threads = True

    def __init__(self, options: ServerOptions, service: OtgService, tls_dir: Path) -> None:
        self.options = options
        self.service = service
        self._requests = threading.Condition()
        self._in_progress = 0
        super().__init__((options.host, options.port), _Handler)
        if options.tls:
            cert, key = options.cert, options.key
            if cert is None or key is None:
                cert, key = generate_certificate(tls_dir, options.host)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(cert, key)
            if options.client_ca is not None:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(options.client_ca)
            # the handshake in the connection's own thread (_Handler.setup), with its timeout:
            # a client that connects and says nothing must not hold the accepting loop
            self.socket = context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    @contextlib.contextmanager
    def request_in_progress(self) -> Iterator[None]:
        with self._requests:
            self._in_progress += 1
        try:
            yield
        finally:
            with self._requests:
                self._in_progress -= 1
                self._requests.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Wait (at most timeout_s) until no request is being handled; False if one still is."""
        with self._requests:
            return self._requests.wait_for(lambda: self._in_progress == 0, timeout=timeout_s)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (a TLS handshake, a client gone): one line, no traceback."""
        del request
        exc = sys.exc_info()[1]
        print(f"otg: {client_address[0]}: dropped: {type(exc).__name__}: {exc}", file=sys.stderr)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        scheme = "https" if self.options.tls else "http"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: OtgHttpServer
    server_version = "emulate-otg"
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_TIMEOUT_S  # a silent or slow client is dropped, not waited for

    def setup(self) -> None:
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.do_handshake()
            except (ssl.SSLError, OSError):
                self.close_connection = True
                raise

    def log_message(self, format: str, *args: Any) -> None:
        print(f"otg: {self.address_string()} {format % args}", file=sys.stderr)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _routes(self) -> dict[tuple[str, str], Callable[[bytes], dict[str, Any] | bytes]]:
        service = self.server.service
        return {
            ("POST", "/config"): service.set_config,
            ("GET", "/config"): lambda _body: service.get_config(),
            ("POST", "/control/state"): service.set_control_state,
            ("POST", "/monitor/metrics"): service.get_metrics,
            ("POST", "/monitor/states"): service.get_states,
            ("GET", "/capabilities/version"): lambda _body: _version(),
            ("POST", "/monitor/capture"): service.get_capture,
        }

    def _handle(self, method: str) -> None:
        with self.server.request_in_progress():
            self._handle_request(method)

    def _handle_request(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            body = self._body()  # read first: a refused request must not leave it in the stream
            self._authorize()
            route = self._routes().get((method, path))
            if route is None:
                what = NOT_IMPLEMENTED.get((method, path))
                if what is not None:
                    raise OtgError([f"{method} {path}: {what} is not implemented"], code=501)
                raise OtgError([f"{method} {path}: no such endpoint"], code=404)
            self._reply(200, route(body))
        except OtgError as exc:
            self._reply(exc.code, exc.body())
        except Exception as exc:  # a bug: the client gets an internal error, the server goes on
            message = f"{type(exc).__name__}: {exc}"
            self._reply(500, OtgError([message], kind="internal", code=500).body())

    def _authorize(self) -> None:
        token = self.server.options.token
        if token is None:
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise OtgError(["authorization: a valid Bearer token is required"], code=401)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise OtgError(["request: Content-Length is not a number"]) from None
        if length > MAX_BODY_BYTES:
            raise OtgError([f"request: {length} bytes, more than {MAX_BODY_BYTES}"], code=413)
        return self.rfile.read(length) if length else b"{}"

    def _reply(self, status: int, body: dict[str, Any] | bytes) -> None:
        binary = isinstance(body, bytes)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header(
            "Content-Type", "application/octet-stream" if binary else "application/json"
        )
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
