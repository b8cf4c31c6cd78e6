// measure_scan.cu: paper Alg. 5 (pivot search) for every collapse of one measurement window at
// once, in tableau mode (inverse tableau, gate layout X[r*W + w]; rows as in gates.cu).
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q", step 1. A qubit whose zrow has
// no X part is deterministic: its record is its sign, written here (Alg. 5's search for all
// measurements of the window, with the deterministic outcomes computed in parallel). The engine
// reads flags[] back (the window's one host read) and launches measure_pivot / measure_eliminate
// only for the random collapses, or the low-rank path in pieces where there are many (on small
// tableaux only for windows past the batched width, which measure_window_block takes otherwise);
// with no host read it skips this kernel.
//
// Kernel:
//   measure_window_scan  one warp per collapse instruction of [cstart, cend);
//                        blockDim.x == QQ_SCAN_BLOCK, grid = ceil(32 (cend - cstart) / QQ_SCAN_BLOCK).
//                        flags[j] = 0 deterministic, 1 random (needs a collapse), 2 condition false
//                        (skipped), for instruction cstart + j.
#include "tables.cuh"

#define QQ_SCAN_BLOCK 256

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
