/* The engine's data path in C: a burst's full-size RoCEv2 segments laid out back to back with
 * their ICRCs and its UDP GSO sends (several GSO buffers in one sendmmsg); a rank socket's read
 * with its control messages, read as a run of data packets or of ACKs; the ACKs a read
 * produces, laid out and sent.
 *
 * Built by emulator/native/build_burst.py (cffi, API mode) as emulator.native._burst; the Python
 * glue is emulator/native/burst.py, reads.py and acks.py. The bytes are those of the Python
 * code (emulator/transport/burst_wire.py's BurstWriter and read_data_run, wire.py's encode):
 * selfcheck.py checks it at every worker start, tests/unit/test_native_burst.py on many shapes.
 *
 * ICRC (IBA vol. 1 annex A17, RoCEv2): CRC-32 over a pseudo-header and the packet, see
 * emulator/transport/wire.py. CRC-32 is affine over GF(2): for inputs of one length,
 * crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0). Within a burst the segments differ from a flow's
 * template (opcode 0, PSN word 0, IP id 0, zero payload) only in the opcode byte, the PSN word,
 * the IP identification and the send stamp, so a segment's ICRC is the template's XOR one
 * table entry per varying byte (the tables come from Python: burst_wire.crc_byte_tables).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sendmmsg (Python.h, included first by cffi, defines it already) */
#endif
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <netinet/in.h>
#include <sys/uio.h>
#include <arpa/inet.h>
#include <time.h>

#define BTH_BYTES 12
#define ICRC_BYTES 4
#define STAMP_BYTES 16 /* burst_wire.SEND_STAMP: "<QII" */
#define PSN_MASK 0xFFFFFFu
#define QPN_MASK 0xFFFFFFu
#define ACK_REQ (1u << 31)
#define PKEY_DEFAULT 0xFFFF
#define TAG_SHIFT 24 /* packets.ATTRIBUTION_TAG_SHIFT */

/* Linux include/uapi/linux/udp.h and in.h */
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

/* Rows of the table block, 256 uint32 each (burst_wire.py DELTA_ROW_POSITIONS). */
enum {
    T_OPCODE = 0,
    T_PSN_WORD = 1, /* 4 rows: the PSN word's bytes as sent (AckReq byte first) */
    T_IP_ID = 5,    /* 2 rows: the IP identification, high byte first */
    T_STAMP = 7,    /* 16 rows: the send stamp's bytes */
    T_ROWS = 23
};

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t word_crc(const uint32_t *tables, uint32_t word)
{
    const uint32_t *t = tables + T_PSN_WORD * 256;
    return t[word >> 24] ^ t[256 + ((word >> 16) & 0xFF)] ^ t[512 + ((word >> 8) & 0xFF)] ^
           t[768 + (word & 0xFF)];
}

/* Lay out `count` full segments of `segment_bytes` at buf[0:]. Segment i's ICRC is for the IP
 * id the kernel gives it: i % ids_every when the buffer goes out as GSO buffers of ids_every
 * segments each (the ids restart at 0 in each), 0 when ids_every is 0 (one datagram per send).
 * `fill`: write the template's zeros first. Returns the bytes written, or -EINVAL when they do
 * not fit. */
long rocev2_layout(uint8_t *buf, size_t buf_bytes, const uint32_t *tables, uint32_t base_crc,
                   uint32_t segment_bytes, uint32_t payload_bytes, uint32_t count,
                   uint32_t dest_qp, uint32_t tag, const uint8_t *tags, uint32_t psn,
                   const uint8_t *opcodes, const uint32_t *ack_req_at, uint32_t ack_reqs,
                   int stamps, uint64_t departed_ns, uint32_t spacing_ns, uint32_t ids_every,
                   int fill)
{
    size_t used = (size_t)segment_bytes * count;
    if (used > buf_bytes || segment_bytes < BTH_BYTES + ICRC_BYTES || ids_every > 0xFFFF)
        return -EINVAL;
    if (fill)
        memset(buf, 0, used); /* zero payload and pad: the template (burst_wire._Layout) */
    uint8_t flags = (uint8_t)(((-payload_bytes) & 3) << 4); /* pad count; M, TVer 0 */
    uint32_t qp = dest_qp & QPN_MASK;
    uint32_t crc_all = base_crc;
    uint8_t stamp[STAMP_BYTES];
    /* the send stamp, the same in every segment, where the payload holds one */
    int stamped = stamps && payload_bytes >= STAMP_BYTES;
    if (stamped) {
        if (departed_ns) {
            put_le64(stamp, departed_ns);
            put_le32(stamp + 8, psn & PSN_MASK);
            put_le32(stamp + 12, spacing_ns);
        } else {
            memset(stamp, 0, STAMP_BYTES); /* the field may hold an earlier burst's stamp */
        }
        const uint32_t *t = tables + T_STAMP * 256;
        for (int b = 0; b < STAMP_BYTES; b++)
            crc_all ^= t[b * 256 + stamp[b]];
    }
    const uint32_t *t_op = tables + T_OPCODE * 256;
    const uint32_t *t_id = tables + T_IP_ID * 256;
    uint32_t next_ack = ack_reqs ? ack_req_at[0] : UINT32_MAX;
    uint32_t a = 0;
    uint32_t ip_id = 0;
    uint8_t *seg = buf;
    for (uint32_t i = 0; i < count; i++, seg += segment_bytes) {
        uint32_t word = (psn + i) & PSN_MASK;
        if (i == next_ack) {
            word |= ACK_REQ;
            next_ack = ++a < ack_reqs ? ack_req_at[a] : UINT32_MAX;
        }
        uint8_t opcode = opcodes[i];
        uint32_t qp_tag = (tags ? tags[i] : tag) & 0xFF;
        seg[0] = opcode;
        seg[1] = flags;
        seg[2] = PKEY_DEFAULT >> 8;
        seg[3] = PKEY_DEFAULT & 0xFF;
        /* FECN, BECN and the reserved bits hold the attribution tag: masked to ones in the
         * ICRC (IBA 7.8.1, annex A17), so nothing to fold in */
        put_be32(seg + 4, qp_tag << TAG_SHIFT | qp);
        put_be32(seg + 8, word);
        if (stamped)
            memcpy(seg + BTH_BYTES, stamp, STAMP_BYTES);
        /* the kernel numbers a GSO buffer's segments 0, 1, 2, ... (docs/architecture.md,
         * "Data path speed"); the template's ICRC is for id 0 */
        uint32_t crc = crc_all ^ t_op[opcode] ^ word_crc(tables, word) ^ t_id[ip_id >> 8] ^
                       t_id[256 + (ip_id & 0xFF)];
        put_le32(seg + segment_bytes - ICRC_BYTES, crc);
        if (ids_every && ++ip_id == ids_every)
            ip_id = 0;
    }
    return (long)used;
}

/* The control messages of one send: UDP_SEGMENT = gso_size when gso_size > 0, IP_TOS = tos
 * when tos >= 0 (as emulator/engine/send_path.py sends). Returns msg_controllen. */
struct control {
    union {
        char bytes[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
};

static size_t set_control(struct control *control, uint32_t gso_size, int tos)
{
    memset(control, 0, sizeof *control);
    struct cmsghdr *c = (struct cmsghdr *)control->u.bytes;
    size_t space = 0;
    if (gso_size) {
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t size = (uint16_t)gso_size;
        memcpy(CMSG_DATA(c), &size, sizeof size);
        space += CMSG_SPACE(sizeof(uint16_t));
        c = (struct cmsghdr *)(control->u.bytes + space);
    }
    if (tos >= 0) {
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_TOS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &tos, sizeof tos);
        space += CMSG_SPACE(sizeof(int));
    }
    return space;
}

static void set_address(struct sockaddr_in *to, uint32_t addr_be, uint16_t port_be)
{
    memset(to, 0, sizeof *to);
    to->sin_family = AF_INET;
    to->sin_port = port_be;
    to->sin_addr.s_addr = addr_be;
}

/* One sendmsg of buf[0:len] to addr:port (network byte order) with the control messages of
 * set_control. Returns the bytes the kernel took, or -errno. */
long rocev2_send(int fd, const uint8_t *buf, size_t len, uint32_t gso_size, int tos,
                 uint32_t addr_be, uint16_t port_be)
{
    struct sockaddr_in to;
    set_address(&to, addr_be, port_be);
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct control control;
    size_t space = set_control(&control, gso_size, tos);
    struct msghdr msg = {
        .msg_name = &to,
        .msg_namelen = sizeof to,
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = space ? control.u.bytes : NULL,
        .msg_controllen = space,
    };
    ssize_t sent = sendmsg(fd, &msg, 0);
    return sent < 0 ? -(long)errno : (long)sent;
}

#define MAX_BUFFERS 16

/* buf[0:len], laid out as segments of segment_bytes, sent as GSO buffers of per_buffer
 * segments each (the last may hold fewer, its last segment may be shorter; a buffer of one
 * segment goes without UDP_SEGMENT, as one datagram), in one sendmmsg where the kernel takes
 * them all. results[b] is what buffer b's send returned: the bytes taken, or -errno; a buffer
 * the kernel refuses is lost, the ones after it are still sent (each its own try, as separate
 * sends would be). Returns the number of buffers, or -EINVAL (too many, nothing sent). */
long rocev2_send_buffers(int fd, uint32_t addr_be, uint16_t port_be, int tos, const uint8_t *buf,
                         size_t len, uint32_t segment_bytes, uint32_t per_buffer, long *results)
{
    size_t buffer_bytes = (size_t)segment_bytes * per_buffer;
    if (!buffer_bytes || !len)
        return -EINVAL;
    size_t n = (len + buffer_bytes - 1) / buffer_bytes;
    if (n > MAX_BUFFERS)
        return -EINVAL;
    struct sockaddr_in to;
    set_address(&to, addr_be, port_be);
    struct mmsghdr msgs[MAX_BUFFERS];
    struct iovec iovs[MAX_BUFFERS];
    struct control controls[MAX_BUFFERS];
    memset(msgs, 0, sizeof(msgs[0]) * n);
    for (size_t b = 0; b < n; b++) {
        size_t at = b * buffer_bytes;
        size_t bytes = len - at < buffer_bytes ? len - at : buffer_bytes;
        iovs[b].iov_base = (void *)(buf + at);
        iovs[b].iov_len = bytes;
        size_t space = set_control(&controls[b], bytes > segment_bytes ? segment_bytes : 0, tos);
        struct msghdr *m = &msgs[b].msg_hdr;
        m->msg_name = &to;
        m->msg_namelen = sizeof to;
        m->msg_iov = &iovs[b];
        m->msg_iovlen = 1;
        m->msg_control = space ? controls[b].u.bytes : NULL;
        m->msg_controllen = space;
    }
    size_t b = 0;
    while (b < n) {
        int sent = sendmmsg(fd, msgs + b, (unsigned int)(n - b), 0);
        if (sent < 0) { /* buffer b refused: lost, go on with the next */
            results[b] = -(long)errno;
            b++;
            continue;
        }
        for (int i = 0; i < sent; i++, b++)
            results[b] = (long)msgs[b].msg_len;
    }
    return (long)n;
}

/* rocev2_layout of a burst of full-size segments for GSO buffers of per_buffer segments, then
 * rocev2_send_buffers. Returns what rocev2_send_buffers returns (-EINVAL when the layout does
 * not fit: nothing sent). */
long rocev2_layout_send(int fd, uint32_t addr_be, uint16_t port_be, int tos, uint8_t *buf,
                        size_t buf_bytes, const uint32_t *tables, uint32_t base_crc,
                        uint32_t segment_bytes, uint32_t payload_bytes, uint32_t count,
                        uint32_t dest_qp, uint32_t tag, const uint8_t *tags, uint32_t psn,
                        const uint8_t *opcodes, const uint32_t *ack_req_at, uint32_t ack_reqs,
                        int stamps, uint64_t departed_ns, uint32_t spacing_ns,
                        uint32_t per_buffer, int fill, long *results)
{
    long used = rocev2_layout(buf, buf_bytes, tables, base_crc, segment_bytes, payload_bytes,
                              count, dest_qp, tag, tags, psn, opcodes, ack_req_at, ack_reqs,
                              stamps, departed_ns, spacing_ns, per_buffer, fill);
    if (used < 0)
        return used;
    return rocev2_send_buffers(fd, addr_be, port_be, tos, buf, (size_t)used, segment_bytes,
                               per_buffer, results);
}

static inline uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* burst_wire.read_data_run in C: the datagrams of data[:nbytes], cut every segment_bytes (0:
 * one datagram), when they are data packets without RETH (run_opcodes[opcode] set) of one QP
 * with the same FECN/BECN (the reserved bits, the attribution tag, may differ), consecutive
 * PSNs not wrapping within the run, the same flags but for the last and valid pad counts.
 * Returns the number of segments and fills fields (dest QP, first PSN, payload bytes of all
 * but the last, the last's payload bytes, how many carry AckReq), opcodes[] and acks[] (their
 * indexes); 0: not such a run; -1: more than max_count segments (the caller decides). */
long rocev2_read_data_run(const uint8_t *data, size_t nbytes, uint32_t segment_bytes,
                          const uint8_t *run_opcodes, uint32_t max_count, uint32_t *fields,
                          uint8_t *opcodes, uint32_t *acks)
{
    size_t count = 1, segment = nbytes;
    if (segment_bytes > 0 && segment_bytes < nbytes) {
        segment = segment_bytes;
        count = (nbytes + segment - 1) / segment;
    }
    if (count > max_count)
        return -1;
    size_t last_bytes = nbytes - (count - 1) * segment;
    if (last_bytes < BTH_BYTES + ICRC_BYTES)
        return 0;
    const uint32_t same_bits = 0xC0000000u | QPN_MASK; /* FECN, BECN, destination QP */
    uint32_t first_qp = get_be32(data + 4);
    uint8_t first_flags = data[1];
    uint8_t last_flags = data[(count - 1) * segment + 1];
    if ((first_flags | last_flags) & 0x0F)
        return 0;
    uint32_t psn = get_be32(data + 8) & PSN_MASK;
    if (psn + count - 1 > PSN_MASK)
        return 0; /* wraps: rare, left to the per-packet path */
    uint32_t n_acks = 0;
    const uint8_t *seg = data;
    for (size_t i = 0; i < count; i++, seg += segment) {
        uint8_t opcode = seg[0];
        if (!run_opcodes[opcode])
            return 0;
        if ((get_be32(seg + 4) ^ first_qp) & same_bits)
            return 0; /* another QP (or FECN/BECN) within the read */
        if (i + 1 < count && seg[1] != first_flags)
            return 0;
        uint32_t word = get_be32(seg + 8);
        if ((word & PSN_MASK) != psn + i)
            return 0;
        opcodes[i] = opcode;
        if (word & ACK_REQ)
            acks[n_acks++] = (uint32_t)i;
    }
    long payload = (long)segment - BTH_BYTES - ICRC_BYTES - ((first_flags >> 4) & 3);
    long last_payload = (long)last_bytes - BTH_BYTES - ICRC_BYTES - ((last_flags >> 4) & 3);
    if (payload < 0 || last_payload < 0)
        return 0;
    fields[0] = first_qp & QPN_MASK;
    fields[1] = psn;
    fields[2] = (uint32_t)payload;
    fields[3] = (uint32_t)last_payload;
    fields[4] = n_acks;
    return (long)count;
}

/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320: zlib's crc32) continuing from `value`
 * as zlib.crc32(data, value) does: for the few bytes of an ACK after its pseudo-header. */
static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_more(uint32_t value, const uint8_t *data, size_t len)
{
    if (!crc_table[1])
        crc_table_init();
    uint32_t c = ~value;
    for (size_t i = 0; i < len; i++)
        c = crc_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return ~c;
}

#define ACK_BYTES (BTH_BYTES + 4 + ICRC_BYTES) /* BTH, AETH, ICRC */
#define OPCODE_ACKNOWLEDGE 0x11

/* `count` ACKs to dest_qp (PSNs psns[], AETH words aeths[]: syndrome << 24 | MSN) laid out
 * back to back at buf[0:] as wire.encode writes them, ACK i's ICRC for IP id i
 * (prefix_crcs[i]: IcrcContext.prefix_crc(i, 20), the CRC after the pseudo-header). Returns
 * the bytes written; -EINVAL when they do not fit. */
long rocev2_layout_acks(uint8_t *buf, size_t buf_bytes, const uint32_t *prefix_crcs,
                        uint32_t dest_qp, const uint32_t *psns, const uint32_t *aeths,
                        uint32_t count)
{
    size_t used = (size_t)count * ACK_BYTES;
    if (!count || used > buf_bytes)
        return -EINVAL;
    static const uint8_t masked = 0xFF; /* FECN, BECN, reserved: ones in the ICRC */
    uint8_t *ack = buf;
    for (uint32_t i = 0; i < count; i++, ack += ACK_BYTES) {
        ack[0] = OPCODE_ACKNOWLEDGE;
        ack[1] = 0;
        ack[2] = PKEY_DEFAULT >> 8;
        ack[3] = PKEY_DEFAULT & 0xFF;
        put_be32(ack + 4, dest_qp & QPN_MASK);
        put_be32(ack + 8, psns[i] & PSN_MASK);
        put_be32(ack + 12, aeths[i]);
        uint32_t crc = crc32_more(prefix_crcs[i], ack, 4);
        crc = crc32_more(crc, &masked, 1);
        crc = crc32_more(crc, ack + 5, BTH_BYTES + 4 - 5);
        put_le32(ack + BTH_BYTES + 4, crc);
    }
    return (long)used;
}

/* rocev2_layout_acks, then one GSO send of the 20-byte ACKs (one datagram for a single ACK),
 * as send_path.SendPath._send_replies sends them. Returns the bytes the kernel took, or
 * -errno (-EINVAL: they do not fit, nothing sent). */
long rocev2_send_acks(int fd, uint32_t addr_be, uint16_t port_be, int tos, uint8_t *buf,
                      size_t buf_bytes, const uint32_t *prefix_crcs, uint32_t dest_qp,
                      const uint32_t *psns, const uint32_t *aeths, uint32_t count)
{
    long used = rocev2_layout_acks(buf, buf_bytes, prefix_crcs, dest_qp, psns, aeths, count);
    if (used < 0)
        return used;
    return rocev2_send(fd, buf, (size_t)used, count > 1 ? ACK_BYTES : 0, tos, addr_be, port_be);
}

/* Linux include/uapi/asm-generic/socket.h; include/uapi/linux/udp.h */
#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* burst_wire.read_ack_run in C: the datagrams of data[:nbytes] (cut every segment_bytes, 0: one)
 * when every one is an ACK (not a NAK: AETH syndrome bits 6..5 not both set) with transport
 * version 0 and the same FECN/BECN/destination QP word: their PSNs into psns (at most
 * max_psns) and the QP into *qp; returns how many, 0 when they are not such a run. */
static long read_ack_run(const uint8_t *data, size_t nbytes, uint32_t segment_bytes,
                         uint32_t max_psns, uint32_t *psns, uint32_t *qp)
{
    size_t size = segment_bytes > 0 && segment_bytes < nbytes ? segment_bytes : nbytes;
    if (size != ACK_BYTES || nbytes % size)
        return 0;
    size_t count = nbytes / size;
    if (count > max_psns)
        return 0;
    uint32_t first_word = get_be32(data + 4);
    const uint8_t *ack = data;
    for (size_t i = 0; i < count; i++, ack += ACK_BYTES) {
        if (ack[0] != OPCODE_ACKNOWLEDGE || ack[1] & 0x0F || get_be32(ack + 4) != first_word)
            return 0;
        if ((ack[BTH_BYTES] & 0x60) == 0x60)
            return 0; /* a NAK */
        psns[i] = get_be32(ack + 8) & PSN_MASK;
    }
    *qp = first_word & QPN_MASK;
    return (long)count;
}

/* One recvmsg into buf[0:len] from a rank socket, with the control messages it asks for, read
 * as emulator/engine/sockets.py read_ancillary reads them. fields: [0] the ToS byte, [1] the
 * GRO segment size (0: none), [2] the source address (network order), [3] the source port,
 * [4] the destination QP when the read is a run of ACKs (read_ack_run; else 0xFFFFFFFF), [5]
 * how many (their PSNs in psns, room for max_psns); *rx_ns: the kernel's receive time
 * (CLOCK_REALTIME ns, 0: none). Returns the bytes read, or -errno (-EAGAIN: nothing to read). */
long rocev2_recv(int fd, uint8_t *buf, size_t len, uint32_t *fields, uint64_t *rx_ns,
                 uint32_t max_psns, uint32_t *psns)
{
    struct sockaddr_in from;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        char bytes[256];
        struct cmsghdr align;
    } control;
    struct msghdr msg = {
        .msg_name = &from,
        .msg_namelen = sizeof from,
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = control.bytes,
        .msg_controllen = sizeof control.bytes,
    };
    ssize_t got = recvmsg(fd, &msg, 0);
    if (got < 0)
        return -(long)errno;
    uint32_t tos = 0, gso_size = 0;
    uint64_t stamp = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        size_t data_len = c->cmsg_len - CMSG_LEN(0);
        const uint8_t *data = CMSG_DATA(c);
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && data_len >= 1) {
            tos = data[0];
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS &&
                   data_len >= sizeof(struct timespec)) {
            struct timespec ts;
            memcpy(&ts, data, sizeof ts);
            stamp = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && data_len >= 2) {
            /* the kernel writes gso_size as an int (udp_cmsg_recv in net/ipv4/udp.c) */
            if (data_len >= sizeof(int)) {
                int size;
                memcpy(&size, data, sizeof size);
                gso_size = (uint32_t)size;
            } else {
                gso_size = data[0];
            }
        }
    }
    fields[0] = tos;
    fields[1] = gso_size;
    fields[2] = from.sin_addr.s_addr;
    fields[3] = ntohs(from.sin_port);
    fields[4] = 0xFFFFFFFFu;
    fields[5] = 0;
    if (got > 0 && buf[0] == OPCODE_ACKNOWLEDGE) {
        uint32_t qp;
        long n = read_ack_run(buf, (size_t)got, gso_size, max_psns, psns, &qp);
        if (n > 0) {
            fields[4] = qp;
            fields[5] = (uint32_t)n;
        }
    }
    *rx_ns = stamp;
    return (long)got;
}
