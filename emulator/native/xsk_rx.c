/* Receive side of an AF_XDP port (xsk_port.c has the whole story): RX descriptors parsed as
 * RoCEv2, their checksums checked (the kernel's stack checks none of them for us: the XDP
 * program takes the frames before it), payloads copied out as GRO-like runs, frames recycled to
 * the fill ring. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <zlib.h>

#include "xsk_internal.h"

static inline uint16_t get16(const uint8_t *at)
{
	return (uint16_t)at[0] << 8 | at[1];
}

#define BTH_END (HEADER_BYTES + 12) /* Ethernet + IPv4 + UDP + BTH */

/* RFC 1071's one's-complement sum of `n` bytes read as big-endian 16-bit words (an odd last
 * byte padded with zero), folded to 16 bits. `odd`: the bytes start at an odd offset of what is
 * summed, which swaps the result's two bytes (RFC 1071 section 2 (B)), so a sum can go on
 * across the parts of a multi-buffer packet whatever their lengths. */
static uint32_t csum_bytes(const uint8_t *b, uint32_t n, int odd)
{
	uint64_t sum = 0;
	uint32_t i, w;
	uint16_t h;

	for (i = 0; i + 4 <= n; i += 4) { /* native-order words: the order only swaps the result */
		memcpy(&w, b + i, 4);
		sum += w;
	}
	if (i + 2 <= n) {
		memcpy(&h, b + i, 2);
		sum += h;
		i += 2;
	}
	if (i < n) {
		uint8_t last[2] = {b[i], 0};

		memcpy(&h, last, 2);
		sum += h;
	}
	while (sum >> 16)
		sum = (sum & 0xFFFF) + (sum >> 16);
	h = ntohs((uint16_t)sum);
	return odd ? (uint32_t)(h >> 8 | (h & 0xFF) << 8) : h;
}

static uint32_t csum_fold(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xFFFF) + (sum >> 16);
	return (uint32_t)sum;
}

/* One received packet: a descriptor, or several chained by XDP_PKT_CONTD. */
struct rx_packet {
	const struct xsk_port *p;
	const struct xsk_ring_cons *rx;
	uint32_t idx; /* of its first descriptor */
	uint32_t parts;
};

/* Bytes [from, to) of the packet, wherever its parts split them: copied to `out` when given,
 * else added to the running ICRC and UDP sum (the UDP header starts at an even offset, 34). */
static void rx_span(const struct rx_packet *pk, uint32_t from, uint32_t to, uint8_t *out,
		    uint32_t *crc, uint64_t *sum)
{
	uint32_t i, at = 0;

	for (i = 0; i < pk->parts && at < to; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(pk->rx, pk->idx + i);
		const uint8_t *b = xsk_umem__get_data(pk->p->area, d->addr);
		uint32_t lo = from > at ? from - at : 0, hi = to - at < d->len ? to - at : d->len;

		if (lo < hi && out) {
			memcpy(out, b + lo, hi - lo);
			out += hi - lo;
		} else if (lo < hi) {
			*crc = crc32(*crc, b + lo, hi - lo);
			*sum += csum_bytes(b + lo, hi - lo, (at + lo) & 1);
		}
		at += d->len;
	}
}

enum rx_verdict { RX_OK, RX_BAD_IP_CHECKSUM, RX_BAD_UDP_CHECKSUM, RX_BAD_ICRC };

/* The checks a socket's stack would make, and RoCEv2's own, on a packet already parsed as
 * RoCEv2 over IPv4 (20-byte header) and UDP whose IP total length the parts hold:
 * - IPv4 header checksum (RFC 791 section 3.1): the header's one's-complement sum is all ones;
 * - UDP checksum over the pseudo-header, header and data (RFC 768, computed as RFC 1071 says),
 *   unless it is 0: over IPv4 that means none was computed (RFC 768), as this port sends
 *   (a kernel socket's UDP packet straight over a veth fails it: with checksum offload the
 *   veth leaves the field at the pseudo-header's sum, for a NIC to finish);
 * - ICRC (IBA vol. 1 annex A17, RoCEv2): CRC-32 over 8 bytes of ones, the IPv4 header with ToS,
 *   TTL and header checksum as ones, the UDP header with its checksum as ones, the BTH with its
 *   FECN/BECN/reserved byte as ones, then the rest up to the ICRC, which is stored least
 *   significant byte first (emulator/transport/wire.py IcrcContext.compute is the same). */
static enum rx_verdict rx_verify(const struct rx_packet *pk, const uint8_t *ip)
{
	static const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
	uint32_t end = 14u + get16(ip + 2), crc, udp_sum = get16(ip + 26);
	uint8_t hdr[BTH_END], icrc[4];
	uint64_t sum;

	if (csum_bytes(ip, 20, 0) != 0xFFFF)
		return RX_BAD_IP_CHECKSUM;
	rx_span(pk, 0, BTH_END, hdr, NULL, NULL); /* the BTH may lie across parts */
	rx_span(pk, end - 4, end, icrc, NULL, NULL);
	/* the UDP sum's pseudo-header: addresses, protocol, UDP length; then the header and BTH */
	sum = csum_bytes(hdr + 26, 8, 0) + 17u + get16(hdr + 38) + csum_bytes(hdr + 34, 20, 0);
	hdr[15] = hdr[22] = hdr[24] = hdr[25] = 0xFF; /* ToS, TTL, header checksum */
	hdr[40] = hdr[41] = 0xFF; /* UDP checksum */
	hdr[HEADER_BYTES + 4] = 0xFF; /* FECN, BECN, reserved */
	crc = crc32(crc32(0, ones, 8), hdr + 14, BTH_END - 14);
	rx_span(pk, BTH_END, end - 4, NULL, &crc, &sum);
	sum += csum_bytes(icrc, 4, (end - 4) & 1);
	if (udp_sum && csum_fold(sum) != 0xFFFF)
		return RX_BAD_UDP_CHECKSUM;
	if (crc != ((uint32_t)icrc[0] | (uint32_t)icrc[1] << 8 | (uint32_t)icrc[2] << 16 |
		    (uint32_t)icrc[3] << 24))
		return RX_BAD_ICRC;
	return RX_OK;
}

static void count_bad(struct xsk_counters *c, enum rx_verdict v)
{
	c->rx_malformed++;
	if (v == RX_BAD_IP_CHECKSUM)
		c->rx_bad_ip_checksum++;
	else if (v == RX_BAD_UDP_CHECKSUM)
		c->rx_bad_udp_checksum++;
	else if (v == RX_BAD_ICRC)
		c->rx_bad_icrc++;
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
			enum rx_verdict v = RX_OK;
			int bad, joins = 0;

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
				joins = cur && cur->src_ip_be == src && cur->dst_ip_be == dst &&
					cur->sport == get16(ip + 20) && cur->tos == ip[1] &&
					cur->count < max_run_segments &&
					cur->nbytes == cur->count * cur->segment_bytes &&
					payload <= cur->segment_bytes;
				if (used + payload > out_bytes || (!joins && nruns == max_runs)) {
					full = 1;
					break;
				}
				/* checked once it is sure to be taken now, so never twice */
				v = rx_verify(&(struct rx_packet){p, &q->rx, idx + i, k}, ip);
			}
			if (!bad && v == RX_OK) {
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
				count_bad(&p->c, v); /* RX_OK when it was not RoCEv2 at all */
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
