// parities.cu: detectors and logical observables reduced on the device from frame mode's records
// (XOR of record rows), so only their bits travel to the host (core/parities.py on the host).
//
// Kernel:
//   record_parities  out[p*out_stride + j] = flip[p] ? ~x : x with x = XOR of rec[r*rec_stride + j]
//                    over r in flat[offsets[p] .. offsets[p+1]), for words j < count.
//                    1-D grid over num_parities * count threads (one word of one parity each,
//                    consecutive threads consecutive words: coalesced); blockDim.x == QQ_PARITY_BLOCK.
#include "philox.cuh"

#define QQ_PARITY_BLOCK 256

extern "C" __global__ void __launch_bounds__(QQ_PARITY_BLOCK)
record_parities(const qq_u64* rec, int rec_stride, const int* offsets, const int* flat, const unsigned char* flip,
                qq_u64* out, int out_stride, int num_parities, int count) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)num_parities * count) return;
    const int p = (int)(idx / count), j = (int)(idx % count);
    qq_u64 x = flip[p] ? ~0ull : 0ull;
    for (int k = offsets[p]; k < offsets[p + 1]; ++k) x ^= rec[(size_t)flat[k] * rec_stride + j];
    out[(size_t)p * out_stride + j] = x;
}
