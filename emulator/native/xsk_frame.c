/* The arithmetic of an AF_XDP port (xsk_api.h): its token bucket, the headers it writes in front
 * of each RoCEv2 payload, what a frame costs on the wire, and its clock. No I/O. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "xsk_internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Token bucket. RFC 2697 (A Single Rate Three Color Marker), section 3: a bucket of depth CBS
 * bytes, full at start, gaining CIR bytes per second up to CBS; a packet of B bytes conforms
 * when the bucket holds at least B, and then takes them. Used here as a shaper: a packet that
 * does not conform waits in the backlog instead of being marked or dropped. RFC 2697 asks that
 * CBS be at least the largest packet; a packet larger than the depth is let through only from
 * a full bucket (af_xdp.py never configures that). Tokens are kept in 1e-9 bytes so that a
 * refill of rate x dt is an exact integer. `now_ns` is an argument (CLOCK_MONOTONIC in the port,
 * a simulated clock in the unit tests); a time before the last one refills nothing. */

void xsk_bucket_init(struct xsk_bucket *b, uint64_t rate_bytes_per_s, uint64_t depth_bytes,
		     uint64_t now_ns)
{
	b->rate_bytes_per_s = rate_bytes_per_s;
	b->depth_bytes = depth_bytes;
	b->tokens_nb = depth_bytes * NB_PER_BYTE;
	b->last_ns = now_ns;
}

static void bucket_refill(struct xsk_bucket *b, uint64_t now_ns)
{
	uint64_t full = b->depth_bytes * NB_PER_BYTE, missing, dt;

	if (now_ns <= b->last_ns)
		return;
	dt = now_ns - b->last_ns;
	b->last_ns = now_ns;
	missing = full - b->tokens_nb;
	if (!missing)
		return;
	if (dt >= (missing + b->rate_bytes_per_s - 1) / b->rate_bytes_per_s)
		b->tokens_nb = full;
	else
		b->tokens_nb += b->rate_bytes_per_s * dt;
}

static uint64_t bucket_cost(const struct xsk_bucket *b, uint64_t bytes)
{
	uint64_t cost = bytes * NB_PER_BYTE, full = b->depth_bytes * NB_PER_BYTE;

	return cost > full ? full : cost;
}

int xsk_bucket_take(struct xsk_bucket *b, uint64_t now_ns, uint64_t bytes)
{
	uint64_t cost;

	if (!b->rate_bytes_per_s)
		return 1;
	bucket_refill(b, now_ns);
	cost = bucket_cost(b, bytes);
	if (b->tokens_nb < cost)
		return 0;
	b->tokens_nb -= cost;
	return 1;
}

/* The earliest time at which `bytes` conform (the last refill time when they already do). */
uint64_t xsk_bucket_ready_ns(const struct xsk_bucket *b, uint64_t bytes)
{
	uint64_t cost;

	if (!b->rate_bytes_per_s)
		return b->last_ns;
	cost = bucket_cost(b, bytes);
	if (b->tokens_nb >= cost)
		return b->last_ns;
	return b->last_ns + (cost - b->tokens_nb + b->rate_bytes_per_s - 1) / b->rate_bytes_per_s;
}

/* ---------------------------------------------------------------------------------------- */
/* Frames */

static inline void put16(uint8_t *at, uint16_t v)
{
	at[0] = v >> 8;
	at[1] = v & 0xFF;
}

/* Ethernet II + IPv4 (no options, DF, the given id, header checksum, RFC 791/1071) + UDP
 * (checksum 0: "no checksum", allowed over IPv4 by RFC 768; RoCEv2 relies on the ICRC). Returns
 * the header bytes written (42). */
uint32_t xsk_write_headers(uint8_t *fr, const struct xsk_flow *f, uint8_t tos, uint16_t ip_id,
			   uint32_t udp_payload_bytes)
{
	uint8_t *ip = fr + 14, *udp = fr + 34;
	uint32_t sum = 0;
	int i;

	memcpy(fr, f->dst_mac, 6);
	memcpy(fr + 6, f->src_mac, 6);
	fr[12] = 0x08; /* ETH_P_IP */
	fr[13] = 0x00;
	ip[0] = 0x45;
	ip[1] = tos;
	put16(ip + 2, 20 + 8 + udp_payload_bytes);
	put16(ip + 4, ip_id);
	put16(ip + 6, 0x4000); /* DF, offset 0 */
	ip[8] = f->ttl;
	ip[9] = 17; /* UDP */
	ip[10] = ip[11] = 0;
	memcpy(ip + 12, &f->src_ip_be, 4);
	memcpy(ip + 16, &f->dst_ip_be, 4);
	for (i = 0; i < 20; i += 2)
		sum += (uint32_t)ip[i] << 8 | ip[i + 1];
	while (sum >> 16)
		sum = (sum & 0xFFFF) + (sum >> 16);
	put16(ip + 10, ~sum & 0xFFFF);
	put16(udp, f->sport);
	put16(udp + 2, f->dport);
	put16(udp + 4, 8 + udp_payload_bytes);
	put16(udp + 6, 0);
	return HEADER_BYTES;
}

/* What a frame costs on the link: padded to the 60-byte minimum, plus FCS 4, preamble and SFD 8
 * and the inter-frame gap 12 (IEEE 802.3; the engine's ETHERNET_OVERHEAD_BYTES counts the same
 * 38 bytes beyond the IP packet). */
uint64_t xsk_wire_bytes(uint32_t frame_bytes)
{
	return (frame_bytes < 60 ? 60 : frame_bytes) + 24;
}

/* ---------------------------------------------------------------------------------------- */
/* Backlog */

/* A FIFO of `cap` slots of `slot_bytes` starting at `head` holds `waiting` entries, then `added`
 * more (waiting + added <= cap): move the added ones in front of the waiting ones, in their own
 * order, and return the new head. Each lands cap - (waiting + added) slots after where it was,
 * so the two places overlap when that is below `added`: copied from the last one backwards (as
 * memmove does), no entry is overwritten before it is read. */
uint32_t xsk_backlog_move_ahead(void *slots, uint32_t slot_bytes, uint32_t cap, uint32_t head,
				uint32_t waiting, uint32_t added)
{
	uint8_t *s = slots;
	uint32_t to = (head + cap - added) % cap, from = (head + waiting) % cap, j;

	if (!waiting || !added)
		return head;
	for (j = added; j-- > 0;)
		memmove(s + (size_t)((to + j) % cap) * slot_bytes,
			s + (size_t)((from + j) % cap) * slot_bytes, slot_bytes);
	return to;
}

uint64_t xsk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
