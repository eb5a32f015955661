// SPDX-License-Identifier: GPL-2.0
/* The XDP program of an AF_XDP port (emulator/engine/af_xdp.py): RoCEv2 to this port's
 * addresses goes to the XDP socket of the receive queue it arrived on; everything else (ARP,
 * ICMP, other UDP, IPv6, fragments, packets to other addresses) goes on to the kernel stack.
 *
 * RoCEv2 here is IPv4 without options, not a fragment, UDP destination port 4791 (IBA annex
 * A17), to an address in `local_addrs`. The redirect falls back to XDP_PASS when the queue has no
 * socket in `xsks_map` (the flags argument of bpf_redirect_map, Linux >= 5.3; the kernel's
 * Documentation/networking/af_xdp.rst, "XSKMAP / BPF_MAP_TYPE_XSKMAP").
 *
 * Section "xdp.frags": the program declares it handles multi-buffer frames (BPF_F_XDP_HAS_FRAGS,
 * Linux >= 5.18), so a driver accepts it on an interface whose MTU exceeds one page, and AF_XDP
 * multi-buffer (XDP_USE_SG) gets the whole frame. It reads only the first 42 bytes, which are in
 * the linear part.
 *
 * Compile: clang -O2 -g -target bpf -c xsk_rocev2.bpf.c (emulator/engine/af_xdp_setup.py does,
 * cached by source hash).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ROCEV2_UDP_PORT 4791
#define MAX_QUEUES 256
#define MAX_ADDRESSES 64

/* counters (per CPU, summed by the reader); indexes mirror xsk_internal.h PROG_* */
#define C_REDIRECTED 0
#define C_PASSED 1
#define C_NO_SOCKET 2
#define N_COUNTERS 4

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES); /* resized to the interface's queues before load */
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRESSES);
	__type(key, __u32); /* IPv4 address, network order */
	__type(value, __u8);
} local_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 index, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &index);

	if (c)
		*c += 1;
	return verdict;
}

SEC("xdp.frags")
int xsk_rocev2(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 queue = ctx->rx_queue_index;

	if ((void *)(udp + 1) > data_end)
		return count(C_PASSED, XDP_PASS);
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->version != 4 ||
	    ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3FFF)) ||
	    udp->dest != bpf_htons(ROCEV2_UDP_PORT))
		return count(C_PASSED, XDP_PASS);
	if (!bpf_map_lookup_elem(&local_addrs, &ip->daddr))
		return count(C_PASSED, XDP_PASS);
	if (!bpf_map_lookup_elem(&xsks_map, &queue))
		return count(C_NO_SOCKET, XDP_PASS);
	count(C_REDIRECTED, 0);
	return bpf_redirect_map(&xsks_map, queue, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
