/*
 * Reference for elementwise expressions: Philox4x32-10 and the dropout
 * decision, written from the generator's definition (Salmon, Moraes, Dror,
 * Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
 */
#include "ref.h"

void oclf_ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
    for (int i = 0; i < 10; i++) {
        if (i) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
    for (int i = 0; i < 4; i++)
        out[i] = c[i];
}

double oclf_ref_dropout(double v, float p, uint64_t seed, uint64_t n, uint32_t stream)
{
    const uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), stream, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    oclf_ref_philox4x32_10(ctr, key, w);
    const double u = (double)(w[0] >> 8) * 0x1.0p-24;
    return u >= (double)p ? v / (1.0 - (double)p) : 0.0;
}
