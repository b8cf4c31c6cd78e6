// gates.cu: tableau evolution under a window of gates (paper Alg. 3), inverse-tableau convention.
//
// Layout ("gate layout", row-major): rows 0..n-1 are xrow[k] = T⁻¹X_kT, rows n..2n-1 are zrow[k];
// X[r*W + w] / Z[r*W + w]: bit b is the X / Z part of row r at generator 64w + b; S[r] its sign.
// A gate on (q0, q1) replaces rows q0, n+q0, q1, n+q1 by products of the old rows
// (opcodes.INVERSE_IMAGES, in qq_inverse_images); each word of a row is independent except for the
// phase, which is summed over the row's words by a warp-shuffle / shared-memory reduction.
//
// Kernels:
//   tableau_init          grid-stride over 2n*W words; any launch shape (the engine uses blockDim.x ==
//                         QQ_INIT_BLOCK). The engine skips it when a run starts from a given tableau.
//   tableau_gates_window  instructions [start, end) of one window (unitaries and Pauli noise, no
//                         collapses): a group of 2^group_shift threads per instruction (1..32: one
//                         warp at most, so the phase sums reduce by shuffles alone), blockDim.x ==
//                         QQ_GATE_BLOCK; lanes stride over the W words of the rows that change (and
//                         read only the rows those are made of); the group's lane 0 writes the
//                         signs. Noise (tableau mode, one shot) flips signs only. Three blocks a
//                         multiprocessor (80 registers): the read and write masks had taken it to 101.
//   tableau_confusion     one thread: CONFUSION instruction i resamples its records for one shot.
//   tableau_differs       grid-stride over the 2n*W words of X and Z and the 2n signs: sets *differs
//                         where the tableau is not the saved one (a reference run's loop iterations
//                         stop repeating once it repeats: engines/cuda/tableau.py, `_LoopFolding`).
#include "paulis.cuh"
#include "tables.cuh"

#define QQ_GATE_BLOCK 256
#define QQ_INIT_BLOCK 256

extern "C" __global__ void tableau_init(qq_u64* X, qq_u64* Z, unsigned char* S, int n, int W) {
    const size_t total = (size_t)2 * n * W;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t r = idx / W, w = idx % W;
        const size_t k = r < (size_t)n ? r : r - n;
        const qq_u64 bit = (w == k / 64) ? (1ull << (k % 64)) : 0ull;
        X[idx] = r < (size_t)n ? bit : 0ull;
        Z[idx] = r < (size_t)n ? 0ull : bit;
        if (w == 0) S[r] = 0;
    }
}

extern "C" __global__ void tableau_differs(const qq_u64* X, const qq_u64* Z, const unsigned char* S,
                                           const qq_u64* X0, const qq_u64* Z0, const unsigned char* S0,
                                           int n, int W, unsigned int* differs) {
    const size_t total = (size_t)2 * n * W;
    bool d = false;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        d |= (X[idx] != X0[idx]) | (Z[idx] != Z0[idx]);
        if (idx < (size_t)2 * n) d |= S[idx] != S0[idx];
    }
    if (__any_sync(0xffffffffu, d) && (threadIdx.x & 31) == 0) *differs = 1u;
}

__device__ __forceinline__ void qq_apply_pauli_signs(unsigned char* S, int n, int q, int pauli) {
    if (pauli == 1 || pauli == 2) S[n + q] ^= 1;  // X (or Y) flips zrow's sign
    if (pauli == 2 || pauli == 3) S[q] ^= 1;      // Z (or Y) flips xrow's sign
}

extern "C" __global__ void __launch_bounds__(QQ_GATE_BLOCK, 3)
tableau_gates_window(const QQTables* T, const int* ctx, int start, int end, qq_u64* X, qq_u64* Z,
                     unsigned char* S, const unsigned char* rec, int W, qq_u32 k0, qq_u32 k1,
                     int repetition, int reference, int group_shift) {
    const int n = (int)T->n;
    const int gsize = 1 << group_shift;
    const int lane = threadIdx.x & (gsize - 1);
    const int i = start + (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> group_shift);
    const int* row = nullptr;
    int op = -1;
    bool run = false;
    if (i < end) {
        row = T->ins + (size_t)i * QQ_NF;
        op = row[QQ_F_OP];
        run = row[QQ_F_COND] < 0 || qq_condition_shot(T, row[QQ_F_COND], rec, ctx + 2);
    }
    const int kind = op >= 0 ? qq_kind[op] : -1;
    const bool unitary = run && kind == QQ_KIND_UNITARY && op != QQ_OP_I;
    const int arity = unitary ? qq_arity[op] : 0;
    size_t rows[4] = {0, 0, 0, 0};
    int ph[4] = {0, 0, 0, 0};
    if (unitary) {
        const int q0 = row[QQ_F_A], q1 = arity == 2 ? row[QQ_F_B] : row[QQ_F_A];
        rows[0] = q0;
        rows[1] = (size_t)n + q0;
        rows[2] = q1;
        rows[3] = (size_t)n + q1;
        const unsigned char(*img)[5] = qq_inverse_images[op];
        // Only the rows that change are written, and only the rows they are made of are read: a
        // Pauli changes signs alone, S one row of its two, CX and CZ two of their four. A new row
        // that is its old self has no phase (a product of one row), so it needs no word.
        int reads = 0, writes = 0;
        for (int g = 0; g < 2 * arity; ++g) {
            const int sel = qq_image_rows(img, arity, g);
            if (sel != 1 << g) {
                writes |= 1 << g;
                reads |= sel;
            }
        }
        for (int w = writes ? lane : W; w < W; w += gsize) {
            qq_u64 in[8], out[8];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                in[2 * r] = (reads >> r) & 1 ? X[rows[r] * W + w] : 0ull;
                in[2 * r + 1] = (reads >> r) & 1 ? Z[rows[r] * W + w] : 0ull;
            }
            qq_gate_word(img, in, out, ph);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                if ((writes >> r) & 1) {
                    X[rows[r] * W + w] = out[2 * r];
                    Z[rows[r] * W + w] = out[2 * r + 1];
                }
            }
        }
    }
    // Reduce the four phase sums over the group (inside a warp).
#pragma unroll
    for (int g = 0; g < 4; ++g)
        for (int off = gsize / 2; off > 0; off >>= 1) ph[g] += __shfl_xor_sync(0xFFFFFFFFu, ph[g], off);
    if (lane != 0 || !run) return;
    if (unitary) {
        const unsigned char(*img)[5] = qq_inverse_images[op];
        int old[4];
        for (int r = 0; r < 4; ++r) old[r] = r < 2 * arity ? S[rows[r]] : 0;
        for (int g = 0; g < 2 * arity; ++g) S[rows[g]] = (unsigned char)qq_gate_sign(img, arity, g, ph[g], old);
    } else if (kind == QQ_KIND_NOISE && !reference) {
        // One shot: lane (repetition % 64) of shot word repetition / 64, exactly as frame mode.
        const qq_key key = {k0, k1};
        const int c = row[QQ_F_AUX];
        const qq_u32 slot = (qq_u32)(row[QQ_F_RAND] + ctx[1]);
        const qq_u64 fire = qq_channel_fire(T, key, c, slot, (qq_u64)(repetition >> 6));
        if ((fire >> (repetition & 63)) & 1) {
            const int k = qq_channel_outcome(T, key, c, slot, (qq_u64)repetition);
            const int nt = qq_num_targets(row);
            for (int j = 0; j < nt; ++j) qq_apply_pauli_signs(S, n, qq_target(T, row, j), qq_channel_pauli(T, c, k, j));
        }
    }
}

extern "C" __global__ void tableau_confusion(const QQTables* T, const int* ctx, int i, unsigned char* rec,
                                             qq_u32 k0, qq_u32 k1, int repetition) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const int* row = T->ins + (size_t)i * QQ_NF;
    if (row[QQ_F_COND] >= 0 && !qq_condition_shot(T, row[QQ_F_COND], rec, ctx + 2)) return;
    const qq_key key = {k0, k1};
    const int f = row[QQ_F_AUX];
    const int k = T->cf_info[2 * f], off = T->cf_info[2 * f + 1];
    const int first = row[QQ_F_REC] + ctx[0];
    int truth = 0;
    for (int j = 0; j < k; ++j) truth = (truth << 1) | (rec[first + j] & 1);  // first record most significant
    const int cuts = (1 << k) - 1;
    const qq_u64 u = qq_word(key, QQ_STREAM_CONFUSION, (qq_u32)(row[QQ_F_RAND] + ctx[1]), 0, (qq_u64)repetition);
    const int got = qq_choose(T->thr + off + (size_t)truth * cuts, cuts, u);
    for (int j = 0; j < k; ++j) rec[first + j] = (unsigned char)((got >> (k - 1 - j)) & 1);
}
