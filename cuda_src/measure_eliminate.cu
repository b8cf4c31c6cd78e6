// measure_eliminate.cu: paper Alg. 7 (prefix-XOR elimination) with Alg. 8 (swap at the pivot, X
// injection) fused into the same pass, for ONE random collapse, in tableau mode on the word-major
// tableau; launched right after measure_pivot, whose ms[] / vw[] / vmask[] it reads.
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q", steps 2-4. 2^seg_shift threads
// per row: the CX(p, t) of every victim t via the prefix-XOR closed form along the compacted victim
// words (segments combined by a block-level scan of their parities), then H / H_YZ and the X
// injection at generator p (measure_swap.cuh), and the reset of q's signs for R / MR.
//
// Word-major layout: X[w*2n + r], Z[w*2n + r] (word w of row r); S[r]; rows as in gates.cu.
//
// Kernel:
//   measure_eliminate  blockDim.x == QQ_ELIM_BLOCK; block b owns rows [b*rpb, b*rpb + rpb) with
//                      rpb = QQ_ELIM_BLOCK >> seg_shift, seg_shift in 0..QQ_ELIM_MAX_SEG_SHIFT;
//                      grid = ceil(2n / rpb).
#include "paulis.cuh"
#include "measure_state.cuh"
#include "measure_swap.cuh"

#define QQ_ELIM_BLOCK 256
#define QQ_ELIM_MAX_SEG_SHIFT 5

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
    if (ms[QQ_MS_INJECT]) qq_inject_x(zp, &s);
    const int q = ms[QQ_MS_Q];
    if (ms[QQ_MS_RESET] && (r == (size_t)q || r == (size_t)n + q)) s = 0;
    const qq_u64 bit = 1ull << pb;
    X[(size_t)pw * R + r] = (xpw & ~bit) | (xp ? bit : 0ull);
    Z[(size_t)pw * R + r] = (zpw & ~bit) | (zp ? bit : 0ull);
    S[r] = (unsigned char)s;
}
