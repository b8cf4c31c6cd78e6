// measure_plan.cu: the decisions of a measurement window (paper Algs. 5-8 batched: pivot, victims,
// CX closed form, H / H_YZ and the coin's X) on the k measured qubits' rows alone, spread over the
// multiprocessors. Semantics: docs/engine-semantics.md, "Z measurement of qubit q" (the sequential
// Algorithm 1), bit for bit.
//
//   measure_window_plan  gathers the zrows of the window's k measured qubits (the slice, k x W words
//                        in sx, sz) and runs the window's collapses on it, in program order: pivot
//                        (Alg. 5), victims (Alg. 6: V_i, one row of the k x W mask buffer), CX closed
//                        form (Alg. 7), H / H_YZ and the coin's X (Alg. 8). It writes the records, the
//                        plan (measure_plan.cuh) and the number of random collapses (`active`), which
//                        measure_rows_apply (measure_rows.cu) and the low-rank update
//                        (measure_lowrank.cu) then carry to the whole tableau. With `side`, the
//                        k rows come from X, Z, S as given, row j of collapse j (lowrank_ahead's
//                        rows of a window decided before the pass that brings the tableau to it).
//
// Block b owns word columns [bW/B, (b+1)W/B) of the slice (B = gridDim.x). A random collapse i is
// one grid-wide step: every block runs Alg. 7 on its columns for the rows still to decide (j >= i)
// and publishes per row the (term, parity) pair of its segment. The closed form's carry identity
// combines the blocks' pairs in column order, (t1, p1)(t2, p2) = (t1 ^ t2 ^ p1 p2, p1 ^ p2), as
// measure_rows_apply combines its warps. With them it publishes the first x bit of row i+1 in its
// columns (the pivot's candidate) and every row's x and z bits in that column (the next collapse's
// x_p, z_p). After a grid barrier every block folds the pairs and finishes every row the same way
// (sign, swap, coin, X injection: 32 rows a word, qq_swap_pivot on bit planes), and the block that
// owns the pivot's word writes the pivot bits into its columns. So each collapse costs one barrier,
// and each slice word stays with one multiprocessor: in its shared memory when the block's columns
// of the k rows fit there (`slice_in_smem`), else in sx, sz (its L1). The published words are
// double-buffered by collapse parity: a block writes step i+1's while a slower one may still read
// step i's. A step's chain is latency: the instruction fields and coins are read once at the start,
// and x_p, z_p are read from block 0 (where a dense row's first x bit lies) with the candidates,
// again from the owner only when it is another block. (Waiting on tagged words instead of a barrier
// was 3x slower on an H100: every block polling every block's words loads L2 more than one counter.)
//
// The barrier (grid_barrier.cuh) needs every block resident at once: one QQ_PLAN_BLOCK-thread block
// a multiprocessor at most (the host's plan_blocks).
//
// Dynamic shared memory (plan_shared_bytes in measure.py, the same order): the block's V_i words
// (cols = ceil(W / B) at most), the slice's x and z planes when slice_in_smem (k x cols words each),
// per collapse its qubit and record index, then QQ_PLAN_PLANES bit planes of the k collapses (32 a
// word): signs, x_p, z_p, the last pivot's bits after its collapse (x, z), the folded term and
// parity, reset?, no record (R)?, inverted?, coin.
#include "paulis.cuh"
#include "tables.cuh"
#include "measure_swap.cuh"
#include "measure_plan.cuh"
#include "grid_barrier.cuh"

#define QQ_PLAN_BLOCK 512
#define QQ_PLAN_MAX_BLOCKS 256                      // the published words' allocation (measure.py)
#define QQ_PLAN_PER_LANE (QQ_PLAN_MAX_BLOCKS / 32)  // blocks a lane reads when a warp folds them
#define QQ_PLAN_PLANES 11                           // bit planes of the k collapses in shared memory
#define QQ_PLAN_NONE 0x7FFFFFFF                     // no candidate pivot in a block's columns
#define QQ_PLAN_FULL 0xFFFFFFFFu

// Published words of one step (u32), for B blocks and RW words of 32 rows: the candidates [B], then
// per row word r the blocks' terms, parities, and x and z bits at their candidate, [r][B] each (the
// fold reads a row word's blocks with consecutive lanes).
struct QQPlanPub {
    unsigned* cand;
    unsigned *term, *par, *cx, *cz;
};

__device__ __forceinline__ QQPlanPub qq_plan_pub(unsigned* pub, int step, int B, int RW) {
    unsigned* base = pub + (size_t)(step & 1) * B * (1 + 4 * RW);
    const size_t plane = (size_t)RW * B;
    return {base, base + B, base + B + plane, base + B + 2 * plane, base + B + 3 * plane};
}

// This block's columns of the slice: word (j, w) of a plane at rows[j * stride + w - c0].
struct QQPlanSlice {
    qq_u64 *x, *z;
    int stride, c0, c1;
    __device__ __forceinline__ qq_u64* xw(int j, int w) const { return x + (size_t)j * stride + (w - c0); }
    __device__ __forceinline__ qq_u64* zw(int j, int w) const { return z + (size_t)j * stride + (w - c0); }
};

__device__ __forceinline__ unsigned qq_bit(const unsigned* plane, int j) { return (plane[j >> 5] >> (j & 31)) & 1u; }

// The rows of word r in [lo, k).
__device__ __forceinline__ unsigned qq_rows_from(int r, int lo, int k) {
    const int a = max(lo - 32 * r, 0), e = min(k - 32 * r, 32);
    if (a >= e) return 0u;
    const unsigned upto = e == 32 ? QQ_PLAN_FULL : (1u << e) - 1u;
    return upto & ~((1u << a) - 1u);
}

// Row `row`'s first x bit in this block's columns, bit `skip` left out (-1: none), published with
// every later row's x and z bits in that column. Every warp searches (no block barrier): the same
// words, usually one load a lane; then each publishes the bits of its own rows.
__device__ __forceinline__ void qq_plan_candidate(const QQPlanSlice& sl, int row, int k, int skip, QQPlanPub out, int b,
                                                  int B) {
    const int tid = threadIdx.x, lane = tid & 31;
    int cand = QQ_PLAN_NONE;
    for (int base = sl.c0; base < sl.c1; base += 32) {
        const int w = base + lane;
        qq_u64 x = w < sl.c1 ? *sl.xw(row, w) : 0ull;
        if (skip >= 0 && w == (skip >> 6)) x &= ~(1ull << (skip & 63));
        const unsigned hit = __ballot_sync(QQ_PLAN_FULL, x != 0ull);
        if (hit) {
            const int f = __ffs(hit) - 1;
            cand = (base + f) * 64 + __shfl_sync(QQ_PLAN_FULL, x ? qq_ctz(x) : 0, f);
            break;
        }
    }
    if (tid == 0) out.cand[b] = (unsigned)cand;
    const bool found = cand != QQ_PLAN_NONE;  // without one the bits are zeros (only the owner's are used)
    const int cw = found ? cand >> 6 : 0, cb = cand & 63;
    for (int base = (row >> 5) << 5; base < k; base += blockDim.x) {  // warp-uniform: whole row words
        const int j = base + tid;
        const bool in = found && j >= row && j < k;
        const unsigned bx = __ballot_sync(QQ_PLAN_FULL, in && ((*sl.xw(j, cw) >> cb) & 1ull));
        const unsigned bz = __ballot_sync(QQ_PLAN_FULL, in && ((*sl.zw(j, cw) >> cb) & 1ull));
        if (lane == 0 && j < k) {
            out.cx[(size_t)(j >> 5) * B + b] = bx;
            out.cz[(size_t)(j >> 5) * B + b] = bz;
        }
    }
}

extern "C" __global__ void __launch_bounds__(QQ_PLAN_BLOCK, 1)
measure_window_plan(const QQTables* T, const int* ctx, int cstart, int cend, const qq_u64* X, const qq_u64* Z,
                    const unsigned char* S, qq_u64* sx, qq_u64* sz, int slice_in_smem, unsigned* pub, unsigned* bar,
                    int* plan, qq_u64* V, int* active, unsigned char* rec, int W, qq_u32 k0, qq_u32 k1,
                    int repetition, int reference, int side) {
    extern __shared__ qq_u64 plan_smem[];
    __shared__ int s_cand, s_owner, s_inject;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, threads = blockDim.x;
    const int B = gridDim.x, b = blockIdx.x;
    const int n = (int)T->n, k = cend - cstart, RW = (k + 31) >> 5;
    const int cols = (W + B - 1) / B;
    const int c0 = (int)((long long)b * W / B), c1 = (int)((long long)(b + 1) * W / B);
    const qq_key key = {k0, k1};
    qq_u64* vs = plan_smem;  // V_i on this block's columns
    QQPlanSlice sl;
    if (slice_in_smem) {
        sl = {vs + cols, vs + cols + (size_t)k * cols, cols, c0, c1};
    } else {
        sl = {sx + c0, sz + c0, W, c0, c1};
    }
    int* sQ = (int*)(vs + cols + (slice_in_smem ? (size_t)2 * k * cols : 0));
    int* sRec = sQ + k;
    unsigned* sS = (unsigned*)(sRec + k);
    unsigned *sXP = sS + RW, *sZP = sXP + RW, *sFX = sZP + RW, *sFZ = sFX + RW, *sT = sFZ + RW, *sP = sT + RW;
    unsigned *sReset = sP + RW, *sNoRec = sReset + RW, *sInvert = sNoRec + RW, *sCoin = sInvert + RW;

    for (int base = 0; base < k; base += threads) {  // the collapses' fields, signs and coins
        const int j = base + tid;
        bool sign = false, reset = false, norec = false, invert = false, coin = false;
        if (j < k) {
            const int* row = T->ins + (size_t)(cstart + j) * QQ_NF;
            sQ[j] = row[QQ_F_A];
            sRec[j] = row[QQ_F_REC] + ctx[0];
            sign = side ? S[j] : S[(size_t)n + row[QQ_F_A]];
            reset = row[QQ_F_OP] != QQ_OP_M;
            norec = row[QQ_F_OP] == QQ_OP_R;
            invert = row[QQ_F_FLAGS] & QQ_FLAG_INVERT;
            coin = !reference &&
                   (qq_word(key, QQ_STREAM_COIN, (qq_u32)(row[QQ_F_RAND] + ctx[1]), 0, (qq_u64)repetition) & 1);
        }
        const unsigned w_sign = __ballot_sync(QQ_PLAN_FULL, sign), w_reset = __ballot_sync(QQ_PLAN_FULL, reset);
        const unsigned w_norec = __ballot_sync(QQ_PLAN_FULL, norec), w_inv = __ballot_sync(QQ_PLAN_FULL, invert);
        const unsigned w_coin = __ballot_sync(QQ_PLAN_FULL, coin);
        if (lane == 0 && j < k) {
            sS[j >> 5] = w_sign;
            sReset[j >> 5] = w_reset;
            sNoRec[j >> 5] = w_norec;
            sInvert[j >> 5] = w_inv;
            sCoin[j >> 5] = w_coin;
        }
    }
    __syncthreads();
    for (size_t idx = tid; idx < (size_t)k * (c1 - c0); idx += threads) {  // gather this block's columns
        const int j = (int)(idx / (c1 - c0)), w = c0 + (int)(idx % (c1 - c0));
        const size_t r = side ? (size_t)j : (size_t)n + sQ[j];
        *sl.xw(j, w) = X[r * W + w];
        *sl.zw(j, w) = Z[r * W + w];
    }
    __syncthreads();
    unsigned step = 0;  // barriers passed
    qq_plan_candidate(sl, 0, k, -1, qq_plan_pub(pub, 0, B, RW), b, B);
    qq_grid_barrier(bar, ++step);

    int prev = -1, p_prev = -1;  // the last collapse if it was random (its finish is pending), its pivot
    int n_active = 0;
    for (int i = 0; i <= k; ++i) {
        const QQPlanPub in = qq_plan_pub(pub, i, B, RW);  // candidates for row i; collapse i-1's pairs
        // x_p, z_p of rows i..k-1 if block 0 owns the pivot: loaded now, with the candidates
        const int r_spec = (i >> 5) + tid;
        unsigned spec_x = 0u, spec_z = 0u;
        if (i < k && r_spec < RW) {
            spec_x = __ldcg(in.cx + (size_t)r_spec * B);
            spec_z = __ldcg(in.cz + (size_t)r_spec * B);
        }
        if (warp == 0) {  // the pivot's candidate: the least column of all blocks (columns are disjoint)
            int cand[QQ_PLAN_PER_LANE], best = QQ_PLAN_NONE, owner = 0;
#pragma unroll
            for (int u = 0; u < QQ_PLAN_PER_LANE; ++u)  // every load in flight at once
                cand[u] = i < k && lane + 32 * u < B ? (int)__ldcg(in.cand + lane + 32 * u) : QQ_PLAN_NONE;
#pragma unroll
            for (int u = 0; u < QQ_PLAN_PER_LANE; ++u)
                if (cand[u] < best) best = cand[u], owner = lane + 32 * u;
            for (int off = 16; off; off >>= 1) {
                const int c = __shfl_down_sync(QQ_PLAN_FULL, best, off), o = __shfl_down_sync(QQ_PLAN_FULL, owner, off);
                if (c < best) best = c, owner = o;
            }
            if (lane == 0) s_cand = best, s_owner = owner;
        } else if (prev >= 0) {  // fold collapse prev's pairs over the blocks, in column order
            const int per = (B + 31) >> 5, lo = min(B, lane * per), hi = min(B, lo + per);
            for (int r = (prev >> 5) + warp - 1; r < RW; r += (threads >> 5) - 1) {
                unsigned t = 0, p = 0, to[QQ_PLAN_PER_LANE], po[QQ_PLAN_PER_LANE];
#pragma unroll
                for (int u = 0; u < QQ_PLAN_PER_LANE; ++u) {  // every load in flight at once; (0, 0) is neutral
                    to[u] = lo + u < hi ? __ldcg(in.term + (size_t)r * B + lo + u) : 0u;
                    po[u] = lo + u < hi ? __ldcg(in.par + (size_t)r * B + lo + u) : 0u;
                }
#pragma unroll
                for (int u = 0; u < QQ_PLAN_PER_LANE; ++u) {
                    t ^= to[u] ^ (p & po[u]);
                    p ^= po[u];
                }
                for (int off = 1; off < 32; off <<= 1) {
                    const unsigned tu = __shfl_down_sync(QQ_PLAN_FULL, t, off);
                    const unsigned pu = __shfl_down_sync(QQ_PLAN_FULL, p, off);
                    if ((lane & (2 * off - 1)) == 0) {
                        t ^= tu ^ (p & pu);
                        p ^= pu;
                    }
                }
                if (lane == 0) {
                    sT[r] = t, sP[r] = p;
                    if (r == (prev >> 5)) {  // row prev's sign after the swap, which adds x_p z_p (H) or
                        // x_p ~z_p (H_YZ): 0 there, as yz is its z_p. The coin disagrees: X at p
                        const unsigned sign = qq_bit(sS, prev) ^ (qq_bit(sXP, prev) & (t >> (prev & 31)) & 1u);
                        s_inject = sign != qq_bit(sCoin, prev);
                    }
                }
            }
        }
        __syncthreads();
        if (prev >= 0) {  // finish collapse prev on rows prev..k-1: sign term, H / H_YZ (Alg. 8)
            const int yz = (int)(((sZP[prev >> 5] ^ sP[prev >> 5]) >> (prev & 31)) & 1u);  // z_p of row prev
            const bool inject = s_inject;
            for (int r = (prev >> 5) + tid; r < RW; r += threads) {
                const unsigned live = qq_rows_from(r, prev, k);
                unsigned x = sXP[r], z = sZP[r] ^ sP[r], s = sS[r] ^ (x & sT[r] & live);
                if (yz) {
                    s ^= x & ~z & live;
                    x ^= z;
                } else {
                    s ^= x & z & live;
                    const unsigned t = x;
                    x = z;
                    z = t;
                }
                sFX[r] = x & live;
                sFZ[r] = z & live;
                if (inject) s ^= z & live;
                if (r == (prev >> 5)) s &= ~(qq_bit(sReset, prev) << (prev & 31));
                sS[r] = s;
            }
            if (b == 0 && tid == 0) {
                const int coin = (int)qq_bit(sCoin, prev);
                if (!qq_bit(sNoRec, prev)) rec[sRec[prev]] = (unsigned char)(coin ^ (int)qq_bit(sInvert, prev));
                int* pl = plan + QQ_PLAN_FIELDS * prev;
                pl[QQ_PLAN_ACTIVE] = 1;
                pl[QQ_PLAN_P] = p_prev;
                pl[QQ_PLAN_YZ] = yz;
                pl[QQ_PLAN_INJECT] = inject;
                pl[QQ_PLAN_RESET] = (int)qq_bit(sReset, prev);
                pl[QQ_PLAN_Q] = sQ[prev];
            }
            __syncthreads();
        }
        if (i == k) break;
        const int pw_prev = prev >= 0 ? p_prev >> 6 : -1;
        if (c0 <= pw_prev && pw_prev < c1) {  // this block owns the last pivot's word: its bits, rows prev..
            const qq_u64 bit = 1ull << (p_prev & 63);
            for (int j = prev + tid; j < k; j += threads) {
                qq_u64* x = sl.xw(j, pw_prev);
                qq_u64* z = sl.zw(j, pw_prev);
                *x = qq_bit(sFX, j) ? *x | bit : *x & ~bit;
                *z = qq_bit(sFZ, j) ? *z | bit : *z & ~bit;
            }
        }
        int p = s_cand;
        const bool at_prev = prev >= 0 && qq_bit(sFX, i) && p_prev < p;  // the candidates left p_prev out
        if (at_prev) p = p_prev;
        const QQPlanPub out = qq_plan_pub(pub, i + 1, B, RW);
        if (p == QQ_PLAN_NONE) {  // deterministic: the outcome is the sign
            __syncthreads();      // the pivot bits are written; every thread has read s_cand
            if (tid == 0) {
                if (b == 0) {
                    int* pl = plan + QQ_PLAN_FIELDS * i;
                    if (!qq_bit(sNoRec, i)) rec[sRec[i]] = (unsigned char)(qq_bit(sS, i) ^ qq_bit(sInvert, i));
                    pl[QQ_PLAN_ACTIVE] = 0;
                    pl[QQ_PLAN_P] = -1;
                    pl[QQ_PLAN_YZ] = 0;
                    pl[QQ_PLAN_INJECT] = 0;
                    pl[QQ_PLAN_RESET] = (int)qq_bit(sReset, i);
                    pl[QQ_PLAN_Q] = sQ[i];
                }
                sS[i >> 5] &= ~(qq_bit(sReset, i) << (i & 31));
            }
            prev = -1;
            if (i + 1 < k) {
                qq_plan_candidate(sl, i + 1, k, -1, out, b, B);
                qq_grid_barrier(bar, ++step);
            }
            continue;
        }
        // x_p, z_p of rows i..k-1: the last pivot's bits after its collapse, or the owner's column
        const int owner = s_owner;
        for (int r = (i >> 5) + tid; r < RW; r += threads) {
            if (at_prev) {
                sXP[r] = sFX[r];
                sZP[r] = sFZ[r];
            } else {
                const bool spec = r == r_spec && owner == 0;
                sXP[r] = spec ? spec_x : __ldcg(in.cx + (size_t)r * B + owner);
                sZP[r] = spec ? spec_z : __ldcg(in.cz + (size_t)r * B + owner);
            }
            sT[r] = 0u;
            sP[r] = 0u;
        }
        const int pw = p >> 6;
        for (int w = c0 + tid; w < c1; w += threads) {  // V_i on this block's columns (Alg. 6)
            qq_u64 v = 0ull;
            if (w >= pw) {
                v = *sl.xw(i, w);
                if (w == pw_prev)  // the last pivot's bit is being written just now: take it from its plane
                    v = (v & ~(1ull << (p_prev & 63))) | ((qq_u64)qq_bit(sFX, i) << (p_prev & 63));
                if (w == pw) v &= ~(1ull << (p & 63));
            }
            vs[w - c0] = v;
            V[(size_t)i * W + w] = v;
        }
        __syncthreads();
        // Alg. 7 on this block's columns of rows i..k-1: g lanes a row, each a run of words
        const int lo = max(c0, pw), len = c1 - lo;
        if (len > 0) {
            int g = 1;
            while (g < 32 && 2 * g < len) g <<= 1;
            const int gl = lane & (g - 1), per = (len + g - 1) / g;
            const int wlo = lo + min(len, gl * per), whi = lo + min(len, gl * per + per);
            for (int base = i; base < k; base += threads / g) {  // warp-uniform: the shuffles below
                const int j = base + tid / g;
                const bool live = j < k;
                const int xp = live ? (int)qq_bit(sXP, j) : 0, zp = live ? (int)qq_bit(sZP, j) : 0;
                int term = 0, carry = 0;
                if (live)
                    for (int w = wlo; w < whi; ++w) {
                        const qq_u64 v = vs[w - c0];
                        if (!v) continue;
                        const qq_u64 zw = *sl.zw(j, w);
                        if (xp) {
                            qq_u64* x = sl.xw(j, w);
                            const qq_u64 xw = *x;
                            term ^= qq_cx_victims_word(xw, zw, v, zp, &carry);
                            *x = xw ^ v;  // the pivot's own bit is not in v
                        } else {
                            carry ^= qq_popc(zw & v) & 1;
                        }
                    }
                int incl = carry;  // the group's runs in column order: inclusive scan of parities
                for (int off = 1; off < g; off <<= 1) {
                    const int t = __shfl_up_sync(QQ_PLAN_FULL, incl, off, g);
                    if (gl >= off) incl ^= t;
                }
                term ^= (incl ^ carry) & carry;
                for (int off = g >> 1; off; off >>= 1) term ^= __shfl_xor_sync(QQ_PLAN_FULL, term, off, g);
                const int total = __shfl_sync(QQ_PLAN_FULL, incl, g - 1, g);
                if (live && gl == 0) {
                    if (term & 1) atomicOr(sT + (j >> 5), 1u << (j & 31));
                    if (total) atomicOr(sP + (j >> 5), 1u << (j & 31));
                }
            }
        }
        __syncthreads();
        for (int r = (i >> 5) + tid; r < RW; r += threads) {  // publish this block's pairs
            out.term[(size_t)r * B + b] = sT[r];
            out.par[(size_t)r * B + b] = sP[r];
        }
        n_active += 1;
        prev = i;
        p_prev = p;
        if (i + 1 < k) qq_plan_candidate(sl, i + 1, k, p, out, b, B);
        qq_grid_barrier(bar, ++step);
    }
    if (tid == 0 && b == 0) *active = n_active;
    qq_grid_barrier_done(bar);
}
