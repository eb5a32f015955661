/* What xsk_port.c, xsk_tx.c and xsk_rx.c share: the port's state and a few constants. Private to
 * emulator.native._xsk (xsk_api.h is the public side). */
#ifndef XSK_INTERNAL_H
#define XSK_INTERNAL_H

#include <stdint.h>
#include <net/if.h>
#include <linux/if_xdp.h>
#include <bpf/libbpf.h>
#include <xdp/xsk.h>

#include "xsk_api.h"

/* Newer than Debian 12's uapi headers (Linux 6.1); values from uapi linux/if_xdp.h (6.6). */
#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#define XDP_HEADROOM 256 /* XDP_PACKET_HEADROOM, uapi linux/bpf.h: copy mode keeps it free */
#define HEADER_BYTES 42 /* Ethernet 14 + IPv4 20 + UDP 8 */
#define ROCE_MIN_PAYLOAD 16 /* BTH 12 + ICRC 4 */
#define TX_BATCH 32 /* descriptors the kernel sends per sendto in copy mode */
#define NB_PER_BYTE 1000000000ull

enum { PROG_REDIRECTED, PROG_PASSED, PROG_NO_SOCKET, PROG_COUNTERS = 4 };

struct xsk_q {
	struct xsk_socket *xsk;
	struct xsk_ring_cons rx;
	struct xsk_ring_prod fill;
	struct xsk_ring_cons comp;
};

struct xsk_port {
	struct xsk_config cfg;
	char ifname[IF_NAMESIZE];
	int ifindex;
	void *area;
	size_t area_bytes;
	struct xsk_umem *umem;
	struct xsk_q *q;
	uint32_t nq;
	struct xsk_ring_prod tx;
	uint64_t *free_frames;
	uint32_t nfree;
	struct xdp_desc *backlog; /* FIFO of descriptors; a packet ends at one without CONTD */
	uint32_t bl_cap, bl_head, bl_descs, bl_packets;
	struct xsk_bucket bucket;
	struct xsk_counters c;
	int sg, zc;
	uint32_t rx_room, tx_room;
	struct bpf_object *obj;
	int prog_fd, xsks_fd, counters_fd, link_fd;
	uint32_t prog_id, link_id;
	uint8_t tag[8];
	int attach_mode;
	uint32_t rx_next;
};

#endif
