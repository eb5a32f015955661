"""Placing one engine actor per server of a cluster joined safely (emulator.raycluster.join: the
actors run as root, so the cluster must refuse whoever lacks its token): every server must run
the driver's code (a hash of the sources, emulator.raycluster.sources) as root. The actors are reserved together in
one placement group (one bundle per server, on the node offering the server's resource), so a run
starts on all its servers or on none.

Each server's clock offset (its perf_counter minus the driver's) is measured with a few round
trips (Cristian's algorithm: the fastest trip, offset = server time - the trip's midpoint, good
to half that trip), so one start instant holds on every server.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from emulator.errors import EnvironmentProblem
from emulator.scenario.cluster import ClusterSpec

CLOCK_ROUNDS = 16
CALL_TIMEOUT_S = 60.0


@dataclass
class Placed:
    """The actors, their placement group and what each said about its server."""

    actors: dict[str, Any]
    infos: dict[str, dict[str, Any]]
    offsets_s: dict[str, tuple[float, float]]  # server -> (offset, uncertainty)
    group: Any


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
