"""Window scheduling (paper §4.2): maximal windows of instructions on disjoint qubits.

Every instruction is placed in the earliest layer after the instructions that share a qubit with
it (as-soon-as-possible layering); a layer is a window. Classically controlled instructions,
CONFUSION and loop markers are barriers: nothing moves across them. Inside a window, instructions
are grouped into runs of one opcode (unitaries and noise first, then collapses), and collapse
instructions (M, R, MR) keep their program order: tableau mode processes them one after another
(the paper's measurement barrier), frame mode all at once (the paper's merged measurement window).

The compiler's STEP column lets a whole group of disjoint instructions be layered in one
vectorised step, so scheduling costs a Python iteration per circuit moment, not per operation.
Where a compiler placed every row as soon as possible already (`LAYERED_FROM`), the layers are its
STEP column and nothing is layered again.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..core import native, opcodes
from ..core.program import (COND, LAYERED_FROM, NUM_FIELDS, OP, STEP, A, B, Program, RowBlocks, joined_rows,
                            row_blocks, take_rows)

Kind = opcodes.Kind

RUN_START, RUN_END, RUN_OP, RUN_WINDOW = range(4)


class Schedule:
    """The program's instructions reordered into windows, as arrays ready for one upload.

    ``instructions``: int32 [N, NUM_FIELDS], the Program's rows in execution order.
    ``runs``: int32 [R, 4] = (start, end, opcode, window) — contiguous rows of one opcode.
    ``loop_runs``: int32 [L, 2] = run index of each loop's REPEAT and END_REPEAT marker.

    `instructions` may also be given as consecutive blocks of rows (a RowBlocks: `joined`), which
    are joined into one table the first time it is read: a streamed first call's device already
    holds them joined, and its host may never need them as one (100k qubits: 252 MB of fresh
    memory, 95 ms on an H100 host, after the last piece)."""

    def __init__(self, instructions, runs: np.ndarray, loop_runs: np.ndarray):
        self._instructions = instructions
        self.runs = runs
        self.loop_runs = loop_runs
        self.derived: dict = {}  # what an engine reads off the schedule, made once (`measured_rows._windows`)

    @property
    def instructions(self) -> np.ndarray:
        return joined_rows(self._instructions)

    @property
    def num_rows(self) -> int:
        """len(instructions), without joining blocks."""
        return len(self._instructions)

    @property
    def nbytes(self) -> int:
        """instructions.nbytes (int32 rows), without joining blocks."""
        return 4 * NUM_FIELDS * self.num_rows

    def __repr__(self) -> str:
        return f"Schedule({self.num_rows} rows, {len(self.runs)} runs, {len(self.loop_runs)} loops)"


_COLLAPSE = {opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"]}
# per opcode: whether it is a barrier (loop markers, CONFUSION), and its rank within a layer
# (collapses after every other opcode)
_BARRIER_OP = np.isin(opcodes.KIND, [Kind.LOOP, Kind.RECORD_NOISE])
_RANK = np.where(np.isin(np.arange(opcodes.NUM_OPCODES), list(_COLLAPSE)), opcodes.NUM_OPCODES,
                 np.arange(opcodes.NUM_OPCODES))


_ARITY0 = opcodes.ARITY == 0
_SPECIAL_OP = _BARRIER_OP | _ARITY0  # rows that are barriers whatever their COND, and E
# each opcode as qq_host_layer_rows reads it: bit 1 a barrier, bit 2 arity 0 (E, on a range of qubits)
_SPECIAL_BITS = (_BARRIER_OP * 1 | (_ARITY0 & ~_BARRIER_OP) * 2).astype(np.uint8)
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


def _keys_from_steps(ins, key: np.ndarray, op8: np.ndarray, first_step: int) -> None:
    """Fills `key` (layer * (NUM_OPCODES + 1) + rank) and `op8` of rows (a table or a RowBlocks)
    whose layer is their STEP - first_step + 1 (LAYERED_FROM), a block of rows at a time (as
    `_scan`)."""
    rank, width = _RANK.astype(key.dtype), opcodes.NUM_OPCODES + 1
    at = 0
    for group in _groups(ins):
        ops = _column(group, OP).astype(np.intp)
        part = key[at : at + len(ops)]
        np.take(rank, ops, out=part)
        layer = _column(group, STEP).astype(key.dtype)
        layer -= first_step - 1
        layer *= width
        part += layer
        op8[at : at + len(ops)] = ops
        at += len(ops)


def _groups(ins):
    """The rows (a table or a RowBlocks) as consecutive lists of blocks of about _BLOCK rows each
    (a builder's blocks are often a few hundred rows: one NumPy call a block cost more than its rows)."""
    group, rows = [], 0
    for block in row_blocks(ins):
        for lo in range(0, len(block), _BLOCK):
            part = block[lo : lo + _BLOCK]
            group.append(part)
            rows += len(part)
            if rows >= _BLOCK:
                yield group
                group, rows = [], 0
    if group:
        yield group


def _column(group: List[np.ndarray], field: int) -> np.ndarray:
    return group[0][:, field] if len(group) == 1 else np.concatenate([block[:, field] for block in group])


def _sorted(ins, key: np.ndarray, op8: np.ndarray, limit: Optional[int] = None):
    """(the rows (a table or a RowBlocks) of key below `limit` (None: all) in a stable sort by key,
    the first row of each run of one key and opcode in that order, the runs' keys and opcodes, and
    (rows, key, op8) of the rest in program order, or None). Where the rows come in long stretches
    of one key and opcode (a compiled circuit's instructions, a layer's gates of one kind together),
    the stretches (cut where a block ends) move as slices from their blocks in a sort of their keys
    (`_moved`); otherwise the rows move one by one (`_sorted_rows`, the oracle)."""
    n_ins = len(key)
    blocks = row_blocks(ins)
    block_first = _block_starts(blocks)
    change = key[1:] != key[:-1]
    change |= op8[1:] != op8[:-1]
    change[block_first[1:] - 1] = True  # a stretch lies in one block
    if (int(np.count_nonzero(change)) + 1) * _STRETCH_ROWS > n_ins:  # (short ones: their list never made)
        return _sorted_rows(ins, key, op8, limit)
    cut = np.flatnonzero(change) + 1
    first = np.append(0, cut)
    last = np.append(cut, n_ins)
    stretch_key, stretch_op = key[first], op8[first]
    rest = None
    if limit is not None:
        later = stretch_key >= limit
        if later.any():
            lo, hi = first[later], last[later]
            rest = (np.concatenate(_slices(blocks, block_first, lo, hi)),
                    *(np.concatenate([a[s:e] for s, e in zip(lo.tolist(), hi.tolist())]) for a in (key, op8)))
            first, last, stretch_key, stretch_op = first[~later], last[~later], stretch_key[~later], stretch_op[~later]
    return (*_moved(blocks, block_first, first, last, stretch_key, stretch_op), rest)


def _sorted_from_steps(ins, first_step: int):
    """`_sorted` of rows whose layer is their STEP - first_step + 1 (LAYERED_FROM), read from their
    STEP and OP columns alone, or None where their stretches are short (then `_keys_from_steps` and
    `_sorted_rows`). Such rows are in layer order already, so a stretch of one key and opcode
    is one of one STEP and opcode, and only each stretch's first row gets a key (a key a row, and
    its comparisons, cost more than the rest of the schedule at 10k qubits). By the host's compiled
    path (host_rows.cpp) where it is on, else in NumPy, the definition."""
    lib = native.compiled()
    if lib is not None:
        moved = _sorted_from_steps_compiled(lib, ins, first_step)
        if moved is not NotImplemented:
            return moved
    blocks = row_blocks(ins)
    firsts, steps, ops = [], [], []
    at = 0
    for group in _groups(ins):
        step, op = _column(group, STEP), _column(group, OP)
        change = np.empty(len(step), dtype=bool)
        change[0] = True
        np.not_equal(step[1:], step[:-1], out=change[1:])
        change[1:] |= op[1:] != op[:-1]
        change[np.cumsum([len(part) for part in group[:-1]], dtype=np.int64)] = True  # a stretch lies in one block
        where = np.flatnonzero(change)
        firsts.append(where + at)
        steps.append(step[where])
        ops.append(op[where])
        at += len(step)
    first = np.concatenate(firsts)
    if len(first) * _STRETCH_ROWS > at:
        return None
    last = np.append(first[1:], at)
    stretch_op = np.concatenate(ops).astype(np.uint8)
    stretch_key = np.concatenate(steps).astype(np.int64)
    stretch_key -= first_step - 1
    stretch_key *= opcodes.NUM_OPCODES + 1
    stretch_key += _RANK[stretch_op]
    return _moved(blocks, _block_starts(blocks), first, last, stretch_key, stretch_op)


def _readable_blocks(ins) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(each block's address, its rows) of rows (a table or a RowBlocks) as the compiled passes read
    them, or None where a block is not a C-contiguous int32 table."""
    blocks = row_blocks(ins)
    if not all(b.dtype == np.int32 and b.ndim == 2 and b.shape[1] == NUM_FIELDS and b.flags.c_contiguous
               for b in blocks):
        return None
    address = native.address
    return (np.array([address(b) for b in blocks], dtype=np.int64),
            np.array([len(b) for b in blocks], dtype=np.int64))


def _sorted_from_steps_compiled(lib, ins, first_step: int):
    """`_sorted_from_steps` in two passes of the compiled path: the stretches (cut where NumPy's
    reading cuts them, so that both say None alike), then their rows moved in a stable sort of their
    keys; NotImplemented for blocks it does not read (not C-contiguous int32 rows)."""
    blocks = _readable_blocks(ins)
    if blocks is None:
        return NotImplemented
    address = native.address
    where, rows = blocks
    total = int(rows.sum())
    threads = native.threads_for(4 * NUM_FIELDS * total)
    room = total // _STRETCH_ROWS  # more stretches than this: short ones (None)
    s_block, s_first, s_length, s_key = (np.empty(room, dtype=np.int64) for _ in range(4))
    s_op = np.empty(room, dtype=np.uint8)
    stretches = lib.qq_host_layer_stretches(address(where), address(rows), len(where), _BLOCK, first_step,
                                            address(_RANK_I64), len(_RANK_I64), opcodes.NUM_OPCODES + 1, room,
                                            address(s_block), address(s_first), address(s_length), address(s_key),
                                            address(s_op), threads)
    if stretches == -1:
        return NotImplemented
    if stretches < 0:
        return None
    scheduled = np.empty((total, NUM_FIELDS), dtype=np.int32)  # new memory: written by `threads` threads
    order, run_first, run_key = (np.empty(stretches, dtype=np.int64) for _ in range(3))
    run_op = np.empty(stretches, dtype=np.uint8)
    runs = lib.qq_host_move_stretches(address(where), stretches, address(s_block), address(s_first),
                                      address(s_length), address(s_key), address(s_op), address(order),
                                      address(scheduled), address(run_first), address(run_key), address(run_op),
                                      threads)
    return scheduled, run_first[:runs], run_key[:runs], run_op[:runs]


_RANK_I64 = np.ascontiguousarray(_RANK, dtype=np.int64)


def _block_starts(blocks: List[np.ndarray]) -> np.ndarray:
    starts = np.zeros(len(blocks), dtype=np.int64)
    np.cumsum([len(b) for b in blocks[:-1]], out=starts[1:])
    return starts


def _slices(blocks: List[np.ndarray], block_first: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> List[np.ndarray]:
    """The rows [lo[i], hi[i]) of blocks (each range inside one), as views of their blocks."""
    which = np.searchsorted(block_first, lo, side="right") - 1
    base = block_first[which]
    return [blocks[b][s:e] for b, s, e in zip(which.tolist(), (lo - base).tolist(), (hi - base).tolist())]


def _moved(blocks: List[np.ndarray], block_first: np.ndarray, first: np.ndarray, last: np.ndarray,
           stretch_key: np.ndarray, stretch_op: np.ndarray):
    """(rows, the first row of each run, the runs' keys and opcodes) of stretches [first, last) of
    the blocks' rows, in a stable sort of their keys, copied into one table."""
    order = np.argsort(stretch_key, kind="stable")  # a stretch's rows are in program order already
    first, last, stretch_key, stretch_op = first[order], last[order], stretch_key[order], stretch_op[order]
    scheduled = np.empty((int((last - first).sum()), NUM_FIELDS), dtype=np.int32)
    if len(order):
        np.concatenate(_slices(blocks, block_first, first, last), out=scheduled)
    begins = np.zeros(len(order), dtype=np.int64)
    np.cumsum(last[:-1] - first[:-1], out=begins[1:])
    # neighbouring stretches of one key and opcode are one run
    new_run = np.ones(len(order), dtype=bool)
    new_run[1:] = (stretch_key[1:] != stretch_key[:-1]) | (stretch_op[1:] != stretch_op[:-1])
    return scheduled, begins[new_run], stretch_key[new_run], stretch_op[new_run]


def _sorted_rows(ins, key: np.ndarray, op8: np.ndarray, limit: Optional[int] = None):
    """`_sorted` row by row (of a table or a RowBlocks): one stable argsort of the key (nearly sorted
    already: the sort's runs make it cheap) and a gather of the rows; all of them (no `limit`) by the
    host's compiled path where it is on (a counting sort: `_sorted_rows_compiled`)."""
    if limit is None:
        lib = native.compiled()
        if lib is not None:
            moved = _sorted_rows_compiled(lib, ins, key, op8)
            if moved is not NotImplemented:
                return moved
    ins = joined_rows(ins)
    order = np.argsort(key, kind="stable")
    rest = None
    if limit is not None:
        cut = int(np.searchsorted(key[order], limit))
        if cut < len(order):
            wait = np.sort(order[cut:])
            rest = (take_rows(ins, wait), key[wait], op8[wait])
            order = order[:cut]
    return (take_rows(ins, order), *_runs(key[order], op8[order]), rest)


def _sorted_rows_compiled(lib, ins, key: np.ndarray, op8: np.ndarray):
    """`_sorted_rows` of every row (a table or a RowBlocks, read block by block) by a counting sort
    of the keys in threads (host_rows.cpp); NotImplemented where it does not apply: blocks that are
    not C-contiguous int32 tables, keys that are not int32, or keys so spread that the counts would
    outweigh the rows."""
    blocks = _readable_blocks(ins)
    n = len(key)
    if not (n and blocks is not None and key.dtype == np.int32 and op8.dtype == np.uint8):
        return NotImplemented
    low, top = int(key.min()), int(key.max()) + 1
    if low < 0 or top > 4 * n + (1 << 16):
        return NotImplemented
    key, op8 = np.ascontiguousarray(key), np.ascontiguousarray(op8)
    # (each thread's counts, a word a key, no more in all than a word a row)
    threads = max(1, min(native.threads_for(4 * NUM_FIELDS * n), n // (top + 1)))
    counts = np.empty((threads, top + 1), dtype=np.int64)
    scheduled = np.empty((n, NUM_FIELDS), dtype=np.int32)
    sorted_key = np.empty(n, dtype=np.int32)
    sorted_op = np.empty(n, dtype=np.uint8)
    run_first, run_key = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    run_op = np.empty(n, dtype=np.uint8)
    address = native.address
    where, rows = blocks
    runs = lib.qq_host_sort_rows(address(where), address(rows), len(where), address(key), address(op8), top, threads,
                                 address(counts), address(scheduled), address(sorted_key), address(sorted_op),
                                 address(run_first), address(run_key), address(run_op))
    return scheduled, run_first[:runs], run_key[:runs].astype(key.dtype), run_op[:runs], None


def schedule(program: Program) -> Schedule:
    rows = program.rows
    scheduler = Scheduler(program.num_qubits, program.ext_qubits, len(program.loops),
                          np.int32 if len(rows) < _INT32_ROWS else np.int64)
    layered = program.derived.get(LAYERED_FROM)
    first_step = int(layered[0]) if layered is not None and layered[1] is rows else None
    # the rows are read block by block (a builder's blocks: the program's own join never needed),
    # by NumPy's layering as one table
    whole = scheduler.add(rows if first_step is not None or native.compiled() is not None else program.instructions,
                          last=True, layered_from=first_step)
    return Schedule(instructions=whole.instructions, runs=whole.runs, loop_runs=scheduler.loop_runs)


class Scheduler:
    """`schedule` of a program whose rows come in consecutive runs (`add`), as a compile hands them
    on: after each run, the windows no later row can join (those at or below every qubit's latest
    layer: a later row goes past its qubits' latest) come out as a Schedule of their own, and
    `joined` of those is `schedule` of the whole program, row for row."""

    def __init__(self, num_qubits: int, ext_qubits: np.ndarray, num_loops: int, key_dtype=np.int64):
        self.n, self.ext_qubits, self.key_dtype = num_qubits, ext_qubits, key_dtype
        # last[q]: the layer of the latest row on q, or less than `base` (the layer of the latest
        # barrier; read as max(last[q], base)), so a barrier need not reset every qubit. Index -1 (a
        # one-qubit row's B) lands on a dummy entry, left at 0.
        self.last = np.zeros(num_qubits + 1, dtype=key_dtype)
        # mark[q]: the latest row that wrote q; a group's qubits are distinct exactly when every row
        # of the group reads its own index back.
        self.mark = np.full(num_qubits + 1, -1, dtype=np.int64)
        self.base = 0  # the latest barrier's layer
        self.top = 0  # the highest layer of a row since that barrier
        self.rows = 0  # rows added so far
        self.pending: List[tuple] = []  # (rows, key, op8) of rows not yet in a window that came out
        self.runs_out = 0  # runs that came out
        self.loop_runs = np.full((num_loops, 2), -1, dtype=np.int32)
        self._layered = True  # every row so far came layered by the compile (`add`'s `layered_from`)

    def add(self, ins, last: bool = False, layered_from: Optional[int] = None) -> Schedule:
        """Layer the next rows (a table, or a RowBlocks); returns the windows now final (with `last`:
        every window left), its runs' windows numbered from 0 (`joined` numbers them on),
        `loop_runs` left empty (the scheduler's own holds them).

        `layered_from` (not None): the compile's word that these rows and every row before them
        are in layers already, each row's STEP - layered_from + 1, and whole layers up to a
        frontier that no later row goes below (LAYERED_FROM; a stream of pieces gives it while its
        compile can): the key is made from STEP and only the sort by key remains. Rows without
        that word after rows with it are layered from an empty state, which is exact: each later
        row's layer in the whole program is one past a row of the frontier's layer F or of a
        later row, and every qubit's latest row is at F or later, so the empty state gives every
        later row its layer less F, the same windows in the same order (and the same frontiers)."""
        if layered_from is not None and self._layered:  # nothing pending: each such call gave out every row
            self.rows += len(ins)
            moved = _sorted_from_steps(ins, layered_from) if len(ins) else None
            if moved is None:  # short stretches (or no rows): a key for every row, sorted row by row
                key = np.empty(len(ins), dtype=self.key_dtype)
                op8 = np.empty(len(ins), dtype=np.uint8)
                _keys_from_steps(ins, key, op8, layered_from)
                moved = _sorted_rows(ins, key, op8)[:4]
            return self._piece(*moved)  # a layer's rows all came with it
        self._layered = False  # from here on the scheduler layers every row
        if not (last and not self.pending):  # (rows kept as blocks are read as blocks: a whole program's)
            ins = joined_rows(ins)
        key = np.empty(len(ins), dtype=self.key_dtype)
        op8 = np.empty(len(ins), dtype=np.uint8)
        self._layer(ins, key, op8)
        self.rows += len(ins)
        if len(ins):
            self.pending.append((ins, key, op8))
        if last:
            frontier = None
        else:
            frontier = max(self.base, int(self.last[: self.n].min())) if self.n else self.base
        return self._final(frontier)

    def _layer(self, ins: np.ndarray, key: np.ndarray, op8: np.ndarray) -> None:
        """key[i] = row i's layer * (NUM_OPCODES + 1) + its rank: as soon as possible after the
        rows before it on its qubits, a barrier alone after every row before it. By the host's
        compiled path where it is on (a walk of the rows in order: `_layer_compiled`), else in NumPy,
        the definition, a group of rows on distinct qubits at a time."""
        lib = native.compiled()
        if lib is not None and self._layer_compiled(lib, ins, key, op8):
            return
        ins = joined_rows(ins)
        n_ins = len(ins)
        # key: rank now; the layers (times NUM_OPCODES + 1) are added group by group below
        bar_idx, cuts, ranged = _scan(ins, key, op8)
        # Group boundaries: a change of STEP, and each barrier alone.
        cuts = np.union1d(cuts, np.union1d(bar_idx, bar_idx + 1))
        cuts = cuts[(cuts > 0) & (cuts < n_ins)]
        bounds = [0] + cuts.tolist() + [n_ins] if n_ins else [0]
        barriers = set(bar_idx.tolist())
        # Groups that take the row-by-row path: those with an E (its qubits are a range of ext_qubits)
        row_by_row = set((np.searchsorted(bounds, ranged, side="right") - 1).tolist())
        width = opcodes.NUM_OPCODES + 1
        last, mark, base, top = self.last, self.mark, self.base, self.top
        for g in range(len(bounds) - 1):
            lo, hi = bounds[g], bounds[g + 1]
            if lo in barriers:
                # A barrier sits alone in its own layer after everything before it.
                base = max(base, top) + 1
                key[lo] += base * width
                top = 0
                continue
            a, b = np.ascontiguousarray(ins[lo:hi, A : B + 1].T, dtype=np.intp)  # indices once, not per use
            if g not in row_by_row:
                here = np.arange(self.rows + lo, self.rows + hi)
                mark[a] = here
                mark[b] = here
                mark[-1] = -1
                if not ((mark[a] == here).all() and ((mark[b] == here) | (b < 0)).all()):
                    row_by_row.add(g)
            if g in row_by_row:
                for i in range(lo, hi):  # rare: E over a range of qubits, or a group that reuses a qubit
                    if _ARITY0[ins[i, OP]]:
                        qs = self.ext_qubits[ins[i, A] : ins[i, A] + ins[i, B]]
                    else:
                        qs = [ins[i, A]] + ([ins[i, B]] if ins[i, B] >= 0 else [])
                    lay = max(int(last[qs].max()), base) + 1
                    key[i] += lay * width
                    last[qs] = lay
                    top = max(top, lay)
                continue
            lay = np.maximum(last[a], last[b])
            if base:
                np.maximum(lay, base, out=lay)
            lay += 1
            last[a] = lay
            last[b] = lay
            last[-1] = 0
            top = max(top, int(lay.max()))
            lay *= width
            key[lo:hi] += lay
        self.base, self.top = base, top

    def _layer_compiled(self, lib, ins, key: np.ndarray, op8: np.ndarray) -> bool:
        """`_layer` by `qq_host_layer_rows` (host_rows.cpp), of rows given as a table or a RowBlocks
        (read block by block); False, with nothing changed, where it does not apply: blocks that are
        not C-contiguous int32 tables, or a row it leaves to NumPy's answer (a qubit or range out
        of bounds)."""
        blocks = _readable_blocks(ins)
        if blocks is None or key.dtype not in (np.int32, np.int64) or key.dtype != self.last.dtype:
            return False
        ext = np.ascontiguousarray(self.ext_qubits, dtype=np.int32)
        state = np.array([self.base, self.top], dtype=np.int64)
        address = native.address
        where, rows = blocks
        done = lib.qq_host_layer_rows(address(where), address(rows), len(where), address(_RANK_I64),
                                      address(_SPECIAL_BITS), opcodes.NUM_OPCODES, opcodes.NUM_OPCODES + 1,
                                      address(ext), len(ext), address(self.last), self.n, address(state),
                                      address(key), address(op8), key.dtype == np.int64)
        if done:
            return False
        self.base, self.top = int(state[0]), int(state[1])
        return True

    def _final(self, frontier) -> Schedule:
        """The pending rows of layers up to `frontier` (None: all) in window order, as a Schedule."""
        width = opcodes.NUM_OPCODES + 1
        if not self.pending:
            return self._piece(np.zeros((0, NUM_FIELDS), dtype=np.int32), None, None, None)
        if len(self.pending) == 1:
            ins, key, op8 = self.pending[0]
        else:
            ins, key, op8 = (np.concatenate(part) for part in zip(*self.pending))
        # Within a layer: non-collapse runs by opcode, then collapses in program order: by layer,
        # then rank, then program order, one stable sort of the combined key; the rows of later
        # layers wait, in program order, for the rows that may still join them
        scheduled, starts, run_key, run_op, rest = _sorted(
            ins, key, op8, None if frontier is None else (frontier + 1) * width)
        self.pending = [rest] if rest is not None else []
        return self._piece(scheduled, starts, run_key, run_op)

    def _piece(self, scheduled: np.ndarray, starts: np.ndarray, run_key: np.ndarray, run_op: np.ndarray) -> Schedule:
        """A Schedule of rows in window order and their runs (first rows, keys, opcodes; None
        where there are no rows)."""
        if not len(scheduled):
            return Schedule(scheduled[:0].copy(), np.zeros((0, 4), dtype=np.int32), np.zeros((0, 2), dtype=np.int32))
        ends = np.append(starts[1:], len(scheduled))
        run_layers = run_key // (opcodes.NUM_OPCODES + 1)
        window = np.concatenate([[0], np.cumsum(run_layers[1:] != run_layers[:-1])])  # layers are sorted
        runs = np.stack([starts, ends, run_op.astype(np.int64), window], axis=1).astype(np.int32)
        for r in np.flatnonzero(opcodes.KIND[runs[:, RUN_OP]] == Kind.LOOP):
            row = scheduled[runs[r, RUN_START]]
            self.loop_runs[row[A], 0 if row[OP] == opcodes.CODE["REPEAT"] else 1] = self.runs_out + r
        self.runs_out += len(runs)
        return Schedule(instructions=scheduled, runs=runs, loop_runs=np.zeros((0, 2), dtype=np.int32))


def window_rows(sched: Schedule) -> Tuple[np.ndarray, int]:
    """(rows of each window in schedule order, int64; the number of runs): a loop's body once, its
    markers not counted. The frame kernels walk the windows a barrier apart and a window's runs one
    after the other (frames.FrameMode.spread_pays)."""
    runs = sched.runs
    runs = runs[opcodes.KIND[runs[:, RUN_OP]] != Kind.LOOP]
    rows = (runs[:, RUN_END] - runs[:, RUN_START]).astype(np.int64)
    windows = runs[:, RUN_WINDOW]
    first = np.flatnonzero(np.concatenate([[True], windows[1:] != windows[:-1]]))
    return (np.add.reduceat(rows, first) if len(rows) else rows), len(runs)


def _runs(key_sorted: np.ndarray, op_sorted: np.ndarray):
    """(first row, key, opcode) of each run of one key and opcode of rows in key order."""
    change = np.flatnonzero((key_sorted[1:] != key_sorted[:-1]) | (op_sorted[1:] != op_sorted[:-1])) + 1
    starts = np.append(0, change) if len(key_sorted) else np.zeros(0, dtype=np.int64)
    return starts, key_sorted[starts], op_sorted[starts]


def joined(schedules: List[Schedule], loop_runs: Optional[np.ndarray] = None) -> Schedule:
    """One Schedule of consecutive pieces (as a Scheduler gives them; `loop_runs`: its own): their
    rows in order (joined into one table when first read), their runs' rows and windows numbered on."""
    rows = windows = 0
    runs = []
    for piece in schedules:
        r = piece.runs.astype(np.int64)
        r[:, RUN_START] += rows
        r[:, RUN_END] += rows
        r[:, RUN_WINDOW] += windows
        runs.append(r)
        rows += piece.num_rows
        windows += int(piece.runs[-1, RUN_WINDOW]) + 1 if len(piece.runs) else 0
    return Schedule(instructions=RowBlocks([p.instructions for p in schedules]),  # joined when first read
                    runs=np.concatenate(runs).astype(np.int32) if runs else np.zeros((0, 4), dtype=np.int32),
                    loop_runs=np.zeros((0, 2), dtype=np.int32) if loop_runs is None else loop_runs)


__all__ = ["Schedule", "Scheduler", "schedule", "joined", "NUM_FIELDS"]
