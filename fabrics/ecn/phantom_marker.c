// SPDX-License-Identifier: GPL-2.0
/* ECN marking by a phantom queue, for kernels without tc RED (see fabrics/ecn/ebpf.py).
 *
 * Attached at tc clsact egress of a switch port. clsact egress runs before the root qdisc (HTB), so
 * this program sees packets as they arrive at the port's queue. It keeps a phantom queue that
 * drains at the port's link rate (computed from bpf_ktime_get_ns), and marks CE on ECN-capable
 * IPv4 packets with the DCQCN switch rule (Zhu et al., SIGCOMM 2015, section 3.1): probability 0
 * up to Kmin, rising linearly to Pmax at Kmax, 1 above Kmax.
 * It also drops IPv4 packets at random with `loss_u32` / 2^32 probability (the scenario's loss
 * impairment: netem is missing on such kernels); those count in `loss_drops`, not in the queue.
 * Parameters come from the `params` map (written from Python); counters go to the `state` map.
 * A GSO/GRO skb counts as one packet here: the fabric turns those off on its interfaces.
 *
 * Several CPUs run this program on one port at once (each sender's transmit path). Helpers may
 * not be called under bpf_spin_lock, so the time is read before the lock, and a CPU can take the
 * lock holding an older timestamp than the one the previous holder wrote. Such a packet drains
 * nothing and leaves `last_ns` where it is: the queue never moves backwards in time (an unsigned
 * `now - last_ns` used to wrap there, drain the whole queue and under-mark under incast).
 *
 * Attribution (emulator/planning/attribution.py): the engine writes a class (1..63) into the 6
 * reserved bits of every RoCEv2 data packet's BTH byte 4 (FECN, BECN, Resv6a; the ICRC masks that
 * byte). The program reads it (IPv4, UDP destination port 4791; anything else is class 0) and
 * keeps, per class, under the same lock and in the same `state` value as the port's counters (one
 * locked read gives both, and the classes sum to the port's totals): bytes, packets, marks,
 * overflows, the queue's byte-time and the time above XOFF:
 * - byte-time: the phantom queue is one FIFO draining at the link rate C, so a packet of `len`
 *   wire bytes that finds `q` queued leaves byte by byte, its byte b at (q + b) / C after it
 *   arrived: it holds len x q / C + len^2 / (2 C) byte-ns of the queue. Summed per class
 *   (numerator only, in units of 64 bytes^2, rounded) this splits the queue's integral of bytes
 *   over time exactly into the classes' shares, charged when the packet arrives (a window's share
 *   counts residence that may run past the window's end, by at most the queueing delay);
 * - above XOFF: each interval between two arrivals that the queue spends at or above XOFF is
 *   charged to the class of the packet that opened it (whose arrival left the queue there), and a
 *   rise to XOFF to the class of the packet that made it: whose arrivals kept the queue above
 *   XOFF, not who a PFC pause would stop (it stops every class on the upstream link).
 * Cost: the header reads (direct packet access; bpf_skb_load_bytes when the UDP header or BTH is
 * not in the linear data) and a few adds in one 56-byte entry; bench/marker_cost.py measures it
 * against the same program built with -DPHANTOM_NO_CLASSES.
 *
 * Built with -DPHANTOM_TRACE (tests only), it also records every packet's arrival time, CPU,
 * lock order, queue, decision and class in the `trace` map, for the contention test to rebuild
 * the queue from the arrivals and check the marks against the Python law.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct marker_params {
	__u64 drain_bytes_per_ns_q24; /* link rate in bytes per ns, fixed point with 24 fraction bits */
	__u64 kmin_bytes;
	__u64 kmax_bytes;
	__u64 buffer_bytes;           /* phantom queue capacity; arrivals beyond it count as overflows */
	__u32 pmax_u32;               /* Pmax scaled so that 2^32 - 1 is 1.0 */
	__u32 enabled;                /* 0: not configured yet, count only */
	__u32 loss_u32;               /* drop probability scaled so that 2^32 is 1.0 (0: none) */
	__u32 mark_ect;               /* 0: loss only, never mark */
	__u64 xoff_bytes;             /* PFC XOFF: time at or above it is counted (0: not counted) */
	__u64 overhead_bytes;         /* wire bytes per frame beyond skb->len (FCS, preamble, gap) */
};

#define ATTR_CLASSES 64          /* the 6 reserved bits of the BTH byte after the P_Key */
#define ATTR_TAG_MASK 0x3F
#define ATTR_TAG_AT 4            /* that byte's offset in the BTH */
#define ROCEV2_UDP_PORT 4791

struct class_counters {
	__u64 bytes;                  /* skb->len, as `bytes` */
	__u64 packets;
	__u64 marks;
	__u64 overflows;
	__u64 byte_time_q6;           /* sum of len x (queue found + len / 2) / 64, rounded (see top) */
	__u64 pause_ns;               /* time at or above XOFF charged to this class (see top) */
	__u64 pause_events;
};

struct marker_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 last_ns;
	__u64 queue_bytes;
	__u64 peak_queue_bytes;
	__u64 bytes;
	__u64 packets;
	__u64 ect_packets;
	__u64 marks;
	__u64 overflows;
	__u64 loss_drops;
	/* Where a PFC fabric would have paused: ns the queue spent at or above XOFF (up to the last
	 * packet; Python adds the drain since then) and how many times it rose to XOFF. */
	__u64 pause_ns;
	__u64 pause_events;
	__u64 above_xoff;             /* 1 while the queue the last packet left was at or above XOFF */
	__u32 last_class;             /* the last packet's class: the interval after it is charged to it */
	__u32 pad2;
	struct class_counters classes[ATTR_CLASSES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marker_params);
} params SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marker_state);
} state SEC(".maps");

#ifdef PHANTOM_TRACE
#define TRACE_CPUS 4
#define TRACE_PER_CPU (1 << 18)
#define TRACE_MARK 1
#define TRACE_ECT 2
#define TRACE_OVERFLOW 4

struct trace_entry {
	__u64 now_ns;      /* bpf_ktime_get_ns, read before the lock */
	__u64 seq;         /* the port's packet count under the lock: the lock order */
	__u32 len;
	__u32 queue_bytes; /* the drained queue this packet found (the marking decision's input) */
	__u32 flags;       /* TRACE_MARK | TRACE_ECT | TRACE_OVERFLOW, and the class << 8 */
	__u32 cpu;
};

/* Entry cpu * TRACE_PER_CPU + i is CPU cpu's i-th packet; trace_count holds each CPU's i. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACE_CPUS * TRACE_PER_CPU);
	__type(key, __u32);
	__type(value, struct trace_entry);
} trace SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACE_CPUS);
	__type(key, __u32);
	__type(value, __u32);
} trace_count SEC(".maps");

static __always_inline void trace_packet(__u64 now, __u64 seq, __u32 len, __u32 q, __u32 flags)
{
	/* Only this CPU writes its count (tc egress runs with bottom halves off: no preemption). */
	__u32 cpu = bpf_get_smp_processor_id();
	if (cpu >= TRACE_CPUS)
		return;
	__u32 *count = bpf_map_lookup_elem(&trace_count, &cpu);
	if (!count || *count >= TRACE_PER_CPU)
		return;
	__u32 key = cpu * TRACE_PER_CPU + *count;
	struct trace_entry *e = bpf_map_lookup_elem(&trace, &key);
	if (!e)
		return;
	e->now_ns = now;
	e->seq = seq;
	e->len = len;
	e->queue_bytes = q;
	e->flags = flags;
	e->cpu = cpu;
	*count += 1;
}
#endif

/* The per-class counters' updates (none in the bench's peer variant, PHANTOM_NO_CLASSES). */
#ifdef PHANTOM_NO_CLASSES
#define CLASS_ADD(field, value) ((void)(value))
#else
#define CLASS_ADD(field, value) (c->field += (value))
#endif

/* Elapsed time is clamped so elapsed x rate fits in 64 bits up to 400 Gb/s (2^34 ns is 17 s). */
#define MAX_ELAPSED_NS (1ULL << 34)

/* The attribution class of an IPv4 packet: the BTH tag of a RoCEv2 (UDP port 4791) packet, 0 for
 * anything else or a packet too short to hold it. Helpers are allowed here (before the lock). */
static __always_inline __u32 attribution_class(struct __sk_buff *skb, void *data, void *data_end,
					       struct iphdr *ip)
{
#ifdef PHANTOM_NO_CLASSES
	return 0;
#else
	if (ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x1FFF)))
		return 0;
	__u32 ihl = (ip->ihl & 0xF) * 4;
	if (ihl < sizeof(*ip))
		return 0;
	__u32 udp_off = ETH_HLEN + ihl;
	__u32 tag_off = udp_off + sizeof(struct udphdr) + ATTR_TAG_AT;
	void *udp = data + udp_off;
	if (udp + sizeof(struct udphdr) + ATTR_TAG_AT + 1 <= data_end) {
		if (((struct udphdr *)udp)->dest != bpf_htons(ROCEV2_UDP_PORT))
			return 0;
		return *((__u8 *)udp + sizeof(struct udphdr) + ATTR_TAG_AT) & ATTR_TAG_MASK;
	}
	/* The UDP header or the BTH is beyond the linear data: copy the two fields out. */
	__be16 dport = 0;
	__u8 tag = 0;
	if (bpf_skb_load_bytes(skb, udp_off + __builtin_offsetof(struct udphdr, dest), &dport, 2) < 0 ||
	    dport != bpf_htons(ROCEV2_UDP_PORT))
		return 0;
	if (bpf_skb_load_bytes(skb, tag_off, &tag, 1) < 0)
		return 0;
	return tag & ATTR_TAG_MASK;
#endif
}

SEC("tc")
int phantom_marker(struct __sk_buff *skb)
{
	__u32 key = 0;
	struct marker_params *p = bpf_map_lookup_elem(&params, &key);
	struct marker_state *s = bpf_map_lookup_elem(&state, &key);
	if (!p || !s)
		return TC_ACT_OK;

	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	int ect = 0;
	int ipv4 = 0;
	__u32 cls = 0;
	if ((void *)(ip + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP)) {
		__u8 ecn = ip->tos & 3;
		ect = ecn == 1 || ecn == 2;
		ipv4 = 1;
		cls = attribution_class(skb, data, data_end, ip) & ATTR_TAG_MASK;
	}

	/* Helpers cannot be called under the spin lock: take time and randomness first. */
	__u64 now = bpf_ktime_get_ns();
	__u32 rnd = bpf_get_prandom_u32();
	__u32 loss_rnd = bpf_get_prandom_u32();
	/* The queue holds what the frames take on the wire, as HTB's `overhead` charges them. */
	__u64 segs = skb->gso_segs ? skb->gso_segs : 1;
	__u64 len = skb->len + segs * p->overhead_bytes;
	int mark = 0;

	bpf_spin_lock(&s->lock);
#ifndef PHANTOM_NO_CLASSES
	struct class_counters *c = &s->classes[cls & ATTR_TAG_MASK];
#else
	(void)cls;
#endif
	s->bytes += skb->len;
	s->packets++;
	s->ect_packets += ect;
	CLASS_ADD(bytes, skb->len);
	CLASS_ADD(packets, 1);
	if (!p->enabled) {
		/* Not configured yet (params are written right after attach): count only. */
		bpf_spin_unlock(&s->lock);
		return TC_ACT_OK;
	}
	/* Loss takes IPv4 packets only: an ARP exchange lost on a static fabric stalls a next hop
	 * for a whole retransmission second, which is not the impairment asked for. */
	if (ipv4 && p->loss_u32 && loss_rnd < p->loss_u32) {
		/* Lost on the wire: never queued, never marked. */
		s->loss_drops++;
		bpf_spin_unlock(&s->lock);
		return TC_ACT_SHOT;
	}
	/* An older timestamp than the last holder's (see the top): no drain, last_ns kept. */
	__u64 elapsed = 0;
	if (now > s->last_ns) {
		elapsed = now - s->last_ns;
		s->last_ns = now;
	}
	if (elapsed > MAX_ELAPSED_NS)
		elapsed = MAX_ELAPSED_NS;
	__u64 drained = (elapsed * p->drain_bytes_per_ns_q24) >> 24;
	__u64 q = s->queue_bytes > drained ? s->queue_bytes - drained : 0;
	__u64 q_seen = q;
	if (s->above_xoff) {
		/* The queue drained linearly since the last packet: above XOFF until it reached it. */
		__u64 to_xoff_ns = s->queue_bytes > p->xoff_bytes
			? ((s->queue_bytes - p->xoff_bytes) << 24) / p->drain_bytes_per_ns_q24 : 0;
		__u64 paused = elapsed < to_xoff_ns ? elapsed : to_xoff_ns;
		s->pause_ns += paused;
#ifndef PHANTOM_NO_CLASSES
		s->classes[s->last_class & ATTR_TAG_MASK].pause_ns += paused;
#endif
	}
	int overflow = 0;
	if (ect && p->mark_ect) {
		/* Pmax at Kmax itself, 1 only above it (emulator/transport/marking.py, the same law). */
		if (q > p->kmax_bytes) {
			mark = 1;
		} else if (q > p->kmin_bytes) {
			__u64 span = p->kmax_bytes - p->kmin_bytes;
			__u64 prob = ((__u64)p->pmax_u32 * (q - p->kmin_bytes)) / (span ? span : 1);
			mark = rnd < prob;
		}
	}
	if (q + len > p->buffer_bytes) {
		s->overflows++;
		CLASS_ADD(overflows, 1);
		overflow = 1;
	} else {
		q += len;
		/* its byte-time in the queue x C (see the top), in units of 64 bytes^2, rounded */
		CLASS_ADD(byte_time_q6, (len * q_seen + ((len * len) >> 1) + 32) >> 6);
	}
	s->queue_bytes = q;
	if (p->xoff_bytes && q >= p->xoff_bytes) {
		__u64 rose = q_seen < p->xoff_bytes; /* it rose to XOFF with this packet */
		s->pause_events += rose;
		CLASS_ADD(pause_events, rose);
		s->above_xoff = 1;
	} else {
		s->above_xoff = 0;
	}
#ifndef PHANTOM_NO_CLASSES
	s->last_class = cls;
#endif
	if (q > s->peak_queue_bytes)
		s->peak_queue_bytes = q;
	s->marks += mark;
	CLASS_ADD(marks, mark);
#ifdef PHANTOM_TRACE
	__u64 seq = s->packets;
#endif
	bpf_spin_unlock(&s->lock);
#ifdef PHANTOM_TRACE
	trace_packet(now, seq, len, q_seen > 0xFFFFFFFF ? 0xFFFFFFFF : q_seen,
		     (mark ? TRACE_MARK : 0) | (ect ? TRACE_ECT : 0) | (overflow ? TRACE_OVERFLOW : 0) |
			     cls << 8);
#else
	(void)q_seen;
	(void)overflow;
#endif

	if (mark) {
		/* Set both ECN bits (CE) and patch the IPv4 header checksum for the changed word. */
		__u32 tos_off = ETH_HLEN + __builtin_offsetof(struct iphdr, tos);
		__u32 csum_off = ETH_HLEN + __builtin_offsetof(struct iphdr, check);
		__u8 old_tos = 0;
		if (bpf_skb_load_bytes(skb, tos_off, &old_tos, 1) < 0)
			return TC_ACT_OK;
		__u8 new_tos = old_tos | 3;
		bpf_l3_csum_replace(skb, csum_off, bpf_htons(old_tos), bpf_htons(new_tos), 2);
		bpf_skb_store_bytes(skb, tos_off, &new_tos, 1, 0);
	}
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
