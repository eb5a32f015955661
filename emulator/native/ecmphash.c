/* Linux's IPv4 multipath hash for a UDP flow under fib_multipath_hash_policy=1, as
 * fabrics/ecmp.py l4_multipath_hash computes it in Python (its docstring gives the kernel's
 * steps and sources): the flow keys made consistent, SipHash-2-4 over their 48 bytes keyed by
 * (seed << 32 | seed) twice, the low 32 bits (0 as 1) shifted right by one.
 * tests/unit/test_native_ecmphash.py holds the two to the same hashes. */
#include <stdint.h>
#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

/* SipHash-2-4, 64-bit output (Aumasson and Bernstein, 2012), key (k0, k1) */
static uint64_t siphash24(uint64_t k0, uint64_t k1, const uint8_t *data, size_t len) {
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    size_t end = len - len % 8;
    for (size_t i = 0; i < end; i += 8) {
        uint64_t m = 0;
        for (int j = 7; j >= 0; j--) m = (m << 8) | data[i + j]; /* little-endian */
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (size_t j = 0; j < len - end; j++) last |= (uint64_t)data[end + j] << (8 * j);
    v3 ^= last;
    SIPROUND;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* a 4-byte big-endian field read as a little-endian integer (the kernel's comparison) */
static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* src, dst: the addresses as integers (int(IPv4Address)) */
uint32_t l4_multipath_hash(uint32_t src, uint32_t dst, int proto, int sport, int dport,
                           uint32_t seed) {
    uint8_t s[4] = {src >> 24, src >> 16, src >> 8, src};
    uint8_t d[4] = {dst >> 24, dst >> 16, dst >> 8, dst};
    uint8_t sp[2] = {(uint8_t)(sport >> 8), (uint8_t)sport};
    uint8_t dp[2] = {(uint8_t)(dport >> 8), (uint8_t)dport};
    if (le32(d) < le32(s)) {
        uint8_t t[4];
        memcpy(t, s, 4);
        memcpy(s, d, 4);
        memcpy(d, t, 4);
    }
    if ((dp[0] | dp[1] << 8) < (sp[0] | sp[1] << 8)) {
        uint8_t t[2] = {sp[0], sp[1]};
        memcpy(sp, dp, 2);
        memcpy(dp, t, 2);
    }
    /* basic (n_proto 0, ip_proto, pad), tags, vlan, cvlan, keyid, ports, icmp, v4 addrs, pad */
    uint8_t keys[48] = {0};
    keys[2] = (uint8_t)proto;
    memcpy(keys + 28, sp, 2);
    memcpy(keys + 30, dp, 2);
    memcpy(keys + 36, s, 4);
    memcpy(keys + 40, d, 4);
    uint64_t key = ((uint64_t)seed << 32) | seed;
    uint32_t h = (uint32_t)siphash24(key, key, keys, sizeof(keys));
    return (h ? h : 1) >> 1;
}
