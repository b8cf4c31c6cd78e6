// parity_rows.cuh: what every kernel that lays records or parities out shot by shot shares
// (parities_shot_major and record_parities in parities.cu, frame mode's shot-major epilogue in
// frames.cu): a detector's or observable's words XORed from the records it names (core/parities.py's
// tables: offsets, flat, flip), and the warp's 32x32 bit transpose that turns 32 rows of a shot word
// into 32 bits of each of its shots.
#pragma once

#include "philox.cuh"

// Word j of parity p: the XOR of word j of rows flat[offsets[p] .. offsets[p + 1]) of `rec` (rows
// `stride` words apart), complemented where flip[p] is set.
__device__ __forceinline__ qq_u64 qq_parity_word(const qq_u64* rec, size_t stride, const int* offsets,
                                                 const int* flat, const unsigned char* flip, int p, size_t j) {
    qq_u64 x = flip[p] ? ~0ull : 0ull;
    for (int k = offsets[p]; k < offsets[p + 1]; ++k) x ^= rec[(size_t)flat[k] * stride + j];
    return x;
}

// Lane r holds row r of a 32x32 bit matrix (bit c: column c); returns column `lane` (bit r: row
// r's bit lane). Swap the off-diagonal halves, then quarters inside each half, and so on.
__device__ __forceinline__ unsigned qq_transpose32(unsigned x, int lane) {
    unsigned m = 0x0000FFFFu;
#pragma unroll
    for (int j = 16; j > 0; j >>= 1, m ^= m << j) {
        const unsigned y = __shfl_xor_sync(0xFFFFFFFFu, x, j);
        x = (lane & j) ? ((x & ~m) | ((y >> j) & m)) : ((x & m) | ((y << j) & ~m));
    }
    return x;
}
