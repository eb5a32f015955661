/* Transmit side of an AF_XDP port (xsk_port.c has the whole story): payloads written into UMEM
 * frames behind their headers, a backlog, the token bucket in front of the TX ring, and the
 * sendto wakeups that make copy mode transmit. */
#define _GNU_SOURCE /* ppoll */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <poll.h>
#include <sys/prctl.h>

#include "xsk_internal.h"

static void reap_completions(struct xsk_port *p)
{
	uint32_t idx, n, i;

	n = xsk_ring_cons__peek(&p->q[0].comp, p->cfg.ring_size, &idx);
	for (i = 0; i < n; i++)
		p->free_frames[p->nfree++] =
			*xsk_ring_cons__comp_addr(&p->q[0].comp, idx + i) &
			~(uint64_t)(p->cfg.frame_bytes - 1);
	if (n)
		xsk_ring_cons__release(&p->q[0].comp, n);
	p->c.tx_completed += n;
}

static uint32_t ring_pending(const struct xsk_port *p)
{
	return *p->tx.producer - __atomic_load_n(p->tx.consumer, __ATOMIC_ACQUIRE);
}

static void drop_backlog(struct xsk_port *p)
{
	while (p->bl_descs) {
		struct xdp_desc *d = &p->backlog[p->bl_head];

		p->free_frames[p->nfree++] = d->addr;
		if (!(d->options & XDP_PKT_CONTD))
			p->c.tx_dropped++;
		p->bl_head = (p->bl_head + 1) % p->bl_cap;
		p->bl_descs--;
	}
	p->bl_packets = 0;
}

/* Wake the kernel until it consumed the TX ring (copy mode sends synchronously) or makes no
 * progress (device queue busy, completion ring full); 0, or -errno when the link is down. */
static int kick(struct xsk_port *p)
{
	int stalls = 0, rounds;

	for (rounds = 0; rounds < 4096 && ring_pending(p); rounds++) {
		uint32_t before = __atomic_load_n(p->tx.consumer, __ATOMIC_ACQUIRE);
		int rc, e;

		if (p->zc && !xsk_ring_prod__needs_wakeup(&p->tx))
			return 0; /* the driver is polling the ring itself */
		rc = sendto(xsk_socket__fd(p->q[0].xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
		e = rc < 0 ? errno : 0;
		p->c.tx_kicks++;
		if (e == ENETDOWN || e == ENXIO)
			return -e;
		if (e == EBUSY || e == ENOBUFS)
			p->c.tx_dropped++; /* NET_XMIT_DROP: that packet is gone, the rest goes on */
		else if (e && e != EAGAIN)
			return -e;
		if (p->zc)
			return 0;
		if (__atomic_load_n(p->tx.consumer, __ATOMIC_ACQUIRE) == before) {
			if (e == EAGAIN)
				p->c.tx_kick_again++;
			reap_completions(p);
			if (++stalls > 2)
				return 0;
		} else {
			stalls = 0;
		}
	}
	return 0;
}

/* The packet at the backlog's head: its descriptors and frame bytes. */
static uint32_t head_packet(const struct xsk_port *p, uint32_t *frame_bytes)
{
	uint32_t n = 0, bytes = 0, at = p->bl_head;

	for (;;) {
		const struct xdp_desc *d = &p->backlog[at];

		n++;
		bytes += d->len;
		if (!(d->options & XDP_PKT_CONTD))
			break;
		at = (at + 1) % p->bl_cap;
	}
	*frame_bytes = bytes;
	return n;
}

/* Move backlog packets to the TX ring as the bucket allows, and send them. While the kernel
 * has not consumed what was put there before (a busy device), nothing new is added, so packets
 * that waited never leave together with later ones beyond the bucket's depth. `now_ns` 0: the
 * clock is read before each packet (decided as late as possible); else that time for all (a
 * caller's clock, tests). Returns the packets left in the backlog, or -errno (ENETDOWN: the
 * backlog is dropped, counted).
 *
 * What a capture can show: tokens are taken when a packet is handed to the kernel, which
 * stamps it a few microseconds later (or later still if this thread is preempted in between),
 * so over a window W a capture sees at most rate x W + depth + what was decided but not yet
 * sent when the window opened, itself at most one bucket depth: rate x W + 2 x depth in the
 * worst case, about rate x W + depth + rate x (a few us) in practice. */
int64_t xsk_port_pump(struct xsk_port *p, uint64_t now_ns)
{
	uint32_t batched = 0, idx = 0, i;
	int live = !now_ns, rc;

	if (live)
		now_ns = xsk_now_ns();
	reap_completions(p);
	if (ring_pending(p)) {
		rc = kick(p);
		if (rc < 0)
			goto down;
		if (ring_pending(p))
			return p->bl_packets;
	}
	while (p->bl_packets) {
		uint32_t frame_bytes, n = head_packet(p, &frame_bytes);
		uint64_t wire = xsk_wire_bytes(frame_bytes);

		if (xsk_prod_nb_free(&p->tx, n) < n) {
			p->c.tx_ring_full++;
			break;
		}
		if (live) /* decide as close as possible to the transmission */
			now_ns = xsk_now_ns();
		if (!xsk_bucket_take(&p->bucket, now_ns, wire)) {
			p->c.tx_bucket_waits++;
			break;
		}
		xsk_ring_prod__reserve(&p->tx, n, &idx);
		for (i = 0; i < n; i++) {
			*xsk_ring_prod__tx_desc(&p->tx, idx + i) = p->backlog[p->bl_head];
			p->bl_head = (p->bl_head + 1) % p->bl_cap;
		}
		p->bl_descs -= n;
		p->bl_packets--;
		p->c.tx_packets++;
		p->c.tx_frame_bytes += frame_bytes;
		p->c.tx_wire_bytes += wire;
		batched += n;
		if (batched >= TX_BATCH) {
			xsk_ring_prod__submit(&p->tx, batched);
			batched = 0;
			rc = kick(p);
			if (rc < 0)
				goto down;
			if (ring_pending(p))
				break;
			reap_completions(p);
		}
	}
	if (batched) {
		xsk_ring_prod__submit(&p->tx, batched);
		rc = kick(p);
		if (rc < 0)
			goto down;
	}
	return p->bl_packets;
down:
	drop_backlog(p);
	return rc;
}

/* Write segments (UDP payloads of `segment_bytes`, the last possibly shorter) into frames with
 * their headers, segment i with IP id ip_id_first + i (mod 2^16), queue them and pump. Returns
 * the segments taken (the rest found no free frame: the caller still has them), or -errno:
 * EMSGSIZE when a frame needs more chunks than multi-buffer was set up for, ENETDOWN. With
 * `ahead`, they are queued before the packets already waiting (in their own order): a
 * receiver's ACKs and CNPs, which a NIC does not hold behind its own data; they still take
 * their tokens. */
int64_t xsk_port_send(struct xsk_port *p, const struct xsk_flow *f, uint8_t tos,
		      const uint8_t *payloads, uint32_t nbytes, uint32_t segment_bytes,
		      uint32_t ip_id_first, uint64_t now_ns, int ahead)
{
	uint32_t count, i, room = p->tx_room, waiting = p->bl_descs, added;
	int64_t rc;

	if (!segment_bytes || segment_bytes > nbytes)
		segment_bytes = nbytes;
	if (!nbytes)
		return 0;
	count = (nbytes + segment_bytes - 1) / segment_bytes;
	for (i = 0; i < count; i++) {
		uint32_t at = i * segment_bytes;
		uint32_t len = nbytes - at < segment_bytes ? nbytes - at : segment_bytes;
		uint32_t frame = HEADER_BYTES + len, chunks = (frame + room - 1) / room, k, done;
		const uint8_t *src = payloads + at;

		if (chunks > 1 && !p->sg)
			return -EMSGSIZE;
		if (p->nfree < chunks || p->bl_cap - p->bl_descs < chunks) {
			reap_completions(p);
			/* (ahead: no pump here, so the waiting packets stay where they are) */
			if (!ahead && (p->nfree < chunks || p->bl_cap - p->bl_descs < chunks)) {
				rc = xsk_port_pump(p, now_ns);
				if (rc < 0)
					return rc;
			}
			if (p->nfree < chunks || p->bl_cap - p->bl_descs < chunks) {
				p->c.tx_backlog_full += count - i;
				break;
			}
		}
		for (k = 0, done = 0; k < chunks; k++) {
			uint64_t addr = p->free_frames[--p->nfree];
			uint8_t *dst = xsk_umem__get_data(p->area, addr);
			uint32_t take = frame - done < room ? frame - done : room, header = 0;
			struct xdp_desc *d;

			if (k == 0) {
				xsk_write_headers(dst, f, tos, (uint16_t)(ip_id_first + i), len);
				header = HEADER_BYTES;
			}
			memcpy(dst + header, src, take - header);
			src += take - header;
			done += take;
			d = &p->backlog[(p->bl_head + p->bl_descs) % p->bl_cap];
			d->addr = addr;
			d->len = take;
			d->options = k + 1 < chunks ? XDP_PKT_CONTD : 0;
			p->bl_descs++;
		}
		p->bl_packets++;
		p->c.tx_taken++;
	}
	added = p->bl_descs - waiting;
	if (ahead) /* the new descriptors, after the `waiting` ones, move in front of them */
		p->bl_head = xsk_backlog_move_ahead(p->backlog, sizeof(*p->backlog), p->bl_cap,
						    p->bl_head, waiting, added);
	rc = xsk_port_pump(p, now_ns);
	return rc < 0 ? rc : (int64_t)i;
}

uint32_t xsk_port_backlog(const struct xsk_port *p)
{
	return p->bl_packets + (ring_pending(p) ? 1 : 0);
}

/* When the packet at the backlog's head will have its tokens (0: nothing waits for tokens). */
uint64_t xsk_port_next_release_ns(const struct xsk_port *p)
{
	uint32_t frame_bytes;

	if (!p->bl_packets)
		return 0;
	head_packet(p, &frame_bytes);
	return xsk_bucket_ready_ns(&p->bucket, xsk_wire_bytes(frame_bytes));
}

/* Are received descriptors waiting on any RX ring? */
static int rx_waiting(struct xsk_port *p)
{
	uint32_t i;

	for (i = 0; i < p->nq; i++)
		if (xsk_cons_nb_avail(&p->q[i].rx, 1))
			return 1;
	return 0;
}

/* Sleep most of a long wait (in ppoll on the sockets when a receive should end it), spin the
 * rest: a sleep overshoots by tens of microseconds, a spin does not. */
static void wait_until(struct xsk_port *p, uint64_t t_ns, int stop_on_rx)
{
	uint64_t now = xsk_now_ns();

	if (t_ns > now + 100000) {
		uint64_t nap = t_ns - 50000 - now;
		struct timespec ts = {.tv_sec = nap / 1000000000ull, .tv_nsec = nap % 1000000000ull};

		if (stop_on_rx) {
			struct pollfd fds[p->nq];
			uint32_t i;

			for (i = 0; i < p->nq; i++)
				fds[i] = (struct pollfd){.fd = xsk_socket__fd(p->q[i].xsk), .events = POLLIN};
			ppoll(fds, p->nq, &ts, NULL);
		} else {
			nanosleep(&ts, NULL);
		}
	}
	while (xsk_now_ns() < t_ns)
		if (stop_on_rx && rx_waiting(p))
			return;
}

/* Pump until the backlog is sent or `deadline_ns` (CLOCK_MONOTONIC) passes, waiting for tokens
 * in between (the thread's timer slack is set to 1 us meanwhile); with `stop_on_rx`, also
 * return as soon as something was received (the caller reads it, then drains again). Returns
 * what is left (packets in the backlog, +1 if the TX ring still holds some), or -errno. */
int64_t xsk_port_drain(struct xsk_port *p, uint64_t deadline_ns, int stop_on_rx)
{
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	int64_t rc = 0;

	prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
	for (;;) {
		uint64_t now = xsk_now_ns(), next;

		rc = xsk_port_pump(p, 0);
		if (rc < 0 || (!p->bl_packets && !ring_pending(p)) || now >= deadline_ns)
			break;
		if (stop_on_rx && rx_waiting(p))
			break;
		next = p->bl_packets && !ring_pending(p) ? xsk_port_next_release_ns(p) : 0;
		if (next <= now)
			next = now + 20000; /* the ring or the device is busy: look again shortly */
		wait_until(p, next < deadline_ns ? next : deadline_ns, stop_on_rx);
	}
	if (slack > 0)
		prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	reap_completions(p);
	return rc < 0 ? rc : (int64_t)xsk_port_backlog(p);
}

/* Drain the ports of one thread together (an engine worker's, emulator/engine/xdp_ports.py):
 * pump every port, then sleep until the earliest next release but at least `min_gap_ns` ahead,
 * in ppoll on all their sockets when `stop_on_rx`; return once every backlog is sent,
 * `deadline_ns` (CLOCK_MONOTONIC) passed, or (stop_on_rx) something was received. A port whose
 * link is down gets its -errno in rcs[i] (its backlog dropped, counted) and the others go on;
 * rcs[i] < 0 on entry leaves that port out. Returns the packets left over all ports (as
 * xsk_port_backlog counts them).
 *
 * It sleeps through a whole gap, never spins its tail (xsk_port_drain does, for precision): a
 * wakeup that comes late finds the tokens the bucket kept meanwhile, up to its depth, so with
 * min_gap_ns at most half the depth's time at the cap the rate holds on a machine whose sleeps
 * overshoot by less than the other half, and the cap holds whatever the wakeups do (the bucket
 * decides every packet). One thread paces several ports this way, and no CPU is burnt waiting. */
int64_t xsk_ports_drain(struct xsk_port **ports, uint32_t n, uint64_t deadline_ns, int stop_on_rx,
			uint64_t min_gap_ns, int64_t *rcs)
{
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	uint32_t i, q, nfds = 0;
	int64_t left = 0;

	for (i = 0; i < n; i++)
		nfds += ports[i]->nq;
	{
		struct pollfd fds[nfds ? nfds : 1];

		for (i = 0, nfds = 0; i < n; i++)
			for (q = 0; q < ports[i]->nq; q++)
				fds[nfds++] = (struct pollfd){.fd = xsk_socket__fd(ports[i]->q[q].xsk),
							      .events = POLLIN};
		prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
		for (;;) {
			uint64_t now = xsk_now_ns(), next = UINT64_MAX, nap;
			int busy = 0, rx = 0;
			struct timespec ts;

			for (i = 0; i < n; i++) {
				struct xsk_port *p = ports[i];
				int64_t rc;

				if (rcs[i] < 0)
					continue;
				rc = xsk_port_pump(p, 0);
				if (rc < 0) {
					rcs[i] = rc;
					continue;
				}
				if (p->bl_packets || ring_pending(p)) {
					uint64_t t = p->bl_packets && !ring_pending(p) ?
							     xsk_port_next_release_ns(p) :
							     0;

					busy = 1;
					if (t <= now)
						t = now + 20000; /* the ring or device is busy */
					if (t < next)
						next = t;
				}
				if (stop_on_rx && rx_waiting(p))
					rx = 1;
			}
			if (!busy || rx || now >= deadline_ns)
				break;
			if (next < now + min_gap_ns)
				next = now + min_gap_ns;
			if (next > deadline_ns)
				next = deadline_ns;
			nap = next - now;
			ts = (struct timespec){.tv_sec = nap / 1000000000ull,
					       .tv_nsec = nap % 1000000000ull};
			if (stop_on_rx)
				ppoll(fds, nfds, &ts, NULL);
			else
				nanosleep(&ts, NULL);
		}
	}
	if (slack > 0)
		prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	for (i = 0; i < n; i++) {
		reap_completions(ports[i]);
		left += xsk_port_backlog(ports[i]);
	}
	return left;
}
