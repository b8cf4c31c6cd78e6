// parities.cu: detectors and logical observables reduced on the device from frame mode's records
// (XOR of record rows), so only their bits travel to the host (core/parities.py on the host).
//
// Kernels:
//   record_parities  out[p*out_stride + j] = flip[p] ? ~x : x with x = XOR of rec[r*rec_stride + j]
//                    over r in flat[offsets[p] .. offsets[p+1]), for words j < count.
//                    1-D grid over num_parities * count threads (one word of one parity each,
//                    consecutive threads consecutive words: coalesced); blockDim.x == QQ_PARITY_BLOCK.
//   parities_shot_major  those parities transposed to Stim's shot-major bit-packed layout, or made
//                    from the records as the transpose reads them (below).
//   rows_reduce      each row of a chunk (records or parities) folded into one word, added into
//                    acc[row] across the chunks of a call (below).
#include "parity_rows.cuh"

#define QQ_PARITY_BLOCK 256

extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
record_parities(const qq_u64* rec, int rec_stride, const int* offsets, const int* flat, const unsigned char* flip,
                qq_u64* out, int out_stride, int num_parities, int count) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)num_parities * count) return;
    const int p = (int)(idx / count), j = (int)(idx % count);
    out[(size_t)p * out_stride + j] = qq_parity_word(rec, rec_stride, offsets, flat, flip, p, j);
}

// parities_shot_major: parities laid out shot by shot as Stim's bit-packed samples: for shot
// 64*j + l of the chunk, byte k of its row holds parities 8k..8k+7 (bit i = parity 8k+i), rows of
// row_bytes = ceil(num_parities / 8) bytes back to back (what the host gets, one plain copy).
// Without `offsets`, `par` holds the parities themselves (num_parities rows of par_stride words:
// record_parities' output, or the records). With `offsets`, `flat` and `flip` (record_parities'
// tables), `par` holds the records and each parity is XORed from them as its tile is read, so
// detection events cost no pass of their own beyond the records' transpose. A block transposes a
// tile of QQ_TILE_WORDS shot words by QQ_TILE_ROWS 64-parity words through shared memory: reads of
// par are whole sectors (QQ_TILE_WORDS consecutive words of a row), writes are QQ_TILE_ROWS * 8
// consecutive bytes of a shot's row, and the tile's rows are padded so the gather is free of bank
// conflicts. Grid (ceil(count / QQ_TILE_WORDS), ceil(row_words / QQ_TILE_ROWS)), blockDim.x == QQ_PARITY_BLOCK.
#define QQ_TILE_WORDS 4
#define QQ_TILE_ROWS 16
extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
parities_shot_major(const qq_u64* par, int par_stride, int num_parities, unsigned char* out, int row_bytes,
                    int count, const int* offsets, const int* flat, const unsigned char* flip) {
    __shared__ qq_u64 tile[QQ_TILE_ROWS][64 * QQ_TILE_WORDS + 1];
    const int j0 = blockIdx.x * QQ_TILE_WORDS, b0 = blockIdx.y * QQ_TILE_ROWS;
    for (int t = threadIdx.x; t < QQ_TILE_ROWS * 64 * QQ_TILE_WORDS; t += blockDim.x) {
        const int jl = t % QQ_TILE_WORDS, r = t / QQ_TILE_WORDS;  // r: parity 64*b0 + r
        const int p = 64 * b0 + r, j = j0 + jl;
        qq_u64 x = 0ull;
        if (p < num_parities && j < count) {
            x = offsets == nullptr ? par[(size_t)p * par_stride + j]
                                   : qq_parity_word(par, par_stride, offsets, flat, flip, p, j);
        }
        tile[r >> 6][(r & 63) * QQ_TILE_WORDS + jl] = x;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < 64 * QQ_TILE_WORDS * QQ_TILE_ROWS; t += blockDim.x) {
        const int bl = t % QQ_TILE_ROWS, s = t / QQ_TILE_ROWS;  // parity word b0 + bl of local shot s
        const int jl = s >> 6, l = s & 63, b = b0 + bl;
        const int bytes = min(8, row_bytes - 8 * b);
        if (j0 + jl >= count || bytes <= 0) continue;
        const qq_u64* column = &tile[bl][jl];
        qq_u64 y = 0;
#pragma unroll 8
        for (int i = 0; i < 64; ++i) y |= ((column[i * QQ_TILE_WORDS] >> l) & 1ull) << i;
        unsigned char* row = out + ((size_t)64 * (j0 + jl) + l) * row_bytes + 8 * b;
        for (int k = 0; k < bytes; ++k) row[k] = (unsigned char)(y >> (8 * k));
    }
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
