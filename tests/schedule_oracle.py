"""The window scheduler as it stood before it was made faster (one Python iteration per STEP group,
one stable argsort of a combined int64 key): the oracle `schedule` must equal exactly."""

from __future__ import annotations

import numpy as np

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.program import COND, OP, STEP, A, B, Program
from cirq_quasarq.schedule.windows import RUN_OP, RUN_START, Schedule

Kind = opcodes.Kind
_COLLAPSE = {opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"]}
_BARRIER_OP = np.isin(opcodes.KIND, [Kind.LOOP, Kind.RECORD_NOISE])
_RANK = np.where(np.isin(np.arange(opcodes.NUM_OPCODES), list(_COLLAPSE)), opcodes.NUM_OPCODES,
                 np.arange(opcodes.NUM_OPCODES))


def schedule_reference(program: Program) -> Schedule:
    """`schedule` as it was (its definition is test_schedule._reference_schedule)."""
    ins = program.instructions
    n_ins = len(ins)
    layer = np.zeros(n_ins, dtype=np.int64)
    ops = ins[:, OP]
    barrier = (ins[:, COND] >= 0) | _BARRIER_OP[ops]
    arity = opcodes.ARITY[ops]
    last = np.zeros(program.num_qubits + 1, dtype=np.int64)  # +1: index -1 lands on a dummy
    col_a, col_b = ins[:, A].astype(np.int64), ins[:, B].astype(np.int64)  # contiguous: groups gather from them
    # Group boundaries: a change of STEP or a barrier.
    step = ins[:, STEP]
    cuts = np.flatnonzero(np.diff(step) != 0) + 1 if n_ins else np.zeros(0, dtype=np.int64)
    bar_idx = np.flatnonzero(barrier)
    cuts = np.union1d(cuts, np.union1d(bar_idx, bar_idx + 1))
    cuts = cuts[(cuts > 0) & (cuts < n_ins)]
    bounds = np.concatenate([[0], cuts, [n_ins]]).astype(np.int64)
    base = 0  # layers before the current barrier segment
    mark = np.full(program.num_qubits + 1, -1, dtype=np.int64)  # distinctness of a group's qubits
    for g in range(len(bounds) - 1):
        lo, hi = int(bounds[g]), int(bounds[g + 1])
        if lo == hi:
            continue
        if barrier[lo]:
            # A barrier sits alone in its own layer after everything before it.
            top = max(int(last.max()), base)
            layer[lo] = top + 1
            base = top + 1
            last[:] = base
            continue
        a = col_a[lo:hi]
        b = col_b[lo:hi]
        distinct = bool((arity[lo:hi] > 0).all())
        if distinct:
            has_b = b >= 0
            touched = np.concatenate([a, b[has_b]])
            order = np.arange(len(touched))
            mark[touched] = order  # every qubit distinct exactly when each keeps its own mark
            distinct = bool((mark[touched] == order).all())
        if distinct:
            lay = np.maximum(last[a], last[b]) + 1
            layer[lo:hi] = lay
            last[a] = lay
            last[b[has_b]] = lay[has_b]
        else:
            for i in range(lo, hi):  # rare: E over a range of qubits, or a group that reuses a qubit
                if arity[i] > 0:
                    qs = [ins[i, A]] + ([ins[i, B]] if ins[i, B] >= 0 else [])
                else:
                    qs = list(program.ext_qubits[ins[i, A] : ins[i, A] + ins[i, B]])
                lay = int(last[qs].max()) + 1
                layer[i] = lay
                last[qs] = lay
        last[-1] = base  # the dummy never constrains
    # Within a layer: non-collapse runs by opcode, then collapses in program order: by layer, then
    # rank, then program order, one stable sort of a combined key
    order = np.argsort(layer * (opcodes.NUM_OPCODES + 1) + _RANK[ops], kind="stable")
    whole_rows = np.ascontiguousarray(ins).view(np.dtype((np.void, ins.itemsize * ins.shape[1]))).ravel()
    scheduled = np.take(whole_rows, order).view(ins.dtype).reshape(ins.shape)  # a row one element: a faster gather
    lay_sorted = layer[order]
    op_sorted = scheduled[:, OP]
    if n_ins:
        change = np.flatnonzero((np.diff(lay_sorted) != 0) | (np.diff(op_sorted) != 0)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [n_ins]])
        run_layers = lay_sorted[starts]
        window = np.concatenate([[0], np.cumsum(run_layers[1:] != run_layers[:-1])])  # layers are sorted
        runs = np.stack([starts, ends, op_sorted[starts], window], axis=1).astype(np.int32)
    else:
        runs = np.zeros((0, 4), dtype=np.int32)
    loop_runs = np.full((len(program.loops), 2), -1, dtype=np.int32)
    kind_runs = opcodes.KIND[runs[:, RUN_OP]] if len(runs) else np.zeros(0)
    for r in np.flatnonzero(kind_runs == Kind.LOOP):
        row = scheduled[runs[r, RUN_START]]
        loop_runs[row[A], 0 if row[OP] == opcodes.CODE["REPEAT"] else 1] = r
    return Schedule(instructions=scheduled, runs=runs, loop_runs=loop_runs)
