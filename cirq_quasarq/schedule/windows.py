"""Window scheduling (paper §4.2): maximal windows of instructions on disjoint qubits.

Every instruction is placed in the earliest layer after the instructions that share a qubit with
it (as-soon-as-possible layering); a layer is a window. Classically controlled instructions,
CONFUSION and loop markers are barriers: nothing moves across them. Inside a window, instructions
are grouped into runs of one opcode (unitaries and noise first, then collapses), and collapse
instructions (M, R, MR) keep their program order: tableau mode processes them one after another
(the paper's measurement barrier), frame mode all at once (the paper's merged measurement window).

The compiler's STEP column lets a whole group of disjoint instructions be layered in one
vectorised step, so scheduling costs a Python iteration per circuit moment, not per operation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..core import opcodes
from ..core.program import COND, NUM_FIELDS, OP, STEP, A, B, Program, take_rows

Kind = opcodes.Kind

RUN_START, RUN_END, RUN_OP, RUN_WINDOW = range(4)


@dataclasses.dataclass
class Schedule:
    """The program's instructions reordered into windows, as arrays ready for one upload.

    ``instructions``: int32 [N, NUM_FIELDS], the Program's rows in execution order.
    ``runs``: int32 [R, 4] = (start, end, opcode, window) — contiguous rows of one opcode.
    ``loop_runs``: int32 [L, 2] = run index of each loop's REPEAT and END_REPEAT marker.
    """

    instructions: np.ndarray
    runs: np.ndarray
    loop_runs: np.ndarray


_COLLAPSE = {opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"]}
# per opcode: whether it is a barrier (loop markers, CONFUSION), and its rank within a layer
# (collapses after every other opcode)
_BARRIER_OP = np.isin(opcodes.KIND, [Kind.LOOP, Kind.RECORD_NOISE])
_RANK = np.where(np.isin(np.arange(opcodes.NUM_OPCODES), list(_COLLAPSE)), opcodes.NUM_OPCODES,
                 np.arange(opcodes.NUM_OPCODES))


_ARITY0 = opcodes.ARITY == 0
_SPECIAL_OP = _BARRIER_OP | _ARITY0  # rows that are barriers whatever their COND, and E
_BLOCK = 1 << 16  # rows a block: a block's rows stay in cache while each of its columns is read
_STRETCH_ROWS = 64  # mean rows a stretch of one key and opcode from which stretches move as slices
_INT32_ROWS = 2**31 // (opcodes.NUM_OPCODES + 1)  # up to this many rows a key fits int32 (layer <= rows)


def _scan(ins: np.ndarray, key: np.ndarray, op8: np.ndarray):
    """One pass over the rows, a block at a time (a strided column read touches every cache line
    of the table, so whole columns would read it once each; and large temporaries cost their page
    faults): fills `key` with each row's rank and `op8` with its opcode; returns the barrier rows,
    the rows where STEP changes, and the rows of arity-0 opcodes that are no barrier (E)."""
    specials, cuts = [], []
    previous, rank = None, _RANK.astype(key.dtype)
    for lo in range(0, len(ins), _BLOCK):
        block = ins[lo : lo + _BLOCK]
        ops = block[:, OP].astype(np.intp)  # once: a lookup converts its indices to intp
        np.take(rank, ops, out=key[lo : lo + len(block)])
        op8[lo : lo + len(block)] = ops
        specials.append(np.flatnonzero((block[:, COND] >= 0) | np.take(_SPECIAL_OP, ops)) + lo)
        step = block[:, STEP]
        cuts.append(np.flatnonzero(step[1:] != step[:-1]) + (lo + 1))
        if previous is not None and step[0] != previous:
            cuts.append(np.array([lo]))
        previous = step[-1]
    special = np.concatenate(specials) if specials else np.zeros(0, dtype=np.int64)
    barrier = (ins[special, COND] >= 0) | _BARRIER_OP[ins[special, OP]]
    bars, ranged = special[barrier], special[~barrier]
    return bars, np.concatenate(cuts) if cuts else np.zeros(0, dtype=np.int64), ranged


def _sorted(ins: np.ndarray, key: np.ndarray, op8: np.ndarray):
    """(the rows in a stable sort by key, the first row of each run of one key and opcode in that
    order, the runs' keys and opcodes). Where the rows come in long stretches of one key and opcode
    (a compiled circuit's instructions, a layer's gates of one kind together), the stretches move as
    slices in a sort of their keys; otherwise the rows move one by one (`_sorted_rows`, the oracle)."""
    n_ins = len(ins)
    cut = np.flatnonzero((key[1:] != key[:-1]) | (op8[1:] != op8[:-1])) + 1
    if (len(cut) + 1) * _STRETCH_ROWS > n_ins:
        return _sorted_rows(ins, key, op8)
    first = np.append(0, cut)
    last = np.append(cut, n_ins)
    stretch_key, stretch_op = key[first], op8[first]
    order = np.argsort(stretch_key, kind="stable")  # a stretch's rows are in program order already
    first, last, stretch_key, stretch_op = first[order], last[order], stretch_key[order], stretch_op[order]
    scheduled = np.empty_like(ins)
    at = 0
    for lo, hi in zip(first.tolist(), last.tolist()):
        scheduled[at:at + hi - lo] = ins[lo:hi]
        at += hi - lo
    begins = np.zeros(len(order), dtype=np.int64)
    np.cumsum(last[:-1] - first[:-1], out=begins[1:])
    # neighbouring stretches of one key and opcode are one run
    new_run = np.ones(len(order), dtype=bool)
    new_run[1:] = (stretch_key[1:] != stretch_key[:-1]) | (stretch_op[1:] != stretch_op[:-1])
    return scheduled, begins[new_run], stretch_key[new_run], stretch_op[new_run]


def _sorted_rows(ins: np.ndarray, key: np.ndarray, op8: np.ndarray):
    """`_sorted` row by row: one stable argsort of the key (nearly sorted already: the sort's runs
    make it cheap) and a gather of the rows."""
    order = np.argsort(key, kind="stable")
    scheduled = take_rows(ins, order)
    key_sorted, op_sorted = key[order], op8[order]
    change = np.flatnonzero((key_sorted[1:] != key_sorted[:-1]) | (op_sorted[1:] != op_sorted[:-1])) + 1
    starts = np.append(0, change)
    return scheduled, starts, key_sorted[starts], op_sorted[starts]


def schedule(program: Program) -> Schedule:
    ins = program.instructions
    n_ins = len(ins)
    # key: rank now; the layers (times NUM_OPCODES + 1) are added group by group below
    key = np.empty(n_ins, dtype=np.int32 if n_ins < _INT32_ROWS else np.int64)
    op8 = np.empty(n_ins, dtype=np.uint8)
    bar_idx, cuts, ranged = _scan(ins, key, op8)
    # Group boundaries: a change of STEP, and each barrier alone.
    cuts = np.union1d(cuts, np.union1d(bar_idx, bar_idx + 1))
    cuts = cuts[(cuts > 0) & (cuts < n_ins)]
    bounds = [0] + cuts.tolist() + [n_ins] if n_ins else [0]
    barriers = set(bar_idx.tolist())
    # Groups that take the row-by-row path: those with an E (its qubits are a range of ext_qubits)
    row_by_row = set((np.searchsorted(bounds, ranged, side="right") - 1).tolist())
    width = opcodes.NUM_OPCODES + 1
    # last[q]: the layer of the latest row on q, or less than `base` (the layer of the latest
    # barrier; read as max(last[q], base)), so a barrier need not reset every qubit. Index -1 (a
    # one-qubit row's B) lands on a dummy entry, left at 0.
    last = np.zeros(program.num_qubits + 1, dtype=key.dtype)
    # mark[q]: the latest row that wrote q; a group's qubits are distinct exactly when every row
    # of the group reads its own index back.
    mark = np.full(program.num_qubits + 1, -1, dtype=np.int64)
    base, segment = 0, 0  # the latest barrier's layer, and the first row after it
    for g in range(len(bounds) - 1):
        lo, hi = bounds[g], bounds[g + 1]
        if lo in barriers:
            # A barrier sits alone in its own layer after everything before it.
            base = max(base, int(key[segment:lo].max()) // width if lo > segment else 0) + 1
            key[lo] += base * width
            segment = lo + 1
            continue
        a, b = np.ascontiguousarray(ins[lo:hi, A : B + 1].T, dtype=np.intp)  # indices once, not per use
        if g not in row_by_row:
            here = np.arange(lo, hi)
            mark[a] = here
            mark[b] = here
            mark[-1] = -1
            if not ((mark[a] == here).all() and ((mark[b] == here) | (b < 0)).all()):
                row_by_row.add(g)
        if g in row_by_row:
            for i in range(lo, hi):  # rare: E over a range of qubits, or a group that reuses a qubit
                if _ARITY0[ins[i, OP]]:
                    qs = program.ext_qubits[ins[i, A] : ins[i, A] + ins[i, B]]
                else:
                    qs = [ins[i, A]] + ([ins[i, B]] if ins[i, B] >= 0 else [])
                lay = max(int(last[qs].max()), base) + 1
                key[i] += lay * width
                last[qs] = lay
            continue
        lay = np.maximum(last[a], last[b])
        if base:
            np.maximum(lay, base, out=lay)
        lay += 1
        last[a] = lay
        last[b] = lay
        last[-1] = 0
        lay *= width
        key[lo:hi] += lay
    # Within a layer: non-collapse runs by opcode, then collapses in program order: by layer, then
    # rank, then program order, one stable sort of the combined key
    if n_ins:
        scheduled, starts, run_key, run_op = _sorted(ins, key, op8)
        ends = np.append(starts[1:], n_ins)
        run_layers = run_key // width
        window = np.concatenate([[0], np.cumsum(run_layers[1:] != run_layers[:-1])])  # layers are sorted
        runs = np.stack([starts, ends, run_op.astype(np.int64), window], axis=1).astype(np.int32)
    else:
        scheduled, runs = ins[:0].copy(), np.zeros((0, 4), dtype=np.int32)
    loop_runs = np.full((len(program.loops), 2), -1, dtype=np.int32)
    kind_runs = opcodes.KIND[runs[:, RUN_OP]] if len(runs) else np.zeros(0)
    for r in np.flatnonzero(kind_runs == Kind.LOOP):
        row = scheduled[runs[r, RUN_START]]
        loop_runs[row[A], 0 if row[OP] == opcodes.CODE["REPEAT"] else 1] = r
    return Schedule(instructions=scheduled, runs=runs, loop_runs=loop_runs)


__all__ = ["Schedule", "schedule", "NUM_FIELDS"]
