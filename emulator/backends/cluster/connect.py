"""Joining the Ray cluster and placing one engine actor per server, safely.

The actors run as root (they create namespaces, qdiscs and BPF programs), so the cluster must
refuse whoever lacks its token. What the driver's environment says proves nothing about the
cluster (a head started without RAY_AUTH_MODE=token lets anyone in, whatever the driver has set),
and a loopback address proves nothing either (Ray's GCS and raylets listen on the node's network
address even for a cluster on one machine, and other nodes may have joined over the network).
So, before anything is placed, the cluster itself is asked: a call without a token to the GCS
and to every live node's raylet must be refused as UNAUTHENTICATED (Ray's token authentication,
Ray >= 2.52: RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token),
or the run is refused in one line naming the node. The driver needs the token too (checked first,
for a clearer message). A cluster with its dashboard on (an HTTP API that runs jobs) is refused;
every server must run the driver's code (a hash of the sources) as root. The actors are reserved together in
one placement group (one bundle per server, on the node offering the server's resource), so a run
starts on all its servers or on none.

Each server's clock offset (its perf_counter minus the driver's) is measured with a few round
trips (Cristian's algorithm: the fastest trip, offset = server time - the trip's midpoint, good
to half that trip), so one start instant holds on every server.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.scenario.cluster import SERVER_RESOURCE_PREFIX, ClusterSpec

CLOCK_ROUNDS = 16
CALL_TIMEOUT_S = 60.0
AUTH_PROBE_TIMEOUT_S = 5.0
RAY_NAMESPACE = "chakra-emulator"


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ScenarioError(f"run.cluster.address: {address!r} is not host:port")
    return host.strip("[]"), int(port)


def token_problem(environ: dict[str, str] | None = None, home: Path | None = None) -> str | None:
    """What is missing for Ray's token authentication on this side, or None."""
    env = os.environ if environ is None else environ
    if env.get("RAY_AUTH_MODE", "").lower() != "token":
        return "RAY_AUTH_MODE=token is not set"
    if env.get("RAY_AUTH_TOKEN"):
        return None
    path = env.get("RAY_AUTH_TOKEN_PATH")
    candidate = Path(path) if path else (home or Path.home()) / ".ray" / "auth_token"
    if candidate.is_file() and candidate.read_text().strip():
        return None
    return f"no token: RAY_AUTH_TOKEN is unset and {candidate} holds none"


def check_security(address: str) -> None:
    """Refuse, in one line naming what is missing, a driver without Ray's token: the cluster
    must require one (check_cluster_auth), so a driver without it could only join a cluster
    that lets anyone in."""
    parse_address(address)
    problem = token_problem()
    if problem is not None:
        raise EnvironmentProblem(
            f"run.cluster.address: {address}: Ray token authentication is off here ({problem}); "
            "the engine actors run as root, so the cluster must require a token: set "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH (the cluster's token, "
            "`ray get-auth-token`)"
        )


def refuses_without_token(target: str, call: Callable[[Any], Any]) -> str | None:
    """None when the gRPC server at `target` refused `call(channel)`, made with no token, as
    UNAUTHENTICATED (Ray's token check, which comes before any handler); else what it did."""
    grpc = _module("grpc")
    with grpc.insecure_channel(target) as channel:
        try:
            call(channel)
        except grpc.RpcError as exc:
            code = exc.code()  # a grpc.Call as well
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return None
            return f"it answered {code.name} to a call without a token, so its auth is unknown"
    return "it answered a call that carried no token"


def _module(name: str) -> Any:
    """grpc and Ray's generated gRPC modules, which ship no type information."""
    return importlib.import_module(name)


def _gcs_call(channel: Any) -> Any:
    pb2 = _module("ray.core.generated.gcs_service_pb2")
    stub = _module("ray.core.generated.gcs_service_pb2_grpc").NodeInfoGcsServiceStub(channel)
    return stub.GetClusterId(pb2.GetClusterIdRequest(), timeout=AUTH_PROBE_TIMEOUT_S)


def _raylet_call(channel: Any) -> Any:
    pb2 = _module("ray.core.generated.node_manager_pb2")
    stub = _module("ray.core.generated.node_manager_pb2_grpc").NodeManagerServiceStub(channel)
    return stub.GetSystemConfig(pb2.GetSystemConfigRequest(), timeout=AUTH_PROBE_TIMEOUT_S)


def node_label(node: dict[str, Any]) -> str:
    """A node as `ray.nodes()` lists it: its address, host name and the servers it offers."""
    servers = sorted(
        r.removeprefix(SERVER_RESOURCE_PREFIX)
        for r in node.get("Resources", {})
        if r.startswith(SERVER_RESOURCE_PREFIX)
    )
    offers = f", server {', '.join(servers)}" if servers else ""
    return f"{node.get('NodeManagerAddress')} ({node.get('NodeManagerHostname', '?')}{offers})"


def cluster_auth_problem(
    address: str,
    nodes: list[dict[str, Any]],
    probe: Callable[[str, Callable[[Any], Any]], str | None] = refuses_without_token,
) -> str | None:
    """The first part of the cluster that does not refuse a caller without the token, named."""
    problem = probe(address, _gcs_call)
    if problem is not None:
        return f"the head's GCS at {address}: {problem}"
    for node in nodes:
        if not node.get("Alive"):
            continue
        target = f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}"
        problem = probe(target, _raylet_call)
        if problem is not None:
            return f"node {node_label(node)}, raylet at {target}: {problem}"
    return None


def check_cluster_auth(address: str) -> None:
    """Refuse a cluster any part of which lets in a caller without the token."""
    import ray

    problem = cluster_auth_problem(address, ray.nodes())
    if problem is not None:
        raise EnvironmentProblem(
            f"run.cluster.address: the Ray cluster at {address} does not require Ray's token "
            f"({problem}); the engine actors run as root: start every node of the cluster with "
            "RAY_AUTH_MODE=token and the cluster's token"
        )


@dataclass
class Placed:
    """The actors, their placement group and what each said about its server."""

    actors: dict[str, Any]
    infos: dict[str, dict[str, Any]]
    offsets_s: dict[str, tuple[float, float]]  # server -> (offset, uncertainty)
    group: Any


def connect(address: str) -> None:
    check_security(address)
    import ray

    if ray.is_initialized():
        ray.shutdown()
    try:
        context = ray.init(
            address=address,
            namespace=RAY_NAMESPACE,
            log_to_driver=False,
            logging_level=logging.ERROR,
            configure_logging=True,
        )
    except Exception as exc:
        raise EnvironmentProblem(
            f"run.cluster.address: cannot join the Ray cluster at {address}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    dashboard = getattr(context, "dashboard_url", None)
    if dashboard:
        ray.shutdown()
        raise EnvironmentProblem(
            f"run.cluster.address: the Ray cluster at {address} runs its dashboard "
            f"({dashboard}), an HTTP API that runs jobs, next to actors that run as root: "
            "start its head with --include-dashboard=false"
        )
    try:
        check_cluster_auth(address)
    except BaseException:
        ray.shutdown()
        raise


def place(cluster: ClusterSpec, fingerprint: str) -> Placed:
    """One EngineServer actor per server, reserved together; checked and clock-synchronized."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from emulator.backends.cluster.server import EngineServer

    offered = ray.cluster_resources()
    for i, server in enumerate(cluster.servers):
        if offered.get(server.ray_resource, 0) < 1:
            raise EnvironmentProblem(
                f"run.cluster.servers[{i}]: no node of the cluster offers the resource "
                f"{server.ray_resource!r} (start Ray on server {server.name} with "
                f"--resources='{{\"{server.ray_resource}\": 1}}')"
            )
    bundles = [{server.ray_resource: 1.0} for server in cluster.servers]
    group = placement_group(bundles, strategy="STRICT_SPREAD", name="chakra-emulator-run")
    try:
        ray.get(group.ready(), timeout=cluster.start_timeout_s)
    except Exception:
        remove_placement_group(group)
        raise EnvironmentProblem(
            f"run.cluster: the cluster could not reserve every server within "
            f"{cluster.start_timeout_s:g} s (run.cluster.start_timeout_s): another run holds "
            "one, or two servers' resources are on one node"
        ) from None
    remote: Any = ray.remote(EngineServer)
    actors = {}
    try:
        for i, server in enumerate(cluster.servers):
            actors[server.name] = remote.options(
                name=f"engine-{server.name}",
                num_cpus=0,
                resources={server.ray_resource: 1.0},
                max_concurrency=8,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=i
                ),
            ).remote(server.name, server.state_dir)
        infos = dict(
            zip(
                actors,
                ray.get([a.hello.remote() for a in actors.values()], timeout=CALL_TIMEOUT_S),
                strict=True,
            )
        )
    except BaseException:
        release(actors, group)
        raise
    for name, info in infos.items():
        problem = None
        if info["euid"] != 0:
            problem = (
                f"its engine actor runs as uid {info['euid']}; it needs root (namespaces, "
                "qdiscs, BPF): start Ray there as root"
            )
        elif info["source"] != fingerprint:
            problem = (
                f"it runs other code (sources {info['source']}, here {fingerprint}): set up the "
                "same commit on every server"
            )
        if problem is not None:
            release(actors, group)
            raise EnvironmentProblem(f"server {name} ({info['hostname']}): {problem}")
    offsets = {name: clock_offset(actor) for name, actor in actors.items()}
    return Placed(actors, infos, offsets, group)


def clock_offset(actor: Any) -> tuple[float, float]:
    """(server perf_counter - ours, uncertainty), from the fastest of CLOCK_ROUNDS trips."""
    import ray

    best: tuple[float, float] | None = None
    for _ in range(CLOCK_ROUNDS):
        t0 = time.perf_counter()
        theirs = ray.get(actor.clock.remote(), timeout=CALL_TIMEOUT_S)
        t1 = time.perf_counter()
        trip = t1 - t0
        if best is None or trip < 2 * best[1]:
            best = (theirs - (t0 + t1) / 2, trip / 2)
    assert best is not None
    return best


def release(actors: dict[str, Any], group: Any) -> None:
    import ray
    from ray.util.placement_group import remove_placement_group

    for actor in actors.values():
        with contextlib.suppress(Exception):
            ray.kill(actor)
    if group is not None:
        with contextlib.suppress(Exception):
            remove_placement_group(group)


def ray_shutdown() -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()
