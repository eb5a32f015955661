// SPDX-License-Identifier: GPL-2.0
/* Load balancing among equal-cost next hops, at the tc clsact ingress of a switch port
 * (fabrics/balance/, docs/multipath.md "In the emulated fabric").
 *
 * The kernel forwards with one next hop per flow (its L4 multipath hash). This program takes the
 * choice away from it for the tier's mode, and forwards the packet itself:
 * - spray: every packet to a random next hop (bpf_get_prandom_u32), or the next in turn for its
 *   destination prefix (a counter per route under a spin lock: exact whatever the CPU);
 * - flowlet: a flow keeps its next hop while its packets come closer than `flowlet_gap_ns`
 *   (wall time: the target gap times the TDF); after a longer idle gap it takes a random one
 *   (LetFlow, Vanini et al., NSDI 2017). A flow's first packet takes the next hop the kernel's
 *   ECMP would (bpf_fib_lookup, which hashes the same 5-tuple with the same seed), so a flow
 *   that never pauses follows its ECMP path;
 * - adaptive: the next hop whose egress port's queue holds the fewest bytes, per packet or per
 *   flowlet (a flow's first packet too). The queue is the eBPF marker's phantom queue of that
 *   port (phantom_marker.c, `state`), drained to now at the port's rate; the marker's per-port
 *   state maps reach this program through `queues`, an array of maps Python fills. Ties go to
 *   a random one among them (the scan starts at a random next hop).
 *
 * Forwarding as ip_forward would: the TTL decremented with the checksum patched incrementally
 * (include/net/ip.h, ip_decrease_ttl), skb->priority from the TOS (net/ipv4/route.c,
 * ip_tos2prio, as ip_forward sets it), then bpf_redirect_neigh to the chosen port with the next
 * hop's address, which fills L2 from the neighbour table and leaves through dev_queue_xmit, so
 * the port's clsact egress (the marker) and root qdisc (HTB) see the packet as they see a
 * forwarded one. Everything else goes to the stack (TC_ACT_OK): non-IPv4, not for our MAC,
 * TTL 1 or less (the stack answers time exceeded), destinations without a route of two or
 * more next hops (the map holds only the routes Python wrote: never this switch's own
 * addresses), and all of it before Python has written `params`.
 *
 * Maps are per program instance (tc loads the object once per port); Python writes the same
 * routes into every port's `nexthops` and sums the ports' `counters`. What must be one per
 * switch, the round-robin turns and the flowlet table, is the switch's first port's `turns` and
 * `flowlets`, which Python puts into every port's `switch_turns` and `switch_flows` (arrays of
 * one map): a flow that enters on two ports keeps one flowlet state.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#ifndef MAX_NEXTHOPS
#define MAX_NEXTHOPS 64        /* a power of two: indexes are masked with it. Python builds the
				* fabric's variant with its widest route's (the verifier walks
				* each loop over it: 0.26 s per port at 64, 0.03 s at 4) */
#endif
#if MAX_NEXTHOPS & (MAX_NEXTHOPS - 1)
#error "MAX_NEXTHOPS must be a power of two"
#endif
#define MAX_QUEUE_SLOTS 256    /* egress ports whose queue adaptive mode reads, per switch */
#define MAX_ROUTES 4096        /* destination prefixes with a round-robin counter, per switch */
#ifndef FLOWLET_ENTRIES
#define FLOWLET_ENTRIES 1      /* the flowlet variants are built with a real table size */
#endif
#ifndef MARKER_STATE_BYTES
#error "MARKER_STATE_BYTES: the size of phantom_marker.c's struct marker_state (from Python)"
#endif
/* Elapsed time clamped as the marker clamps it (elapsed x rate fits in 64 bits to 400 Gb/s). */
#define MAX_ELAPSED_NS (1ULL << 34)

enum choice {
	CHOOSE_RANDOM = 0,
	CHOOSE_ROUND_ROBIN = 1,
	CHOOSE_LEAST_QUEUED = 2,
};

struct balance_params {
	__u32 enabled;          /* 0: not configured yet, pass everything */
	__u32 choice;           /* enum choice */
	__u32 per_flowlet;      /* 1: choose when a flowlet starts, else keep the flow's next hop */
	__u32 first_ecmp;       /* 1: a flow's first packet takes the kernel's ECMP next hop */
	__u64 flowlet_gap_ns;   /* wall ns of idle after which a flow may move */
};

struct nexthop {
	__u32 ifindex;          /* the egress port, in this switch's namespace */
	__be32 gateway;         /* the next hop's address: bpf_redirect_neigh resolves its MAC */
	__u32 queue_slot;       /* its port's marker state in `queues` (adaptive) */
	__u32 pad;
	__u64 drain_bytes_per_ns_q24; /* its port's rate, as the marker drains its queue */
};

struct nexthop_set {
	__u32 count;            /* fewer than 2: the stack forwards (one path, or none) */
	__u32 route_slot;       /* this route's round-robin counter in `turns` */
	struct nexthop hops[MAX_NEXTHOPS];
};

struct route_key {
	__u32 prefixlen;
	__be32 addr;
};

struct flow_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;           /* 0 for protocols without ports, and for fragments */
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct flowlet {
	__u64 last_ns;
	__u32 hop;              /* index in the route's next hops */
	__u32 pad;
};

struct turn {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 next;             /* packets sent toward this route so far */
};

struct balance_counters {
	__u64 forwarded;        /* redirected to a next hop this program chose */
	__u64 passed;           /* left to the stack */
	__u64 new_flows;        /* flows seen first (flowlet table) */
	__u64 flowlets;         /* flowlets started after an idle gap */
	__u64 moves;            /* of those, ones that took another next hop */
	__u64 ecmp_misses;      /* first packets whose kernel choice was not a candidate (random) */
};

/* The head of phantom_marker.c's struct marker_state; the rest is padding to its size, so the
 * inner map template matches the marker's `state` maps (same size and spin lock offset). */
struct marker_state_view {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 last_ns;
	__u64 queue_bytes;
	__u8 rest[MARKER_STATE_BYTES - 24];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct balance_params);
} params SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct balance_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_ROUTES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct route_key);
	__type(value, struct nexthop_set);
} nexthops SEC(".maps");

/* Named map types: an array of maps takes its inner template from one (below). */
struct turns_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_ROUTES);
	__type(key, __u32);
	__type(value, struct turn);
} turns SEC(".maps");

struct flowlets_map {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FLOWLET_ENTRIES);
	__type(key, struct flow_key);
	__type(value, struct flowlet);
} flowlets SEC(".maps");

/* Slot 0: the switch's shared `turns` and `flowlets` (its first port's), written by Python
 * before it enables the program; while empty, a port uses its own. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct turns_map);
} switch_turns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct flowlets_map);
} switch_flows SEC(".maps");

/* A map of the marker's `state` kind, never written: it makes clang describe the value's full
 * type in BTF (a type reached only through the array of maps below stays a forward declaration,
 * which libbpf cannot size). */
struct marker_state_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marker_state_view);
} queue_kind SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_QUEUE_SLOTS);
	__type(key, __u32);
	__array(values, struct marker_state_map);
} queues SEC(".maps");

/* TC_PRIO_* by the TOS bits, what ip_forward sets (net/ipv4/route.c ip_tos2prio, 16 entries in
 * runs of four: 0, 2, 6, 4), one nibble per run of TOS bits 0x18. */
#define TOS2PRIO_NIBBLES 0x4620

static __always_inline __u32 random_hop(__u32 count)
{
	return bpf_get_prandom_u32() % count;
}

/* Bytes in the phantom queue of a next hop's port now (0 when unknown). */
static __always_inline __u64 queued_bytes(struct nexthop *h, __u64 now)
{
	__u32 slot = h->queue_slot;
	__u32 zero = 0;
	void *inner = bpf_map_lookup_elem(&queues, &slot);
	if (!inner)
		return 0;
	struct marker_state_view *s = bpf_map_lookup_elem(inner, &zero);
	if (!s)
		return 0;
	/* Read without the marker's lock: a torn pair only misjudges one choice. */
	__u64 last = s->last_ns;
	__u64 q = s->queue_bytes;
	__u64 elapsed = now > last ? now - last : 0;
	if (elapsed > MAX_ELAPSED_NS)
		elapsed = MAX_ELAPSED_NS;
	__u64 drained = (elapsed * h->drain_bytes_per_ns_q24) >> 24;
	return q > drained ? q - drained : 0;
}

static __always_inline __u32 least_queued(struct nexthop_set *set, __u32 count, __u64 now)
{
	__u32 start = random_hop(count);
	__u32 best = start;
	__u64 best_q = ~0ULL;
	for (__u32 i = 0; i < MAX_NEXTHOPS; i++) {
		if (i >= count)
			break;
		__u32 j = start + i;
		if (j >= count)
			j -= count;
		__u64 q = queued_bytes(&set->hops[j & (MAX_NEXTHOPS - 1)], now);
		if (q < best_q) {
			best_q = q;
			best = j;
		}
	}
	return best;
}

static __always_inline __u32 choose(struct balance_params *p, struct nexthop_set *set,
				    __u32 count, __u64 now)
{
	if (p->choice == CHOOSE_ROUND_ROBIN) {
		__u32 zero = 0;
		__u32 slot = set->route_slot;
		void *shared = bpf_map_lookup_elem(&switch_turns, &zero);
		if (!shared)
			shared = &turns;
		struct turn *t = bpf_map_lookup_elem(shared, &slot);
		if (!t)
			return random_hop(count);
		bpf_spin_lock(&t->lock);
		__u64 n = t->next++;
		bpf_spin_unlock(&t->lock);
		return n % count;
	}
	if (p->choice == CHOOSE_LEAST_QUEUED)
		return least_queued(set, count, now);
	return random_hop(count);
}

/* The next hop the kernel's multipath route picks for this 5-tuple: bpf_fib_lookup hashes the
 * flow's addresses, protocol and ports with the namespace's seed (fib_multipath_hash, policy 1,
 * as for a forwarded packet); then its index among the candidates, or a random one. */
static __always_inline __u32 ecmp_hop(struct __sk_buff *skb, struct flow_key *fk, __u16 tot_len,
				      struct nexthop_set *set, __u32 count,
				      struct balance_counters *c)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.l4_protocol = fk->proto;
	fib.sport = fk->sport;
	fib.dport = fk->dport;
	fib.tot_len = tot_len;
	fib.ipv4_src = fk->saddr;
	fib.ipv4_dst = fk->daddr;
	fib.ifindex = skb->ingress_ifindex;
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH) ==
	    BPF_FIB_LKUP_RET_SUCCESS) {
		for (__u32 i = 0; i < MAX_NEXTHOPS; i++) {
			if (i >= count)
				break;
			if (set->hops[i].ifindex == fib.ifindex)
				return i;
		}
	}
	c->ecmp_misses++;
	return random_hop(count);
}

/* The flow's next hop: kept within a flowlet, chosen again after an idle gap. */
static __always_inline __u32 flowlet_hop(struct __sk_buff *skb, struct iphdr *ip,
					 struct balance_params *p, struct nexthop_set *set,
					 __u32 count, struct balance_counters *c)
{
	struct flow_key fk = {};
	fk.saddr = ip->saddr;
	fk.daddr = ip->daddr;
	fk.proto = ip->protocol;
	__u16 tot_len = bpf_ntohs(ip->tot_len);
	/* Ports of UDP and TCP, not of fragments (the kernel's flow dissector skips those too). */
	if ((ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_TCP) &&
	    !(ip->frag_off & bpf_htons(0x3FFF))) {
		__u32 ihl = (ip->ihl & 0xF) * 4;
		__be16 ports[2];
		if (ihl >= sizeof(*ip) && bpf_skb_load_bytes(skb, ETH_HLEN + ihl, ports, 4) == 0) {
			fk.sport = ports[0];
			fk.dport = ports[1];
		}
	}
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	void *table = bpf_map_lookup_elem(&switch_flows, &zero);
	if (!table)
		table = &flowlets;
	struct flowlet *f = bpf_map_lookup_elem(table, &fk);
	if (f) {
		__u32 hop = f->hop;
		__u64 last = f->last_ns;
		/* Another CPU may have stamped a later time: that is no gap. */
		if ((now <= last || now - last <= p->flowlet_gap_ns) && hop < count) {
			f->last_ns = now;
			return hop;
		}
		__u32 next = choose(p, set, count, now);
		c->flowlets++;
		c->moves += next != hop;
		f->hop = next;
		f->last_ns = now;
		return next;
	}
	__u32 hop = p->first_ecmp ? ecmp_hop(skb, &fk, tot_len, set, count, c)
				  : choose(p, set, count, now);
	struct flowlet fresh = {.last_ns = now, .hop = hop};
	bpf_map_update_elem(table, &fk, &fresh, BPF_ANY);
	c->new_flows++;
	return hop;
}

SEC("tc")
int balancer(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct balance_params *p = bpf_map_lookup_elem(&params, &zero);
	struct balance_counters *c = bpf_map_lookup_elem(&counters, &zero);
	if (!p || !c)
		return TC_ACT_OK;
	if (!p->enabled || skb->protocol != bpf_htons(ETH_P_IP) || skb->pkt_type != PACKET_HOST)
		goto pass;

	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > data_end || ip->ttl <= 1)
		goto pass;
	struct route_key key = {.prefixlen = 32, .addr = ip->daddr};
	struct nexthop_set *set = bpf_map_lookup_elem(&nexthops, &key);
	if (!set || set->count < 2)
		goto pass;
	__u32 count = set->count < MAX_NEXTHOPS ? set->count : MAX_NEXTHOPS;
	__u32 hop;
	if (p->per_flowlet)
		hop = flowlet_hop(skb, ip, p, set, count, c);
	else
		hop = choose(p, set, count, p->choice == CHOOSE_LEAST_QUEUED ? bpf_ktime_get_ns() : 0);
	struct nexthop *h = &set->hops[hop & (MAX_NEXTHOPS - 1)];

	/* ip_decrease_ttl: the checksum's high byte gains what the TTL loses. */
	__u32 check = ip->check;
	check += bpf_htons(0x0100);
	ip->check = (__sum16)(check + (check >= 0xFFFF));
	ip->ttl--;
	skb->priority = (TOS2PRIO_NIBBLES >> (((ip->tos >> 3) & 3) * 4)) & 0xF;

	struct bpf_redir_neigh to = {.nh_family = AF_INET, .ipv4_nh = h->gateway};
	c->forwarded++;
	return bpf_redirect_neigh(h->ifindex, &to, sizeof(to), 0);
pass:
	c->passed++;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
