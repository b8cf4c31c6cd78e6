// parities.cu: detectors and logical observables reduced on the device from frame mode's records
// (XOR of record rows), so only their bits travel to the host (core/parities.py on the host).
//
// Kernels:
//   record_parities  out[p*out_stride + j] = flip[p] ? ~x : x with x = XOR of rec[r*rec_stride + j]
//                    over r in flat[offsets[p] .. offsets[p+1]), for words j < count.
//                    1-D grid over num_parities * count threads (one word of one parity each,
//                    consecutive threads consecutive words: coalesced); blockDim.x == QQ_PARITY_BLOCK.
//   parities_shot_major  those parities transposed to Stim's shot-major bit-packed layout (below).
//   rows_reduce      each row of a chunk (records or parities) folded into one word, added into
//                    acc[row] across the chunks of a call (below).
#include "philox.cuh"

#define QQ_PARITY_BLOCK 256

extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
record_parities(const qq_u64* rec, int rec_stride, const int* offsets, const int* flat, const unsigned char* flip,
                qq_u64* out, int out_stride, int num_parities, int count) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)num_parities * count) return;
    const int p = (int)(idx / count), j = (int)(idx % count);
    qq_u64 x = flip[p] ? ~0ull : 0ull;
    for (int k = offsets[p]; k < offsets[p + 1]; ++k) x ^= rec[(size_t)flat[k] * rec_stride + j];
    out[(size_t)p * out_stride + j] = x;
}

// parities_shot_major: the same parities, laid out shot by shot as Stim's bit-packed samples: for
// shot 64*j + l of the chunk, word b of its row holds parities 64b..64b+63 (bit i = parity 64b+i).
// `par` is record_parities' output (num_parities rows of out_stride words); out has row_words =
// ceil(num_parities / 64) words per shot. Thread (j, b, l) gathers bit l of 64 parity words that
// all 64 lanes of (j, b) read (one cached load each). 1-D grid over count * row_words * 64
// threads, blockDim.x == QQ_PARITY_BLOCK (a multiple of 64).
extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
parities_shot_major(const qq_u64* par, int par_stride, int num_parities, qq_u64* out, int row_words, int count) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)count * row_words * 64) return;
    const int l = (int)(idx & 63);
    const size_t jb = idx >> 6;
    const int b = (int)(jb % row_words), j = (int)(jb / row_words);
    qq_u64 y = 0;
    const int hi = min(64, num_parities - 64 * b);
    for (int i = 0; i < hi; ++i) y |= ((par[(size_t)(64 * b + i) * par_stride + j] >> l) & 1ull) << i;
    out[((size_t)64 * j + l) * row_words + b] = y;
}

// rows_reduce: acc[r] += popcount of row r's words j < count (op 0), or acc[r] ^= their XOR (op 1);
// word tail_word (the call's last word, when it is in this chunk; else -1) is masked by tail_mask,
// so the bits past the call's shots never count. A warp per row (consecutive lanes read consecutive
// words: coalesced), reduced by shuffles; the chunks of a call run in order on one stream, so each
// acc[r] has one writer at a time. 1-D grid of ceil(rows / (blockDim.x / 32)) blocks,
// blockDim.x == QQ_PARITY_BLOCK.
extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
rows_reduce(const qq_u64* bits, int stride, int rows, int count, int tail_word, qq_u64 tail_mask, int op,
            qq_u64* acc) {
    const size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= (size_t)rows) return;  // whole warps: rows are warp-aligned
    const qq_u64* src = bits + row * stride;
    qq_u64 v = 0;
    for (int j = lane; j < count; j += 32) {
        qq_u64 w = src[j];
        if (j == tail_word) w &= tail_mask;
        v = op ? (v ^ w) : (v + (qq_u64)__popcll(w));
    }
    for (int off = 16; off; off >>= 1) {
        const qq_u64 o = __shfl_xor_sync(0xFFFFFFFFu, v, off);
        v = op ? (v ^ o) : (v + o);
    }
    if (lane == 0) acc[row] = op ? (acc[row] ^ v) : (acc[row] + v);
}
