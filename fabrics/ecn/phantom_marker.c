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
	__u64 len = skb->len;
	int mark = 0;

	bpf_spin_lock(&s->lock);
	s->bytes += len;
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
	__u64 elapsed = now - s->last_ns;
	if (elapsed > MAX_ELAPSED_NS)
		elapsed = MAX_ELAPSED_NS;
	__u64 drained = (elapsed * p->drain_bytes_per_ns_q24) >> 24;
	__u64 q = s->queue_bytes > drained ? s->queue_bytes - drained : 0;
	s->last_ns = now;
	if (ect && p->mark_ect) {
		if (q >= p->kmax_bytes) {
			mark = 1;
		} else if (q > p->kmin_bytes) {
			__u64 span = p->kmax_bytes - p->kmin_bytes;
			__u64 prob = ((__u64)p->pmax_u32 * (q - p->kmin_bytes)) / (span ? span : 1);
			mark = rnd < prob;
		}
	}
	if (q + len > p->buffer_bytes)
		s->overflows++;
	else
		q += len;
	s->queue_bytes = q;
	if (q > s->peak_queue_bytes)
		s->peak_queue_bytes = q;
	s->marks += mark;
	bpf_spin_unlock(&s->lock);

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
