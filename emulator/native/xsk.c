/* An AF_XDP port for RoCEv2 (emulator/engine/af_xdp.py is its Python face): one UMEM shared by an
 * XDP socket on each receive queue of an interface, queue 0's socket also transmitting; the XDP
 * program xsk_rocev2.bpf.c steers RoCEv2 to them and everything else to the kernel.
 *
 * Transmit: the caller hands UDP payloads laid out back to back at a segment size (what the GSO
 * path hands the kernel); each is written after an Ethernet + IPv4 + UDP header into UMEM frames
 * (two or more with multi-buffer), queued in a backlog, and moved to the TX ring as a token
 * bucket allows, then the kernel is woken with sendto (copy mode transmits synchronously, at most
 * 32 descriptors per call: net/xdp/xsk.c TX_BATCH_SIZE). Receive: RX descriptors are parsed,
 * their payloads copied into the caller's buffer as runs of one source (like a GRO read), and
 * their frames put back on the fill ring.
 *
 * Sources: the kernel's Documentation/networking/af_xdp.rst (rings, UMEM, XDP_COPY/XDP_ZEROCOPY,
 * XDP_USE_NEED_WAKEUP, XDP_USE_SG and XDP_PKT_CONTD "multi-buffer", XDP_STATISTICS); uapi
 * linux/if_xdp.h; libxdp's xsk.h and README (xsk_umem__create, xsk_socket__create_shared with
 * XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD so our own program is used).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>
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

uint64_t xsk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------- */
/* The port */

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

static char libbpf_msg[256]; /* libbpf's and libxdp's last warning, for the error line */

static void keep_msg(const char *fmt, va_list args)
{
	size_t n;

	vsnprintf(libbpf_msg, sizeof(libbpf_msg), fmt, args);
	n = strlen(libbpf_msg);
	while (n && (libbpf_msg[n - 1] == '\n' || libbpf_msg[n - 1] == ' '))
		libbpf_msg[--n] = 0;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level != LIBBPF_DEBUG)
		keep_msg(fmt, args);
	return 0;
}

static int libxdp_print(enum libxdp_print_level level, const char *fmt, va_list args)
{
	if (level != LIBXDP_DEBUG)
		keep_msg(fmt, args);
	return 0;
}

static int fail(char *err, size_t err_bytes, int rc, const char *step)
{
	if (libbpf_msg[0])
		snprintf(err, err_bytes, "%s: %s (%s)", step, strerror(-rc), libbpf_msg);
	else
		snprintf(err, err_bytes, "%s: %s", step, strerror(-rc));
	return rc;
}

static int load_program(struct xsk_port *p, const struct xsk_config *cfg, char *err,
			size_t err_bytes)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);
	struct bpf_program *prog;
	struct bpf_map *map;
	uint8_t one = 1;
	uint32_t i;
	int rc;

	p->obj = bpf_object__open_file(cfg->bpf_object, NULL);
	if (!p->obj) {
		rc = -errno;
		p->obj = NULL;
		return fail(err, err_bytes, rc, "open the XDP program object");
	}
	map = bpf_object__find_map_by_name(p->obj, "xsks_map");
	if (!map || bpf_map__set_max_entries(map, p->nq))
		return fail(err, err_bytes, -ENOENT, "size the XSK map");
	rc = bpf_object__load(p->obj);
	if (rc)
		return fail(err, err_bytes, rc < 0 ? rc : -EINVAL, "load the XDP program");
	prog = bpf_object__find_program_by_name(p->obj, "xsk_rocev2");
	if (!prog)
		return fail(err, err_bytes, -ENOENT, "find the XDP program");
	p->prog_fd = bpf_program__fd(prog);
	p->xsks_fd = bpf_map__fd(map);
	p->counters_fd = bpf_object__find_map_fd_by_name(p->obj, "counters");
	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(p->prog_fd, &info, &len))
		return fail(err, err_bytes, -errno, "read the XDP program's id");
	p->prog_id = info.id;
	memcpy(p->tag, info.tag, sizeof(p->tag));
	rc = bpf_object__find_map_fd_by_name(p->obj, "local_addrs");
	for (i = 0; i < cfg->n_local_addrs; i++)
		if (rc < 0 || bpf_map_update_elem(rc, &cfg->local_addrs_be[i], &one, BPF_ANY))
			return fail(err, err_bytes, rc < 0 ? rc : -errno, "fill the address map");
	return 0;
}

static int open_sockets(struct xsk_port *p, char *err, size_t err_bytes)
{
	const struct xsk_config *cfg = &p->cfg;
	struct xsk_umem_config ucfg = {
		.fill_size = cfg->ring_size,
		.comp_size = cfg->ring_size,
		.frame_size = cfg->frame_bytes,
		.frame_headroom = 0,
		.flags = 0,
	};
	uint32_t frames = p->nq * cfg->rx_frames_per_queue + cfg->tx_frames, i, j, idx;
	char step[64];
	int rc;

	p->area_bytes = (size_t)frames * cfg->frame_bytes;
	p->area = mmap(NULL, p->area_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (p->area == MAP_FAILED) {
		p->area = NULL;
		return fail(err, err_bytes, -errno, "map the UMEM");
	}
	rc = xsk_umem__create(&p->umem, p->area, p->area_bytes, &p->q[0].fill, &p->q[0].comp,
			      &ucfg);
	if (rc) {
		p->umem = NULL;
		return fail(err, err_bytes, rc, "register the UMEM");
	}
	for (i = 0; i < p->nq; i++) {
		struct xsk_socket_config scfg = {
			.rx_size = cfg->ring_size,
			.tx_size = cfg->ring_size,
			.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
			.xdp_flags = 0,
			.bind_flags = (cfg->zero_copy ? XDP_ZEROCOPY : XDP_COPY) |
				      XDP_USE_NEED_WAKEUP | (p->sg ? XDP_USE_SG : 0),
		};
		int fd;

		rc = xsk_socket__create_shared(&p->q[i].xsk, p->ifname, i, p->umem, &p->q[i].rx,
					       i == 0 ? &p->tx : NULL, &p->q[i].fill,
					       &p->q[i].comp, &scfg);
		if (rc) {
			p->q[i].xsk = NULL;
			snprintf(step, sizeof(step), "bind queue %u", i);
			return fail(err, err_bytes, rc, step);
		}
		fd = xsk_socket__fd(p->q[i].xsk);
		if (bpf_map_update_elem(p->xsks_fd, &i, &fd, BPF_ANY))
			return fail(err, err_bytes, -errno, "fill the XSK map");
		/* this queue's receive frames, all on its fill ring */
		if (xsk_ring_prod__reserve(&p->q[i].fill, cfg->rx_frames_per_queue, &idx) !=
		    cfg->rx_frames_per_queue)
			return fail(err, err_bytes, -ENOSPC, "stock the fill ring");
		for (j = 0; j < cfg->rx_frames_per_queue; j++)
			*xsk_ring_prod__fill_addr(&p->q[i].fill, idx + j) =
				(uint64_t)(i * cfg->rx_frames_per_queue + j) * cfg->frame_bytes;
		xsk_ring_prod__submit(&p->q[i].fill, cfg->rx_frames_per_queue);
	}
	for (j = 0; j < cfg->tx_frames; j++)
		p->free_frames[p->nfree++] =
			(uint64_t)(p->nq * cfg->rx_frames_per_queue + j) * cfg->frame_bytes;
	return 0;
}

int xsk_port_open(struct xsk_port **out, const struct xsk_config *cfg, char *err,
		  size_t err_bytes)
{
	struct xsk_port *p;
	int rc;

	*out = NULL;
	libbpf_msg[0] = 0;
	libbpf_set_print(libbpf_print);
	libxdp_set_print(libxdp_print);
	if (!cfg->queues || cfg->ring_size < cfg->rx_frames_per_queue ||
	    (cfg->ring_size & (cfg->ring_size - 1)) || !cfg->tx_frames)
		return fail(err, err_bytes, -EINVAL, "check the ring sizes");
	p = calloc(1, sizeof(*p));
	if (!p)
		return fail(err, err_bytes, -ENOMEM, "allocate the port");
	p->cfg = *cfg;
	p->prog_fd = p->xsks_fd = p->counters_fd = p->link_fd = -1;
	snprintf(p->ifname, sizeof(p->ifname), "%s", cfg->ifname);
	p->cfg.ifname = p->ifname;
	p->cfg.bpf_object = NULL; /* the caller's strings are not kept */
	p->cfg.local_addrs_be = NULL;
	p->nq = cfg->queues;
	p->rx_room = cfg->frame_bytes - XDP_HEADROOM;
	p->tx_room = cfg->frame_bytes;
	p->sg = cfg->max_frame_bytes > p->rx_room || cfg->max_frame_bytes > p->tx_room;
	p->zc = cfg->zero_copy;
	p->q = calloc(p->nq, sizeof(*p->q));
	p->free_frames = calloc(cfg->tx_frames, sizeof(*p->free_frames));
	p->bl_cap = cfg->tx_frames;
	p->backlog = calloc(p->bl_cap, sizeof(*p->backlog));
	if (!p->q || !p->free_frames || !p->backlog) {
		xsk_port_close(p);
		return fail(err, err_bytes, -ENOMEM, "allocate the port");
	}
	p->ifindex = if_nametoindex(p->ifname);
	if (!p->ifindex) {
		rc = -errno;
		xsk_port_close(p);
		return fail(err, err_bytes, rc, "find the interface");
	}
	rc = load_program(p, cfg, err, err_bytes);
	if (!rc)
		rc = open_sockets(p, err, err_bytes);
	if (rc) {
		xsk_port_close(p);
		return rc;
	}
	xsk_bucket_init(&p->bucket, cfg->rate_bytes_per_s, cfg->burst_bytes, xsk_now_ns());
	*out = p;
	return 0;
}

/* Attach the program with a BPF link (Linux >= 5.9): the kernel detaches it when the last file
 * descriptor of the link closes, so a killed process leaves nothing attached. */
int xsk_port_attach(struct xsk_port *p, char *err, size_t err_bytes)
{
	static const __u32 modes[3] = {0, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
	LIBBPF_OPTS(bpf_link_create_opts, opts);
	LIBBPF_OPTS(bpf_xdp_query_opts, query);
	struct bpf_link_info info;
	__u32 len = sizeof(info);
	int mode = p->cfg.xdp_mode < 0 || p->cfg.xdp_mode > 2 ? 0 : p->cfg.xdp_mode;

	libbpf_msg[0] = 0;
	opts.flags = modes[mode];
	p->link_fd = bpf_link_create(p->prog_fd, p->ifindex, BPF_XDP, &opts);
	if (p->link_fd < 0 && mode == 0 && errno != EBUSY && errno != EEXIST) {
		/* the driver refused (e.g. no multi-buffer at this MTU): the generic hook */
		opts.flags = XDP_FLAGS_SKB_MODE;
		p->link_fd = bpf_link_create(p->prog_fd, p->ifindex, BPF_XDP, &opts);
	}
	if (p->link_fd < 0)
		return fail(err, err_bytes, -errno, "attach the XDP program");
	memset(&info, 0, sizeof(info));
	if (!bpf_obj_get_info_by_fd(p->link_fd, &info, &len))
		p->link_id = info.id;
	if (!bpf_xdp_query(p->ifindex, 0, &query))
		p->attach_mode = query.attach_mode;
	return 0;
}

void xsk_port_close(struct xsk_port *p)
{
	uint32_t i;

	if (!p)
		return;
	if (p->link_fd >= 0)
		close(p->link_fd); /* the link's last reference: the program is detached */
	for (i = 0; p->q && i < p->nq; i++)
		if (p->q[i].xsk)
			xsk_socket__delete(p->q[i].xsk);
	if (p->umem)
		xsk_umem__delete(p->umem);
	if (p->area)
		munmap(p->area, p->area_bytes);
	if (p->obj)
		bpf_object__close(p->obj);
	free(p->q);
	free(p->free_frames);
	free(p->backlog);
	free(p);
}

void xsk_port_info(const struct xsk_port *p, struct xsk_info *out)
{
	memset(out, 0, sizeof(*out));
	out->ifindex = p->ifindex;
	out->queues = p->nq;
	out->prog_id = p->prog_id;
	memcpy(out->prog_tag, p->tag, sizeof(p->tag));
	out->link_id = p->link_id;
	out->attach_mode = p->attach_mode;
	out->zero_copy = p->zc;
	out->multi_buffer = p->sg;
	out->rx_frame_room = p->rx_room;
	out->tx_frame_room = p->tx_room;
}

int xsk_port_fd(const struct xsk_port *p, uint32_t queue)
{
	return queue < p->nq && p->q[queue].xsk ? xsk_socket__fd(p->q[queue].xsk) : -1;
}

/* --- transmit ------------------------------------------------------------------------------ */

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
 * EMSGSIZE when a frame needs more chunks than multi-buffer was set up for, ENETDOWN. */
int64_t xsk_port_send(struct xsk_port *p, const struct xsk_flow *f, uint8_t tos,
		      const uint8_t *payloads, uint32_t nbytes, uint32_t segment_bytes,
		      uint32_t ip_id_first, uint64_t now_ns)
{
	uint32_t count, i, room = p->tx_room;
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
			if (p->nfree < chunks || p->bl_cap - p->bl_descs < chunks) {
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

static void wait_until(uint64_t t_ns)
{
	uint64_t now = xsk_now_ns();

	if (t_ns > now + 100000) { /* sleep most of a long wait, spin the rest */
		uint64_t wake = t_ns - 50000;
		struct timespec ts = {.tv_sec = wake / 1000000000ull, .tv_nsec = wake % 1000000000ull};

		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	while (xsk_now_ns() < t_ns)
		;
}

/* Pump until the backlog is sent or `deadline_ns` (CLOCK_MONOTONIC) passes, waiting for tokens
 * in between (the thread's timer slack is set to 1 us meanwhile). Returns what is left (packets
 * in the backlog, +1 if the TX ring still holds some), or -errno. */
int64_t xsk_port_drain(struct xsk_port *p, uint64_t deadline_ns)
{
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	int64_t rc = 0;

	prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
	for (;;) {
		uint64_t now = xsk_now_ns(), next;

		rc = xsk_port_pump(p, 0);
		if (rc < 0 || (!p->bl_packets && !ring_pending(p)) || now >= deadline_ns)
			break;
		next = p->bl_packets && !ring_pending(p) ? xsk_port_next_release_ns(p) : 0;
		if (next <= now)
			next = now + 20000; /* the ring or the device is busy: look again shortly */
		wait_until(next < deadline_ns ? next : deadline_ns);
	}
	if (slack > 0)
		prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	reap_completions(p);
	return rc < 0 ? rc : (int64_t)xsk_port_backlog(p);
}

/* --- receive ------------------------------------------------------------------------------- */

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

void xsk_port_counters(const struct xsk_port *p, struct xsk_counters *out)
{
	*out = p->c;
}

int xsk_port_kernel_stats(const struct xsk_port *p, struct xsk_kernel_stats *out)
{
	int ncpus = libbpf_num_possible_cpus(), i;
	uint32_t qi, key;

	memset(out, 0, sizeof(*out));
	for (qi = 0; qi < p->nq; qi++) {
		struct xdp_statistics st;
		socklen_t len = sizeof(st);

		memset(&st, 0, sizeof(st));
		if (!p->q[qi].xsk ||
		    getsockopt(xsk_socket__fd(p->q[qi].xsk), SOL_XDP, XDP_STATISTICS, &st, &len))
			return -errno;
		out->rx_dropped += st.rx_dropped;
		out->rx_invalid_descs += st.rx_invalid_descs;
		out->tx_invalid_descs += st.tx_invalid_descs;
		out->rx_ring_full += st.rx_ring_full;
		out->rx_fill_ring_empty_descs += st.rx_fill_ring_empty_descs;
		out->tx_ring_empty_descs += st.tx_ring_empty_descs;
	}
	if (p->counters_fd < 0 || ncpus <= 0)
		return 0;
	for (key = 0; key < 3; key++) {
		uint64_t values[ncpus], sum = 0;

		if (bpf_map_lookup_elem(p->counters_fd, &key, values))
			return -errno;
		for (i = 0; i < ncpus; i++)
			sum += values[i];
		if (key == PROG_REDIRECTED)
			out->prog_redirected = sum;
		else if (key == PROG_PASSED)
			out->prog_passed = sum;
		else
			out->prog_no_socket = sum;
	}
	return 0;
}
