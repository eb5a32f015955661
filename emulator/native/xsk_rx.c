/* Receive side of an AF_XDP port (xsk_port.c has the whole story): RX descriptors parsed as
 * RoCEv2, payloads copied out as GRO-like runs, frames recycled to the fill ring. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "xsk_internal.h"

static inline uint16_t get16(const uint8_t *at)
{
	return (uint16_t)at[0] << 8 | at[1];
}

/* Fill `runs` with the RoCEv2 payloads waiting on the RX rings, copied back to back into `out`;
 * returns the number of runs. A packet that does not fit (buffer or runs) stays for next time. */
int64_t xsk_port_recv(struct xsk_port *p, uint8_t *out, uint32_t out_bytes,
		      struct xsk_rx_run *runs, uint32_t max_runs, uint32_t max_run_segments)
{
	uint64_t mask = ~(uint64_t)(p->cfg.frame_bytes - 1);
	struct xsk_rx_run *cur = NULL;
	uint32_t nruns = 0, used = 0, qn;
	int full = 0;

	for (qn = 0; qn < p->nq && !full; qn++) {
		struct xsk_q *q = &p->q[(p->rx_next + qn) % p->nq];
		uint32_t idx, fidx, n, i = 0, done;

		if (xsk_ring_prod__needs_wakeup(&q->fill) && p->zc) {
			recvfrom(xsk_socket__fd(q->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
			p->c.fill_wakeups++;
		}
		n = xsk_ring_cons__peek(&q->rx, p->cfg.ring_size, &idx);
		while (i < n) {
			const struct xdp_desc *d = xsk_ring_cons__rx_desc(&q->rx, idx + i);
			const uint8_t *fr = xsk_umem__get_data(p->area, d->addr), *ip = fr + 14;
			uint32_t k = 1, total = d->len, payload = 0, src, dst, copied, at;
			int bad;

			while (xsk_ring_cons__rx_desc(&q->rx, idx + i + k - 1)->options & XDP_PKT_CONTD) {
				if (i + k >= n)
					break;
				total += xsk_ring_cons__rx_desc(&q->rx, idx + i + k)->len;
				k++;
			}
			if (xsk_ring_cons__rx_desc(&q->rx, idx + i + k - 1)->options & XDP_PKT_CONTD)
				break; /* its last part is not on the ring yet */
			bad = d->len < HEADER_BYTES || fr[12] != 0x08 || fr[13] != 0x00 ||
			      ip[0] != 0x45 || ip[9] != 17 || (get16(ip + 6) & 0x3FFF) ||
			      get16(ip + 2) + 14u > total || get16(ip + 22) != 4791 ||
			      get16(ip + 24) != get16(ip + 2) - 20u ||
			      get16(ip + 24) < 8u + ROCE_MIN_PAYLOAD;
			if (!bad)
				payload = get16(ip + 24) - 8u;
			memcpy(&src, ip + 12, 4);
			memcpy(&dst, ip + 16, 4);
			if (!bad) {
				int joins = cur && cur->src_ip_be == src && cur->dst_ip_be == dst &&
					    cur->sport == get16(ip + 20) && cur->tos == ip[1] &&
					    cur->count < max_run_segments &&
					    cur->nbytes == cur->count * cur->segment_bytes &&
					    payload <= cur->segment_bytes;

				if (used + payload > out_bytes || (!joins && nruns == max_runs)) {
					full = 1;
					break;
				}
				if (!joins) {
					cur = &runs[nruns++];
					cur->src_ip_be = src;
					cur->dst_ip_be = dst;
					cur->sport = get16(ip + 20);
					cur->tos = ip[1];
					cur->pad = 0;
					cur->offset = used;
					cur->nbytes = 0;
					cur->segment_bytes = payload;
					cur->count = 0;
				}
				/* the payload: the rest of the first part, then the other parts */
				copied = d->len - HEADER_BYTES < payload ? d->len - HEADER_BYTES : payload;
				memcpy(out + used, fr + HEADER_BYTES, copied);
				for (at = 1; at < k && copied < payload; at++) {
					const struct xdp_desc *e = xsk_ring_cons__rx_desc(&q->rx, idx + i + at);
					uint32_t take = payload - copied < e->len ? payload - copied : e->len;

					memcpy(out + used + copied, xsk_umem__get_data(p->area, e->addr), take);
					copied += take;
				}
				used += payload;
				cur->nbytes += payload;
				cur->count++;
				p->c.rx_packets++;
				p->c.rx_bytes += payload;
			} else {
				p->c.rx_malformed++;
			}
			i += k;
		}
		done = i;
		if (n > done)
			xsk_ring_cons__cancel(&q->rx, n - done);
		if (!done)
			continue;
		/* the frames go straight back to this queue's fill ring (it has room for all of
		 * them: the queue owns rx_frames_per_queue <= ring_size frames) */
		if (xsk_ring_prod__reserve(&q->fill, done, &fidx) == done) {
			for (i = 0; i < done; i++)
				*xsk_ring_prod__fill_addr(&q->fill, fidx + i) =
					xsk_ring_cons__rx_desc(&q->rx, idx + i)->addr & mask;
			xsk_ring_prod__submit(&q->fill, done);
			p->c.frames_recycled += done;
		}
		xsk_ring_cons__release(&q->rx, done);
	}
	p->rx_next = (p->rx_next + 1) % p->nq;
	p->c.rx_runs += nruns;
	return nruns;
}
