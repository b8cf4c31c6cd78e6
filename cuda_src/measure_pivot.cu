// measure_pivot.cu: paper Alg. 5 (pivot re-check) + Alg. 6 (victim-word compaction) for ONE random
// collapse of a measurement window, in tableau mode on the word-major tableau.
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q", steps 1-2 and 4-5. For random
// collapse i, in program order, measure_pivot re-checks the pivot (a collapse can make a later one
// deterministic), compacts the victim words of zx[q] and decides the whole update: the H / H_YZ
// choice, the coin and whether X is injected (Alg. 8), written to ms[] (measure_state.cuh) with the
// compacted victim words vw[] / vmask[], so measure_eliminate needs no host round trip.
// Deterministic resets keep their program order (they clear signs that later collapses of the
// window also touch): measure_pivot clears those between the previous random collapse and its own
// (instructions [pend_start, pend_end), flags[] from measure_window_scan); with i < 0 it does only
// that (the window's tail). With no host read (small tableaux), the engine skips
// measure_window_scan and launches measure_pivot / measure_eliminate for every collapse:
// measure_pivot then settles the deterministic ones itself, in program order.
//
// Word-major layout: X[w*2n + r], Z[w*2n + r] (word w of row r); S[r]; rows as in gates.cu.
//
// Kernel:
//   measure_pivot  exactly one block of QQ_PIVOT_BLOCK threads.
#include <cub/block/block_scan.cuh>
#include "paulis.cuh"
#include "tables.cuh"
#include "measure_state.cuh"

#define QQ_PIVOT_BLOCK 512

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
