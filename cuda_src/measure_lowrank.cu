// measure_lowrank.cu: the random collapses of a measurement window as ONE low-rank update of the
// tableau (window-batched collapse, after paper Algs. 5-8), in gate layout, bit for bit the
// sequential Algorithm 1 (docs/engine-semantics.md). measure_window_plan (measure_plan.cu) decides the
// window on the measured qubits' rows; this file applies its decisions, QQ_LR_CHUNK collapses a
// pass (the chunks of a window run in order). The NumPy twin is TableauState._window_update.
//
// Algebra: split the columns into the chunk's pivots P and the rest N. On N, z never changes and x
// changes only by the CX fans: x_N ^= sum_i alpha_i v_i^N, alpha_i = the row's x at p_i when collapse
// i runs. So a row needs, from before the chunk, its bits on P and per collapse
// a_i = |z & v_i^N| mod 4 and b_i = |x & z & v_i^N| mod 2 (pass 1); a sequential phase on those few
// bits gives the alpha_i, the final bits on P and every sign term but the pairs' share, which is
// sum_{t in N} z_t C(c_t, 2) = |z & bit1(c)| mod 2 with c = sum_i alpha_i v_i^N, and x_N ^= bit0(c).
// That share needs bit0(c) alone. Over N, sum_t z_t c_t = sum_i alpha_i a_i, so mod 4
//   |z & bit0(c)| + 2 |z & bit1(c)| = sum_i alpha_i a_i = E - 2 |x & z & bit0(c)|
// with E = sum_i alpha_i e_i (e_i = a_i + 2 b_i below; sum_i alpha_i b_i = |x & z & bit0(c)| mod 2,
// x as before the chunk). With T = |z & bit0(c)| + 2 |x & z & bit0(c)| mod 4 that reads
// 2 |z & bit1(c)| = E - T mod 4, where E and T share their low bit, so the share is bit1(E) ^ bit1(T).
// The phase adds bit1(E); pass 2 forms bit0(c) and T (one bit plane of lookups, not two). The
// NumPy twin forms c mod 4 as two planes: the oracle of this form.
//   pass 1 is bit-matrix products on the tensor cores, e_i = |z & v_i^N| + 2 |x & z & v_i^N| mod 4
//          (mma b1 AND + POPC, 16 rows x 8 collapses x 256 columns an instruction), which is all the
//          phase needs of a_i and b_i (qq_lr_phase);
//   pass 2 is Method-of-Four-Russians lookups: per word and 5 collapses, a table of the 32 XORs of
//          their victim words, built in shared memory; a row XORs the entries its alpha bits pick,
//          five at a time, giving bit0(c) for the word (one plane: half the bytes of c mod 4).
// Pass 2 goes by tiles of columns, so that a block builds its tables once for thousands of rows and
// writes whole lines: a thread a row, 32 bytes a step, it ran at 36% of the copy bandwidth (H100,
// n = 100k, 7 collapses), by tiles at 67%.
//
// Kernels, per chunk of at most QQ_LR_CHUNK collapses (plan entries c0 .. c0+kc-1 of the window):
//   lowrank_prepare  the chunk's distinct pivots (P), the victim masks without them (VN,
//                    QQ_LR_CHUNK rows of W words, zero for deterministic collapses: a block a range
//                    of words), their bits at the pivots (vp), the span of words any victim or pivot
//                    holds (the last block to finish writes it); for the first
//                    chunk also the rows whose sign a reset of the window clears mid-window
//                    (`special`): the update leaves them and measure_rows_apply replays them one
//                    collapse at a time.
//   lowrank_counts_16, lowrank_counts_32, lowrank_counts_48, lowrank_counts_64, lowrank_counts_80,
//   lowrank_counts_96, lowrank_counts_112, lowrank_counts_128, lowrank_counts_144, lowrank_counts_160
//                    (a chunk takes the smallest that holds it: the tile loop has no branch, and
//                    at most one tile idles)
//                    pass 1 and the phase: a warp per 16 rows, QQ_LR_COUNT_ROWS rows a block; the
//                    block copies its rows' words and the victim words to shared memory
//                    QQ_LR_COUNT_STEP words a stage, QQ_LR_COUNT_STAGES stages in flight (cp.async),
//                    gathers its rows' bits at the pivots as their words go by, and the warps
//                    multiply; then a thread a row runs the phase (qq_lr_phase): the row's sign, and
//                    rowbits[3r..3r+2] = (alpha, its bits on P after the chunk: x, z).
//   lowrank_apply    pass 2 by tiles of QQ_LR_TILE words x groups of four rows: the tile's tables
//                    once, then QQ_LR_ROW_LANES lanes a row (below); it also writes the pivot bits,
//                    and per tile and group the rows' T mod 4 (their sign's share) for
//   lowrank_signs    a thread a group: the signs after the chunk (and after the folded gates).
//   lowrank_apply_gates  pass 2 with the next gate window folded in, when it follows the window's
//                    last chunk: each row read and written once for both (below).
//   lowrank_gate_groups, lowrank_idle_groups  the folded window's groups of rows: its two-qubit
//                    gates, one-qubit gates and idle qubits.
// Fused windows (a low-rank window, the gate window folded into it, then a low-rank window of one
// chunk): the next window's pass 1 rides on this one's last pass, so a layer reads and writes the
// tableau once instead of reading it twice and writing it once (measure.py, fuse_pass):
//   lowrank_ahead    the next window's measured rows (its zrows) as they will be after this chunk
//                    and the gates, k rows that measure_window_plan then decides on (`side`);
//                    lowrank_prepare prepares its chunk as usual.
//   lowrank_apply_gates_counts  lowrank_apply_gates, and per octet of new rows (a warp's two
//                    groups) the next window's e_i on the tensor cores, tile by tile as partial
//                    counts, and the rows' bits on its pivots (qq_lr_octet_counts).
//   lowrank_reduce   the partial counts summed over the tiles and the phase (qq_lr_phase): what
//                    lowrank_counts would have given on the rows the pass wrote.
//   lowrank_apply_wide, lowrank_apply_gates_wide, lowrank_apply_gates_counts_wide, lowrank_reduce_wide
//                    the same for a chunk of more than QQ_LR_NARROW (128) collapses, whose bit sets
//                    take three words: the others keep two (the paper's windows at 100k qubits hold
//                    2-74 collapses, at 180k 13-134); lowrank_apply_gates_counts_to_wide and
//                    lowrank_apply_gates_counts_wide_to_wide, the fused passes whose next window's
//                    first chunk is such a chunk.
// Gate layout: X[r*W + w], Z[r*W + w]; S[r]; rows 0..n-1 xrow, n..2n-1 zrow (gates.cu).
#include "paulis.cuh"
#include "tables.cuh"
#include "measure_swap.cuh"
#include "measure_plan.cuh"

// Collapses a pass: a window of up to QQ_LR_CHUNK collapses reads the tableau twice. 160, not 128:
// the paper's circuit at 180k qubits measures 128 qubits a layer, and the layering moves the
// measurements of qubits a layer leaves idle into the window before, so 10 of its 110 windows hold
// 129-134 collapses (docs/benchmarks-collapse.md, run 13). 160 is what pass 2's tables, its exchange
// words and the next chunk's fragments leave room for in one block's shared memory (qq_lr_apply).
#define QQ_LR_CHUNK 160
#define QQ_LR_WORDS ((QQ_LR_CHUNK + 63) / 64)  // words of a per-collapse (or per-pivot) bit set
#define QQ_LR_ROWBITS (3 * QQ_LR_WORDS)  // lowrank_counts' words a row for lowrank_apply: alpha, x_P, z_P
#define QQ_LR_PREP_BLOCK 1024
#define QQ_LR_COUNT_BLOCK 256
#define QQ_LR_COUNT_ROWS ((QQ_LR_COUNT_BLOCK >> 5) * 16)  // a warp per 16 rows
#define QQ_LR_COUNT_STEP 8                                 // words of a row a stage
#define QQ_LR_COUNT_STAGES 3  // stages in flight (cp.async): two ahead of the one multiplied
#define QQ_LR_APPLY_BLOCK 1024  // one block a multiprocessor holds 160 collapses' tables (128 KiB)
#define QQ_LR_TILE 16              // words of a row pass 2 takes a tile
#define QQ_LR_SIGNS_BLOCK 256
#define QQ_LR_GROUPS_BLOCK 256
#define QQ_LR_META_KP 0
#define QQ_LR_META_LO 1
#define QQ_LR_META_HI 2
#define QQ_LR_META_SPECIAL 3
#define QQ_LR_META_FIELDS 4

// A bit per collapse or per pivot column of a chunk, as N 64-bit words: bit j is bit j & 63 of word
// j >> 6. A kernel keeps N = the words its chunks need (qq_lr_words_for), not QQ_LR_WORDS: a chunk
// of up to 128 collapses costs no more than it did before chunks grew past it. Every word is read
// or written with a mask that is all ones for word j >> 6 alone (qq_lr_pick), so the words stay in
// registers: a branch a word let the compiler rebuild it as an index at run time, which sends the
// array to local memory. Not unsigned __int128: nvcc 13.0 lowers `v & ~((unsigned __int128)1 << j)`
// to a 64-bit rotate of the low word whose shifts clamp for j >= 64, so clearing bit j >= 64 also
// cleared bits 0..63 (a chunk with more than 64 distinct pivots came out wrong;
// tests/test_cuda_sources.py keeps the type out of cuda_src). Every shift here is of a 64-bit word
// by j & 63. In memory a bit set takes QQ_LR_WORDS words whatever N (rowbits, vp, pbits), and a
// kernel reads and writes its first N: a chunk's bit sets are written and read by kernels of one N
// (both pick it by the chunk's collapses), so the words past N are never read.
template <int N>
struct qq_lr_bits {
    qq_u64 w[N];
};
static_assert(QQ_LR_CHUNK % 16 == 0 && QQ_LR_CHUNK <= 64 * QQ_LR_WORDS, "a chunk is whole tiles of 16 collapses");
#define QQ_LR_NARROW 128  // collapses a chunk may have for the kernels of two words (the others: _wide)
__host__ __device__ constexpr int qq_lr_words_for(int collapses) { return collapses <= QQ_LR_NARROW ? 2 : QQ_LR_WORDS; }
template <int N>
__device__ __forceinline__ qq_lr_bits<N> qq_lr_zero() {
    qq_lr_bits<N> v;
#pragma unroll
    for (int k = 0; k < N; ++k) v.w[k] = 0ull;
    return v;
}
template <int N>
__device__ __forceinline__ qq_lr_bits<N> qq_lr_load(const qq_u64* p) {  // N words from p
    qq_lr_bits<N> v;
#pragma unroll
    for (int k = 0; k < N; ++k) v.w[k] = p[k];
    return v;
}
template <int N>
__device__ __forceinline__ void qq_lr_store(qq_u64* p, qq_lr_bits<N> v) {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = v.w[k];
}
__device__ __forceinline__ qq_u64 qq_lr_pick(int j, int k) { return 0ull - (qq_u64)((j >> 6) == k); }
template <int N>
__device__ __forceinline__ int qq_lr_bit(qq_lr_bits<N> v, int j) {
    qq_u64 word = 0ull;
#pragma unroll
    for (int k = 0; k < N; ++k) word |= v.w[k] & qq_lr_pick(j, k);
    return (int)((word >> (j & 63)) & 1ull);
}
template <int N>
__device__ __forceinline__ void qq_lr_put(qq_lr_bits<N>* v, int j, int b) {  // bit j := b
    const qq_u64 m = 1ull << (j & 63), set = b ? m : 0ull;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const qq_u64 here = m & qq_lr_pick(j, k);
        v->w[k] = (v->w[k] & ~here) | (set & here);
    }
}
template <int N>
__device__ __forceinline__ int qq_lr_popc_and(qq_lr_bits<N> a, qq_lr_bits<N> b) {
    int c = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) c += qq_popc(a.w[k] & b.w[k]);
    return c;
}
template <int N>
__device__ __forceinline__ int qq_lr_popc_and3(qq_lr_bits<N> a, qq_lr_bits<N> b, qq_lr_bits<N> c) {  // |a & b & c|
    int n = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) n += qq_popc(a.w[k] & b.w[k] & c.w[k]);
    return n;
}
// A bit set in shared memory (lowrank_reduce keeps a row's counts there: registers were short).
template <int N>
struct qq_lr_shared_bits {
    const qq_u64* w;
};
template <int N>
__device__ __forceinline__ int qq_lr_bit(qq_lr_shared_bits<N> v, int j) {
    return (int)((v.w[j >> 6] >> (j & 63)) & 1ull);
}
template <int N>
__device__ __forceinline__ int qq_lr_popc_and(qq_lr_bits<N> a, qq_lr_shared_bits<N> b) {
    int c = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) c += qq_popc(a.w[k] & b.w[k]);
    return c;
}

extern "C" __global__ void __launch_bounds__(QQ_LR_PREP_BLOCK)
lowrank_prepare(const int* plan, const qq_u64* V, int c0, int kc, int k, int n, int W, int words_per_block,
                qq_u64* VN, int* meta, int* pcol, int* pivots, qq_u64* vp, int* special, int* span) {
    __shared__ int s_p[QQ_LR_CHUNK], s_first[QQ_LR_CHUNK], s_col[QQ_LR_CHUNK], s_piv[QQ_LR_CHUNK], s_kp, s_lo, s_hi;
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK * QQ_LR_WORDS];  // collapse i's victims on P: words [i W_LR, (i + 1) W_LR)
    static_assert(QQ_LR_PREP_BLOCK >= QQ_LR_CHUNK, "a thread a collapse of the chunk");
    const int tid = threadIdx.x;
    // Pivots in order of first use, a repeated pivot keeping its column of P: every block finds them
    // (a thread a collapse, O(kc) each), block 0 writes them out.
    if (tid < QQ_LR_CHUNK) {
        const int* pl = plan + QQ_PLAN_FIELDS * (c0 + min(tid, kc - 1));
        s_p[tid] = tid < kc && pl[QQ_PLAN_ACTIVE] ? pl[QQ_PLAN_P] : -1;
    }
    if (tid == 0) {
        s_lo = W;
        s_hi = 0;
    }
    __syncthreads();
    int first = -1;  // the first collapse of the chunk with this one's pivot
    if (tid < QQ_LR_CHUNK && s_p[tid] >= 0)
        while (s_p[++first] != s_p[tid]) {
        }
    if (tid < QQ_LR_CHUNK) s_first[tid] = first == tid;
    __syncthreads();
    if (tid < QQ_LR_CHUNK && first == tid) {
        int col = 0;
        for (int j = 0; j < tid; ++j) col += s_first[j];
        s_col[tid] = col;
        s_piv[col] = s_p[tid];
    }
    if (tid == 0) {
        int kp = 0;
        for (int j = 0; j < QQ_LR_CHUNK; ++j) kp += s_first[j];
        s_kp = kp;
    }
    __syncthreads();
    const int col = tid < QQ_LR_CHUNK && first >= 0 ? s_col[first] : -1;
    __syncthreads();
    if (tid < QQ_LR_CHUNK) s_col[tid] = col;
    __syncthreads();
    const int kp = s_kp;
    // This block's words: the victim masks without the pivots (VN) and their span.
    const int w_lo = (int)blockIdx.x * words_per_block, w_hi = min(W, w_lo + words_per_block), nw = w_hi - w_lo;
    int lo = W, hi = 0;
    for (int e = tid; e < QQ_LR_CHUNK * nw; e += blockDim.x) {
        const int i = e / nw, w = w_lo + e % nw;
        qq_u64 v = 0ull;
        if (i < kc && s_col[i] >= 0) {
            qq_u64 onpiv = 0ull;
            for (int j = 0; j < kp; ++j)
                if ((s_piv[j] >> 6) == w) onpiv |= 1ull << (s_piv[j] & 63);
            v = V[(size_t)(c0 + i) * W + w] & ~onpiv;
        }
        VN[(size_t)i * W + w] = v;
        if (v) {
            lo = min(lo, w);
            hi = max(hi, w + 1);
        }
    }
    if (tid < kp && (s_piv[tid] >> 6) >= w_lo && (s_piv[tid] >> 6) < w_hi) {  // pass 2 writes the pivot bits
        lo = min(lo, s_piv[tid] >> 6);
        hi = max(hi, (s_piv[tid] >> 6) + 1);
    }
    if (lo < hi) {
        atomicMin(&s_lo, lo);
        atomicMax(&s_hi, hi);
    }
    __syncthreads();
    // The span over every block: the last block to finish writes it and resets the accumulators.
    if (tid == 0) {
        if (s_lo < s_hi) {
            atomicMin(&span[0], s_lo);
            atomicMax(&span[1], s_hi);
        }
        __threadfence();
        if (atomicAdd(&span[2], 1) == (int)gridDim.x - 1) {
            const int all_lo = atomicAdd(&span[0], 0), all_hi = atomicAdd(&span[1], 0);
            meta[QQ_LR_META_LO] = all_lo < all_hi ? all_lo : 0;
            meta[QQ_LR_META_HI] = all_lo < all_hi ? all_hi : 0;
            span[0] = 0x7FFFFFFF;
            span[1] = 0;
            span[2] = 0;
        }
    }
    if (blockIdx.x != 0) return;
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += blockDim.x) s_vp[e] = 0ull;
    __syncthreads();
    for (int e = tid; e < kc * kp; e += blockDim.x) {
        const int i = e / kp, j = e % kp, p = s_piv[j];
        if (s_col[i] >= 0 && ((V[(size_t)(c0 + i) * W + (p >> 6)] >> (p & 63)) & 1ull))
            atomicOr(&s_vp[QQ_LR_WORDS * i + (j >> 6)], 1ull << (j & 63));
    }
    __syncthreads();
    if (tid < QQ_LR_CHUNK) {
        pcol[tid] = tid < kc ? s_col[tid] : -1;
        pivots[tid] = tid < kp ? s_piv[tid] : 0;
    }
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += blockDim.x) vp[e] = s_vp[e];
    if (tid == 0) {
        meta[QQ_LR_META_KP] = kp;
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
}

// The phase of row r after pass 1: each collapse of the chunk in order on the row's bits at the
// pivots (xP, zP, bit j for pivot column j), from the low bits of its counts e_i = |z & v_i^N| +
// 2 |x & z & v_i^N| mod 4 (e0, e1: bit i for collapse i). With m = e_i + |z_P & v_i^P| mod 4 and
// d = |x_P & z_P & v_i^P| mod 2, collapse i flips the sign by x_p (d ^ m0 & !z_p ^ m1) and z_p by m0
// (the sequential rule with a_i = |z & v_i| and b_i = |x & z & v_i| kept apart reads b ^ m1 where
// this reads m1 of a sum that already holds 2b). Writes the row's sign (all but pass 2's bit1(T)) and
// its QQ_LR_ROWBITS words of rowbits: alpha, then its bits on P as the phase leaves them (x, then z).
// Rows whose sign a reset clears mid-window (`special`) keep everything (alpha 0, their own bits):
// measure_rows_apply replays them. The chunk's decisions are in shared memory; e0, e1 are bit sets
// in registers (qq_lr_bits) or in shared memory (qq_lr_shared_bits); N words hold the chunk's bits.
template <int N, class E>
__device__ __forceinline__ void qq_lr_phase(unsigned char* S, E e0, E e1, qq_lr_bits<N> xP,
                                            qq_lr_bits<N> zP, const int* s_col, const qq_u64* s_vp, const int* s_yz,
                                            const int* s_inject, const int* special, int nspecial, int kc, size_t r,
                                            qq_u64* rowbits) {
    qq_lr_bits<N> alpha = qq_lr_zero<N>();
    bool live = true;
    for (int e = 0; e < nspecial; ++e)
        if ((size_t)special[e] == r) live = false;
    if (live) {
        int s = S[r];
        for (int i = 0; i < kc; ++i) {
            const int j = s_col[i];
            if (j < 0) continue;  // deterministic: nothing to do here (resets: the special rows)
            const int xp = qq_lr_bit(xP, j), zp = qq_lr_bit(zP, j);
            const qq_lr_bits<N> v = qq_lr_load<N>(s_vp + QQ_LR_WORDS * i);
            const int m = (qq_lr_bit(e0, i) | (qq_lr_bit(e1, i) << 1)) + qq_lr_popc_and(zP, v);
            const int d = qq_lr_popc_and3(xP, zP, v) & 1;
            s ^= xp & (d ^ ((m & 1) & (1 ^ zp)) ^ ((m >> 1) & 1));
            if (xp)
#pragma unroll
                for (int k = 0; k < N; ++k) xP.w[k] ^= v.w[k];
            int bx = xp, bz = zp ^ (m & 1);
            qq_swap_pivot(s_yz[i], &bx, &bz, &s);
            if (s_inject[i]) qq_inject_x(bz, &s);
            qq_lr_put(&xP, j, bx);
            qq_lr_put(&zP, j, bz);
            qq_lr_put(&alpha, i, xp);
        }
        // bit1(E), E = sum_i alpha_i e_i mod 4: the phase's half of the pairs' share (the header)
        s ^= ((qq_lr_popc_and(alpha, e0) + 2 * qq_lr_popc_and(alpha, e1)) >> 1) & 1;
        S[r] = (unsigned char)s;
    }
    qq_u64* out = rowbits + (size_t)QQ_LR_ROWBITS * r;
    qq_lr_store(out, alpha);
    qq_lr_store(out + QQ_LR_WORDS, xP);
    qq_lr_store(out + 2 * QQ_LR_WORDS, zP);
}

// Pass 1 on the tensor cores: mma m16n8k256 b1 AND + POPC, A = 16 of the block's rows (z, or x & z),
// B = 8 victim masks, accumulated as e = |z & v| + 2 |x & z & v| (the x & z product issued twice):
// one accumulator a (row, collapse), 80 registers for 16 rows x 160 collapses. AND + POPC sums over
// the columns in any order, so a lane's fragment registers are simply the halves of the 8-byte
// words it reads: lane (g, q) holds words 4u + q of a step's rows g and g + 8 (A) and of collapse g
// of each tile (B); the word's low half pairs with the low half, its high half with the high half.
__device__ __forceinline__ void qq_lr_mma(int* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                          unsigned b1) {
    asm("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes from global to shared memory without registers (cp.async, bypassing L1).
__device__ __forceinline__ void qq_lr_copy16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}

// A stage of lowrank_counts' shared memory: QQ_LR_COUNT_STEP words of the block's rows (x, z) and of
// the chunk's victim masks. Copies move 16-byte units, and a row of W words starts on one only when
// its first word's index is even: each row's copy starts a word early when it is odd (its `shift`,
// the same at every step since a step is an even number of words) and takes one unit more.
#define QQ_LR_COPY_WORDS (QQ_LR_COUNT_STEP + 2)  // words a row's copy moves a stage
#define QQ_LR_ROW_PITCH QQ_LR_COPY_WORDS          // words a staged row
#define QQ_LR_VIC_PITCH (QQ_LR_COUNT_STEP + 4)    // words a staged victim: 12 spreads a half-warp's B loads over the banks
#define QQ_LR_VIC_AT (2 * QQ_LR_COUNT_ROWS * QQ_LR_ROW_PITCH)  // the victims' place in a stage
#define QQ_LR_STAGE_WORDS (QQ_LR_VIC_AT + QQ_LR_CHUNK * QQ_LR_VIC_PITCH)
#define QQ_LR_COUNT_SMEM (8 * QQ_LR_COUNT_STAGES * QQ_LR_STAGE_WORDS)  // dynamic shared memory, bytes
// Words past the end of X, Z and VN that a row's copies may read (the buffers are allocated with them).
#define QQ_LR_TAIL_WORDS QQ_LR_COPY_WORDS
static_assert(QQ_LR_COUNT_STEP % 2 == 0 && QQ_LR_ROW_PITCH % 2 == 0 && QQ_LR_VIC_PITCH % 2 == 0 &&
                  QQ_LR_VIC_PITCH >= QQ_LR_COPY_WORDS,
              "16-byte copies and rows");

// lowrank_counts_<C>: a chunk of at most C collapses (TILES = C / 8 tiles of 8; C = 16, 32, ..., 160),
// a kernel each so that the tile loop has no branch (with one, the compiler rebuilt the A operands
// for every pair of tiles) and a chunk multiplies at most 15 victim masks that are not there.
template <int TILES>
__device__ __forceinline__ void qq_lr_counts(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan,
                                             const qq_u64* VN, const int* meta, const int* pcol, const int* pivots,
                                             const qq_u64* vp, const int* special, const int* active,
                                             qq_u64* rowbits, int c0, int kc, int n, int W) {
    extern __shared__ __align__(16) qq_u64 qq_lr_stages[];
    __shared__ int s_col[QQ_LR_CHUNK], s_yz[QQ_LR_CHUNK], s_inject[QQ_LR_CHUNK], s_sorted[QQ_LR_CHUNK],
        s_order[QQ_LR_CHUNK];
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK * QQ_LR_WORDS];
    static_assert(8 * TILES <= QQ_LR_CHUNK, "a kernel's tiles within a chunk");
    static_assert(QQ_LR_COUNT_ROWS == 16 * (QQ_LR_COUNT_BLOCK / 32) && QQ_LR_COUNT_BLOCK == 2 * QQ_LR_COUNT_ROWS &&
                      QQ_LR_COUNT_STEP % 4 == 0,
                  "16 rows a warp; two threads a row gather its pivot bits (x, z); 4 words a product");
    const int kp = meta[QQ_LR_META_KP];
    if (*active == 0 || kp == 0) return;  // uniform: nothing random in this chunk
    const int lo = meta[QQ_LR_META_LO], hi = meta[QQ_LR_META_HI];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const size_t R = (size_t)2 * n, r0 = (size_t)blockIdx.x * QQ_LR_COUNT_ROWS;
    const int rows = (int)min((size_t)QQ_LR_COUNT_ROWS, R - r0);
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += QQ_LR_COUNT_BLOCK) s_vp[e] = vp[e];
    if (tid < QQ_LR_CHUNK) {
        s_col[tid] = pcol[tid];
        const int* pl = plan + QQ_PLAN_FIELDS * (c0 + min(tid, kc - 1));
        s_yz[tid] = pl[QQ_PLAN_YZ];
        s_inject[tid] = pl[QQ_PLAN_INJECT];
    }
    if (tid < kp) {  // the pivots by column, so that each step gathers the pivot bits its words hold
        const int p = pivots[tid];
        int rank = 0;
        for (int j = 0; j < kp; ++j) rank += pivots[j] < p;
        s_sorted[rank] = p;
        s_order[rank] = tid;
    }
    const int steps = (hi - lo + QQ_LR_COUNT_STEP - 1) / QQ_LR_COUNT_STEP;
    // Copies a stage, a 16-byte unit a thread at a time: units e = tid, tid + QQ_LR_COUNT_BLOCK, ...
    // of the rows (row-major over plane, row, unit), then of the staged victims.
    constexpr int staged = 8 * TILES, units = QQ_LR_COPY_WORDS / 2;
    constexpr int row_units = 2 * QQ_LR_COUNT_ROWS * units, all_units = row_units + staged * units;
    auto shift_of = [&](size_t first_word) { return (int)(first_word & 1); };
    auto issue = [&](int step) {
        if (step < steps) {
            qq_u64* st = qq_lr_stages + (size_t)(step % QQ_LR_COUNT_STAGES) * QQ_LR_STAGE_WORDS;
            const int w0 = lo + step * QQ_LR_COUNT_STEP;
#pragma unroll
            for (int e0 = 0; e0 < all_units; e0 += QQ_LR_COUNT_BLOCK) {
                const int e = e0 + tid, unit = e % units;
                if (e0 + QQ_LR_COUNT_BLOCK <= row_units || e < row_units) {
                    const int plane = e / (units * QQ_LR_COUNT_ROWS), row = e / units % QQ_LR_COUNT_ROWS;
                    const size_t first = (r0 + row) * W + w0;
                    if (row < rows)
                        qq_lr_copy16(st + (plane * QQ_LR_COUNT_ROWS + row) * QQ_LR_ROW_PITCH + 2 * unit,
                                     (plane ? Z : X) + first - shift_of(first) + 2 * unit);
                } else if (e < all_units) {
                    const int i = (e - row_units) / units;
                    const size_t first = (size_t)i * W + w0;
                    qq_lr_copy16(st + QQ_LR_VIC_AT + i * QQ_LR_VIC_PITCH + 2 * unit, VN + first - shift_of(first) + 2 * unit);
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");  // one group a step, empty ones too
    };
    __syncthreads();  // the sorted pivots and the chunk's decisions are in place
#pragma unroll
    for (int s = 0; s < QQ_LR_COUNT_STAGES - 1; ++s) issue(s);
    int acc[TILES][4];
#pragma unroll
    for (int t = 0; t < TILES; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0;
    const int grow = tid % QQ_LR_COUNT_ROWS, plane = tid / QQ_LR_COUNT_ROWS;  // this thread's pivot bits
    const int gshift = shift_of((r0 + grow) * W + lo);
    constexpr int NW = qq_lr_words_for(8 * TILES);
    qq_lr_bits<NW> pbits = qq_lr_zero<NW>();
    int next = 0;  // the first pivot (by column) not yet gathered
    const int arow = 16 * warp + g;  // this lane's fragment rows arow and arow + 8, victims 8t + g
    const int ashift0 = shift_of((r0 + arow) * W + lo), ashift1 = shift_of((r0 + arow + 8) * W + lo);
    const int vshift = shift_of((size_t)g * W + lo);  // 8t W is even
    for (int step = 0; step < steps; ++step) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(QQ_LR_COUNT_STAGES - 2) : "memory");
        __syncthreads();  // the stage is in; every warp is done with the one the next issue overwrites
        issue(step + QQ_LR_COUNT_STAGES - 1);
        const qq_u64* st = qq_lr_stages + (size_t)(step % QQ_LR_COUNT_STAGES) * QQ_LR_STAGE_WORDS;
        const int w0 = lo + step * QQ_LR_COUNT_STEP;
        for (; next < kp && (s_sorted[next] >> 6) < w0 + QQ_LR_COUNT_STEP; ++next) {
            const int p = s_sorted[next];
            const qq_u64 word = st[(plane * QQ_LR_COUNT_ROWS + grow) * QQ_LR_ROW_PITCH + gshift + (p >> 6) - w0];
            if ((word >> (p & 63)) & 1ull) qq_lr_put(&pbits, s_order[next], 1);
        }
        const qq_u64* xs0 = st + arow * QQ_LR_ROW_PITCH + ashift0 + q;
        const qq_u64* xs1 = st + (arow + 8) * QQ_LR_ROW_PITCH + ashift1 + q;
        const qq_u64* vs = st + QQ_LR_VIC_AT + g * QQ_LR_VIC_PITCH + vshift + q;
        constexpr int zplane = QQ_LR_COUNT_ROWS * QQ_LR_ROW_PITCH;
#pragma unroll
        for (int u = 0; u < QQ_LR_COUNT_STEP / 4; ++u) {  // 256 columns a product
            const bool in = w0 + 4 * u + q < hi;  // past the span a copy holds the next row's words
            const qq_u64 z0 = in ? xs0[zplane + 4 * u] : 0ull, z1 = in ? xs1[zplane + 4 * u] : 0ull;
            const qq_u64 xz0 = xs0[4 * u] & z0, xz1 = xs1[4 * u] & z1;
            const unsigned a[2][4] = {{(unsigned)z0, (unsigned)z1, (unsigned)(z0 >> 32), (unsigned)(z1 >> 32)},
                                      {(unsigned)xz0, (unsigned)xz1, (unsigned)(xz0 >> 32), (unsigned)(xz1 >> 32)}};
#pragma unroll
            for (int t0 = 0; t0 < TILES; t0 += 4) {  // 4 tiles at a time: a product never waits on the one before
                qq_u64 v[4];
#pragma unroll
                for (int t = 0; t < 4; ++t)
                    if (t0 + t < TILES) v[t] = vs[8 * (t0 + t) * QQ_LR_VIC_PITCH + 4 * u];
#pragma unroll
                for (int m = 0; m < 3; ++m)  // z once, x & z twice
#pragma unroll
                    for (int t = 0; t < 4; ++t)
                        if (t0 + t < TILES)
                            qq_lr_mma(acc[t0 + t], a[m ? 1 : 0][0], a[m ? 1 : 0][1], a[m ? 1 : 0][2],
                                      a[m ? 1 : 0][3], (unsigned)v[t], (unsigned)(v[t] >> 32));
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // only empty groups are left
    __syncthreads();  // every stage consumed: its space holds the pivot bits now
    qq_lr_bits<NW>* s_pbits = (qq_lr_bits<NW>*)qq_lr_stages;  // [plane][row]
    s_pbits[plane * QQ_LR_COUNT_ROWS + grow] = pbits;
    // The counts' low bits: lane (g, q) holds collapses 8t + 2q, + 1 of rows g (c0, c1) and g + 8
    // (c2, c3); the four lanes of a row pool theirs, then lane q = 0 runs the phase of row g, q = 1 of g + 8.
    constexpr int halves = (TILES + 3) / 4;  // words of 32 collapses
    unsigned bits[2][2][halves];  // [row g, g + 8][bit 0, 1][word of 32 collapses]
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int k = 0; k < halves; ++k) bits[h][0][k] = bits[h][1][k] = 0u;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const unsigned e = (unsigned)acc[t][2 * h + c], at = 8 * (t & 3) + 2 * q + c;
                bits[h][0][t >> 2] |= (e & 1u) << at;
                bits[h][1][t >> 2] |= ((e >> 1) & 1u) << at;
            }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
            for (int k = 0; k < halves; ++k) {
                bits[h][b][k] |= __shfl_xor_sync(0xFFFFFFFFu, bits[h][b][k], 1);
                bits[h][b][k] |= __shfl_xor_sync(0xFFFFFFFFu, bits[h][b][k], 2);
            }
    __syncthreads();
    const int row = 16 * warp + g + 8 * q;
    if (q < 2 && row < rows) {
        // this row's bit 0, 1: selects, not a run-time index
        qq_lr_bits<NW> e[2] = {qq_lr_zero<NW>(), qq_lr_zero<NW>()};
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
            for (int k = 0; k < halves; ++k)
                e[b].w[k >> 1] |= (qq_u64)(q ? bits[1][b][k] : bits[0][b][k]) << (32 * (k & 1));
        const qq_lr_bits<NW> e0 = e[0], e1 = e[1];
        qq_lr_phase(S, e0, e1, s_pbits[row], s_pbits[QQ_LR_COUNT_ROWS + row], s_col, s_vp, s_yz, s_inject, special,
                    meta[QQ_LR_META_SPECIAL], kc, r0 + row, rowbits);
    }
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_16(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<2>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_32(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<4>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_48(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<6>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_64(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<8>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_80(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<10>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_96(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<12>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_112(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<14>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_128(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<16>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 2)
lowrank_counts_144(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<18>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

// one block a multiprocessor: at two, 128 registers spilled 92 bytes a thread (18.3 -> 15.7 ms a pass
// at 180k qubits; lowrank_counts_128 takes 10.1)
extern "C" __global__ void __launch_bounds__(QQ_LR_COUNT_BLOCK, 1)
lowrank_counts_160(const qq_u64* X, const qq_u64* Z, unsigned char* S, const int* plan, const qq_u64* VN,
                  const int* meta, const int* pcol, const int* pivots, const qq_u64* vp, const int* special,
                  const int* active, qq_u64* rowbits, int c0, int kc, int n, int W) {
    qq_lr_counts<20>(X, Z, S, plan, VN, meta, pcol, pivots, vp, special, active, rowbits, c0, kc, n, W);
}

// Pass 2 takes the rows four at a time: a group is the xrow and zrow of two qubits (qa, qb), rows qa,
// n + qa, qb, n + qb in its slots 0..3, with the gate each half of it goes through next (z, w:
// instruction indices, -1 none; w = -2: slots 2, 3 are qubit qb of the two-qubit gate z). On its
// own, group g is qubits 2g and 2g + 1 and nothing follows. With the next gate window folded in
// (`halves` set), the window's two-qubit gates come first, a group each (pairs[g]), then its
// one-qubit gates and the qubits it leaves idle, two a group (halves[h] = (qubit, instruction or
// -1)): every row of the tableau is read and written once for the update and the gates together.
// qb = -1: no second qubit (odd n).
__device__ __forceinline__ int4 qq_lr_group(const int4* pairs, const int2* halves, int num_pairs, int num_halves,
                                            int n, int g) {
    if (halves == nullptr) return make_int4(2 * g, 2 * g + 1 < n ? 2 * g + 1 : -1, -1, -1);
    if (g < num_pairs) return pairs[g];
    const int h = 2 * (g - num_pairs);
    const int2 a = halves[h], b = h + 1 < num_halves ? halves[h + 1] : make_int2(-1, -1);
    return make_int4(a.x, b.x, a.y, b.y);
}

__device__ __forceinline__ int qq_lr_num_groups(bool gates, int num_pairs, int num_halves, int n) {
    return gates ? num_pairs + (num_halves + 1) / 2 : (n + 1) / 2;
}

// The tiles of columns pass 2 covers: the span of the chunk's victims and pivots on its own, every
// word with the gates folded in (they change whole rows).
__device__ __forceinline__ void qq_lr_columns(const int* meta, bool gates, int W, int* first, int* last) {
    *first = gates ? 0 : meta[QQ_LR_META_LO];
    *last = gates ? W : meta[QQ_LR_META_HI];
}

// Slot s's row of group grp (-1: none) and the gate that makes its new row: the slots whose rows the
// new row multiplies, in product order (bit r: slot r; 1 << s where no gate acts), and the opcode.
__device__ __forceinline__ size_t qq_lr_slot_row(int4 grp, int s, int n) {
    const int q = s < 2 ? grp.x : grp.y;
    return q < 0 ? (size_t)-1 : (size_t)q + (s & 1 ? (size_t)n : 0);
}

__device__ __forceinline__ int qq_lr_gate_rows(const QQTables* T, int4 grp, int s) {
    const bool pair = grp.w == -2;
    const int ins = pair || s < 2 ? grp.z : grp.w;
    if (ins < 0) return 1 << s;
    const unsigned char(*img)[5] = qq_inverse_images[T->ins[(size_t)ins * QQ_NF + QQ_F_OP]];
    return pair ? qq_image_rows(img, 2, s) : qq_image_rows(img, 1, s & 1) << (s & 2);  // a half: its two slots
}

// A folded window's group as pass 2 reads it (desc, written with the groups: lowrank_gate_groups,
// lowrank_idle_groups): the two qubits (x, y) and each slot's qq_lr_gate_rows, a nibble each (z:
// slots 0, 1; w: slots 2, 3), so that a lane finds its row and the rows its gate multiplies with one
// load instead of walking the instruction table and the gate's images every group. A group's two
// halves write their own fields; y and w of a last group without a second half are not written.
__device__ __forceinline__ void qq_lr_describe_half(int4* desc, int num_pairs, unsigned long long hs, int q,
                                                    int sel_lo, int sel_hi) {
    int* d = (int*)(desc + num_pairs + (hs >> 1));
    d[hs & 1] = q;
    d[2 + (hs & 1)] = sel_lo | (sel_hi << 4);
}

// Pass 2, by tiles of columns: block (t, b) takes words [first + QQ_LR_TILE t, + QQ_LR_TILE) of groups
// [b groups_per_block, + groups_per_block). It builds the tile's tables once (dynamic shared memory,
// 4 KiB a group of 5 collapses: entry (group, idx) holds, for each word of the tile, the XOR of the
// group's victim words over the bits of idx), then a warp a group of rows, QQ_LR_ROW_LANES lanes a
// slot, lane wl on words wl + QQ_LR_ROW_LANES h (each load instruction takes a row's lanes
// consecutive words, 8 bytes a lane): d = bit0(c) = the XOR of the entries its alpha bits pick;
// T += |z & d| + 2 |x & z & d|; x ^= d; the pivot bits as the phase left them (rowbits) on the
// tile's pivot columns (z too, there only); with gates, the new row from the group's rows through shared memory (qq_gate_word's
// products, one row a slot; shuffles of every row to every lane had cost as much as the gate
// kernel). Per group and tile one word of `part` (byte s: slot s's product phase mod 4, and at bits
// 2-3 its T mod 4) goes to lowrank_signs, which sums the tiles. The lookups
// are the kernel's arithmetic: a lane's words share one index and take 16-byte loads, and the
// groups are unrolled, so an entry's address is a shift, a mask and an add (ALU-bound at 22
// instructions a group and word with a lane a word: H100, n = 100k).
#define QQ_LR_LANE_WORDS 2                               // words of a tile row a lane takes
#define QQ_LR_ROW_LANES (QQ_LR_TILE / QQ_LR_LANE_WORDS)  // lanes a row
#define QQ_LR_ENTRY_WORDS QQ_LR_TILE                     // an entry: the tile's words
// A lookup group is QQ_LR_GROUP_BITS consecutive collapses: group g holds collapses 5g .. 5g + 4
// (bits of alpha, which may span two of its words: 60 .. 64 and 125 .. 129), 32 entries. The tables'
// build and the lookups read the layout here; qq_lr_lookup_groups counts the groups (its host twin:
// measure.py's _tables_bytes).
#define QQ_LR_GROUP_BITS 5
#define QQ_LR_GROUP_BYTES ((1 << QQ_LR_GROUP_BITS) * 8 * QQ_LR_ENTRY_WORDS)  // a group's 32 entries
static_assert(QQ_LR_TILE == 16 && QQ_LR_ENTRY_WORDS * 8 == 128 && QQ_LR_LANE_WORDS % 2 == 0,
              "an entry is 128 bytes: index << 7 is its offset; a lane's words come in 16-byte pairs");
static_assert(4 * QQ_LR_ROW_LANES == 32, "a warp holds a group: four rows");

// The lookup groups a chunk of kc collapses needs, rounded up to an even number (the lookups go in
// pairs; alpha's bits past kc are zero and so are the tables' victims past kc, so a group past them
// looks up a zero entry).
__host__ __device__ constexpr int qq_lr_lookup_groups(int kc) {
    return ((kc + QQ_LR_GROUP_BITS - 1) / QQ_LR_GROUP_BITS + 1) & ~1;
}
// The lowest set bit of idx > 0, as a constant where idx is one (the tables' build, unrolled).
__host__ __device__ constexpr int qq_lr_lowest_bit(int idx) { return idx & 1 ? 0 : 1 + qq_lr_lowest_bit(idx >> 1); }
// lowrank_apply_gates' words a warp in shared memory after the tables: a group's words, both planes.
#define QQ_LR_XCH_WORDS (2 * QQ_LR_LANE_WORDS * 32)

// The next collapse window's share of lowrank_apply_gates_counts: its victim masks (without its
// pivots), pivots, and whether it has random collapses; where pass 1's partial counts go (per octet
// of rows, tile of columns and lane, in that order, so that lowrank_reduce reads an octet's tiles as
// one run: a byte a tile of 16 collapses, eight a word, the words of tiles 8p..8p+7 in plane p of
// the buffer) and the rows' bits on its pivots (2 QQ_LR_WORDS words a row: x on the
// pivot columns, then z; OR-ed in, zero before the pass).
struct QQNextCounts {
    const qq_u64* VN;
    const int* meta;
    const int* pivots;
    const int* active;
    int kc;
    qq_u64* pcounts;
    qq_u64* pbits;
    size_t octets;
};
#define QQ_LR_VT_MTILES (QQ_LR_CHUNK / 16)  // tiles of 16 collapses: a byte each in a lane's partial words
#define QQ_LR_VT_TILE_BYTES (4 * 32 * 16)    // the A fragments of 16 collapses on a tile: 4 steps x 32 lanes x 16 bytes
#define QQ_LR_PCOUNT_PLANES ((QQ_LR_VT_MTILES + 7) / 8)  // a lane's partial words at most (planes of the buffer)
static_assert(QQ_LR_PCOUNT_PLANES == 2, "qq_lr_octet_counts writes one plane or two");

// Pass 1 of the next window on an octet of new rows (two groups' words in a warp's exchange
// words, [group][plane][h][lane]), on the tensor cores with the roles of lowrank_counts swapped:
// A = 16 victim masks (tile mt: fragments as the block staged them, a 16-byte load a lane and step),
// B = the 8 rows, so that one warp's two groups fill an instruction: a = |z & v| and b = |x & z & v|
// over the tile's 1,024 columns, m16n8k256 b1 AND + POPC, and e = a + 2b. Lane (g, q) holds rows
// 2q, 2q + 1 of collapses 16 mt + g and 16 mt + g + 8 (the accumulator's layout) and keeps their
// e mod 4 as byte mt & 7 of its partial word in plane mt >> 3 (`plane` words apart): bits 2f..2f+1
// for f = 2 (collapse g + 8) + (row 2q + 1). Row j of the octet is slot j & 3 of group j >> 2.
// `at`: the octet's index times the tiles, plus this tile's (its 32 words are at 32 at).
template <bool WIDE>  // WIDE: the next window's chunk may have more than QQ_LR_NARROW collapses
__device__ __forceinline__ void qq_lr_octet_counts(const qq_u64* st, const uint4* vt, int mtiles, int lane,
                                                   qq_u64* pcounts, size_t at, size_t plane, bool write) {
    const int g = lane >> 2, q = lane & 3;
    const qq_u64* rows = st + (g >> 2) * QQ_LR_XCH_WORDS;
    unsigned bz[4][2], bxz[4][2];
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // word 4c + q of the tile: lane 4 (c & 1) + q of slot g & 3, half c >> 1
        const int h = c >> 1, ln = (g & 3) * QQ_LR_ROW_LANES + 4 * (c & 1) + q;
        const qq_u64 x = rows[h * 32 + ln], z = rows[(QQ_LR_LANE_WORDS + h) * 32 + ln], xz = x & z;
        bz[c][0] = (unsigned)z;
        bz[c][1] = (unsigned)(z >> 32);
        bxz[c][0] = (unsigned)xz;
        bxz[c][1] = (unsigned)(xz >> 32);
    }
    auto tile = [&](int mt) {  // tile mt's byte
        int a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const uint4 f = vt[(mt * 4 + c) * 32 + lane];
            qq_lr_mma(a, f.x, f.y, f.z, f.w, bz[c][0], bz[c][1]);
            qq_lr_mma(b, f.x, f.y, f.z, f.w, bxz[c][0], bxz[c][1]);
        }
        unsigned byte = 0u;
#pragma unroll
        for (int k = 0; k < 4; ++k) byte |= ((unsigned)(a[k] + 2 * b[k]) & 3u) << (2 * k);
        return (qq_u64)byte;
    };
    qq_u64 packed = 0ull;
    for (int mt = 0; mt < min(mtiles, 8); ++mt) packed |= tile(mt) << (8 * mt);
    if (write) __stcs((unsigned long long*)pcounts + at * 32 + lane, packed);
    if (WIDE && mtiles > 8) {  // a next window of more than QQ_LR_NARROW collapses: its second plane
        packed = 0ull;
        for (int mt = 8; mt < mtiles; ++mt) packed |= tile(mt) << (8 * (mt - 8));
        if (write) __stcs((unsigned long long*)pcounts + plane + at * 32 + lane, packed);
    }
}

// GATES: the next gate window folded in. COUNTS (with GATES): the next collapse window's pass 1 too,
// on the rows this pass writes (lowrank_apply_gates_counts, below). N: the words of the chunk's alpha
// (qq_lr_words_for); NEXT_WIDE: the next window's chunk may have more than QQ_LR_NARROW collapses.
// A warp has one group of four rows in flight, its rows, gates and alpha loaded an iteration ahead:
// with two, lowrank_apply_gates spilled, and lowrank_apply spilled 56 bytes a thread and ran 13 %
// slower (H100, docs/benchmarks-collapse.md run 16).
template <bool GATES, bool COUNTS, int N, bool NEXT_WIDE = false>
__device__ __forceinline__ void qq_lr_apply(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits,
                                            const int* meta, const int* pivots, const int* active, const int4* desc,
                                            int num_pairs, int num_halves, unsigned* part, int kc,
                                            int n, int W, int groups_per_block, const QQNextCounts next) {
    extern __shared__ __align__(16) qq_u64 qq_lr_tab[];  // [group][idx][wl][h]: word wl + 8 h
    __shared__ int s_np, s_pw[QQ_LR_CHUNK], s_pb[QQ_LR_CHUNK], s_pj[QQ_LR_CHUNK];
    // the next window's pivots in this tile by word: those of word wt at [s_at2[wt], s_at2[wt + 1]),
    // so that a lane visits only its own words' (they become bits of four words a row: few atomics)
    __shared__ int s_at2[QQ_LR_TILE + 1], s_fill2[QQ_LR_TILE], s_pb2[COUNTS ? QQ_LR_CHUNK : 1],
        s_pj2[COUNTS ? QQ_LR_CHUNK : 1];
    static_assert(!COUNTS || GATES, "the next window's counts ride on the folded gates' pass");
    constexpr bool gates = GATES;
    const int kp = meta[QQ_LR_META_KP];
    const bool update = *active != 0 && kp != 0;  // uniform: something random in this chunk
    if (!update && !gates) return;
    const int kp2 = COUNTS ? next.meta[QQ_LR_META_KP] : 0;
    const bool counts = COUNTS && *next.active != 0 && kp2 != 0;  // uniform: the next window has random collapses
    int first, last;
    qq_lr_columns(meta, gates, W, &first, &last);
    const int w0 = first + (int)blockIdx.x * QQ_LR_TILE;
    if (w0 >= last) return;  // the grid covers every word; the span is known on the device only
    const int tid = threadIdx.x, groups = update ? qq_lr_lookup_groups(kc) : 0;
    const int warps = QQ_LR_APPLY_BLOCK / 32, warp = tid >> 5;
    // Shared memory after the tables: a warp's exchange words (two groups' with COUNTS: the octet of
    // rows pass 1 multiplies), then with COUNTS the next window's victim words of this tile.
    qq_u64* xch_base = qq_lr_tab + (size_t)groups * (1 << QQ_LR_GROUP_BITS) * QQ_LR_ENTRY_WORDS;
    uint4* vt = (uint4*)(xch_base + (size_t)warps * (COUNTS ? 2 : 1) * QQ_LR_XCH_WORDS);
    const int mtiles = counts ? (next.kc + 15) >> 4 : 0;
    const int lane = tid & 31, slot = lane / QQ_LR_ROW_LANES, wl = lane % QQ_LR_ROW_LANES;
    const int num_groups = qq_lr_num_groups(GATES, num_pairs, num_halves, n);
    const int gb = (int)blockIdx.y * groups_per_block, count = min(groups_per_block, num_groups - gb);
    unsigned* part_tile = part + (size_t)blockIdx.x * num_groups;
    // Iteration `it`'s group of this warp. With COUNTS a warp takes two neighbouring groups in turn
    // (an octet of rows, octet (gb + l) / 2 of the window's: groups_per_block is even).
    auto group_at = [&](int it) { return COUNTS ? (it >> 1) * 2 * warps + 2 * warp + (it & 1) : it * warps + warp; };
    auto more = [&](int it) { return (COUNTS ? (it >> 1) * 2 : it) * warps < count; };
    // A slot's row, the rows its gate multiplies (sel) and its alpha come first: they are loaded an
    // iteration ahead, and with alpha of two words the group's descriptor they come from two ahead
    // (else each iteration waits for the descriptor's load before it asks for the alpha words; the
    // kernels of three words would spill its registers).
    constexpr bool desc_early = GATES && N == 2;
    int r_next;  // a slot's row, -1 none (a row index fits an int: 2n rows)
    int sel_next = 0;
    qq_u64 al_next[N];
    // A lane's share of the descriptor: its slot's qubit and the rows of both slots of its half.
    auto load_desc = [&](int it) {
        const int l = group_at(it);
        const int* d = (const int*)(desc + gb + l) + (slot >> 1);
        return GATES && l < count ? make_int2(d[0], d[2]) : make_int2(-1, 0);
    };
    int2 desc_next = desc_early ? load_desc(0) : make_int2(-1, 0);
    auto load_next = [&](int it) {
        const int l = group_at(it), g = gb + l;
        int r;
        if (GATES) {  // the group's descriptor: its qubits and each slot's rows (qq_lr_describe_half)
            const int2 d = desc_early ? desc_next : load_desc(it);
            if (desc_early) desc_next = load_desc(it + 1);
            const bool half = slot >= 2 && g >= num_pairs && 2 * (g - num_pairs) + 1 >= num_halves;
            const int q = half ? -1 : d.x;  // a last group without a second half: slots 2, 3 none
            r = q < 0 ? -1 : q + (slot & 1 ? n : 0);
            sel_next = q < 0 ? 1 << slot : (d.y >> (4 * (slot & 1))) & 15;
        } else {
            const int4 grp = l < count ? qq_lr_group(nullptr, nullptr, 0, 0, n, g) : make_int4(-1, -1, -1, -1);
            r = (int)qq_lr_slot_row(grp, slot, n);
        }
        r_next = r;
#pragma unroll
        for (int k = 0; k < N; ++k)
            al_next[k] = update && r >= 0 ? rowbits[QQ_LR_ROWBITS * (size_t)r + k] : 0ull;
    };
    // The first group's descriptor and alpha are asked for before the block builds its tables, so
    // their loads are in flight during the build, not waited for after it (a block's start is on
    // no other block's time: one block a multiprocessor).
    load_next(0);
    for (int e = tid; e < groups * QQ_LR_TILE; e += QQ_LR_APPLY_BLOCK) {  // a thread a (group, word)
        const int g = e / QQ_LR_TILE, wt = e % QQ_LR_TILE, w = w0 + wt;
        const int at = (wt % QQ_LR_ROW_LANES) * QQ_LR_LANE_WORDS + wt / QQ_LR_ROW_LANES;
        const int c0 = QQ_LR_GROUP_BITS * g;  // its first collapse
        qq_u64 v[QQ_LR_GROUP_BITS];
#pragma unroll
        for (int b = 0; b < QQ_LR_GROUP_BITS; ++b)
            v[b] = (c0 + b < kc && w < last) ? VN[(size_t)(c0 + b) * W + w] : 0ull;
        qq_u64* entry = qq_lr_tab + (size_t)g * (1 << QQ_LR_GROUP_BITS) * QQ_LR_ENTRY_WORDS + at;
        entry[0] = 0ull;
#pragma unroll
        for (int idx = 1; idx < 1 << QQ_LR_GROUP_BITS; ++idx)  // the entry without idx's lowest bit, and that victim
            entry[(size_t)idx * QQ_LR_ENTRY_WORDS] =
                entry[(size_t)(idx & (idx - 1)) * QQ_LR_ENTRY_WORDS] ^ v[qq_lr_lowest_bit(idx)];
    }
    if (COUNTS)  // the next window's victim words of this tile as A fragments: [tile mt][step c][lane]
        for (int e = tid; e < mtiles * 4 * 32; e += QQ_LR_APPLY_BLOCK) {
            const int fl = e & 31, c = (e >> 5) & 3, i0 = 16 * (e >> 7) + (fl >> 2), i1 = i0 + 8;
            const int w = w0 + 4 * c + (fl & 3);
            const qq_u64 v0 = i0 < next.kc && w < W ? next.VN[(size_t)i0 * W + w] : 0ull;
            const qq_u64 v1 = i1 < next.kc && w < W ? next.VN[(size_t)i1 * W + w] : 0ull;
            vt[e] = make_uint4((unsigned)v0, (unsigned)v1, (unsigned)(v0 >> 32), (unsigned)(v1 >> 32));
        }
    if (tid == 0) s_np = 0;
    if (COUNTS && tid <= QQ_LR_TILE) s_at2[tid] = 0;
    if (COUNTS && tid < QQ_LR_TILE) s_fill2[tid] = 0;
    __syncthreads();
    if (update && tid < kp) {  // the pivots in this tile
        const int p = pivots[tid], wt = (p >> 6) - w0;
        if (wt >= 0 && wt < QQ_LR_TILE) {
            const int at = atomicAdd(&s_np, 1);
            s_pw[at] = wt;
            s_pb[at] = p & 63;
            s_pj[at] = tid;
        }
    }
    const int wt2 = counts && tid < kp2 ? (next.pivots[tid] >> 6) - w0 : -1;  // the next window's, by word
    const bool mine2 = wt2 >= 0 && wt2 < QQ_LR_TILE;
    if (mine2) atomicAdd(&s_at2[wt2 + 1], 1);
    __syncthreads();
    if (COUNTS) {  // the counts per word become the starts; then each pivot takes its place
        if (tid == 0)
            for (int wt = 1; wt <= QQ_LR_TILE; ++wt) s_at2[wt] += s_at2[wt - 1];
        __syncthreads();
        if (mine2) {
            const int at = s_at2[wt2] + atomicAdd(&s_fill2[wt2], 1);
            s_pb2[at] = next.pivots[tid] & 63;
            s_pj2[at] = tid;
        }
        __syncthreads();
    }
    const int np = s_np;
    bool in_span[QQ_LR_LANE_WORDS];
#pragma unroll
    for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) in_span[h] = w0 + wl + QQ_LR_ROW_LANES * h < last;
    // This lane's words that hold a pivot of this chunk (bit h: word wl + QQ_LR_ROW_LANES h) and
    // whether they hold one of the next window's: most words hold none, and skip those loops.
    int pivots_here = 0;
    for (int k = 0; k < np; ++k)
        if (s_pw[k] % QQ_LR_ROW_LANES == wl) pivots_here |= 1 << (s_pw[k] / QQ_LR_ROW_LANES);
    bool next_pivots_here = false;
#pragma unroll
    for (int h = 0; h < QQ_LR_LANE_WORDS; ++h)
        next_pivots_here |= COUNTS && s_at2[wl + QQ_LR_ROW_LANES * h + 1] > s_at2[wl + QQ_LR_ROW_LANES * h];
    const unsigned char* tab = (const unsigned char*)qq_lr_tab + 8 * QQ_LR_LANE_WORDS * wl;
    for (int it = 0; more(it); ++it) {
        const int r = r_next;
        const int sel = GATES ? sel_next : 0;
        qq_u64 al[N];
#pragma unroll
        for (int k = 0; k < N; ++k) al[k] = al_next[k];
        load_next(it + 1);
        qq_u64 x[QQ_LR_LANE_WORDS], z[QQ_LR_LANE_WORDS];
#pragma unroll
        for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {  // every load first: the row's words in flight together
            const size_t a = (size_t)r * W + w0 + wl + QQ_LR_ROW_LANES * h;
            x[h] = r >= 0 && in_span[h] ? X[a] : 0ull;
            z[h] = r >= 0 && in_span[h] ? Z[a] : 0ull;
        }
        const int l = group_at(it);
        qq_u64 d[QQ_LR_LANE_WORDS] = {};
        // Two groups a step (the tables hold an even number, the last zero where kc asks for an
        // odd one): one three-input XOR folds both entries in, and one test ends the loop.
#pragma unroll
        for (int g = 0; g < qq_lr_lookup_groups(64 * N); g += 2) {
            if (g >= groups) break;
            const unsigned char* entry[2];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                // the group's index as the entry's offset (index << 7), without a variable shift:
                // its bits from alpha word wi on, and the next word's where it spans two
                const int b0 = QQ_LR_GROUP_BITS * (g + k), wi = b0 >> 6, sh = b0 & 63;
                const qq_u64 word = wi < N ? al[wi] : 0ull;
                qq_u64 bits = sh >= 7 ? word >> (sh - 7) : word << (7 - sh);
                if (sh + QQ_LR_GROUP_BITS > 64 && wi + 1 < N) bits |= al[wi + 1] << (64 - sh + 7);
                const unsigned off = (unsigned)bits & (((1u << QQ_LR_GROUP_BITS) - 1u) << 7);
                entry[k] = tab + off + QQ_LR_GROUP_BYTES * (g + k);
            }
#pragma unroll
            for (int h = 0; h < QQ_LR_LANE_WORDS; h += 2) {
                const ulonglong2 e0 = *(const ulonglong2*)(entry[0] + 8 * h);
                const ulonglong2 e1 = *(const ulonglong2*)(entry[1] + 8 * h);
                d[h] ^= e0.x ^ e1.x;
                d[h + 1] ^= e0.y ^ e1.y;
            }
        }
        int t4 = 0;  // T over this lane's words: |z & d| + 2 |x & z & d|
        qq_u64 xw[QQ_LR_LANE_WORDS], zw[QQ_LR_LANE_WORDS];
        const qq_u64* bits = rowbits + QQ_LR_ROWBITS * (size_t)max(r, 0);
#pragma unroll
        for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
            const int wt = wl + QQ_LR_ROW_LANES * h;
            const qq_u64 zd = z[h] & d[h];
            t4 += qq_popc(zd) + 2 * qq_popc(x[h] & zd);
            xw[h] = x[h] ^ d[h];
            zw[h] = z[h];
            if (r >= 0 && (pivots_here >> h & 1))
                for (int k = 0; k < np; ++k)
                    if (s_pw[k] == wt) {
                        const int j = s_pj[k];
                        const qq_u64 bit = 1ull << s_pb[k];
                        xw[h] = (xw[h] & ~bit) | (((bits[QQ_LR_WORDS + (j >> 6)] >> (j & 63)) & 1ull) ? bit : 0ull);
                        const qq_u64 zb = (bits[2 * QQ_LR_WORDS + (j >> 6)] >> (j & 63)) & 1ull;
                        zw[h] = (zw[h] & ~bit) | (zb ? bit : 0ull);
                    }
        }
        int phase = 0;
        // This warp's exchange words for this group: [plane][h][lane]
        qq_u64* xch = xch_base + (size_t)(COUNTS ? 2 * warp + (it & 1) : warp) * QQ_LR_XCH_WORDS;
        auto exchange = [&]() {  // this lane's words of its slot's row into them
#pragma unroll
            for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                xch[h * 32 + lane] = xw[h];
                xch[(QQ_LR_LANE_WORDS + h) * 32 + lane] = zw[h];
            }
        };
        if (gates) {  // the new row of this slot: a product of the group's rows (after the update)
            // The group's words go through the warp's share of shared memory; a slot reads only
            // the rows its gate multiplies (sel: its own row alone where it stays itself).
            __syncwarp();  // the previous group's words are read
            exchange();
            __syncwarp();
            // The product in slot order: its first row copied (nothing to count against the
            // identity), each further row's phase counted bit-sliced (one popcount a row). The warp
            // takes as many further rows as its slot of most needs: 0 to 3 for the gates' images,
            // where one step for each row any slot named had taken all four for every two-qubit gate.
            if (__any_sync(0xFFFFFFFFu, sel != 1 << slot)) {
                const int first_row = __ffs(sel) - 1;
                qq_u64 ox[QQ_LR_LANE_WORDS], oz[QQ_LR_LANE_WORDS];
#pragma unroll
                for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                    ox[h] = xch[h * 32 + QQ_LR_ROW_LANES * first_row + wl];
                    oz[h] = xch[(QQ_LR_LANE_WORDS + h) * 32 + QQ_LR_ROW_LANES * first_row + wl];
                }
                QQPhaseCount count{0ull, 0ull};
                int rest = sel & (sel - 1);
                while (__any_sync(0xFFFFFFFFu, rest != 0))
                    if (rest) {
                        const int s = __ffs(rest) - 1;
                        rest &= rest - 1;
#pragma unroll
                        for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                            const qq_u64 rx = xch[h * 32 + QQ_LR_ROW_LANES * s + wl];
                            const qq_u64 rz = xch[(QQ_LR_LANE_WORDS + h) * 32 + QQ_LR_ROW_LANES * s + wl];
                            qq_phase_add(&count, ox[h], oz[h], rx, rz);
                            ox[h] ^= rx;
                            oz[h] ^= rz;
                        }
                    }
                phase = qq_phase_total(count);
#pragma unroll
                for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                    xw[h] = ox[h];
                    zw[h] = oz[h];
                }
            }
        }
        if (r >= 0)
#pragma unroll
            for (int h = 0; h < QQ_LR_LANE_WORDS; ++h)
                if (in_span[h]) {
                    const size_t a = (size_t)r * W + w0 + wl + QQ_LR_ROW_LANES * h;
                    if (xw[h] != x[h]) X[a] = xw[h];
                    if (zw[h] != z[h]) Z[a] = zw[h];
                }
        // The slot's phase and T mod 4, summed over its lanes; lane 0 writes the group's word.
        int sum = (phase & 3) | ((t4 & 3) << 8);
#pragma unroll
        for (int off = 1; off < QQ_LR_ROW_LANES; off <<= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
        const unsigned byte = (unsigned)((sum & 3) | (((sum >> 8) & 3) << 2));
        unsigned word = 0u;
#pragma unroll
        for (int s = 0; s < 4; ++s) word |= __shfl_sync(0xFFFFFFFFu, byte, QQ_LR_ROW_LANES * s) << (8 * s);
        if (lane == 0 && l < count) part_tile[gb + l] = word;
        if (counts) {
            // The next window's pass 1 on the new rows: their bits on its pivots (in this tile),
            // then, every second group, the octet's counts on the tensor cores.
            if (r >= 0 && next_pivots_here) {  // a lane's pivot bits gathered first: at most four atomics
                // x bits of pivot columns 0..63, 64..127, then z: OR-ed in at the end; columns from 128
                // on (a next window of more than QQ_LR_NARROW collapses) go straight in, so that the
                // pass keeps the registers it had with two words
                qq_u64 pb[4] = {};
                unsigned long long* row_pbits = (unsigned long long*)next.pbits + 2 * QQ_LR_WORDS * (size_t)r;
#pragma unroll
                for (int h = 0; h < QQ_LR_LANE_WORDS; ++h) {
                    const int wt = wl + QQ_LR_ROW_LANES * h;
                    for (int k = s_at2[wt]; k < s_at2[wt + 1]; ++k) {
                        const int j = s_pj2[k], b = s_pb2[k];
                        const qq_u64 bit = 1ull << (j & 63);
                        const qq_u64 bx = (xw[h] >> b) & 1ull ? bit : 0ull, bz = (zw[h] >> b) & 1ull ? bit : 0ull;
                        static_assert(QQ_LR_WORDS == 3 && QQ_LR_NARROW == 128, "a pivot column's word of three");
                        if (j < 64) {
                            pb[0] |= bx;
                            pb[2] |= bz;
                        } else if (j < 128) {
                            pb[1] |= bx;
                            pb[3] |= bz;
                        } else if (NEXT_WIDE) {
                            if (bx) atomicOr(row_pbits + 2, (unsigned long long)bx);
                            if (bz) atomicOr(row_pbits + QQ_LR_WORDS + 2, (unsigned long long)bz);
                        }
                    }
                }
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (pb[e]) atomicOr(row_pbits + (e >> 1) * QQ_LR_WORDS + (e & 1), (unsigned long long)pb[e]);
            }
            __syncwarp();  // every slot has read the group's words
            exchange();  // the new row's, for the octet's product
            if (it & 1) {
                __syncwarp();
                qq_lr_octet_counts<NEXT_WIDE>(xch_base + (size_t)2 * warp * QQ_LR_XCH_WORDS, vt, mtiles, lane,
                                   next.pcounts, (size_t)((gb >> 1) + (it >> 1) * warps + warp) * gridDim.x + blockIdx.x,
                                   (size_t)gridDim.x * next.octets * 32, group_at(it) - 1 < count);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta, const int* pivots,
    const int* active, unsigned* part, int kc, int n, int W, int groups_per_block) {
    qq_lr_apply<false, false, 2>(X, Z, VN, rowbits, meta, pivots, active, nullptr, 0, 0, part, kc,
        n, W, groups_per_block, QQNextCounts{});
}

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_gates(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta, const int* pivots,
    const int* active, const int4* desc, int num_pairs, int num_halves, unsigned* part, int kc, int n, int W,
    int groups_per_block) {
    qq_lr_apply<true, false, 2>(X, Z, VN, rowbits, meta, pivots, active, desc, num_pairs,
        num_halves, part, kc, n, W, groups_per_block, QQNextCounts{});
}

// lowrank_apply_gates and the next collapse window's pass 1 in one pass over the rows: each row is
// read once, updated, taken through the folded gates, written once, and its new words counted
// against the next window's victim masks (qq_lr_octet_counts) and read at its pivots. The next
// window was decided ahead of this pass on its measured rows alone (lowrank_ahead, then
// measure_window_plan on those rows, lowrank_prepare); lowrank_reduce then sums the partial counts
// over the tiles and runs the phase, as lowrank_counts would have on the rows this pass wrote.
extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_gates_counts(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta,
    const int* pivots, const int* active, const int4* desc, int num_pairs, int num_halves, unsigned* part, int kc,
    int n, int W, int groups_per_block, const qq_u64* VN2, const int* meta2, const int* pivots2, const int* active2,
    int kc2, qq_u64* pcounts, qq_u64* pbits) {
    const size_t octets = (size_t)(qq_lr_num_groups(true, num_pairs, num_halves, n) + 1) / 2;
    qq_lr_apply<true, true, 2, false>(X, Z, VN, rowbits, meta, pivots, active, desc, num_pairs, num_halves, part, kc,
        n, W, groups_per_block, QQNextCounts{VN2, meta2, pivots2, active2, kc2, pcounts, pbits, octets});
}

// The same for a chunk of more than QQ_LR_NARROW collapses (alpha in three words: _wide), and the
// fused passes whose next window's first chunk has more than QQ_LR_NARROW (its partial counts in
// two planes, its pivot bits in three words: _to_wide).
extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_wide(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta, const int* pivots,
    const int* active, unsigned* part, int kc, int n, int W, int groups_per_block) {
    // one group in flight: two spilled 100 bytes a thread (180k qubits, windows of 264: 13.3 -> 11.7 ms a pass)
    qq_lr_apply<false, false, QQ_LR_WORDS>(X, Z, VN, rowbits, meta, pivots, active, nullptr, 0, 0,
        part, kc, n, W, groups_per_block, QQNextCounts{});
}

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_gates_wide(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta,
    const int* pivots, const int* active, const int4* desc, int num_pairs, int num_halves, unsigned* part, int kc,
    int n, int W, int groups_per_block) {
    qq_lr_apply<true, false, QQ_LR_WORDS>(X, Z, VN, rowbits, meta, pivots, active, desc,
        num_pairs, num_halves, part, kc, n, W, groups_per_block, QQNextCounts{});
}

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_gates_counts_wide(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta,
    const int* pivots, const int* active, const int4* desc, int num_pairs, int num_halves, unsigned* part, int kc,
    int n, int W, int groups_per_block, const qq_u64* VN2, const int* meta2, const int* pivots2, const int* active2,
    int kc2, qq_u64* pcounts, qq_u64* pbits) {
    const size_t octets = (size_t)(qq_lr_num_groups(true, num_pairs, num_halves, n) + 1) / 2;
    qq_lr_apply<true, true, QQ_LR_WORDS, false>(X, Z, VN, rowbits, meta, pivots, active, desc, num_pairs, num_halves,
        part, kc, n, W, groups_per_block, QQNextCounts{VN2, meta2, pivots2, active2, kc2, pcounts, pbits, octets});
}

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_gates_counts_to_wide(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta,
    const int* pivots, const int* active, const int4* desc, int num_pairs, int num_halves, unsigned* part, int kc,
    int n, int W, int groups_per_block, const qq_u64* VN2, const int* meta2, const int* pivots2, const int* active2,
    int kc2, qq_u64* pcounts, qq_u64* pbits) {
    const size_t octets = (size_t)(qq_lr_num_groups(true, num_pairs, num_halves, n) + 1) / 2;
    qq_lr_apply<true, true, 2, true>(X, Z, VN, rowbits, meta, pivots, active, desc, num_pairs, num_halves, part, kc,
        n, W, groups_per_block, QQNextCounts{VN2, meta2, pivots2, active2, kc2, pcounts, pbits, octets});
}

extern "C" __global__ void __launch_bounds__(QQ_LR_APPLY_BLOCK)
lowrank_apply_gates_counts_wide_to_wide(qq_u64* X, qq_u64* Z, const qq_u64* VN, const qq_u64* rowbits, const int* meta,
    const int* pivots, const int* active, const int4* desc, int num_pairs, int num_halves, unsigned* part, int kc,
    int n, int W, int groups_per_block, const qq_u64* VN2, const int* meta2, const int* pivots2, const int* active2,
    int kc2, qq_u64* pcounts, qq_u64* pbits) {
    const size_t octets = (size_t)(qq_lr_num_groups(true, num_pairs, num_halves, n) + 1) / 2;
    qq_lr_apply<true, true, QQ_LR_WORDS, true>(X, Z, VN, rowbits, meta, pivots, active, desc, num_pairs, num_halves,
        part, kc, n, W, groups_per_block, QQNextCounts{VN2, meta2, pivots2, active2, kc2, pcounts, pbits, octets});
}

// The next window's pass 1 finished: per octet of rows (as lowrank_apply_gates_counts wrote them) a
// warp sums its lanes' partial words over the tiles (mod 4 in each 2-bit field: fields two bits
// apart, so a carry falls into a masked gap) and turns them into each row's bit sets e0, e1 (a
// ballot a bit plane, every fourth bit of it a row's); four octets a warp, then a lane a row runs
// the phase (qq_lr_phase, as lowrank_counts does), clearing the row's pivot bits for the next pass.
#define QQ_LR_REDUCE_BLOCK 256
#define QQ_LR_REDUCE_INFLIGHT 4  // partial words a lane has in flight
// Blocks a multiprocessor holds (40 registers a thread): at n = 100k the 782 blocks are one wave of
// 6 x 132, where 48 registers had held 5 and left a second wave a sixth full (H100: 0.45 -> 0.37 ms a
// launch; docs/benchmarks-collapse.md, run 12)
#define QQ_LR_REDUCE_BLOCKS_AN_SM 6
__device__ __forceinline__ unsigned qq_every_fourth_bit(unsigned m) {  // bits 0, 4, ..., 28 -> 0..7
    m &= 0x11111111u;
    m = (m | (m >> 3)) & 0x03030303u;
    m = (m | (m >> 6)) & 0x000F000Fu;
    return (m | (m >> 12)) & 0xFFu;
}

template <int N>
__device__ __forceinline__ void qq_lr_reduce(unsigned char* S, const int* plan, const int* meta, const int* pcol,
                                             const qq_u64* vp, const int* special, const int* active, const int4* pairs,
                                             const int2* halves, int num_pairs, int num_halves, const qq_u64* pcounts,
                                             qq_u64* pbits, qq_u64* rowbits, int kc, int n, int tiles) {
    __shared__ int s_col[QQ_LR_CHUNK], s_yz[QQ_LR_CHUNK], s_inject[QQ_LR_CHUNK];
    __shared__ qq_u64 s_vp[QQ_LR_CHUNK * QQ_LR_WORDS];
    if (*active == 0 || meta[QQ_LR_META_KP] == 0) return;  // uniform: nothing random in the window
    const int tid = threadIdx.x, lane = tid & 31;
    for (int e = tid; e < QQ_LR_CHUNK * QQ_LR_WORDS; e += QQ_LR_REDUCE_BLOCK) s_vp[e] = vp[e];
    if (tid < QQ_LR_CHUNK) {
        s_col[tid] = pcol[tid];
        const int* pl = plan + QQ_PLAN_FIELDS * min(tid, kc - 1);
        s_yz[tid] = pl[QQ_PLAN_YZ];
        s_inject[tid] = pl[QQ_PLAN_INJECT];
    }
    __syncthreads();
    const int num_groups = qq_lr_num_groups(halves != nullptr, num_pairs, num_halves, n), octets = (num_groups + 1) / 2;
    // A warp takes four octets, one after the other, and lane j keeps the bit sets of row j & 7 of
    // octet j >> 3: then all 32 lanes run a phase.
    const int o0 = 4 * ((int)blockIdx.x * (QQ_LR_REDUCE_BLOCK / 32) + (tid >> 5));
    if (o0 >= octets) return;  // warp-uniform
    const qq_u64 lo2 = 0x3333333333333333ull, hi2 = 0xCCCCCCCCCCCCCCCCull;
    const size_t plane = (size_t)octets * tiles * 32;  // a plane's partial words: an octet's tiles are 32 words apart
    const int j = lane & 7, c = j & 1;            // row j of its octet: B column j = 2q + c
    const int mtiles = (kc + 15) >> 4;
    // this lane's row's bit sets e0, e1: in registers with two words, in shared memory with three
    // (40 registers a thread, for 6 blocks a multiprocessor, would not hold them)
    qq_lr_bits<N> er[2] = {qq_lr_zero<N>(), qq_lr_zero<N>()};
    __shared__ qq_u64 s_e[N > 2 ? QQ_LR_REDUCE_BLOCK : 1][2][N];
    qq_u64* e = &s_e[N > 2 ? tid : 0][0][0];
    if constexpr (N > 2)
#pragma unroll
        for (int k = 0; k < 2 * N; ++k) e[k] = 0ull;
    for (int oo = 0; oo < 4 && o0 + oo < octets; ++oo) {
#pragma unroll
        for (int p = 0; p < (N > 2 ? QQ_LR_PCOUNT_PLANES : 1); ++p) {  // tiles of collapses 8p .. 8p + 7
            if (8 * p >= mtiles) break;
            const unsigned long long* part =
                (const unsigned long long*)pcounts + p * plane + (size_t)(o0 + oo) * tiles * 32 + lane;
            const unsigned long long* const end = part + (size_t)tiles * 32;  // the octet's run of tiles
            qq_u64 sum = 0ull;
            for (; part < end; part += QQ_LR_REDUCE_INFLIGHT * 32) {  // that many loads in flight a lane
                qq_u64 v[QQ_LR_REDUCE_INFLIGHT];
#pragma unroll
                for (int u = 0; u < QQ_LR_REDUCE_INFLIGHT; ++u)
                    v[u] = part + 32 * u < end ? __ldcs(part + 32 * u) : 0ull;
#pragma unroll
                for (int u = 0; u < QQ_LR_REDUCE_INFLIGHT; ++u)
                    sum = (((sum & lo2) + (v[u] & lo2)) & lo2) | (((sum & hi2) + (v[u] & hi2)) & hi2);
            }
            for (int mt = 8 * p; mt < min(mtiles, 8 * p + 8); ++mt)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                    for (int cc = 0; cc < 2; ++cc)
#pragma unroll
                        for (int b = 0; b < 2; ++b) {
                            const int f = 2 * hh + cc;
                            const unsigned m = __ballot_sync(0xFFFFFFFFu, (sum >> (8 * (mt & 7) + 2 * f + b)) & 1ull);
                            if ((lane >> 3) == oo && cc == c) {
                                const int at = 16 * mt + 8 * hh;  // collapses at .. at + 7, bit g of the gathered byte
                                const qq_u64 bits = (qq_u64)qq_every_fourth_bit(m >> (j >> 1)) << (at & 63);
                                if constexpr (N > 2)
                                    e[N * b + (at >> 6)] |= bits;
                                else if (at < 64)
                                    er[b].w[0] |= bits;
                                else
                                    er[b].w[1] |= bits;
                            }
                        }
        }
    }
    const int o = o0 + (lane >> 3), grp_index = 2 * o + (j >> 2);
    if (o >= octets || grp_index >= num_groups) return;
    const size_t r = qq_lr_slot_row(qq_lr_group(pairs, halves, num_pairs, num_halves, n, grp_index), j & 3, n);
    if (r == (size_t)-1) return;
    qq_u64* pb = pbits + 2 * QQ_LR_WORDS * r;
    const qq_lr_bits<N> xP = qq_lr_load<N>(pb), zP = qq_lr_load<N>(pb + QQ_LR_WORDS);
#pragma unroll
    for (int k = 0; k < N; ++k) pb[k] = pb[QQ_LR_WORDS + k] = 0ull;  // words past N: only a _to_wide pass sets them
    if constexpr (N > 2)
        qq_lr_phase<N>(S, qq_lr_shared_bits<N>{e}, qq_lr_shared_bits<N>{e + N}, xP, zP, s_col, s_vp, s_yz, s_inject,
                       special, meta[QQ_LR_META_SPECIAL], kc, r, rowbits);
    else
        qq_lr_phase<N>(S, er[0], er[1], xP, zP, s_col, s_vp, s_yz, s_inject, special, meta[QQ_LR_META_SPECIAL], kc, r,
                       rowbits);
}

// lowrank_reduce: a next window's first chunk of up to QQ_LR_NARROW collapses; lowrank_reduce_wide: one of more
extern "C" __global__ void __launch_bounds__(QQ_LR_REDUCE_BLOCK, QQ_LR_REDUCE_BLOCKS_AN_SM)
lowrank_reduce(unsigned char* S, const int* plan, const int* meta, const int* pcol, const qq_u64* vp,
               const int* special, const int* active, const int4* pairs, const int2* halves, int num_pairs,
               int num_halves, const qq_u64* pcounts, qq_u64* pbits, qq_u64* rowbits, int kc, int n, int tiles) {
    qq_lr_reduce<2>(S, plan, meta, pcol, vp, special, active, pairs, halves, num_pairs, num_halves, pcounts, pbits,
                    rowbits, kc, n, tiles);
}
extern "C" __global__ void __launch_bounds__(QQ_LR_REDUCE_BLOCK, QQ_LR_REDUCE_BLOCKS_AN_SM)
lowrank_reduce_wide(unsigned char* S, const int* plan, const int* meta, const int* pcol, const qq_u64* vp,
                    const int* special, const int* active, const int4* pairs, const int2* halves, int num_pairs,
                    int num_halves, const qq_u64* pcounts, qq_u64* pbits, qq_u64* rowbits, int kc, int n, int tiles) {
    qq_lr_reduce<QQ_LR_WORDS>(S, plan, meta, pcol, vp, special, active, pairs, halves, num_pairs, num_halves, pcounts,
                              pbits, rowbits, kc, n, tiles);
}

// The next window's measured rows before the pass that brings the tableau to them: block j makes
// the zrow of the next window's collapse j (qubit q, instruction cstart + j) as it will be after
// this chunk's update and the gate window [gstart, gend) folded into its pass, into row j of AX, AZ,
// AS (measure_window_plan's `side` rows). The rows q's gate multiplies (gate_of; none: q's zrow
// alone) each take the update as pass 2 gives it (x ^= d with d = bit0(c) = the XOR of alpha_i v_i,
// the bits on P from rowbits, sign = the phase's ^ bit1(T)), then their product and its sign as
// lowrank_signs makes it. One block a collapse runs on the critical path between passes, so a block
// is as wide as it may be: 1,024 threads (54 registers, no spill) where 256 had taken 5.2 / 13.0 ms a
// run at 100k / 180k qubits, 2.5 / 5.5 ms now (H100; docs/benchmarks-collapse.md, run 17).
#define QQ_LR_AHEAD_BLOCK 1024
extern "C" __global__ void __launch_bounds__(QQ_LR_AHEAD_BLOCK)
lowrank_ahead(const qq_u64* X, const qq_u64* Z, const unsigned char* S, const qq_u64* VN, const qq_u64* rowbits,
              const int* meta, const int* pivots, const int* active, int kc, const QQTables* T, const int* gate_of,
              int gstart, int gend, int cstart, int n, int W, qq_u64* AX, qq_u64* AZ, unsigned char* AS) {
    __shared__ int s_piv[QQ_LR_CHUNK];
    __shared__ qq_u64 s_bits[4][QQ_LR_ROWBITS];
    __shared__ int s_phase[QQ_LR_AHEAD_BLOCK / 32];
    __shared__ unsigned s_t4[QQ_LR_AHEAD_BLOCK / 32];
    const int tid = threadIdx.x, lane = tid & 31, j = blockIdx.x;
    const int kp = meta[QQ_LR_META_KP];
    const bool update = *active != 0 && kp != 0;
    // q's group as lowrank_gate_groups / lowrank_idle_groups make it (its gate's, or q idle), and
    // the slot of q's zrow in it
    const int q = T->ins[(size_t)(cstart + j) * QQ_NF + QQ_F_A];
    int4 grp = make_int4(q, -1, -1, -1);
    int slot = 1;
    const int g = gate_of[q];
    if (g >= gstart && g < gend) {
        const int* row = T->ins + (size_t)g * QQ_NF;
        const bool pair = qq_arity[row[QQ_F_OP]] == 2;
        if (row[QQ_F_A] == q || (pair && row[QQ_F_B] == q)) {
            grp = pair ? make_int4(row[QQ_F_A], row[QQ_F_B], g, -2) : make_int4(q, -1, g, -1);
            slot = pair && row[QQ_F_A] != q ? 3 : 1;
        }
    }
    const int op = grp.z < 0 ? -1 : T->ins[(size_t)grp.z * QQ_NF + QQ_F_OP], arity = grp.w == -2 ? 2 : 1;
    const unsigned char(*img)[5] = qq_inverse_images[op < 0 ? 0 : op];
    const int sel = qq_lr_gate_rows(T, grp, slot);
    size_t rows[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) rows[s] = qq_lr_slot_row(grp, s, n);
    if (update)
        for (int e = tid; e < kp; e += QQ_LR_AHEAD_BLOCK) s_piv[e] = pivots[e];
    if (tid < 4 * QQ_LR_ROWBITS) {
        const int s = tid / QQ_LR_ROWBITS, k = tid % QQ_LR_ROWBITS;
        s_bits[s][k] = update && ((sel >> s) & 1) ? rowbits[QQ_LR_ROWBITS * rows[s] + k] : 0ull;
    }
    __syncthreads();
    // t4: byte s slot s's row's T mod 4 (the header), kept mod 4 a field after every sum
    int phase = 0;
    unsigned t4 = 0u;
    for (int w = tid; w < W; w += QQ_LR_AHEAD_BLOCK) {
        qq_u64 ox = 0ull, oz = 0ull;
        for (int s = 0; s < 4; ++s) {
            if (!((sel >> s) & 1)) continue;
            const size_t r = rows[s];
            qq_u64 x = X[r * W + w];
            qq_u64 z = Z[r * W + w];
            if (update) {
                qq_u64 d = 0ull;
                qq_u64 alpha = 0ull;  // word i >> 6 of the row's alpha
                for (int i = 0; i < kc; ++i) {
                    if ((i & 63) == 0) alpha = s_bits[s][i >> 6];
                    if ((alpha >> (i & 63)) & 1ull) d ^= VN[(size_t)i * W + w];
                }
                const qq_u64 zd = z & d;
                t4 = (t4 + (((unsigned)(qq_popc(zd) + 2 * qq_popc(x & zd)) & 3u) << (8 * s))) & 0x03030303u;
                x ^= d;
                for (int e = 0; e < kp; ++e)
                    if ((s_piv[e] >> 6) == w) {
                        const qq_u64 bit = 1ull << (s_piv[e] & 63);
                        const qq_u64 xb = (s_bits[s][QQ_LR_WORDS + (e >> 6)] >> (e & 63)) & 1ull;
                        const qq_u64 zb = (s_bits[s][2 * QQ_LR_WORDS + (e >> 6)] >> (e & 63)) & 1ull;
                        x = (x & ~bit) | (xb ? bit : 0ull);
                        z = (z & ~bit) | (zb ? bit : 0ull);
                    }
            }
            phase += qq_mul_phase(ox, oz, x, z);
            ox ^= x;
            oz ^= z;
        }
        AX[(size_t)j * W + w] = ox;
        AZ[(size_t)j * W + w] = oz;
    }
    for (int off = 16; off; off >>= 1) {
        phase += __shfl_xor_sync(0xFFFFFFFFu, phase, off);
        t4 = (t4 + __shfl_xor_sync(0xFFFFFFFFu, t4, off)) & 0x03030303u;
    }
    if (lane == 0) {
        s_phase[tid >> 5] = phase;
        s_t4[tid >> 5] = t4;
    }
    __syncthreads();
    if (tid == 0) {
        int total = 0;
        unsigned t = 0u;
        for (int w = 0; w < QQ_LR_AHEAD_BLOCK / 32; ++w) {
            total += s_phase[w];
            t = (t + s_t4[w]) & 0x03030303u;
        }
        int old[4] = {0, 0, 0, 0};
        for (int s = 0; s < 4; ++s)
            if ((sel >> s) & 1) old[s] = S[rows[s]] ^ (int)((t >> (8 * s + 1)) & 1u);
        AS[j] = (unsigned char)(op < 0 ? old[slot] : qq_gate_sign(img, arity, arity == 2 ? slot : 1, total, old));
    }
}

// The signs after pass 2 (and the folded gates): a thread a group sums its `part` words over the
// tiles; a row's sign before the gates is the phase's (lowrank_counts) XOR bit1(T), and the gate
// makes the new rows' signs from those and the product phases (qq_gate_sign, as gates.cu does).
extern "C" __global__ void __launch_bounds__(QQ_LR_SIGNS_BLOCK)
lowrank_signs(unsigned char* S, const int* meta, const int* active, const QQTables* T, const int4* pairs,
              const int2* halves, int num_pairs, int num_halves, const unsigned* part, int n, int W) {
    const bool gates = halves != nullptr;
    if (!(*active != 0 && meta[QQ_LR_META_KP] != 0) && !gates) return;
    int first, last;
    qq_lr_columns(meta, gates, W, &first, &last);
    const int num_groups = qq_lr_num_groups(gates, num_pairs, num_halves, n);
    const int g = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (g >= num_groups) return;
    const int4 grp = qq_lr_group(pairs, halves, num_pairs, num_halves, n, g);
    int phase[4] = {0, 0, 0, 0}, t4[4] = {0, 0, 0, 0}, old[4];
    for (int t = 0; first + t * QQ_LR_TILE < last; ++t) {
        const unsigned word = part[(size_t)t * num_groups + g];
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            phase[s] += (word >> (8 * s)) & 3u;
            t4[s] += (word >> (8 * s + 2)) & 3u;
        }
    }
    size_t rows[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        rows[s] = qq_lr_slot_row(grp, s, n);
        old[s] = (t4[s] >> 1) & 1;  // bit1(T): pass 2's share of the sign (the header)
        if (rows[s] != (size_t)-1) old[s] ^= S[rows[s]];
    }
    if (grp.w == -2) {  // a two-qubit gate on the group
        const int op = T->ins[(size_t)grp.z * QQ_NF + QQ_F_OP];
        for (int s = 0; s < 4; ++s)
            S[rows[s]] = (unsigned char)qq_gate_sign(qq_inverse_images[op], 2, s, phase[s], old);
        return;
    }
    for (int half = 0; half < 2; ++half) {
        const int ins = half ? grp.w : grp.z, s0 = 2 * half;
        if (rows[s0] == (size_t)-1) continue;
        if (ins < 0) {  // no gate: the update's parity alone
            S[rows[s0]] = (unsigned char)old[s0];
            S[rows[s0 + 1]] = (unsigned char)old[s0 + 1];
            continue;
        }
        const int op = T->ins[(size_t)ins * QQ_NF + QQ_F_OP];
        const int pair_old[4] = {old[s0], old[s0 + 1], 0, 0};
        for (int j = 0; j < 2; ++j)
            S[rows[s0 + j]] = (unsigned char)qq_gate_sign(qq_inverse_images[op], 1, j, phase[s0 + j], pair_old);
    }
}

// The folded gate window's groups for lowrank_apply: its two-qubit gates a group each (pairs), its
// one-qubit gates (I included) and then the qubits it leaves idle (lowrank_idle_groups) a half each
// (halves); and per gated qubit its gate's instruction (gate_of, for lowrank_ahead: an entry is this
// window's only where it lies in [start, end) and that instruction acts on the qubit). Slots come from two counters that only grow (cnt[0] pairs, cnt[1] halves: the host
// passes their values before this window, so nothing resets them); a warp takes its slots with one
// atomic. The order of the groups is a race and changes nothing: a group's rows are its own.
__device__ __forceinline__ unsigned long long qq_lr_take_slot(unsigned long long* counter, bool want) {
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, want), lane = threadIdx.x & 31;
    const int leader = mask ? __ffs(mask) - 1 : 0;
    unsigned long long base = 0ull;
    if (mask && lane == (unsigned)leader) base = atomicAdd(counter, (unsigned long long)__popc(mask));
    base = __shfl_sync(0xFFFFFFFFu, base, leader);
    return base + (unsigned long long)__popc(mask & ((1u << lane) - 1u));
}

extern "C" __global__ void __launch_bounds__(QQ_LR_GROUPS_BLOCK)
lowrank_gate_groups(const QQTables* T, int start, int end, int4* pairs, int2* halves, unsigned long long* cnt,
                    unsigned long long pairs_before, unsigned long long halves_before, unsigned char* mark,
                    int* gate_of, int4* desc, int num_pairs) {
    const int i = start + (int)(blockIdx.x * blockDim.x + threadIdx.x);
    const int* row = T->ins + (size_t)min(i, end - 1) * QQ_NF;
    const int op = row[QQ_F_OP], q0 = row[QQ_F_A];
    const bool pair = i < end && qq_arity[op] == 2, half = i < end && !pair;
    const unsigned long long ps = qq_lr_take_slot(cnt, pair) - pairs_before;
    const unsigned long long hs = qq_lr_take_slot(cnt + 1, half) - halves_before;
    if (pair) {
        const int4 grp = make_int4(q0, row[QQ_F_B], i, -2);
        pairs[ps] = grp;
        desc[ps] = make_int4(grp.x, grp.y, qq_lr_gate_rows(T, grp, 0) | (qq_lr_gate_rows(T, grp, 1) << 4),
                             qq_lr_gate_rows(T, grp, 2) | (qq_lr_gate_rows(T, grp, 3) << 4));
        mark[q0] = mark[row[QQ_F_B]] = 1;
        gate_of[q0] = gate_of[row[QQ_F_B]] = i;
    } else if (half) {
        halves[hs] = make_int2(q0, i);
        const int4 grp = make_int4(q0, q0, i, i);  // the half in either place: slots 0, 1 or 2, 3
        const int s0 = (int)(hs & 1) * 2;
        qq_lr_describe_half(desc, num_pairs, hs, q0, qq_lr_gate_rows(T, grp, s0), qq_lr_gate_rows(T, grp, s0 + 1));
        mark[q0] = 1;
        gate_of[q0] = i;
    }
}

extern "C" __global__ void __launch_bounds__(QQ_LR_GROUPS_BLOCK)
lowrank_idle_groups(int n, int2* halves, unsigned long long* cnt, unsigned long long halves_before,
                    unsigned char* mark, int4* desc, int num_pairs) {
    const int q = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    const bool idle = q < n && !mark[q];
    if (q < n && !idle) mark[q] = 0;  // clear for the next folded window
    const unsigned long long hs = qq_lr_take_slot(cnt + 1, idle) - halves_before;
    if (idle) {
        halves[hs] = make_int2(q, -1);
        const int s0 = (int)(hs & 1) * 2;  // no gate: each slot's row stays itself
        qq_lr_describe_half(desc, num_pairs, hs, q, 1 << s0, 1 << (s0 + 1));
    }
}
