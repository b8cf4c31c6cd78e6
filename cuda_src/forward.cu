// forward.cu: the forward tableau (Cirq's stabilizers and destabilizers) from the inverse tableau
// the engine keeps (Stim's convention), on the device where the final tableau already is. Not a
// stage of the paper: its Alg. 1-7 never leave the inverse form; the host oracle is
// core/tableau.py (InverseTableau.forward_by_products, and forward's derivation of the sign).
//
// Layout: the gate layout of the engine, X[r*W + w] / Z[r*W + w] with rows r < n the x rows
// (T⁻¹X_kT) and r = n + k the z rows, signs S[r]. A half h of the forward tableau: h = 0 the
// destabilizers D_p = T X_p T⁻¹, h = 1 the stabilizers S_p = T Z_p T⁻¹. Generator p of half h
// selects inverse row r when bit p of its selector word is set: for r < n the selector is row n + r
// of (h ? X : Z), for r = n + k it is row k of (h ? X : Z); the same bits are the generator's Pauli
// (its X bit on qubit k is selector bit of row k, its Z bit that of row n + k).
//
// Kernels:
//   forward_letters  letters[(p - 64*w0)*n + k] = 2z + (x xor z) (core.paulis letters) of
//                    generator p on qubit k, for the generators of words w0 .. w0 + gridDim.y - 1
//                    (a band: the host bounds its bytes). A block moves a tile of 64 generators x
//                    64 qubits through shared memory so that its writes are coalesced.
//                    blockDim == QQ_FWD_LETTER_BLOCK; grid == (ceil(n/64), words in the band).
//   forward_log_i    log_i[p] += the phase (a power of i, mod 4 once summed) of the product of the
//                    rows generator p selects, in row order: Σ_r s_r (|x_r ∧ z_r| + 2 sign_r)
//                    + Σ_k [Y on k] + 2 Σ_{r<t} s_r s_t (z_r · x_t). The last term keeps a running
//                    XOR A of the selected z parts before row t and XORs (x_t & A) into acc, whose
//                    parity is taken at the end. A thread owns one word w of one generator; a
//                    block (32 words x QQ_FWD_GENS generators) shares tiles of QQ_FWD_ROWS rows.
//                    blockDim == (32, QQ_FWD_GENS); grid == (ceil(n/QQ_FWD_GENS), ceil(W/32)).
//                    log_i must be zero before the launch; sign p = (log_i[p] & 3) >> 1.
#include "paulis.cuh"

#define QQ_FWD_LETTER_BLOCK 256
#define QQ_FWD_GENS 8   // generators a block: one selector byte a row (8 divides 64)
#define QQ_FWD_ROWS 32  // rows a shared tile

extern "C" __global__ void __launch_bounds__(QQ_FWD_LETTER_BLOCK)
forward_letters(const qq_u64* X, const qq_u64* Z, int n, int W, int half, int w0, unsigned char* letters) {
    __shared__ qq_u64 xbits[64], zbits[64];  // word w of the selector rows of 64 qubits
    const qq_u64* sel = half ? X : Z;
    const int k0 = blockIdx.x * 64, w = w0 + blockIdx.y;
    if (threadIdx.x < 64) {
        const int k = k0 + threadIdx.x;
        xbits[threadIdx.x] = k < n ? sel[(size_t)(n + k) * W + w] : 0ull;
        zbits[threadIdx.x] = k < n ? sel[(size_t)k * W + w] : 0ull;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 64 * 64; i += QQ_FWD_LETTER_BLOCK) {
        const int pl = i / 64, kl = i % 64;  // consecutive threads: consecutive qubits
        const int p = w * 64 + pl, k = k0 + kl;
        if (p < n && k < n) {
            const unsigned x = (unsigned)(xbits[kl] >> pl) & 1u, z = (unsigned)(zbits[kl] >> pl) & 1u;
            letters[(size_t)(p - 64 * w0) * n + k] = (unsigned char)((z << 1) | (x ^ z));
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * QQ_FWD_GENS)
forward_log_i(const qq_u64* X, const qq_u64* Z, const unsigned char* S, int n, int W, int half,
              unsigned int* log_i) {
    __shared__ qq_u64 xs[QQ_FWD_ROWS][32], zs[QQ_FWD_ROWS][32];
    __shared__ unsigned char chosen[QQ_FWD_ROWS], partner[QQ_FWD_ROWS];  // selector bytes of row r, row r - n
    const qq_u64* sel = half ? X : Z;
    const int lane = threadIdx.x, gen = threadIdx.y, tid = gen * 32 + lane;
    const int p0 = blockIdx.x * QQ_FWD_GENS, p = p0 + gen, w = blockIdx.y * 32 + lane;
    const int byte_shift = p0 % 64, sel_word = p0 / 64;
    // Bits past n in the last word belong to no qubit.
    const qq_u64 tail = (w == W - 1 && n % 64) ? (1ull << (n % 64)) - 1ull : ~0ull;
    qq_u64 A = 0ull, acc = 0ull;
    unsigned linear = 0u;
    const int rows = 2 * n;
    for (int r0 = 0; r0 < rows; r0 += QQ_FWD_ROWS) {
        for (int i = tid; i < QQ_FWD_ROWS * 32; i += 32 * QQ_FWD_GENS) {
            const int rl = i / 32, wl = i % 32, r = r0 + rl, ww = blockIdx.y * 32 + wl;
            const bool in = r < rows && ww < W;
            xs[rl][wl] = in ? X[(size_t)r * W + ww] : 0ull;
            zs[rl][wl] = in ? Z[(size_t)r * W + ww] : 0ull;
        }
        if (tid < QQ_FWD_ROWS) {
            const int r = r0 + tid;
            // selector of x row r: row n + r; of z row n + k: row k
            const int srow = r < n ? n + r : r - n;
            chosen[tid] = r < rows ? (unsigned char)(sel[(size_t)srow * W + sel_word] >> byte_shift) : 0;
            partner[tid] = (r >= n && r < rows) ? (unsigned char)(sel[(size_t)r * W + sel_word] >> byte_shift) : 0;
        }
        __syncthreads();
        const int count = min(QQ_FWD_ROWS, rows - r0);
        for (int rl = 0; rl < count; ++rl) {
            if (!((chosen[rl] >> gen) & 1u)) continue;  // the same for the whole warp
            const qq_u64 x = xs[rl][lane] & tail, z = zs[rl][lane] & tail;
            acc ^= x & A;
            A ^= z;
            linear += (unsigned)qq_popc(x & z);
            if (w == 0) {  // once a generator: the first word's thread
                linear += 2u * S[r0 + rl];
                if ((partner[rl] >> gen) & 1u) linear += 1u;  // z row k and x row k both: Y on k
            }
        }
        __syncthreads();
    }
    unsigned total = (w < W && p < n) ? linear + 2u * ((unsigned)qq_popc(acc) & 1u) : 0u;
    for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xFFFFFFFFu, total, off);
    if (lane == 0 && p < n) atomicAdd(&log_i[p], total);
}
