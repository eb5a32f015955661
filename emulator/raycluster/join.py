"""Joining a Ray cluster, safely: the cluster backend's engine actors and a study's runs as tasks
both go through `connect`.

What runs on the nodes runs this machine's code (the engine actors as root), so the cluster must
refuse whoever lacks its token. What the driver's environment says proves nothing about the
cluster (a head started without RAY_AUTH_MODE=token lets anyone in, whatever the driver has set),
and a loopback address proves nothing either (Ray's GCS and raylets listen on the node's network
address even for a cluster on one machine, and other nodes may have joined over the network).
So, before anything is placed, the cluster itself is asked: a call without a token to the GCS
and to every live node's raylet must be refused as UNAUTHENTICATED (Ray's token authentication,
Ray >= 2.52: RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token),
or the caller is refused in one line naming the node. The driver needs the token too (checked
first, for a clearer message). A cluster with its dashboard on (an HTTP API that runs jobs) is
refused.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.scenario.cluster import SERVER_RESOURCE_PREFIX

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


ROOT_ACTORS = "the engine actors run as root"  # why the cluster must require the token


def check_security(address: str, key: str = "run.cluster.address", why: str = ROOT_ACTORS) -> None:
    """Refuse, in one line naming what is missing, a driver without Ray's token: the cluster
    must require one (check_cluster_auth), so a driver without it could only join a cluster
    that lets anyone in. `key` names the setting that gave the address, `why` says what the
    cluster runs."""
    parse_address(address)
    problem = token_problem()
    if problem is not None:
        raise EnvironmentProblem(
            f"{key}: {address}: Ray token authentication is off here ({problem}); "
            f"{why}, so the cluster must require a token: set "
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


def check_cluster_auth(
    address: str, key: str = "run.cluster.address", why: str = ROOT_ACTORS
) -> None:
    """Refuse a cluster any part of which lets in a caller without the token."""
    import ray

    problem = cluster_auth_problem(address, ray.nodes())
    if problem is not None:
        raise EnvironmentProblem(
            f"{key}: the Ray cluster at {address} does not require Ray's token "
            f"({problem}); {why}: start every node of the cluster with "
            "RAY_AUTH_MODE=token and the cluster's token"
        )


def connect(address: str, key: str = "run.cluster.address", why: str = ROOT_ACTORS) -> None:
    """Join the cluster at `address` (`key` names the setting that gave it) after the checks:
    the token here, no dashboard, the token required by every part of the cluster."""
    check_security(address, key, why)
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
            f"{key}: cannot join the Ray cluster at {address}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    dashboard = getattr(context, "dashboard_url", None)
    if dashboard:
        ray.shutdown()
        raise EnvironmentProblem(
            f"{key}: the Ray cluster at {address} runs its dashboard "
            f"({dashboard}), an HTTP API that runs jobs, and {why}: "
            "start its head with --include-dashboard=false"
        )
    try:
        check_cluster_auth(address, key, why)
    except BaseException:
        ray.shutdown()
        raise


def ray_shutdown() -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()
