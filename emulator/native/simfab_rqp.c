/* A receive queue pair's common path in C: a data packet that arrives in order and ends no
 * message changes the responder's state and, if it asks for one, answers with an ACK (its PSN,
 * the message sequence number), and nothing else: no event (emulator/transport/receiver.py,
 * on_data's first branch and _accept; _ack). A CE-marked one also goes through the notification
 * point, which may answer with a CNP first and raise CnpSent (the caller sends and raises them),
 * once Python has said how (cnp_ready). The fabric takes such packets at the
 * host without handing them to Python (simfab.c rqp_reply sends the ACK and the CNP); Python reads what they
 * changed (the counters and PSNs here) before its receiver handles any other packet of the
 * queue pair, and at the end of every run call (emulator/sim/native_rqp.py). Every packet that
 * is not this common case, and every queue pair whose receiver holds or has seen packets ahead
 * of the expected PSN, goes to the Python receiver as before. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simfab_api.h"
#include "simfab_rqp.h"

#define PSN_MASK 0xFFFFFFu
#define QPN_SLOTS (1 << 24) /* BTH's destination QP is 24 bits */

/* packets.psn_diff: the signed distance a - b on the 24-bit PSN circle */
static int32_t psn_diff(uint32_t a, uint32_t b) {
    return (int32_t)((a - b + (1u << 23)) & PSN_MASK) - (1 << 23);
}

/* queue pair `qpn`'s slot, the table grown to hold it (NULL: out of memory or range) */
fab_rqp_t *rqp_slot(rqp_table_t *t, int32_t qpn) {
    if (qpn < 0 || qpn >= QPN_SLOTS) return NULL;
    if (qpn >= t->n) {
        int32_t n = t->n ? t->n : 256;
        while (n <= qpn) n *= 2;
        fab_rqp_t *q = realloc(t->q, (size_t)n * sizeof(fab_rqp_t));
        if (!q) return NULL;
        memset(q + t->n, 0, (size_t)(n - t->n) * sizeof(fab_rqp_t));
        for (int32_t i = t->n; i < n; i++) q[i].host = -1;
        t->q = q;
        t->n = n;
    }
    return &t->q[qpn];
}

/* RQP_TOOK (with RQP_ACK: it asked for the ACK the caller sends; with RQP_CNP: the CNP the
 * caller sends first) when the packet took the common path here; 0: Python's receiver must
 * handle it; -1: out of memory (nothing changed) */
int rqp_take(rqp_table_t *t, int32_t qpn, int32_t host, uint32_t psn, int32_t data_flags,
             int32_t ce, int32_t payload_bytes, double now) {
    if (qpn < 0 || qpn >= t->n) return 0;
    fab_rqp_t *q = &t->q[qpn];
    if (q->host != host || !q->eligible || (ce && !q->cnp_ready) || (data_flags & DATA_LAST))
        return 0;
    if ((data_flags & DATA_ACK_REQ) && !q->ack_ready) return 0;
    if (((data_flags & DATA_FIRST) != 0) == (q->in_message != 0)) return 0; /* malformed */
    if (psn != q->expected_psn) return 0;
    if (psn != ((q->highest_psn + 1) & PSN_MASK) && psn_diff(psn, q->highest_psn) <= 0)
        return 0; /* reordered (RFC 4737): Python counts it */
    if (!q->listed) {
        if (t->n_dirty == t->cap_dirty) {
            int64_t cap = t->cap_dirty ? t->cap_dirty * 2 : 256;
            int32_t *dirty = realloc(t->dirty, (size_t)cap * sizeof(int32_t));
            if (!dirty) return -1;
            t->dirty = dirty;
            t->cap_dirty = cap;
        }
        t->dirty[t->n_dirty++] = qpn;
        q->listed = 1;
    }
    q->expected_psn = (psn + 1) & PSN_MASK;
    q->highest_psn = psn;
    q->in_message = 1;
    q->packets++;
    q->bytes += payload_bytes;
    int took = RQP_TOOK;
    if (ce) {
        q->ce_packets++;
        /* dcqcn.py NotificationPoint.on_ce, the same arithmetic: at most one CNP an interval */
        if (!(now - q->last_cnp_s + 1e-12 < q->cnp_interval_s)) {
            q->last_cnp_s = now;
            q->cnps++;
            took |= RQP_CNP; /* the caller sends it and raises CnpSent (simfab.c rqp_reply) */
        }
    }
    if (data_flags & DATA_ACK_REQ) {
        q->acks++; /* the caller sends it (simfab.c rqp_reply) */
        took |= RQP_ACK;
    }
    return took;
}

void rqp_free(rqp_table_t *t) {
    free(t->q);
    free(t->dirty);
    memset(t, 0, sizeof(*t));
}
