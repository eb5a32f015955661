"""`emulate otg serve SCENARIO`: an Open Traffic Generator server (snappi's API) over this project's
runs, on the base scenario's fabric (docs/otg.md)."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from emulator.errors import EXIT_OK, InputError

DRAIN_EXTRA_S = 30.0  # after a stopped run, its request writes the partial results' reply
HELP = "Serve the Open Traffic Generator API (snappi) on a fabric."
# What its work imports (C extensions, then the project), imported first with signals held
# (emulator.cli)
IMPORTS = (
    "yaml",
    "snappi",
    "cryptography.x509",
    "emulator.otg.server",
    "emulator.otg.service",
    "emulator.scenario",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="otg_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help=HELP, description=HELP)
    serve.add_argument(
        "scenario",
        metavar="SCENARIO",
        help="base scenario: its fabric, transport, run and metrics sections (its workload, "
        "traffic and expect are replaced by the configuration's flows)",
    )
    serve.add_argument(
        "--listen",
        default="127.0.0.1:8443",
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:8443; port 0 picks a free one); any "
        "non-loopback address needs --token-file or --client-ca",
    )
    serve.add_argument("--http", action="store_true", help="plain HTTP (loopback only)")
    serve.add_argument(
        "--cert", metavar="FILE", help="server certificate (PEM; default: generated)"
    )
    serve.add_argument("--key", metavar="FILE", help="its private key (PEM)")
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="a file holding the token clients must send as `Authorization: Bearer TOKEN`",
    )
    serve.add_argument(
        "--client-ca", metavar="FILE", help="require client certificates signed by this CA (PEM)"
    )
    serve.add_argument(
        "--duration-us",
        type=float,
        default=1000.0,
        metavar="US",
        help="how long (target time) a traffic start keeps the stateful flows posting messages "
        "(OTG gives them none: a tester sends until stopped); default 1000",
    )
    serve.add_argument(
        "--messages-in-flight",
        type=int,
        default=1,
        metavar="N",
        help="messages each QP has posted at a time (default 1)",
    )
    serve.add_argument("--backend", help="override the scenario's run.backend (sim, netns, dut)")
    serve.add_argument("--tdf", type=float, help="override the scenario's time dilation factor")
    serve.add_argument(
        "--netns-prefix", help="name prefix of the runs' fabric namespaces (emulate run's; emu-)"
    )
    serve.add_argument(
        "--work-dir",
        metavar="DIR",
        help="keep each start's scenario and results in DIR/runs/NNN (default: a temporary "
        "folder, removed when the server stops)",
    )
    parser.set_defaults(_otg=serve)


def main(args: argparse.Namespace) -> int:
    from emulator.otg.scenario import TrafficOptions, read_base
    from emulator.otg.server import OtgHttpServer, ServerOptions
    from emulator.otg.service import STOP_GRACE_S, OtgService, ServiceOptions

    host, _, port_text = args.listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit():
        raise InputError(f"--listen {args.listen}: expected HOST:PORT")
    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise InputError(f"--token-file {args.token_file}: {exc.strerror}") from None
        if not token:
            raise InputError(f"--token-file {args.token_file}: the file is empty")
    server_options = ServerOptions(
        host=host,
        port=int(port_text),
        tls=not args.http,
        cert=Path(args.cert) if args.cert else None,
        key=Path(args.key) if args.key else None,
        token=token,
        client_ca=Path(args.client_ca) if args.client_ca else None,
    )
    server_options.check()
    if args.duration_us <= 0:
        raise InputError(f"--duration-us {args.duration_us:g}: must be > 0")
    if args.messages_in_flight < 1:
        raise InputError(f"--messages-in-flight {args.messages_in_flight}: must be >= 1")
    base_path = Path(args.scenario)
    base = read_base(base_path)
    with contextlib.ExitStack() as stack:
        if args.work_dir:
            work_dir = Path(args.work_dir)
            work_dir.mkdir(parents=True, exist_ok=True)
        else:
            work_dir = Path(tempfile.mkdtemp(prefix="emulate-otg-"))
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        service = OtgService(
            ServiceOptions(
                base=base.document,
                ranks=base.ranks,
                link_gbps=base.line_rate_bps / 1e9,
                work_dir=work_dir,
                traffic=TrafficOptions(args.duration_us, args.messages_in_flight),
                backend=args.backend,
                tdf=args.tdf,
                netns_prefix=args.netns_prefix,
                gateway_macs=base.gateway_macs,
            )
        )
        try:
            server = OtgHttpServer(server_options, service, work_dir / "tls")
        except OSError as exc:
            raise InputError(f"--listen {args.listen}: {exc.strerror or exc}") from None
        stack.callback(server.server_close)
        # first the run is stopped, then the request that waited for it answers: no request
        # thread is left working while the interpreter exits
        stack.callback(server.drain, STOP_GRACE_S + DRAIN_EXTRA_S)
        stack.callback(service.close)
        print(
            f"otg: serving {server.url} ({base.ranks} ranks from {base_path}; runs in {work_dir})",
            file=sys.stderr,
            flush=True,
        )
        server.serve_forever(poll_interval=0.2)
    return EXIT_OK
