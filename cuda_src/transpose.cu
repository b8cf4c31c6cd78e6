// transpose.cu: tile-wise transpose of the tableau's words (paper Alg. 4), gate layout <-> word-major.
//
// The gate kernels want each row's words contiguous (X[r*W + w]); the measurement kernels want
// word w of all 2n rows contiguous (X[w*2n + r]) so that one thread per row reads coalesced. Only
// whole 64-bit words move (bits keep their positions), so this is a plain matrix transpose of
// rows x cols words. Deviation from the paper: out of place into a second buffer of the same size
// (the engine swaps the two pointers), which keeps every tile independent.
//
// Kernel:
//   transpose_words  in0 -> out0 when blockIdx.z == 0, in1 -> out1 when blockIdx.z == 1
//                    (X and Z in one launch); in is rows x cols, out is cols x rows.
//                    blockDim == (QQ_TILE, QQ_TILE_ROWS); grid == (ceil(cols/QQ_TILE), ceil(rows/QQ_TILE), 2).
#include "philox.cuh"

#define QQ_TILE 32
#define QQ_TILE_ROWS 8  // blockDim.y: each thread moves QQ_TILE / QQ_TILE_ROWS words of a tile

extern "C" __global__ void __launch_bounds__(QQ_TILE * QQ_TILE_ROWS)
transpose_words(const qq_u64* in0, qq_u64* out0, const qq_u64* in1, qq_u64* out1, int rows, int cols) {
    __shared__ qq_u64 tile[QQ_TILE][QQ_TILE + 1];  // +1 word: no bank conflicts on the column read
    const qq_u64* in = blockIdx.z == 0 ? in0 : in1;
    qq_u64* out = blockIdx.z == 0 ? out0 : out1;
    const int c0 = blockIdx.x * QQ_TILE, r0 = blockIdx.y * QQ_TILE;
    for (int dy = threadIdx.y; dy < QQ_TILE; dy += QQ_TILE_ROWS) {
        const int r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = in[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int dy = threadIdx.y; dy < QQ_TILE; dy += QQ_TILE_ROWS) {
        const int c = c0 + dy, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[(size_t)c * rows + r] = tile[threadIdx.x][dy];
    }
}
