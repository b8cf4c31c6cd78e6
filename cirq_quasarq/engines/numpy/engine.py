"""The NumPy engine: the reference every other engine must match bit for bit.

Tableau mode walks the schedule with a TableauState (one shot); frame mode walks it with Pauli
frames for many shots at once. Both follow docs/engine-semantics.md."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ...core import memory, native, opcodes, rng
from ...core.draws import channel_masks, coin, confusion_values, noise_targets
from ...core.parities import Parities, parities_shot_major
from ...core.paulis import spread
from ...core.program import AUX, COND, FLAG_INVERT, FLAGS, OP, RAND, REC, A, B, Program
from ...core.sizes import parse_bytes
from ...core.tableau import InverseTableau
from ...errors import OutOfMemoryError
from ...schedule import Schedule
from ...schedule.walk import LoopBlock, assignment_index, condition_refs, walk
from ..base import Engine, TableauRun, gib
from .. import measured_rows as measured
from . import linear, measured_rows
from .frames import confuse, controlled_pauli, frame_plan
from .noise import Draws, rows_inventory, walked_inventory
from .tableau import GateTable, TableauState

Kind = opcodes.Kind
_UNITARY, _NOISE, _RECORD_NOISE, _FRAME = int(Kind.UNITARY), int(Kind.NOISE), int(Kind.RECORD_NOISE), int(Kind.FRAME)
_COLLAPSES = (int(Kind.MEASURE), int(Kind.RESET), int(Kind.MEASURE_RESET))
_RIDER_ROWS_AS_INTS = 16  # a one-shot call's windows of up to this many collapses go row by row (_Riders)
_RIDES_OP = np.isin(opcodes.KIND, (_UNITARY, _NOISE) + _COLLAPSES)  # per opcode: what _Riders follow
_NO_SHIFT = np.zeros(1, dtype=np.int64)  # (riders: a program without loops shifts no slot)
_ONE = np.uint64(1)
_M, _R, _MR, _I = opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"], opcodes.CODE["I"]
_LAYER_WORDS = 64  # tableaux of up to 4096 qubits take their gates a layer at a time (measured crossover)
_PAULI_OF_OP = {opcodes.CODE["X"]: 1, opcodes.CODE["Y"]: 2, opcodes.CODE["Z"]: 3}


class NumpyEngine(Engine):
    name = "numpy"
    # A row-collapse costs about as much here as in the full run's window update, so the rows pay
    # below E = 4n (2-core machine: the paper's 5k circuit 0.09 s against 0.83 s full, a distance-25
    # surface code, E = 13n, 0.68 against 0.09 s): half of n keeps a margin for the backward sweep's
    # NumPy calls a run of gates.
    measured_rows_share = 0.5

    def __init__(self, max_shot_words: int = 1 << 14, memory_fraction: float = 0.5, fast_paths=True,
                 memory_limit=None, batch_windows=True, linear_frames=True, ride_frames=True, measured_rows=True):
        # Frame mode processes shots in chunks of at most this many 64-shot words, fewer when
        # memory is short; results do not depend on it. memory_limit (bytes, or "512M", "2G"):
        # plan as if the host had at most this much memory available (memory_fraction of it).
        self.max_shot_words = max_shot_words
        self.memory_fraction = memory_fraction
        self.memory_limit = None if memory_limit is None else parse_bytes(memory_limit)
        # True: frame mode runs the program's compiled frame plan (merged collapses, loops folded
        # where the cost model says so: frames.py) and the reference pass defers collapses and
        # finds loop cycles (_TableauPass); "always": loops folded wherever they can be; False:
        # the plain walks, run by run and iteration by iteration, the oracle of the others.
        self.fast_paths = fast_paths
        # True: a window of several collapses (up to 1/32 of the qubits) in tableau mode is
        # decided on its zrows and runs as one low-rank update of the tableau where the cost model
        # says it pays (TableauState.collapse_window); "always": every window of two or more
        # collapses takes the update (the tests of the GPU's algorithm); False: one collapse after
        # the other, the oracle of both.
        self.batch_windows = batch_windows
        # True: with fast paths, frame mode samples a program without feedback or confusion maps
        # through its GF(2) map from draws to outputs (linear.py) from its second call on, or from
        # the first where finding the map costs no more than the call; "always": wherever it
        # applies (tests); False: the frame plan, the map's oracle.
        self.linear_frames = linear_frames
        # True: a first call of up to 64 shots on a program of gates, collapses and Pauli noise
        # carries its frames through the reference run (sample_with_reference); False: the
        # reference run, then frame mode, its oracle.
        self.ride_frames = ride_frames
        # True: a reference run of at most measured_rows_share * n collapses makes its records from the
        # measured rows alone (measured_rows.py; no final tableau); "always": wherever it applies
        # (tests); False: the full tableau run, its oracle.
        self.measured_rows = measured_rows

    def _budget(self, need: int = None) -> Tuple[int, str]:
        """Bytes the engine plans with (memory_fraction of the tightest limit) and how they were
        found, for messages. A `need` within memory_fraction of memory.SMALL_REQUEST bytes, with no
        memory_limit, is granted without reading the limits."""
        if need is not None and need <= memory.SMALL_REQUEST * self.memory_fraction and self.memory_limit is None:
            return int(need), "a small request"
        free = memory.host_headroom()
        if self.memory_limit is not None and self.memory_limit < free.bytes:
            free = memory.Headroom(self.memory_limit, "the engine's memory_limit")
        return int(free.bytes * self.memory_fraction), f"memory_fraction {self.memory_fraction} of {free.describe()}"

    # ------------------------------------------------------------------ tableau mode
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False, initial: Optional[InverseTableau] = None,
                    records: Optional[np.ndarray] = None) -> TableauRun:
        state = self._tableau_state(program.num_qubits, initial)
        records = (np.zeros(program.num_records, dtype=np.uint8) if records is None
                   else _initial_records(records, program.num_records))
        self._walk_tableau(_TableauPass(self, program, schedule, key, repetition, reference, state, records))
        return TableauRun(records=records, tableau=state.snapshot())

    def reference_records(self, program: Program, schedule: Schedule) -> np.ndarray:
        if self._takes_measured_rows(program, schedule):
            n, count = program.num_qubits, measured.collapses(schedule)
            # the rows and the backward sweep's planes (X and Z each), and a collapse's temporaries
            need = 3 * 2 * 8 * (count * max(1, (n + 63) // 64) + n * max(1, (count + 63) // 64))
            budget, source = self._budget(need)
            if need > budget:
                raise OutOfMemoryError(
                    f"the reference run's measured rows ({count} collapses on {n} qubits) need about "
                    f"{gib(need)} of host memory; {gib(budget)} is available to the NumPy engine ({source})")
            return measured_rows.run_records(program, schedule)
        return super().reference_records(program, schedule)

    def _takes_measured_rows(self, program: Program, schedule: Schedule) -> bool:
        if self.measured_rows == "always":
            return measured.supports(program)
        return bool(self.measured_rows) and measured.pays(program, schedule, self.measured_rows_share)

    def _tableau_state(self, n: int, initial: Optional[InverseTableau] = None, riders: int = 0) -> TableauState:
        need = 3 * 2 * (2 * n + riders) * max(1, (n + 63) // 64) * 8  # X and Z, and a collapse's temporaries
        budget, source = self._budget(need)
        if need > budget:
            raise OutOfMemoryError(
                f"tableau mode on {n} qubits needs about {gib(need)} of host memory; "
                f"{gib(budget)} is available to the NumPy engine ({source})")
        return TableauState(n, riders) if initial is None else TableauState.from_inverse(initial)

    @staticmethod
    def _walk_tableau(run: "_TableauPass") -> None:
        # The phases' bit counts are summed as a float32 BLAS product (paulis.popcount_rows), and
        # OpenBLAS now and then leaves the invalid flag raised on exact results: one context for
        # the run, where one a count cost 1.5 us (about 3 ms of a 2000-qubit reference run)
        with np.errstate(invalid="ignore"):
            run.steps(walk(run.program, run.schedule, fold=run.folds))

    def sample_with_reference(self, program: Program, schedule: Schedule, key, shots: int, *,
                              first_word: int = 0):
        """The reference sample and `sample_frames` of a call of at most 64 shots from one tableau
        run, its frames carried as riders of the tableau (`_Riders`), where the program is gates,
        collapses and Pauli noise only; None elsewhere, and where the measured rows make the
        reference (`reference_records`): that and frame mode cost less than the whole tableau. A
        first call then makes neither the frame plan nor its pass."""
        if not (self.ride_frames and 0 < shots <= 64 and _Riders.apply(program)) \
                or self._takes_measured_rows(program, schedule):  # the reference alone costs less
            return None
        state = self._tableau_state(program.num_qubits, riders=shots)
        records = np.zeros(program.num_records, dtype=np.uint8)
        run = _TableauPass(self, program, schedule, key, 0, True, state, records)
        run.riders = _Riders(program, state, key, int(first_word))
        self._walk_tableau(run)
        return records, (run.riders.flips ^ spread(records))[:, None]

    def _collapse_run(self, state, rows, step, records, key, repetition, reference):
        qs = rows[:, A]
        # A window's plan runs its collapses on its k zrows first (k / 2n of the one-by-one work),
        # which only a window update could win back: not for windows over 1/32 of the qubits (a
        # final measurement of every qubit), where the update does not pay (_window_pays; on a
        # 2-core CPU the plan then cost up to 1.5x the one-by-one path at k = n/8).
        always = self.batch_windows == "always"
        if self.batch_windows and 1 < len(rows) and (always or len(rows) <= max(2, state.n // 32)):
            coins = [0 if reference else coin(key, int(slot) + step.rand_shift, repetition) for slot in rows[:, RAND]]
            outcomes = state.collapse_window(qs.tolist(), coins, (rows[:, OP] != _M).tolist(), always=always)
            for row, outcome in zip(rows, outcomes):
                if row[OP] in (_M, _MR):
                    records[row[REC] + step.rec_shift] = outcome ^ (int(row[FLAGS]) & FLAG_INVERT)
            return
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
                      shots: int, parities: Optional[Parities] = None, shot_major: bool = False, *,
                      first_word: int = 0) -> np.ndarray:
        words = (shots + 63) // 64
        first_word = int(first_word)
        if first_word < 0:
            raise ValueError(f"first_word must be >= 0, got {first_word}")
        n, records = program.num_qubits, program.num_records
        rows = records if parities is None else parities.count
        # Per 64-shot word of a chunk: frames (2n words), flips (records), the collapses' fresh
        # frames (random slots bound them), noise and temporaries.
        per_word = 8 * (4 * n + 2 * records + program.num_rand_slots + 64)
        small = 8 * rows * words + per_word * min(words, self.max_shot_words)
        available, source = self._budget(small)
        budget = available - 8 * rows * words  # the packed result itself
        chunk = min(self.max_shot_words, budget // per_word) if budget > 0 else 0
        if chunk < 1:
            raise OutOfMemoryError(
                f"sampling {shots} shots of {n} qubits and {records} records needs at least "
                f"{gib(8 * rows * words + per_word)} of host memory; {gib(available)} "
                f"is available to the NumPy engine ({source}; use fewer repetitions per call)")
        out = np.zeros((rows, words), dtype=np.uint64)
        mapped = self._linear_map(program, schedule, parities, words)
        constant = None if mapped is None else mapped.constant(reference, parities)
        for start in range(0, words, chunk):
            count = min(chunk, words - start)
            # Random streams are keyed by the absolute word; the output stays local.
            if mapped is not None:
                out[:, start : start + count] = mapped.sample(program, key, first_word + start, count, constant)
                continue
            chunk_records = self._frames_chunk(program, schedule, key, reference, first_word + start, count)
            out[:, start : start + count] = chunk_records if parities is None else parities.reduce(chunk_records)
        return parities_shot_major(out, shots) if shot_major else out

    def _linear_map(self, program, schedule, parities, words: int):
        """The program's linear map (linear.py) where this call should use it, else None."""
        if not (self.linear_frames and self.fast_paths and linear.applies(program)):
            return None
        plan = frame_plan(program, schedule, self.fast_paths)
        if self.linear_frames != "always":
            count = min(words, self.max_shot_words)
            # the map saves the plan's per-update cost; where the per-word work dominates, NumPy's map
            # cannot win (its lanes' scatter grows with the words as the plan's updates do); the
            # compiled scatter costs a few nanoseconds a lane (core/native.py)
            per_word = plan.seconds(count) > 2 * plan.seconds(0) and native.compiled() is None
            if per_word or linear.LinearFrames.cost(program, plan) > linear.MAX_MAP_BYTES:
                return None
            calls = program.derived.get("frame_calls", 0)
            program.derived["frame_calls"] = calls + 1
            # finding the map is about a plan run over one word per 64 inputs
            if not calls and (linear.LinearFrames.num_inputs(program, plan) + 63) // 64 > words:
                return None
            mapped = linear.linear_frames(program, plan, parities)
            return mapped if mapped.seconds(count) < plan.seconds(count) else None  # dense gauge reach: the plan
        return linear.linear_frames(program, plan, parities)

    def _frames_chunk(self, program, schedule, key, reference, start, count):
        n = program.num_qubits
        fx = np.zeros((n, count), dtype=np.uint64)
        fz = rng.words_range(key, rng.Stream.FRAME_INIT, np.arange(n, dtype=np.uint64), 0, start, count)
        fz = fz.reshape(n, count)
        flips = np.zeros((program.num_records, count), dtype=np.uint64)
        if self.fast_paths:
            plan = frame_plan(program, schedule, self.fast_paths)
            draws = Draws(key, program, plan.inventory(), start, count)
            plan.run(fx, fz, flips, draws, reference, key, start, count)
        else:
            self._frames_walked(program, schedule, key, reference, start, count, fx, fz, flips)
        return flips ^ spread(reference)[:, None]

    @staticmethod
    def _frames_walked(program, schedule, key, reference, start, count, fx, fz, flips):
        """Frame mode by walking the schedule run by run: the oracle of the compiled plan."""
        draws = Draws(key, program, walked_inventory(program, schedule), start, count)
        ins = schedule.instructions
        for step in walk(program, schedule):
            rows = ins[step.start : step.end]
            kind = opcodes.KIND[step.op]
            shifts = np.array([step.rand_shift], dtype=np.int64)
            if rows[0, COND] >= 0:
                controlled_pauli(program, rows[0], step.depth_rec_shifts, reference, flips, fx, fz, count)
                continue
            if kind == Kind.UNITARY or kind == Kind.FRAME:
                _frames_unitary(step.op, rows, fx, fz)
            elif kind in (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET):
                qs = rows[:, A]
                fresh = draws.fresh(rows[:, RAND].astype(np.int64), shifts)
                measured = rows[:, OP] != _R
                if measured.any():
                    flips[rows[measured, REC] + step.rec_shift] = fx[qs[measured]]
                reset = rows[:, OP] != _M
                fx[qs[reset]] = 0
                fz[qs[reset]] = fresh[reset]
                fz[qs[~reset]] ^= fresh[~reset]
            elif kind == Kind.NOISE:
                for aux in np.unique(rows[:, AUX]):
                    sel = rows[rows[:, AUX] == aux]
                    draws.noise(int(aux), sel[:, RAND].astype(np.int64), noise_targets(program, sel), shifts, fx, fz)
            elif kind == Kind.RECORD_NOISE:
                for row in rows:
                    confuse(program, row, step.rec_shift, step.rand_shift, key, reference, flips, start, count)


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


class _QubitMarks:
    """A set of qubits as stamps in an array: adding or testing a run's qubits (its rows' A, or A
    and B: -1, a one-qubit row's B, is never in the set) is a fancy index and a reduction, where a
    Python set took a conversion of every qubit to an int (a tenth of a 2000-qubit reference run)."""

    def __init__(self, n: int):
        self.stamp = np.zeros(n + 1, dtype=np.int64)  # entry n: the -1 of a B column, kept at 0
        self.now, self.empty = 1, True

    def clear(self) -> None:
        if not self.empty:
            self.now, self.empty = self.now + 1, True

    def meets(self, qubits: np.ndarray) -> bool:
        return not self.empty and int(self.stamp[qubits].max()) == self.now  # stamps never pass `now`

    def add(self, qubits: np.ndarray) -> None:
        self.stamp[qubits] = self.now
        self.stamp[-1] = 0
        self.empty = False


class _TableauPass:
    """One tableau-mode walk.

    The reference pass (no coins, no noise, only the records kept) takes two liberties that leave
    every record as it was: a collapse waits until a gate touches its qubit (collapses and gates on
    other qubits commute, and a random outcome is 0 either way), so interleaved measurements become
    one window; and a loop whose body reads no records runs until its tableau repeats (Brent's
    cycle finding, exact comparisons), after which the period's records are copied for the
    iterations left: a loop costs its transient plus one period."""

    def __init__(self, engine, program, schedule, key, repetition, reference, state, records):
        self.engine, self.program, self.schedule, self.key = engine, program, schedule, key
        self.repetition, self.reference, self.state, self.records = repetition, reference, state, records
        self.word, self.lane = repetition // 64, np.uint64(repetition % 64)
        self.fast = reference and bool(engine.fast_paths)
        self.pending: list = []  # deferred collapse rows (reference pass)
        self.pending_qubits = _QubitMarks(program.num_qubits)
        self.pending_step = None
        # Small tableaux: consecutive gates on disjoint qubits are applied as one layer (the cost
        # there is per array operation, not per word); fast_paths=False applies them run by run.
        self.layers = bool(engine.fast_paths) and state.words <= _LAYER_WORDS
        self.layer: list = []  # (start, end) of the buffered gate runs
        self.layer_qubits = _QubitMarks(program.num_qubits)
        self.qubits = _row_qubits(program, schedule)
        self.riders: Optional[_Riders] = None  # frames carried through a reference run (sample_with_reference)

    def collapse(self, rows: np.ndarray, step) -> None:
        self.engine._collapse_run(self.state, rows, step, self.records, self.key, self.repetition, self.reference)
        if self.riders is not None:
            self.riders.collapsed(rows, step)

    def flush_layer(self) -> None:
        if not self.layer:
            return
        derived = self.program.derived
        table = derived.get("numpy_gates")
        if table is None or table.instructions is not self.schedule.instructions:
            table = derived["numpy_gates"] = GateTable(self.state.n, self.schedule.instructions)
        layer = self.layer
        adjoining = all(lo == hi for (_, hi), (lo, _) in zip(layer, layer[1:]))  # one range of rows
        plan = table.plan(layer[0][0], layer[-1][1]) if adjoining else table.plan_of(layer)
        self.layer = []
        self.layer_qubits.clear()
        self.state.apply_layer(plan)

    def flush(self) -> None:
        self.flush_layer()
        self.flush_collapses()

    def flush_collapses(self) -> None:
        if self.pending:
            rows = np.concatenate(self.pending)
            self.pending = []
            self.pending_qubits.clear()
            self.collapse(rows, self.pending_step)

    def folds(self, block) -> bool:
        return (self.fast and block.loop.count > 2 and block.loop.rec_stride > 0
                and not (block.instructions()[:, COND] >= 0).any())

    def steps(self, items) -> None:
        for item in items:
            if isinstance(item, LoopBlock):
                self.flush()
                self.loop(item)
            else:
                self.step(item)
        self.flush()

    def loop(self, block) -> None:
        state, count = self.state, block.loop.count
        stride = block.loop.rec_stride
        saved = state.copy()
        self.steps(block.iteration(0))
        done, power, period = 1, 1, 1
        while done < count:
            if state.equals(saved):
                break
            if power == period:  # a new checkpoint, twice as far away
                saved, power, period = state.copy(), 2 * power, 0
            self.steps(block.iteration(done))
            done += 1
            period += 1
        else:
            return
        # The state after `done` iterations equals the state `period` iterations earlier: every
        # later iteration repeats the records of the one `period` before it.
        rows = block.instructions()
        first = int(rows[rows[:, REC] >= 0, REC].min()) + block.rec_shift
        lo, hi = first + (done - period) * stride, first + count * stride
        cycle = self.records[lo : lo + period * stride].copy()
        self.records[lo:hi] = np.resize(cycle, hi - lo)
        for k in range(done, done + (count - done) % period):
            self.steps(block.iteration(k))  # to the final state; the records it rewrites are equal

    def step(self, step) -> None:
        program, state, records = self.program, self.state, self.records
        rows = self.schedule.instructions[step.start : step.end]
        kind = int(opcodes.KIND[step.op])
        if kind == _FRAME:  # the identity on the state (a frame parity)
            return
        gate = kind == _UNITARY and rows[0, COND] < 0
        if self.layers and not gate:
            self.flush_layer()  # whatever is not a gate sees every gate before it applied
        if self.fast:
            if kind in _COLLAPSES and rows[0, COND] < 0:
                qs = self.qubits[step.start : step.end, 0]
                if self.pending and (self.pending_qubits.meets(qs) or (step.rec_shift, step.rand_shift)
                                     != (self.pending_step.rec_shift, self.pending_step.rand_shift)):
                    self.flush()  # a shared qubit, or another loop iteration's slots
                self.pending.append(rows)
                self.pending_qubits.add(qs)
                self.pending_step = step
                return
            if self.pending and (rows[0, COND] >= 0 or opcodes.ARITY[step.op] == 0  # E: qubits in ext_qubits
                                 or self.pending_qubits.meets(self.qubits[step.start : step.end])):
                # The buffered layer's gates are on other qubits (each was checked against the
                # pending ones): the collapses go first, and the layer keeps growing (a circuit's
                # layer of gates is not cut in two by the measurement before it).
                self.flush_collapses()
        if rows[0, COND] >= 0:  # barrier runs hold a single instruction
            refs = condition_refs(program, int(rows[0, COND]), step)
            if not program.conditions[int(rows[0, COND])].table[assignment_index(records[refs])]:
                return
        if kind == _UNITARY:
            if step.op == _I:
                return
            if self.layers and gate:
                qubits = self.qubits[step.start : step.end]
                if self.layer_qubits.meets(qubits):
                    self.flush_layer()
                self.layer.append((step.start, step.end))
                self.layer_qubits.add(qubits)
                return
            state.apply_unitary(step.op, rows[:, A], rows[:, B])
        elif kind in _COLLAPSES:
            self.collapse(rows, step)
        elif kind == _NOISE:
            if self.reference:
                if self.riders is not None:
                    self.riders.noise(rows)
                return
            for row in rows:
                channel = program.channels[int(row[AUX])]
                slot = np.array([row[RAND] + step.rand_shift])
                xm, zm = channel_masks(self.key, channel, slot, self.word, 1)
                for j, q in enumerate(noise_targets(program, row[None])[0]):
                    x = int((xm[j, 0, 0] >> self.lane) & _ONE)
                    z = int((zm[j, 0, 0] >> self.lane) & _ONE)
                    if x or z:
                        state.apply_pauli(int(q), {(1, 0): 1, (1, 1): 2, (0, 1): 3}[(x, z)])
        elif kind == _RECORD_NOISE:
            if self.reference:
                return
            for row in rows:
                self.engine._confuse_tableau(program, row, step, records, self.key, self.repetition)


class _Riders:
    """Frame mode's frames of one shot word, carried through the reference run as rows of its
    tableau (TableauState's riders): frame F_l of shot 64 * word + l as the row T⁻¹ F_l T.

    A gate G takes T to G T and F_l to G F_l G†, so the row stays as it is: gates never write
    riders. A collapse changes the generators (T to T C) and no frame, so every row goes to
    C⁻¹ row C, the riders with the rest: the tableau's collapse passes do that. So after the
    collapses of a window (frames' updates on distinct qubits commute), F_l's X bit on a collapsed
    q, the flip frame mode records, is whether the rider anticommutes with zrow[q] = T⁻¹ Z_q T;
    frame mode's fresh Z on q multiplies the rider by zrow[q], and a reset's clearing of the X bit
    by xrow[q] where it was set; a noise hit's Pauli P on q by T⁻¹ P T (xrow[q], zrow[q]). Frames
    start as Z on the qubits frame mode draws (FRAME_INIT) and T as the identity, so the riders
    start as those Z. Signs are of no frame's concern."""

    def __init__(self, program: Program, state: TableauState, key, word: int):
        n = state.n
        self.state = state
        lanes = len(state.S) - 2 * n
        self.lanes = np.arange(lanes, dtype=np.uint64)
        init = rng.words_range(key, rng.Stream.FRAME_INIT, np.arange(n, dtype=np.uint64), 0, word, 1).reshape(n)
        bits = ((init[None, :] >> self.lanes[:, None]) & _ONE).astype(np.uint8)  # [lanes, n]
        packed = np.zeros((lanes, 8 * state.words), dtype=np.uint8)
        packed[:, : (n + 7) // 8] = np.packbits(bits, axis=1, bitorder="little")
        state.Z[2 * n :] = packed.view("<u8")
        self.flips = np.zeros(program.num_records, dtype=np.uint64)  # bit l: shot l's flip
        # every collapse's FRAME_MEASURE word and every channel's hits, as frame mode draws them,
        # in one batch (a draw a window cost about 0.1 ms: a pass of Philox's array operations)
        self.draws = Draws(key, program, rows_inventory(program), word, 1)
        self.fresh = np.zeros(max(program.num_rand_slots, 1), dtype=np.uint64)  # by slot: a gather a window
        self.fresh[self.draws.collapse_slots] = self.draws.collapse_words[:, 0]
        self.program = program
        self.frames = None  # (fx, fz) [n, 1], zero between uses: where a run of noise leaves its hits

    @staticmethod
    def apply(program: Program) -> bool:
        """Whether the program is gates, collapses and Pauli noise only (no confusion, classical
        control or loop: frame mode reads records for them, or shifts slots)."""
        ins = program.instructions
        return not (program.confusions or program.conditions or program.loops
                    or (ins[:, COND] >= 0).any() or not _RIDES_OP[ins[:, OP]].all())

    def collapsed(self, rows: np.ndarray, step) -> None:
        """After the collapses of `rows` (distinct qubits): the flips of the measured ones, then
        the frames' fresh Z (a reset's fresh frame) on their qubits: a few dozen array operations
        a window, whatever its width."""
        state, n = self.state, self.state.n
        if len(self.lanes) == 1 and len(rows) <= _RIDER_ROWS_AS_INTS:
            return self._collapsed_one(rows, step)
        qs = rows[:, A].astype(np.int64)
        m = len(qs)
        paulis = state.T[:, np.concatenate([qs, n + qs])]  # [2, 2m, W]: xrow[q] for each q, then zrow[q]
        riders = state.T[:, 2 * n :]  # [2, lanes, W]
        # per lane and row whether the rider anticommutes with it (a block of rows at a time)
        odd = np.empty((len(self.lanes), 2 * m), dtype=np.uint64)
        step_rows = max(1, (1 << 18) // (len(self.lanes) * state.words))
        for lo in range(0, 2 * m, step_rows):
            part = paulis[:, lo : lo + step_rows]
            both = (riders[0][:, None] & part[1][None]) ^ (riders[1][:, None] & part[0][None])
            np.sum(np.bitwise_count(both), axis=2, dtype=np.uint64, out=odd[:, lo : lo + step_rows])
        odd &= _ONE
        x_bit = odd[:, m:]  # F_l's X on q: whether it anticommutes with zrow[q]
        ops = rows[:, OP]
        measured = ops != _R
        if measured.any():
            self.flips[rows[measured, REC] + step.rec_shift] = np.bitwise_or.reduce(
                x_bit[:, measured] << self.lanes[:, None], axis=0)
        # times xrow[q] / zrow[q]: M: F_l Z_q^fresh; R and MR: F_l X_q^(its X bit), then Z_q where
        # its Z bit (its anticommutation with xrow[q]) is not the fresh one
        times = np.zeros_like(odd)
        times[:, m:] = (self._fresh(rows)[None, :] >> self.lanes[:, None]) & _ONE
        reset = ops != _M
        if reset.any():
            times[:, :m][:, reset] = x_bit[:, reset]
            times[:, m:][:, reset] ^= odd[:, :m][:, reset]
        self._multiply(paulis, times)

    def _multiply(self, paulis: np.ndarray, times: np.ndarray) -> None:
        """Each rider times the rows of `paulis` ([2, k, W]) where its row of `times` ([lanes, k]) is 1."""
        riders = self.state.T[:, 2 * self.state.n :]
        for lane in range(len(self.lanes)):
            by = np.flatnonzero(times[lane])
            if len(by):
                riders[:, lane] ^= np.bitwise_xor.reduce(paulis[:, by], axis=1)

    def _fresh(self, rows: np.ndarray) -> np.ndarray:
        """The FRAME_MEASURE words of collapse rows (no loops: no slot shifts)."""
        return self.fresh[rows[:, RAND]]

    def noise(self, rows: np.ndarray) -> None:
        """A run of noise rows: frame mode XORs each shot's Pauli P on q into its frame, so the
        rider is multiplied by T⁻¹ P T, xrow[q] for an X part and zrow[q] for a Z part."""
        state, n = self.state, self.state.n
        if self.frames is None:
            self.frames = (np.zeros((n, 1), dtype=np.uint64), np.zeros((n, 1), dtype=np.uint64))
        fx, fz = self.frames
        targets = []
        for aux in np.unique(rows[:, AUX]).tolist():
            run = rows[rows[:, AUX] == aux]
            qs = noise_targets(self.program, run)
            self.draws.noise(aux, run[:, RAND].astype(np.int64), qs, _NO_SHIFT, fx, fz)
            targets.append(qs.reshape(-1))
        qs = np.unique(np.concatenate(targets)).astype(np.int64)
        # per lane, the qubits its Pauli has an X part on, then those with a Z part
        hits = (np.concatenate([fx[qs, 0], fz[qs, 0]])[None, :] >> self.lanes[:, None]) & _ONE
        fx[qs], fz[qs] = 0, 0
        self._multiply(state.T[:, np.concatenate([qs, n + qs])], hits)

    def _collapsed_one(self, rows: np.ndarray, step) -> None:
        """`collapsed` for one shot and a few rows, the rows as Python integers (a window of one
        collapse took some twenty array operations, about 70 us)."""
        state, n = self.state, self.state.n
        rx, rz = state.row_ints(2 * n)
        fresh = self._fresh(rows).tolist()
        for (q, op, rec), fresh_bit in zip(rows[:, [A, OP, REC]].tolist(), fresh):
            zx, zz = state.row_ints(n + q)
            x_bit = ((rx & zz) ^ (rz & zx)).bit_count() & 1  # see `collapsed`
            if op != _R:
                self.flips[rec + step.rec_shift] = x_bit
            times_z = fresh_bit & 1
            if op != _M:
                xx, xz = state.row_ints(q)
                times_z ^= ((rx & xz) ^ (rz & xx)).bit_count() & 1
                if x_bit:
                    rx, rz = rx ^ xx, rz ^ xz
            if times_z:
                rx, rz = rx ^ zx, rz ^ zz
        state.set_row_ints(2 * n, rx, rz)


def _row_qubits(program, schedule) -> np.ndarray:
    """The schedule's A and B columns as one contiguous intp array, made once a program: the qubit
    marks take its slices, where a fancy index with the instructions' strided int32 columns cost
    twice (a test) to five times (a mark) as much."""
    kept = program.derived.get("numpy_row_qubits")
    if kept is None or kept[0] is not schedule.instructions:
        qubits = np.ascontiguousarray(schedule.instructions[:, A : B + 1], dtype=np.intp)
        kept = program.derived["numpy_row_qubits"] = (schedule.instructions, qubits)
    return kept[1]


def _initial_records(records: np.ndarray, count: int) -> np.ndarray:
    records = np.asarray(records, dtype=np.uint8)
    if records.shape != (count,):
        raise ValueError(f"initial records of shape {records.shape} for a program of {count} records")
    return records.copy()

