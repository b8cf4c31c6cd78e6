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
//          (WMMA b1 AND + POPC: 8 rows x 8 collapses x 128 columns an instruction); only the counts'
//          low bits are kept, three words a row;
//   pass 2 is Method-of-Four-Russians lookups: per word and 4 collapses, a table of the 16 sums mod
//          4 (two bit planes over the word's 64 columns) of their victim masks, built in shared
//          memory; a row adds the entries its alpha nibbles pick, giving c mod 4 for the word.
//
// Kernels, per chunk of at most QQ_LR_CHUNK collapses (plan entries c0 .. c0+kc-1 of the window):
//   lowrank_prepare  one block: the chunk's distinct pivots (P), the victim masks without them (VN,
//                    QQ_LR_CHUNK rows of W words, zero for deterministic collapses), their bits at
//                    the pivots (vp), the span of words any victim holds; for the first chunk also
//                    the rows whose sign a reset of the window clears mid-window (`special`): the
//                    update skips them and measure_rows_apply replays them one collapse at a time.
//   lowrank_counts   pass 1: a warp per 8 rows, QQ_LR_COUNT_ROWS rows a block; per step of QQ_LR_STEP
//                    words the block stages its rows' z and x & z words and the victim words
//                    (loaded a step ahead) in shared memory and the warps multiply; then per row
//                    ab[3r..3r+2] = (bit 0, bit 1 of a_i; bit 0 of b_i), bit i for collapse i.
//   lowrank_apply    the phase and pass 2: a thread a row, QQ_LR_BLOCK rows a block. Per step of
//                    QQ_LR_STEP words the block stages its rows' words (coalesced, loaded a step
//                    ahead) and the victim words in shared memory, builds the tables, then every
//                    thread looks up and the block writes the x words back.
// Gate layout: X[r*W + w], Z[r*W + w]; S[r]; rows 0..n-1 xrow, n..2n-1 zrow (gates.cu).
#include <mma.h>
#include "paulis.cuh"
#include "measure_swap.cuh"
#include "measure_plan.cuh"

#define QQ_LR_CHUNK 64  // collapses a pass: one 64-bit word of per-collapse bits per row
#define QQ_LR_PREP_BLOCK 1024
#define QQ_LR_BLOCK 256
#define QQ_LR_BLOCKS_PER_SM 3  // registers capped so that three blocks share an SM
#define QQ_LR_COUNT_BLOCK 256
#define QQ_LR_COUNT_ROWS ((QQ_LR_COUNT_BLOCK >> 5) * 8)  // a warp per 8 rows
#define QQ_LR_STEP 4                  // words a step: QQ_LR_BLOCK * QQ_LR_STEP staged words per part
#define QQ_LR_STRIDE (QQ_LR_STEP + 1)  // odd: a thread's staged words avoid bank conflicts
#define QQ_LR_META_KP 0
#define QQ_LR_META_LO 1
#define QQ_LR_META_HI 2
#define QQ_LR_META_SPECIAL 3
#define QQ_LR_META_FIELDS 4

extern "C" __global__ void __launch_bounds__(QQ_LR_PREP_BLOCK)
lowrank_prepare(const int* plan, const qq_u64* V, int c0, int kc, int k, int n, int W, qq_u64* onpiv, qq_u64* VN,
                int* meta, int* pcol, int* pivots, qq_u64* vp, int* special) {
    __shared__ int s_piv[QQ_LR_CHUNK], s_col[QQ_LR_CHUNK], s_kp, s_lo, s_hi;
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK];
    const int tid = threadIdx.x;
    for (int w = tid; w < W; w += blockDim.x) onpiv[w] = 0ull;
    if (tid < QQ_LR_CHUNK) s_vp[tid] = 0ull;
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
            atomicOr(&s_vp[i], 1ull << j);
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
    if (lo < hi) {
        atomicMin(&s_lo, lo);
        atomicMax(&s_hi, hi);
    }
    __syncthreads();
    if (tid < QQ_LR_CHUNK) {
        pcol[tid] = tid < kc ? s_col[tid] : -1;
        pivots[tid] = tid < kp ? s_piv[tid] : 0;
        vp[tid] = s_vp[tid];
    }
    if (tid == 0) {
        meta[QQ_LR_META_KP] = kp;
        meta[QQ_LR_META_LO] = s_lo < s_hi ? s_lo : 0;
        meta[QQ_LR_META_HI] = s_lo < s_hi ? s_hi : 0;
    }
}

// One step's tables, entry e = (wl, g, idx) = 256 wl + 16 g + idx: the sum mod 4 of vec[64 wl + 4 g + b]
// over the bits b of idx, as two planes (16 entries of 8 bytes: a lookup never conflicts).
__device__ __forceinline__ void qq_lr_tables(qq_u64* lo_tab, qq_u64* hi_tab, const qq_u64* vec, int tid) {
    for (int e = tid; e < QQ_LR_STEP * 256; e += QQ_LR_BLOCK) {
        const qq_u64* v = vec + ((e >> 4) << 2);
        qq_u64 lo = 0, hi = 0;
        for (int b = 0; b < 4; ++b)
            if ((e >> b) & 1) {
                hi ^= lo & v[b];
                lo ^= v[b];
            }
        lo_tab[e] = lo;
        hi_tab[e] = hi;
    }
}

// A step's X and Z words of a block's rows, PER per thread of a block of BLOCK threads (element m:
// row (tid + m BLOCK) / STEP, word (tid + m BLOCK) % STEP of the step; zero past the rows or the
// step), loaded ahead into registers so that the loads of step s+1 fly while step s is worked on.
template <int BLOCK, int PER>
__device__ __forceinline__ void qq_lr_fetch(const qq_u64* X, const qq_u64* Z, size_t r0, int rows, int W, int w0,
                                            int step, int tid, qq_u64* px, qq_u64* pz) {
#pragma unroll
    for (int m = 0; m < PER; ++m) {
        const int e = tid + m * BLOCK, row = e / QQ_LR_STEP, wl = e % QQ_LR_STEP;
        px[m] = pz[m] = 0ull;
        if (row < rows && wl < step) {
            const size_t a = (r0 + row) * W + w0 + wl;
            px[m] = X[a];
            pz[m] = Z[a];
        }
    }
}

__device__ __forceinline__ void qq_lr_stage(qq_u64* xs, qq_u64* zs, int tid, const qq_u64* px, const qq_u64* pz) {
#pragma unroll
    for (int m = 0; m < QQ_LR_STEP; ++m) {
        const int e = tid + m * QQ_LR_BLOCK, row = e / QQ_LR_STEP, wl = e % QQ_LR_STEP;
        xs[row * QQ_LR_STRIDE + wl] = px[m];
        zs[row * QQ_LR_STRIDE + wl] = pz[m];
    }
}

__device__ __forceinline__ void qq_lr_write_back(qq_u64* X, const qq_u64* xs, size_t r0, int rows, int W, int w0,
                                                 int step, int tid) {
#pragma unroll
    for (int m = 0; m < QQ_LR_STEP; ++m) {
        const int e = tid + m * QQ_LR_BLOCK, row = e / QQ_LR_STEP, wl = e % QQ_LR_STEP;
        if (row < rows && wl < step) X[(r0 + row) * W + w0 + wl] = xs[row * QQ_LR_STRIDE + wl];
    }
}

// The victim words of a step, one per thread (QQ_LR_STEP * 64 == QQ_LR_BLOCK): word wl = tid / 64 of
// collapse tid % 64.
__device__ __forceinline__ qq_u64 qq_lr_victims(const qq_u64* VN, int w0, int step, int kc, int W, int tid) {
    return ((tid >> 6) < step && (tid & 63) < kc) ? VN[(size_t)(tid & 63) * W + w0 + (tid >> 6)] : 0ull;
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

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK)
lowrank_counts(const qq_u64* X, const qq_u64* Z, const qq_u64* VN, const int* meta, const int* active, qq_u64* ab,
               int kc, int n, int W) {
    // Staged as [half][row][2 words]: each operand tile (128 columns) contiguous and 256-bit aligned.
    __shared__ __align__(32) qq_u64 zs[QQ_LR_COUNT_ROWS * QQ_LR_STEP], xzs[QQ_LR_COUNT_ROWS * QQ_LR_STEP];
    __shared__ __align__(32) qq_u64 vs[QQ_LR_CHUNK * QQ_LR_STEP];
    __shared__ __align__(32) int cz[QQ_LR_COUNT_ROWS * QQ_LR_CHUNK], cxz[QQ_LR_COUNT_ROWS * QQ_LR_CHUNK];
    if (*active == 0 || meta[QQ_LR_META_KP] == 0) return;  // uniform: nothing random in this chunk
    const int lo = meta[QQ_LR_META_LO], hi = meta[QQ_LR_META_HI];
    const int tid = threadIdx.x, warp = tid >> 5, tiles = (kc + 7) >> 3;
    const size_t R = (size_t)2 * n, r0 = (size_t)blockIdx.x * QQ_LR_COUNT_ROWS;
    const int rows = (int)min((size_t)QQ_LR_COUNT_ROWS, R - r0);
    // Element m of a thread: row (tid + m B) / STEP, word (tid + m B) % STEP of the step.
    constexpr int per = QQ_LR_COUNT_ROWS * QQ_LR_STEP / QQ_LR_COUNT_BLOCK;
    constexpr int vper = QQ_LR_CHUNK * QQ_LR_STEP / QQ_LR_COUNT_BLOCK;
    qq_u64 pz[per], pxz[per], pv[vper];
    qq_counts acc_z[8], acc_xz[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        qq_wmma::fill_fragment(acc_z[t], 0);
        qq_wmma::fill_fragment(acc_xz[t], 0);
    }
    auto fetch = [&](int w0) {
        const int step = min(QQ_LR_STEP, hi - w0);
        qq_lr_fetch<QQ_LR_COUNT_BLOCK, per>(X, Z, r0, rows, W, w0, step, tid, pxz, pz);
#pragma unroll
        for (int m = 0; m < per; ++m) pxz[m] &= pz[m];  // x ∧ z
#pragma unroll
        for (int m = 0; m < vper; ++m) {  // collapse i's words of the step
            const int e = tid + m * QQ_LR_COUNT_BLOCK, i = e / QQ_LR_STEP, wl = e % QQ_LR_STEP;
            pv[m] = (wl < step && i < kc) ? VN[(size_t)i * W + w0 + wl] : 0ull;
        }
    };
    if (lo < hi) fetch(lo);
    for (int w0 = lo; w0 < hi; w0 += QQ_LR_STEP) {
        __syncthreads();  // the previous step's products are done
#pragma unroll
        for (int m = 0; m < per; ++m) {
            const int e = tid + m * QQ_LR_COUNT_BLOCK, row = e / QQ_LR_STEP, wl = e % QQ_LR_STEP;
            const int at = (wl >> 1) * (2 * QQ_LR_COUNT_ROWS) + 2 * row + (wl & 1);
            zs[at] = pz[m];
            xzs[at] = pxz[m];
        }
#pragma unroll
        for (int m = 0; m < vper; ++m) {
            const int e = tid + m * QQ_LR_COUNT_BLOCK, i = e / QQ_LR_STEP, wl = e % QQ_LR_STEP;
            vs[(wl >> 1) * (2 * QQ_LR_CHUNK) + 2 * i + (wl & 1)] = pv[m];
        }
        if (w0 + QQ_LR_STEP < hi) fetch(w0 + QQ_LR_STEP);
        __syncthreads();
#pragma unroll
        for (int half = 0; half < QQ_LR_STEP / 2; ++half) {  // 128 columns a product
            qq_bits_a a_z, a_xz;
            qq_wmma::load_matrix_sync(a_z, zs + half * (2 * QQ_LR_COUNT_ROWS) + 2 * (8 * warp), 128);
            qq_wmma::load_matrix_sync(a_xz, xzs + half * (2 * QQ_LR_COUNT_ROWS) + 2 * (8 * warp), 128);
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                if (t >= tiles) break;
                qq_bits_b b;
                qq_wmma::load_matrix_sync(b, vs + half * (2 * QQ_LR_CHUNK) + 2 * (8 * t), 128);
                qq_wmma::bmma_sync(acc_z[t], a_z, b, acc_z[t], qq_wmma::experimental::bmmaBitOpAND,
                                   qq_wmma::experimental::bmmaAccumulateOpPOPC);
                qq_wmma::bmma_sync(acc_xz[t], a_xz, b, acc_xz[t], qq_wmma::experimental::bmmaBitOpAND,
                                   qq_wmma::experimental::bmmaAccumulateOpPOPC);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {  // counts[row][i]
        qq_wmma::store_matrix_sync(cz + (8 * warp) * QQ_LR_CHUNK + 8 * t, acc_z[t], QQ_LR_CHUNK, qq_wmma::mem_row_major);
        qq_wmma::store_matrix_sync(cxz + (8 * warp) * QQ_LR_CHUNK + 8 * t, acc_xz[t], QQ_LR_CHUNK,
                                   qq_wmma::mem_row_major);
    }
    __syncthreads();
    if (tid < rows) {
        qq_u64 alo = 0ull, ahi = 0ull, b = 0ull;
        for (int i = 0; i < kc; ++i) {
            const int a = cz[tid * QQ_LR_CHUNK + i], c = cxz[tid * QQ_LR_CHUNK + i];
            alo |= (qq_u64)(a & 1) << i;
            ahi |= (qq_u64)((a >> 1) & 1) << i;
            b |= (qq_u64)(c & 1) << i;
        }
        qq_u64* out = ab + 3 * (r0 + tid);
        out[0] = alo;
        out[1] = ahi;
        out[2] = b;
    }
}

extern "C" __global__ void __launch_bounds__(QQ_LR_BLOCK, QQ_LR_BLOCKS_PER_SM)
lowrank_apply(qq_u64* X, qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN, const qq_u64* ab,
              const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
              const int* active, int c0, int kc, int n, int W) {
    __shared__ qq_u64 tab_lo[QQ_LR_STEP * 256], tab_hi[QQ_LR_STEP * 256];
    __shared__ qq_u64 vec[QQ_LR_STEP * 64];
    __shared__ qq_u64 xs[QQ_LR_BLOCK * QQ_LR_STRIDE], zs[QQ_LR_BLOCK * QQ_LR_STRIDE];
    __shared__ int s_col[QQ_LR_CHUNK], s_piv[QQ_LR_CHUNK], s_yz[QQ_LR_CHUNK], s_inject[QQ_LR_CHUNK];
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK];
    const int kp = meta[QQ_LR_META_KP];
    if (*active == 0 || kp == 0) return;  // uniform: nothing random in this chunk
    const int lo = meta[QQ_LR_META_LO], hi = meta[QQ_LR_META_HI], nspecial = meta[QQ_LR_META_SPECIAL];
    const int tid = threadIdx.x;
    if (tid < QQ_LR_CHUNK) {
        s_col[tid] = pcol[tid];
        s_piv[tid] = pivots[tid];
        s_vp[tid] = vp[tid];
        const int* pl = plan + QQ_PLAN_FIELDS * (c0 + min(tid, kc - 1));
        s_yz[tid] = pl[QQ_PLAN_YZ];
        s_inject[tid] = pl[QQ_PLAN_INJECT];
    }
    __syncthreads();
    const size_t R = (size_t)2 * n, r0 = (size_t)blockIdx.x * QQ_LR_BLOCK, r = r0 + tid;
    const int rows = (int)min((size_t)QQ_LR_BLOCK, R - r0);
    bool live = r < R;
    for (int e = 0; live && e < nspecial; ++e)
        if ((size_t)special[e] == r) live = false;
    qq_u64* xrow = xs + tid * QQ_LR_STRIDE;
    const qq_u64* zrow = zs + tid * QQ_LR_STRIDE;
    qq_u64 px[QQ_LR_STEP], pz[QQ_LR_STEP];

    // The phase: each collapse of the chunk in order on the row's bits at the pivots.
    qq_u64 xP = 0ull, zP = 0ull, alpha = 0ull;
    int s = 0;
    if (live) {
        const qq_u64 alo = ab[3 * r], ahi = ab[3 * r + 1], b = ab[3 * r + 2];
        for (int j = 0; j < kp; ++j) {
            const int p = s_piv[j];
            const size_t a = r * W + (p >> 6);
            xP |= ((X[a] >> (p & 63)) & 1ull) << j;
            zP |= ((Z[a] >> (p & 63)) & 1ull) << j;
        }
        s = S[r];
        for (int i = 0; i < kc; ++i) {
            const int j = s_col[i];
            if (j < 0) continue;  // deterministic: nothing to do here (resets: the special rows)
            const int xp = (int)((xP >> j) & 1ull), zp = (int)((zP >> j) & 1ull);
            const qq_u64 v = s_vp[i];
            const int m = (int)(((alo >> i) & 1ull) | (((ahi >> i) & 1ull) << 1)) + qq_popc(zP & v);
            const int y = (int)((b >> i) & 1ull) ^ (qq_popc(xP & zP & v) & 1);
            s ^= xp & (y ^ ((m & 1) & (1 ^ zp)) ^ ((m >> 1) & 1));
            if (xp) xP ^= v;
            int bx = xp, bz = zp ^ (m & 1);
            qq_swap_pivot(s_yz[i], &bx, &bz, &s);
            if (s_inject[i]) qq_inject_x(bz, &s);
            xP = (xP & ~(1ull << j)) | ((qq_u64)bx << j);
            zP = (zP & ~(1ull << j)) | ((qq_u64)bz << j);
            alpha |= (qq_u64)xp << i;
        }
    }

    // Pass 2: c = sum_i alpha_i v_i^N mod 4 per word; x_N ^= bit0(c), s ^= |z & bit1(c)|.
    const int groups = (kc + 3) >> 2;
    qq_u64 pv = 0ull;
    if (lo < hi) {
        qq_lr_fetch<QQ_LR_BLOCK, QQ_LR_STEP>(X, Z, r0, rows, W, lo, min(QQ_LR_STEP, hi - lo), tid, px, pz);
        pv = qq_lr_victims(VN, lo, min(QQ_LR_STEP, hi - lo), kc, W, tid);
    }
    for (int w0 = lo; w0 < hi; w0 += QQ_LR_STEP) {
        const int step = min(QQ_LR_STEP, hi - w0), next = w0 + QQ_LR_STEP;
        __syncthreads();
        if (w0 > lo) qq_lr_write_back(X, xs, r0, rows, W, w0 - QQ_LR_STEP, QQ_LR_STEP, tid);
        qq_lr_stage(xs, zs, tid, px, pz);
        vec[tid] = pv;
        if (next < hi) {
            qq_lr_fetch<QQ_LR_BLOCK, QQ_LR_STEP>(X, Z, r0, rows, W, next, min(QQ_LR_STEP, hi - next), tid, px, pz);
            pv = qq_lr_victims(VN, next, min(QQ_LR_STEP, hi - next), kc, W, tid);
        }
        __syncthreads();
        qq_lr_tables(tab_lo, tab_hi, vec, tid);
        __syncthreads();
        if (live && alpha) {
#pragma unroll
            for (int wl = 0; wl < QQ_LR_STEP; ++wl) {
                if (wl >= step) break;
                qq_u64 clo = 0ull, chi = 0ull;
                for (int g = 0; g < groups; ++g) {
                    const int ia = 256 * wl + 16 * g + (int)((alpha >> (4 * g)) & 15);
                    const qq_u64 elo = tab_lo[ia];
                    chi ^= tab_hi[ia] ^ (clo & elo);
                    clo ^= elo;
                }
                xrow[wl] ^= clo;
                s ^= qq_popc(zrow[wl] & chi) & 1;
            }
        }
    }
    __syncthreads();
    if (lo < hi) {
        const int last = lo + ((hi - 1 - lo) / QQ_LR_STEP) * QQ_LR_STEP;
        qq_lr_write_back(X, xs, r0, rows, W, last, hi - last, tid);
    }
    __syncthreads();  // the block's write-back is visible to the row's own thread below
    if (live) {       // the pivot columns as the phase left them
        for (int j = 0; j < kp; ++j) {
            const int p = s_piv[j];
            const size_t a = r * W + (p >> 6);
            const qq_u64 bit = 1ull << (p & 63);
            X[a] = (X[a] & ~bit) | (((xP >> j) & 1ull) ? bit : 0ull);
            Z[a] = (Z[a] & ~bit) | (((zP >> j) & 1ull) ? bit : 0ull);
        }
        S[r] = (unsigned char)s;
    }
}
