/* The C API of emulator.native._xsk (xsk_*.c): an AF_XDP port for RoCEv2, its token bucket and
 * its header writer. Plain declarations only: build_xsk.py hands this file to cffi's cdef as is,
 * and the C files include it, so the two cannot disagree. What each function does is said
 * where it is defined. */

/* --- token bucket (RFC 2697 section 3, one bucket, used as a shaper) ------------------------ */
struct xsk_bucket {
	uint64_t rate_bytes_per_s; /* 0: no cap */
	uint64_t depth_bytes;
	uint64_t tokens_nb; /* tokens in 1e-9 bytes, so refills are exact integers */
	uint64_t last_ns;
};
void xsk_bucket_init(struct xsk_bucket *b, uint64_t rate_bytes_per_s, uint64_t depth_bytes,
		     uint64_t now_ns);
int xsk_bucket_take(struct xsk_bucket *b, uint64_t now_ns, uint64_t bytes);
uint64_t xsk_bucket_ready_ns(const struct xsk_bucket *b, uint64_t bytes);

/* --- frames --------------------------------------------------------------------------------- */
struct xsk_flow {
	uint8_t dst_mac[6];
	uint8_t src_mac[6];
	uint32_t src_ip_be;
	uint32_t dst_ip_be;
	uint16_t sport;
	uint16_t dport;
	uint8_t ttl;
};
uint32_t xsk_write_headers(uint8_t *frame, const struct xsk_flow *f, uint8_t tos, uint16_t ip_id,
			   uint32_t udp_payload_bytes);
uint64_t xsk_wire_bytes(uint32_t frame_bytes);

/* --- the transmit backlog ------------------------------------------------------------------ */
uint32_t xsk_backlog_move_ahead(void *slots, uint32_t slot_bytes, uint32_t cap, uint32_t head,
				uint32_t waiting, uint32_t added);

/* --- the port ------------------------------------------------------------------------------- */
struct xsk_config {
	const char *ifname;
	const char *bpf_object;
	uint32_t queues; /* sockets on receive queues 0 .. queues-1; queue 0 also transmits */
	uint32_t frame_bytes; /* UMEM chunk: 2048 or 4096 */
	uint32_t ring_size; /* entries of each RX/TX/fill/completion ring, a power of two */
	uint32_t rx_frames_per_queue;
	uint32_t tx_frames;
	uint32_t max_frame_bytes; /* the largest Ethernet frame (no FCS) sent or received */
	int zero_copy;
	int xdp_mode; /* 0 auto (driver if it has one, else generic), 1 driver, 2 generic */
	uint64_t rate_bytes_per_s;
	uint64_t burst_bytes;
	const uint32_t *local_addrs_be;
	uint32_t n_local_addrs;
};

struct xsk_info {
	int ifindex;
	uint32_t queues;
	uint32_t prog_id;
	uint8_t prog_tag[8];
	uint32_t link_id;
	int attach_mode; /* XDP_ATTACHED_DRV 1 / SKB 2 / HW 3 (linux/if_link.h), 0 before attach */
	int zero_copy;
	int multi_buffer;
	uint32_t rx_frame_room; /* bytes of a frame one UMEM chunk holds on receive */
	uint32_t tx_frame_room; /* and on transmit */
};

struct xsk_counters {
	uint64_t tx_packets; /* handed to the kernel (descriptors consumed from the TX ring) */
	uint64_t tx_frame_bytes; /* their Ethernet frames, FCS excluded */
	uint64_t tx_wire_bytes; /* the same plus preamble, FCS and gap: what the bucket counts */
	uint64_t tx_taken; /* segments written into UMEM by xsk_port_send */
	uint64_t tx_backlog_full; /* segments refused: no free frame (the caller keeps them) */
	uint64_t tx_ring_full; /* pump rounds that found the TX ring without room */
	uint64_t tx_kicks; /* sendto wakeups */
	uint64_t tx_kick_again; /* EAGAIN: the device queue was busy, retried later */
	uint64_t tx_dropped; /* EBUSY/ENOBUFS: the kernel dropped a packet at the device */
	uint64_t tx_completed; /* frames back from the completion ring */
	uint64_t tx_bucket_waits; /* pump rounds that stopped for tokens */
	uint64_t rx_packets;
	uint64_t rx_bytes; /* UDP payload bytes handed to the caller */
	uint64_t rx_runs;
	uint64_t rx_malformed; /* dropped: not a RoCEv2 IPv4/UDP frame after all, or one of: */
	uint64_t rx_bad_ip_checksum; /* IPv4 header checksum wrong (RFC 791 section 3.1) */
	uint64_t rx_bad_udp_checksum; /* a UDP checksum other than 0 wrong (RFC 768) */
	uint64_t rx_bad_icrc; /* RoCEv2's invariant CRC wrong (IBA vol. 1 annex A17) */
	uint64_t frames_recycled; /* RX frames back on a fill ring */
	uint64_t fill_wakeups;
};

struct xsk_kernel_stats { /* XDP_STATISTICS (uapi linux/if_xdp.h), summed over the sockets */
	uint64_t rx_dropped;
	uint64_t rx_invalid_descs;
	uint64_t tx_invalid_descs;
	uint64_t rx_ring_full;
	uint64_t rx_fill_ring_empty_descs;
	uint64_t tx_ring_empty_descs;
	uint64_t prog_redirected; /* the XDP program's counters, summed over CPUs */
	uint64_t prog_passed;
	uint64_t prog_no_socket;
};

struct xsk_rx_run { /* consecutive payloads of one source, destination and ToS, like a GRO read */
	uint32_t src_ip_be;
	uint32_t dst_ip_be;
	uint16_t sport;
	uint8_t tos;
	uint8_t pad;
	uint32_t offset; /* in the caller's buffer */
	uint32_t nbytes;
	uint32_t segment_bytes; /* every payload but the last has this size */
	uint32_t count;
};

struct xsk_port;
int xsk_port_open(struct xsk_port **out, const struct xsk_config *cfg, char *err,
		  size_t err_bytes);
int xsk_port_attach(struct xsk_port *p, char *err, size_t err_bytes);
void xsk_port_close(struct xsk_port *p);
void xsk_port_info(const struct xsk_port *p, struct xsk_info *out);
int xsk_port_fd(const struct xsk_port *p, uint32_t queue);
int64_t xsk_port_send(struct xsk_port *p, const struct xsk_flow *f, uint8_t tos,
		      const uint8_t *payloads, uint32_t nbytes, uint32_t segment_bytes,
		      uint32_t ip_id_first, uint64_t now_ns, int ahead);
int64_t xsk_port_pump(struct xsk_port *p, uint64_t now_ns);
int64_t xsk_port_drain(struct xsk_port *p, uint64_t deadline_ns, int stop_on_rx);
int64_t xsk_ports_drain(struct xsk_port **ports, uint32_t n, uint64_t deadline_ns, int stop_on_rx,
			uint64_t min_gap_ns, int64_t *rcs);
uint64_t xsk_port_next_release_ns(const struct xsk_port *p);
uint32_t xsk_port_backlog(const struct xsk_port *p);
int64_t xsk_port_recv(struct xsk_port *p, uint8_t *out, uint32_t out_bytes,
		      struct xsk_rx_run *runs, uint32_t max_runs, uint32_t max_run_segments);
void xsk_port_counters(const struct xsk_port *p, struct xsk_counters *out);
int xsk_port_kernel_stats(const struct xsk_port *p, struct xsk_kernel_stats *out);
uint64_t xsk_now_ns(void);
