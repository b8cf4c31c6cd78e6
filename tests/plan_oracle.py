"""The walk that made tableau mode's plan before it read each opcode's category from a list (kept as
the oracle of `device_program._walked_plan`: the same actions, contexts and window size)."""

from typing import List, Tuple

import numpy as np

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.program import COND, Program
from cirq_quasarq.engines.cuda.device_program import CTX_STRIDE, MAX_DEPTH, _COLLAPSE, _Plan
from cirq_quasarq.errors import UnsupportedOperationError
from cirq_quasarq.schedule import Schedule
from cirq_quasarq.schedule.walk import walk
from cirq_quasarq.schedule.windows import RUN_START, RUN_WINDOW

Kind = opcodes.Kind


def walked_plan_reference(program: Program, schedule: Schedule) -> _Plan:
    """Walk the schedule once (loops expanded on the host, as launches are) into window launches."""
    runs = schedule.runs
    ins = schedule.instructions
    run_of = {int(s): r for r, s in enumerate(runs[:, RUN_START])} if len(runs) else {}
    ctx_ids = {}
    ctx_rows: List[List[int]] = []
    groups: List[Tuple[int, int, List[Tuple[int, int, int]]]] = []  # (window, ctx, [(start, end, op)])
    last_run = -1
    for step in walk(program, schedule):
        r = run_of[step.start]
        depth_rec = list(step.depth_rec_shifts)
        if len(depth_rec) > MAX_DEPTH + 1:
            raise UnsupportedOperationError(f"loops nested deeper than {MAX_DEPTH}")
        key = (step.rec_shift, step.rand_shift, tuple(depth_rec))
        ctx = ctx_ids.get(key)
        if ctx is None:
            ctx = ctx_ids[key] = len(ctx_rows)
            ctx_rows.append([step.rec_shift, step.rand_shift] + depth_rec + [0] * (MAX_DEPTH + 1 - len(depth_rec)))
        window = int(runs[r, RUN_WINDOW])
        if groups and groups[-1][0] == window and groups[-1][1] == ctx and r > last_run:
            groups[-1][2].append((step.start, step.end, step.op))
        else:
            groups.append((window, ctx, [(step.start, step.end, step.op)]))
        last_run = r
    actions: List[Tuple[str, int, int, int]] = []
    max_collapses = 0
    for _, ctx, parts in groups:
        gate_lo = gate_hi = col_lo = col_hi = -1
        for start, end, op in parts:
            kind = opcodes.KIND[op]
            if kind in _COLLAPSE:
                col_lo = start if col_lo < 0 else col_lo
                col_hi = end
            elif kind == Kind.RECORD_NOISE:
                for i in range(start, end):
                    actions.append(("F", i, i + 1, ctx))
            elif kind in (Kind.UNITARY, Kind.NOISE):
                if op == opcodes.CODE["I"] and ins[start, COND] < 0:
                    continue
                gate_lo = start if gate_lo < 0 else gate_lo
                gate_hi = end
        if gate_lo >= 0:
            actions.append(("G", gate_lo, gate_hi, ctx))
        if col_lo >= 0:
            actions.append(("C", col_lo, col_hi, ctx))
            max_collapses = max(max_collapses, col_hi - col_lo)
    ctx_arr = np.array(ctx_rows, dtype=np.int32).reshape(-1, CTX_STRIDE)
    return _Plan(actions, ctx_arr, max_collapses)
