"""Frame mode, compiled: the schedule turned once per program into a list of frame updates
(`FramePlan`), each with its index arrays ready, run per shot chunk against its `Draws`.

Two rewrites make the list shorter than the schedule, and neither changes a bit of the result:

- A collapse only reads and writes its own qubit's frame, so it is deferred past operations on
  other qubits and merged with the next ones (a GHZ circuit's interleaved measurements become one
  update). Classical control, confusion and loop boundaries stop the deferral.
- A loop whose body reads no record (no classical control, no confusion) is an affine map of the
  frames of the qubits it touches: s' = A s ^ u_k, records_k = C s ^ v_k, with u_k, v_k made of
  iteration k's random words alone. `_Fold` runs the body once over every iteration's random words
  side by side (u, v), reads A and C off the body run on unit frames, and combines iterations by a
  doubling scan: log2(iterations) GF(2) products instead of a Python walk per iteration. It is
  used when its cost model says it wins; the walk stays the oracle (`NumpyEngine(fast_paths=False)`).
"""

from __future__ import annotations

import functools
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...core import native, opcodes
from ...core.draws import confusion_values, noise_targets
from ...core.program import AUX, COND, OP, RAND, REC, A, B, Program
from ...schedule.walk import LoopBlock, assignment_index, condition_refs, walk
from .noise import _COLLAPSES, Inventory, NoDraws

Kind = opcodes.Kind
_UNITARY, _NOISE, _RECORD_NOISE, _FRAME = int(Kind.UNITARY), int(Kind.NOISE), int(Kind.RECORD_NOISE), int(Kind.FRAME)
_R = opcodes.CODE["R"]
_M = opcodes.CODE["M"]
_PAULI_OF_OP = {opcodes.CODE["X"]: 1, opcodes.CODE["Y"]: 2, opcodes.CODE["Z"]: 3}

# Cost model of a loop (seconds): one frame update's Python and NumPy overhead, and one word of
# frame data through one update; a fold pays the body once plus log2(iterations) GF(2) products.
_OP_SECONDS = 6e-6
_WORD_SECONDS = 2e-9
_FOLD_BYTES = 1 << 28  # the memory a fold may use per block of iterations


class _Run:
    """What a plan runs against: frames [n, blocks * count], flips, draws, and the slot shifts of
    the iterations being run (one per block of columns)."""

    def __init__(self, fx, fz, flips, draws, shifts, rec_shift, depth, reference, key, start, count):
        self.fx, self.fz, self.flips, self.draws = fx, fz, flips, draws
        # the compiled gate runs' library and the frames' addresses, where it takes these frames
        self.gates = ((native.compiled(), native.address(fx), native.address(fz), fx.shape[1])
                      if _compiled_frames(fx, fz) else None)
        self.shifts = shifts  # int64 [blocks]
        self.rec_shift = rec_shift
        self.depth = depth  # record shifts of the open loops, as Step.depth_rec_shifts
        self.reference, self.key, self.start, self.count = reference, key, start, count


# ------------------------------------------------------------------------------- updates
@functools.lru_cache(maxsize=None)
def _frame_outputs(code: int):
    """(arity, outputs): the frame bits an opcode changes (0 = x_q0, 1 = z_q0, 2 = x_q1, 3 = z_q1),
    each as the input bits it XORs."""
    m = opcodes.FRAME_MAPS[code]
    arity = int(opcodes.ARITY[code])
    outputs = [(o, tuple(i for i in range(2 * arity) if m[o, i])) for o in range(2 * arity)]
    return arity, tuple((o, terms) for o, terms in outputs if terms != (o,))


@functools.lru_cache(maxsize=None)
def _frame_masks(code: int) -> np.ndarray:
    """uint8 [4]: bit i of entry o set where the opcode's frame output o takes input i (x0, z0, x1,
    z1), as host_frames.cpp reads them."""
    m = opcodes.FRAME_MAPS[code]
    arity = int(opcodes.ARITY[code])
    masks = np.zeros(4, dtype=np.uint8)
    for o in range(2 * arity):
        masks[o] = sum(1 << i for i in range(2 * arity) if m[o, i])
    return masks


def _compiled_frames(fx, fz) -> bool:
    """Whether the compiled gate runs take these frames: the compiled path is on, and they are
    writable C-contiguous uint64 tables of one shape."""
    return (native.compiled() is not None and isinstance(fx, np.ndarray) and isinstance(fz, np.ndarray)
            and fx.dtype == np.uint64 and fz.dtype == np.uint64 and fx.shape == fz.shape and fx.ndim == 2
            and fx.flags.c_contiguous and fz.flags.c_contiguous and fx.flags.writeable and fz.flags.writeable)


class _Unitary:
    def __init__(self, code: int, q0: np.ndarray, q1: np.ndarray):
        self.arity, self.outputs = _frame_outputs(code)
        single = len(q0) == 1  # a basic index: rows are views, no gather
        self.q0 = int(q0[0]) if single else q0
        self.q1 = (int(q1[0]) if single else q1) if self.arity == 2 else None
        self.single = single
        # the compiled path's form (host_frames.cpp), where it is on: where the gates' qubits are
        # distinct, as a schedule window's are, one gate after another gives the gather-then-scatter's
        # result
        self.native_args = None
        if self.outputs and not single and self.arity in (1, 2) and native.compiled() is not None:
            qubits = np.concatenate([q0, q1]) if self.arity == 2 else np.asarray(q0)
            if len(qubits) and np.bincount(qubits).max() == 1:
                c0 = np.ascontiguousarray(q0, dtype=np.int64)
                c1 = np.ascontiguousarray(q1, dtype=np.int64) if self.arity == 2 else c0
                masks = _frame_masks(code)
                self._native_arrays = (c0, c1, masks)  # kept alive: the library reads them by address
                self.native_args = (native.address(c0), native.address(c1), len(c0), self.arity, native.address(masks))

    def is_identity(self) -> bool:
        return not self.outputs

    def qubits(self) -> list:
        if self.single:
            return [self.q0] if self.arity == 1 else [self.q0, self.q1]
        return self.q0.tolist() if self.arity == 1 else self.q0.tolist() + self.q1.tolist()

    def run(self, r: _Run) -> None:
        fx, fz = r.fx, r.fz
        if self.native_args is not None and r.gates is not None:
            lib, x, z, words = r.gates
            lib.qq_host_frame_gates(x, z, words, *self.native_args)
            return
        q0, q1 = self.q0, self.q1
        bits = (fx[q0], fz[q0]) if self.arity == 1 else (fx[q0], fz[q0], fx[q1], fz[q1])
        new = []
        for o, terms in self.outputs:
            acc = bits[terms[0]]
            if len(terms) == 1:
                acc = acc.copy() if self.single else acc
            for i in terms[1:]:
                acc = acc ^ bits[i]
            new.append((o, acc))
        for o, value in new:
            (fx if o % 2 == 0 else fz)[q0 if o < 2 else q1] = value


class _Collapse:
    """M / R / MR on distinct qubits (rows of one or several runs, merged)."""

    def __init__(self, rows: np.ndarray):
        self.qs = rows[:, A].astype(np.int64)
        self.slots = rows[:, RAND].astype(np.int64)
        measured = rows[:, OP] != _R
        self.reset = rows[:, OP] != _M
        self.measured_qs = self.qs[measured]
        self.recs = rows[measured, REC].astype(np.int64)
        self.reset_qs, self.kept_qs = self.qs[self.reset], self.qs[~self.reset]

    def run(self, r: _Run) -> None:
        fresh = r.draws.fresh(self.slots, r.shifts)
        if len(self.recs):
            r.flips[self.recs + r.rec_shift] = r.fx[self.measured_qs]
        r.fx[self.reset_qs] = 0
        r.fz[self.reset_qs] = fresh[self.reset]
        r.fz[self.kept_qs] ^= fresh[~self.reset]


class _Noise:
    def __init__(self, program: Program, rows: np.ndarray, local: Optional[Dict[int, int]]):
        self.groups = []
        for aux in np.unique(rows[:, AUX]):
            sel = rows[rows[:, AUX] == aux]
            targets = noise_targets(program, sel).astype(np.int64)
            if local is not None:
                targets = np.vectorize(local.__getitem__, otypes=[np.int64])(targets)
            self.groups.append((int(aux), sel[:, RAND].astype(np.int64), targets))

    def qubits(self) -> list:
        return np.concatenate([t.ravel() for _, _, t in self.groups]).tolist()

    def run(self, r: _Run) -> None:
        for aux, slots, targets in self.groups:
            r.draws.noise(aux, slots, targets, r.shifts, r.fx, r.fz)


class _Controlled:
    """A classically controlled Pauli: XOR it where the shot's condition differs from the
    reference's (frame mode runs only programs whose controlled ops are Paulis)."""

    def __init__(self, program: Program, row: np.ndarray):
        self.program, self.row = program, row

    def run(self, r: _Run) -> None:
        controlled_pauli(self.program, self.row, r.depth, r.reference, r.flips, r.fx, r.fz, r.count)


class _Confusion:
    def __init__(self, program: Program, rows: np.ndarray):
        self.program, self.rows = program, rows

    def run(self, r: _Run) -> None:
        for row in self.rows:
            confuse(self.program, row, r.rec_shift, int(r.shifts[0]), r.key, r.reference, r.flips, r.start, r.count)


class _Loop:
    def __init__(self, block: LoopBlock, body: List, fold: Optional["_Fold"]):
        loop = block.loop
        self.count, self.rec_stride, self.rand_stride = loop.count, loop.rec_stride, loop.rand_stride
        self.body, self.fold = body, fold

    def run(self, r: _Run) -> None:
        if self.fold is not None and len(r.shifts) == 1 and self.fold.wins(r.count):
            self.fold.run(r, self)
            return
        shifts, rec_shift, depth = r.shifts, r.rec_shift, r.depth
        for k in range(self.count):
            r.shifts = shifts + k * self.rand_stride
            r.rec_shift = rec_shift + k * self.rec_stride
            r.depth = depth + (r.rec_shift,)
            _run_ops(self.body, r)
        r.shifts, r.rec_shift, r.depth = shifts, rec_shift, depth


def _run_ops(ops: Sequence, r: _Run) -> None:
    for op in ops:
        op.run(r)


# ------------------------------------------------------------------------------- compile
class FramePlan:
    """The schedule as frame updates, made once per program (kept in `program.derived`)."""

    def __init__(self, program: Program, schedule, fold_loops=True):
        self.program = program
        self.ops = _compile(program, schedule, walk(program, schedule, fold=lambda b: True), None, fold_loops)
        self._inventory: Optional[Inventory] = None

    def seconds(self, words: int) -> float:
        """The cost model's time of one run over `words` words (loops walked): its updates' fixed
        cost plus its rows' per-word cost (what the linear map is weighed against)."""
        if getattr(self, "_work", None) is None:
            self._work = _count_ops(self.ops)
        updates, rows = self._work
        return updates * _OP_SECONDS + rows * words * _WORD_SECONDS

    def inventory(self) -> Inventory:
        """Every slot the plan draws from (the chunk's `Draws` are made for exactly these)."""
        if self._inventory is None:
            collapses: List[np.ndarray] = []
            noise: Dict[int, List[np.ndarray]] = {}
            _collect(self.ops, np.zeros(1, dtype=np.int64), collapses, noise)
            unique = lambda parts: np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
            self._inventory = (unique(collapses), {aux: unique(p) for aux, p in noise.items()})
        return self._inventory

    def run(self, fx, fz, flips, draws, reference, key, start, count) -> None:
        r = _Run(fx, fz, flips, draws, np.zeros(1, dtype=np.int64), 0, (0,), reference, key, start, count)
        _run_ops(self.ops, r)


def frame_plan(program: Program, schedule, fold_loops=True) -> FramePlan:
    """The plan of a program's schedule: made once and kept with the program for its own schedule
    (`program.derived["schedule"]`), made afresh for any other (shot branching's)."""
    if program.derived.get("schedule") is not schedule:
        return FramePlan(program, schedule, fold_loops)
    cache_key = ("frame_plan", fold_loops)
    plan = program.derived.get(cache_key)
    if plan is None:
        plan = program.derived[cache_key] = FramePlan(program, schedule, fold_loops)
    return plan


def _collect(ops, shifts: np.ndarray, collapses: list, noise: dict) -> None:
    for op in ops:
        if isinstance(op, _Collapse):
            collapses.append(np.add.outer(shifts, op.slots).ravel())
        elif isinstance(op, _Noise):
            for aux, slots, _ in op.groups:
                noise.setdefault(aux, []).append(np.add.outer(shifts, slots).ravel())
        elif isinstance(op, _Loop):
            inner = np.add.outer(shifts, np.arange(op.count, dtype=np.int64) * op.rand_stride).ravel()
            _collect(op.body, inner, collapses, noise)


def _compile(program, schedule, items, local: Optional[Dict[int, int]], fold_loops) -> List:
    """Steps and loop blocks of one level -> updates, collapses deferred and merged."""
    ins = schedule.instructions
    ops: List = []
    pending: List[np.ndarray] = []
    pending_qubits: set = set()

    def flush():
        if pending:
            ops.append(_Collapse(np.concatenate(pending)))
            pending.clear()
            pending_qubits.clear()

    def add(op):
        # an op's qubits (Python lists of a run's targets) only matter while collapses are pending
        if pending_qubits and not pending_qubits.isdisjoint(op.qubits()):
            flush()
        ops.append(op)

    for item in items:
        if isinstance(item, LoopBlock):
            flush()
            body = _compile(program, schedule, item.iteration(0), local, fold_loops)
            fold = _Fold.of(program, schedule, item, body, fold_loops) if fold_loops and local is None else None
            ops.append(_Loop(item, body, fold))
            continue
        rows = ins[item.start : item.end]
        if local is not None:
            rows = _localised(rows, local)
        kind = int(opcodes.KIND[item.op])
        if rows[0, COND] >= 0:  # barrier runs hold a single instruction
            flush()
            ops.append(_Controlled(program, rows[0]))
        elif kind == _UNITARY or kind == _FRAME:
            op = _Unitary(item.op, rows[:, A], rows[:, B])
            if not op.is_identity():  # Paulis and I leave frames as they are
                add(op)
        elif kind in _COLLAPSES:
            qs = rows[:, A].tolist()
            if pending_qubits.intersection(qs):
                flush()
            pending.append(rows)
            pending_qubits.update(qs)
        elif kind == _NOISE:
            add(_Noise(program, rows, local))
        elif kind == _RECORD_NOISE:
            flush()
            ops.append(_Confusion(program, rows))
    flush()
    return ops


def _localised(rows: np.ndarray, local: Dict[int, int]) -> np.ndarray:
    """Rows with qubit operands renumbered into a loop's own qubits (noise targets are renumbered
    by `_Noise`)."""
    rows = rows.copy()
    arity = np.where(opcodes.KIND[rows[:, OP]] == Kind.NOISE, 0, opcodes.ARITY[rows[:, OP]])
    for col, needs in ((A, arity >= 1), (B, arity >= 2)):
        sel = needs & (rows[:, col] >= 0)
        rows[sel, col] = [local[int(q)] for q in rows[sel, col]]
    return rows


def _touched_qubits(program: Program, rows: np.ndarray) -> np.ndarray:
    qs = [rows[opcodes.ARITY[rows[:, OP]] >= 1, A], rows[opcodes.ARITY[rows[:, OP]] >= 2, B]]
    noise = rows[opcodes.KIND[rows[:, OP]] == Kind.NOISE]
    # by channel and opcode: one channel's rows may be of an opcode that names its targets (X_ERROR)
    # and of one that lists them in ext_qubits (E)
    for aux, op in np.unique(noise[:, [AUX, OP]], axis=0).tolist():
        qs.append(noise_targets(program, noise[(noise[:, AUX] == aux) & (noise[:, OP] == op)]).ravel())
    qs = np.unique(np.concatenate(qs).astype(np.int64))
    return qs[qs >= 0]


def _count_ops(ops) -> Tuple[int, int]:
    """(updates, instruction rows) one run of these ops performs, loops unrolled."""
    updates = rows = 0
    for op in ops:
        if isinstance(op, _Loop):
            u, w = _count_ops(op.body)
            updates, rows = updates + op.count * u, rows + op.count * w
        else:
            updates += 1
            rows += len(op.slots) if isinstance(op, _Collapse) else (
                sum(len(s) for _, s, _ in op.groups) if isinstance(op, _Noise) else 1)
    return updates, rows


# ------------------------------------------------------------------------------- loop folding
class _Fold:
    """A loop body as an affine map of the frames of its qubits (see the module docstring)."""

    @classmethod
    def of(cls, program, schedule, block: LoopBlock, body, mode=True) -> Optional["_Fold"]:
        rows = block.instructions()
        kinds = opcodes.KIND[rows[:, OP]]
        if len(rows) == 0 or (rows[:, COND] >= 0).any() or (kinds == Kind.RECORD_NOISE).any():
            return None
        if block.loop.count < 2:
            return None
        return cls(program, schedule, block, body, rows, always=mode == "always")

    def __init__(self, program, schedule, block: LoopBlock, body, rows, always: bool = False):
        self.always = always  # fold whatever the cost model says (tests)
        self.qubits = _touched_qubits(program, rows)
        local = {int(q): i for i, q in enumerate(self.qubits)}
        self.local_body = _compile(program, schedule, block.iteration(0), local, False)
        self.count = block.loop.count
        self.rec_stride, self.rand_stride = block.loop.rec_stride, block.loop.rand_stride
        measured = rows[:, REC] >= 0
        self.first_record = int(rows[measured, REC].min()) if measured.any() else 0
        self.updates, self.rows = _count_ops(body)
        self._linear: Optional[Tuple[np.ndarray, np.ndarray]] = None

    @property
    def width(self) -> int:
        return 2 * len(self.qubits)

    def wins(self, words: int) -> bool:
        """True when the cost model says folding beats walking the iterations."""
        if self.always:
            return True
        m, k = self.width, self.count
        walked = k * (self.updates * _OP_SECONDS + self.rows * words * _WORD_SECONDS)
        blocks = math.ceil(k / self._block_iterations(words))
        levels = math.ceil(math.log2(k + 1))
        folded = (blocks * self.updates * _OP_SECONDS + k * self.rows * words * _WORD_SECONDS
                  + blocks * levels * (m * _OP_SECONDS + self._block_iterations(words) * words * m * m * _WORD_SECONDS))
        return m <= 256 and 2 * folded < walked

    def _block_iterations(self, words: int) -> int:
        per_iteration = 8 * words * (4 * self.width + 2 * self.rec_stride)
        return max(1, min(self.count, _FOLD_BYTES // max(per_iteration, 1)))

    def linear(self) -> Tuple[np.ndarray, np.ndarray]:
        """(A [m, m], C [records, m]) over GF(2): the body run on unit frames with no draws."""
        if self._linear is None:
            m, t = self.width, len(self.qubits)
            lanes = (m + 63) // 64
            unit = np.zeros((m, lanes), dtype=np.uint64)
            unit[np.arange(m), np.arange(m) // 64] = np.uint64(1) << (np.arange(m) % 64).astype(np.uint64)
            fx, fz = unit[:t].copy(), unit[t:].copy()
            flips = np.zeros((self.rec_stride, lanes), dtype=np.uint64)
            r = _Run(fx, fz, flips, NoDraws(lanes), np.zeros(1, dtype=np.int64), -self.first_record, (),
                     None, None, 0, lanes)
            _run_ops(self.local_body, r)
            self._linear = (_lanes_to_matrix(np.concatenate([fx, fz]), m), _lanes_to_matrix(flips, m))
        return self._linear

    def run(self, r: _Run, loop: _Loop) -> None:
        a, c = self.linear()
        t, words = len(self.qubits), r.count
        state = np.concatenate([r.fx[self.qubits], r.fz[self.qubits]])  # [m, words]
        per_block = self._block_iterations(words)
        first = self.first_record + r.rec_shift
        for k0 in range(0, self.count, per_block):
            kb = min(per_block, self.count - k0)
            shifts = r.shifts[0] + (k0 + np.arange(kb, dtype=np.int64)) * self.rand_stride
            vx = np.zeros((t, kb * words), dtype=np.uint64)
            vz = np.zeros_like(vx)
            vflips = np.zeros((self.rec_stride, kb * words), dtype=np.uint64)
            inputs = _Run(vx, vz, vflips, r.draws, shifts, -self.first_record, (), None, None, r.start, words)
            _run_ops(self.local_body, inputs)
            # x[k + 1] = state after iteration k0 + k; x[0] = the state before the block.
            x = np.empty((kb + 1, self.width, words), dtype=np.uint64)
            x[0] = state
            x[1:] = np.concatenate([vx, vz]).reshape(self.width, kb, words).transpose(1, 0, 2)
            power, d = a, 1
            while d <= kb:
                x[d:] ^= _gf2_apply(power, x[:-d])
                d *= 2
                if d <= kb:
                    power = (power.astype(np.int64) @ power.astype(np.int64) & 1).astype(bool)
            if self.rec_stride:
                records = _gf2_apply(c, x[:-1])  # [kb, records, words]
                records ^= vflips.reshape(self.rec_stride, kb, words).transpose(1, 0, 2)
                lo = first + k0 * self.rec_stride
                r.flips[lo : lo + kb * self.rec_stride] = records.reshape(kb * self.rec_stride, words)
            state = x[kb]
        r.fx[self.qubits], r.fz[self.qubits] = state[:t], state[t:]


def _lanes_to_matrix(words: np.ndarray, m: int) -> np.ndarray:
    """Rows of lane-packed bits [rows, lanes] -> bool [rows, m] (bit j of a row = column j)."""
    bytes_per_row = 8 * words.shape[1]  # explicit: a body that writes no record has no rows
    bits = np.unpackbits(words.view(np.uint8).reshape(len(words), bytes_per_row), axis=1, bitorder="little")
    return bits[:, :m].astype(bool)


def _gf2_apply(matrix: np.ndarray, x: np.ndarray) -> np.ndarray:
    """matrix [r, m] over GF(2) times x [k, m, words] -> [k, r, words]."""
    out = np.zeros((x.shape[0], matrix.shape[0], x.shape[2]), dtype=np.uint64)
    for i in range(matrix.shape[0]):
        cols = np.flatnonzero(matrix[i])
        if len(cols) == 1:
            out[:, i] = x[:, cols[0]]
        elif len(cols):
            out[:, i] = np.bitwise_xor.reduce(x[:, cols], axis=1)
    return out


# ------------------------------------------------------------------------------- feedback
def controlled_pauli(program, row, depth, reference, flips, fx, fz, count) -> None:
    """XOR a classically controlled Pauli into the frames of the shots whose condition value
    differs from the reference's."""
    cond = program.conditions[int(row[COND])]
    refs = condition_refs(program, int(row[COND]), _Depth(depth))
    ref_value = bool(cond.table[assignment_index(reference[refs])])
    index = np.zeros(count * 64, dtype=np.int64)
    for i, r in enumerate(refs):
        index |= (unpack(flips[r]) ^ int(reference[r])) << i
    differs = pack((cond.table[index] != ref_value).astype(np.int64))
    pauli = _PAULI_OF_OP.get(int(row[OP]), 0)
    q = int(row[A])
    if pauli in (1, 2):
        fx[q] ^= differs
    if pauli in (2, 3):
        fz[q] ^= differs


class _Depth:
    def __init__(self, depth):
        self.depth_rec_shifts = depth


def confuse(program, row, rec_shift, rand_shift, key, reference, flips, start, count) -> None:
    """A confusion matrix on the records of one instruction, shot by shot."""
    confusion = program.confusions[int(row[AUX])]
    first = int(row[REC]) + rec_shift
    k = confusion.num_bits
    shots = np.arange(start * 64, (start + count) * 64, dtype=np.int64)
    recs = range(first, first + k)
    actual = [unpack(flips[r]) ^ int(reference[r]) for r in recs]
    true = np.zeros(len(shots), dtype=np.int64)
    for bits in actual:
        true = (true << 1) | bits
    got = confusion_values(key, confusion.matrix, int(row[RAND]) + rand_shift, shots, true)
    for i, r in enumerate(recs):
        flips[r] = pack(((got >> (k - 1 - i)) & 1) ^ int(reference[r]))


def unpack(words: np.ndarray) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little").astype(np.int64)


def pack(bits: np.ndarray) -> np.ndarray:
    return np.packbits(bits.astype(np.uint8), bitorder="little").view(np.uint64)
