// measure_swap.cuh: paper Alg. 8's device helpers, the last step of a random Z measurement of qubit
// q with pivot p (docs/engine-semantics.md, "Z measurement of qubit q", steps 3-4), on one row's
// bits (x_p, z_p) and sign s. Both elimination paths use them, fused into their own pass (no launch
// of their own): measure_eliminate.cu (word-major, after Alg. 7 on the same row) and
// measure_block.cu (gate layout, one block a window).
#pragma once
#include "philox.cuh"

// Alg. 8's swap at the pivot: swap in a generator that commutes with Z_q, H_YZ for a Y-type pivot
// (X -> -X, Y <-> Z), else H (X <-> Z, Y -> -Y).
QQ_HD void qq_swap_pivot(int y_type, int* xp, int* zp, int* s) {
    if (y_type) {
        *s ^= *xp & (*zp ^ 1);
        *xp ^= *zp;
    } else {
        *s ^= *xp & *zp;
        const int t = *xp;
        *xp = *zp;
        *zp = t;
    }
}

// Alg. 8's X injection at p (when the coin disagrees with zrow[q]'s sign): X_p flips the sign of
// every row whose z_p is set.
QQ_HD void qq_inject_x(int zp, int* s) { *s ^= zp; }
