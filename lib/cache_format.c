/*
 * Program cache file format and content hashing, kept free of OpenCL and of
 * I/O so the parser can be fuzzed alone (tests/fuzz/fuzz_cache.c).
 */
#include "internal.h"

#include <string.h>

const char oclf_cache_magic[8] = {'O', 'C', 'L', 'F', 'B', 'I', 'N', '\0'};

/* ---- hashing ------------------------------------------------------------ */

void oclf_hash_init(oclf_hash *h)
{
    h->a = 0xcbf29ce484222325ull; /* FNV-1a offset basis */
    h->b = 0x9e3779b97f4a7c15ull;
}

void oclf_hash_update(oclf_hash *h, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t a = h->a, b = h->b;
    for (size_t i = 0; i < len; i++) {
        a = (a ^ p[i]) * 0x100000001b3ull;
        /* An independent multiply-rotate lane: a collision must hit both. */
        b = (b ^ p[i]) * 0xff51afd7ed558ccdull;
        b = (b << 31) | (b >> 33);
    }
    h->a = a;
    h->b = b;
}

void oclf_hash_str(oclf_hash *h, const char *s)
{
    oclf_hash_update(h, s ? s : "", (s ? strlen(s) : 0) + 1);
}

/* Checks a whole cache file held in memory: header, key, size, checksum.
 * On success *payload points into `bytes` and *payload_size is its length.
 * Returns NULL when valid, else why not. Pure: no I/O, no allocation. */
const char *oclf_cache_parse(const unsigned char *bytes, size_t len, const oclf_hash *key,
                             const unsigned char **payload, size_t *payload_size)
{
    oclf_cache_header h;
    if (len < sizeof h)
        return "truncated header";
    memcpy(&h, bytes, sizeof h);
    if (memcmp(h.magic, oclf_cache_magic, sizeof oclf_cache_magic) != 0 || h.format != OCLF_CACHE_FORMAT)
        return "unknown format";
    if (h.key_a != key->a || h.key_b != key->b)
        return "key mismatch";
    if (h.size == 0 || h.size > OCLF_CACHE_MAX_BYTES)
        return "implausible size";
    if (len - sizeof h < h.size)
        return "truncated payload";
    if (len - sizeof h > h.size)
        return "trailing bytes";
    oclf_hash sum;
    oclf_hash_init(&sum);
    oclf_hash_update(&sum, bytes + sizeof h, (size_t)h.size);
    if (sum.a != h.sum_a || sum.b != h.sum_b)
        return "checksum mismatch";
    *payload = bytes + sizeof h;
    *payload_size = (size_t)h.size;
    return NULL;
}

