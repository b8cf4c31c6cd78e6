// grid_barrier.cuh: a barrier across every block of one launch, for kernels that launch no more
// blocks than can be resident at once (the host's launch shape sees to it; a block that waits on
// one never scheduled would wait forever, so a spin past QQ_GRID_SPIN_CYCLES traps: a launch error
// that names the kernel, not a hang).
//
// bar[0] counts arrivals and bar[1] departures; the allocation starts zeroed, and the last block
// to leave (qq_grid_barrier_done) zeroes both for the next launch on the stream.
#pragma once

#define QQ_GRID_SPIN_CYCLES (1ll << 34)  // about ten seconds: a barrier never waits that long

// The `step`-th barrier of the launch (1, 2, ...): returns once every block has arrived at it. What
// the block wrote before is visible to every block after it: release on arrival, acquire on leaving.
__device__ __forceinline__ void qq_grid_barrier(unsigned* bar, unsigned step) {
    __syncthreads();
    if (gridDim.x > 1 && threadIdx.x == 0) {
        const unsigned target = step * gridDim.x;
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        const long long t0 = clock64();
        unsigned seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(bar) : "memory");
            if (clock64() - t0 > QQ_GRID_SPIN_CYCLES) __trap();
        } while (seen < target);
    }
    __syncthreads();
}

// After the block's last barrier: the last block to get here zeroes the counters.
__device__ __forceinline__ void qq_grid_barrier_done(unsigned* bar) {
    if (gridDim.x > 1 && threadIdx.x == 0 && atomicAdd(bar + 1, 1u) == gridDim.x - 1) {
        bar[0] = 0u;
        bar[1] = 0u;
    }
}
