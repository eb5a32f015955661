"""The simulated fabric in C (emulator/native/simfab.c): the event heap, every port, the ECMP
switches and the PFC accounts run there; the hosts, their transport and the replay stay in
Python, as with the Python fabric (emulator/sim/port.py, fabric.py's Switch, engine.py), whose
results it gives bit for bit (tests/integration/test_sim_native.py).

The objects here stand where the Python ones do (SimFabric.sim, ports, switches, ingresses) and
answer the same questions (counters, attribution, link events, reroutes), reading the C state.
A packet stays a Python object: a frame in C carries a handle to it, and the frames the fabric
drops, or a receive queue pair's common path takes (native_rqp.py), hand their handles back
(`_forget`). A fabric with a balancing mode other than ecmp, or with MAX_HOSTS hosts or more,
runs in Python (fabric.build_fabric says so, or refuses `on`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from emulator.native import load
from emulator.sim.native_dcqcn import REASONS
from emulator.sim.native_rqp import ReceiveOffload, data_flags_table
from emulator.sim.native_sqp import SendOffload
from emulator.sim.port import Frame, SharedBuffer, _set_ce
from emulator.transport.events import CnpSent, RateChanged, TransportEvent
from emulator.transport.packets import ROCEV2_UDP_PORT, DataPacket
from emulator.transport.params import EcnMarkingParams
from emulator.transport.wire import ECN_CE

# a route key holds a host's index in 15 bits (simfab.c route_key)
MAX_HOSTS = 1 << 15
MARK_RNG, LOSS_RNG = 0, 1


def load_module() -> tuple[ModuleType | None, str]:
    """emulator.native._simfab, or None and why not."""
    return load("simfab")


class NativeSimulator:
    """engine.Simulator's interface (now, at, run, pending, events_run) over the C heap: the
    Python callbacks are events of the same heap, numbered in the same sequence as the
    fabric's own, so equal times run in the order they were scheduled, as in Python."""

    def __init__(
        self, module: ModuleType, n_ports: int, n_switches: int, n_ingress: int, n_pools: int
    ) -> None:
        self.ffi: Any = module.ffi
        self.lib: Any = module.lib
        fab = self.lib.fab_new(n_ports, n_switches, n_ingress, n_pools)
        if fab == self.ffi.NULL:
            raise MemoryError("the native simulated fabric: out of memory")
        self.fab: Any = self.ffi.gc(fab, self.lib.fab_free)
        if self.lib.fab_oom(self.fab):
            raise MemoryError("the native simulated fabric: out of memory")
        self.now = 0.0
        self._calls: dict[int, tuple[Callable[..., None], tuple[Any, ...]]] = {}
        self._next_call = 0
        self.packets: dict[int, Any] = {}  # handle -> the packet a frame in C carries
        self._next_packet = 0
        self._out = self.ffi.new("fab_out_t *")
        self._budget = self.ffi.new("int64_t *")
        # fab_attr_take's answers, for every port's sample in turn
        self._attr_items = self.ffi.new("fab_attr_t **")
        self._attr_marked = self.ffi.new("int64_t **")
        self._attr_n_marked = self.ffi.new("int32_t *")
        self._dead = self.ffi.new("int64_t **")
        # the transport's event list C raises events into, and its handler (bind_events)
        self.events: list[TransportEvent] | None = None
        self._events_handler: Callable[[], None] = lambda: None
        self._raised = self.ffi.new("fab_event_t **")
        self._cnp_sent = self.lib.EVT_CNP_SENT  # the other kind raised: EVT_RATE_CHANGED
        # receivers whose in-order packets C takes (native_rqp.py), and the flags it reads
        self.rx = ReceiveOffload(self.ffi, self.lib, self.fab)
        self.data_flags = data_flags_table(self.lib)
        # the hosts' NIC arbiters and their queue pairs' grants (native_sqp.py), set by connect
        self.tx: SendOffload | None = None
        # set by connect
        self.host_names: list[str] = []
        self.host_index: dict[str, int] = {}
        self.hosts: list[Any] = []
        self.ports: list[NativePort] = []
        self.switches: list[NativeSwitch] = []
        self._pools: dict[SharedBuffer, int] = {}  # a switch's buffer -> its number in C

    @property
    def events_run(self) -> int:
        return int(self.fab.events_run)

    @property
    def pending(self) -> int:
        return int(self.lib.fab_pending(self.fab))

    def at(self, when_s: float, fn: Callable[..., None], *args: Any) -> None:
        handle = self._next_call
        self._next_call = handle + 1
        self._calls[handle] = (fn, args)
        self.lib.fab_at(self.fab, when_s, handle)

    def bind_events(self, events: list[TransportEvent], handler: Callable[[], None]) -> None:
        """The replay's event list (an _Events: its first append schedules `handler` at that
        instant) and its handler: C raises events into it as the Python transport would append
        them, and schedules the handler as that first append does (simfab.c raise_event), so
        a receiver whose events go there may have its CE marks answered in C (native_rqp.py)."""
        self.events = events
        self._events_handler = handler
        self.rx.events = events
        if self.tx is not None:
            self.tx.events = events

    def _take_events(self) -> None:
        """The events C raised, appended in order (their handler is already scheduled)."""
        n = self.lib.fab_events(self.fab, self._raised)
        events = self.events
        assert events is not None
        cnp_sent, reasons = self._cnp_sent, REASONS
        for ev in self.ffi.unpack(self._raised[0], n):
            if ev.kind == cnp_sent:
                made: TransportEvent = CnpSent(ev.qpn, ev.now_s)
            else:
                made = RateChanged(ev.qpn, ev.now_s, ev.rate_bps, ev.target_bps, reasons[ev.reason])
            list.append(events, made)  # no second scheduling
        self.lib.fab_events_clear(self.fab)

    def packet_handle(self, packet: Any) -> int:
        handle = self._next_packet
        self._next_packet = handle + 1
        self.packets[handle] = packet
        return handle

    def run(self, *, until_s: float, max_events: int = 50_000_000) -> None:
        """Every event up to `until_s` (at most `max_events` of them), as Simulator.run."""
        lib, fab, out, budget = self.lib, self.fab, self._out, self._budget
        budget[0] = max_events
        # fab_run's answers (simfab_api.h)
        done, py, rx, idle, route, timer = (
            lib.RET_DONE,
            lib.RET_PY,
            lib.RET_HOST_RX,
            lib.RET_IDLE,
            lib.RET_ROUTE,
            lib.RET_TIMER,
        )
        run = lib.fab_run
        calls = self._calls
        tx = self.tx
        events = self.events
        try:
            while True:
                if events is not None:
                    # whether a first event C raises schedules the handler (_Events.append)
                    fab.events_listed = 1 if events else 0
                kind = run(fab, until_s, budget, out)
                if fab.n_events:
                    self._take_events()  # before anything Python runs: they happened first
                if kind == done:
                    break
                self.now = fab.now
                if kind == py:
                    handle = out.handle
                    if handle >= 0:
                        fn, args = calls.pop(handle)
                        fn(*args)
                    else:  # EVENTS_HANDLE: C raised the first event of an instant
                        self._events_handler()
                elif kind == rx:
                    self._receive(out)
                elif kind == timer:
                    assert tx is not None
                    tx.fire(out.handle)
                elif kind == idle:
                    on_idle = self.ports[out.port].on_idle
                    if on_idle is not None:
                        on_idle()
                elif kind == route:
                    self.switches[out.node].route(out)
                elif kind == lib.RET_BUDGET:
                    raise RuntimeError(
                        f"simulation exceeded {max_events} events at t={fab.now:.6f}s"
                    )
                else:
                    raise MemoryError("the native simulated fabric: out of memory")
        finally:
            if fab.n_events:
                self._take_events()
            self._forget()
            self.rx.read_all()
            if tx is not None:
                tx.fold_dirty()
        self.now = until_s
        fab.now = until_s

    def connect(
        self, hosts: Iterable[Any], ports: Iterable[NativePort], switches: Iterable[NativeSwitch]
    ) -> None:
        """Where each port's frames go (its peer: a host or a switch), once all are built."""
        self.hosts = list(hosts)
        self.host_names = [h.name for h in self.hosts]
        self.host_index = {name: i for i, name in enumerate(self.host_names)}
        self.ports = sorted(ports, key=lambda p: p.index)
        self.switches = sorted(switches, key=lambda s: s.index)
        switch_index = {id(s): s.index for s in self.switches}
        self.rx.host_index = self.host_index
        for i, host in enumerate(self.hosts):
            host.receive_offload = lambda qp, i=i, host=host: self.rx.take(i, qp, host)
        self.tx = SendOffload(self.ffi, self.lib, self.fab, self.host_index)
        for i, host in enumerate(self.hosts):
            # a host carrying encoded bytes builds and captures each packet in Python
            if not host.wire_bytes and isinstance(host.nic, NativePort):
                self.tx.arbitrate(host, i, host.nic.index)
        for port in self.ports:
            if port.peer.name in self.host_index:
                port._p.peer_host = self.host_index[port.peer.name]
            else:
                port._p.peer_switch = switch_index[id(port.peer)]

    def ingress(
        self,
        index: int,
        upstream: NativePort,
        xoff_bytes: int,
        xon_offset: int,
        headroom_bytes: int,
        pool: SharedBuffer | None,
    ) -> NativeIngress:
        """PFC account `index` (port.PfcIngress's arguments); a switch's accounts share its
        pool, the first of them numbering it."""
        g = self.fab.ingress[index]
        g.upstream, g.xoff, g.xon_offset, g.headroom_bytes = (
            upstream.index,
            xoff_bytes,
            xon_offset,
            headroom_bytes,
        )
        g.pool = -1
        if pool is not None:
            number = self._pools.get(pool)
            if number is None:
                number = self._pools[pool] = len(self._pools)
                c_pool = self.fab.pools[number]
                c_pool.free_bytes, c_pool.used, c_pool.shift = pool.free_bytes, 0, pool.shift
            g.pool = number
        upstream._p.far_ingress = index
        return NativeIngress(self, index, upstream)

    def _receive(self, out: Any) -> None:
        names = self.host_names
        handle = out.handle
        packet = self.packets.pop(handle) if handle >= 0 else SendOffload.packet(out)
        ecn = out.ecn
        if ecn == ECN_CE and isinstance(packet, bytes) and packet[1] & 3 != ECN_CE:
            packet = _set_ce(packet)  # marked in the fabric (port.py _mark does it there)
        frame = Frame(
            names[out.src],
            names[out.dst],
            out.sport,
            out.size,
            ecn,
            packet,
            bool(out.control),
            out.mhash,
            out.tag,
            priority=bool(out.priority),
            flow=out.flow,
            dport=out.dport,
        )
        port = self.ports[out.port]
        qpn = out.qpn
        if qpn >= 0 and qpn in self.rx.receivers:
            rx = self.rx
            rx.read(qpn)  # what C took for its queue pair, before the receiver sees this one
            port.peer.receive(frame, port)  # the host (port.peer, as the Python fabric delivers)
            rx.write(qpn)
        else:
            port.peer.receive(frame, port)

    def _forget(self) -> None:
        """The packets of frames the fabric dropped or lost."""
        n = self.lib.fab_dead(self.fab, self._dead)
        if n:
            packets = self.packets
            for handle in self.ffi.unpack(self._dead[0], n):
                packets.pop(handle, None)
            self.lib.fab_dead_clear(self.fab)


class NativePort:
    """A port of the C fabric with port.Port's readings and controls."""

    def __init__(self, sim: NativeSimulator, index: int, name: str) -> None:
        self.sim = sim
        self.index = index
        self.name = name
        self._p: Any = sim.fab.ports + index
        self._on_idle: Callable[[], None] | None = None
        self.peer: Any = None
        self.queue_samples = None  # not kept by the C fabric (a test's Python fabric keeps them)

    @classmethod
    def make(
        cls,
        sim: NativeSimulator,
        index: int,
        name: str,
        *,
        rate_bps: float,
        delay_s: float,
        buffer_bytes: int,
        law: EcnMarkingParams | None,
        mark_rng: random.Random,
        mark_on_arrival: bool,
        loss_probability: float,
        rng: random.Random,
        lossless: bool,
    ) -> NativePort:
        """Port `index` with port.Port's settings (its ECN law and both generators' states)."""
        port = cls(sim, index, name)
        p = port._p
        p.rate_bps, p.delay_s, p.buffer_bytes = rate_bps, delay_s, buffer_bytes
        p.loss_p, p.lossless, p.mark_on_arrival = loss_probability, lossless, mark_on_arrival
        if law is not None:  # marking.EcnMarker's law, its draws from mark_rng
            p.has_marker, p.pmax = 1, law.pmax
            p.kmin, p.kmax = law.kmin_bytes, law.kmax_bytes
            p.span = max(law.kmax_bytes - law.kmin_bytes, 1)
            set_rng(sim, index, MARK_RNG, mark_rng)
        set_rng(sim, index, LOSS_RNG, rng)
        return port

    # -- what a host asks of its NIC ------------------------------------------------------
    @property
    def on_idle(self) -> Callable[[], None] | None:
        return self._on_idle

    @on_idle.setter
    def on_idle(self, fn: Callable[[], None] | None) -> None:
        """The host that pulls from this port when it goes idle (C asks back: RET_IDLE)."""
        self._on_idle = fn
        self._p.idle_host = self.index if fn is not None else -1

    def send(self, frame: Frame) -> None:
        sim = self.sim
        index = sim.host_index
        if frame.ingress is not None:
            raise ValueError(f"{self.name}: a frame charged to a switch ingress enters a port")
        packet = frame.packet
        if type(packet) is DataPacket and frame.dport == ROCEV2_UDP_PORT:
            # what a receive queue pair's common path in C reads (native_rqp.py)
            qpn, psn = packet.dest_qp, packet.psn
            flags = sim.data_flags[packet.opcode] | packet.ack_req  # DATA_ACK_REQ is 1
            payload = packet.payload_bytes
        else:
            qpn, psn, flags, payload = -1, 0, 0, 0
        if sim.lib.fab_send(
            sim.fab,
            self.index,
            index[frame.src],
            index[frame.dst],
            frame.sport,
            frame.size_bytes,
            frame.ecn,
            frame.control,
            frame.tag,
            frame.priority,
            frame.flow,
            frame.dport,
            frame.mhash,
            sim.packet_handle(packet),
            qpn,
            psn,
            flags,
            payload,
        ):
            raise MemoryError("the native simulated fabric: out of memory")

    rate_bps = property(lambda self: self._p.rate_bps)
    delay_s = property(lambda self: self._p.delay_s)
    buffer_bytes = property(lambda self: self._p.buffer_bytes)

    @property
    def loss_probability(self) -> float:
        return float(self._p.loss_p)

    @loss_probability.setter
    def loss_probability(self, p: float) -> None:
        self._p.loss_p = p

    lossless = property(lambda self: bool(self._p.lossless))
    mark_on_arrival = property(lambda self: bool(self._p.mark_on_arrival))
    busy = property(lambda self: bool(self._p.busy))
    paused = property(lambda self: bool(self._p.paused))
    up = property(lambda self: bool(self._p.up))
    queued_bytes = property(lambda self: self._p.queued_bytes)
    max_queued_bytes = property(lambda self: self._p.max_queued_bytes)
    tx_frames = property(lambda self: self._p.tx_frames)
    tx_bytes = property(lambda self: self._p.tx_bytes)
    drops = property(lambda self: self._p.drops)
    losses = property(lambda self: self._p.losses)
    lost_bytes = property(lambda self: self._p.lost_bytes)
    marks = property(lambda self: self._p.marks)
    pause_frames = property(lambda self: self._p.pause_frames)
    resume_frames = property(lambda self: self._p.resume_frames)
    paused_s = property(lambda self: self._p.paused_s)

    def paused_s_until(self, now: float) -> float:
        p = self._p
        return p.paused_s + (now - p.paused_since if p.paused else 0.0)

    # -- attribution ----------------------------------------------------------------------
    @property
    def attribution(self) -> dict[int, list[Any]] | None:
        """On (a dict, as port.Port's) or off (None); the counts live in C (take_attribution)."""
        return {} if self._p.attribution else None

    @attribution.setter
    def attribution(self, value: dict[int, list[Any]] | None) -> None:
        if value:
            raise ValueError("the native fabric's attribution starts empty")
        self._p.attribution = 0 if value is None else 1

    def take_attribution(
        self,
    ) -> tuple[tuple[tuple[int, int, int, int, int, float], ...], tuple[int, ...]]:
        """As port.Port.take_attribution."""
        sim = self.sim
        ffi, lib = sim.ffi, sim.lib
        assert self._p.attribution
        items, marked, n_marked = sim._attr_items, sim._attr_marked, sim._attr_n_marked
        n = lib.fab_attr_take(sim.fab, self.index, items, marked, n_marked)
        held = tuple(
            (e.tag, e.q, e.tx, e.marks, e.drops, e.byte_s)
            for e in (items[0][k] for k in range(n))
            if e.q or e.tx or e.marks or e.drops or e.byte_s
        )
        flows = tuple(ffi.unpack(marked[0], n_marked[0])) if n_marked[0] else ()
        lib.fab_attr_reset(sim.fab, self.index)
        return held, flows

    # -- link events ----------------------------------------------------------------------
    def set_up(self, up: bool) -> None:
        self.sim.lib.fab_set_up(self.sim.fab, self.index, int(up))
        self.sim._forget()


class NativeIngress:
    """A switch ingress's PFC account in C, with port.PfcIngress's readings."""

    def __init__(self, sim: NativeSimulator, index: int, upstream: NativePort) -> None:
        self._g: Any = sim.fab.ingress + index
        self.sim = sim
        self.index = index
        self.upstream = upstream

    drops = property(lambda self: self._g.drops)
    max_bytes = property(lambda self: self._g.max_bytes)
    paused = property(lambda self: bool(self._g.paused))
    shared = property(lambda self: self._g.shared)
    hdrm = property(lambda self: self._g.hdrm)
    held_bytes = property(lambda self: self._g.shared + self._g.hdrm)


class NativeSwitch:
    """A switch of the C fabric: C forwards by its cache of ECMP choices; a 5-tuple it has not
    seen comes here once and `router` (fabric.Switch, the Python fabric's own) picks the port."""

    def __init__(self, sim: NativeSimulator, index: int, router: Any) -> None:
        self.sim = sim
        self.index = index
        self.router = router  # fabric.Switch with its egress on NativePorts
        sim.fab.switches[index].latency_s = router.latency_s
        self.name = router.name
        self.balancer = None
        self.ingress: dict[NativePort, NativeIngress] = {}

    @property
    def egress(self) -> dict[str, Any]:
        return self.router.egress

    @property
    def topology(self) -> Any:
        return self.router.topology

    @property
    def no_route(self) -> int:
        return int(self.sim.fab.switches[self.index].no_route)

    def set_routes(self, routes: Any) -> None:
        self.router.set_routes(routes)
        self.sim.lib.fab_routes_clear(self.sim.fab, self.index)

    def egress_for(self, frame: Frame) -> Any:
        """The port the switch sends `frame` to (fabric.Switch.egress_for: the same hash)."""
        return self.router.egress_for(frame)

    def _route(self, frame: Frame) -> Any:
        return self.router._route(frame)

    def route(self, out: Any) -> None:
        names = self.sim.host_names
        probe = Frame(
            names[out.src], names[out.dst], out.sport, 0, 0, b"", bool(out.control), dport=out.dport
        )
        port = self.router._route(probe)
        if self.sim.lib.fab_route_set(
            self.sim.fab,
            self.index,
            out.src,
            out.dst,
            out.sport,
            out.control,
            out.dport,
            -1 if port is None else port.index,
        ):
            raise MemoryError("the native simulated fabric: out of memory")


def set_rng(sim: NativeSimulator, port: int, which: int, rng: random.Random) -> None:
    """Hand a generator's state to the C port (its draws then continue there)."""
    _version, state, _gauss = rng.getstate()
    sim.lib.fab_set_rng(sim.fab, port, which, sim.ffi.new("uint32_t[]", state[:624]), state[624])


def rng_random(sim: NativeSimulator, port: int, which: int) -> float:
    """The C generator's next random() (tests hold it to random.Random's)."""
    return float(sim.lib.fab_rng_random(sim.fab, port, which))
