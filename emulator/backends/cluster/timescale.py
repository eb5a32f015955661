"""time_dilation auto's first factor over a cluster: each server's own load curve.

This machine's curve says nothing of the servers': the actors are placed for the measurement and
released again; the run's probes and the run place them anew (emulator/backends/engine/
timescale.py verifies the factor, as on one machine).
"""

from __future__ import annotations

import contextlib
from typing import Any

from emulator.backends.base import BackendOptions
from emulator.backends.cluster.placement import ClusterPlan, cluster_of, plan_cluster
from emulator.scenario.model import Scenario
from emulator.timescale.curve import Shape
from emulator.timescale.tdf import AUTO_PER_SERVER, TdfChoice, auto_tdf
from fabrics.spec import ClosSpec

CALIBRATE_TIMEOUT_S = 900.0  # a first calibration of a shape on a server takes a while


def servers_tdf(scenario: Scenario, options: BackendOptions) -> TdfChoice:
    """Join the cluster, place its actors, take each server's curve, release them."""
    from emulator.backends.cluster.connect import place, release
    from emulator.raycluster.join import connect, ray_shutdown
    from emulator.raycluster.sources import source_fingerprint

    cluster = cluster_of(scenario, options)
    plan = plan_cluster(cluster, scenario.fabric, options.fabric_prefix)
    with contextlib.ExitStack() as stack:
        options.say(f"cluster: joining the Ray cluster at {cluster.address} to calibrate")
        connect(cluster.address)
        stack.callback(ray_shutdown)
        placed = place(cluster, source_fingerprint())
        stack.callback(release, placed.actors, placed.group)
        return per_server_tdf(scenario, options, plan, placed.actors)


def per_server_tdf(
    scenario: Scenario,
    options: BackendOptions,
    plan: ClusterPlan,
    actors: dict[str, Any],
) -> TdfChoice:
    """time_dilation auto's first factor over a cluster: each server measures its own share's
    load curve (cached there per machine and shape) and the run takes the highest TDF any
    needs. One server after another: on one machine (the tests) they would disturb each other."""
    import ray

    spec = scenario.fabric
    assert isinstance(spec, ClosSpec)
    rate = spec.rank_rate_bps
    per_server: dict[str, Any] = {}
    for share in plan.shares:
        part = share.part
        assert part is not None
        spines = sum(1 for n in part.nodes if n.startswith("s"))
        shape = Shape(
            spec.hosts_per_leaf,
            max(1, len(share.server.leaves)),
            max(1, spines),
            spec.parallel_links,
            scenario.collectives.qps_per_peer,
            len(share.ranks),
        )
        options.say(f"cluster: server {share.name} calibrates {shape.key()}")
        calibration = ray.get(
            actors[share.name].calibrate.remote(
                scenario.transport.path_mtu_bytes,
                shape,
                options.recalibrate,
                scenario.engine.native,
            ),
            timeout=CALIBRATE_TIMEOUT_S,
        )
        tdf, why = auto_tdf(
            len(share.ranks) * rate,
            calibration,
            scenario.transport.dcqcn,
            scenario.metrics.fidelity.cpu_busy_ratio,
        )
        per_server[share.name] = {
            "tdf": tdf,
            "bound_by": why,
            "shape": shape.key(),
            "calibration": calibration.to_json(),
        }
    worst = max(per_server, key=lambda name: per_server[name]["tdf"])
    tdf = per_server[worst]["tdf"]
    options.say(
        f"cluster: load curves give TDF {tdf:g} (the highest of the servers': "
        + ", ".join(f"{n} {v['tdf']:g}" for n, v in per_server.items())
        + ")"
    )
    return TdfChoice(
        tdf,
        AUTO_PER_SERVER,
        sum(len(s.ranks) for s in plan.shares) * rate,
        bound_by=f"server {worst}: {per_server[worst]['bound_by']}",
        per_server=per_server,
    )
