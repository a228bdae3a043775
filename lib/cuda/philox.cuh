/* philox.cuh — Philox4x32-10 on the device: word (counter & 3) of block counter >> 2 of stream
 * `stream` under key `seed`, bit for bit mpx_rand_u32 of lib/core/rng.c, so that stochastic
 * rounding (cast.cu) and dropout masks (dropout.cu) draw the CPU's numbers. */
#ifndef MPX_CUDA_PHILOX_CUH
#define MPX_CUDA_PHILOX_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t mpx_philox_u32_dev(uint64_t seed, uint64_t stream,
                                                       uint64_t counter) {
    const uint64_t block = counter >> 2;
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    switch (counter & 3) {
    case 0: return c0;
    case 1: return c1;
    case 2: return c2;
    default: return c3;
    }
}

#endif
