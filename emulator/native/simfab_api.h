/* The C API of emulator.native._simfab (simfab.c): the packet simulator's fabric. Plain
 * declarations only: build_simfab.py hands this file to cffi's cdef as is, and simfab.c
 * includes it, so the two cannot disagree. What each function does is said where it is
 * defined. */

enum { RET_DONE = 0, RET_PY = 1, RET_HOST_RX = 2, RET_IDLE = 3, RET_ROUTE = 4, RET_BUDGET = 5,
       RET_NOMEM = 6, RET_TIMER = 7 /* a send queue pair's timer is due: `handle` is its slot */ };

typedef struct {
    int32_t kind;
    int32_t node;   /* host (RX, IDLE) or switch (ROUTE) */
    int32_t port;   /* the port a frame arrives from (RX) */
    int32_t src, dst, sport, size, ecn, control, dport, priority;
    int64_t tag, flow, handle; /* its collective, flow; its packet's handle, or a callback's */
    int64_t mhash;
    int32_t qpn; /* RX of a data packet: the receive queue pair it is for (else -1) */
    /* RX of a packet C built (handle -1: Python never held it): what Python builds its
     * DataPacket (a send queue pair's grant) or AckPacket (opcode ACKNOWLEDGE: a receive queue
     * pair's answer, to dest_qp with msn) from */
    uint32_t psn;
    int32_t opcode, data_flags, payload_bytes, dest_qp;
    int64_t offset, msg_bytes, msn;
} fab_out_t;

typedef struct {
    double rate_bps, delay_s;
    int64_t buffer_bytes;
    double loss_p;
    int32_t lossless, mark_on_arrival, has_marker;
    int64_t kmin, kmax, span;
    double pmax;
    int32_t up, busy, paused;
    double paused_since, paused_s;
    int64_t pause_frames, resume_frames, tx_frames, tx_bytes, drops, losses, lost_bytes, marks;
    int64_t queued_bytes, max_queued_bytes;
    int32_t peer_host, peer_switch, far_ingress; /* -1: none */
    int32_t idle_host;                       /* >= 0: a host pulls when it goes idle */
    int32_t arbiter; /* >= 0: that host's NIC arbiter runs here (simfab_sqp.c); -1: Python's */
    int32_t attribution;                                   /* 0: off */
} fab_port_t;

typedef struct {
    int32_t upstream, pool;
    int64_t xoff, xon_offset, headroom_bytes, shared, hdrm, max_bytes, drops;
    int32_t paused;
} fab_ingress_t;

typedef struct {
    int64_t free_bytes, used;
    int32_t shift;
} fab_pool_t;

typedef struct {
    int64_t tag, q, tx, marks, drops;
    double byte_s, last;
} fab_attr_t;

typedef struct {
    double latency_s;
    int64_t no_route;
} fab_switch_t;

/* A receive queue pair whose common path C takes (simfab_rqp.c): what it must know of the
 * Python receiver's state, and what it took since Python last read it. A data frame's flags: */
enum { DATA_ACK_REQ = 1, DATA_FIRST = 2, DATA_LAST = 4 };
/* what the common path did with a packet (fab_rqp_offer): took it; and it asked for an ACK;
 * and its CE mark asks for a CNP */
enum { RQP_TOOK = 1, RQP_ACK = 2, RQP_CNP = 4 };

typedef struct {
    int32_t host;       /* the host it receives at; -1: none, -2: two hosts claim the number */
    int32_t eligible;   /* 1: nothing held or seen ahead (receiver.py's common path applies) */
    int32_t in_message; /* inside a message (its next packet is a MIDDLE or LAST) */
    uint32_t expected_psn, highest_psn;
    int32_t listed; /* on the list fab_rqp_dirty gives */
    int64_t packets, bytes; /* taken here since Python last read them (0: nothing to read) */
    /* An in-order packet asking for an ACK is taken too once Python set how the receiver's host
     * answers (ack_ready): its ACK (receiver.py _ack) leaves from port ack_port as a frame of
     * ack_size bytes from host ack_src to ack_dst, to queue pair ack_dest_qp, carrying the
     * message sequence number msn; `acks` counts those sent since Python last read them. */
    int32_t ack_ready, ack_port, ack_src, ack_dst, ack_sport, ack_ecn, ack_priority, ack_size;
    int32_t ack_dest_qp;
    int64_t ack_mhash, msn, acks;
    /* A CE-marked one is taken too once Python set how the host sends a CNP (cnp_ready: the
     * same route as the ACK, a CNP's ECN, priority and size) and the receiver's events are the
     * replay's (fab_events): its notification point (dcqcn.py NotificationPoint: one CNP per
     * cnp_interval_s, the last at last_cnp_s) answers with a CNP before the ACK, and a CnpSent
     * event; ce_packets and cnps count those since Python last read them. */
    int32_t cnp_ready, cnp_ecn, cnp_priority, cnp_size;
    double cnp_interval_s, last_cnp_s;
    int64_t ce_packets, cnps;
} fab_rqp_t;

/* An event of the transport's that C raised (emulator/transport/events.py; Python appends
 * them to the replay's list, in order, before it runs anything else): EVT_CNP_SENT is
 * CnpSent(qpn, now_s). The first one while that list is empty (events_listed 0) schedules its
 * handler as Python's first append does: a callback at now with the handle EVENTS_HANDLE. */
enum { EVT_CNP_SENT = 1, EVT_RATE_CHANGED = 2 };
enum { EVENTS_HANDLE = -2 };

typedef struct {
    int32_t kind, qpn;
    double now_s;
    double rate_bps, target_bps; /* EVT_RATE_CHANGED: RateChanged's, with its reason (RP_*) */
    int32_t reason;
} fab_event_t;

/* DCQCN's reaction point of a send queue pair (simfab_dcqcn.c: dcqcn.py ReactionPoint, field by
 * field; emulator/sim/native_dcqcn.py copies it both ways). last_reason: */
enum { RP_NONE = 0, RP_FIRST_CNP = 1, RP_CNP = 2, RP_FAST_RECOVERY = 3, RP_ADDITIVE_INCREASE = 4,
       RP_HYPER_INCREASE = 5 };

typedef struct {
    /* DcqcnParams as the doubles Python computes from them once */
    double g, alpha_period_s, decrease_period_s, time_reset_s, hai_bps, ai_bps, min_dec_fac;
    double min_rate_bps, first_cnp_rate_bps, initial_alpha, line_rate_bps;
    int64_t byte_reset_bytes, threshold;
    int32_t has_first_cnp_rate, clamp_tgt_rate, clamp_after_time_inc;
    /* the state */
    int32_t active, last_reason, cnp_in_period, increased_since_cut, counting;
    double current_rate_bps, target_rate_bps, alpha, alpha_epoch_s, decrease_epoch_s;
    double decrease_due_s, next_increase_s;
    int64_t timer_events, byte_events, bytes_since_reset;
} fab_rp_t;

/* A host whose NIC arbiter runs here (simfab_sqp.c: emulator/sim/nodes.py Host._pull's round
 * robin over its active send queue pairs, and its wake-ups). */
typedef struct {
    int32_t nic;      /* its NIC port */
    int32_t index;    /* its number (a frame's src) */
    double wakeup_at; /* Host._wakeup_at */
    int32_t *ring;    /* Host._active, a circular buffer: ring[(head + i) % cap] */
    int32_t head, len, cap;
} fab_host_t;

/* A send queue pair's grant (emulator/sim/native_sqp.py): packets of one message C sends at
 * their pacing times, as SendQueuePair.poll_transmit would, while nothing but sending changes
 * the queue pair; what it sent, Python folds in (the `sent` fields). */
enum { SQP_PYTHON = 0, SQP_GRANTED = 1 };

typedef struct {
    int32_t host;      /* the host it sends from */
    int32_t in_ring;   /* in its host's round robin (Host._active_set) */
    int32_t state;     /* SQP_PYTHON: Python says what it sends; SQP_GRANTED: C sends `remaining` */
    int32_t remaining; /* granted packets not sent yet */
    int32_t after_idle; /* once they are sent it has nothing to send (it leaves the ring) */
    int32_t listed;     /* on the list fab_sqp_dirty gives */
    /* the packets: of the message `flow`, packet k next, PSN psn next */
    int32_t dst, sport, ecn, priority, dest_qp, mtu, msg_packets, k;
    int32_t opcodes[4];  /* first, middle, last, only */
    int32_t reth_mask;   /* bit i: opcodes[i] carries a RETH */
    int32_t frame_overhead, pace_overhead; /* bytes beyond the UDP payload: on the link, paced */
    int32_t ack_every, ack_next, ack_last; /* AckReq on the j-th granted packet when j == ack_next
                                            * (then ack_next += ack_every), on the last if ack_last */
    int32_t granted;
    uint32_t psn;
    int64_t tag, flow, mhash, msg_bytes;
    /* pacing (SendQueuePair._next_tx_s, _last_tx_s, _last_tx_bits, _max_burst_s, the rate) */
    double next_tx_s, last_tx_s, max_burst_s, rate_bps;
    int64_t last_tx_bits;
    /* the controller: nothing sent at or after cc_deadline_s - cc_slack_s (its timers would
     * run first), and the paced bytes of the grant stay below byte_budget (its byte counter) */
    double cc_deadline_s, cc_slack_s;
    int64_t byte_budget, granted_bytes;
    /* sent since Python last folded them in: count, paced bytes, the last AckReq one */
    int32_t sent, ack_k;
    double ack_sent_s;
    int64_t sent_bytes;
    /* Host._timer_at: its armed timer (INFINITY: none); timer events before it are stale */
    double timer_at;
    /* Its DCQCN reaction point runs here while it is granted (has_rp: its controller is
     * DCQCN and its events go to the replay's list): a timer of its own that only the
     * controller acts on runs in C (simfab_sqp.c sqp_timer); rp_dirty: C changed rp (and the
     * pacing clock, the armed timer) since Python last read them. The retransmission timer as
     * at the grant: running, from rto_base_s (max of the last AckReq's send time and the
     * progress clock), rto_s long; an AckReq sent since (ack_k >= 0) restarts it. */
    int32_t qpn, has_rp, rp_dirty, rto_running;
    double rto_base_s, rto_s, last_progress_s;
    fab_rp_t rp;
} fab_sqp_t;

/* the fabric's state Python reads (the rest is simfab.c's own) */
typedef struct {
    double now;
    uint64_t seq, events_run;
    int64_t rx_taken; /* data packets a receive queue pair took in C, never handed to Python */
    int64_t tx_granted; /* data packets a send queue pair's grant sent in C */
    int64_t n_sqp_dirty; /* send queue pairs with packets sent since Python last folded them */
    int64_t n_events; /* events raised since Python last took them (fab_events) */
    int64_t timers_in_c; /* send queue pairs' DCQCN timers run in C, never handed to Python */
    int32_t events_listed; /* Python's: its event list holds events (their handler is due) */
    int32_t n_ports, n_switches, n_ingress, n_pools;
    fab_port_t *ports;
    fab_switch_t *switches;
    fab_ingress_t *ingress;
    fab_pool_t *pools;
} fab_t;

/* the functions (simfab.c says what each does) */
fab_t *fab_new(int32_t n_ports, int32_t n_switches, int32_t n_ingress, int32_t n_pools);
void fab_free(fab_t *f);
int fab_oom(fab_t *f);
void fab_set_rng(fab_t *f, int32_t port, int32_t which, const uint32_t *state,
                 int32_t index);
double fab_rng_random(fab_t *f, int32_t port, int32_t which);
void fab_at(fab_t *f, double when_s, int64_t handle);
int64_t fab_pending(fab_t *f);
int fab_send(fab_t *f, int32_t port, int32_t src, int32_t dst, int32_t sport, int32_t size,
             int32_t ecn, int32_t control, int64_t tag, int32_t priority, int64_t flow,
             int32_t dport, int64_t mhash, int64_t handle, int32_t qpn, uint32_t psn,
             int32_t data_flags, int32_t payload_bytes);
int fab_route_set(fab_t *f, int32_t sw, int32_t src, int32_t dst, int32_t sport,
                  int32_t control, int32_t dport, int32_t port);
void fab_routes_clear(fab_t *f, int32_t sw);
void fab_set_up(fab_t *f, int32_t port, int32_t up);
int32_t fab_attr_take(fab_t *f, int32_t port, fab_attr_t **items, int64_t **marked,
                      int32_t *n_marked);
void fab_attr_reset(fab_t *f, int32_t port);
int64_t fab_dead(fab_t *f, int64_t **handles);
void fab_dead_clear(fab_t *f);
int fab_run(fab_t *f, double until_s, int64_t *budget, fab_out_t *out);
fab_rqp_t *fab_rqp(fab_t *f, int32_t qpn);
int fab_rqp_offer(fab_t *f, int32_t qpn, int32_t host, uint32_t psn, int32_t data_flags,
                  int32_t ce, int32_t payload_bytes, double now);
int64_t fab_rqp_dirty(fab_t *f, int32_t **qpns);
void fab_rqp_dirty_clear(fab_t *f);
int64_t fab_events(fab_t *f, fab_event_t **events);
void fab_events_clear(fab_t *f);
int fab_hosts(fab_t *f, int32_t n);
fab_host_t *fab_host(fab_t *f, int32_t host);
fab_sqp_t *fab_sqp(fab_t *f, int32_t id);
int fab_host_pull(fab_t *f, int32_t host);
void fab_host_wake(fab_t *f, int32_t host, double when_s);
void fab_sqp_timer(fab_t *f, int32_t id, double when_s);
int rp_on_cnp(fab_rp_t *rp, double now);
int rp_on_timer(fab_rp_t *rp, double now);
int rp_on_bytes_sent(fab_rp_t *rp, double now, int64_t size_bytes);
double rp_alpha_at(fab_rp_t *rp, double now);
double rp_next_deadline(const fab_rp_t *rp);
void rp_quiet(const fab_rp_t *rp, double *deadline_s, double *slack_s, int64_t *budget);
void rp_count_quiet_bytes(fab_rp_t *rp, int64_t size_bytes);
int32_t fab_ring_get(fab_t *f, int32_t host, int32_t **ids);
int fab_ring_set(fab_t *f, int32_t host, const int32_t *ids, int32_t n);
int fab_ring_append(fab_t *f, int32_t host, int32_t id);
int64_t fab_sqp_dirty(fab_t *f, int32_t **ids);
void fab_sqp_dirty_clear(fab_t *f);
