"""Several "servers" on this machine, for the tests and the bench: a Ray cluster whose nodes each
offer one server's resource, and underlay namespaces joined by a veth standing for their NICs;
or just a Ray cluster of a few nodes (local_ray: a study's runs as tasks).

Ray's token authentication is on (its address is this machine's non-loopback IP, which Ray
uses even for a local cluster), unless a test asks for a cluster without it (to see it refused).
Everything made here is removed on exit, whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from emulator.scenario.cluster import SERVER_RESOURCE_PREFIX

UNDERLAY_IFNAME = "ul0"
UNDERLAY_MTU = 9100  # carries a 9000-byte fabric MTU + 50 bytes of VXLAN
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


@dataclass(frozen=True)
class LocalCluster:
    address: str
    underlays: dict[str, tuple[str, str]]  # server -> (namespace, IPv4 address)
    state_dir: Path  # one folder per server below it

    def cluster_yaml(self, servers: dict[str, str], workers_per_server: int = 1) -> str:
        """`run.cluster:` lines (indented for `run:`) placing each server's leaves
        (`servers`: name -> leaves, e.g. {"a": "[0]"}); spines on the first server."""
        lines = ["  cluster:", f"    workers_per_server: {workers_per_server}", "    servers:"]
        for name, leaves in servers.items():
            ns, address = self.underlays[name]
            lines += [
                f"      - name: {name}",
                f"        leaves: {leaves}",
                f"        underlay: {{interface: {UNDERLAY_IFNAME}, address: {address}, "
                f"netns: {ns}}}",
                f"        state_dir: {self.state_dir / name}",
            ]
        return "\n".join(lines) + "\n"


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def local_ray(
    node_resources: list[dict[str, float]], *, cpus_per_node: int = 1, token_auth: bool = True
) -> Iterator[str]:
    """A Ray cluster on this machine: a head with no CPUs and one node per entry of
    `node_resources` (its custom resources), each with `cpus_per_node` cores; yields its
    address. With token_auth False, a cluster that lets anyone in (what a run must refuse)."""
    saved = {k: os.environ.get(k) for k in AUTH_ENV}
    if token_auth:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)
    else:
        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ.pop("RAY_AUTH_TOKEN", None)
    _reload_ray_auth()
    cluster = None
    try:
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        for resources in node_resources:
            cluster.add_node(num_cpus=cpus_per_node, resources=resources)
        yield str(cluster.address)
    finally:
        import ray

        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reload_ray_auth()


@contextlib.contextmanager
def local_cluster(
    state_dir: Path, servers: tuple[str, str] = ("a", "b"), *, token_auth: bool = True
) -> Iterator[LocalCluster]:
    """Two servers (a head node with no CPUs, one node per server) and their underlays; with
    token_auth False, a cluster that lets anyone in (what a run must refuse)."""
    tag = os.getpid() % 100000
    names = {s: f"ul{s}{tag}" for s in servers}
    addresses = {s: f"10.251.0.{i + 1}" for i, s in enumerate(servers)}
    made: list[str] = []
    try:
        for ns in names.values():
            made.append(ns)
            _sh("ip", "netns", "add", ns)
        a, b = servers
        _sh("ip", "-n", names[a], "link", "add", UNDERLAY_IFNAME, "mtu", str(UNDERLAY_MTU),
            "type", "veth", "peer", "name", UNDERLAY_IFNAME, "mtu", str(UNDERLAY_MTU),
            "netns", names[b])  # fmt: skip
        for server, ns in names.items():
            _sh("ip", "-n", ns, "addr", "add", f"{addresses[server]}/30", "dev", UNDERLAY_IFNAME)
            _sh("ip", "-n", ns, "link", "set", UNDERLAY_IFNAME, "up")
            # receive in order on NAPI, as the fabric's own veths do (fabrics/README.md)
            _sh("ip", "netns", "exec", ns, "ethtool", "-K", UNDERLAY_IFNAME, "gro", "on",
                "tso", "off")  # fmt: skip
        resources = [{f"{SERVER_RESOURCE_PREFIX}{server}": 1.0} for server in servers]
        with local_ray(resources, token_auth=token_auth) as address:
            yield LocalCluster(
                address,
                {s: (names[s], addresses[s]) for s in servers},
                state_dir,
            )
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def _reload_ray_auth() -> None:
    """Ray reads RAY_AUTH_MODE and the token once, when it is first imported, and caches them:
    a process that imported Ray before the variables were set (a test session) must have it read
    them again. The same two calls as Ray's own test helper (ray._private.
    authentication_test_utils.reset_auth_token_state)."""
    import importlib

    raylet = importlib.import_module("ray._raylet")  # compiled, without type stubs
    raylet.Config.initialize("")
    raylet.AuthenticationTokenLoader.instance().reset_cache()
