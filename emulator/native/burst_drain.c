/* A rank socket's reads with the receive queue pairs' common path in C (the engine's receive
 * path, emulator/engine/receive_path.py; Python side emulator/native/drain.py).
 *
 * A read of data that arrives in order for a known receive queue pair from its own peer, ends
 * no message and carries no CE mark changes the responder's state and nothing else but, for
 * the packets that ask for one, an ACK (emulator/transport/receiver.py: on_data_run's fast
 * branch, on_data's first branch, _accept, _ack): no event. rx_drain reads such reads, updates
 * the copy of the queue pair's state kept here, sends the ACKs as send_path.SendPath
 * send_replies does on the native path (one GSO send of the read's ACKs, IP ids 0, 1, ...) and
 * goes on reading; it stops at the first read that is anything else (ACKs, a message's end, a CE
 * mark, a gap, a stranger, an unknown queue pair, another traffic class than the reads before
 * it), which it leaves in the buffer for Python, read as rocev2_recv reads it. Python folds what
 * was taken into a ReceiveQueuePair object before it reads or changes it (a packet of its own,
 * the worker's report: drain.py) and copies the receiver's state back here after it handled one
 * of its packets, so whenever Python looks at a receiver both agree.
 * Appended to burst.c's source by build_burst.py (one translation unit): it reads and sends with burst.c's functions.
 */
#include <stdlib.h>

/* data packets' opcodes: DRAIN_FIRST / DRAIN_LAST (packets.FIRST_OPCODES, LAST_OPCODES) */
#define DRAIN_FIRST 1
#define DRAIN_LAST 2
#define DRAIN_ACKS 128   /* ACKs of one read sent at once (acks.py _MAX_ACKS) */
#define DRAIN_RUN 128    /* segments of one read (reads.py _MAX_RUN) */
#define AETH_ACK 0x1Fu   /* packets.AETH_ACK: the ACK syndrome with no credit count */
#define DRAIN_WAIT_BUCKETS 161 /* emulator.latency.BUCKETS (drain.py checks) */
#define DRAIN_CLASSES 64       /* DSCP values */

typedef struct {
    int32_t rank;     /* the worker's rank index it belongs to; -1: not taken here */
    int32_t eligible; /* ReceiveQueuePair.common_path()'s last element */
    uint32_t peer_addr; /* its peer: source address (sin_addr.s_addr) and port (host order) */
    uint32_t peer_port;
    uint32_t expected_psn, highest_psn;
    int32_t in_message;
    uint32_t remote_qp; /* its ACKs' destination QP */
    uint32_t msn;       /* ReceiveQueuePair.message_index: what its ACKs carry */
    int32_t ack_fd;     /* the socket its ACKs leave from, to ack_addr:ack_port with ack_tos */
    uint32_t ack_addr;
    uint16_t ack_port;
    int32_t ack_tos;
    /* IcrcContext.prefix_crc(ip_id, 20) for ip_id 0..DRAIN_ACKS-1: Python's array (drain.py
     * keeps it alive), out of the slot so that a table of mostly unused QP numbers stays small */
    const uint32_t *prefixes;
    /* taken since Python last folded: packets, payload bytes, ACKs asked for and sent */
    int64_t packets, bytes, acks;
    int32_t listed; /* on the dirty list */
} drain_rqp_t;

/* What every call took, summed until Python collects it at the worker's report (drain.py
 * collect; the counters, the per-class tally and the wait histogram are read
 * only there): counting it in Python after every call was a twentieth of a busy worker */
typedef struct {
    int64_t reads, packets, acks, ack_bytes;
    int64_t buffer_full, no_buffers, no_path;
    int64_t class_packets[DRAIN_CLASSES], class_bytes[DRAIN_CLASSES]; /* by DSCP */
    /* the waits as LatencyHistogram.observe counts them (bucket i: the first bound >= the
     * wait), their sum and maximum, wall s */
    int64_t wait_counts[DRAIN_WAIT_BUCKETS];
    double wait_sum_s, wait_max_s;
} drain_totals_t;

typedef struct {
    drain_rqp_t *q; /* by QP number */
    int32_t n;
    int32_t *dirty; /* QP numbers taken for since Python last folded them all (drain_unlist) */
    int32_t n_dirty, cap_dirty;
    uint8_t flags[256]; /* DRAIN_FIRST | DRAIN_LAST by opcode */
    int32_t gso;          /* ACKs of one read in one GSO send (else one datagram each) */
    int32_t max_segments; /* engine.gso_max_segments */
    int32_t reads;          /* this call's reads taken */
    int32_t send_errno;     /* an ACK send failed for another reason: Python raises it */
    int32_t send_errno_qpn; /* the receive queue pair whose ACKs it was */
    drain_totals_t totals;
    double wait_bounds[DRAIN_WAIT_BUCKETS - 1]; /* emulator.latency.BOUNDS_S, set by drain.py */
    /* rx_drain's arguments that stay the same from call to call (drain.py sets them once):
     * converting fifteen arguments through cffi at every call was most of its Python cost */
    uint8_t *buf;
    size_t len;
    uint32_t *fields;
    uint64_t *rx_ns;
    uint32_t max_psns;
    uint32_t *psns;
    const uint8_t *run_opcodes;
    uint8_t *reply_buf;
    size_t reply_bytes;
    long got; /* rx_drain_fd's *got and *left */
    int32_t left;
} drain_t;

drain_rqp_t *drain_rqp(drain_t *d, int32_t qpn)
{
    if (qpn < 0 || qpn > (int32_t)QPN_MASK)
        return NULL;
    if (qpn >= d->n) {
        int32_t n = d->n ? d->n : 256;
        while (n <= qpn)
            n *= 2;
        drain_rqp_t *q = realloc(d->q, (size_t)n * sizeof(drain_rqp_t));
        if (!q)
            return NULL;
        memset(q + d->n, 0, (size_t)(n - d->n) * sizeof(drain_rqp_t));
        for (int32_t i = d->n; i < n; i++)
            q[i].rank = -1;
        d->q = q;
        d->n = n;
    }
    return &d->q[qpn];
}

/* A read's wait (wall s) into the totals' histogram: bisect_left over the bounds, as
 * emulator.latency.LatencyHistogram.observe */
void drain_observe_wait(drain_t *d, double wait_s)
{
    int32_t lo = 0, hi = DRAIN_WAIT_BUCKETS - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (d->wait_bounds[mid] < wait_s)
            lo = mid + 1;
        else
            hi = mid;
    }
    d->totals.wait_counts[lo]++;
    d->totals.wait_sum_s += wait_s;
    if (wait_s > d->totals.wait_max_s)
        d->totals.wait_max_s = wait_s;
}

drain_t *drain_new(void)
{
    drain_t *d = calloc(1, sizeof(drain_t));
    return d;
}

void drain_free(drain_t *d)
{
    if (!d)
        return;
    free(d->q);
    free(d->dirty);
    free(d);
}

/* Python folded every listed queue pair's tallies: the list starts again */
void drain_unlist(drain_t *d)
{
    for (int32_t i = 0; i < d->n_dirty; i++)
        d->q[d->dirty[i]].listed = 0;
    d->n_dirty = 0;
}

/* psn_diff of packets.py: the signed distance a - b on the 24-bit PSN circle */
static int32_t drain_psn_diff(uint32_t a, uint32_t b)
{
    return (int32_t)((a - b + (1u << 23)) & PSN_MASK) - (1 << 23);
}

/* Linux include/uapi/asm-generic/errno.h: no way to the destination (send_errors.py) */
static int no_path_errno(int e)
{
    return e == ENETDOWN || e == ENETUNREACH || e == EHOSTUNREACH || e == EHOSTDOWN;
}

/* The read in buf[:got] (fields as rocev2_recv fills them) on the common path: 1 taken
 * (state updated, ACKs sent), 0 Python's, -1 out of memory (nothing changed). */
static int drain_take(drain_t *d, int32_t rank, uint8_t *buf, long got, const uint32_t *fields,
                      const uint8_t *run_opcodes, uint8_t *reply_buf, size_t reply_bytes)
{
    uint32_t tos = fields[0];
    if ((tos & 3) == 3 || fields[5] || got <= 0 || buf[0] == OPCODE_ACKNOWLEDGE)
        return 0; /* CE, ACKs, nothing */
    uint32_t run[5], acks[DRAIN_RUN];
    uint8_t opcodes[DRAIN_RUN];
    long count = rocev2_read_data_run(buf, (size_t)got, fields[1], run_opcodes, DRAIN_RUN, run,
                                      opcodes, acks);
    if (count <= 0)
        return 0;
    uint32_t qpn = run[0], psn = run[1], n_acks = run[4];
    if ((int32_t)qpn >= d->n)
        return 0;
    drain_rqp_t *q = &d->q[qpn];
    if (q->rank != rank || rank < 0 || !q->eligible || q->peer_addr != fields[2] ||
        q->peer_port != fields[3] || psn != q->expected_psn)
        return 0;
    if (psn != ((q->highest_psn + 1) & PSN_MASK) && drain_psn_diff(psn, q->highest_psn) <= 0)
        return 0; /* reordered (RFC 4737): Python counts it */
    if ((((d->flags[opcodes[0]] & DRAIN_FIRST) != 0) == (q->in_message != 0)))
        return 0; /* FIRST inside a message or MIDDLE outside one: Python drops it */
    for (long i = 0; i < count; i++) {
        uint8_t f = d->flags[opcodes[i]];
        if ((f & DRAIN_LAST) || (i > 0 && (f & DRAIN_FIRST)))
            return 0; /* a message ends (an event), or the stream breaks */
    }
    if (n_acks > (uint32_t)d->max_segments || n_acks > DRAIN_ACKS ||
        (n_acks && (q->ack_fd < 0 || !q->prefixes)))
        return 0;
    if (!q->listed) {
        if (d->n_dirty == d->cap_dirty) {
            int32_t cap = d->cap_dirty ? d->cap_dirty * 2 : 64;
            int32_t *dirty = realloc(d->dirty, (size_t)cap * sizeof(int32_t));
            if (!dirty)
                return -1;
            d->dirty = dirty;
            d->cap_dirty = cap;
        }
        d->dirty[d->n_dirty++] = (int32_t)qpn;
        q->listed = 1;
    }
    q->expected_psn = (psn + (uint32_t)count) & PSN_MASK;
    q->highest_psn = (psn + (uint32_t)count - 1) & PSN_MASK;
    q->in_message = 1;
    q->packets += count;
    long payload = (long)run[2] * (count - 1) + run[3];
    q->bytes += payload;
    d->totals.packets += count;
    d->totals.class_packets[(tos >> 2) & (DRAIN_CLASSES - 1)] += count;
    d->totals.class_bytes[(tos >> 2) & (DRAIN_CLASSES - 1)] += got;
    if (n_acks) {
        /* one GSO send of the read's ACKs (IP ids 0, 1, ...), or one datagram each */
        uint32_t psns[DRAIN_RUN], aeths[DRAIN_RUN];
        for (uint32_t i = 0; i < n_acks; i++) {
            psns[i] = (psn + acks[i]) & PSN_MASK;
            aeths[i] = AETH_ACK << 24 | (q->msn & 0xFFFFFFu);
        }
        uint32_t per_send = d->gso ? n_acks : 1;
        for (uint32_t at = 0; at < n_acks; at += per_send) {
            long sent = rocev2_send_acks(q->ack_fd, q->ack_addr, q->ack_port, q->ack_tos,
                                         reply_buf, reply_bytes, q->prefixes, q->remote_qp,
                                         psns + at, aeths + at, per_send);
            if (sent < 0) {
                int e = (int)-sent;
                if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR)
                    d->totals.buffer_full++;
                else if (e == ENOBUFS)
                    d->totals.no_buffers++;
                else if (no_path_errno(e))
                    d->totals.no_path++;
                else if (!d->send_errno) {
                    d->send_errno = e;
                    d->send_errno_qpn = (int32_t)qpn;
                }
            }
        }
        q->acks += n_acks;
        d->totals.acks += n_acks;
        d->totals.ack_bytes += (int64_t)n_acks * ACK_BYTES;
    }
    return 1;
}

/* Up to max_reads reads of socket fd (rank `rank`'s) into buf[0:len], each as rocev2_recv
 * reads it (fields, rx_ns, psns: the caller's), the common path's taken here (drain_take).
 * Stops at a read it leaves to Python (*left = 1: it is in buf and the fields), at nothing to
 * read, at a read error or after max_reads. Returns the reads made (the one left to Python
 * among them) and sets *got to the last recv's result (-errno: nothing left or an error).
 * d->reads counts the reads it took (reset at its start); what they carried adds to d->totals. */
long rx_drain(drain_t *d, int fd, int32_t rank, uint8_t *buf, size_t len, uint32_t *fields,
              uint64_t *rx_ns, uint32_t max_psns, uint32_t *psns, const uint8_t *run_opcodes,
              uint8_t *reply_buf, size_t reply_bytes, uint32_t max_reads, long *got, int *left)
{
    d->reads = 0;
    d->send_errno = 0;
    *left = 0;
    *got = -EAGAIN;
    long made = 0;
    while ((uint32_t)made < max_reads) {
        long n = rocev2_recv(fd, buf, len, fields, rx_ns, max_psns, psns);
        *got = n;
        if (n < 0)
            return made;
        made++;
        int taken = drain_take(d, rank, buf, n, fields, run_opcodes, reply_buf, reply_bytes);
        if (taken <= 0) {
            *left = 1; /* out of memory too: Python's path takes it as before */
            return made;
        }
        double wait = -1.0;
        if (*rx_ns) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t now_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
            /* a stamp from the future (a clock step) counts as no wait (receive_path.py) */
            wait = now_ns > *rx_ns ? (double)(now_ns - *rx_ns) * 1e-9 : 0.0;
        }
        d->reads++;
        d->totals.reads++;
        if (wait >= 0.0)
            drain_observe_wait(d, wait);
        if (d->send_errno)
            return made; /* Python raises it (send_errors.py) */
    }
    return made;
}

/* rx_drain with the arguments drain.py stored in d: the last recv's result in d->got, whether
 * its read is left to Python in d->left */
long rx_drain_fd(drain_t *d, int fd, int32_t rank, uint32_t max_reads)
{
    int left = 0;
    long made = rx_drain(d, fd, rank, d->buf, d->len, d->fields, d->rx_ns, d->max_psns, d->psns,
                         d->run_opcodes, d->reply_buf, d->reply_bytes, max_reads, &d->got, &left);
    d->left = left;
    return made;
}
