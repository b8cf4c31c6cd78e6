// measure_rows.cu: a whole measurement window of tableau mode in ONE pass over the tableau
// (paper Algs. 5-8, batched), in gate layout: no transposes, each word read and written once.
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q" (the sequential Algorithm 1),
// bit for bit. The collapses of a window act on generator positions only, so what each one does to
// a row depends on that row alone (its bits at the pivot and the victims) plus a few decisions
// (pivot p, victim mask V, H or H_YZ, X injection) that depend only on the rows of the measured
// qubits: measure_window_plan (measure_plan.cu) takes them on those rows, then
//
//   measure_rows_apply  every row of the tableau, each loaded once into shared memory, goes through
//                       the same k collapses with the plan's decisions (the same closed form, and
//                       the same swap and injection, as the plan: the result is the sequential one), then is
//                       written back once. 32 * row_warps threads a row, rows_per_block rows a
//                       block; blockDim.x == 32 * row_warps * rows_per_block; dynamic shared memory
//                       (2 * rows_per_block + 1) * W words (the block's rows, and the current
//                       collapse's victim mask). With no active collapse a block only clears the
//                       deterministic resets' signs. With row_ids (not null) block b takes the one
//                       row row_ids[b] (rows_per_block == 1): the rows the low-rank update skips
//                       (measure_lowrank.cu).
// Gate layout: X[r*W + w], Z[r*W + w]; S[r]; rows 0..n-1 xrow, n..2n-1 zrow (gates.cu).
#include "paulis.cuh"
#include "measure_swap.cuh"
#include "measure_plan.cuh"

#define QQ_ROWS_MAX_PER_BLOCK 8

#define QQ_FULL_MASK 0xFFFFFFFFu

// The rest of the collapse on the row at p: the sign term, H / H_YZ (Alg. 8's swap), X injection;
// writes the pivot bits.
__device__ __forceinline__ void qq_row_finish(qq_u64* x, qq_u64* z, int* s, int p, int xp, int zp, int term, int yz,
                                              int inject) {
    const int pw = p >> 6, pb = p & 63;
    *s ^= xp & term;
    int bx = xp, bz = zp;
    qq_swap_pivot(yz, &bx, &bz, s);
    if (inject) qq_inject_x(bz, s);
    const qq_u64 bit = 1ull << pb;
    x[pw] = (x[pw] & ~bit) | (bx ? bit : 0ull);
    z[pw] = (z[pw] & ~bit) | (bz ? bit : 0ull);
}

// measure_rows_apply: row_warps warps (1 to QQ_ROW_MAX_WARPS) a row, each thread a contiguous segment
// of the row's words; a collapse's closed form combines the segments' (term, parity) pairs by the
// carry identity (a carry-in c flips a segment's term by c & parity, since zv & ~y and zv & y split
// zv; qq_cx_victims_word), first across a warp's lanes, then across the row's warps. Long
// rows want several warps (latency), short ones one (fewer block-wide barriers per collapse).
#define QQ_ROW_MAX_WARPS 4

extern "C" __global__ void __launch_bounds__(32 * QQ_ROW_MAX_WARPS * QQ_ROWS_MAX_PER_BLOCK)
measure_rows_apply(qq_u64* X, qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* V, const int* active,
                   int k, int n, int W, int rows_per_block, int row_warps, const int* row_ids) {
    extern __shared__ qq_u64 smem[];
    __shared__ int s_term[QQ_ROWS_MAX_PER_BLOCK][QQ_ROW_MAX_WARPS], s_par[QQ_ROWS_MAX_PER_BLOCK][QQ_ROW_MAX_WARPS];
    __shared__ int s_sign[QQ_ROWS_MAX_PER_BLOCK];
    const int row_threads = 32 * row_warps;
    const int tid = threadIdx.x, lane = tid & 31, local = tid / row_threads;  // the block's row
    const int part = tid % row_threads, wid = part >> 5;                      // thread and warp in the row
    const size_t R = (size_t)2 * n, r0 = row_ids ? (size_t)row_ids[blockIdx.x] : (size_t)blockIdx.x * rows_per_block;
    const size_t r = r0 + local;
    const bool live = local < rows_per_block && r < R;  // row_ids: local == 0
    if (*active == 0) {  // only deterministic collapses: their resets clear q's signs
        if (!live || part != 0) return;
        for (int i = 0; i < k; ++i) {
            const int* pl = plan + QQ_PLAN_FIELDS * i;
            if (pl[QQ_PLAN_RESET] && (r == (size_t)pl[QQ_PLAN_Q] || r == (size_t)n + pl[QQ_PLAN_Q])) S[r] = 0;
        }
        return;
    }
    const int rows = row_ids ? 1 : (int)min((size_t)rows_per_block, R - r0);
    qq_u64* xs = smem;
    qq_u64* zs = smem + (size_t)rows_per_block * W;
    qq_u64* vs = smem + (size_t)2 * rows_per_block * W;
    for (size_t idx = tid; idx < (size_t)rows * W; idx += blockDim.x) {
        xs[idx] = X[r0 * W + idx];
        zs[idx] = Z[r0 * W + idx];
    }
    if (live && part == 0) s_sign[local] = S[r];
    qq_u64* x = xs + (size_t)local * W;
    qq_u64* z = zs + (size_t)local * W;
    for (int i = 0; i < k; ++i) {
        const int* pl = plan + QQ_PLAN_FIELDS * i;
        if (pl[QQ_PLAN_ACTIVE]) {
            const int p = pl[QQ_PLAN_P], pw = p >> 6, pb = p & 63;
            const qq_u64* vi = V + (size_t)i * W;
            for (int w = tid; w < W; w += blockDim.x) vs[w] = vi[w];
            __syncthreads();  // the rows are loaded / the last collapse is finished; vs is ready
            int xp = 0, zp = 0, term = 0, carry = 0;
            if (live) {
                xp = (int)((x[pw] >> pb) & 1);
                zp = (int)((z[pw] >> pb) & 1);
            }
            __syncthreads();  // every thread has read the pivot word before it is written
            if (live) {
                const int len = W - pw, per = (len + row_threads - 1) / row_threads;
                const int lo = pw + min(len, part * per), hi = pw + min(len, part * per + per);
                for (int w = lo; w < hi; ++w) {
                    const qq_u64 vw = vs[w];
                    if (!vw) continue;
                    const qq_u64 zw = z[w];
                    if (xp) {
                        const qq_u64 xw = x[w];
                        term ^= qq_cx_victims_word(xw, zw, vw, zp, &carry);
                        x[w] = xw ^ vw;
                    } else {
                        carry ^= qq_popc(zw & vw) & 1;
                    }
                }
                int incl = carry;
                for (int off = 1; off < 32; off <<= 1) {
                    const int t = __shfl_up_sync(QQ_FULL_MASK, incl, off);
                    if (lane >= off) incl ^= t;
                }
                term ^= (incl ^ carry) & carry;
                for (int off = 16; off; off >>= 1) term ^= __shfl_xor_sync(QQ_FULL_MASK, term, off);
                if (lane == 31) s_par[local][wid] = incl;
                if (lane == 0) s_term[local][wid] = term & 1;
            }
            __syncthreads();
            if (live && part == 0) {  // the row's warps in order: carry-in times each warp's parity
                int total = 0, t_all = 0;
                for (int u = 0; u < row_warps; ++u) {
                    t_all ^= s_term[local][u] ^ (total & s_par[local][u]);
                    total ^= s_par[local][u];
                }
                int s = s_sign[local];
                qq_row_finish(x, z, &s, p, xp, zp ^ total, t_all, pl[QQ_PLAN_YZ], pl[QQ_PLAN_INJECT]);
                s_sign[local] = s;
            }
        }
        if (live && part == 0 && pl[QQ_PLAN_RESET] && (r == (size_t)pl[QQ_PLAN_Q] || r == (size_t)n + pl[QQ_PLAN_Q]))
            s_sign[local] = 0;
    }
    __syncthreads();
    for (size_t idx = tid; idx < (size_t)rows * W; idx += blockDim.x) {
        X[r0 * W + idx] = xs[idx];
        Z[r0 * W + idx] = zs[idx];
    }
    if (live && part == 0) S[r] = (unsigned char)s_sign[local];
}
