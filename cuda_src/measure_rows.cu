// measure_rows.cu: a whole measurement window of tableau mode in ONE pass over the tableau
// (paper Algs. 5-8, batched), in gate layout: no transposes, each word read and written once.
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q" (the sequential Algorithm 1),
// bit for bit. The collapses of a window act on generator positions only, so what each one does to
// a row depends on that row alone (its bits at the pivot and the victims) plus a few decisions
// (pivot p, victim mask V, H or H_YZ, X injection) that depend only on the rows of the measured
// qubits. Hence two kernels per window, a plan and an apply:
//
//   measure_rows_plan   the plan of a small tableau (W <= PLAN_ONE_BLOCK_MAX_W words, measure.py),
//                       in one block; larger ones spread it over the multiprocessors
//                       (measure_window_plan, measure_plan.cu), whose grid barrier a collapse costs
//                       more than this block's work on short rows. It gathers the zrows of the
//                       window's k measured qubits (the slice, k x W words) and runs the window's
//                       collapses on the slice alone, in program order: pivot (Alg. 5), victims
//                       (Alg. 6: V_i, one row of the k x W mask buffer), CX closed form (Alg. 7),
//                       H / H_YZ and the coin's X (Alg. 8); it writes the records and the plan
//                       (measure_plan.cuh) and the number of active (random) collapses.
//                       Deterministic ones read their sign. blockDim.x == QQ_ROWS_PLAN_BLOCK; one
//                       warp per slice row; the slice in shared memory where it fits (slice_in_smem:
//                       (2 * W + 1/2) * k words), else in sx, sz, ss.
//   measure_rows_apply  every row of the tableau, each loaded once into shared memory, goes through
//                       the same k collapses with the plan's decisions (the same closed form and
//                       qq_row_finish as the plan, so the result is the sequential one), then is
//                       written back once. 32 * row_warps threads a row, rows_per_block rows a
//                       block; blockDim.x == 32 * row_warps * rows_per_block; dynamic shared memory
//                       (2 * rows_per_block + 1) * W words (the block's rows, and the current
//                       collapse's victim mask). With no active collapse a block only clears the
//                       deterministic resets' signs. With row_ids (not null) block b takes the one
//                       row row_ids[b] (rows_per_block == 1): the rows the low-rank update skips
//                       (measure_lowrank.cu).
//   measure_rows_apply_gates  the same with the gate window after the collapse window folded in (rows of
//                       at most 160 words): a block takes a few units (a gate or an idle qubit),
//                       their rows go through the collapses, then through their gates, each row
//                       read and written once.
// Gate layout: X[r*W + w], Z[r*W + w]; S[r]; rows 0..n-1 xrow, n..2n-1 zrow (gates.cu).
#include "paulis.cuh"
#include "tables.cuh"
#include "measure_swap.cuh"
#include "measure_plan.cuh"

#define QQ_ROWS_PLAN_BLOCK 512
#define QQ_ROWS_MAX_PER_BLOCK 8

#define QQ_FULL_MASK 0xFFFFFFFFu
#define QQ_CX_UNROLL 4  // words a lane loads before it uses them (measure_rows_plan: latency of L2)

// Alg. 7 (with Alg. 8 when `decided`) of one collapse on one row, by one warp: CX(p, t) for every
// victim t (mask v), in increasing t, as the prefix-XOR closed form over the row's words split in
// 32 contiguous segments (a carry-in c flips a segment's term by c & parity, since zv & ~y and
// zv & y split zv). Returns the row's x_p (unchanged by the CXs) and leaves z_p's update in
// *zp_out; lane 0's *s gets the sign term. The caller applies the swap / injection at p.
__device__ __forceinline__ void qq_row_cx(qq_u64* x, qq_u64* z, const qq_u64* v, int W, int p, int lane, int* xp_out,
                                          int* zp_out, int* term_out) {
    const int pw = p >> 6, pb = p & 63;
    const int xp = (int)((x[pw] >> pb) & 1), zp = (int)((z[pw] >> pb) & 1);
    __syncwarp();  // every lane has read the pivot word before the lane that owns it writes it
    const int len = W - pw, per = (len + 31) >> 5;
    const int lo = pw + min(len, lane * per), hi = pw + min(len, lane * per + per);
    int term = 0, carry = 0;
    for (int w = lo; w < hi; w += QQ_CX_UNROLL) {  // the slice is in global memory: loads first, then use
        qq_u64 vw[QQ_CX_UNROLL], zw[QQ_CX_UNROLL], xw[QQ_CX_UNROLL];
#pragma unroll
        for (int u = 0; u < QQ_CX_UNROLL; ++u) {
            const bool in = w + u < hi;
            vw[u] = in ? v[w + u] : 0ull;
            zw[u] = in ? z[w + u] : 0ull;
            xw[u] = in && xp ? x[w + u] : 0ull;
        }
#pragma unroll
        for (int u = 0; u < QQ_CX_UNROLL; ++u) {
            if (!vw[u]) continue;
            if (xp) {
                term ^= qq_cx_victims_word(xw[u], zw[u], vw[u], zp, &carry);
                x[w + u] = xw[u] ^ vw[u];  // the pivot's own bit is not in v
            } else {
                carry ^= qq_popc(zw[u] & vw[u]) & 1;
            }
        }
    }
    int incl = carry;  // inclusive XOR scan of the segments' parities
    for (int off = 1; off < 32; off <<= 1) {
        const int t = __shfl_up_sync(QQ_FULL_MASK, incl, off);
        if (lane >= off) incl ^= t;
    }
    term ^= (incl ^ carry) & carry;  // carry-in (exclusive scan) times the segment's parity
    for (int off = 16; off; off >>= 1) term ^= __shfl_xor_sync(QQ_FULL_MASK, term, off);
    const int total = __shfl_sync(QQ_FULL_MASK, incl, 31);
    __syncwarp();
    *xp_out = xp;
    *zp_out = zp ^ total;
    *term_out = term & 1;
}

// The rest of the collapse on the row at p: the sign term, H / H_YZ (Alg. 8's swap), X injection,
// the reset of q's rows; lane 0 writes the pivot bits (after qq_row_cx's __syncwarp).
__device__ __forceinline__ void qq_row_finish(qq_u64* x, qq_u64* z, int* s, int p, int xp, int zp, int term, int yz,
                                              int inject, int lane) {
    if (lane != 0) return;
    const int pw = p >> 6, pb = p & 63;
    *s ^= xp & term;
    int bx = xp, bz = zp;
    qq_swap_pivot(yz, &bx, &bz, s);
    if (inject) qq_inject_x(bz, s);
    const qq_u64 bit = 1ull << pb;
    x[pw] = (x[pw] & ~bit) | (bx ? bit : 0ull);
    z[pw] = (z[pw] & ~bit) | (bz ? bit : 0ull);
}

extern "C" __global__ void __launch_bounds__(QQ_ROWS_PLAN_BLOCK)
measure_rows_plan(const QQTables* T, const int* ctx, int cstart, int cend, const qq_u64* X, const qq_u64* Z,
                  const unsigned char* S, qq_u64* sx, qq_u64* sz, int* ss, int slice_in_smem, int* plan, qq_u64* V,
                  int* active, unsigned char* rec, int W, qq_u32 k0, qq_u32 k1, int repetition, int reference) {
    extern __shared__ qq_u64 slice_smem[];
    __shared__ int s_first, s_yz, s_inject;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = QQ_ROWS_PLAN_BLOCK >> 5;
    const int n = (int)T->n, k = cend - cstart;
    if (slice_in_smem) {  // the slice and its signs, (2 * W + 1/2) * k words, in shared memory
        sx = slice_smem;
        sz = slice_smem + (size_t)k * W;
        ss = (int*)(slice_smem + (size_t)2 * k * W);
    }
    const qq_key key = {k0, k1};
    for (size_t idx = tid; idx < (size_t)k * W; idx += QQ_ROWS_PLAN_BLOCK) {  // gather the slice
        const int j = (int)(idx / W), w = (int)(idx % W);
        const size_t r = (size_t)n + T->ins[(size_t)(cstart + j) * QQ_NF + QQ_F_A];
        sx[idx] = X[r * W + w];
        sz[idx] = Z[r * W + w];
        if (w == 0) ss[j] = S[r];
    }
    if (tid == 0) *active = 0;
    __syncthreads();
    for (int i = 0; i < k; ++i) {
        const int* row = T->ins + (size_t)(cstart + i) * QQ_NF;
        const int op = row[QQ_F_OP], q = row[QQ_F_A];
        if (tid == 0) s_first = W;
        __syncthreads();
        for (int w = tid; w < W; w += QQ_ROWS_PLAN_BLOCK)
            if (sx[(size_t)i * W + w]) atomicMin(&s_first, w);
        __syncthreads();
        const int pw = s_first;
        int* pl = plan + QQ_PLAN_FIELDS * i;
        if (pw == W) {  // deterministic: the outcome is the sign
            if (tid == 0) {
                if (op != QQ_OP_R) rec[row[QQ_F_REC] + ctx[0]] = (unsigned char)((ss[i] ^ row[QQ_F_FLAGS]) & QQ_FLAG_INVERT);
                pl[QQ_PLAN_ACTIVE] = 0;
                pl[QQ_PLAN_P] = -1;
                pl[QQ_PLAN_RESET] = op != QQ_OP_M;
                pl[QQ_PLAN_Q] = q;
                if (op != QQ_OP_M) ss[i] = 0;
            }
            __syncthreads();
            continue;
        }
        const qq_u64 first = sx[(size_t)i * W + pw];
        const int p = pw * 64 + qq_ctz(first);
        qq_u64* vi = V + (size_t)i * W;
        for (int w = tid; w < W; w += QQ_ROWS_PLAN_BLOCK)
            vi[w] = w < pw ? 0ull : (w == pw ? first & (first - 1) : sx[(size_t)i * W + w]);
        __syncthreads();
        // Alg. 7 on the slice rows still to be decided (i itself included), one warp a row.
        int xp_j[4], zp_j[4], term_j[4];  // rows warp, warp + warps, ... (k <= 4 * warps per pass)
        for (int base = i; base < k; base += 4 * warps) {
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const int j = base + warp + t * warps;
                if (j < k) qq_row_cx(sx + (size_t)j * W, sz + (size_t)j * W, vi, W, p, lane, &xp_j[t], &zp_j[t], &term_j[t]);
            }
            __syncthreads();
            if (base == i && warp == 0 && lane == 0) s_yz = zp_j[0];  // bit p of zz[q] after the CXs
            __syncthreads();
            const int yz = s_yz;
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const int j = base + warp + t * warps;
                if (j < k) {
                    int s = ss[j];
                    qq_row_finish(sx + (size_t)j * W, sz + (size_t)j * W, &s, p, xp_j[t], zp_j[t], term_j[t], yz, 0,
                                  lane);
                    if (lane == 0) ss[j] = s;
                }
            }
            __syncthreads();
        }
        // Alg. 8's X: when the coin disagrees with zrow[q]'s sign, flip every row with z_p set.
        if (tid == 0) {
            const int coin = reference ? 0 : (int)(qq_word(key, QQ_STREAM_COIN, (qq_u32)(row[QQ_F_RAND] + ctx[1]), 0,
                                                           (qq_u64)repetition) & 1);
            s_inject = ss[i] != coin;
            if (op != QQ_OP_R) rec[row[QQ_F_REC] + ctx[0]] = (unsigned char)((coin ^ row[QQ_F_FLAGS]) & QQ_FLAG_INVERT);
            pl[QQ_PLAN_ACTIVE] = 1;
            pl[QQ_PLAN_P] = p;
            pl[QQ_PLAN_YZ] = s_yz;
            pl[QQ_PLAN_RESET] = op != QQ_OP_M;
            pl[QQ_PLAN_Q] = q;
            *active += 1;
        }
        __syncthreads();
        if (tid == 0) pl[QQ_PLAN_INJECT] = s_inject;
        if (s_inject)
            for (int j = i + tid; j < k; j += QQ_ROWS_PLAN_BLOCK)
                ss[j] ^= (int)((sz[(size_t)j * W + pw] >> (p & 63)) & 1);
        __syncthreads();
        if (tid == 0 && op != QQ_OP_M) ss[i] = 0;
        __syncthreads();
    }
}

// measure_rows_apply: row_warps warps (1 to QQ_ROW_MAX_WARPS) a row, each thread a contiguous segment
// of the row's words; a collapse's closed form combines the segments' (term, parity) pairs by the
// same carry identity as qq_row_cx, first across a warp's lanes, then across the row's warps. Long
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
                qq_row_finish(x, z, &s, p, xp, zp ^ total, t_all, pl[QQ_PLAN_YZ], pl[QQ_PLAN_INJECT], 0);
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

// measure_rows_apply_gates: measure_rows_apply with the gate window after the collapse window
// folded in (small tableaux: a block's rows fit its shared memory), one launch for both. Units are
// the window's gates gstart + u (u < gend - gstart: two or four rows) and then its idle qubits
// idle[u - (gend - gstart)] (two rows): every qubit is in one unit. A block takes QQ_ROWS_FOLD_UNITS
// units, their rows side by side in shared memory; each warp takes rows through the window's
// collapses (qq_row_cx / qq_row_finish, as measure_rows_plan runs them: a row's collapses need
// nothing from other rows), then QQ_ROWS_FOLD_WARPS / QQ_ROWS_FOLD_UNITS warps a unit apply its gate
// (qq_gate_word, qq_gate_sign, as tableau_gates_window) and write the rows once. The window's victim
// masks and plan are copied to shared memory first: every row-collapse reads them. blockDim.x ==
// 32 * QQ_ROWS_FOLD_WARPS; dynamic shared memory (8 * QQ_ROWS_FOLD_UNITS + k) * W words and
// QQ_PLAN_FIELDS * k ints. The gate window holds unitaries only (measure.foldable_gates), on
// distinct qubits.
#define QQ_ROWS_FOLD_WARPS 8
#define QQ_ROWS_FOLD_UNITS 4
#define QQ_ROWS_FOLD_UNIT_WARPS (QQ_ROWS_FOLD_WARPS / QQ_ROWS_FOLD_UNITS)

extern "C" __global__ void __launch_bounds__(32 * QQ_ROWS_FOLD_WARPS, 4)
measure_rows_apply_gates(qq_u64* X, qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* V, int k, int n,
                         int W, const QQTables* T, int gstart, int gend, const int* idle, int idle_count) {
    constexpr int ROWS = 4 * QQ_ROWS_FOLD_UNITS;
    extern __shared__ qq_u64 smem[];
    __shared__ int s_op[QQ_ROWS_FOLD_UNITS], s_first[QQ_ROWS_FOLD_UNITS + 1], s_sign[ROWS];
    __shared__ int s_phase[QQ_ROWS_FOLD_UNITS][QQ_ROWS_FOLD_UNIT_WARPS][4];
    __shared__ long long s_row[ROWS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    qq_u64* xs = smem;                            // slot j: x part at xs + j * W
    qq_u64* zs = smem + (size_t)ROWS * W;         // z part at zs + j * W
    qq_u64* vs = smem + (size_t)2 * ROWS * W;     // the window's victim masks, k x W
    int* ps = (int*)(vs + (size_t)k * W);         // its plan, k x QQ_PLAN_FIELDS
    for (int idx = tid; idx < k * W; idx += blockDim.x) vs[idx] = V[idx];
    for (int idx = tid; idx < k * QQ_PLAN_FIELDS; idx += blockDim.x) ps[idx] = plan[idx];
    if (tid == 0) {  // the block's units and their rows' slots
        const int gates = gend - gstart, units = gates + idle_count;
        int slot = 0;
        for (int u = 0; u < QQ_ROWS_FOLD_UNITS; ++u) {
            const int unit = blockIdx.x * QQ_ROWS_FOLD_UNITS + u;
            int op = -1, q0 = 0, q1 = 0;
            if (unit < gates) {
                const int* row = T->ins + (size_t)(gstart + unit) * QQ_NF;
                op = row[QQ_F_OP];
                q0 = row[QQ_F_A];
                q1 = qq_arity[op] == 2 ? row[QQ_F_B] : q0;
            } else if (unit < units) {
                op = QQ_OP_I;
                q0 = q1 = idle[unit - gates];
            }
            s_op[u] = op;
            s_first[u] = slot;
            if (op >= 0) {
                s_row[slot++] = q0;
                s_row[slot++] = (long long)n + q0;
                if (qq_arity[op] == 2) {
                    s_row[slot++] = q1;
                    s_row[slot++] = (long long)n + q1;
                }
            }
        }
        s_first[QQ_ROWS_FOLD_UNITS] = slot;
    }
    __syncthreads();
    const int used = s_first[QQ_ROWS_FOLD_UNITS];
    for (int idx = tid; idx < used * W; idx += blockDim.x) {
        const int j = idx / W, w = idx - j * W;
        xs[idx] = X[(size_t)s_row[j] * W + w];
        zs[idx] = Z[(size_t)s_row[j] * W + w];
    }
    if (tid < used) s_sign[tid] = S[s_row[tid]];
    __syncthreads();
    for (int j = warp; j < used; j += QQ_ROWS_FOLD_WARPS) {  // a row through the window's collapses
        const long long r = s_row[j];
        int sign = s_sign[j];
        for (int i = 0; i < k; ++i) {
            const int* pl = ps + QQ_PLAN_FIELDS * i;
            if (pl[QQ_PLAN_ACTIVE]) {
                const int p = pl[QQ_PLAN_P];
                int xp, zp, term;
                qq_row_cx(xs + (size_t)j * W, zs + (size_t)j * W, vs + (size_t)i * W, W, p, lane, &xp, &zp, &term);
                qq_row_finish(xs + (size_t)j * W, zs + (size_t)j * W, &sign, p, xp, zp, term, pl[QQ_PLAN_YZ],
                              pl[QQ_PLAN_INJECT], lane);
                __syncwarp();  // lane 0's pivot bits are written before the next collapse reads them
            }
            if (pl[QQ_PLAN_RESET] && (r == pl[QQ_PLAN_Q] || r == (long long)n + pl[QQ_PLAN_Q])) sign = 0;
        }
        if (lane == 0) s_sign[j] = sign;
    }
    __syncthreads();
    // The gates: QQ_ROWS_FOLD_UNIT_WARPS warps a unit, their lanes striding over the words.
    const int u = warp / QQ_ROWS_FOLD_UNIT_WARPS, part = warp % QQ_ROWS_FOLD_UNIT_WARPS;
    const int op = s_op[u], first = s_first[u];
    const int arity = op >= 0 ? qq_arity[op] : 0, count = 2 * arity;
    int ph[4] = {0, 0, 0, 0};
    if (op >= 0) {
        const unsigned char(*img)[5] = qq_inverse_images[op];
        for (int w = part * 32 + lane; w < W; w += 32 * QQ_ROWS_FOLD_UNIT_WARPS) {
            qq_u64 in[8] = {0, 0, 0, 0, 0, 0, 0, 0}, out[8];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                if (r < count) {
                    in[2 * r] = xs[(size_t)(first + r) * W + w];
                    in[2 * r + 1] = zs[(size_t)(first + r) * W + w];
                }
            }
            qq_gate_word(img, in, out, ph);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                if (r < count) {
                    X[(size_t)s_row[first + r] * W + w] = out[2 * r];
                    Z[(size_t)s_row[first + r] * W + w] = out[2 * r + 1];
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        for (int off = 16; off > 0; off >>= 1) ph[g] += __shfl_xor_sync(QQ_FULL_MASK, ph[g], off);
        if (lane == 0) s_phase[u][part][g] = ph[g];
    }
    __syncthreads();
    if (op < 0 || part != 0 || lane >= count) return;
    int old[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) old[r] = r < count ? s_sign[first + r] : 0;
    int sum = 0;
    for (int t = 0; t < QQ_ROWS_FOLD_UNIT_WARPS; ++t) sum += s_phase[u][t][lane];
    S[s_row[first + lane]] = (unsigned char)qq_gate_sign(qq_inverse_images[op], arity, lane, sum, old);
}
