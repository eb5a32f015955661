"""The engine over several servers of a Ray cluster (`cluster`): the emulated Clos split by leaf,
or the ports toward a switch under test split by the servers that own them.

The same engine as `netns` (emulator.backends.engine), placed differently: each server's actor
(emulator.backends.cluster.server) brings up its part of the fabric, the cables between servers as VXLAN
tunnels, and runs the workers of its ranks; the coordinator stays here with the driver and talks
to them through the bridge (emulator.backends.cluster.bridge), so completions that a flow on another
server waits for cross through this process, as they do on one machine. Samples (NICs, ports,
CPU per server) come back with the workers' messages. One results folder, one Prometheus
endpoint and one progress line, here. Every server releases what it made on success, error and
Ctrl-C; a server whose actor died is cleaned by a task on its node (what `emulate clean` does).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import threading
from typing import Any

from collectors.fidelity import PartScope
from collectors.nic import NicSampler
from collectors.queue_pairs import qp_rows
from emulator.backends.base import (
    BackendContext,
    BackendOptions,
    ReplayJob,
    Session,
    SessionReport,
    TimescaleRequest,
)
from emulator.backends.cluster.bridge import RemoteLauncher, ServerLink
from emulator.backends.cluster.placement import ClusterPlan, cluster_of, plan_cluster
from emulator.backends.cluster.timescale import servers_tdf
from emulator.backends.dut.backend import real_time, refuse_dilation
from emulator.backends.engine.backend import EngineBackend
from emulator.backends.engine.sampling import Sampler
from emulator.backends.engine.session import engine_params
from emulator.backends.engine.timescale import dilated_timescale
from emulator.backends.netns.backend import refuse_unmodelled_keys
from emulator.engine.coordinator import Coordinator, EngineFailure
from emulator.engine.plan import RankEndpoint
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.events import CpuSample, NicSample, RunEvent
from emulator.planning.attribution import class_names, classes_json
from emulator.raycluster.join import check_security, ray_shutdown
from emulator.scenario.cluster import ClusterSpec
from emulator.scenario.model import Scenario
from emulator.timescale.probe import placement_key
from emulator.timescale.tdf import TdfChoice
from emulator.timescale.verdict import engine_checks
from fabrics.spec import ClosSpec, DutSpec

TEARDOWN_TIMEOUT_S = 60.0
DRIVER = "driver"  # the CPU samples of the machine the coordinator runs on


class ClusterSession(Session):
    def __init__(self, context: BackendContext, cluster: ClusterSpec, plan: ClusterPlan) -> None:
        from emulator.backends.cluster.connect import place, release
        from emulator.raycluster.join import connect
        from emulator.raycluster.sources import source_fingerprint

        self.context = context
        self.cluster = cluster
        self.plan = plan
        say = context.options.say
        scenario = context.scenario
        spec = scenario.fabric
        self.dut = isinstance(spec, DutSpec)
        if isinstance(spec, ClosSpec):
            self.port_line_rate_bps = spec.port_rate_bps
        say(f"cluster: joining the Ray cluster at {cluster.address}")
        connect(cluster.address)
        context.stack.callback(ray_shutdown)
        placed = place(cluster, source_fingerprint())
        context.stack.callback(release, placed.actors, placed.group)
        self.placed = placed
        context.interrupts.check()
        for share in plan.shares:
            info = placed.infos[share.name]
            offset, error = placed.offsets_s[share.name]
            part = share.part
            if isinstance(spec, DutSpec):
                hosts = "interfaces " + ", ".join(spec.interfaces[p] for p in share.ports)
            else:
                nodes = sorted(part.nodes) if part is not None else []
                switches = [n for n in nodes if not n.startswith("h")]
                hosts = (
                    f"switches {', '.join(switches) or 'none'}, "
                    f"{len(part.tunnels) if part else 0} links to other servers"
                )
            say(
                f"cluster: server {share.name} ({info['hostname']}, {info['cores']} cores): "
                f"{len(share.ranks)} ranks, {hosts}; clock offset {offset * 1e3:+.3f} ms "
                f"+- {error * 1e3:.3f} ms"
            )
        import ray

        if isinstance(spec, ClosSpec):
            self._say_underlays(spec)
        # every part at once; each server's teardown is registered first, so a part that
        # fails to come up still has the others released
        context.stack.callback(self._teardown)
        refs = {
            s.name: placed.actors[s.name].bring_up.remote(
                spec, context.tdf, s.prefix, s.part, s.ports
            )
            for s in plan.shares
        }
        self.parts: dict[str, dict[str, Any]] = {}
        for name, ref in refs.items():
            try:
                self.parts[name] = ray.get(ref, timeout=cluster.start_timeout_s)
            except Exception as exc:
                raise EnvironmentProblem(
                    f"server {name}: bringing its part of the fabric up failed: {_cause(exc)}"
                ) from None
            context.interrupts.check()
        first = self.parts[plan.shares[0].name]["metadata"]
        self.marker_name = str(first.get("marker", "none"))
        rate = spec.rank_rate_bps
        netns = {int(r): ns for p in self.parts.values() for r, ns in p["rank_netns"].items()}
        if isinstance(spec, DutSpec):
            shared = spec.ranks_per_interface > 1  # one transmit arbiter per port
            self.ranks = [
                RankEndpoint(
                    r,
                    str(ipaddress.IPv4Interface(spec.rank_cidr(r)).ip),
                    netns[r],
                    rate,
                    nic=spec.port_of(r) if shared else None,
                )
                for r in range(spec.rank_count)
            ]
        else:
            topology = plan.topology
            assert topology is not None
            self.ranks = [
                RankEndpoint(r, str(topology.host_address(h)), netns[r], rate)
                for r, h in enumerate(topology.hosts)
            ]
        self.engine_metadata: dict[str, Any] = {}
        self._torn_down = False

    def _say_underlays(self, spec: ClosSpec) -> None:
        """What crosses between servers at this TDF, against each underlay's own speed."""
        import ray

        context, plan = self.context, self.plan
        rate_mbps = spec.fabric_link_gbps / context.tdf * 1e3
        context.options.say(
            f"cluster: {plan.cross_cables()} links between servers as VXLAN over the underlays, "
            f"each up to {rate_mbps:.3g} Mb/s of wall-clock traffic at TDF {context.tdf:g}"
        )
        for share in plan.shares:
            underlay, part = share.server.underlay, share.part
            if underlay is None or part is None or not part.tunnels:
                continue
            info = ray.get(
                self.placed.actors[share.name].underlay.remote(underlay.interface, underlay.netns),
                timeout=TEARDOWN_TIMEOUT_S,
            )
            need = len(part.tunnels) * rate_mbps  # every tunnel of this server at once
            speed = info["speed_mbps"]
            said = f"{speed} Mb/s" if speed else "speed unknown (its driver reports none)"
            context.options.say(
                f"cluster: server {share.name}'s underlay {underlay.interface} "
                f"({underlay.address}): {said}, MTU {info['mtu']}; its tunnels carry at most "
                f"{need:.3g} Mb/s each way"
            )
            if speed and speed < need:
                context.options.say(
                    f"warning: server {share.name}'s underlay ({speed} Mb/s) is slower than its "
                    f"tunnels at line rate ({need:.3g} Mb/s): the underlay, not the emulated "
                    "fabric, would limit cross-server traffic; raise the TDF"
                )

    # -- Session ---------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        servers = {name: p["metadata"] for name, p in self.parts.items()}
        first = next(iter(servers.values()))
        if self.dut:
            return {"backend": "cluster", "marker": "dut", "servers": servers}
        return {
            "backend": "cluster",
            "marker": first.get("marker"),
            "rate_scale": first.get("rate_scale"),
            "delay_scale": first.get("delay_scale"),
            "hosts": first.get("hosts"),
            "routers": first.get("routers"),
            "shaper_burst_bytes": max(m.get("shaper_burst_bytes", 0) for m in servers.values()),
            "shaped_hops_max": first.get("shaped_hops_max"),
            "ecn_mark_point": first.get("ecn_mark_point"),
            "servers": servers,
        }

    def run(self, job: ReplayJob) -> SessionReport:
        import ray

        context, cluster = self.context, self.cluster
        scenario, tdf = context.scenario, context.tdf
        engine = engine_params(context)
        actors = self.placed.actors
        classes = job.attribution_classes if self.marker_name == "ebpf" else None
        throughput = _Throughput()

        def remote_samples(server: str) -> Any:
            def take(events: list[RunEvent]) -> None:
                tagged = [
                    dataclasses.replace(e, server=server) if isinstance(e, CpuSample) else e
                    for e in events
                ]
                throughput.add(tagged)
                job.on_samples(tagged)

            return take

        links = [
            ServerLink(
                name,
                actors[name],
                self.placed.infos[name],
                self.placed.offsets_s[name][0],
                remote_samples(name),
            )
            for name in actors
        ]
        # the driver's own sampler: its CPU and the progress line (the NICs are the servers')
        sampler = Sampler(
            remote_samples(DRIVER),
            NicSampler({}),
            None,
            scenario.metrics.sample_interval_s,
            tdf,
            job.progress,
            lambda: job.state(throughput.bps),
        )
        shown: dict[int, str] = {}

        def push_classes() -> None:
            if classes is None:
                return
            names = class_names(classes)
            if names != shown:
                shown.clear()
                shown.update(names)
                ray.get([a.set_class_names.remote(names) for a in actors.values()])

        def ready(_pids: list[int]) -> None:
            interval = scenario.metrics.sample_interval_s
            ray.get([a.prepare_sampling.remote(interval, tdf) for a in actors.values()])
            push_classes()
            sampler.take_baseline()

        def started(start_wall_s: float) -> None:
            context.interrupts.check()
            offsets = self.placed.offsets_s
            ray.get(
                [a.start_sampling.remote(start_wall_s + offsets[n][0]) for n, a in actors.items()]
            )
            sampler.set_start(start_wall_s)

        def on_events(events: list[RunEvent]) -> None:
            job.on_events(events)
            if len(classes or ()) != len(shown):
                push_classes()

        launcher = RemoteLauncher(
            links,
            self.plan.server_of_rank(),
            engine.start_method,
            cluster.workers_per_server,
        )
        coordinator = Coordinator(
            self.ranks,
            [],
            transport=scenario.transport,
            engine=engine,
            on_events=on_events,
            on_ready=ready,
            on_start=started,
            driver=job.driver,
            queue_pairs=context.planned.ideal.queue_pairs,
            profiles=context.planned.profiles,
            tag_of=job.tag_of if classes is not None else None,
            launcher=launcher,
        )
        job.latency_source(coordinator.latency_by_class)
        error: BaseException | None = None
        outcome = None
        sampler.start()
        try:
            outcome = coordinator.run()
        except (KeyboardInterrupt, EngineFailure) as exc:
            context.interrupts.pending = False
            error = exc
        finally:
            sampler.stop()
            sampling_errors = self._stop_sampling(links)
            self._refresh_fabric_metadata(links)
            for link in links:
                link.stop()
            job.progress.done(job.state(throughput.bps))
        metadata = outcome.metadata if outcome is not None else coordinator.metadata()
        metadata["worker_servers"] = [launcher.server_of(w.index) for w in coordinator.workers]
        metadata["servers"] = self._servers_metadata(links, launcher, coordinator)
        self.engine_metadata = metadata
        limits = scenario.metrics.fidelity
        reasons, unknown = engine_checks(
            metadata, tdf, scenario.transport.dcqcn, limits.cpu_busy_ratio
        )
        reasons += [f"sampling failed: {e}" for e in sampler.errors[:3]]
        reasons += [f"sampling failed on {e}" for e in sampling_errors[:3]]
        parts = {}
        for link in links:
            mine, nothing = engine_checks(
                metadata,
                tdf,
                scenario.transport.dcqcn,
                limits.cpu_busy_ratio,
                workers=metadata["servers"][link.name]["workers"],
            )
            mine += [e for e in sampling_errors if e.startswith(f"server {link.name}:")]
            if link.failure is not None:
                mine.append(f"its actor failed: {link.failure}")
            share = self.plan.share(link.name)
            part = share.part
            parts[f"server {link.name}"] = PartScope(
                switches=frozenset(n for n in part.nodes if not n.startswith("h"))
                if part is not None
                else frozenset(),
                ranks=frozenset(share.ranks),
                reasons=tuple(mine),
                unknown=tuple(nothing),
            )
        extra: dict[str, Any] = {"nic_readings_left_out": sampler.nic.skipped}
        if classes is not None:
            extra["attribution_classes"] = classes_json(classes)
        counters = coordinator.queue_pairs()
        return SessionReport(
            metadata=metadata,
            queue_pairs=qp_rows(
                counters.connections, counters.send, counters.recv, counters.latency
            ),
            reasons=reasons,
            unknown=unknown,
            # a real switch under test is not ours: its drops are not in our counters
            not_applicable=("drops_in_lossless_fabric",) if self.dut else (),
            extra=extra,
            error=error,
            parts=parts,
        )

    def _stop_sampling(self, links: list[ServerLink]) -> list[str]:
        import ray

        errors: list[str] = []
        for link in links:
            if link.failure is not None:
                continue
            try:
                errors += [
                    f"server {link.name}: {e}"
                    for e in ray.get(link.actor.stop_sampling.remote(), timeout=TEARDOWN_TIMEOUT_S)
                ]
            except Exception as exc:
                errors.append(f"server {link.name}: {_cause(exc)}")
        return errors

    def _refresh_fabric_metadata(self, links: list[ServerLink]) -> None:
        """Each live server's fabric metadata at the run's end (its underlay guards' drops)."""
        import ray

        for link in links:
            if link.failure is not None:
                continue
            with contextlib.suppress(Exception):  # a dead server keeps what it said at bring-up
                now = ray.get(link.actor.fabric_metadata.remote(), timeout=TEARDOWN_TIMEOUT_S)
                if now:
                    self.parts[link.name]["metadata"] = now

    def _servers_metadata(
        self, links: list[ServerLink], launcher: RemoteLauncher, coordinator: Coordinator
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for link in links:
            offset, error = self.placed.offsets_s[link.name]
            indexes = [
                w.index for w in coordinator.workers if launcher.server_of(w.index) == link.name
            ]
            out[link.name] = {
                "hostname": link.info.get("hostname"),
                "node_ip": link.info.get("node_ip"),
                "cores": link.info.get("cores"),
                "ranks": list(self.plan.share(link.name).ranks),
                "workers": indexes,
                "clock_offset_ms": round(offset * 1e3, 4),
                "clock_uncertainty_ms": round(error * 1e3, 4),
                "failure": link.failure,
            }
        return out

    def _teardown(self) -> None:
        """Every server releases its part; a server whose actor is gone is cleaned by a task
        on its node. Raises, after trying them all, naming what could not be released."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from emulator.backends.cluster.server import clean_server

        if self._torn_down:
            return
        self._torn_down = True
        say = self.context.options.say
        pending = {s.name: self.placed.actors[s.name].teardown.remote() for s in self.plan.shares}
        problems = []
        for share in self.plan.shares:
            name = share.name
            try:
                removed = ray.get(pending[name], timeout=TEARDOWN_TIMEOUT_S)
                say(f"cluster: server {name} released {len(removed)} resources")
                continue
            except Exception as exc:
                first = _cause(exc)
            info = self.placed.infos[name]
            try:
                task = ray.remote(clean_server).options(
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(info["node_id"], soft=False),
                )
                removed = ray.get(task.remote(share.server.state_dir), timeout=TEARDOWN_TIMEOUT_S)
                say(
                    f"cluster: server {name}'s actor was gone ({first}); a clean-up task on its "
                    f"node released {len(removed)} resources"
                )
            except Exception as exc:
                problems.append(
                    f"server {name} ({info['hostname']}): {_cause(exc)}; run `emulate clean` "
                    f"there (state file {info['state_file']})"
                )
        if problems:
            raise EnvironmentProblem("; ".join(problems))


class _Throughput:
    """Aggregate transmit rate of every NIC from the servers' samples (the progress line)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: dict[int, tuple[float, int]] = {}
        self.rates: dict[int, float] = {}

    def add(self, events: list[RunEvent]) -> None:
        with self.lock:
            for e in events:
                if isinstance(e, NicSample) and e.direction == "tx":
                    before = self.last.get(e.rank)
                    if before is not None and e.time_s > before[0]:
                        self.rates[e.rank] = (e.bytes - before[1]) * 8 / (e.time_s - before[0])
                    self.last[e.rank] = (e.time_s, e.bytes)

    @property
    def bps(self) -> float:
        with self.lock:
            return max(0.0, sum(self.rates.values()))


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".strip(": ")


class ClusterBackend(EngineBackend):
    """The emulated Clos (or ports toward a switch under test) over the servers of a Ray
    cluster, replayed by the engine."""

    name = "cluster"

    def check(self, scenario: Scenario, options: BackendOptions) -> None:
        """Before anything is planned, written or joined: what the emulated fabric cannot model
        (as on one machine), what is not supported over a cluster yet, and a driver without
        the cluster's token (the cluster itself is asked when it is joined). The servers'
        actors need root, and check it there; the driver does not."""
        fabric = scenario.fabric
        if isinstance(fabric, ClosSpec):
            refuse_unmodelled_keys(scenario)
            if fabric.link_events:
                raise ScenarioError("fabric.link_events: not supported over a cluster yet")
            if fabric.builder != "netns":
                raise ScenarioError(
                    f"fabric.builder: {fabric.builder} builds a fabric on one machine; over a "
                    "cluster the servers' parts use builder: netns"
                )
        if isinstance(fabric, DutSpec):
            refuse_dilation(scenario, options)
        if scenario.run.pfc_frames:
            raise ScenarioError("run.pfc_frames: not supported over a cluster yet")
        if scenario.metrics.capture is not None:
            raise ScenarioError(
                "metrics.capture: not supported over a cluster yet (the ranks' interfaces are "
                "on other servers)"
            )
        if scenario.streams:
            raise ScenarioError(
                "streams: not supported over a cluster yet (their senders and receivers run on "
                "this machine, the ranks on other servers)"
            )
        check_security(cluster_of(scenario, options).address)

    def timescale(self, request: TimescaleRequest) -> TdfChoice:
        """Toward a switch under test, real time (a physical switch cannot be slowed down);
        the emulated Clos as on one machine, but auto's first factor from each server's own
        load curve and the verified factor cached per placement."""
        scenario = request.scenario
        if isinstance(scenario.fabric, DutSpec):
            return real_time(request)
        return dilated_timescale(
            request,
            first=lambda: servers_tdf(scenario, request.options),
            key_suffix=f"|cluster {placement_key(scenario)}",
        )

    def open(self, context: BackendContext) -> Session:
        cluster = cluster_of(context.scenario, context.options)
        plan = plan_cluster(cluster, context.scenario.fabric, context.options.fabric_prefix)
        return ClusterSession(context, cluster, plan)
