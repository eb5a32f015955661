/* The hosts' NIC arbiters and the send queue pairs' granted packets in C.
 *
 * emulator/sim/nodes.py Host._pull, line by line: when a host's NIC is idle it goes round robin
 * over its active send queue pairs (`ring`, Host._active): one due sends a packet and goes to the
 * back, one not due goes to the back, one with nothing to send leaves; when none sent, it sleeps
 * until the earliest is due (a wake-up event, numbered in the heap's sequence where Python's
 * sim.at would number it). C sends only what Python granted (emulator/sim/native_sqp.py): a run
 * of new packets of one message that SendQueuePair.poll_transmit would hand out with nothing
 * but sending changing the queue pair (no resend, no rate change, no timer armed, no event),
 * with the same PSNs, opcodes, AckReq bits, sizes and pacing times. Whenever the round robin
 * meets a queue pair C cannot decide (not granted, or due with its grant spent or at its
 * controller's deadline), nothing is changed and Python runs the whole pull (returns 1).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simfab_api.h"
#include "simfab_core.h"

#define SQP_CHUNK_BITS 8
#define SQP_CHUNK (1 << SQP_CHUNK_BITS)
#define PSN_MASK 0xFFFFFFu
/* RoCEv2 header bytes (emulator/transport/packets.py BTH_BYTES, RETH_BYTES, ICRC_BYTES) */
#define BTH_BYTES 12
#define RETH_BYTES 16
#define ICRC_BYTES 4
#define ROCEV2_UDP_PORT 4791
#define SLACK_S 1e-12 /* nodes.py and sender.py's float slack on due times */

enum { OP_FIRST = 0, OP_MIDDLE = 1, OP_LAST = 2, OP_ONLY = 3 };
/* what a receive queue pair's common path reads of each (native_rqp.data_flags_table) */
static const int32_t POSITION_FLAGS[4] = {DATA_FIRST, 0, DATA_LAST, DATA_FIRST | DATA_LAST};

static sqp_table_t *table(core_t *f) { return f->sqp; }

static fab_sqp_t *slot(sqp_table_t *t, int32_t id) {
    return &t->chunks[id >> SQP_CHUNK_BITS][id & (SQP_CHUNK - 1)];
}

/* ---- the ring (a circular buffer) --------------------------------------------------------- */
static int ring_push(fab_host_t *h, int32_t id) {
    if (h->len == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 16;
        int32_t *ring = malloc((size_t)cap * sizeof(int32_t));
        if (!ring) return -1;
        for (int32_t i = 0; i < h->len; i++) ring[i] = h->ring[(h->head + i) % h->cap];
        free(h->ring);
        h->ring = ring;
        h->head = 0;
        h->cap = cap;
    }
    h->ring[(h->head + h->len) % h->cap] = id;
    h->len++;
    return 0;
}

static int32_t ring_at(const fab_host_t *h, int32_t i) { return h->ring[(h->head + i) % h->cap]; }

static int32_t ring_pop(fab_host_t *h) {
    int32_t id = h->ring[h->head];
    h->head = (h->head + 1) % h->cap;
    h->len--;
    return id;
}

/* ---- a granted packet ---------------------------------------------------------------------- */
/* packet k's position kind and payload (sender.py _opcode, _describe); returns its UDP payload */
static int64_t describe(const fab_sqp_t *s, int *kind, int64_t *payload) {
    int32_t k = s->k;
    int64_t n = s->msg_bytes - (int64_t)k * s->mtu;
    if (n > s->mtu) n = s->mtu;
    if (k == 0) *kind = s->msg_packets == 1 ? OP_ONLY : OP_FIRST;
    else *kind = k == s->msg_packets - 1 ? OP_LAST : OP_MIDDLE;
    *payload = n;
    int64_t reth = (s->reth_mask >> *kind) & 1 ? RETH_BYTES : 0;
    return BTH_BYTES + reth + n + (-n & 3) + ICRC_BYTES;
}

/* C may send its next granted packet now: the controller's timers and byte counter would not
 * act on it (congestion.py DcqcnControl.on_packet_sent: on_timer first, then the counter) */
static int can_send(const fab_sqp_t *s, double now) {
    if (s->remaining <= 0 || now + s->cc_slack_s >= s->cc_deadline_s) return 0;
    int kind;
    int64_t payload;
    int64_t paced = describe(s, &kind, &payload) + s->pace_overhead;
    return s->granted_bytes + paced < s->byte_budget;
}

static void list_dirty(core_t *f, int32_t id, fab_sqp_t *s) {
    sqp_table_t *t = table(f);
    if (s->listed) return;
    if (f->pub.n_sqp_dirty == t->cap_dirty) {
        int64_t cap = t->cap_dirty ? t->cap_dirty * 2 : 256;
        int32_t *dirty = realloc(t->dirty, (size_t)cap * sizeof(int32_t));
        if (!dirty) {
            f->oom = 1;
            return;
        }
        t->dirty = dirty;
        t->cap_dirty = cap;
    }
    t->dirty[f->pub.n_sqp_dirty++] = id;
    s->listed = 1;
}

/* poll_transmit's new-packet branch and Host._transmit_data, for a granted packet */
static void send_granted(core_t *f, fab_host_t *h, int32_t id, fab_sqp_t *s) {
    double now = f->pub.now;
    int kind;
    int64_t payload;
    int64_t udp = describe(s, &kind, &payload);
    int32_t j = s->granted - s->remaining;
    int ack = j == s->ack_next;
    if (ack) s->ack_next += s->ack_every;
    if (s->remaining == 1 && s->ack_last) ack = 1;
    int32_t fi = frame_new(f);
    if (fi < 0) return;
    frame_t *fr = &f->frames[fi];
    fr->src = h->index;
    fr->dst = s->dst;
    fr->sport = s->sport;
    fr->size = (int32_t)(udp + s->frame_overhead);
    fr->ecn = s->ecn;
    fr->control = 0;
    fr->tag = s->tag;
    fr->priority = s->priority;
    fr->flow = s->flow;
    fr->dport = ROCEV2_UDP_PORT;
    fr->mhash = s->mhash;
    fr->handle = -1;
    fr->qpn = s->dest_qp;
    fr->psn = s->psn;
    fr->data_flags = POSITION_FLAGS[kind] | (ack ? DATA_ACK_REQ : 0);
    fr->payload_bytes = (int32_t)payload;
    fr->opcode = s->opcodes[kind];
    fr->offset = (int64_t)s->k * s->mtu;
    fr->msg_bytes = s->msg_bytes;
    fr->marked_here = 0;
    fr->ingress = -1;
    fr->next = -1;
    /* the pacing clock (poll_transmit): from the due time, or now if later than the burst */
    int64_t paced = udp + s->pace_overhead;
    double floor_s = now - s->max_burst_s;
    s->last_tx_s = floor_s > s->next_tx_s ? floor_s : s->next_tx_s;
    s->last_tx_bits = paced * 8;
    s->next_tx_s = s->last_tx_s + (double)s->last_tx_bits / s->rate_bps;
    if (ack) {
        s->ack_k = s->k;
        s->ack_sent_s = now;
    }
    s->psn = (s->psn + 1) & PSN_MASK;
    s->k++;
    s->remaining--;
    s->sent++;
    s->sent_bytes += paced;
    s->granted_bytes += paced;
    if (s->has_rp) rp_count_quiet_bytes(&s->rp, paced); /* its byte counter (quiet: no act) */
    f->pub.tx_granted++;
    list_dirty(f, id, s);
    port_send(f, h->nic, fi);
}

/* ---- the round robin (Host._pull) ----------------------------------------------------------- */
/* 0: done here; 1: Python must pull (nothing was changed) */
static int pull(core_t *f, int32_t hi) {
    sqp_table_t *t = table(f);
    fab_host_t *h = &t->hosts[hi];
    if (f->pub.ports[h->nic].paused) return 0;
    double now = f->pub.now, due_by = now + SLACK_S;
    int32_t n = h->len, stop = -1;
    /* first, whether C can decide every queue pair the round robin reaches */
    for (int32_t i = 0; i < n; i++) {
        fab_sqp_t *s = slot(t, ring_at(h, i));
        if (s->state != SQP_GRANTED) return 1;
        if (s->remaining > 0) {
            if (s->next_tx_s <= due_by) {
                if (!can_send(s, now)) return 1;
                stop = i;
                break;
            }
        } else if (!s->after_idle && s->next_tx_s <= due_by) {
            return 1; /* due, and what it sends next is Python's to say */
        }
    }
    double earliest = INFINITY;
    int32_t count = stop >= 0 ? stop + 1 : n;
    for (int32_t i = 0; i < count; i++) {
        int32_t id = ring_pop(h);
        fab_sqp_t *s = slot(t, id);
        if (s->remaining == 0 && s->after_idle) {
            s->in_ring = 0; /* next_transmit_s() is None: it leaves, Python's again */
            s->state = SQP_PYTHON;
            continue;
        }
        ring_push(h, id); /* cannot fail: it just left */
        if (i == stop) {
            send_granted(f, h, id, s);
            return 0;
        }
        if (s->next_tx_s < earliest) earliest = s->next_tx_s;
    }
    if (earliest < h->wakeup_at) {
        h->wakeup_at = earliest;
        push(f, earliest, EV_WAKE, hi, 0);
    }
    return 0;
}

/* port `port` went idle (or was resumed): 1 when Python must pull (the host's arbiter is not
 * here, or it cannot decide) */
int sqp_host_idle(core_t *f, int32_t port) {
    int32_t hi = f->pub.ports[port].arbiter;
    if (hi < 0) return 1;
    return pull(f, hi);
}

/* Host._wakeup: a superseded wake-up does nothing; 1 when Python must pull */
int sqp_wake(core_t *f, int32_t hi) {
    fab_host_t *h = &table(f)->hosts[hi];
    if (f->pub.now + SLACK_S < h->wakeup_at) return 0;
    h->wakeup_at = INFINITY;
    if (f->pub.ports[h->nic].busy) return 0;
    return pull(f, hi);
}

void sqp_free(core_t *f) {
    sqp_table_t *t = f->sqp;
    if (!t) return;
    for (int32_t i = 0; i < t->n_hosts; i++) free(t->hosts[i].ring);
    for (int32_t i = 0; i < t->n_chunks; i++) free(t->chunks[i]);
    free(t->hosts);
    free(t->chunks);
    free(t->dirty);
    free(t->scratch);
    free(t);
    f->sqp = NULL;
}

/* ---- the API ------------------------------------------------------------------------------ */
/* `n` hosts whose arbiters may run here (each then needs its nic and index set); -1: out of
 * memory or called twice */
int fab_hosts(fab_t *pub, int32_t n) {
    core_t *f = (core_t *)pub;
    if (f->sqp) return -1;
    sqp_table_t *t = calloc(1, sizeof(sqp_table_t));
    if (!t) return -1;
    t->hosts = calloc(n ? n : 1, sizeof(fab_host_t));
    if (!t->hosts) {
        free(t);
        return -1;
    }
    t->n_hosts = n;
    for (int32_t i = 0; i < n; i++) {
        t->hosts[i].nic = -1;
        t->hosts[i].index = i;
        t->hosts[i].wakeup_at = INFINITY;
    }
    f->sqp = t;
    return 0;
}

fab_host_t *fab_host(fab_t *pub, int32_t host) { return &table((core_t *)pub)->hosts[host]; }

/* send queue pair slot `id` (ids from 0, as Python numbers them), the table grown to hold it; it
 * never moves (NULL: out of memory, or fab_hosts not called) */
fab_sqp_t *fab_sqp(fab_t *pub, int32_t id) {
    sqp_table_t *t = table((core_t *)pub);
    if (!t || id < 0) return NULL;
    int32_t chunk = id >> SQP_CHUNK_BITS;
    if (chunk >= t->n_chunks) {
        int32_t n = chunk + 1;
        fab_sqp_t **chunks = realloc(t->chunks, (size_t)n * sizeof(fab_sqp_t *));
        if (!chunks) return NULL;
        t->chunks = chunks;
        for (int32_t i = t->n_chunks; i < n; i++) {
            chunks[i] = calloc(SQP_CHUNK, sizeof(fab_sqp_t));
            if (!chunks[i]) return NULL; /* n_chunks stays: the next call tries again */
            for (int32_t j = 0; j < SQP_CHUNK; j++) {
                chunks[i][j].host = -1;
                chunks[i][j].ack_k = -1;
                chunks[i][j].timer_at = INFINITY;
                chunks[i][j].qpn = -1; /* its reaction point not looked at yet */
            }
            t->n_chunks = i + 1;
        }
    }
    return slot(t, id);
}

/* Host._arm_timer for queue pair `id` of a host whose arbiter runs here: its timer at when_s
 * (Host._timer_at), numbered in the heap's sequence where sim.at would number it */
void fab_sqp_timer(fab_t *pub, int32_t id, double when_s) {
    core_t *f = (core_t *)pub;
    slot(table(f), id)->timer_at = when_s;
    push(f, when_s, EV_TIMER, id, 0);
}

/* a timer event of queue pair `id` is due (1: Python runs Host._timer) or stale (0: an earlier
 * one replaced it, or it ran: Host._timer returns at once for it, so it is not handed over) */
int sqp_timer_due(core_t *f, int32_t id) {
    return !(f->pub.now + SLACK_S < slot(table(f), id)->timer_at);
}

/* sender.py _rto_deadline_s as the queue pair stands: restarted by an AckReq sent here since
 * the grant, else as at the grant (INFINITY: not running) */
static double rto_deadline(const fab_sqp_t *s) {
    if (s->ack_k >= 0) return py_max(s->ack_sent_s, s->last_progress_s) + s->rto_s;
    return s->rto_running ? s->rto_base_s + s->rto_s : INFINITY;
}

/* Host._timer of a granted queue pair whose reaction point runs here, when only its controller
 * acts: no retransmission due, the rate limiter not released, and the rest of its grant still
 * leaving the timer it arms in place (grant.py _timer_stays). Then, in Host._timer's order:
 * the controller's timers (SendQueuePair.on_timer, _rate_changed and its RateChanged event),
 * the next timer armed, the grant's controller bounds, and the NIC kicked. Returns 0 done
 * here; RET_IDLE done here and Python pulls (Host._kick); RET_TIMER nothing changed, Python
 * runs Host._timer. */
int sqp_timer(core_t *f, int32_t id, fab_out_t *out) {
    sqp_table_t *t = table(f);
    fab_sqp_t *s = slot(t, id);
    double now = f->pub.now;
    if (s->state != SQP_GRANTED || !s->has_rp || !s->in_ring || s->host < 0) goto python;
    double rto = rto_deadline(s);
    double deadline = py_min(rp_next_deadline(&s->rp), rto);
    if (!(deadline <= now + SLACK_S) || now + SLACK_S >= rto) goto python;
    fab_rp_t rp = s->rp; /* tried first: nothing changes unless C goes on */
    int changed = rp_on_timer(&rp, now);
    if (!rp.active) goto python; /* back at line rate: Python grants again */
    double armed = py_min(rp_next_deadline(&rp), rto);
    int ack_pending = s->remaining > 0 && (s->ack_next < s->granted || s->ack_last);
    if (rto == INFINITY && ack_pending && !(now + s->rto_s >= armed - SLACK_S)) goto python;
    s->rp = rp;
    s->rp_dirty = 1;
    f->pub.timers_in_c++;
    list_dirty(f, id, s);
    if (changed) { /* sender.py _rate_changed */
        double rate = rp.current_rate_bps;
        double spaced = s->last_tx_s + (double)s->last_tx_bits / rate;
        double owed = s->next_tx_s < now ? s->next_tx_s : now;
        s->next_tx_s = spaced > owed ? spaced : owed;
        s->rate_bps = rate;
        fab_event_t *ev = raise_event(f, EVT_RATE_CHANGED, s->qpn);
        if (ev) {
            ev->rate_bps = rate;
            ev->target_bps = rp.target_rate_bps;
            ev->reason = rp.last_reason;
        }
    }
    fab_sqp_timer(&f->pub, id, armed); /* Host._arm_timer: its own timer ran, none armed */
    double cc_deadline, cc_slack;
    int64_t budget;
    rp_quiet(&s->rp, &cc_deadline, &cc_slack, &budget);
    s->cc_deadline_s = cc_deadline;
    s->cc_slack_s = cc_slack;
    s->byte_budget = s->granted_bytes + budget;
    int32_t nic = t->hosts[s->host].nic;
    if (!f->pub.ports[nic].busy && pull(f, s->host)) {
        idle_out(f, nic, out);
        return RET_IDLE;
    }
    return 0;
python:
    out->kind = RET_TIMER;
    out->handle = id;
    return RET_TIMER;
}

/* Host._kick's pull of a host whose arbiter runs here: 0 done, 1 Python must pull */
int fab_host_pull(fab_t *pub, int32_t host) { return pull((core_t *)pub, host); }

/* Python's pull of such a host schedules its wake-up here (Host._pull's sim.at) */
void fab_host_wake(fab_t *pub, int32_t host, double when_s) {
    core_t *f = (core_t *)pub;
    table(f)->hosts[host].wakeup_at = when_s;
    push(f, when_s, EV_WAKE, host, 0);
}

/* the ring in order (valid until the next call); its length */
int32_t fab_ring_get(fab_t *pub, int32_t host, int32_t **ids) {
    sqp_table_t *t = table((core_t *)pub);
    fab_host_t *h = &t->hosts[host];
    if (h->len > t->cap_scratch) {
        int32_t *scratch = realloc(t->scratch, (size_t)h->len * sizeof(int32_t));
        if (!scratch) return -1;
        t->scratch = scratch;
        t->cap_scratch = h->len;
    }
    for (int32_t i = 0; i < h->len; i++) t->scratch[i] = ring_at(h, i);
    *ids = t->scratch;
    return h->len;
}

/* the ring Python's pull left (its members in_ring; those that left are Python's again); -1
 * out of memory */
int fab_ring_set(fab_t *pub, int32_t host, const int32_t *ids, int32_t n) {
    sqp_table_t *t = table((core_t *)pub);
    fab_host_t *h = &t->hosts[host];
    for (int32_t i = 0; i < h->len; i++) slot(t, ring_at(h, i))->in_ring = 0;
    for (int32_t i = 0; i < n; i++) slot(t, ids[i])->in_ring = 1;
    for (int32_t i = 0; i < h->len; i++) {
        fab_sqp_t *s = slot(t, ring_at(h, i));
        if (!s->in_ring) {
            s->state = SQP_PYTHON;
            s->remaining = 0;
        }
    }
    h->head = h->len = 0;
    for (int32_t i = 0; i < n; i++)
        if (ring_push(h, ids[i])) return -1;
    return 0;
}

/* Host._activate of a queue pair not in the ring */
int fab_ring_append(fab_t *pub, int32_t host, int32_t id) {
    sqp_table_t *t = table((core_t *)pub);
    if (ring_push(&t->hosts[host], id)) return -1;
    slot(t, id)->in_ring = 1;
    return 0;
}

/* the send queue pairs that sent since fab_sqp_dirty_clear (each once) */
int64_t fab_sqp_dirty(fab_t *pub, int32_t **ids) {
    core_t *f = (core_t *)pub;
    *ids = table(f)->dirty;
    return f->pub.n_sqp_dirty;
}

void fab_sqp_dirty_clear(fab_t *pub) {
    core_t *f = (core_t *)pub;
    sqp_table_t *t = table(f);
    for (int64_t i = 0; i < f->pub.n_sqp_dirty; i++) slot(t, t->dirty[i])->listed = 0;
    f->pub.n_sqp_dirty = 0;
}
