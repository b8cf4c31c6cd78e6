// measure_block.cu: the one-block path of a measurement window (paper Algs. 5, 7 and 8), in tableau
// mode for small tableaux (W words a row, W <= QQ_BLOCK_MAX_W, i.e. n <= 4096), in gate layout
// X[r*W + w] (rows as in gates.cu).
//
// measure_window_block: a whole window of collapses [cstart, cend) in ONE block of QQ_WINDOW_BLOCK
// threads, in gate layout: no transposes and one launch a window instead of two a collapse (QEC
// reference samples: hundreds of small collapses a round). Per collapse, in program order: Alg. 5
// (pivot = lowest set bit of zx[q]), then each thread takes rows r = tid, tid + blockDim, ...: Alg. 7
// (eq. CXSign/zc along the victim words), block barrier, Alg. 8's swap (H_YZ if zz[q] has bit p
// after the CXs, else H), barrier, X injection when the coin disagrees with zrow[q]'s sign (both
// from measure_swap.cuh). Collapses already deterministic when their chunk of QQ_WINDOW_BLOCK
// starts (most of a QEC round) are found in parallel and only read their sign. Resets clear both
// of q's signs after their collapse. Semantics: docs/engine-semantics.md, "Z measurement of qubit q".
//
// Kernel:
//   measure_window_block  grid 1, blockDim.x == QQ_WINDOW_BLOCK.
#include "paulis.cuh"
#include "tables.cuh"
#include "measure_swap.cuh"

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
                    for (size_t r = tid; r < R; r += B) {
                        int s = S[r];
                        qq_inject_x((int)((Z[r * W + pw] >> pb) & 1), &s);
                        S[r] = (unsigned char)s;
                    }
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
