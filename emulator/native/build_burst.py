"""cffi builder of emulator.native._burst (burst.c): the burst layout and GSO sends, and the
receive side's reading of a GRO read as one run, in C.

`python -m emulator.native.build` compiles it (with every other build_*.py here); the
prototypes below are burst.c's, which says what each does.
"""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "burst.c"
DRAIN = HERE / "burst_drain.c"  # appended: it reads and sends with burst.c's functions

ffibuilder = FFI()
ffibuilder.cdef(
    """
    long rocev2_layout(uint8_t *buf, size_t buf_bytes, const uint32_t *tables, uint32_t base_crc,
                       uint32_t segment_bytes, uint32_t payload_bytes, uint32_t count,
                       uint32_t dest_qp, uint32_t tag, const uint8_t *tags, uint32_t psn,
                       const uint8_t *opcodes, const uint32_t *ack_req_at, uint32_t ack_reqs,
                       int stamps, uint64_t departed_ns, uint32_t spacing_ns, uint32_t ids_every,
                       int fill);
    long rocev2_send(int fd, const uint8_t *buf, size_t len, uint32_t gso_size, int tos,
                     uint32_t addr_be, uint16_t port_be);
    long rocev2_send_buffers(int fd, uint32_t addr_be, uint16_t port_be, int tos,
                             const uint8_t *buf, size_t len, uint32_t segment_bytes,
                             uint32_t per_buffer, long *results);
    long rocev2_layout_send(int fd, uint32_t addr_be, uint16_t port_be, int tos, uint8_t *buf,
                            size_t buf_bytes, const uint32_t *tables, uint32_t base_crc,
                            uint32_t segment_bytes, uint32_t payload_bytes, uint32_t count,
                            uint32_t dest_qp, uint32_t tag, const uint8_t *tags, uint32_t psn,
                            const uint8_t *opcodes, const uint32_t *ack_req_at,
                            uint32_t ack_reqs, int stamps, uint64_t departed_ns,
                            uint32_t spacing_ns, uint32_t per_buffer, int fill, long *results);
    long rocev2_layout_acks(uint8_t *buf, size_t buf_bytes, const uint32_t *prefix_crcs,
                            uint32_t dest_qp, const uint32_t *psns, const uint32_t *aeths,
                            uint32_t count);
    long rocev2_send_acks(int fd, uint32_t addr_be, uint16_t port_be, int tos, uint8_t *buf,
                          size_t buf_bytes, const uint32_t *prefix_crcs, uint32_t dest_qp,
                          const uint32_t *psns, const uint32_t *aeths, uint32_t count);
    long rocev2_recv(int fd, uint8_t *buf, size_t len, uint32_t *fields, uint64_t *rx_ns,
                     uint32_t max_psns, uint32_t *psns);
    long rocev2_read_data_run(const uint8_t *data, size_t nbytes, uint32_t segment_bytes,
                              const uint8_t *run_opcodes, uint32_t max_count, uint32_t *fields,
                              uint8_t *opcodes, uint32_t *acks);

    typedef struct {
        int32_t rank;
        int32_t eligible;
        uint32_t peer_addr;
        uint32_t peer_port;
        uint32_t expected_psn, highest_psn;
        int32_t in_message;
        uint32_t remote_qp;
        uint32_t msn;
        int32_t ack_fd;
        uint32_t ack_addr;
        uint16_t ack_port;
        int32_t ack_tos;
        const uint32_t *prefixes;
        int64_t packets, bytes, acks;
        int32_t listed;
    } drain_rqp_t;
    #define DRAIN_WAIT_BUCKETS 161
    #define DRAIN_CLASSES 64
    typedef struct {
        int64_t reads, packets, acks, ack_bytes;
        int64_t buffer_full, no_buffers, no_path;
        int64_t class_packets[64], class_bytes[64];
        int64_t wait_counts[161];
        double wait_sum_s, wait_max_s;
    } drain_totals_t;
    typedef struct {
        drain_rqp_t *q;
        int32_t n;
        int32_t *dirty;
        int32_t n_dirty, cap_dirty;
        uint8_t flags[256];
        int32_t gso;
        int32_t max_segments;
        int32_t reads;
        int32_t send_errno;
        int32_t send_errno_qpn;
        drain_totals_t totals;
        double wait_bounds[160];
        uint8_t *buf;
        size_t len;
        uint32_t *fields;
        uint64_t *rx_ns;
        uint32_t max_psns;
        uint32_t *psns;
        const uint8_t *run_opcodes;
        uint8_t *reply_buf;
        size_t reply_bytes;
        long got;
        int32_t left;
    } drain_t;
    #define DRAIN_FIRST 1
    #define DRAIN_LAST 2
    drain_t *drain_new(void);
    void drain_free(drain_t *d);
    drain_rqp_t *drain_rqp(drain_t *d, int32_t qpn);
    void drain_observe_wait(drain_t *d, double wait_s);
    void drain_unlist(drain_t *d);
    long rx_drain_fd(drain_t *d, int fd, int32_t rank, uint32_t max_reads);
    long rx_drain(drain_t *d, int fd, int32_t rank, uint8_t *buf, size_t len, uint32_t *fields,
                  uint64_t *rx_ns, uint32_t max_psns, uint32_t *psns, const uint8_t *run_opcodes,
                  uint8_t *reply_buf, size_t reply_bytes, uint32_t max_reads, long *got,
                  int *left);
    """
)
ffibuilder.set_source(
    "emulator.native._burst",
    SOURCE.read_text() + "\n" + DRAIN.read_text(),
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)
