// parity_rows.cuh: a detector's or observable's word XORed from the records it names
// (core/parities.py's tables: offsets, flat, flip), for every kernel that makes parities from
// records: record_parities and parities_shot_major (parities.cu) and frame mode's shot-major
// epilogue (frames.cu).
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
