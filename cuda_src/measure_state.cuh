// measure_state.cuh: the measurement state ms[] that measure_pivot (Algs. 5-6) writes for the
// random collapse it settles and measure_eliminate (Algs. 7-8) reads, so the elimination needs no
// host round trip.
//
// ms[]: active, p, victim word count, H_YZ?, inject X?, reset?, q (int32 each).
//   QQ_MS_ACTIVE  0: nothing to eliminate (deterministic by now, or the condition is false)
//   QQ_MS_P       the pivot p (lowest set bit of zx[q])
//   QQ_MS_NV      number of compacted victim words (vw[], vmask[])
//   QQ_MS_YZ      Alg. 8 swaps with H_YZ (1) or H (0)
//   QQ_MS_INJECT  Alg. 8 injects X at p (the coin disagrees with zrow[q]'s sign)
//   QQ_MS_RESET   R / MR: clear both of q's signs after the collapse
//   QQ_MS_Q       the measured qubit q
#pragma once

#define QQ_MS_ACTIVE 0
#define QQ_MS_P 1
#define QQ_MS_NV 2
#define QQ_MS_YZ 3
#define QQ_MS_INJECT 4
#define QQ_MS_RESET 5
#define QQ_MS_Q 6
