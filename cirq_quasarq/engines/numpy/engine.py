"""The NumPy engine: the reference every other engine must match bit for bit.

Tableau mode walks the schedule with a TableauState (one shot); frame mode walks it with Pauli
frames for many shots at once. Both follow docs/engine-semantics.md."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...core import opcodes, rng
from ...core.draws import channel_masks, coin, confusion_values, noise_targets
from ...core.memory import available_memory
from ...core.parities import Parities, parities_shot_major
from ...core.paulis import spread
from ...core.program import AUX, COND, FLAG_INVERT, FLAGS, OP, RAND, REC, A, B, Program
from ...core.tableau import InverseTableau
from ...errors import OutOfMemoryError
from ...schedule import Schedule
from ...schedule.walk import assignment_index, condition_refs, walk
from ..base import Engine, TableauRun, gib
from .noise import NoisePlan
from .tableau import TableauState

Kind = opcodes.Kind
_ONE = np.uint64(1)
_M, _R, _MR = opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"]
_PAULI_OF_OP = {opcodes.CODE["X"]: 1, opcodes.CODE["Y"]: 2, opcodes.CODE["Z"]: 3}


class NumpyEngine(Engine):
    name = "numpy"

    def __init__(self, max_shot_words: int = 1 << 14, memory_fraction: float = 0.5):
        # Frame mode processes shots in chunks of at most this many 64-shot words, fewer when
        # memory is short; results do not depend on it.
        self.max_shot_words = max_shot_words
        self.memory_fraction = memory_fraction

    def _budget(self) -> int:
        return int(available_memory() * self.memory_fraction)

    # ------------------------------------------------------------------ tableau mode
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False, initial: Optional[InverseTableau] = None,
                    records: Optional[np.ndarray] = None) -> TableauRun:
        n = program.num_qubits
        need = 3 * 2 * (2 * n) * max(1, (n + 63) // 64) * 8  # X and Z, and a collapse's temporaries
        if need > self._budget():
            raise OutOfMemoryError(
                f"tableau mode on {n} qubits needs about {gib(need)} of host memory; "
                f"{gib(self._budget())} is available to the NumPy engine")
        state = TableauState(n) if initial is None else TableauState.from_inverse(initial)
        records = (np.zeros(program.num_records, dtype=np.uint8) if records is None
                   else _initial_records(records, program.num_records))
        ins = schedule.instructions
        word, lane = repetition // 64, np.uint64(repetition % 64)
        for step in walk(program, schedule):
            rows = ins[step.start : step.end]
            kind = opcodes.KIND[step.op]
            if rows[0, COND] >= 0:  # barrier runs hold a single instruction
                refs = condition_refs(program, int(rows[0, COND]), step)
                if not program.conditions[int(rows[0, COND])].table[assignment_index(records[refs])]:
                    continue
            if kind == Kind.UNITARY:
                if step.op != opcodes.CODE["I"]:
                    state.apply_unitary(step.op, rows[:, A], rows[:, B])
            elif kind in (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET):
                self._collapse_run(state, rows, step, records, key, repetition, reference)
            elif kind == Kind.NOISE:
                if reference:
                    continue
                for row in rows:
                    channel = program.channels[int(row[AUX])]
                    slot = np.array([row[RAND] + step.rand_shift])
                    xm, zm = channel_masks(key, channel, slot, word, 1)
                    for j, q in enumerate(noise_targets(program, row[None])[0]):
                        x = int((xm[j, 0, 0] >> lane) & _ONE)
                        z = int((zm[j, 0, 0] >> lane) & _ONE)
                        if x or z:
                            state.apply_pauli(int(q), {(1, 0): 1, (1, 1): 2, (0, 1): 3}[(x, z)])
            elif kind == Kind.RECORD_NOISE:
                if reference:
                    continue
                for row in rows:
                    self._confuse_tableau(program, row, step, records, key, repetition)
        return TableauRun(records=records, tableau=state.snapshot())

    def _collapse_run(self, state, rows, step, records, key, repetition, reference):
        qs = rows[:, A]
        deterministic = state.is_deterministic(qs)
        # Deterministic outcomes of the window, read together before any collapse.
        fixed = state.S[state.n + qs]
        for i, row in enumerate(rows):
            q = int(row[A])
            if deterministic[i]:
                outcome = int(fixed[i])
            else:
                flip = 0 if reference else coin(key, int(row[RAND]) + step.rand_shift, repetition)
                outcome = state.collapse(q, flip)
            if row[OP] in (_M, _MR):
                records[row[REC] + step.rec_shift] = outcome ^ (int(row[FLAGS]) & FLAG_INVERT)
            if row[OP] in (_R, _MR):
                state.force_zero(q)

    def _confuse_tableau(self, program, row, step, records, key, repetition):
        confusion = program.confusions[int(row[AUX])]
        first = int(row[REC]) + step.rec_shift
        k = confusion.num_bits
        true = int("".join(str(int(b)) for b in records[first : first + k]), 2)
        got = confusion_values(key, confusion.matrix, int(row[RAND]) + step.rand_shift,
                               np.array([repetition]), np.array([true]))[0]
        records[first : first + k] = [(got >> (k - 1 - i)) & 1 for i in range(k)]

    # ------------------------------------------------------------------ frame mode
    def sample_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int, parities: Optional[Parities] = None, shot_major: bool = False) -> np.ndarray:
        words = (shots + 63) // 64
        n, records = program.num_qubits, program.num_records
        rows = records if parities is None else parities.count
        budget = self._budget() - 8 * rows * words  # the packed result itself
        # Per 64-shot word of a chunk: frames (2n words), flips (records), the collapses' fresh
        # frames (random slots bound them), noise and temporaries.
        per_word = 8 * (4 * n + 2 * records + program.num_rand_slots + 64)
        chunk = min(self.max_shot_words, budget // per_word) if budget > 0 else 0
        if chunk < 1:
            raise OutOfMemoryError(
                f"sampling {shots} shots of {n} qubits and {records} records needs at least "
                f"{gib(8 * rows * words + per_word)} of host memory; {gib(self._budget())} "
                "is available to the NumPy engine (use fewer repetitions per call)")
        out = np.zeros((rows, words), dtype=np.uint64)
        for start in range(0, words, chunk):
            count = min(chunk, words - start)
            chunk_records = self._frames_chunk(program, schedule, key, reference, start, count)
            out[:, start : start + count] = chunk_records if parities is None else parities.reduce(chunk_records)
        return parities_shot_major(out, shots) if shot_major else out

    def _frames_chunk(self, program, schedule, key, reference, start, count):
        n = program.num_qubits
        fx = np.zeros((n, count), dtype=np.uint64)
        fz = rng.words_range(key, rng.Stream.FRAME_INIT, np.arange(n, dtype=np.uint64), 0, start, count)
        fz = fz.reshape(n, count)
        flips = np.zeros((program.num_records, count), dtype=np.uint64)
        noise = NoisePlan(key, program, schedule, start, count)
        ins = schedule.instructions
        for step in walk(program, schedule):
            rows = ins[step.start : step.end]
            kind = opcodes.KIND[step.op]
            if rows[0, COND] >= 0:
                self._controlled_frames(program, rows[0], step, reference, flips, fx, fz, start, count)
                continue
            if kind == Kind.UNITARY:
                self._frames_unitary(step.op, rows, fx, fz)
            elif kind in (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET):
                qs = rows[:, A]
                slots = (rows[:, RAND] + step.rand_shift).astype(np.uint64)
                fresh = noise.fresh(slots.astype(np.int64))
                measured = rows[:, OP] != _R
                if measured.any():
                    flips[rows[measured, REC] + step.rec_shift] = fx[qs[measured]]
                reset = rows[:, OP] != _M
                fx[qs[reset]] = 0
                fz[qs[reset]] = fresh[reset]
                fz[qs[~reset]] ^= fresh[~reset]
            elif kind == Kind.NOISE:
                noise.apply(program, rows, step.rand_shift, fx, fz)
            elif kind == Kind.RECORD_NOISE:
                for row in rows:
                    self._confuse_frames(program, row, step, key, reference, flips, start, count)
        return flips ^ spread(reference)[:, None]

    @staticmethod
    def _frames_unitary(code, rows, fx, fz):
        if code == opcodes.CODE["I"]:
            return
        m = opcodes.FRAME_MAPS[code]
        arity = opcodes.OPCODES[code].arity
        q0, q1 = rows[:, A], rows[:, B]
        bits = [fx[q0], fz[q0]] + ([fx[q1], fz[q1]] if arity == 2 else [])
        outs = []
        for o in range(2 * arity):
            acc = np.zeros_like(bits[0])
            for i in range(2 * arity):
                if m[o, i]:
                    acc ^= bits[i]
            outs.append(acc)
        fx[q0], fz[q0] = outs[0], outs[1]
        if arity == 2:
            fx[q1], fz[q1] = outs[2], outs[3]

    @staticmethod
    def _confuse_frames(program, row, step, key, reference, flips, start, count):
        confusion = program.confusions[int(row[AUX])]
        first = int(row[REC]) + step.rec_shift
        k = confusion.num_bits
        shots = np.arange(start * 64, (start + count) * 64, dtype=np.int64)
        recs = range(first, first + k)
        actual = [_unpack(flips[r]) ^ int(reference[r]) for r in recs]
        true = np.zeros(len(shots), dtype=np.int64)
        for bits in actual:
            true = (true << 1) | bits
        got = confusion_values(key, confusion.matrix, int(row[RAND]) + step.rand_shift, shots, true)
        for i, r in enumerate(recs):
            flips[r] = _pack(((got >> (k - 1 - i)) & 1) ^ int(reference[r]))

    @staticmethod
    def _controlled_frames(program, row, step, reference, flips, fx, fz, start, count):
        """A classically controlled Pauli: XOR it where the shot's condition differs from the
        reference's (frame mode runs only programs whose controlled ops are Paulis)."""
        cond = program.conditions[int(row[COND])]
        refs = condition_refs(program, int(row[COND]), step)
        ref_value = bool(cond.table[assignment_index(reference[refs])])
        index = np.zeros(count * 64, dtype=np.int64)
        for i, r in enumerate(refs):
            index |= (_unpack(flips[r]) ^ int(reference[r])) << i
        differs = _pack((cond.table[index] != ref_value).astype(np.int64))
        pauli = _PAULI_OF_OP.get(int(row[OP]), 0)
        q = int(row[A])
        if pauli in (1, 2):
            fx[q] ^= differs
        if pauli in (2, 3):
            fz[q] ^= differs


def _initial_records(records: np.ndarray, count: int) -> np.ndarray:
    records = np.asarray(records, dtype=np.uint8)
    if records.shape != (count,):
        raise ValueError(f"initial records of shape {records.shape} for a program of {count} records")
    return records.copy()


def _unpack(words: np.ndarray) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little").astype(np.int64)


def _pack(bits: np.ndarray) -> np.ndarray:
    return np.packbits(bits.astype(np.uint8), bitorder="little").view(np.uint64)
