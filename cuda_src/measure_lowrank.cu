// measure_lowrank.cu: the random collapses of a measurement window as ONE low-rank update of the
// tableau (window-batched collapse, after paper Algs. 5-8), in gate layout, bit for bit the
// sequential Algorithm 1 (docs/engine-semantics.md). measure_rows_plan (measure_rows.cu) decides the
// window on the measured qubits' rows; this file applies its decisions, QQ_LR_CHUNK collapses a
// pass (the chunks of a window run in order). The NumPy twin is TableauState._window_update.
//
// Algebra: split the columns into the chunk's pivots P and the rest N. On N, z never changes and x
// changes only by the CX fans: x_N ^= sum_i alpha_i v_i^N, alpha_i = the row's x at p_i when collapse
// i runs. So a row needs, from before the chunk, its bits on P and per collapse
// a_i = |z & v_i^N| mod 4 and b_i = |x & z & v_i^N| mod 2 (pass 1); a sequential phase on those few
// bits gives the alpha_i, the final bits on P and every sign term but the pairs' share, which is
// sum_{t in N} z_t C(c_t, 2) with c = sum_i alpha_i v_i^N; pass 2 forms c mod 4 and applies
// x_N ^= bit0(c), s ^= |z & bit1(c)|.
//   pass 1 is two bit-matrix products, (z) and (x & z) times the victim masks, on the tensor cores
//          (WMMA b1 AND + POPC: 8 rows x 8 collapses x 128 columns an instruction);
//   pass 2 is Method-of-Four-Russians lookups: per word and 4 collapses, a table of the 16 sums mod
//          4 (two bit planes over the word's 64 columns) of their victim masks, built in shared
//          memory; a row adds the entries its alpha nibbles pick, giving c mod 4 for the word.
// Both passes read a row 128 bytes at a time. Pass 2 goes by tiles of columns, so that a block builds
// its tables once for thousands of rows and writes whole lines: a thread a row, 32 bytes a step, it
// ran at 36% of the copy bandwidth (H100, n = 100k, 7 collapses), by tiles at 67%.
//
// Kernels, per chunk of at most QQ_LR_CHUNK collapses (plan entries c0 .. c0+kc-1 of the window):
//   lowrank_prepare  one block: the chunk's distinct pivots (P), the victim masks without them (VN,
//                    QQ_LR_CHUNK rows of W words, zero for deterministic collapses), their bits at
//                    the pivots (vp), the span of words any victim or pivot holds; for the first
//                    chunk also the rows whose sign a reset of the window clears mid-window
//                    (`special`): the update leaves them and measure_rows_apply replays them one
//                    collapse at a time.
//   lowrank_counts   pass 1 and the phase: a warp per 8 rows, QQ_LR_COUNT_ROWS rows a block; per
//                    step of QQ_LR_COUNT_STEP words the block stages its rows' z and x & z words and
//                    the victim words (loaded a step ahead) in shared memory and the warps
//                    multiply; then a thread a row runs the phase (qq_lr_phase): the row's sign, and
//                    rowbits[3r..3r+2] = (alpha, its bits on P after the chunk: x, z).
//   lowrank_apply    pass 2 by tiles of QQ_LR_TILE words x rows_per_block rows: the tile's tables
//                    once, then a quarter-warp a row (below); it also writes the pivot bits.
// Gate layout: X[r*W + w], Z[r*W + w]; S[r]; rows 0..n-1 xrow, n..2n-1 zrow (gates.cu).
#include <mma.h>
#include "paulis.cuh"
#include "measure_swap.cuh"
#include "measure_plan.cuh"

#define QQ_LR_CHUNK 128  // collapses a pass: a window of up to 128 collapses reads the tableau twice
#define QQ_LR_WORDS (QQ_LR_CHUNK / 64)  // words of a per-collapse (or per-pivot) bit set
#define QQ_LR_ROWBITS (3 * QQ_LR_WORDS)  // lowrank_counts' words a row for lowrank_apply: alpha, x_P, z_P
#define QQ_LR_PREP_BLOCK 1024
#define QQ_LR_COUNT_BLOCK 256
#define QQ_LR_COUNT_ROWS ((QQ_LR_COUNT_BLOCK >> 5) * 8)  // a warp per 8 rows
#define QQ_LR_COUNT_STEP 16                               // words a step: 128 bytes of a row
#define QQ_LR_COUNT_LD (64 + 4)  // a row's counts of 64 collapses; the padding spreads reads over banks
#define QQ_LR_APPLY_BLOCK 1024  // one block a multiprocessor holds 128 collapses' tables (128 KiB)
#define QQ_LR_TILE 16              // words of a row pass 2 takes a tile (a quarter-warp: 8 lanes x 2)
#define QQ_LR_APPLY_ROWS 2         // rows a quarter-warp has in flight
#define QQ_LR_APPLY_MAX_ROWS 4096  // rows of a block at most (their sign bits in shared memory)
#define QQ_LR_META_KP 0
#define QQ_LR_META_LO 1
#define QQ_LR_META_HI 2
#define QQ_LR_META_SPECIAL 3
#define QQ_LR_META_FIELDS 4

// A bit per collapse or per pivot column of a chunk.
typedef unsigned __int128 qq_lr_bits;
static_assert(QQ_LR_CHUNK % 64 == 0 && QQ_LR_CHUNK <= 128, "a chunk's bits fit qq_lr_bits");
__device__ __forceinline__ int qq_lr_popc(qq_lr_bits v) { return qq_popc((qq_u64)v) + qq_popc((qq_u64)(v >> 64)); }
__device__ __forceinline__ int qq_lr_bit(qq_lr_bits v, int j) { return (int)((v >> j) & 1u); }

extern "C" __global__ void __launch_bounds__(QQ_LR_PREP_BLOCK)
lowrank_prepare(const int* plan, const qq_u64* V, int c0, int kc, int k, int n, int W, qq_u64* onpiv, qq_u64* VN,
                int* meta, int* pcol, int* pivots, qq_u64* vp, int* special) {
    __shared__ int s_piv[QQ_LR_CHUNK], s_col[QQ_LR_CHUNK], s_kp, s_lo, s_hi;
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK * QQ_LR_WORDS];  // collapse i's victims on P: words [i W_LR, (i + 1) W_LR)
    const int tid = threadIdx.x;
    for (int w = tid; w < W; w += blockDim.x) onpiv[w] = 0ull;
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += blockDim.x) s_vp[e] = 0ull;
    if (tid == 0) {  // pivots in order of first use; a repeated pivot keeps its column of P
        int kp = 0;
        for (int i = 0; i < kc; ++i) {
            const int* pl = plan + QQ_PLAN_FIELDS * (c0 + i);
            int col = -1;
            if (pl[QQ_PLAN_ACTIVE]) {
                const int p = pl[QQ_PLAN_P];
                for (int j = 0; j < kp; ++j)
                    if (s_piv[j] == p) col = j;
                if (col < 0) {
                    col = kp;
                    s_piv[kp++] = p;
                }
            }
            s_col[i] = col;
        }
        s_kp = kp;
        s_lo = W;
        s_hi = 0;
        if (c0 == 0) {  // the window's reset rows, two per reset, in program order
            int count = 0;
            for (int i = 0; i < k; ++i) {
                const int* pl = plan + QQ_PLAN_FIELDS * i;
                if (pl[QQ_PLAN_RESET]) {
                    special[count++] = pl[QQ_PLAN_Q];
                    special[count++] = n + pl[QQ_PLAN_Q];
                }
            }
            meta[QQ_LR_META_SPECIAL] = count;
        }
    }
    __syncthreads();
    const int kp = s_kp;
    if (tid < kp) atomicOr(&onpiv[s_piv[tid] >> 6], 1ull << (s_piv[tid] & 63));
    __syncthreads();  // onpiv complete (global writes of this block are visible after the barrier)
    for (int e = tid; e < kc * kp; e += blockDim.x) {
        const int i = e / kp, j = e % kp, p = s_piv[j];
        if (s_col[i] >= 0 && ((V[(size_t)(c0 + i) * W + (p >> 6)] >> (p & 63)) & 1ull))
            atomicOr(&s_vp[QQ_LR_WORDS * i + (j >> 6)], 1ull << (j & 63));
    }
    int lo = W, hi = 0;
    for (size_t e = tid; e < (size_t)QQ_LR_CHUNK * W; e += blockDim.x) {
        const int i = (int)(e / W), w = (int)(e % W);
        qq_u64 v = 0ull;
        if (i < kc && s_col[i] >= 0) v = V[(size_t)(c0 + i) * W + w] & ~onpiv[w];
        VN[e] = v;
        if (v) {
            lo = min(lo, w);
            hi = max(hi, w + 1);
        }
    }
    if (tid < kp) {  // the pivots' words too: pass 2 writes the pivot bits
        lo = min(lo, s_piv[tid] >> 6);
        hi = max(hi, (s_piv[tid] >> 6) + 1);
    }
    if (lo < hi) {
        atomicMin(&s_lo, lo);
        atomicMax(&s_hi, hi);
    }
    __syncthreads();
    if (tid < QQ_LR_CHUNK) {
        pcol[tid] = tid < kc ? s_col[tid] : -1;
        pivots[tid] = tid < kp ? s_piv[tid] : 0;
    }
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += blockDim.x) vp[e] = s_vp[e];
    if (tid == 0) {
        meta[QQ_LR_META_KP] = kp;
        meta[QQ_LR_META_LO] = s_lo < s_hi ? s_lo : 0;
        meta[QQ_LR_META_HI] = s_lo < s_hi ? s_hi : 0;
    }
}

// The phase of row r after pass 1: each collapse of the chunk in order on the row's bits at the
// pivots, from the low bits of its counts (a_i = |z & v_i^N| mod 4 as alo, ahi; b_i = |x & z & v_i^N|
// mod 2; bit i for collapse i). Writes the row's sign (all but pass 2's share) and its
// QQ_LR_ROWBITS words of rowbits: alpha, then its bits on P as the phase leaves them (x, then z).
// Rows whose sign a reset clears mid-window (`special`) keep everything (alpha 0, their own bits):
// measure_rows_apply replays them. The chunk's decisions are in shared memory.
__device__ __forceinline__ void qq_lr_phase(const qq_u64* X, const qq_u64* Z, unsigned char* S, qq_lr_bits alo,
                                            qq_lr_bits ahi, qq_lr_bits b, const int* s_col, const int* s_piv,
                                            const qq_u64* s_vp, const int* s_yz, const int* s_inject,
                                            const int* special, int nspecial, int kp, int kc, size_t r, int W,
                                            qq_u64* rowbits) {
    qq_lr_bits xP = 0, zP = 0, alpha = 0;
    for (int j = 0; j < kp; ++j) {
        const int p = s_piv[j];
        const size_t a = r * W + (p >> 6);
        xP |= (qq_lr_bits)((X[a] >> (p & 63)) & 1ull) << j;
        zP |= (qq_lr_bits)((Z[a] >> (p & 63)) & 1ull) << j;
    }
    bool live = true;
    for (int e = 0; e < nspecial; ++e)
        if ((size_t)special[e] == r) live = false;
    if (live) {
        int s = S[r];
        for (int i = 0; i < kc; ++i) {
            const int j = s_col[i];
            if (j < 0) continue;  // deterministic: nothing to do here (resets: the special rows)
            const int xp = qq_lr_bit(xP, j), zp = qq_lr_bit(zP, j);
            qq_lr_bits v = s_vp[QQ_LR_WORDS * i];
            if (QQ_LR_WORDS > 1) v |= (qq_lr_bits)s_vp[QQ_LR_WORDS * i + QQ_LR_WORDS - 1] << 64;
            const int m = (qq_lr_bit(alo, i) | (qq_lr_bit(ahi, i) << 1)) + qq_lr_popc(zP & v);
            const int y = qq_lr_bit(b, i) ^ (qq_lr_popc(xP & zP & v) & 1);
            s ^= xp & (y ^ ((m & 1) & (1 ^ zp)) ^ ((m >> 1) & 1));
            if (xp) xP ^= v;
            int bx = xp, bz = zp ^ (m & 1);
            qq_swap_pivot(s_yz[i], &bx, &bz, &s);
            if (s_inject[i]) qq_inject_x(bz, &s);
            const qq_lr_bits bit = (qq_lr_bits)1 << j;
            xP = bx ? xP | bit : xP & ~bit;
            zP = bz ? zP | bit : zP & ~bit;
            alpha |= (qq_lr_bits)xp << i;
        }
        S[r] = (unsigned char)s;
    }
    qq_u64* out = rowbits + (size_t)QQ_LR_ROWBITS * r;
#pragma unroll
    for (int k = 0; k < QQ_LR_WORDS; ++k) {
        out[k] = (qq_u64)(alpha >> (64 * k));
        out[QQ_LR_WORDS + k] = (qq_u64)(xP >> (64 * k));
        out[2 * QQ_LR_WORDS + k] = (qq_u64)(zP >> (64 * k));
    }
}

// Pass 1 on the tensor cores. Operands in shared memory, tiles of 128 columns: A = 8 of the block's
// rows (row-major: a row's columns contiguous), B = 8 victim masks (column-major: a collapse's
// columns contiguous), both our word layout, so the bit order inside a word never matters to
// AND + POPC; accumulated in int32.
namespace qq_wmma = nvcuda::wmma;
typedef qq_wmma::fragment<qq_wmma::matrix_a, 8, 8, 128, qq_wmma::experimental::precision::b1, qq_wmma::row_major>
    qq_bits_a;
typedef qq_wmma::fragment<qq_wmma::matrix_b, 8, 8, 128, qq_wmma::experimental::precision::b1, qq_wmma::col_major>
    qq_bits_b;
typedef qq_wmma::fragment<qq_wmma::accumulator, 8, 8, 128, int> qq_counts;

// A step's unit m of this thread: 16 bytes (two words, 128 columns: one operand row of a product) of
// row 8 warp + lane % 8, half lane / 8 + 4 m of the step. A quarter-warp's loads take 64 bytes of each
// of 8 rows, its shared-memory stores 128 contiguous bytes (no bank conflict).
__device__ __forceinline__ void qq_lr_unit(int tid, int m, int* row, int* half) {
    const int lane = tid & 31;
    *row = 8 * (tid >> 5) + (lane & 7);
    *half = (lane >> 3) + 4 * m;
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK)
lowrank_counts(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN, const int* meta,
               const int* pcol, const int* pivots, const qq_u64* vp, const int* special, const int* active,
               qq_u64* rowbits, int c0, int kc, int n, int W) {
    // Staged as [half][row][2 words] (16-byte units): each operand tile (8 rows x 128 columns)
    // contiguous and 256-bit aligned. The counts at the end, [row][collapse], reuse the space.
    constexpr int halves = QQ_LR_COUNT_STEP / 2;
    constexpr int staged = 16 * halves * (2 * QQ_LR_COUNT_ROWS + QQ_LR_CHUNK);
    constexpr int counted = 4 * 2 * QQ_LR_COUNT_ROWS * QQ_LR_COUNT_LD;
    __shared__ __align__(32) unsigned char smem[staged > counted ? staged : counted];
    __shared__ int s_col[QQ_LR_CHUNK], s_piv[QQ_LR_CHUNK], s_yz[QQ_LR_CHUNK], s_inject[QQ_LR_CHUNK];
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK * QQ_LR_WORDS];
    ulonglong2* zs = (ulonglong2*)smem;  // unit (half h, row r) at h * ROWS + r
    ulonglong2* xzs = zs + halves * QQ_LR_COUNT_ROWS;
    ulonglong2* vs = xzs + halves * QQ_LR_COUNT_ROWS;  // unit (h, collapse i) at h * CHUNK + i
    int* cz = (int*)smem;
    int* cxz = cz + QQ_LR_COUNT_ROWS * QQ_LR_COUNT_LD;
    const int kp = meta[QQ_LR_META_KP];
    if (*active == 0 || kp == 0) return;  // uniform: nothing random in this chunk
    const int lo = meta[QQ_LR_META_LO], hi = meta[QQ_LR_META_HI];
    const int tid = threadIdx.x, warp = tid >> 5, tiles = (kc + 7) >> 3;
    const size_t R = (size_t)2 * n, r0 = (size_t)blockIdx.x * QQ_LR_COUNT_ROWS;
    const int rows = (int)min((size_t)QQ_LR_COUNT_ROWS, R - r0);
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += QQ_LR_COUNT_BLOCK) s_vp[e] = vp[e];
    if (tid < QQ_LR_CHUNK) {
        s_col[tid] = pcol[tid];
        s_piv[tid] = pivots[tid];
        const int* pl = plan + QQ_PLAN_FIELDS * (c0 + min(tid, kc - 1));
        s_yz[tid] = pl[QQ_PLAN_YZ];
        s_inject[tid] = pl[QQ_PLAN_INJECT];
    }
    constexpr int per = QQ_LR_COUNT_ROWS * halves / QQ_LR_COUNT_BLOCK;  // row units a thread
    constexpr int vper = per * (QQ_LR_CHUNK / QQ_LR_COUNT_ROWS);          // victim units: rows' mapping, repeated
    constexpr int ctiles = QQ_LR_CHUNK / 8;
    static_assert(per * QQ_LR_COUNT_BLOCK == QQ_LR_COUNT_ROWS * halves && QQ_LR_COUNT_BLOCK / 32 * 8 == QQ_LR_COUNT_ROWS &&
                      halves == 4 * per && QQ_LR_CHUNK % QQ_LR_COUNT_ROWS == 0 && QQ_LR_COUNT_ROWS == 64,
                  "a block's units: 8 rows a warp, 4 halves a quarter-warp step; 64 collapses a part of the counts");
    ulonglong2 pz[per], pxz[per], pv[vper];
    qq_counts acc_z[ctiles], acc_xz[ctiles];
#pragma unroll
    for (int t = 0; t < ctiles; ++t) {
        qq_wmma::fill_fragment(acc_z[t], 0);
        qq_wmma::fill_fragment(acc_xz[t], 0);
    }
    auto word = [&](const qq_u64* M, size_t r, int w) { return w < hi ? M[r * W + w] : 0ull; };
    auto fetch = [&](int w0) {  // the step's units into registers (zero past the rows or the span)
#pragma unroll
        for (int m = 0; m < per; ++m) {
            int row, h;
            qq_lr_unit(tid, m, &row, &h);
            const int w = w0 + 2 * h;
            pz[m] = pxz[m] = make_ulonglong2(0ull, 0ull);
            if (row < rows) {
                const size_t r = r0 + row;
                pz[m] = make_ulonglong2(word(Z, r, w), word(Z, r, w + 1));
                pxz[m] = make_ulonglong2(word(X, r, w) & pz[m].x, word(X, r, w + 1) & pz[m].y);
            }
        }
#pragma unroll
        for (int m = 0; m < vper; ++m) {
            int i, h;
            qq_lr_unit(tid, m % per, &i, &h);
            i += QQ_LR_COUNT_ROWS * (m / per);  // collapse i
            const int w = w0 + 2 * h;
            pv[m] = make_ulonglong2(0ull, 0ull);
            if (i < kc) pv[m] = make_ulonglong2(word(VN, i, w), word(VN, i, w + 1));
        }
    };
    if (lo < hi) fetch(lo);
    for (int w0 = lo; w0 < hi; w0 += QQ_LR_COUNT_STEP) {
        __syncthreads();  // the previous step's products are done
#pragma unroll
        for (int m = 0; m < per; ++m) {
            int row, h;
            qq_lr_unit(tid, m, &row, &h);
            zs[h * QQ_LR_COUNT_ROWS + row] = pz[m];
            xzs[h * QQ_LR_COUNT_ROWS + row] = pxz[m];
        }
#pragma unroll
        for (int m = 0; m < vper; ++m) {
            int i, h;
            qq_lr_unit(tid, m % per, &i, &h);
            vs[h * QQ_LR_CHUNK + i + QQ_LR_COUNT_ROWS * (m / per)] = pv[m];
        }
        if (w0 + QQ_LR_COUNT_STEP < hi) fetch(w0 + QQ_LR_COUNT_STEP);
        __syncthreads();
#pragma unroll
        for (int h = 0; h < halves; ++h) {  // 128 columns a product
            qq_bits_a a_z, a_xz;
            qq_wmma::load_matrix_sync(a_z, (const void*)(zs + h * QQ_LR_COUNT_ROWS + 8 * warp), 128);
            qq_wmma::load_matrix_sync(a_xz, (const void*)(xzs + h * QQ_LR_COUNT_ROWS + 8 * warp), 128);
#pragma unroll
            for (int t = 0; t < ctiles; ++t) {
                if (t >= tiles) break;
                qq_bits_b b;
                qq_wmma::load_matrix_sync(b, (const void*)(vs + h * QQ_LR_CHUNK + 8 * t), 128);
                qq_wmma::bmma_sync(acc_z[t], a_z, b, acc_z[t], qq_wmma::experimental::bmmaBitOpAND,
                                   qq_wmma::experimental::bmmaAccumulateOpPOPC);
                qq_wmma::bmma_sync(acc_xz[t], a_xz, b, acc_xz[t], qq_wmma::experimental::bmmaBitOpAND,
                                   qq_wmma::experimental::bmmaAccumulateOpPOPC);
            }
        }
    }
    // The counts' low bits, 64 collapses (8 tiles) at a time through shared memory (in the staging's place).
    qq_lr_bits alo = 0, ahi = 0, b = 0;
#pragma unroll
    for (int part = 0; part < QQ_LR_CHUNK / 64; ++part) {
        __syncthreads();  // every warp's products (or the previous part's reads) are done
#pragma unroll
        for (int t = 0; t < 8; ++t) {  // counts[row][i]
            qq_wmma::store_matrix_sync(cz + (8 * warp) * QQ_LR_COUNT_LD + 8 * t, acc_z[8 * part + t], QQ_LR_COUNT_LD,
                                       qq_wmma::mem_row_major);
            qq_wmma::store_matrix_sync(cxz + (8 * warp) * QQ_LR_COUNT_LD + 8 * t, acc_xz[8 * part + t], QQ_LR_COUNT_LD,
                                       qq_wmma::mem_row_major);
        }
        __syncthreads();
        if (tid < rows)
            for (int i = 0; i < 64 && 64 * part + i < kc; ++i) {
                const int a = cz[tid * QQ_LR_COUNT_LD + i], c = cxz[tid * QQ_LR_COUNT_LD + i], at = 64 * part + i;
                alo |= (qq_lr_bits)(a & 1) << at;
                ahi |= (qq_lr_bits)((a >> 1) & 1) << at;
                b |= (qq_lr_bits)(c & 1) << at;
            }
    }
    if (tid < rows)
        qq_lr_phase(X, Z, S, alo, ahi, b, s_col, s_piv, s_vp, s_yz, s_inject, special, meta[QQ_LR_META_SPECIAL], kp,
                    kc, r0 + tid, W, rowbits);
}

// Pass 2, by tiles of columns: block (t, g) takes words [lo + QQ_LR_TILE t, + QQ_LR_TILE) of rows
// [g rows_per_block, + rows_per_block). It builds the tile's tables once (dynamic shared memory, 4 KiB
// a group of 4 collapses: entry (group, idx) holds, for each word of the tile, the sum mod 4 of the
// victim words v_{4 group + b} over the bits b of idx, as two bit planes), then a quarter-warp a row,
// lane wl on words wl and wl + 8 (64 bytes of the row a load instruction): c = the entries its alpha
// nibbles pick; x ^= bit0(c); the pivot bits as the phase left them (rowbits) on the tile's pivot
// columns (z too, there only); the row's sign parity |z & bit1(c)| summed over the quarter-warp by a
// ballot, kept per row in shared memory and XORed into S four rows a word at the end (several tiles
// share a row's sign). The lookups are the kernel's arithmetic: a lane's two words share one index
// and take one 16-byte load a plane, and the groups are unrolled, so an entry's address is a shift,
// a mask and an add (ALU-bound at 22 instructions a group and word before: H100, n = 100k).
#define QQ_LR_LANE_WORDS 2                               // words of a tile row a lane takes
#define QQ_LR_ROW_LANES (QQ_LR_TILE / QQ_LR_LANE_WORDS)  // lanes a row
#define QQ_LR_ENTRY_WORDS (2 * QQ_LR_TILE)               // an entry: both planes of the tile's words
static_assert(QQ_LR_TILE == 16 && QQ_LR_ENTRY_WORDS * 8 == 256, "an entry is 256 bytes: index << 8 is its offset");

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply(qq_u64* X, qq_u64* Z, unsigned char* S, const qq_u64* VN, const qq_u64* rowbits, const int* meta,
              const int* pivots, const int* active, int kc, int n, int W, int rows_per_block) {
    extern __shared__ __align__(16) qq_u64 qq_lr_tab[];  // [group][idx][plane][wl][h]: word wl + 8 h
    __shared__ unsigned s_sign[QQ_LR_APPLY_MAX_ROWS / 32];
    __shared__ int s_np, s_pw[QQ_LR_CHUNK], s_pb[QQ_LR_CHUNK], s_pj[QQ_LR_CHUNK];
    const int kp = meta[QQ_LR_META_KP];
    if (*active == 0 || kp == 0) return;  // uniform: nothing random in this chunk
    const int lo = meta[QQ_LR_META_LO], hi = meta[QQ_LR_META_HI];
    const int w0 = lo + (int)blockIdx.x * QQ_LR_TILE;
    if (w0 >= hi) return;  // the grid covers every word; the span is known on the device only
    const int tid = threadIdx.x, groups = (kc + 3) >> 2;
    for (int e = tid; e < groups * QQ_LR_TILE; e += QQ_LR_APPLY_BLOCK) {  // a thread a (group, word)
        const int g = e / QQ_LR_TILE, wt = e % QQ_LR_TILE, w = w0 + wt;
        const int at = (wt % QQ_LR_ROW_LANES) * QQ_LR_LANE_WORDS + wt / QQ_LR_ROW_LANES;
        qq_u64 v[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) v[b] = (4 * g + b < kc && w < hi) ? VN[(size_t)(4 * g + b) * W + w] : 0ull;
#pragma unroll
        for (int idx = 0; idx < 16; ++idx) {
            qq_u64 clo = 0ull, chi = 0ull;
#pragma unroll
            for (int b = 0; b < 4; ++b)
                if ((idx >> b) & 1) {
                    chi ^= clo & v[b];
                    clo ^= v[b];
                }
            qq_u64* entry = qq_lr_tab + (size_t)(g * 16 + idx) * QQ_LR_ENTRY_WORDS;
            entry[at] = clo;
            entry[QQ_LR_TILE + at] = chi;
        }
    }
    if (tid == 0) s_np = 0;
    for (int i = tid; i < QQ_LR_APPLY_MAX_ROWS / 32; i += QQ_LR_APPLY_BLOCK) s_sign[i] = 0u;
    __syncthreads();
    if (tid < kp) {  // the pivots in this tile
        const int p = pivots[tid], wt = (p >> 6) - w0;
        if (wt >= 0 && wt < QQ_LR_TILE) {
            const int at = atomicAdd(&s_np, 1);
            s_pw[at] = wt;
            s_pb[at] = p & 63;
            s_pj[at] = tid;
        }
    }
    __syncthreads();
    const int np = s_np, lane = tid & 31, wl = lane % QQ_LR_ROW_LANES, quarter = lane / QQ_LR_ROW_LANES;
    const int slot = (32 / QQ_LR_ROW_LANES) * (tid >> 5) + quarter, slots = QQ_LR_APPLY_BLOCK / QQ_LR_ROW_LANES;
    bool in_span[QQ_LR_LANE_WORDS];
#pragma unroll
    for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) in_span[h] = w0 + wl + QQ_LR_ROW_LANES * h < hi;
    const unsigned char* tab = (const unsigned char*)qq_lr_tab + 8 * QQ_LR_LANE_WORDS * wl;
    const size_t rb = (size_t)blockIdx.y * rows_per_block;
    const int rows = (int)min((size_t)rows_per_block, (size_t)2 * n - rb);
    for (int base = 0; base < rows; base += slots * QQ_LR_APPLY_ROWS) {
        unsigned al[QQ_LR_APPLY_ROWS][2 * QQ_LR_WORDS];
        qq_u64 x[QQ_LR_APPLY_ROWS][QQ_LR_LANE_WORDS], z[QQ_LR_APPLY_ROWS][QQ_LR_LANE_WORDS];
#pragma unroll
        for (int u = 0; u < QQ_LR_APPLY_ROWS; ++u) {  // every load first: several rows in flight
            const int l = base + u * slots + slot;
            const size_t r = rb + l;
#pragma unroll
            for (int k = 0; k < QQ_LR_WORDS; ++k) {
                const qq_u64 a = l < rows ? rowbits[QQ_LR_ROWBITS * r + k] : 0ull;
                al[u][2 * k] = (unsigned)a;
                al[u][2 * k + 1] = (unsigned)(a >> 32);
            }
#pragma unroll
            for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                const size_t a = r * W + w0 + wl + QQ_LR_ROW_LANES * h;
                x[u][h] = l < rows && in_span[h] ? X[a] : 0ull;
                z[u][h] = l < rows && in_span[h] ? Z[a] : 0ull;
            }
        }
#pragma unroll
        for (int u = 0; u < QQ_LR_APPLY_ROWS; ++u) {
            const int l = base + u * slots + slot;
            const size_t r = rb + l;
            qq_u64 clo[QQ_LR_LANE_WORDS] = {}, chi[QQ_LR_LANE_WORDS] = {};
#pragma unroll
            for (int g = 0; g < QQ_LR_CHUNK / 4; ++g) {
                if (g >= groups) break;
                const int sh = 4 * (g & 7);  // the nibble's offset, as index << 8, without a variable shift
                const unsigned word = al[u][g >> 3];
                const unsigned off = (sh >= 8 ? word >> (sh - 8) : word << (8 - sh)) & 0xF00u;
                const unsigned char* entry = tab + off + 4096 * g;
                const ulonglong2 elo = *(const ulonglong2*)entry, ehi = *(const ulonglong2*)(entry + 8 * QQ_LR_TILE);
                chi[0] ^= ehi.x ^ (clo[0] & elo.x);
                chi[1] ^= ehi.y ^ (clo[1] & elo.y);
                clo[0] ^= elo.x;
                clo[1] ^= elo.y;
            }
            int parity = 0;
            const qq_u64* bits = rowbits + QQ_LR_ROWBITS * r;
#pragma unroll
            for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                const int wt = wl + QQ_LR_ROW_LANES * h;
                parity ^= qq_popc(z[u][h] & chi[h]);
                qq_u64 xw = x[u][h] ^ clo[h], zw = z[u][h];
                if (l < rows)
                    for (int k = 0; k < np; ++k)
                        if (s_pw[k] == wt) {
                            const int j = s_pj[k];
                            const qq_u64 bit = 1ull << s_pb[k];
                            xw = (xw & ~bit) | (((bits[QQ_LR_WORDS + (j >> 6)] >> (j & 63)) & 1ull) ? bit : 0ull);
                            zw = (zw & ~bit) | (((bits[2 * QQ_LR_WORDS + (j >> 6)] >> (j & 63)) & 1ull) ? bit : 0ull);
                        }
                if (l < rows && in_span[h]) {
                    const size_t a = r * W + w0 + wt;
                    if (xw != x[u][h]) X[a] = xw;
                    if (zw != z[u][h]) Z[a] = zw;
                }
            }
            const unsigned votes = __ballot_sync(0xFFFFFFFFu, parity & 1) >> (QQ_LR_ROW_LANES * quarter);
            if (wl == 0 && l < rows && (qq_popc((qq_u64)(votes & ((1u << QQ_LR_ROW_LANES) - 1))) & 1))
                atomicXor(&s_sign[l >> 5], 1u << (l & 31));
        }
    }
    __syncthreads();
    for (int q = tid; 4 * q < rows; q += QQ_LR_APPLY_BLOCK) {  // S is padded to whole words
        const int l = 4 * q;
        unsigned flips = 0u;
        for (int b = 0; b < 4 && l + b < rows; ++b) flips |= ((s_sign[(l + b) >> 5] >> ((l + b) & 31)) & 1u) << (8 * b);
        if (flips) atomicXor((unsigned*)(S + rb + l), flips);
    }
}
