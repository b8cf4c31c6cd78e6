// measured_rows.cu: the reference sample from the measured rows alone (engines/measured_rows.py):
// each collapse reads one row, its qubit's zrow T⁻¹Z_qT, which is Z_q pulled back through the gates
// before it (G† P G, the inverse of a Pauli frame's push) and then taken through the earlier
// collapses. These kernels make the pulled-back rows; the forward sweep over the collapses is the
// tableau's own window plan (measure_window_plan, `side` rows) and rows pass (measure_rows_apply)
// on the measured rows instead of the tableau's.
//
//   pullback_window   one schedule window (rows [start, end): gates and collapses on distinct
//                     qubits) of the backward sweep, last window first. Measurement e's string is
//                     bit e of the sliced planes x[q * words + w], z[q * words + w] (w = e / 64) and
//                     of the signs s[w]. A lane takes a word, its warp every QQ_PULLBACK_WARPS-th
//                     row of the block's QQ_PULLBACK_ROWS (so a warp reads a qubit's 32 words at
//                     once): a gate maps its qubits' bits by qq_pullback_masks and flips the sign by
//                     the parity of the monomials in qq_pullback_signs (the block's flips of a word
//                     XORed into s[w] with one atomic); a collapse starts its measurement's string,
//                     Z_q (the window's collapses are its rows from collapses_from on, measurements
//                     first_event, first_event + 1, ...). Rows of noise and frame parities are skipped (a reference run has no
//                     noise). Only words from first_word on hold strings begun (measurements of this
//                     window or later): a string not begun is the identity, which no gate moves.
//                     grid (ceil((words - first_word) / 32), ceil((end - start) / QQ_PULLBACK_ROWS)).
//   pullback_all      the whole backward sweep in one launch, where a word's strings of every qubit fit
//                     a block's shared memory (16 n bytes) and the words one wave of blocks: block w
//                     takes word w through every window, last first, a barrier between windows (the
//                     windows' launches cost more than their rows at 5k qubits: 110 of them 1.7-2.2
//                     ms, H200); the same planes as pullback_window's, its oracle. grid (words).
//   slices_to_rows    the planes to rows of the measured rows (row e, word v: bits of qubits
//                     64v .. 64v + 63), a 64 x 64 tile a warp by ballots; grid (tiles of qubit
//                     words, tiles of measurement words), QQ_SLICE_WARPS warps a block over the
//                     first.
//   slice_signs       the signs' words to one byte a measured row.
#include "paulis.cuh"
#include "tables.cuh"

#define QQ_PULLBACK_WARPS 8   // a block: 32 words (a lane each) of the measurements' strings ...
#define QQ_PULLBACK_ROWS 64   // ... through this many rows of the window (a warp every eighth)
#define QQ_SLICE_WARPS 8
#define QQ_PULLBACK_ALL_THREADS 1024  // pullback_all's block (its windows' rows spread over them)

// One row of the backward sweep on the strings of word w, whose qubit q's bits are x[q * stride + at],
// z[q * stride + at]: a gate maps its qubits' bits, and its sign flips are returned; a collapse
// (measurement e) starts its string, Z_q, where e is in word w; other rows (noise, frame parities) are
// skipped (a reference run has no noise).
__device__ __forceinline__ qq_u64 qq_pullback_row(const int* row, int e, int w, qq_u64* x, qq_u64* z, size_t stride,
                                                  size_t at) {
    const int op = row[QQ_F_OP], kind = qq_kind[op];
    qq_u64 flip = 0;
    if (kind == QQ_KIND_UNITARY && op != QQ_OP_I) {
        const int arity = qq_arity[op];
        const size_t a = (size_t)row[QQ_F_A] * stride + at, b = arity == 2 ? (size_t)row[QQ_F_B] * stride + at : 0;
        const qq_u64 in[4] = {x[a], z[a], arity == 2 ? x[b] : 0ull, arity == 2 ? z[b] : 0ull};
        qq_u64 out[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int m = qq_pullback_masks[op][j];
            out[j] = ((m & 1) ? in[0] : 0ull) ^ ((m & 2) ? in[1] : 0ull) ^ ((m & 4) ? in[2] : 0ull) ^
                     ((m & 8) ? in[3] : 0ull);
        }
        const unsigned monomials = qq_pullback_signs[op];
        for (int u = 1; u < 16; ++u) {
            if (!((monomials >> u) & 1)) continue;
            qq_u64 t = ~0ull;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if ((u >> j) & 1) t &= in[j];
            flip ^= t;
        }
        x[a] = out[0];
        z[a] = out[1];
        if (arity == 2) {
            x[b] = out[2];
            z[b] = out[3];
        }
    } else if (kind == QQ_KIND_MEASURE || kind == QQ_KIND_RESET || kind == QQ_KIND_MEASURE_RESET) {
        if ((e >> 6) == w) z[(size_t)row[QQ_F_A] * stride + at] |= 1ull << (e & 63);
    }
    return flip;
}

extern "C" __global__ void __launch_bounds__(32 * QQ_PULLBACK_WARPS)
pullback_window(const int* ins, int start, int end, int collapses_from, int first_event, qq_u64* x, qq_u64* z,
                qq_u64* s, int words, int first_word) {
    __shared__ qq_u64 s_flip[QQ_PULLBACK_WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int w = first_word + blockIdx.x * 32 + lane;
    const int i0 = start + blockIdx.y * QQ_PULLBACK_ROWS;
    const int i1 = min(end, i0 + QQ_PULLBACK_ROWS);
    qq_u64 flip = 0;
    for (int i = i0 + warp; i < i1 && w < words; i += QQ_PULLBACK_WARPS)
        flip ^= qq_pullback_row(ins + (size_t)i * QQ_NF, first_event + (i - collapses_from), w, x, z, words, w);
    s_flip[warp][lane] = flip;
    __syncthreads();
    if (warp == 0 && w < words) {
        for (int v = 1; v < QQ_PULLBACK_WARPS; ++v) flip ^= s_flip[v][lane];
        if (flip) atomicXor(&s[w], flip);
    }
}

// The whole sweep, block w the strings of word w: its qubits' bits in shared memory (x then z, n
// words each, zero), every window from the last on (windows[4k ..]: start, end, collapses_from,
// first_event; a window whose first measurement is past word w's is skipped, as pullback_window's grid
// skips it), a window's rows over the block's threads (they are on distinct qubits), a barrier
// between windows; then the bits into the planes and the XOR of the threads' flips into s[w].
extern "C" __global__ void __launch_bounds__(QQ_PULLBACK_ALL_THREADS)
pullback_all(const int* ins, const int* windows, int count, int n, qq_u64* x, qq_u64* z, qq_u64* s, int words) {
    extern __shared__ qq_u64 pullback_smem[];
    __shared__ qq_u64 s_warp[QQ_PULLBACK_ALL_THREADS / 32];
    qq_u64 *xs = pullback_smem, *zs = pullback_smem + n;
    const int w = blockIdx.x, tid = threadIdx.x, threads = blockDim.x;
    for (int q = tid; q < 2 * n; q += threads) pullback_smem[q] = 0;
    __syncthreads();
    qq_u64 flip = 0;
    for (int k = count - 1; k >= 0; --k) {
        const int start = windows[4 * k], end = windows[4 * k + 1], from = windows[4 * k + 2];
        const int first = windows[4 * k + 3];
        if (first > 64 * w + 63) continue;  // (the same for every thread: no barrier skipped by some)
        for (int i = start + tid; i < end; i += threads)
            flip ^= qq_pullback_row(ins + (size_t)i * QQ_NF, first + (i - from), w, xs, zs, 1, 0);
        __syncthreads();
    }
    for (int q = tid; q < n; q += threads) {
        x[(size_t)q * words + w] = xs[q];
        z[(size_t)q * words + w] = zs[q];
    }
    for (int d = 16; d; d >>= 1) flip ^= __shfl_xor_sync(0xFFFFFFFFu, flip, d);
    if ((tid & 31) == 0) s_warp[tid >> 5] = flip;
    __syncthreads();
    if (tid == 0) {
        qq_u64 all = 0;
        for (int v = 0; v < threads / 32; ++v) all ^= s_warp[v];
        s[w] = all;
    }
}

// A 64 x 64 tile: qubits 64v .. 64v + 63 (lanes l and l + 32 load qubit 64v + l and 64v + 32 + l of
// measurement word u), measurements 64u .. 64u + 63; lane l writes the rows of measurements
// 64u + l and 64u + 32 + l (word v of each).
extern "C" __global__ void __launch_bounds__(32 * QQ_SLICE_WARPS)
slices_to_rows(const qq_u64* planes, qq_u64* rows, int n, int count, int words, int W) {
    const int lane = threadIdx.x & 31;
    const int v = blockIdx.x * QQ_SLICE_WARPS + (threadIdx.x >> 5), u = blockIdx.y;
    if (v >= W) return;
    const int q0 = 64 * v + lane, q1 = q0 + 32;
    const qq_u64 lo = q0 < n ? planes[(size_t)q0 * words + u] : 0ull;
    const qq_u64 hi = q1 < n ? planes[(size_t)q1 * words + u] : 0ull;
    qq_u64 mine0 = 0, mine1 = 0;  // the row words of measurements 64u + lane and 64u + 32 + lane
    for (int bit = 0; bit < 64; ++bit) {
        const qq_u64 word = (qq_u64)__ballot_sync(0xFFFFFFFFu, (lo >> bit) & 1) |
                            ((qq_u64)__ballot_sync(0xFFFFFFFFu, (hi >> bit) & 1) << 32);
        if (bit == lane) mine0 = word;
        if (bit == lane + 32) mine1 = word;
    }
    const int e0 = 64 * u + lane, e1 = e0 + 32;
    if (e0 < count) rows[(size_t)e0 * W + v] = mine0;
    if (e1 < count) rows[(size_t)e1 * W + v] = mine1;
}

// The signs' words [words] to one byte a measured row.
extern "C" __global__ void slice_signs(const qq_u64* s, unsigned char* S, int count) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < count) S[e] = (unsigned char)((s[e >> 6] >> (e & 63)) & 1);
}
