"""The NumPy engine's reference sample from the measured rows alone (engines/measured_rows.py
says why that is the tableau run's records): the backward sweep bit-sliced in NumPy arrays, the
forward sweep with the tableau's own collapse code (`TableauState`'s plan, `window_of`) on the
measured rows."""

from __future__ import annotations

import numpy as np

from ...core import native, opcodes
from ...core.opcodes import Kind
from ...core.program import FLAG_INVERT, FLAGS, REC, A, B, Program
from ...schedule import Schedule
from ..measured_rows import COLLAPSE_KINDS, RECORDED_CODES, SKIPPED_IN_REFERENCE, Measurements
from .tableau import _cx_fan, _inject, _pivot, _swap, window_of

_ONE = np.uint64(1)
_WINDOW = 64  # measurements a forward window decides together


def pulled_back(num_qubits: int, schedule: Schedule, events: Measurements):
    """The backward sweep: each measurement's Z_q pulled back through the gates before it, bit-sliced
    (qubit-major x, z [n, words], signs [words]: bit e of word w is measurement 64w + e), and per
    reset its flip mask (the later measurements whose pulled-back row has Z or Y at its qubit). By
    the host's compiled path (host_tableau.cpp) where it is on, else in NumPy, the definition."""
    ins = schedule.instructions
    n, count = num_qubits, len(events.rows)
    words = max(1, -(-count // 64))
    x = np.zeros((n, words), dtype=np.uint64)
    z = np.zeros((n, words), dtype=np.uint64)
    s = np.zeros(words, dtype=np.uint64)
    lib = native.compiled()
    if lib is not None and ins.dtype == np.int32 and ins.flags.c_contiguous:
        return _pulled_back_compiled(lib, ins, schedule, events, x, z, s)
    _check_runs(schedule.runs)
    masks = {}
    event_of_row = np.full(len(ins), -1, dtype=np.int64)
    event_of_row[events.rows] = np.arange(count)
    for lo, hi, code, _ in schedule.runs[::-1].tolist():  # runs of one opcode on distinct qubits
        if _WHAT[code] == _GATE:
            _pull_back(code, ins[lo:hi, A].astype(np.int64), ins[lo:hi, B].astype(np.int64), x, z, s)
        elif _WHAT[code] == _COLLAPSE:
            for r in range(hi - 1, lo - 1, -1):
                e, q = int(event_of_row[r]), int(ins[r, A])
                if events.resets[e]:
                    masks[e] = z[q].copy()
                z[q, e >> 6] |= _ONE << np.uint64(e & 63)
    return x, z, s, masks


# What each opcode's run is to the backward sweep (both of them; host_tableau.cpp reads the codes):
# skipped (the identity, and what a reference run leaves out), a gate, a collapse, or none it takes.
_SKIP, _GATE, _COLLAPSE, _UNSUPPORTED = 0, 1, 2, 3
_WHAT = np.array([_GATE if k == int(Kind.UNITARY) and c != opcodes.CODE["I"] else _COLLAPSE if k in COLLAPSE_KINDS
                  else _SKIP if k in SKIPPED_IN_REFERENCE or c == opcodes.CODE["I"] else _UNSUPPORTED
                  for c, k in enumerate(opcodes.KIND.tolist())], dtype=np.uint8)


def _check_runs(runs: np.ndarray) -> None:
    """A ValueError naming the first opcode the backward sweep cannot take (a loop marker)."""
    unsupported = np.flatnonzero(_WHAT[runs[:, 2]] == _UNSUPPORTED) if len(runs) else []
    if len(unsupported):
        raise ValueError(f"opcode {opcodes.OPCODES[int(runs[unsupported[0], 2])].name} has no backward sweep")


def _pulled_back_compiled(lib, ins, schedule: Schedule, events: Measurements, x, z, s):
    """`pulled_back` by qq_host_pullback: the same planes, signs and reset masks."""
    runs = np.ascontiguousarray(schedule.runs, dtype=np.int32)
    _check_runs(runs)
    first_event = np.searchsorted(events.rows, runs[:, 0]).astype(np.int64)
    first_word = first_event >> 6  # held here: the call reads it by address
    resets = np.flatnonzero(events.resets)
    reset_slot = np.full(len(events.rows), -1, dtype=np.int64)
    reset_slot[resets] = np.arange(len(resets))
    reset_masks = np.zeros((len(resets), x.shape[1]), dtype=np.uint64)
    masks, signs = opcodes.pullback_tables()
    a = native.address
    lib.qq_host_pullback(a(ins), ins.shape[1], a(runs), len(runs), a(first_event), a(first_word), a(_WHAT),
                         a(opcodes.ARITY), a(masks), a(signs), a(x), a(z), a(s), x.shape[1], a(reset_slot),
                         a(reset_masks))
    return x, z, s, {int(e): reset_masks[i] for i, e in enumerate(resets.tolist())}


def _pull_back(code: int, q0: np.ndarray, q1: np.ndarray, x, z, s) -> None:
    """G† P G for a run of gates of one opcode on disjoint qubits, every measurement at once."""
    arity, masks, monomials = opcodes.pullback_map(code)
    planes = [x[q0], z[q0]] + ([x[q1], z[q1]] if arity == 2 else [])
    outs = []
    for mask in masks:
        acc = None
        for i, plane in enumerate(planes):
            if mask >> i & 1:
                acc = plane.copy() if acc is None else np.bitwise_xor(acc, plane, out=acc)
        outs.append(acc if acc is not None else np.zeros_like(planes[0]))
    for monomial in monomials:
        acc = None
        for i, plane in enumerate(planes):
            if monomial >> i & 1:
                acc = plane.copy() if acc is None else np.bitwise_and(acc, plane, out=acc)
        s ^= np.bitwise_xor.reduce(acc, axis=0)
    x[q0], z[q0] = outs[0], outs[1]
    if arity == 2:
        x[q1], z[q1] = outs[2], outs[3]


def _rows_of(planes: np.ndarray, count: int, words: int) -> np.ndarray:
    """Bit-sliced [n, ew] (bit e: measurement e) -> rows [count, words] (bit q: qubit q), 1,024
    qubits at a time (a byte a bit in between)."""
    rows = np.zeros((count, 8 * words), dtype=np.uint8)
    for q0 in range(0, planes.shape[0], 1024):
        bits = np.unpackbits(planes[q0 : q0 + 1024].view(np.uint8), axis=1, bitorder="little")[:, :count]
        packed = np.packbits(bits.T, axis=1, bitorder="little")  # [count, ceil(block / 8)]
        rows[:, q0 // 8 : q0 // 8 + packed.shape[1]] = packed
    return rows.view(np.uint64)


def run_records(program: Program, schedule: Schedule, window: int = _WINDOW) -> np.ndarray:
    """The records of the reference run of `program` (from |0…0>, every random outcome 0), from its
    measured rows alone, `window` collapses decided together."""
    events = Measurements(schedule)
    n, count = program.num_qubits, len(events.rows)
    records = np.zeros(program.num_records, dtype=np.uint8)
    if count == 0:
        return records
    bx, bz, bs, masks = pulled_back(n, schedule, events)
    words = max(1, -(-n // 64))
    X, Z = _rows_of(bx, count, words), _rows_of(bz, count, words)
    S = np.unpackbits(bs.view(np.uint8), bitorder="little")[:count].copy()
    ins = schedule.instructions
    mask_bits = {e: np.unpackbits(m.view(np.uint8), bitorder="little")[:count] for e, m in masks.items()}
    for lo in range(0, count, window):
        hi = min(count, lo + window)
        outcomes, steps, fired = _plan_rows(X[lo:hi], Z[lo:hi], S[lo:hi], lo, events, mask_bits)
        for e, outcome in zip(range(lo, hi), outcomes):
            r = events.rows[e]
            if events.ops[e] in RECORDED_CODES:
                records[ins[r, REC]] = outcome ^ (int(ins[r, FLAGS]) & FLAG_INVERT)
        if hi < count:
            random = [step for step in steps if step is not None]
            update = window_of(random, words)
            if update is not None:
                update(X[hi:], Z[hi:], S[hi:])
            for e in fired:  # the resets that flipped their qubit: later rows with Z or Y there
                S[hi:] ^= mask_bits[e][hi:]
    return records


def _plan_rows(X, Z, S, first: int, events: Measurements, mask_bits):
    """`TableauState._plan` on the window's own rows (views of the measured rows, updated in
    place): the outcomes, each random collapse's (pivot, victims, H_YZ?, inject?), and the resets
    whose outcome was 1, whose flips reach the window's later rows here. Every coin is 0."""
    outcomes, steps, fired = [], [], []
    k = len(S)
    for i in range(k):
        pivot = _pivot(X[i])
        if pivot is None:
            outcome = int(S[i])
            steps.append(None)
        else:
            p, victims = pivot
            _cx_fan(X[i:], Z[i:], S[i:], p, victims)
            yz = int((Z[i, p >> 6] >> np.uint64(p & 63)) & _ONE)
            _swap(X[i:], Z[i:], S[i:], p, yz)
            inject = int(S[i]) != 0
            if inject:
                _inject(Z[i:], S[i:], p)
            outcome = 0
            steps.append((p, victims, yz, inject))
        outcomes.append(outcome)
        e = first + i
        if events.resets[e] and outcome:
            fired.append(e)
            S[i + 1 :] ^= mask_bits[e][e + 1 : first + k]
    return outcomes, steps, fired
