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
 * Built with -DPHANTOM_TRACE (tests only), it also records every packet's arrival time, CPU,
 * lock order, queue and decision in the `trace` map, for the contention test to rebuild the
 * queue from the arrivals and check the marks against the Python law.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
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
	__u32 flags;       /* TRACE_MARK | TRACE_ECT | TRACE_OVERFLOW */
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

/* Elapsed time is clamped so elapsed x rate fits in 64 bits up to 400 Gb/s (2^34 ns is 17 s). */
#define MAX_ELAPSED_NS (1ULL << 34)

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
	if ((void *)(ip + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP)) {
		__u8 ecn = ip->tos & 3;
		ect = ecn == 1 || ecn == 2;
		ipv4 = 1;
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
	s->bytes += skb->len;
	s->packets++;
	s->ect_packets += ect;
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
		s->pause_ns += elapsed < to_xoff_ns ? elapsed : to_xoff_ns;
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
		overflow = 1;
	} else {
		q += len;
	}
	s->queue_bytes = q;
	if (p->xoff_bytes && q >= p->xoff_bytes) {
		s->pause_events += q_seen < p->xoff_bytes; /* it rose to XOFF with this packet */
		s->above_xoff = 1;
	} else {
		s->above_xoff = 0;
	}
	if (q > s->peak_queue_bytes)
		s->peak_queue_bytes = q;
	s->marks += mark;
#ifdef PHANTOM_TRACE
	__u64 seq = s->packets;
#endif
	bpf_spin_unlock(&s->lock);
#ifdef PHANTOM_TRACE
	trace_packet(now, seq, len, q_seen > 0xFFFFFFFF ? 0xFFFFFFFF : q_seen,
		     (mark ? TRACE_MARK : 0) | (ect ? TRACE_ECT : 0) | (overflow ? TRACE_OVERFLOW : 0));
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
