/* simfab.c's own state, shared with simfab_sqp.c (the hosts' NIC arbiters and the send queue
 * pairs' granted packets): not Python's (it sees simfab_api.h). */
/* include after simfab_api.h (it has no guard: cffi's cdef reads it as it is) */
#include <stdint.h>

#include "simfab_rqp.h"

/* Python's max(a, b) and min(a, b): the first unless the second is strictly beyond it (the
 * C code that mirrors Python's arithmetic picks as Python does) */
static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

enum { EV_PY = 0, EV_DONE = 1, EV_DONE_DELIVER = 2, EV_DELIVER = 3, EV_SEND = 4, EV_PAUSE = 5,
       EV_WAKE = 6, /* a host NIC arbiter's wake-up (simfab_sqp.c) */
       EV_TIMER = 7 /* a send queue pair's timer (Host._timer, simfab_sqp.c) */ };

typedef struct {
    double t;
    uint64_t seq;
    int32_t kind, a;
    int64_t b;
} ev_t;

typedef struct {
    int32_t src, dst, sport, size, ecn, control, dport, priority, marked_here;
    int32_t ingress, next;
    int64_t tag, flow, handle, mhash;
    int32_t qpn, data_flags, payload_bytes; /* a data packet's (qpn -1: not one) */
    uint32_t psn;
    int32_t opcode;            /* a packet C built (handle -1), for Python's DataPacket or */
    int64_t offset, msg_bytes; /* AckPacket: a data packet's place in its message, its size; */
    int32_t dest_qp;           /* an ACK's queue pair and message sequence number */
    int64_t msn;
} frame_t;

typedef struct {
    uint32_t state[624];
    int32_t index;
} mt_t;

typedef struct {
    int32_t head, tail;
} fifo_t;

typedef struct {
    fab_attr_t *items;
    int32_t n, cap;
    int64_t *marked;
    int32_t n_marked, cap_marked;
} attr_t;

typedef struct {
    uint64_t *keys;
    int32_t *values; /* port, or -1 for no route */
    int64_t n, cap;  /* cap: a power of two */
} route_map_t;

typedef struct {
    fab_t pub; /* what Python reads (simfab_api.h); the rest is the fabric's own */
    ev_t *heap;
    int64_t n_heap, cap_heap;
    frame_t *frames;
    int32_t n_frames, cap_frames, free_frame;
    fifo_t *data, *prio;
    mt_t *mark_rng, *loss_rng;
    attr_t *attr;
    route_map_t *routes;
    rqp_table_t rqp; /* receive queue pairs whose common path is taken here (simfab_rqp.c) */
    struct sqp_table *sqp; /* hosts and send queue pairs (simfab_sqp.c); NULL until fab_hosts */
    int64_t *dead;
    int64_t n_dead, cap_dead;
    fab_event_t *events; /* pub.n_events of them raised since Python took them */
    int64_t cap_events;
    int32_t oom;
    /* what to finish on the next fab_run before the heap: a frame to deliver after a host's
     * idle callback (DONE_DELIVER), or a switch's frame waiting for its route */
    int32_t pend_kind, pend_a, pend_frame;
} core_t;

enum { PEND_NONE = 0, PEND_DELIVER = 1, PEND_ROUTE = 2 };

/* simfab_sqp.c's tables (its hosts and send queue pairs) */
typedef struct sqp_table {
    fab_host_t *hosts;
    int32_t n_hosts;
    fab_sqp_t **chunks; /* slot id is chunks[id >> SQP_CHUNK_BITS][id & mask]: never moves */
    int32_t n_chunks;
    int32_t *dirty;
    int64_t cap_dirty;
    int32_t *scratch; /* fab_ring_get's answer */
    int32_t cap_scratch;
} sqp_table_t;

/* simfab.c's, for simfab_sqp.c */
void push(core_t *f, double t, int32_t kind, int32_t a, int64_t b);
int32_t frame_new(core_t *f);
void port_send(core_t *f, int32_t port, int32_t fi);
void idle_out(core_t *f, int32_t port, fab_out_t *out);
fab_event_t *raise_event(core_t *f, int32_t kind, int32_t qpn);

/* simfab_sqp.c's, for simfab.c */
int sqp_host_idle(core_t *f, int32_t port);
int sqp_wake(core_t *f, int32_t host);
int sqp_timer_due(core_t *f, int32_t id);
int sqp_timer(core_t *f, int32_t id, fab_out_t *out);
void sqp_free(core_t *f);
