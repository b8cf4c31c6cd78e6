// parities.cu: detectors and logical observables reduced on the device from frame mode's records
// (XOR of record rows), so only their bits travel to the host (core/parities.py on the host).
//
// Kernels:
//   record_parities  out[p*out_stride + j] = flip[p] ? ~x : x with x = XOR of rec[r*rec_stride + j]
//                    over r in flat[offsets[p] .. offsets[p+1]), for words j < count.
//                    1-D grid over num_parities * count threads (one word of one parity each,
//                    consecutive threads consecutive words: coalesced); blockDim.x == QQ_PARITY_BLOCK.
//   parities_shot_major, parities_shot_major_band  those parities transposed to Stim's shot-major
//                    bit-packed layout, or made from the records as the transpose reads them (below).
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
// row_bytes = ceil(num_parities / 8) bytes, `pitch` bytes apart (row_bytes: back to back, what the
// host gets in one plain copy; more: a band of the parities of longer rows, whose other bytes are
// left as they are).
// Without `offsets`, `par` holds the parities themselves (num_parities rows of par_stride words:
// record_parities' output, or the records). With `offsets`, `flat` and `flip` (record_parities'
// tables), `par` holds the records and each parity is XORed from them as its tile is read, so
// detection events cost no pass of their own beyond the records' transpose.
// A block takes QQ_TILE_WORDS shot words of QQ_TILE_ROWS 64-parity words (QQ_TILE_GROUPS groups of
// 32 parities: 4 bytes of each shot's row a group). A warp takes QQ_WARP_GROUPS groups: for group g
// lane r loads the tile's words of parity 32g + r (all the groups' loads in flight together), and
// each word's two halves go through the warp's 32x32 bit transpose (qq_transpose32, as frame mode's
// epilogue does), giving 4 bytes of each of the word's 64 shots, staged in shared memory; then each
// shot's QQ_TILE_ROW_BYTES bytes go out, consecutive lanes on consecutive bytes. (It had put each
// output word together bit by bit, 64 shared loads and shifts a word, and written it one byte a
// lane with the lanes a word apart: d = 25's 100k shots spent 8.3 ms of device time there.)
// Grid (ceil(count / QQ_TILE_WORDS), ceil(row_words / QQ_TILE_ROWS)), blockDim.x == QQ_PARITY_BLOCK.
// parities_shot_major_band, the same for frame mode's banded copies, reads the records at L2
// (ld.global.cg), never from a multiprocessor's own cache: it transposes a band of them while the
// frame kernel still writes the next bands, whose lines that cache must not keep.
#define QQ_TILE_WORDS 4
#define QQ_TILE_ROWS 16
#define QQ_TILE_GROUPS (2 * QQ_TILE_ROWS)
#define QQ_TILE_ROW_BYTES (4 * QQ_TILE_GROUPS)
#define QQ_STAGE_PITCH (QQ_TILE_GROUPS + 1)  // words a staged shot row: a warp's 32 shots hit 32 banks
#define QQ_WARP_GROUPS (QQ_TILE_GROUPS / (QQ_PARITY_BLOCK / 32))  // groups a warp takes
static_assert(QQ_WARP_GROUPS * (QQ_PARITY_BLOCK / 32) == QQ_TILE_GROUPS, "a tile's groups share out over its warps");
template <bool AT_L2>
__device__ __forceinline__ qq_u64 qq_record_word(const qq_u64* at) {
    return AT_L2 ? __ldcg(at) : *at;
}

template <bool AT_L2>
__device__ __forceinline__ void qq_parities_shot_major(const qq_u64* __restrict__ par, int par_stride, int num_parities,
                                                       unsigned char* __restrict__ out, int row_bytes, int pitch,
                                                       int count, const int* __restrict__ offsets,
                                                       const int* __restrict__ flat,
                                                       const unsigned char* __restrict__ flip) {
    __shared__ unsigned stage[64 * QQ_TILE_WORDS * QQ_STAGE_PITCH];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j0 = blockIdx.x * QQ_TILE_WORDS, g0 = blockIdx.y * QQ_TILE_GROUPS;
    const int words = min(QQ_TILE_WORDS, count - j0);
    // The warp's groups are loaded together, their loads in flight at once (a group at a time, each
    // had waited for its own chain of loads: offsets, then records, then their words).
    qq_u64 v[QQ_WARP_GROUPS][QQ_TILE_WORDS];
    int p[QQ_WARP_GROUPS];
#pragma unroll
    for (int i = 0; i < QQ_WARP_GROUPS; ++i) {
        p[i] = 32 * (g0 + QQ_WARP_GROUPS * warp + i) + lane;
#pragma unroll
        for (int jl = 0; jl < QQ_TILE_WORDS; ++jl) v[i][jl] = 0ull;
    }
    if (offsets == nullptr) {
#pragma unroll
        for (int i = 0; i < QQ_WARP_GROUPS; ++i) {
            if (p[i] >= num_parities) continue;
            const qq_u64* src = par + (size_t)p[i] * par_stride + j0;
#pragma unroll
            for (int jl = 0; jl < QQ_TILE_WORDS; ++jl)
                if (jl < words) v[i][jl] = qq_record_word<AT_L2>(src + jl);
        }
    } else {
        int at[QQ_WARP_GROUPS], end[QQ_WARP_GROUPS], most = 0;
#pragma unroll
        for (int i = 0; i < QQ_WARP_GROUPS; ++i) {
            const bool in = p[i] < num_parities;
            at[i] = in ? offsets[p[i]] : 0;
            end[i] = in ? offsets[p[i] + 1] : 0;
            const qq_u64 f = in && flip[p[i]] ? ~0ull : 0ull;
#pragma unroll
            for (int jl = 0; jl < QQ_TILE_WORDS; ++jl) v[i][jl] = f;
            most = max(most, end[i] - at[i]);
        }
        for (int k = 0; k < most; ++k) {
#pragma unroll
            for (int i = 0; i < QQ_WARP_GROUPS; ++i) {
                if (at[i] + k >= end[i]) continue;
                const qq_u64* src = par + (size_t)flat[at[i] + k] * par_stride + j0;
#pragma unroll
                for (int jl = 0; jl < QQ_TILE_WORDS; ++jl)
                    if (jl < words) v[i][jl] ^= qq_record_word<AT_L2>(src + jl);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < QQ_WARP_GROUPS; ++i) {
        const int gl = QQ_WARP_GROUPS * warp + i;
#pragma unroll
        for (int jl = 0; jl < QQ_TILE_WORDS; ++jl) {
            stage[(64 * jl + lane) * QQ_STAGE_PITCH + gl] = qq_transpose32((unsigned)v[i][jl], lane);
            stage[(64 * jl + 32 + lane) * QQ_STAGE_PITCH + gl] = qq_transpose32((unsigned)(v[i][jl] >> 32), lane);
        }
    }
    __syncthreads();
    const int bytes = min(QQ_TILE_ROW_BYTES, row_bytes - 4 * g0);  // > 0: the grid's rows hold parities
    const unsigned char* staged = reinterpret_cast<const unsigned char*>(stage);
    for (int s = warp; s < 64 * words; s += QQ_PARITY_BLOCK / 32) {
        unsigned char* row = out + ((size_t)64 * j0 + s) * pitch + 4 * g0;
        const unsigned char* from = staged + (size_t)4 * QQ_STAGE_PITCH * s;
        for (int k = lane; k < bytes; k += 32) row[k] = from[k];
    }
}

extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
parities_shot_major(const qq_u64* __restrict__ par, int par_stride, int num_parities, unsigned char* __restrict__ out,
                    int row_bytes, int pitch, int count, const int* __restrict__ offsets, const int* __restrict__ flat,
                    const unsigned char* __restrict__ flip) {
    qq_parities_shot_major<false>(par, par_stride, num_parities, out, row_bytes, pitch, count, offsets, flat, flip);
}

extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
parities_shot_major_band(const qq_u64* __restrict__ par, int par_stride, int num_parities,
                         unsigned char* __restrict__ out, int row_bytes, int pitch, int count,
                         const int* __restrict__ offsets, const int* __restrict__ flat,
                         const unsigned char* __restrict__ flip) {
    qq_parities_shot_major<true>(par, par_stride, num_parities, out, row_bytes, pitch, count, offsets, flat, flip);
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
