"""Any range of one call's shots, in Stim's layouts, without Cirq: what the `quasarq` command and
the sinter plug-in sample through.

The engines key every random draw by the absolute shot word (`Engine.sample_frames(...,
first_word=w)`), so shots [a, b) of a call with key `key` are the same bits however the call is
cut into batches: `Shots(engine, program, what).sample(key, a, b - a)` gives exactly what
`QuasarqSimulator.sample_measurements` / `sample_detectors(..., bit_packed=True)` give for those
shots when their simulator draws `key` (`draw_key`). A batch that starts inside a 64-shot word
samples that word's earlier shots too and drops them. Programs with classically controlled
non-Pauli gates whose shot branching does not split exactly (`engines.branching.splits_exactly`)
give correctly distributed shots when cut, but not the bits of one call.
"""

from __future__ import annotations

import itertools
import queue
import threading
from typing import Optional, Tuple

import numpy as np

from .core import rng
from .core.parities import Parities, parities_shot_major
from .core.program import NUM_FIELDS, Annotation, Program
from .engines import Engine
from .engines.base import REFERENCE_KEY
from .errors import NotStreamable
from .results.records import shot_major
from .schedule import Schedule, Scheduler, joined, schedule

WHAT = ("measurements", "detectors")


def draw_key(prng):
    """A Philox key from a simulator's random state (numpy RandomState or Generator; each call a
    fresh one): one per sampling call."""
    if isinstance(prng, np.random.Generator):
        hi, lo = (int(v) for v in prng.integers(0, 2**32, size=2, dtype=np.int64))
    else:
        hi, lo = int(prng.randint(0, 2**32, dtype=np.int64)), int(prng.randint(0, 2**32, dtype=np.int64))
    return rng.make_key(hi << 32 | lo)


def prepared(program: Program) -> Schedule:
    """The program's schedule, made once and kept with the program."""
    sched = program.derived.get("schedule")
    if sched is None:
        sched = program.derived["schedule"] = schedule(program)
    return sched


def reference(engine: Engine, program: Program) -> np.ndarray:
    """The program's reference sample (every random outcome 0), made once and kept with it."""
    ref = program.derived.get("reference")
    if ref is None:
        ref = program.derived["reference"] = engine.reference_records(program, prepared(program))
    return ref


def sample_frames(engine: Engine, program: Program, key, shots: int, *, shot_major: bool = False) -> np.ndarray:
    """`engine.sample_frames` of a call's records, with the program's reference: where the program
    has none yet, from one run that makes both if the engine can (`Engine.sample_with_reference`:
    a first call of a few shots), and the reference is kept."""
    if "reference" not in program.derived:  # (its result memory made ready while the reference is made)
        engine.expect_samples(program.num_records, shots, shot_major)
    sched = prepared(program)
    if "reference" not in program.derived:
        both = engine.sample_with_reference(program, sched, key, shots)
        if both is not None:
            program.derived["reference"], packed = both
            return parities_shot_major(packed, shots) if shot_major else packed
    return engine.sample_frames(program, sched, key, reference(engine, program), shots, shot_major=shot_major)


# A stim.Circuit of at least this many qubits, new to the process, of unitaries and collapses only,
# compiles in pieces whose windows an engine streaming them (`Engine.streams_pieces`) runs while the
# next compiles: the compile and the device's reference run overlap. Below it the pieces cost the
# host at least what they hide. With the compile in a process of its own (where the system forks:
# `stim_printing.forked_compile_available`), H100, the paper's circuits, first calls: 10k 0.11-0.15
# against 0.23-0.29 s whole, 30k 0.33-0.36 against 0.48-0.49 s, 5k level (0.078-0.099 against
# 0.084-0.124 s). With the compile in a thread (STREAM_MIN_QUBITS_UNFORKED): 0.56 s of 2.7 s saved
# at 100k, level at 30k, 5k and 10k in pieces 150 / 219 ms against 100 / 186 ms whole
# (docs/benchmarks-first-call.md).
STREAM_MIN_QUBITS = 10_000
STREAM_MIN_QUBITS_UNFORKED = 50_000
STREAM_PIECES = 12
# From this many qubits a streamed compile comes in twice as many pieces: the engine's work on the
# last one, which nothing overlaps, halves, while each piece's fixed cost on the host stays small
# beside its rows. H100, the paper's circuit, first calls: 100k 0.94-1.04 s in 24 pieces (the first
# ones smaller; those alone gained nothing) against 1.01-1.08 s in 12, then 0.99-1.04 against
# 1.08-1.34 s; 10k 0.16-0.20 against 0.13-0.17 s, 30k level (docs/benchmarks-first-call.md).
STREAM_FINER_QUBITS = 50_000
# From STREAM_FINER_QUBITS on, the first pieces after the first are halves, one a printer of the
# compile's process (`stim_circuit._piece_bounds`' ramp): the device's work bounds those calls, and it
# waited for the second piece. H100, 100k qubits: the second piece came 73-81 ms into the compile,
# where it had come at 140-150 ms. Below, the host's work a piece bounds the call, and more pieces
# cost more: 10k with the ramp (and sorting threads, since dropped) 0.15-0.23 against 0.12-0.18 s.
STREAM_RAMP = 4
# Where the system does not fork (StreamedCompile's `forked`): below this many qubits the host's work
# bounds a streamed call, and the compile runs in a thread of its own (StreamedCompile's `ahead`).
# Above it the device's work does (it grows as n^2, the host's as n), and the thread's competition
# for the interpreter lock only delays the engine's enqueues: H100, the paper's circuits, 100k qubits
# 1.77-1.96 -> 1.54-1.67 s, 180k 4.51-4.66 -> 4.58-4.83 s.
AHEAD_MAX_QUBITS = 150_000


def compiled_with_reference(engine: Engine, circuit) -> Program:
    """`compile_stim(circuit)` for a call that needs the reference sample: a large circuit new to
    the process (STREAM_MIN_QUBITS, or STREAM_MIN_QUBITS_UNFORKED where the compile cannot run in a
    process of its own) compiles in pieces while the engine runs them, and comes back
    with its schedule (`prepared`) and reference sample (`reference`) already made. Other circuits,
    engines, and circuits the pieces do not take (noise, loops, annotations: errors.NotStreamable)
    compile whole, their reference made by `reference` when asked. The same
    Program, schedule and reference either way."""
    from .compiler.stim_circuit import cached_stim, compile_new_stim
    from .compiler.stim_memory import check_soon
    from .compiler.stim_printing import forked_compile_available

    if engine.works_ahead:  # (a process's first large circuit then finds it done)
        check_soon()
    program = cached_stim(circuit)
    if program is not None:
        return program
    num_qubits = None  # counted once a call (a pass over every target in Stim: 30 ms at 180k qubits)
    if engine.streams_pieces and len(circuit) >= 2 * STREAM_PIECES and not (circuit.num_detectors
                                                                            or circuit.num_observables):
        num_qubits = circuit.num_qubits
        if num_qubits >= (STREAM_MIN_QUBITS if forked_compile_available() else STREAM_MIN_QUBITS_UNFORKED) \
                and not _measured_rows_likely(engine, circuit, num_qubits):
            try:
                return _streamed(engine, circuit, num_qubits)
            except NotStreamable:
                pass
    return compile_new_stim(circuit, num_qubits)


# Stim's names of the instructions that reset a qubit (the GPU's measured rows take none).
_RESET_NAMES = frozenset(("R", "RX", "RY", "RZ", "MR", "MRX", "MRY", "MRZ"))
# The first instructions `_measured_rows_likely` reads (a coordinate or TICK may come before the resets).
_LEADING = 4


def _measured_rows_likely(engine: Engine, circuit, num_qubits: int) -> bool:
    """Whether the engine's reference of `circuit` will come from its measured rows
    (engines/measured_rows.py: at most `measured_rows_share` * n collapses, no reset, no loop),
    which cost a fraction of the full run that streaming overlaps with the compile: then the
    circuit compiles whole. Read off the counts Stim keeps and the circuit's first
    `_LEADING` instructions, where a circuit that resets its qubits does so most often: finding a
    reset or loop anywhere else takes a pass over every target (Stim copies an instruction's
    targets to name it), 35 ms of a 0.6 s first call at 100k qubits (H200 host). A circuit that
    resets or loops only later compiles whole too, and its reference takes the full run."""
    if not getattr(engine, "measured_rows", False) or \
            circuit.num_measurements > getattr(engine, "measured_rows_share", 0.0) * num_qubits:
        return False
    return not any(instruction.name in _RESET_NAMES or instruction.name == "REPEAT"
                   for instruction in itertools.islice(circuit, _LEADING))


class StreamedCompile:
    """A circuit's compile in pieces, scheduled as they come (a Scheduler: the windows no later row
    can join): iterating gives (Program, Schedule) of each run of windows as soon as it is final;
    once the pieces are out, `whole()` is the Program and its schedule (joined from the pieces').

    With `forked` (None: where the system forks, `stim_printing.forked_compile_available`), the
    compile runs in a process of its own (`stim_printing.ForkedCompile`), ahead of the schedule and
    the engine's work here, without sharing this process's interpreter lock. Otherwise, with
    `ahead`, in a thread of its own: the compile and the schedule are mostly NumPy on large arrays,
    which lets go of the lock, so they overlap (the paper's circuit at 100k qubits on a 2-core CPU:
    the pieces compiled and scheduled in 1.0-1.1 s, against 1.6-1.8 s one after the other)."""

    def __init__(self, circuit, pieces: Optional[int] = None, ahead: bool = True, num_qubits: Optional[int] = None,
                 forked: Optional[bool] = None):
        from .compiler.stim_circuit import stim_pieces
        from .compiler.stim_printing import ForkedCompile, forked_compile_available

        self.num_qubits = circuit.num_qubits if num_qubits is None else num_qubits
        self.num_records = circuit.num_measurements
        self._circuit = circuit
        self.kept = None  # a copy of the circuit as compiled (for the compile cache), once the pieces are out
        finer = self.num_qubits >= STREAM_FINER_QUBITS
        if pieces is None:
            pieces = 2 * STREAM_PIECES if finer else STREAM_PIECES
        ramp = STREAM_RAMP if finer else 0
        if forked is None:
            forked = forked_compile_available()
        self._compiling = None
        if forked:
            try:
                self._compiling = ForkedCompile(lambda: stim_pieces(circuit, pieces, self.num_qubits, ramp=ramp))
            except OSError:  # no process to be had: a thread, or in line
                pass
        if self._compiling is None:
            compiling = stim_pieces(circuit, pieces, self.num_qubits, ramp=ramp)
            self._compiling = _Ahead(compiling) if ahead else compiling
        self._scheduler = Scheduler(self.num_qubits, np.zeros(0, dtype=np.int32), 0)
        self._schedules: list = []
        self.program: Optional[Program] = None  # the whole, once compiled

    def __iter__(self):
        try:
            while self.program is None:
                try:
                    rows, layered_from = next(self._compiling)
                    sched = self._scheduler.add(rows, layered_from=layered_from)
                except StopIteration as finished:
                    self.program = finished.value
                    sched = self._scheduler.add(np.zeros((0, NUM_FIELDS), dtype=np.int32), last=True)
                if len(sched.instructions):
                    self._schedules.append(sched)
                    yield Program.of_rows(self.num_qubits, sched.instructions, self.num_records), sched
            # The engine has the last piece: the cache's copy is made while the device runs it
            # (42 ms at 180k qubits, which the call had paid after the device's end)
            self.kept = self._circuit.copy()
        finally:  # done, or given up (an error, the engine short of room, an interrupt)
            self.close()

    def close(self) -> None:
        """Stop the compile and wait for it (a thread stops after the piece it is on, a process at
        once); its processes are reaped."""
        self._compiling.close()

    def whole(self) -> Tuple[Program, Schedule]:
        """The Program and its schedule (kept with it, as `prepared` keeps one), after the pieces."""
        program = self.program
        if "schedule" not in program.derived:
            program.derived["schedule"] = joined(self._schedules, self._scheduler.loop_runs)
        return program, program.derived["schedule"]


class _Ahead:
    """A generator run in a thread of its own: `next` gives its items in order, then raises
    StopIteration with its return value, or the exception it raised.

    After its first item it waits until the second is asked for: the consumer's work on the first
    (an engine's first windows) then goes first. Stim prints a piece of a circuit to text without
    letting go of the interpreter lock, so running on at once delayed the device's start by 0.1-0.16 s
    at 180k qubits, which the rest of the run, bound by the device there, never won back."""

    def __init__(self, generator):
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._second_asked = threading.Event()
        self._asked = 0
        self._ended: Optional[tuple] = None
        self._thread = threading.Thread(target=self._run, args=(generator,), name="quasarq-compile", daemon=True)
        self._thread.start()

    def _run(self, generator) -> None:
        try:
            first = True
            while not self._stop.is_set():
                try:
                    item = next(generator)
                except StopIteration as finished:
                    self._items.put((StopIteration, finished.value))
                    return
                self._items.put((None, item))
                if first:
                    self._second_asked.wait()
                    first = False
            generator.close()
        except BaseException as exc:  # handed to the consumer, which raises it
            self._items.put((exc, None))

    def __next__(self):
        self._asked += 1
        if self._asked == 2:
            self._second_asked.set()
        if self._ended is None:
            failed, item = self._items.get()
            if failed is None:
                return item
            self._ended = (failed, item)
        failed, value = self._ended  # every later call ends the same way
        if failed is StopIteration:
            raise StopIteration(value)
        raise failed

    def close(self) -> None:
        self._stop.set()
        self._second_asked.set()
        self._thread.join()


def _streamed(engine: Engine, circuit, num_qubits: int) -> Program:
    """The piecewise first call: the pieces' windows go to the engine while the rest compiles."""
    from .compiler.stim_circuit import remember_stim

    compiling = StreamedCompile(circuit, ahead=num_qubits < AHEAD_MAX_QUBITS, num_qubits=num_qubits)
    try:
        run = engine.run_reference_pieces(compiling.num_qubits, compiling.num_records, compiling, REFERENCE_KEY,
                                          compiling.whole)  # the whole made while the last pieces run
    finally:
        compiling.close()  # before a whole compile takes over (NotStreamable)
    program, _ = compiling.whole()
    program.derived["reference"] = run.records
    remember_stim(circuit, program, compiling.kept)
    return program


def annotations(program: Program, append_observables: bool) -> list:
    """Detectors then observables; unless appended, zero-record padding between them to a byte
    boundary, so that one parity pass gives both halves of Stim's `separate_observables` output as
    whole bytes (as sample_detectors does)."""
    dets = program.detectors
    pad = 0 if append_observables else -len(dets) % 8
    return dets + [Annotation("pad", np.zeros(0, dtype=np.int64))] * pad + program.observables


def _split(out: np.ndarray, detectors: int, append_observables: bool) -> Tuple[np.ndarray, ...]:
    if append_observables:
        return (out,)
    split = (detectors + 7) // 8
    return out[:, :split], out[:, split:]


class Shots:
    """Shots of one program on one engine. `what`: "measurements" (every record, Stim's
    `compile_sampler()` layout) or "detectors" (detection events and observable flips relative to
    the noiseless run, Stim's `compile_detector_sampler()`), the observables separate or, with
    `append_observables`, as columns after the detectors. `skip_reference` (measurements only):
    the records XOR an all-zero reference instead of the noiseless run's (Stim's
    `--skip_reference_sample`; right when all zeros is a noiseless outcome)."""

    def __init__(self, engine: Engine, program: Program, what: str, *, append_observables: bool = False,
                 skip_reference: bool = False):
        if what not in WHAT:
            raise ValueError(f"what must be one of {WHAT}, got {what!r}")
        if what == "detectors":
            program = program.with_pauli_readout()
        self.engine, self.program, self.what = engine, program, what
        self.schedule = prepared(program)
        self.controlled = program.needs_branching()
        zeros = np.zeros(program.num_records, dtype=np.uint8)
        self.parities = None
        self.append = append_observables
        if what == "measurements":
            self.reference = zeros if skip_reference else reference(engine, program)
        else:
            # Without feedback or confusion the frames are the flips themselves: no reference run.
            needs = program.conditions or program.confusions or self.controlled
            self.reference = reference(engine, program) if needs else zeros
            self.parities = Parities.of(annotations(program, append_observables), self.reference)

    @property
    def columns(self) -> Tuple[int, ...]:
        """Bits per shot of each array `sample` returns."""
        if self.what == "measurements":
            return (self.program.num_records,)
        d, o = len(self.program.detectors), len(self.program.observables)
        return (d + o,) if self.append else (d, o)

    def sample(self, key, first: int, shots: int) -> Tuple[np.ndarray, ...]:
        """Shots [first, first + shots) of the call keyed `key`, bit-packed shot-major (uint8
        [shots, ceil(columns / 8)], bit b of byte k is column 8k + b): (records,) or (detection
        events, observable flips), or (detection events and observable flips,) when appended. The arrays may be views of the engine's buffers: use them
        before the next call."""
        word, skip = divmod(int(first), 64)
        n = skip + int(shots)
        engine, program, sched = self.engine, self.program, self.schedule
        if self.parities is None:
            if self.controlled:
                out = shot_major(engine.sample_controlled(program, sched, key, n, first_word=word), n, True)
            else:
                out = engine.sample_frames(program, sched, key, self.reference, n, shot_major=True, first_word=word)
            return (out[skip:],)
        if self.controlled:
            packed = self.parities.reduce(engine.sample_controlled(program, sched, key, n, first_word=word))
            out = parities_shot_major(packed, n)
        else:
            out = engine.sample_frames(program, sched, key, self.reference, n, self.parities, True, first_word=word)
        return _split(out[skip:], len(program.detectors), self.append)


class Converter:
    """Measurement records to detection events and observable flips (Stim's `m2d`): parities of the
    records relative to the noiseless run's (the reference sample; all zeros with
    `skip_reference`), laid out as `Shots(..., "detectors", append_observables=...)` samples them."""

    def __init__(self, engine: Engine, program: Program, *, append_observables: bool = False,
                 skip_reference: bool = False):
        self.program, self.append = program, append_observables
        ref = np.zeros(program.num_records, dtype=np.uint8) if skip_reference else reference(engine, program)
        self.parities = Parities.of(annotations(program, append_observables), ref)

    def convert(self, records: np.ndarray) -> Tuple[np.ndarray, ...]:
        """Records bit-packed shot-major (uint8 [shots, ceil(records / 8)]) -> as `Shots.sample`."""
        shots = records.shape[0]
        bits = np.unpackbits(records, axis=1, count=self.program.num_records, bitorder="little")
        words = (shots + 63) // 64
        by_record = np.zeros((self.program.num_records, 8 * words), dtype=np.uint8)
        by_record[:, : (shots + 7) // 8] = np.packbits(bits.T, axis=1, bitorder="little")
        packed = by_record.view("<u8")  # uint64 [records, words]: bit l of word w is shot 64w + l
        out = parities_shot_major(self.parities.reduce(packed), shots)
        return _split(out, len(self.program.detectors), self.append)
