// measure_plan.cuh: the plan of a measurement window, as measure_window_plan (measure_plan.cu) and
// measure_rows_plan (measure_rows.cu, small tableaux) write it and measure_rows_apply / the low-rank
// update (measure_lowrank.cu) read it: QQ_PLAN_FIELDS ints per collapse of the window, in program
// order.
#pragma once

#define QQ_PLAN_FIELDS 6
#define QQ_PLAN_ACTIVE 0  // 1: random (a collapse with pivot p); 0: deterministic (outcome = sign)
#define QQ_PLAN_P 1       // the pivot column (-1 when deterministic)
#define QQ_PLAN_YZ 2      // Alg. 8's swap: H_YZ (1) or H (0)
#define QQ_PLAN_INJECT 3  // Alg. 8's X injection at p
#define QQ_PLAN_RESET 4   // a reset (R or MR): q's rows' signs are cleared after the collapse
#define QQ_PLAN_Q 5       // the measured qubit
