/* The packet simulator's fabric in C: its event heap, output ports (priority and data queues,
 * tail drop, ECN marking on arrival or departure, serialization, propagation, loss, PFC pause,
 * per-collective attribution), switches that forward by a per-5-tuple cache of ECMP choices,
 * and PFC ingress accounts with their shared buffers.
 *
 * It is emulator/sim/port.py, emulator/sim/fabric.py's Switch (ECMP) and emulator/sim/engine.py
 * line by line: the same events in the same order with the same sequence numbers, the same
 * float expressions (built without fused multiply-add) and the same random draws (CPython's
 * Mersenne Twister, its state handed over from random.Random.getstate()), so a run is the
 * Python fabric's bit for bit (tests/integration/test_sim_native.py). Everything that is not
 * the fabric stays in Python: the hosts and their transport (but for the receive queue pairs'
 * common path with its ACKs, simfab_rqp.c, and the hosts' NIC round robin sending what each
 * send queue pair's grant allows, simfab_sqp.c), the replay, the ECMP hash itself.
 * fab_run returns to Python whenever the Python side must act (a callback it scheduled, a frame
 * reaching a host, a host NIC going idle with a queue pair C may not send for, a switch meeting
 * a 5-tuple it has not routed yet) and
 * picks up where it stopped on the next call.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simfab_api.h" /* what Python sees */

#include "simfab_core.h" /* the fabric's own state */

/* ---- CPython's Mersenne Twister (Modules/_randommodule.c genrand_uint32, random) ------- */
static uint32_t mt_next(mt_t *m) {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t *mt = m->state, y;
    if (m->index >= 624) {
        int kk;
        for (kk = 0; kk < 624 - 397; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < 623; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (mt[623] & 0x80000000U) | (mt[0] & 0x7fffffffU);
        mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 0x1U];
        m->index = 0;
    }
    y = mt[m->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

static double mt_random(mt_t *m) {
    uint32_t a = mt_next(m) >> 5, b = mt_next(m) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* ---- the event heap: (time, sequence) order, as heapq over (when, seq, ...) ------------ */
static int ev_less(const ev_t *x, const ev_t *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

void push(core_t *f, double t, int32_t kind, int32_t a, int64_t b) {
    if (f->n_heap == f->cap_heap) {
        int64_t cap = f->cap_heap ? f->cap_heap * 2 : 1024;
        ev_t *heap = realloc(f->heap, cap * sizeof(ev_t));
        if (!heap) {
            f->oom = 1;
            return;
        }
        f->heap = heap;
        f->cap_heap = cap;
    }
    ev_t ev = {t, ++f->pub.seq, kind, a, b};
    int64_t i = f->n_heap++;
    while (i > 0) {
        int64_t parent = (i - 1) >> 1;
        if (!ev_less(&ev, &f->heap[parent])) break;
        f->heap[i] = f->heap[parent];
        i = parent;
    }
    f->heap[i] = ev;
}

static ev_t pop(core_t *f) {
    ev_t top = f->heap[0], last = f->heap[--f->n_heap];
    int64_t i = 0, n = f->n_heap;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ev_less(&f->heap[c + 1], &f->heap[c])) c++;
        if (!ev_less(&f->heap[c], &last)) break;
        f->heap[i] = f->heap[c];
        i = c;
    }
    if (n) f->heap[i] = last;
    return top;
}

/* ---- frames ------------------------------------------------------------------------------ */
int32_t frame_new(core_t *f) {
    if (f->free_frame >= 0) {
        int32_t i = f->free_frame;
        f->free_frame = f->frames[i].next;
        return i;
    }
    if (f->n_frames == f->cap_frames) {
        int32_t cap = f->cap_frames ? f->cap_frames * 2 : 1024;
        frame_t *frames = realloc(f->frames, (size_t)cap * sizeof(frame_t));
        if (!frames) {
            f->oom = 1;
            return -1;
        }
        f->frames = frames;
        f->cap_frames = cap;
    }
    return f->n_frames++;
}

static void frame_free(core_t *f, int32_t i) {
    f->frames[i].next = f->free_frame;
    f->free_frame = i;
}

/* a frame Python will not receive (dropped, lost, or taken by a receive queue pair here):
 * its packet's handle goes back to Python */
static void frame_gone(core_t *f, int32_t i) {
    if (f->frames[i].handle >= 0 && f->n_dead == f->cap_dead) {
        int64_t cap = f->cap_dead ? f->cap_dead * 2 : 256;
        int64_t *dead = realloc(f->dead, cap * sizeof(int64_t));
        if (!dead) {
            f->oom = 1;
            frame_free(f, i);
            return;
        }
        f->dead = dead;
        f->cap_dead = cap;
    }
    if (f->frames[i].handle >= 0) f->dead[f->n_dead++] = f->frames[i].handle;
    frame_free(f, i);
}

static void fifo_push(core_t *f, fifo_t *q, int32_t i) {
    f->frames[i].next = -1;
    if (q->tail >= 0) f->frames[q->tail].next = i;
    else q->head = i;
    q->tail = i;
}

static int32_t fifo_pop(core_t *f, fifo_t *q) {
    int32_t i = q->head;
    q->head = f->frames[i].next;
    if (q->head < 0) q->tail = -1;
    return i;
}

/* ---- attribution (port.py _account, _queue_change) -------------------------------------- */
static fab_attr_t *account(core_t *f, int32_t port, int64_t tag) {
    attr_t *a = &f->attr[port];
    for (int32_t k = a->n - 1; k >= 0; k--)
        if (a->items[k].tag == tag) return &a->items[k];
    if (a->n == a->cap) {
        int32_t cap = a->cap ? a->cap * 2 : 8;
        fab_attr_t *items = realloc(a->items, (size_t)cap * sizeof(fab_attr_t));
        if (!items) {
            f->oom = 1;
            return NULL;
        }
        a->items = items;
        a->cap = cap;
    }
    fab_attr_t *e = &a->items[a->n++];
    e->tag = tag;
    e->q = e->tx = e->marks = e->drops = 0;
    e->byte_s = 0.0;
    e->last = f->pub.now;
    return e;
}

static void queue_change(core_t *f, fab_attr_t *e, int64_t delta) {
    e->byte_s += (double)e->q * (f->pub.now - e->last);
    e->last = f->pub.now;
    e->q += delta;
}

/* ---- PFC (port.py SharedBuffer, PfcIngress) ----------------------------------------------- */
static int64_t pool_threshold(fab_pool_t *p) {
    int64_t room = p->free_bytes - p->used;
    return (room > 0 ? room : 0) >> p->shift;
}

static int64_t ingress_threshold(core_t *f, fab_ingress_t *g) {
    return g->pool < 0 ? g->xoff : pool_threshold(&f->pub.pools[g->pool]);
}

static void signal_pause(core_t *f, int32_t port, int pause) {
    fab_port_t *p = &f->pub.ports[port];
    double delay = 84 * 8 / p->rate_bps + p->delay_s; /* PFC_FRAME_WIRE_BYTES */
    push(f, f->pub.now + delay, EV_PAUSE, port, pause);
}

static int ingress_admit(core_t *f, int32_t gi, int32_t fi) {
    fab_ingress_t *g = &f->pub.ingress[gi];
    int64_t size = f->frames[fi].size;
    fab_pool_t *pool = g->pool < 0 ? NULL : &f->pub.pools[g->pool];
    int64_t threshold = pool ? pool_threshold(pool) : g->xoff;
    if (g->shared + size > threshold) {
        if (g->hdrm + size > g->headroom_bytes) {
            g->drops++;
            return 0;
        }
        g->hdrm += size;
    } else {
        g->shared += size;
        if (pool) pool->used += size;
    }
    int64_t held = g->shared + g->hdrm;
    if (held > g->max_bytes) g->max_bytes = held;
    f->frames[fi].ingress = gi;
    if (pool) threshold = pool_threshold(pool);
    if (!g->paused && (g->hdrm > 0 || g->shared >= threshold)) {
        g->paused = 1;
        signal_pause(f, g->upstream, 1);
    }
    return 1;
}

static void ingress_release(core_t *f, int32_t gi, int64_t size) {
    fab_ingress_t *g = &f->pub.ingress[gi];
    int64_t hdrm = g->hdrm;
    if (hdrm) {
        int64_t from_hdrm = hdrm < size ? hdrm : size;
        g->hdrm = hdrm - from_hdrm;
        size -= from_hdrm;
    }
    if (size) {
        g->shared -= size;
        if (g->pool >= 0) f->pub.pools[g->pool].used -= size;
    }
    if (g->paused && g->hdrm == 0 &&
        (g->shared == 0 || g->shared + g->xon_offset <= ingress_threshold(f, g))) {
        g->paused = 0;
        signal_pause(f, g->upstream, 0);
    }
}

static void frame_release(core_t *f, int32_t fi) {
    frame_t *fr = &f->frames[fi];
    if (fr->ingress >= 0) {
        int32_t gi = fr->ingress;
        fr->ingress = -1;
        ingress_release(f, gi, fr->size);
    }
}

/* ---- ports (port.py Port) -------------------------------------------------------------- */
static int should_mark(core_t *f, int32_t port, int64_t queue_bytes) {
    fab_port_t *p = &f->pub.ports[port];
    if (queue_bytes <= p->kmin) return 0;
    if (queue_bytes > p->kmax) return 1;
    return mt_random(&f->mark_rng[port]) < p->pmax * (double)(queue_bytes - p->kmin) / (double)p->span;
}

static int is_ect(int32_t ecn) { return ecn == 1 || ecn == 2; }

static void port_mark(core_t *f, int32_t port, int32_t fi) {
    fab_port_t *p = &f->pub.ports[port];
    frame_t *fr = &f->frames[fi];
    fr->ecn = 3; /* CE: the Python side sets it in a packet's bytes on delivery */
    p->marks++;
    if (p->attribution) {
        fab_attr_t *e = account(f, port, fr->tag);
        if (e) e->marks++;
        attr_t *a = &f->attr[port];
        if (a->n_marked == a->cap_marked) {
            int32_t cap = a->cap_marked ? a->cap_marked * 2 : 64;
            int64_t *marked = realloc(a->marked, (size_t)cap * sizeof(int64_t));
            if (!marked) {
                f->oom = 1;
                return;
            }
            a->marked = marked;
            a->cap_marked = cap;
        }
        a->marked[a->n_marked++] = fr->flow;
    }
}

static void port_drop(core_t *f, int32_t port, int32_t fi) {
    fab_port_t *p = &f->pub.ports[port];
    p->drops++;
    if (p->attribution) {
        fab_attr_t *e = account(f, port, f->frames[fi].tag);
        if (e) e->drops++;
    }
    frame_release(f, fi);
    frame_gone(f, fi);
}

static void port_lose(core_t *f, int32_t port, int32_t fi) {
    fab_port_t *p = &f->pub.ports[port];
    p->losses++;
    p->lost_bytes += f->frames[fi].size;
    frame_gone(f, fi);
}

static void port_start(core_t *f, int32_t port) {
    fab_port_t *p = &f->pub.ports[port];
    int32_t fi;
    if (f->prio[port].head >= 0) {
        fi = fifo_pop(f, &f->prio[port]);
    } else if (f->data[port].head >= 0 && !p->paused) {
        fi = fifo_pop(f, &f->data[port]);
        frame_t *fr = &f->frames[fi];
        p->queued_bytes -= fr->size;
        if (p->attribution) {
            fab_attr_t *e = account(f, port, fr->tag);
            if (e) {
                queue_change(f, e, -(int64_t)fr->size);
                e->tx += fr->size;
            }
        }
        frame_release(f, fi);
        if (p->mark_on_arrival) {
            fr->marked_here = 0;
        } else if (p->has_marker && is_ect(fr->ecn) && should_mark(f, port, p->queued_bytes)) {
            port_mark(f, port, fi);
        }
    } else {
        return; /* paused with only data queued: the resume restarts it */
    }
    frame_t *fr = &f->frames[fi];
    p->busy = 1;
    double done = f->pub.now + (double)((int64_t)fr->size * 8) / p->rate_bps;
    p->tx_frames++;
    p->tx_bytes += fr->size;
    if (p->loss_p != 0.0 && mt_random(&f->loss_rng[port]) < p->loss_p) {
        port_lose(f, port, fi);
        push(f, done, EV_DONE, port, -1);
    } else if (p->delay_s != 0.0) {
        push(f, done, EV_DONE, port, -1);
        push(f, done + p->delay_s, EV_DELIVER, port, fi);
    } else {
        push(f, done, EV_DONE_DELIVER, port, fi);
    }
}

void port_send(core_t *f, int32_t port, int32_t fi) {
    fab_port_t *p = &f->pub.ports[port];
    frame_t *fr = &f->frames[fi];
    if (!p->up) {
        port_drop(f, port, fi);
        return;
    }
    if (fr->priority) {
        fifo_push(f, &f->prio[port], fi);
    } else {
        int64_t queued = p->queued_bytes + fr->size;
        if (queued > p->buffer_bytes && !p->lossless) {
            port_drop(f, port, fi);
            return;
        }
        if (p->mark_on_arrival && p->has_marker && is_ect(fr->ecn) &&
            should_mark(f, port, p->queued_bytes)) {
            port_mark(f, port, fi);
            fr->marked_here = 1;
        }
        p->queued_bytes = queued;
        if (p->attribution) {
            fab_attr_t *e = account(f, port, fr->tag);
            if (e) queue_change(f, e, fr->size);
        }
        if (queued > p->max_queued_bytes) p->max_queued_bytes = queued;
        fifo_push(f, &f->data[port], fi);
    }
    if (!p->busy) port_start(f, port);
}

/* the port finished a frame: next one, or the host behind it is asked (returns 1) */
static int port_done(core_t *f, int32_t port) {
    fab_port_t *p = &f->pub.ports[port];
    p->busy = 0;
    if (f->prio[port].head >= 0 || (f->data[port].head >= 0 && !p->paused)) {
        port_start(f, port);
        return 0;
    }
    return p->idle_host >= 0 && !p->paused;
}

/* the PAUSE or RESUME reached the port; returns 1 when its host must be asked */
static int port_set_paused(core_t *f, int32_t port, int pause) {
    fab_port_t *p = &f->pub.ports[port];
    if (pause) {
        p->pause_frames++;
        if (!p->paused) {
            p->paused = 1;
            p->paused_since = f->pub.now;
        }
        return 0;
    }
    p->resume_frames++;
    if (p->paused) {
        p->paused = 0;
        p->paused_s += f->pub.now - p->paused_since;
        if (!p->busy) {
            if (f->data[port].head >= 0 || f->prio[port].head >= 0) port_start(f, port);
            else return p->idle_host >= 0;
        }
    }
    return 0;
}

/* ---- switches: the cached ECMP choice per (source, destination, sport, control, dport) -- */
static uint64_t route_key(const frame_t *fr) {
    /* hosts below 2^15 (build_simfab's MAX_HOSTS), ports 16 bits, control the top bit */
    return ((uint64_t)(fr->src & 0x7fff) << 48) | ((uint64_t)(uint16_t)fr->dst << 32) |
           ((uint64_t)(uint16_t)fr->sport << 16) | ((uint64_t)(uint16_t)fr->dport) |
           ((uint64_t)(fr->control != 0) << 63);
}

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* the cached port (>= -1), or -2 when this switch has not routed the 5-tuple yet */
static int32_t route_find(route_map_t *m, uint64_t key) {
    if (!m->cap) return -2;
    uint64_t mask = (uint64_t)m->cap - 1, i = mix(key) & mask;
    for (;;) {
        if (m->values[i] == -3) return -2; /* empty slot */
        if (m->keys[i] == key) return m->values[i];
        i = (i + 1) & mask;
    }
}

static int route_put(route_map_t *m, uint64_t key, int32_t port) {
    if ((m->n + 1) * 2 > m->cap) {
        int64_t cap = m->cap ? m->cap * 2 : 64;
        uint64_t *keys = malloc(cap * sizeof(uint64_t));
        int32_t *values = malloc(cap * sizeof(int32_t));
        if (!keys || !values) {
            free(keys);
            free(values);
            return -1;
        }
        for (int64_t i = 0; i < cap; i++) values[i] = -3;
        for (int64_t i = 0; i < m->cap; i++) {
            if (m->values[i] == -3) continue;
            uint64_t j = mix(m->keys[i]) & (uint64_t)(cap - 1);
            while (values[j] != -3) j = (j + 1) & (uint64_t)(cap - 1);
            keys[j] = m->keys[i];
            values[j] = m->values[i];
        }
        free(m->keys);
        free(m->values);
        m->keys = keys;
        m->values = values;
        m->cap = cap;
    }
    uint64_t mask = (uint64_t)m->cap - 1, i = mix(key) & mask;
    while (m->values[i] != -3 && m->keys[i] != key) i = (i + 1) & mask;
    if (m->values[i] == -3) m->n++;
    m->keys[i] = key;
    m->values[i] = port;
    return 0;
}

/* forward a frame the switch holds (charged to its ingress already); returns 1 to ask
 * Python for the route of a 5-tuple it has not seen (then pend_* keep the frame) */
static int switch_forward(core_t *f, int32_t sw, int32_t fi, fab_out_t *out) {
    frame_t *fr = &f->frames[fi];
    int32_t egress = route_find(&f->routes[sw], route_key(fr));
    if (egress == -2) {
        f->pend_kind = PEND_ROUTE;
        f->pend_a = sw;
        f->pend_frame = fi;
        out->kind = RET_ROUTE;
        out->node = sw;
        out->src = fr->src;
        out->dst = fr->dst;
        out->sport = fr->sport;
        out->control = fr->control;
        out->dport = fr->dport;
        return 1;
    }
    if (egress < 0) {
        f->pub.switches[sw].no_route++;
        frame_release(f, fi);
        frame_gone(f, fi);
        return 0;
    }
    if (f->pub.switches[sw].latency_s != 0.0)
        push(f, f->pub.now + f->pub.switches[sw].latency_s, EV_SEND, egress, fi);
    else
        port_send(f, egress, fi);
    return 0;
}

/* raise a transport event (fab_event_t) at now: the first while Python's list is empty
 * schedules its handler, as the list's first append does (emulator/sim/replay.py _Events) */
fab_event_t *raise_event(core_t *f, int32_t kind, int32_t qpn) {
    if (f->pub.n_events == f->cap_events) {
        int64_t cap = f->cap_events ? f->cap_events * 2 : 256;
        fab_event_t *events = realloc(f->events, (size_t)cap * sizeof(fab_event_t));
        if (!events) {
            f->oom = 1;
            return NULL;
        }
        f->events = events;
        f->cap_events = cap;
    }
    if (!f->pub.events_listed) {
        f->pub.events_listed = 1;
        push(f, f->pub.now, EV_PY, 0, EVENTS_HANDLE);
    }
    fab_event_t *ev = &f->events[f->pub.n_events++];
    ev->kind = kind;
    ev->qpn = qpn;
    ev->now_s = f->pub.now;
    return ev;
}

/* an answer of a receive queue pair's common path to a data frame, sent as nodes.py
 * Host.receive sends a reply (with the data frame's collective `tag` and `flow`): its ACK
 * (receiver.py _ack) or its CNP (the CnpPacket on_data answers a CE mark with) */
static void rqp_reply(core_t *f, int32_t qpn, int32_t cnp, int64_t tag, int64_t flow) {
    fab_rqp_t *q = rqp_slot(&f->rqp, qpn);
    int32_t fi = frame_new(f); /* it may move the frames: the data frame's fields are passed */
    if (fi < 0) return;
    frame_t *fr = &f->frames[fi];
    fr->src = q->ack_src;
    fr->dst = q->ack_dst;
    fr->sport = q->ack_sport;
    fr->size = cnp ? q->cnp_size : q->ack_size;
    fr->ecn = cnp ? q->cnp_ecn : q->ack_ecn;
    fr->control = 1;
    fr->priority = cnp ? q->cnp_priority : q->ack_priority;
    fr->dport = 4791;
    fr->mhash = q->ack_mhash;
    fr->handle = -1;
    fr->qpn = -1;
    fr->psn = cnp ? 0 : (q->expected_psn - 1) & 0xFFFFFF;
    fr->data_flags = fr->payload_bytes = 0;
    fr->opcode = cnp ? 0x81 : 0x11; /* RoCEv2 CNP, RC ACKNOWLEDGE */
    fr->offset = fr->msg_bytes = 0;
    fr->dest_qp = q->ack_dest_qp;
    fr->msn = cnp ? 0 : q->msn;
    fr->marked_here = 0;
    fr->ingress = -1;
    fr->next = -1;
    fr->tag = tag;
    fr->flow = flow;
    port_send(f, q->ack_port, fi);
}

/* a frame reaches the far end of `port`: a switch (returns 1 if Python must route it) or a
 * host (returns 1: Python receives it) */
static int deliver(core_t *f, int32_t port, int32_t fi, fab_out_t *out) {
    fab_port_t *p = &f->pub.ports[port];
    if (!p->up) {
        port_lose(f, port, fi);
        return 0;
    }
    frame_t *fr = &f->frames[fi];
    if (p->peer_host >= 0) {
        if (fr->qpn >= 0) {
            int took = rqp_take(&f->rqp, fr->qpn, p->peer_host, fr->psn, fr->data_flags,
                                fr->ecn == 3, fr->payload_bytes, f->pub.now);
            if (took > 0 && (took & (RQP_ACK | RQP_CNP))) {
                int32_t qpn = fr->qpn; /* the replies' frames may move this one */
                int64_t tag = fr->tag, flow = fr->flow;
                if (took & RQP_CNP) { /* the notification point's: the event, then the CNP */
                    raise_event(f, EVT_CNP_SENT, qpn);
                    rqp_reply(f, qpn, 1, tag, flow);
                }
                if (took & RQP_ACK) rqp_reply(f, qpn, 0, tag, flow);
                fr = &f->frames[fi];
            }
            if (took > 0) {
                f->pub.rx_taken++;
                frame_gone(f, fi);
                return 0;
            }
            if (took < 0) f->oom = 1; /* fab_run stops on it; this frame still goes to Python */
        }
        out->kind = RET_HOST_RX;
        out->qpn = fr->qpn;
        out->node = p->peer_host;
        out->port = port;
        out->src = fr->src;
        out->dst = fr->dst;
        out->sport = fr->sport;
        out->size = fr->size;
        out->ecn = fr->ecn;
        out->control = fr->control;
        out->tag = fr->tag;
        out->dport = fr->dport;
        out->priority = fr->priority;
        out->flow = fr->flow;
        out->handle = fr->handle;
        out->mhash = fr->mhash;
        out->psn = fr->psn;
        out->opcode = fr->opcode;
        out->data_flags = fr->data_flags;
        out->payload_bytes = fr->payload_bytes;
        out->offset = fr->offset;
        out->msg_bytes = fr->msg_bytes;
        out->dest_qp = fr->dest_qp;
        out->msn = fr->msn;
        frame_free(f, fi);
        return 1;
    }
    if (!fr->priority && p->far_ingress >= 0 && !ingress_admit(f, p->far_ingress, fi)) {
        frame_gone(f, fi); /* headroom overflow: counted by the ingress */
        return 0;
    }
    return switch_forward(f, p->peer_switch, fi, out);
}

/* a host pulls: Python's on_idle of the host at the far end of `port` (RET_IDLE) */
void idle_out(core_t *f, int32_t port, fab_out_t *out) {
    out->kind = RET_IDLE;
    out->node = f->pub.ports[port].idle_host;
    out->port = port;
}

/* ---- the API ------------------------------------------------------------------------------ */
fab_t *fab_new(int32_t n_ports, int32_t n_switches, int32_t n_ingress, int32_t n_pools) {
    core_t *f = calloc(1, sizeof(core_t));
    if (!f) return NULL;
    f->pub.n_ports = n_ports;
    f->pub.n_switches = n_switches;
    f->pub.n_ingress = n_ingress;
    f->pub.n_pools = n_pools;
    f->pub.ports = calloc(n_ports ? n_ports : 1, sizeof(fab_port_t));
    f->pub.switches = calloc(n_switches ? n_switches : 1, sizeof(fab_switch_t));
    f->pub.ingress = calloc(n_ingress ? n_ingress : 1, sizeof(fab_ingress_t));
    f->pub.pools = calloc(n_pools ? n_pools : 1, sizeof(fab_pool_t));
    f->data = calloc(n_ports ? n_ports : 1, sizeof(fifo_t));
    f->prio = calloc(n_ports ? n_ports : 1, sizeof(fifo_t));
    f->mark_rng = calloc(n_ports ? n_ports : 1, sizeof(mt_t));
    f->loss_rng = calloc(n_ports ? n_ports : 1, sizeof(mt_t));
    f->attr = calloc(n_ports ? n_ports : 1, sizeof(attr_t));
    f->routes = calloc(n_switches ? n_switches : 1, sizeof(route_map_t));
    f->free_frame = -1;
    if (!f->pub.ports || !f->pub.switches || !f->pub.ingress || !f->pub.pools || !f->data || !f->prio ||
        !f->mark_rng || !f->loss_rng || !f->attr || !f->routes) {
        f->oom = 1;
        return &f->pub; /* fab_free releases what was allocated; Python checks fab_oom */
    }
    for (int32_t i = 0; i < n_ports; i++) {
        f->data[i].head = f->data[i].tail = -1;
        f->prio[i].head = f->prio[i].tail = -1;
        f->pub.ports[i].up = 1;
        f->pub.ports[i].peer_host = f->pub.ports[i].peer_switch = -1;
        f->pub.ports[i].idle_host = f->pub.ports[i].far_ingress = -1;
        f->pub.ports[i].arbiter = -1;
        f->mark_rng[i].index = 624;
        f->loss_rng[i].index = 624;
    }
    for (int32_t i = 0; i < n_ingress; i++) f->pub.ingress[i].pool = -1;
    return &f->pub;
}

void fab_free(fab_t *pub) {
    core_t *f = (core_t *)pub;
    if (!f) return;
    if (f->attr)
        for (int32_t i = 0; i < f->pub.n_ports; i++) {
            free(f->attr[i].items);
            free(f->attr[i].marked);
        }
    if (f->routes)
        for (int32_t i = 0; i < f->pub.n_switches; i++) {
            free(f->routes[i].keys);
            free(f->routes[i].values);
        }
    free(f->pub.ports);
    free(f->pub.switches);
    free(f->pub.ingress);
    free(f->pub.pools);
    free(f->data);
    free(f->prio);
    free(f->mark_rng);
    free(f->loss_rng);
    free(f->attr);
    free(f->routes);
    free(f->heap);
    free(f->frames);
    free(f->dead);
    free(f->events);
    rqp_free(&f->rqp);
    sqp_free(f);
    free(f);
}

int fab_oom(fab_t *pub) { return ((core_t *)pub)->oom; }

static mt_t *rng_of(core_t *f, int32_t port, int32_t which) {
    return which ? &f->loss_rng[port] : &f->mark_rng[port];
}

/* the generator's state as random.Random.getstate() gives it: 624 words and the position */
void fab_set_rng(fab_t *pub, int32_t port, int32_t which, const uint32_t *state, int32_t index) {
    core_t *f = (core_t *)pub;
    mt_t *m = rng_of(f, port, which);
    memcpy(m->state, state, sizeof(m->state));
    m->index = index;
}

double fab_rng_random(fab_t *pub, int32_t port, int32_t which) {
    core_t *f = (core_t *)pub;
    return mt_random(rng_of(f, port, which));
}

void fab_at(fab_t *pub, double when_s, int64_t handle) {
    push((core_t *)pub, when_s, EV_PY, 0, handle);
}

int64_t fab_pending(fab_t *pub) { return ((core_t *)pub)->n_heap; }

/* a frame from a host (or a test) into `port` */
int fab_send(fab_t *pub, int32_t port, int32_t src, int32_t dst, int32_t sport, int32_t size,
             int32_t ecn, int32_t control, int64_t tag, int32_t priority, int64_t flow,
             int32_t dport, int64_t mhash, int64_t handle, int32_t qpn, uint32_t psn,
             int32_t data_flags, int32_t payload_bytes) {
    core_t *f = (core_t *)pub;
    int32_t fi = frame_new(f);
    if (fi < 0) return -1;
    frame_t *fr = &f->frames[fi];
    fr->src = src;
    fr->dst = dst;
    fr->sport = sport;
    fr->size = size;
    fr->ecn = ecn;
    fr->control = control;
    fr->tag = tag;
    fr->priority = priority;
    fr->flow = flow;
    fr->dport = dport;
    fr->mhash = mhash;
    fr->handle = handle;
    fr->qpn = qpn;
    fr->psn = psn;
    fr->data_flags = data_flags;
    fr->payload_bytes = payload_bytes;
    fr->opcode = -1; /* Python holds the packet (its handle) */
    fr->offset = fr->msg_bytes = fr->msn = 0;
    fr->dest_qp = -1;
    fr->marked_here = 0;
    fr->ingress = -1;
    fr->next = -1;
    port_send(f, port, fi);
    return f->oom ? -1 : 0;
}

int fab_route_set(fab_t *pub, int32_t sw, int32_t src, int32_t dst, int32_t sport, int32_t control,
                  int32_t dport, int32_t port) {
    core_t *f = (core_t *)pub;
    frame_t key = {0};
    key.src = src;
    key.dst = dst;
    key.sport = sport;
    key.control = control;
    key.dport = dport;
    return route_put(&f->routes[sw], route_key(&key), port);
}

void fab_routes_clear(fab_t *pub, int32_t sw) {
    core_t *f = (core_t *)pub;
    route_map_t *m = &f->routes[sw];
    for (int64_t i = 0; i < m->cap; i++) m->values[i] = -3;
    m->n = 0;
}

/* a cable goes up or down (port.py set_up): down loses what the port holds */
void fab_set_up(fab_t *pub, int32_t port, int32_t up) {
    core_t *f = (core_t *)pub;
    fab_port_t *p = &f->pub.ports[port];
    if ((up != 0) == (p->up != 0)) return;
    p->up = up != 0;
    if (up) return;
    while (f->prio[port].head >= 0) port_drop(f, port, fifo_pop(f, &f->prio[port]));
    while (f->data[port].head >= 0) port_drop(f, port, fifo_pop(f, &f->data[port]));
    p->queued_bytes = 0;
    if (p->attribution) {
        attr_t *a = &f->attr[port];
        for (int32_t k = 0; k < a->n; k++) queue_change(f, &a->items[k], -a->items[k].q);
    }
}

/* take_attribution: the byte-time up to now, every entry out (items, count, marked flows);
 * fab_attr_reset then keeps only the entries holding bytes, in their order */
int32_t fab_attr_take(fab_t *pub, int32_t port, fab_attr_t **items, int64_t **marked,
                      int32_t *n_marked) {
    core_t *f = (core_t *)pub;
    attr_t *a = &f->attr[port];
    for (int32_t k = 0; k < a->n; k++) queue_change(f, &a->items[k], 0);
    *items = a->items;
    *marked = a->marked;
    *n_marked = a->n_marked;
    return a->n;
}

void fab_attr_reset(fab_t *pub, int32_t port) {
    core_t *f = (core_t *)pub;
    attr_t *a = &f->attr[port];
    int32_t kept = 0;
    for (int32_t k = 0; k < a->n; k++) {
        fab_attr_t e = a->items[k];
        if (!e.q) continue;
        e.tx = e.marks = e.drops = 0;
        e.byte_s = 0.0;
        e.last = f->pub.now;
        a->items[kept++] = e;
    }
    a->n = kept;
    a->n_marked = 0;
}

/* the packet handles of frames dropped or lost since the last call (Python forgets them) */
int64_t fab_dead(fab_t *pub, int64_t **handles) {
    core_t *f = (core_t *)pub;
    *handles = f->dead;
    return f->n_dead;
}

void fab_dead_clear(fab_t *pub) { ((core_t *)pub)->n_dead = 0; }

/* receive queue pair `qpn`'s state in C (NULL: out of memory, or not a 24-bit QP number); a
 * new one is claimed by no host */
fab_rqp_t *fab_rqp(fab_t *pub, int32_t qpn) { return rqp_slot(&((core_t *)pub)->rqp, qpn); }

/* what deliver asks of a data frame for `host` at `now`: rqp_take's RQP_* flags if the queue
 * pair took it (tests drive the common path through this without a fabric), 0 if Python must,
 * -1 out of memory */
int fab_rqp_offer(fab_t *pub, int32_t qpn, int32_t host, uint32_t psn, int32_t data_flags,
                  int32_t ce, int32_t payload_bytes, double now) {
    return rqp_take(&((core_t *)pub)->rqp, qpn, host, psn, data_flags, ce, payload_bytes, now);
}

/* the transport events raised since fab_events_clear, in order (Python appends them to its
 * list before anything else runs, then clears them) */
int64_t fab_events(fab_t *pub, fab_event_t **events) {
    *events = ((core_t *)pub)->events;
    return pub->n_events;
}

void fab_events_clear(fab_t *pub) { pub->n_events = 0; }

/* the queue pairs that took packets since fab_rqp_dirty_clear (each once; Python reads those
 * with packets still unread, then clears the list and their listed marks) */
int64_t fab_rqp_dirty(fab_t *pub, int32_t **qpns) {
    core_t *f = (core_t *)pub;
    *qpns = f->rqp.dirty;
    return f->rqp.n_dirty;
}

void fab_rqp_dirty_clear(fab_t *pub) {
    core_t *f = (core_t *)pub;
    for (int64_t i = 0; i < f->rqp.n_dirty; i++) f->rqp.q[f->rqp.dirty[i]].listed = 0;
    f->rqp.n_dirty = 0;
}

/* Run events up to `until_s` with at most `*budget` of them (decremented as they run), until
 * one needs Python (returns its RET_*, `out` says what), or up to `until_s` (RET_DONE: `now`
 * is left at the last event run; the caller sets it to until_s). */
int fab_run(fab_t *pub, double until_s, int64_t *budget, fab_out_t *out) {
    core_t *f = (core_t *)pub;
    if (f->pend_kind == PEND_DELIVER) {
        f->pend_kind = PEND_NONE;
        if (deliver(f, f->pend_a, f->pend_frame, out)) return out->kind;
    } else if (f->pend_kind == PEND_ROUTE) {
        f->pend_kind = PEND_NONE;
        if (switch_forward(f, f->pend_a, f->pend_frame, out)) return out->kind;
    }
    while (f->n_heap && f->heap[0].t <= until_s) {
        if (f->oom) return RET_NOMEM;
        if (*budget <= 0) return RET_BUDGET;
        ev_t ev = pop(f);
        f->pub.now = ev.t;
        f->pub.events_run++;
        (*budget)--;
        switch (ev.kind) {
        case EV_PY:
            out->kind = RET_PY;
            out->handle = ev.b;
            return RET_PY;
        case EV_DONE:
            if (port_done(f, ev.a) && sqp_host_idle(f, ev.a)) {
                idle_out(f, ev.a, out);
                return RET_IDLE;
            }
            break;
        case EV_DONE_DELIVER:
            if (port_done(f, ev.a) && sqp_host_idle(f, ev.a)) {
                f->pend_kind = PEND_DELIVER;
                f->pend_a = ev.a;
                f->pend_frame = (int32_t)ev.b;
                idle_out(f, ev.a, out);
                return RET_IDLE;
            }
            if (deliver(f, ev.a, (int32_t)ev.b, out)) return out->kind;
            break;
        case EV_DELIVER:
            if (deliver(f, ev.a, (int32_t)ev.b, out)) return out->kind;
            break;
        case EV_SEND:
            port_send(f, ev.a, (int32_t)ev.b);
            break;
        case EV_PAUSE:
            if (port_set_paused(f, ev.a, (int)ev.b) && sqp_host_idle(f, ev.a)) {
                idle_out(f, ev.a, out);
                return RET_IDLE;
            }
            break;
        case EV_WAKE:
            if (sqp_wake(f, ev.a)) {
                idle_out(f, f->sqp->hosts[ev.a].nic, out);
                return RET_IDLE;
            }
            break;
        case EV_TIMER:
            if (sqp_timer_due(f, ev.a)) {
                int r = sqp_timer(f, ev.a, out); /* in C, or Python's (RET_TIMER, RET_IDLE) */
                if (r) return r;
            }
            break;
        }
    }
    return f->oom ? RET_NOMEM : RET_DONE;
}
