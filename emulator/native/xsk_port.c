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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <linux/if_link.h>
#include <bpf/bpf.h>
#include <xdp/libxdp.h>

#include "xsk_internal.h"

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
