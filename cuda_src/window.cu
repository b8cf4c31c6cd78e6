// window.cu: a whole measurement window in one pass over the tableau (paper Algs. 7-8, batched).
//
// Semantics: docs/engine-semantics.md, "Z measurement of qubit q", for every collapse of a window
// in program order. A collapse updates each row from that row's own bits, so the host first settles
// the window on the measured rows alone (plan_window in the NumPy engine: pivots, victims, H / H_YZ,
// coins, X injections, resets); window_apply then replays those events on every row with the row
// held on chip, so the tableau is read and written once per window instead of once per collapse.
//
// Gate layout (as gates.cu): X[r*W + w], Z[r*W + w], S[r]; rows 0..n-1 xrow, n..2n-1 zrow.
// Events: ev[4e .. 4e+3] = (p, vstart, vcount, flags); flags bit 0: Y-type pivot (H_YZ, else H),
// bit 1: inject X at p. A reset event has p = -1 and vstart = its qubit q: signs of rows q and n+q
// become +. Victim words of event e: vw[vstart + j] (word index, increasing), vm[...] (mask).
//
// Kernels:
//   window_gather  grid-stride over k*W (row, word) pairs, any launch: copies zrow[q_i] (X then Z
//                  words) into out[i*2W ..] and its sign into signs[i].
//   window_apply   one warp per row, grid-stride over the 2n rows; blockDim.x = 32 * warps, dynamic
//                  shared memory = warps * 2W * 8 bytes. Block 0 also writes the window's records.
#include "paulis.cuh"

extern "C" __global__ void window_gather(const qq_u64* X, const qq_u64* Z, const unsigned char* S,
                                         const int* rows, int k, int W, qq_u64* out,
                                         unsigned char* signs) {
    const size_t total = (size_t)k * W;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t i = idx / W, w = idx % W;
        const size_t r = (size_t)rows[i];
        out[i * 2 * W + w] = X[r * W + w];
        out[i * 2 * W + W + w] = Z[r * W + w];
        if (w == 0) signs[i] = S[r];
    }
}

extern "C" __global__ void window_apply(qq_u64* X, qq_u64* Z, unsigned char* S, int n, int W,
                                        const int* ev, int num_events, const int* vw,
                                        const qq_u64* vm, const int* rec_slot,
                                        const unsigned char* rec_val, int num_rec,
                                        unsigned char* rec) {
    extern __shared__ qq_u64 smem[];
    const unsigned full = 0xffffffffu;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < num_rec; i += blockDim.x) rec[rec_slot[i]] = rec_val[i];
    const size_t R = (size_t)2 * n;
    qq_u64* sx = smem + (size_t)warp * 2 * W;
    qq_u64* sz = sx + W;
    for (size_t r = blockIdx.x * (size_t)warps + warp; r < R; r += (size_t)gridDim.x * warps) {
        for (int w = lane; w < W; w += 32) {
            sx[w] = X[r * W + w];
            sz[w] = Z[r * W + w];
        }
        int s = S[r];
        __syncwarp();
        for (int e = 0; e < num_events; ++e) {
            const int p = __ldg(ev + 4 * e), vs = __ldg(ev + 4 * e + 1);
            if (p < 0) {  // a reset
                if (r == (size_t)vs || r == (size_t)n + vs) s = 0;
                continue;
            }
            const int nv = __ldg(ev + 4 * e + 2), flags = __ldg(ev + 4 * e + 3);
            const int pw = p >> 6, pb = p & 63;
            int xp = (int)((sx[pw] >> pb) & 1), zp = (int)((sz[pw] >> pb) & 1);
            // Each lane takes a contiguous chunk of the victim words; an XOR scan of the chunks'
            // parities gives each lane the prefix parity (carry) it starts from (eq. zc).
            const int len = (nv + 31) >> 5;
            const int lo = min(nv, lane * len), hi = min(nv, lo + len);
            int par = 0;
            for (int j = lo; j < hi; ++j) par ^= qq_popc(sz[__ldg(vw + vs + j)] & __ldg(vm + vs + j)) & 1;
            int incl = par;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const int t = __shfl_up_sync(full, incl, off);
                if (lane >= off) incl ^= t;
            }
            const int total = __shfl_sync(full, incl, 31);
            int term = 0;
            if (xp) {  // eq. CXSign: only rows with x_p set change their X part and sign
                int carry = incl ^ par;
                for (int j = lo; j < hi; ++j) {
                    const int w = __ldg(vw + vs + j);
                    const qq_u64 v = __ldg(vm + vs + j);
                    const qq_u64 xw = sx[w];
                    term ^= qq_cx_victims_word(xw, sz[w], v, zp, &carry);
                    sx[w] = xw ^ v;
                }
            }
#pragma unroll
            for (int off = 16; off; off >>= 1) term ^= __shfl_xor_sync(full, term, off);
            __syncwarp();
            if (lane == 0) {
                s ^= xp & term;
                zp ^= total;
                if (flags & 1) {  // Alg. 8: H_YZ for a Y-type pivot ...
                    s ^= xp & (zp ^ 1);
                    xp ^= zp;
                } else {  // ... else H
                    s ^= xp & zp;
                    const int t = xp;
                    xp = zp;
                    zp = t;
                }
                if (flags & 2) s ^= zp;  // X injected at p when the coin disagreed
                const qq_u64 bit = 1ull << pb;
                sx[pw] = (sx[pw] & ~bit) | (xp ? bit : 0ull);
                sz[pw] = (sz[pw] & ~bit) | (zp ? bit : 0ull);
            }
            __syncwarp();
        }
        for (int w = lane; w < W; w += 32) {
            X[r * W + w] = sx[w];
            Z[r * W + w] = sz[w];
        }
        if (lane == 0) S[r] = (unsigned char)s;
        __syncwarp();
    }
}
