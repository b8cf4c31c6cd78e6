// measure.cu: Z measurements of one window in tableau mode (paper Algs. 5-8, inverse tableau).
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q". Per window the engine launches
//   measure_window_scan once (gate layout): every collapse of the window at once; a qubit whose
//     zrow has no X part is deterministic: its record is its sign, written here (Alg. 5's search
//     for all measurements of the window, with the deterministic outcomes computed in parallel).
//     flags[j] = 0 deterministic, 1 random (needs a collapse), 2 condition false (skipped).
//   then, only if some flag is 1, the tableau is transposed to word-major (transpose.cu) and for
//   each random collapse i, in program order:
//     measure_pivot      (Alg. 5 + Alg. 6) re-checks the pivot (a collapse can make a later one
//                        deterministic), compacts the victim words of zx[q] and decides the whole
//                        update: the H / H_YZ choice, the coin and whether X is injected (Alg. 8),
//                        so the next kernel needs no host round trip.
//     measure_eliminate  (Alg. 7 + Alg. 8) 2^seg_shift threads per row: the CX(p, t) of every
//                        victim t via the prefix-XOR closed form along the compacted victim words
//                        (segments combined by a block-level scan of their parities), then H / H_YZ
//                        and the X injection at generator p.
//   Deterministic resets keep their program order (they clear signs that later collapses of the
//   window also touch): measure_pivot clears those between the previous random collapse and its own
//   (instructions [pend_start, pend_end)); with i < 0 it does only that (the window's tail).
//
// Word-major layout: X[w*2n + r], Z[w*2n + r] (word w of row r); S[r]; rows as in gates.cu.
// Measurement state ms[]: active, p, victim word count, H_YZ?, inject X?, reset?, q.
//
// Kernels:
//   measure_window_scan  one warp per collapse instruction of [cstart, cend); blockDim.x == 256.
//   measure_pivot        exactly one block of QQ_PIVOT_BLOCK threads.
//   measure_eliminate    blockDim.x == QQ_ELIM_BLOCK; block b owns rows [b*rpb, b*rpb + rpb) with
//                        rpb = QQ_ELIM_BLOCK >> seg_shift, seg_shift in 0..5.
//   With no host read (small tableaux), the engine skips measure_window_scan and launches
//   measure_pivot / measure_eliminate for every collapse: measure_pivot then settles the
//   deterministic ones itself, in program order.
//   measure_window_block (tableaux of at most QQ_BLOCK_MAX_W words a row): the whole window in one
//                        block, gate layout, one launch; described above its definition.
#include <cub/block/block_scan.cuh>
#include "paulis.cuh"
#include "tables.cuh"

#define QQ_PIVOT_BLOCK 512
#define QQ_ELIM_BLOCK 256

#define QQ_MS_ACTIVE 0
#define QQ_MS_P 1
#define QQ_MS_NV 2
#define QQ_MS_YZ 3
#define QQ_MS_INJECT 4
#define QQ_MS_RESET 5
#define QQ_MS_Q 6

extern "C" __global__ void measure_window_scan(const QQTables* T, const int* ctx, int cstart, int cend,
                                               const qq_u64* X, const unsigned char* S, unsigned char* rec,
                                               int* flags, int W) {
    const int g = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    const int i = cstart + g;
    if (i >= cend) return;  // whole warps
    const int n = (int)T->n;
    const int* row = T->ins + (size_t)i * QQ_NF;
    if (row[QQ_F_COND] >= 0 && !qq_condition_shot(T, row[QQ_F_COND], rec, ctx + 2)) {
        if (lane == 0) flags[g] = 2;
        return;
    }
    const size_t rr = (size_t)n + row[QQ_F_A];
    bool any = false;
    for (int w = lane; w < W; w += 32) any |= X[rr * W + w] != 0ull;
    any = __any_sync(0xFFFFFFFFu, any);
    if (lane != 0) return;
    flags[g] = any ? 1 : 0;
    if (!any && row[QQ_F_OP] != QQ_OP_R)
        rec[row[QQ_F_REC] + ctx[0]] = (unsigned char)((S[rr] ^ row[QQ_F_FLAGS]) & QQ_FLAG_INVERT);
}

extern "C" __global__ void __launch_bounds__(QQ_PIVOT_BLOCK)
measure_pivot(const QQTables* T, const int* ctx, int i, int pend_start, int pend_end, const int* flags,
              int cstart, const qq_u64* X, const qq_u64* Z, unsigned char* S, unsigned char* rec, int* ms,
              int* vw, qq_u64* vmask, int W, qq_u32 k0, qq_u32 k1, int repetition, int reference) {
    typedef cub::BlockScan<unsigned int, QQ_PIVOT_BLOCK> Scan;
    __shared__ typename Scan::TempStorage scan_tmp;
    __shared__ int s_first;
    const int tid = threadIdx.x;
    const int n = (int)T->n;
    const size_t R = (size_t)2 * n;
    // Deterministic resets of this window that come before instruction i in program order.
    for (int j = pend_start + tid; j < pend_end; j += QQ_PIVOT_BLOCK) {
        const int* rj = T->ins + (size_t)j * QQ_NF;
        if (flags[j - cstart] == 0 && rj[QQ_F_OP] != QQ_OP_M) {
            S[rj[QQ_F_A]] = 0;
            S[n + rj[QQ_F_A]] = 0;
        }
    }
    if (i < 0) return;
    const int* row = T->ins + (size_t)i * QQ_NF;
    if (row[QQ_F_COND] >= 0 && !qq_condition_shot(T, row[QQ_F_COND], rec, ctx + 2)) {
        if (tid == 0) ms[QQ_MS_ACTIVE] = 0;  // classically controlled and the condition is false
        return;
    }
    const int op = row[QQ_F_OP];
    const int q = row[QQ_F_A];
    const size_t rr = (size_t)n + q;
    const bool measured = op != QQ_OP_R, reset = op != QQ_OP_M;
    const int rec_slot = row[QQ_F_REC] + ctx[0];
    const int invert = row[QQ_F_FLAGS] & QQ_FLAG_INVERT;
    // Alg. 5: the pivot is the lowest set bit of zx[q] (row n+q of the X part).
    if (tid == 0) s_first = W;
    __syncthreads();
    for (int w = tid; w < W; w += QQ_PIVOT_BLOCK)
        if (X[(size_t)w * R + rr]) atomicMin(&s_first, w);
    __syncthreads();
    const int pw = s_first;
    if (pw == W) {  // deterministic by now: the outcome is the sign
        if (tid == 0) {
            if (measured) rec[rec_slot] = (unsigned char)((S[rr] ^ invert) & 1);
            if (reset) S[q] = S[rr] = 0;
            ms[QQ_MS_ACTIVE] = 0;
        }
        return;
    }
    const qq_u64 xw_p = X[(size_t)pw * R + rr];
    const qq_u64 low = xw_p & (~xw_p + 1);
    const int p = pw * 64 + qq_ctz(xw_p);
    const int zp = (int)((Z[(size_t)pw * R + rr] >> (p & 63)) & 1);
    // Alg. 6: compact the nonzero victim words (bits of zx[q] above p) in increasing order. The same
    // scan carries the parity of zv = zz[q] & V, from which zrow[q]'s own sign after the
    // elimination follows (its x bits are 1 on V, so its term is zv & (z_p ^ c)).
    int count = 0, parity = 0, term = 0;
    for (int base = pw; base < W; base += QQ_PIVOT_BLOCK) {
        const int w = base + tid;
        qq_u64 v = 0, zv = 0;
        if (w < W) {
            v = X[(size_t)w * R + rr];
            if (w == pw) v ^= low;
            zv = Z[(size_t)w * R + rr] & v;
        }
        const unsigned int packed = ((v != 0ull) ? (1u << 16) : 0u) | (unsigned int)(qq_popc(zv) & 1);
        unsigned int excl, total;
        Scan(scan_tmp).ExclusiveSum(packed, excl, total);
        if (v) {
            const int idx = count + (int)(excl >> 16);
            vw[idx] = w;
            vmask[idx] = v;
            const qq_u64 c = (qq_prefix_xor_inclusive(zv) ^ zv) ^ qq_spread((parity + (int)excl) & 1);
            term ^= qq_popc(zv & (qq_spread(zp) ^ c)) & 1;
        }
        count += (int)(total >> 16);
        parity += (int)(total & 0xFFFFu);
        __syncthreads();  // scan_tmp is reused
    }
    const int zs_term = __syncthreads_count(term) & 1;
    if (tid == 0) {
        const qq_key key = {k0, k1};
        const int zp_after = zp ^ (parity & 1);  // bit p of zz[q] after the CXs: H_YZ if set
        const int zs_after = S[rr] ^ zs_term;    // H / H_YZ leave zrow[q]'s sign alone
        const int coin = reference ? 0 : (int)(qq_word(key, QQ_STREAM_COIN, (qq_u32)(row[QQ_F_RAND] + ctx[1]), 0,
                                                       (qq_u64)repetition) & 1);
        if (measured) rec[rec_slot] = (unsigned char)((coin ^ invert) & 1);
        ms[QQ_MS_ACTIVE] = 1;
        ms[QQ_MS_P] = p;
        ms[QQ_MS_NV] = count;
        ms[QQ_MS_YZ] = zp_after;
        ms[QQ_MS_INJECT] = zs_after ^ coin;
        ms[QQ_MS_RESET] = reset ? 1 : 0;
        ms[QQ_MS_Q] = q;
    }
}

extern "C" __global__ void __launch_bounds__(QQ_ELIM_BLOCK)
measure_eliminate(qq_u64* X, qq_u64* Z, unsigned char* S, const int* ms, const int* vw, const qq_u64* vmask,
                  int n, int seg_shift) {
    // K = 2^seg_shift threads share a row, each taking one contiguous segment of the compacted
    // victim words (pass one: local prefix XOR, the segment's sign term for carry-in 0 and its
    // parity); the block then scans the K segment parities (pass two) and the segment-0 thread
    // folds them in (pass three): a carry-in c flips a segment's term by c & parity, because
    // zv & ~y and zv & y split zv.
    __shared__ unsigned char s_term[QQ_ELIM_BLOCK], s_par[QQ_ELIM_BLOCK];
    if (!ms[QQ_MS_ACTIVE]) return;
    const int p = ms[QQ_MS_P], nv = ms[QQ_MS_NV];
    const int K = 1 << seg_shift, rows_per_block = QQ_ELIM_BLOCK >> seg_shift;
    const int seg = threadIdx.x / rows_per_block, lr = threadIdx.x - seg * rows_per_block;
    const size_t R = (size_t)2 * n;
    const size_t r = blockIdx.x * (size_t)rows_per_block + lr;
    const bool live = r < R;
    const int pw = p >> 6, pb = p & 63;
    qq_u64 xpw = live ? X[(size_t)pw * R + r] : 0ull;
    qq_u64 zpw = live ? Z[(size_t)pw * R + r] : 0ull;
    int xp = (int)((xpw >> pb) & 1), zp = (int)((zpw >> pb) & 1);
    const int len = (nv + K - 1) / K;
    const int lo = min(nv, seg * len), hi = min(nv, lo + len);
    int term = 0, carry = 0;
    // Alg. 7: CX(p, t) for every victim t of this segment, as a prefix XOR along the row.
    if (live) {
        for (int k = lo; k < hi; ++k) {
            const int w = __ldg(vw + k);
            const qq_u64 v = __ldg(vmask + k);
            const qq_u64 zw = w == pw ? zpw : Z[(size_t)w * R + r];
            if (xp) {
                const qq_u64 xw = w == pw ? xpw : X[(size_t)w * R + r];
                term ^= qq_cx_victims_word(xw, zw, v, zp, &carry);
                if (w == pw) xpw ^= v;  // only in segment 0: the pivot's word is victim word 0
                else X[(size_t)w * R + r] = xw ^ v;
            } else {
                carry ^= qq_popc(zw & v) & 1;  // x_p = 0: the sign term is unused, only z_p moves
            }
        }
    }
    s_term[threadIdx.x] = (unsigned char)term;
    s_par[threadIdx.x] = (unsigned char)carry;
    __syncthreads();
    if (seg != 0 || !live) return;
    int acc = 0, cin = 0;
    for (int t = 0; t < K; ++t) {
        const int idx = t * rows_per_block + lr;
        acc ^= s_term[idx] ^ (cin & s_par[idx]);
        cin ^= s_par[idx];
    }
    int s = S[r] ^ (xp & acc);
    zp ^= cin;
    // Alg. 8: swap in a generator that commutes with Z_q (H, or H_YZ for a Y-type pivot) ...
    qq_swap_pivot(ms[QQ_MS_YZ], &xp, &zp, &s);
    // ... and inject X at p when the coin disagrees with zrow[q]'s sign.
    if (ms[QQ_MS_INJECT]) s ^= zp;
    const int q = ms[QQ_MS_Q];
    if (ms[QQ_MS_RESET] && (r == (size_t)q || r == (size_t)n + q)) s = 0;
    const qq_u64 bit = 1ull << pb;
    X[(size_t)pw * R + r] = (xpw & ~bit) | (xp ? bit : 0ull);
    Z[(size_t)pw * R + r] = (zpw & ~bit) | (zp ? bit : 0ull);
    S[r] = (unsigned char)s;
}

// measure_window_block: a whole window of collapses [cstart, cend) for a small tableau (W words a
// row, W <= QQ_BLOCK_MAX_W) in ONE block of QQ_WINDOW_BLOCK threads, in gate layout: no transposes
// and one launch a window instead of two a collapse (QEC reference samples: hundreds of small
// collapses a round). Per collapse, in program order: Alg. 5 (pivot = lowest set bit of zx[q]),
// then each thread takes rows r = tid, tid + blockDim, ...: Alg. 7 (eq. CXSign/zc along the
// victim words), block barrier, Alg. 8's swap (H_YZ if zz[q] has bit p after the CXs, else H),
// barrier, X injection when the coin disagrees with zrow[q]'s sign. Collapses already
// deterministic when their chunk of QQ_WINDOW_BLOCK starts (most of a QEC round) are found in
// parallel and only read their sign. Resets clear both of q's signs after their collapse.
// Launch: grid 1, blockDim.x == QQ_WINDOW_BLOCK.
#define QQ_WINDOW_BLOCK 1024
#define QQ_BLOCK_MAX_W 64

extern "C" __global__ void __launch_bounds__(QQ_WINDOW_BLOCK)
measure_window_block(const QQTables* T, const int* ctx, int cstart, int cend, qq_u64* X, qq_u64* Z,
                     unsigned char* S, unsigned char* rec, int W, qq_u32 k0, qq_u32 k1, int repetition,
                     int reference) {
    __shared__ int s_first;
    __shared__ qq_u64 s_v[QQ_BLOCK_MAX_W];  // the victim mask: zx[q] without the pivot bit
    __shared__ unsigned char s_det[QQ_WINDOW_BLOCK];
    const int tid = threadIdx.x, B = blockDim.x;
    const int n = (int)T->n;
    const size_t R = (size_t)2 * n;
    const qq_key key = {k0, k1};
    for (int base = cstart; base < cend; base += B) {
        // Collapses that are deterministic now stay so, with the same outcome, whatever the others of
        // the window do (Alg. 5 for a whole chunk at once); only their resets must keep their order.
        {
            const int i = base + tid;
            unsigned char det = 0;
            if (i < cend && T->ins[(size_t)i * QQ_NF + QQ_F_COND] < 0) {
                const size_t rr = (size_t)n + T->ins[(size_t)i * QQ_NF + QQ_F_A];
                det = 1;
                for (int w = 0; w < W; ++w) det &= X[rr * W + w] == 0ull;
            }
            s_det[tid] = det;
            __syncthreads();
        }
        for (int i = base; i < min(cend, base + B); ++i) {
            const int* row = T->ins + (size_t)i * QQ_NF;
            const int op = row[QQ_F_OP], q = row[QQ_F_A];
            const size_t rr = (size_t)n + q;
            if (s_det[i - base]) {
                if (tid == 0) {
                    if (op != QQ_OP_R) rec[row[QQ_F_REC] + ctx[0]] = (unsigned char)((S[rr] ^ row[QQ_F_FLAGS]) & QQ_FLAG_INVERT);
                    if (op != QQ_OP_M) S[q] = S[rr] = 0;
                }
                if (op != QQ_OP_M) __syncthreads();  // later collapses flip signs after this reset
                continue;
            }
            __syncthreads();  // thread 0's record writes are visible to the condition below
            // Uniform over the block: rec is only written by thread 0 before a barrier.
            if (row[QQ_F_COND] >= 0 && !qq_condition_shot(T, row[QQ_F_COND], rec, ctx + 2)) continue;
            if (tid == 0) s_first = W;
            __syncthreads();
            for (int w = tid; w < W; w += B)
                if (X[rr * W + w]) atomicMin(&s_first, w);
            __syncthreads();
            const int pw = s_first;
            int outcome = S[rr];
            if (pw < W) {
                const qq_u64 xw_p = X[rr * W + pw];
                const int pb = qq_ctz(xw_p);
                const int coin = reference ? 0 : (int)(qq_word(key, QQ_STREAM_COIN, (qq_u32)(row[QQ_F_RAND] + ctx[1]), 0,
                                                               (qq_u64)repetition) & 1);
                for (int w = tid; w < W; w += B) s_v[w] = w < pw ? 0ull : (w == pw ? xw_p & (xw_p - 1) : X[rr * W + w]);
                __syncthreads();
                // Alg. 7 on each of this thread's rows.
                for (size_t r = tid; r < R; r += B) {
                    qq_u64 xpw = X[r * W + pw], zpw = Z[r * W + pw];
                    const int xp = (int)((xpw >> pb) & 1), zp = (int)((zpw >> pb) & 1);
                    int carry = 0, term = 0;
                    for (int w = pw; w < W; ++w) {
                        const qq_u64 v = s_v[w];
                        if (!v) continue;
                        const qq_u64 zw = w == pw ? zpw : Z[r * W + w];
                        if (xp) {
                            const qq_u64 xw = w == pw ? xpw : X[r * W + w];
                            term ^= qq_cx_victims_word(xw, zw, v, zp, &carry);
                            if (w == pw) xpw ^= v;
                            else X[r * W + w] = xw ^ v;
                        } else {
                            carry ^= qq_popc(zw & v) & 1;
                        }
                    }
                    X[r * W + pw] = xpw;
                    Z[r * W + pw] = zpw ^ ((qq_u64)(carry & 1) << pb);
                    S[r] ^= (unsigned char)(xp & term);
                }
                __syncthreads();
                // Alg. 8: swap in a generator that commutes with Z_q, then inject X on the coin.
                const int y_type = (int)((Z[rr * W + pw] >> pb) & 1);
                const qq_u64 bit = 1ull << pb;
                for (size_t r = tid; r < R; r += B) {
                    qq_u64 xpw = X[r * W + pw], zpw = Z[r * W + pw];
                    int xp = (int)((xpw >> pb) & 1), zp = (int)((zpw >> pb) & 1);
                    int s = S[r];
                    qq_swap_pivot(y_type, &xp, &zp, &s);
                    X[r * W + pw] = (xpw & ~bit) | (xp ? bit : 0ull);
                    Z[r * W + pw] = (zpw & ~bit) | (zp ? bit : 0ull);
                    S[r] = (unsigned char)s;
                }
                __syncthreads();
                const bool inject = S[rr] != coin;
                __syncthreads();  // every thread has read zrow[q]'s sign before any flips it
                if (inject)
                    for (size_t r = tid; r < R; r += B) S[r] ^= (unsigned char)((Z[r * W + pw] >> pb) & 1);
                outcome = coin;
                __syncthreads();
            }
            if (tid == 0) {
                if (op != QQ_OP_R) rec[row[QQ_F_REC] + ctx[0]] = (unsigned char)((outcome ^ row[QQ_F_FLAGS]) & QQ_FLAG_INVERT);
                if (op != QQ_OP_M) S[q] = S[rr] = 0;
            }
            __syncthreads();
        }
        __syncthreads();  // s_det is rewritten for the next chunk
    }
}
