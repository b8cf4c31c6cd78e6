"""Step 1 for Stim circuits: `stim.Circuit` -> `Program`, straight from Stim's instructions.

`compile_stim(circuit)` writes the Program through the `core.program.ProgramBuilder`, without
building Cirq objects, so every engine samples Stim circuits; compiling the same circuit again is
a cache hit, and a circuit that differs from a cached one only in its Pauli channels'
probabilities (a noise sweep's next point) takes that one's Program with its own channels
(`stim_sweep.py`). Stim is an optional dependency: it is imported inside the function only.

Modules: this one holds the entry point, its cache and the walk over a circuit (`_StimCompiler`)
with its bulk paths, segments of whole instructions and runs of annotations; `stim_instructions.py`
holds Stim's instruction tables and `_InstructionCompiler`, which `_StimCompiler` extends: the
compilation's state and every instruction compiled on its own, target by target; `stim_text.py`
reads a circuit's text into NumPy arrays; `stim_sweep.py` finds a noise sweep's next point.

Conventions
-----------
- Qubits: program qubit i is Stim qubit i; `Program.qubits` is `cirq.LineQubit(i)` for i in
  `range(circuit.num_qubits)`, made when first read (QUBIT_COORDS are ignored).
- Loops: a REPEAT block is one loop of the Program (`begin_loop` / `end_loop`), its body compiled
  once, never unrolled (REPEAT 1 is inlined).
- Whole instructions: an instruction whose targets are all plain qubits (unitaries, M / MR / R in
  any basis without a flip probability, Pauli channels) joins a segment of consecutive such
  instructions (up to `_SEGMENT_CHARS` of target text). A segment's targets are parsed from their
  text as one array (`stim_text._parse_targets`), its rows built as one block
  (`ProgramBuilder.emit_rows`), and runs of its instructions on disjoint qubits take their
  positions together. The rest, and an instruction naming a qubit twice, go target by target;
  `_StimCompiler(..., whole_instructions=False)` takes that path for all, and tests check that both
  give the same Program. A circuit is walked from its text (`_walk_text`, its lines' kinds and
  depths from `stim_text._line_layout`), REPEAT bodies included: no instruction object for a plain
  line, nor for QUBIT_COORDS.
- Annotations: a run of consecutive DETECTOR / OBSERVABLE_INCLUDE instructions is compiled at once
  (`_annotation_run`): its rec targets, Pauli targets and observable indices parsed from its text
  in one vectorized pass (`stim_text._parse_annotations`), detectors' coordinates from one
  `get_detector_coordinates` call on the run (Stim's text rounds arguments), handed to the builder
  as arrays. Short runs, a rec target looking back before the first measurement (its error) and
  text of another form go one by one (`_annotation`); `_StimCompiler(..., whole_annotations=False)`
  takes that path for all, and tests check that both give the same Program.
- Steps: TICK opens a new step of the builder; within the instructions between two TICKs, each
  row goes to the first position after the earlier rows on its qubits (as soon as possible, as
  the Cirq compiler's `emitter.Cursor`), so rows sharing a STEP act on disjoint qubits.
  A classically controlled Pauli goes after every row of the open step that writes a record.
- Measurement records: record slot m is Stim's measurement m (`rec` targets resolve against the
  records written so far). Each measurement target (each product of MPP / MXX / MYY / MZZ) is
  also a Cirq-style measurement key: ``str(m)`` where m is its record slot on iteration 0 of every
  enclosing loop, so a measurement inside a loop is one key with one instance per iteration (as
  stimcirq names them: `run()` gives a `cirq.ResultDict` keyed "0", "1", ...).
- Moments (`Program.moment_rows`): the top-level TICK layers and REPEAT blocks.
- Scratch qubits, past the circuit's: a record with no qubit of the circuit behind it (MPAD, a
  herald, a measurement of +-I) is an MR of a scratch qubit in |0> (target i of an instruction takes
  scratch qubit i mod `_SCRATCH`), inverted for a 1; a flip probability is an X_ERROR on it first,
  a herald a two-qubit channel that flips it with each Pauli the channel applies to its qubit.
  Each observable index with Pauli targets has a qubit of its own (`Program.pauli_observables`).
  `Program.num_qubits` counts them; `Program.qubits`, the records, keys and final state never show
  them.
- Detectors / observables / channels come out as the Cirq compiler makes them for
  `stimcirq.stim_circuit_to_cirq_circuit(circuit)` (same records, coordinates, channel
  probabilities and Paulis); one deliberate difference: X_ERROR(1) (and Y/Z) stays a noise
  channel here, where stimcirq's conversion turns it into a plain Pauli gate (Stim's detector
  sampler treats it as noise, not as part of the reference sample).

Supported: every Stim unitary gate whose canonical name is an opcode of `core.opcodes` (under
every alias Stim accepts: CNOT, ZCX, SQRT_Z, H_XZ, SWAPCZ, ...), I / II (no rows); SPP / SPP_DAG
(basis change, CX parity, S / S_DAG, undo); M, MX, MY, MR, MRX, MRY, R, RX, RY (with their Z
aliases; basis changes as `opcodes.LOWERED_BASIS`), inverted targets, a flip probability (a 2x2
CONFUSION after the record); MPP, MXX, MYY, MZZ (basis change, CX parity, M, undo, as
`lowerings.pauli_measurement`); X_ERROR, Y_ERROR, Z_ERROR, DEPOLARIZE1, DEPOLARIZE2,
PAULI_CHANNEL_1, PAULI_CHANNEL_2, E / CORRELATED_ERROR, ELSE_CORRELATED_ERROR directly after E or
another ELSE (the chain is one channel on the union of its qubits, one draw: outcome k is link k's
product with probability p_k * prod_{i<k} (1 - p_i)), I_ERROR / II_ERROR (nothing); HERALDED_ERASE(p)
(per target, with probability p a herald record of 1 and I, X, Y or Z with p/4 each, else a 0; an
inverted target is not inverted, as in Stim), HERALDED_PAULI_CHANNEL_1(pi, px, py, pz) (a 1 with I,
X, Y, Z by those probabilities, else a 0); MPAD (its bits, flipped with its probability); CX / CY / CZ
/ XCZ / YCZ with a ``rec[-k]`` control (a classically controlled Pauli), and with a ``sweep[k]``
control or between two records (nothing: sweep bits are 0, as in Stim's samplers; a phase between
classical bits changes neither); DETECTOR, OBSERVABLE_INCLUDE of records and of Pauli targets (as
Stim's samplers: the observable flips where the Pauli frame anticommutes with the target, relative
to a noiseless 0, nothing collapses, the target's sign changes nothing; records and m2d ignore
them; a FRAME_PARITY row each, see `_pauli_term`), SHIFT_COORDS, QUBIT_COORDS (ignored), TICK,
REPEAT; MPP / MXX / MYY / MZZ of +-I (a constant record) and SPP of +-I (nothing).

Refused with `UnsupportedOperationError` naming the instruction, its position and this list:
ELSE_CORRELATED_ERROR anywhere but directly after E or another ELSE in the same block (Stim's
samplers carry the chain's state across other instructions; its detector error model refuses it,
as we do: another instruction in between could not be folded into one channel), measurements and
SPP of anti-Hermitian products (Stim refuses them too), and any instruction Stim adds later.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import itertools
import threading
from typing import Generator, List, Optional, Tuple

import numpy as np

from .. import errors
from ..core import native, opcodes
from ..core.program import LAYERED_FROM, RAND, REC, Program
from ..core.ranges import expand_ranges, ragged_rows, shift_rows
from . import cache
from .stim_memory import circuit_bytes, circuit_text, reads_in_place
from .stim_printing import PRINTERS, PrintedPieces, printers_available
from .stim_sweep import swept_variant
from .stim_rows import (PAIRS, TRIPLES, CompiledPiece, PreparedPiece, SegmentRows, circuit_runs, compiled_runs,
                        digest_piece, native_entry, previous_targets, segment_rows)
from .stim_instructions import _CODE, _FB, _N, _XY, _Z, _InstructionCompiler, _plain
from .stim_text import (_LINE_ANNOTATION, _LINE_CLOSE, _LINE_OTHER, _Annotations, _encoded, _Layout, _line_layout,
                        _LineTargets, _parse_annotations, _parse_targets)

__all__ = ["compile_stim", "compile_new_stim", "clear_stim_cache", "cached_stim", "remember_stim", "stim_pieces"]

# A segment of whole instructions is written once its targets' text has this many characters: its
# arrays then stay in the processor's caches (one array of a 30k-qubit circuit's targets did not).
_SEGMENT_CHARS = 1 << 17
# A printer's piece read for the compiled path (`_walk_compiled`) is placed in groups of whole
# instructions that start a multiple of this many targets apart
_COMPILED_GROUP = 1 << 16
# A whole compile of a circuit of at least this many qubits times top-level instructions (about its
# text's size: 36M for the paper's circuit at 30k qubits) without detectors or observables has its
# text printed in PRINTED_PIECES pieces by printers (`stim_printing`), their targets read there. On the
# H100's host that took 0.40-0.46 -> 0.30-0.34 s off a 30k-qubit compile, nothing at 10k (12M), and
# the forks cost more than they saved at 5k (docs/benchmarks-first-call.md, session 11). Only where
# Stim prints the circuit: where `stim_memory` reads it in place, no printer is forked. H200 host, first
# calls in turn (session 34, medians of eight), circuits read in place, with printers / without:
# 30k 132 / 74 ms, 100k 298 / 264 ms (printed by Stim with printers: 168 and 370 ms).
PRINTED_MIN = 20_000_000
PRINTED_PIECES = 12
# A whole compile printed in pieces has each printer's first piece a quarter of the later ones, so
# that this process, which walks piece 0 meanwhile, waits less for piece 1: at 180k qubits it had
# waited 0.11 s for it, with the printers forked after piece 0 and each printing a whole piece first
# (a 0.72 s compile, H200 host). From PRINTED_MANY on it asks for PRINTERS_MANY of them where they may
# run. Compiles in turn there (session 27, all printers forked by this process at once), medians of
# four: 180k 0.83 -> 0.71 s, 100k 0.44 -> 0.40 s; at 10k (12M) 0.047 -> 0.046 s with four printers,
# 0.051 s with six. Once the printers read their pieces for the compiled path (`_walk_compiled`) they
# set the pace, not this process: first calls in turn in one process (session 30, medians of four),
# six / nine / twelve printers, 100k 440 / 429 / 448 ms, 180k 883 / 816 / 821 ms.
PRINTED_MANY = 40_000_000
PRINTERS_MANY = 9
# Each printer's second piece half a later one: a printer takes it after its quarter piece, and with
# a whole piece there this process, done with the quarter pieces, had waited for the first whole one
# 38-40 ms at 100k qubits and 97-161 ms at 180k (H200 host). First calls in turn in one process
# (session 29, medians of five): 10k 105-107 -> 94-98 ms, 100k 543-581 -> 522-534 ms, 180k
# 1010-1056 -> 996-1006 ms.
PRINTED_HALVES = True
# A whole compile's text (one no printer read) read in one compiled pass and placed as a printer's
# piece, where it is whole instructions and TICKs alone (`compiled_runs`), not walked line by line:
# compiles in turn on an H200 host (session 31, medians of eight), 5k qubits 54.1 -> 47.0 ms
WHOLE_READ = True
# Threads that write the compiled path's rows (`_RowWriter`), at most: in turn there, one / four /
# eight, the 10k compile 85.3 / 77.3 / 78.4 ms (it had waited for one writer at its end), 100k level
SEGMENT_WRITERS = 4
_ANNOTATIONS = frozenset(("DETECTOR", "OBSERVABLE_INCLUDE"))
# A run of annotations this long or longer is read from its text at once; a shorter one, one by one
# (a few NumPy calls cost more than a few annotations).
_ANNOTATION_RUN_MIN = 8
_THREE = np.arange(3)
# Rows made ahead are sorted by position this many at a time (`ProgramBuilder.emit_shared_rows`: the
# builder keeps each sort's rows as views, by position, in the order written, so the Program is the
# same however they are cut): a sort in a processor's caches. A piece's rows sorted at once (6 MB at
# 30k qubits) took 3-5 times as long on the 2-core machine, each position's rows gathered from all
# over them.
_SORTED_ROWS = 1 << 14


_PROGRAMS = cache._Cache(32, 1 << 24)
# The last few circuit objects compiled, with a copy of each as it was: the same object passed
# again (a sampling loop) is checked by comparing it with its copy, not by printing it to text
# (the cache's key; 7 ms for a distance-51 surface code). The object itself is held, so its id
# is not reused while it is here.
_RECENT: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()
_RECENT_MAX = 8
_RECENT_LOCK = threading.Lock()


def clear_stim_cache() -> None:
    _PROGRAMS.clear()
    with _RECENT_LOCK:
        _RECENT.clear()


def compile_stim(circuit) -> Program:
    """The Program of a `stim.Circuit` (cached: an equal circuit compiles once; see the module docstring).

    The returned Program is shared with the cache; treat it as read-only."""
    import stim  # optional dependency: never imported by `import cirq_quasarq`

    if not isinstance(circuit, stim.Circuit):
        raise errors.InvalidInputError(f"compile_stim takes a stim.Circuit, got {type(circuit).__name__}")
    program = cached_stim(circuit)
    if program is None:
        program = compile_new_stim(circuit)
    return program


def compile_new_stim(circuit, num_qubits: Optional[int] = None) -> Program:
    """`compile_stim` of a circuit `cached_stim` did not find; `num_qubits`: its `num_qubits` when
    the caller has it (Stim counts them in a pass over every target: 17 ms at 100k qubits)."""
    import stim

    n = circuit.num_qubits if num_qubits is None else num_qubits
    texts, kept = None, []  # kept: the cache's copy of the circuit, where the printers' wait made it
    available = printers_available()
    size = n * len(circuit)
    if (size >= PRINTED_MIN and available and len(circuit) >= 2 * PRINTED_PIECES and not reads_in_place()
            and not (circuit.num_detectors or circuit.num_observables)):
        printers = min(available, PRINTERS_MANY if size >= PRINTED_MANY else PRINTERS)
        # the cache's copy of the circuit made while this process waits for a printer (at 100k qubits
        # 31 ms of fresh memory, H200 host), where it does
        bounds = _piece_bounds(circuit, PRINTED_PIECES, printers, 4, printers if PRINTED_HALVES else 0)
        texts = PrintedPieces(circuit, bounds, printers, functools.partial(digest_piece, num_qubits=n),
                              idle=lambda: kept.append(circuit.copy()))
    try:
        program = _StimCompiler(stim, n).run(circuit, texts)
    except Exception:
        if texts is None:
            raise
        program = _StimCompiler(stim, n).run(circuit)  # the walk of the whole says what is wrong, and where
    finally:
        if texts is not None:
            texts.close()
    if texts is not None:
        texts.idle()  # (where no wait made the copy)
    remember_stim(circuit, program, kept[0] if kept else None)
    return program


def _piece_bounds(circuit, pieces: int, ramp: int = 0, ramp_part: int = 2, halves: int = 0) -> List[Tuple[int, int]]:
    """About `pieces` runs of the circuit's top-level instructions, the first a quarter of the rest,
    the `ramp` after it 1 / `ramp_part` of the rest and the `halves` after those half of it (an
    engine fed the pieces starts sooner: the first is walked here, the ramp's are printed and made
    at once, one a printer, and each printer's next piece comes sooner); none starts with
    ELSE_CORRELATED_ERROR (its chain is walked as one)."""
    count, lo = len(circuit), 0
    step = -(-count // max(1, pieces))
    bounds = []
    while lo < count:
        size = -(-step // 4) if not lo else -(-step // ramp_part) if len(bounds) <= ramp \
            else -(-step // 2) if len(bounds) <= ramp + halves else step
        hi = min(count, lo + size)
        while hi < count and circuit[hi].name == "ELSE_CORRELATED_ERROR":
            hi += 1
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _fingerprint(circuit) -> tuple:
    """A cheap key (its text took as long as the rest of a large compile; `num_qubits` is a pass over
    every target, these are counts Stim keeps); a hit is used only when its circuit equals the one
    asked for."""
    return (circuit.num_measurements, circuit.num_detectors, circuit.num_observables, circuit.num_ticks,
            len(circuit))


def cached_stim(circuit) -> Optional[Program]:
    """The cached Program of `circuit` (a stim.Circuit), or of a cached circuit it differs from only
    in its Pauli channels' probabilities with its own channels (a noise sweep's next point:
    `stim_sweep`), or None: nothing is compiled."""
    with _RECENT_LOCK:
        recent = _RECENT.get(id(circuit))
    if recent is not None and recent[0] is circuit and recent[1] == circuit:  # unchanged since
        program = recent[2]
    else:
        bucket = _PROGRAMS.get(_fingerprint(circuit))
        if bucket is None:
            return None
        hit = next((entry for entry in bucket[0] if entry[1] == circuit), None)
        if hit is None:
            program = swept_variant(circuit, bucket[0])
            if program is not None:
                remember_stim(circuit, program)
            return program
        program = hit[0]
        _remember_object(circuit, hit[1], program)
    return program


# Circuits one key keeps, the latest first: circuits of equal counts (noise variants of one code, or
# one circuit on other qubits) share a key.
_BUCKET = 4


def remember_stim(circuit, program: Program, kept=None) -> None:
    """Cache `program` as the Program of `circuit` (a stim.Circuit); `kept`: a copy of the circuit as
    it was compiled, when the caller made one (else it is made here)."""
    if kept is None:
        kept = circuit.copy()
    key = _fingerprint(circuit)
    old = _PROGRAMS.get(key)
    if old is not None and program.channels and set(program.derived) <= {LAYERED_FROM}:
        # a noise variant of a circuit compiled before (a sweep's next probability) takes that one's
        # schedule, frame plan and linear map (`Program.derived`), which never depend on the
        # probabilities (LAYERED_FROM, the compile's own entry, names its rows: `schedule` reads it for
        # those alone)
        like = next((p for p, _ in old[0] if p is not program and p.differs_only_in_probabilities(program)), None)
        if like is not None:
            program.derived = like.derived
    entries = ((program, kept),) + (old[0][: _BUCKET - 1] if old is not None else ())
    _PROGRAMS.put(key, (entries,), sum(p.num_instructions for p, _ in entries))
    _remember_object(circuit, kept, program)


def _remember_object(circuit, kept, program: Program) -> None:
    with _RECENT_LOCK:  # the cache's copy serves both: neither is ever changed
        _RECENT[id(circuit)] = (circuit, kept, program)
        _RECENT.move_to_end(id(circuit))
        while len(_RECENT) > _RECENT_MAX:
            _RECENT.popitem(last=False)


def stim_pieces(circuit, pieces: int, num_qubits: Optional[int] = None,
                printers: Optional[int] = None, ramp: int = 0) -> Generator[tuple, None, Program]:
    """`compile_stim` of a circuit of unitaries and collapses in about `pieces` runs of its
    instructions: yields, after each run, the rows no later instruction can come before, in their
    final order, so that an engine may run them while the rest compiles, and whether they are in
    their layers already (`_StimCompiler.run_pieces`); returns the Program, the
    one `compile_stim` makes (not cached here: `remember_stim`). Raises errors.NotStreamable (at any
    piece) for a circuit of anything more. `num_qubits`: the circuit's, when the caller has it;
    `printers`: the processes that print the pieces' text (`stim_printing`; None: its default);
    `ramp`: half pieces after the first (`_piece_bounds`)."""
    import stim

    if circuit.num_detectors or circuit.num_observables:
        raise errors.NotStreamable("the circuit has detectors or observables")
    return _StimCompiler(stim, circuit.num_qubits if num_qubits is None else num_qubits).run_pieces(
        circuit, pieces, printers, ramp)


class LineQubits(collections.abc.Sequence):
    """`cirq.LineQubit(i)` for i in range(n), made when first read: a compile does not need them
    (making 100k of them took most of a 100k-qubit circuit's compile)."""

    def __init__(self, n: int):
        self._n = n
        self._made: Optional[Tuple] = None

    def _qubits(self) -> Tuple:
        if self._made is None:
            import cirq  # only when read: compiling and sampling a stim.Circuit never import Cirq

            self._made = tuple(cirq.LineQubit.range(self._n))
        return self._made

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        return self._qubits()[index]

    def __eq__(self, other) -> bool:
        if isinstance(other, LineQubits):  # two programs' qubits compared (a noise sweep's): no Cirq import
            return self._n == other._n
        return tuple(self) == (tuple(other) if isinstance(other, collections.abc.Sequence) else other)

    def __repr__(self) -> str:
        return f"cirq.LineQubit.range({self._n})"


class _RowWriter:
    """The compiled path's segments written by the library's writer threads
    (`qq_host_write_segment_later`, SEGMENT_WRITERS of them and one processor fewer than this process
    may run on) while the walk places the next ones: on an H200 host a 100k-qubit compile writes
    252 MB of rows, 90-110 ms of the walk's own time where it wrote them itself. The arrays a write
    reads and writes are held here until it is done; where this process may run on one processor
    alone, each segment is written at once."""

    def __init__(self, lib):
        self._lib = lib
        self._later = native.processors() > 1
        if self._later:
            lib.qq_host_segment_writers(min(SEGMENT_WRITERS, native.processors() - 1))
        self._ticket = 0  # the last job given
        self._held: "collections.deque[Tuple[int, tuple]]" = collections.deque()  # (ticket, arrays)

    def write(self, arrays: tuple, *args) -> None:
        """`qq_host_write_segment(*args)`, now or later; `arrays`: those its addresses point into."""
        if not self._later:
            self._lib.qq_host_write_segment(*args)
            return
        held = self._held
        if held:  # let go of what is written (a segment's positions alone are 3 * 8 bytes a target)
            done = self._lib.qq_host_segments_done()
            while held and held[0][0] <= done:
                held.popleft()
        ticket = self._lib.qq_host_write_segment_later(*args)
        if ticket:  # (0: written at once: no writer threads could be started, or their queue took no more)
            self._ticket = ticket
            held.append((ticket, arrays))

    def wait(self) -> None:
        """Return once every segment given is written."""
        if self._held:
            self._lib.qq_host_segments_written(self._ticket)
            self._held.clear()


class _StimCompiler(_InstructionCompiler):
    """One compilation: the walk over a circuit, on `_InstructionCompiler`'s state (the builder, the
    positions of the open step, the open REPEAT blocks).

    With `whole_instructions` (the default) an instruction whose targets are all plain qubits
    (unitaries, M / MR / R in any basis without a flip probability, Pauli channels) waits in a
    segment of such instructions, compiled together (`_flush_segment`); the rest, and instructions
    that name a qubit twice, go target by target. With `whole_annotations` (the default) a run of
    consecutive DETECTOR / OBSERVABLE_INCLUDE instructions is read from its text in one pass and
    given to the builder as arrays (`_annotation_run`); without, one by one (`_annotation`). Each
    way gives the same Program (tests/test_stim_circuit.py, tests/test_stim_annotations.py)."""

    def __init__(self, stim, num_qubits: int, whole_instructions: bool = True, whole_annotations: bool = True):
        super().__init__(stim, num_qubits)
        self.plain = _plain(stim) if whole_instructions else {}
        # Whole instructions waiting for their rows (`_flush_segment` says the entries' fields). `last` holds
        # per qubit the id of the last target naming it (ids grow over the compile, `tid` the next).
        self.segment: List[tuple] = []
        self.pending = 0  # characters of the segment's targets
        self.last = np.full(max(1, num_qubits), -1, dtype=np.int64)
        self.tid = 0
        self.whole_annotations = whole_annotations
        # While a text is walked: its lines' targets where a printer read them (`_walk_text`)
        self.line_targets: Optional[_LineTargets] = None
        # The compiled path's scratch (`_compiled_segment`): per qubit the last instruction naming it
        # (numbered over the compile from 0, `_stamps` the next), room for positions, what it placed
        self._stamp: Optional[np.ndarray] = None
        self._stamps = 0
        self._placed = np.empty(7, dtype=np.int64)
        self._counts = np.empty(1 << 12, dtype=np.int64)  # rows a position (a wider segment: bincount)
        self._writer: Optional[_RowWriter] = None

    # -- the walk ------------------------------------------------------------------------------
    def run(self, circuit, texts: Optional[PrintedPieces] = None) -> Program:
        """The Program of `circuit`; `texts`: its text in pieces, from printers (`compile_new_stim`)."""
        self._moment()
        try:
            if texts is not None:
                for i in range(len(texts.bounds)):
                    self._walk_piece(circuit, texts, i)
            elif self.plain and len(circuit) > 1:
                # (WHOLE_READ says why; read with no text where Stim keeps the circuit, else from its text)
                read, whole = circuit_runs(circuit, self.n) if WHOLE_READ else (True, None)
                text = None
                if whole is None:
                    text = circuit_bytes(circuit, num_qubits=self.n)  # (bytes: no copy to str and back)
                    if not read:
                        whole = compiled_runs(text, self.n)
                if whole is not None:
                    self._walk_compiled(whole)
                else:
                    self._walk_text(circuit, text.decode())
            else:
                self._walk(circuit, top=True)
            self._flush_segment()
            layered, first_step = self.layered, self.b.step  # the one step still open
            self._close()
            program = self._program()
        finally:
            self._rows_written()
        if layered:
            program.derived[LAYERED_FROM] = (first_step, program.rows)
        return program

    def run_pieces(self, circuit, pieces: int, printers: Optional[int] = None,
                   ramp: int = 0) -> Generator[tuple, None, Program]:
        """`run` in about `pieces` runs of the circuit's top-level instructions, each printed to text
        as a slice of its own (a short first one): after each, yields the rows no later instruction
        can come before, in their final order (those of ended steps, and those of the open step at
        positions below every qubit's next free one: `ProgramBuilder.settle`), with the STEP of
        the one step open so far while every row up to them is in its layer already
        (LAYERED_FROM, which `Scheduler.add` takes), else None; returns the Program, `run`'s row
        for row. Only for circuits of unitaries and collapses: a run that writes
        anything else (noise, a loop, a condition, an annotation, an external target, a scratch
        qubit), and any error, raise errors.NotStreamable (the whole compile then says what is
        wrong, and where). The pieces after the first are printed by `printers` processes of their
        own (`stim_printing.PrintedPieces`; None: its default) while this one walks those before,
        their rows made there where they are whole instructions (`stim_rows`); `ramp`: half pieces
        after the first (`_piece_bounds`)."""
        if not self.plain:
            raise errors.NotStreamable("the walk by whole instructions is off")
        self._moment()
        texts = PrintedPieces(circuit, _piece_bounds(circuit, pieces, ramp), printers,
                              functools.partial(digest_piece, num_qubits=self.n))
        try:
            program = yield from self._walk_pieces(circuit, texts)
        finally:
            self._rows_written()
            texts.close()
        return program

    def _walk_pieces(self, circuit, texts: PrintedPieces) -> Generator[tuple, None, Program]:
        """`run_pieces`' walk, piece i's text from `texts`."""
        count, mark = len(circuit), 0
        layered_from = None  # (a circuit of no instructions yields nothing)
        b = self.b
        for i, (lo, hi) in enumerate(texts.bounds):
            try:
                self._walk_piece(circuit, texts, i)
                self._flush_segment()
                layered_from = b.step if self.layered else None  # the one step open so far
                if hi == count:
                    self._close()
                    b.settle()
                else:
                    b.settle(int(self.free[: self.n].min()) if self.n else 0)
            except Exception as exc:
                raise errors.NotStreamable(f"instructions {lo} to {hi - 1}: {exc}") from exc
            if (b.channels or b.confusions or b.conditions or b.loops or b.ext_qubits or b.num_events
                    or b.num_qubits != self.n or self.accumulators or b.num_records > circuit.num_measurements):
                raise errors.NotStreamable(f"instructions {lo} to {hi - 1} write more than unitaries and collapses")
            rows, mark = b.rows_since(mark)
            yield rows, layered_from
        program = self._program()
        if layered_from is not None:
            program.derived[LAYERED_FROM] = (layered_from, program.rows)
        return program

    def _walk_piece(self, circuit, texts: PrintedPieces, i: int) -> None:
        """`_walk` of piece i of `texts`, from its printed text and read targets."""
        lo, hi = texts.bounds[i]
        text, digest = texts.piece(i)
        if isinstance(digest, PreparedPiece):
            self._walk_prepared(digest)
            return
        if isinstance(digest, CompiledPiece):
            if self.plain:
                self._walk_compiled(digest)
                return
            text, digest = circuit_text(circuit, lo, hi, self.n), None  # (the walk by whole instructions is off)
        piece = circuit[lo:hi]
        if len(piece) > 1:
            self._walk_text(piece, text, digest)
        else:
            self._walk(piece, top=True)

    def _program(self) -> Program:
        rows, recs = self.moment_rows, self.moment_records
        if rows and rows[-1] == self.b.num_rows() and recs[-1] == self.b.num_records:
            rows.pop(), recs.pop()  # no trailing empty moment
        program = self.b.build(LineQubits(self.n), rows, recs)
        program.pauli_observables = tuple(sorted(self.accumulators.items()))
        return program

    def _walk(self, circuit, top: bool = False) -> None:
        """Compile `circuit` from its instruction objects (a run of annotations at once:
        `_annotation_objects`)."""
        chain_end = 0  # instructions before it were compiled as part of an E ... ELSE chain
        run: List[object] = []  # the DETECTOR / OBSERVABLE_INCLUDE instructions just before `index`
        bulk = self.whole_annotations
        for index, inst in enumerate(circuit):
            if bulk and inst.name in _ANNOTATIONS:
                run.append(inst)
                continue
            if run:
                self._annotation_objects(circuit, index - len(run), run)
                run = []
            if index >= chain_end:
                chain_end = self._instruction(circuit, inst, index, top) or chain_end
        if run:
            self._annotation_objects(circuit, len(circuit) - len(run), run)

    def _walk_text(self, circuit, text: str, line_targets: Optional[_LineTargets] = None) -> None:
        """`_walk` of the whole circuit from its text (`text`), REPEAT bodies included (`_walk_lines`);
        `line_targets`: the targets of its lines, read already, `text` then the text that stands for
        the circuit's (`stim_text._read_lines`: such lines may be cut after their instruction's name)."""
        layout = _line_layout(text)
        self.line_targets = line_targets
        try:
            self._walk_lines(circuit, layout, 0, len(layout.lines), 0, True)
            if line_targets is not None:
                self._flush_segment()  # its entries name lines of this text
        finally:
            self.line_targets = None

    def _walk_lines(self, circuit, layout: _Layout, lo: int, hi: int, depth: int, top: bool) -> None:
        """`_walk` of `circuit` from its lines layout.lines[lo:hi] (nested `depth` REPEAT blocks deep): a
        line of plain qubit targets of a unitary, M, MR or R (no arguments, no tag) joins the segment
        as it is; a run of DETECTOR / OBSERVABLE_INCLUDE lines is compiled from its text at once
        (`_annotation_run`), a run of QUBIT_COORDS skipped; any other line is compiled from its
        instruction object (`circuit[index]`), a REPEAT block's body from its lines. Makes no
        instruction object for most lines of a large random circuit or of a QEC circuit (iterating
        a circuit copies every instruction's targets)."""
        plain, segment, lines = self.plain, self.segment, layout.lines
        read_lines = self.line_targets.line.tolist() if self.line_targets is not None else None
        read_chars = self.line_targets.chars.tolist() if self.line_targets is not None else None
        level = lo + np.flatnonzero(layout.depth[lo:hi] == depth)  # its instructions and REPEATs' closing braces
        if not len(level):
            return
        kinds = layout.kind[level]
        numbers = np.cumsum(kinds != _LINE_CLOSE) - 1  # instruction index of each
        # runs of lines of one kind, a closing brace alone: a run of other lines is contiguous in the
        # text (a REPEAT line ends its run: the next line of this level is its closing brace)
        firsts = np.flatnonzero(np.concatenate([[True], (kinds[1:] != kinds[:-1]) | (kinds[1:] == _LINE_CLOSE)]))
        counts = np.diff(np.append(firsts, len(level)))
        indent = int(layout.indent[level[0]])  # Stim indents a block's lines alike
        skip = 0
        for kind, index, at, first, count in zip(kinds[firsts].tolist(), numbers[firsts].tolist(),
                                                 level[firsts].tolist(), firsts.tolist(), counts.tolist()):
            if kind == _LINE_ANNOTATION:
                text = layout.raw[layout.starts[at]:layout.ends[level[first + count - 1]] + 1]
                self._annotation_run(circuit, index, index + count, text, indent)
                continue
            if kind != _LINE_OTHER:
                continue
            for k, line in enumerate(lines[at:at + count], at):
                if index < skip:
                    index += 1
                    continue
                if indent:
                    line = line[indent:]
                cut = line.find(" ")
                entry = plain.get(line[:cut]) if cut > 0 else None
                if entry is not None and entry[0] != _N and (entry[0] != _FB or "[" not in line):
                    # its targets' text, or the number of its line where they were read already
                    read = read_lines is not None and read_lines[k] >= 0
                    segment.append((circuit, index, entry, entry[1], -1, k if read else line[cut + 1:]))
                    self.pending += read_chars[read_lines[k]] + 1 if read else len(line) - cut
                    if self.pending > _SEGMENT_CHARS:
                        self._flush_segment()
                    index += 1
                    continue
                inst = circuit[index]
                if isinstance(inst, self.stim.CircuitRepeatBlock):  # its body: the lines up to its closing brace
                    self._flush_segment()
                    body_lo, body_hi = at + count, int(level[first + count])
                    self._repeat(inst, index, top, lambda body_top: self._walk_lines(
                        inst.body_copy(), layout, body_lo, body_hi, depth + 1, body_top))
                else:
                    skip = self._instruction(circuit, inst, index, top, line) or skip
                index += 1

    def _instruction(self, circuit, inst, index: int, top: bool, text: Optional[str] = None) -> int:
        """Compile instruction `index` of `circuit` (whole, into the segment, or target by target;
        `text`: its text when the walk has it). Returns the index of the next instruction to compile
        when an E / ELSE chain took several, else 0."""
        if isinstance(inst, self.stim.CircuitRepeatBlock):
            self._flush_segment()
            self._repeat(inst, index, top)
            return 0
        name = inst.name
        entry = self.plain.get(name)
        if entry is not None and not inst.tag:  # perhaps whole: its targets' text joins the segment
            kind = entry[0]
            args = inst.gate_args_copy() if kind >= _Z else None
            code, aux = entry[1], -1
            if kind == _N:
                found = self._spec(inst, index, name, tuple(args))
                if found is None:  # a channel that never fires: no rows, no positions taken
                    return 0
                if opcodes.BY_NAME[found[0]].arity == 0:
                    entry = None
                else:
                    code, aux = _CODE[found[0]], found[1]
            elif args and args[0] != 0:  # a flip probability: per target (a confusion row each)
                entry = None
            if entry is not None:
                if text is None:
                    text = str(inst)
                rest = text[text.find(")") + 2:] if args else text[len(name) + 1:]
                if not rest:  # no targets: nothing
                    return 0
                if kind != _FB or "[" not in rest:  # rec[-k] and sweep[k] controls go per target
                    self.segment.append((inst, index, entry, code, aux, rest))
                    self.pending += len(rest)
                    if self.pending > _SEGMENT_CHARS:
                        self._flush_segment()
                    return 0
        if self.segment:
            self._flush_segment()
        entry = self.table.get(name, ("N", name))
        if entry[0] == "N" and entry[1] != "TICK" and entry[1] != "E":  # annotations (most of a QEC circuit)
            self._other(inst, index, entry[1])
            return 0
        return self._one(circuit, inst, index, entry, top)

    # -- whole instructions ----------------------------------------------------------------------
    def _flush_segment(self) -> None:
        """Write the segment: consecutive whole instructions, entries (instruction, index, `_plain`
        entry, opcode of its rows, channel id or -1, its targets' text), with the rows, positions,
        record and random slots the per-target path gives them.

        Their targets' texts are parsed as one array. A per-qubit pass over the instructions (two
        NumPy calls each) finds for each target the one before it on its qubit; from that, the
        instructions that name a qubit twice (per target) and the runs of instructions on disjoint
        qubits (their rows take their positions together, `_place_segment`)."""
        if not self.segment:
            return
        segment = self.segment.copy()
        self.segment.clear()  # the list `_walk` appends to
        self.pending = 0
        parsed = self._segment_targets(segment)
        if parsed is not None and parsed[1] is not None:  # '!' only where Stim allows it: collapses
            inverted, starts = parsed[1], parsed[2]
            which = set((np.searchsorted(starts, np.flatnonzero(inverted), "right") - 1).tolist())
            if any(segment[i][2][0] not in (_Z, _XY) for i in which):
                parsed = None
        if parsed is None:  # never for Stim's own text: per target
            for inst, index, *_ in segment:
                inst = inst[index] if isinstance(inst, self.stim.Circuit) else inst
                self._one(None, inst, index, self.table[inst.name])
            return
        qubits, inverted, starts = parsed
        base = self.tid  # the segment's targets' ids: base + index
        self.tid += len(qubits)
        lib = native.compiled()
        if lib is not None and self._compiled_segment(lib, segment, qubits, inverted, starts):
            return
        # the target before each on its qubit, as an id (< base: before the segment)
        seen, named = previous_targets(qubits, starts.tolist(), self.last, base)
        if named.all():
            self._place_segment(segment, 0, len(segment), qubits, inverted, starts, seen, base)
            return
        twice = set((np.searchsorted(starts, np.flatnonzero(~named), "right") - 1).tolist())
        lo = 0
        for i in sorted(twice) + [len(segment)]:
            if lo < i:
                self._place_segment(segment, lo, i, qubits, inverted, starts, seen, base)
            if i < len(segment):
                inst, index = segment[i][:2]
                inst = inst[index] if isinstance(inst, self.stim.Circuit) else inst
                self._one(None, inst, index, self.table[inst.name])
            lo = i + 1

    def _compiled_segment(self, lib, segment, qubits, inverted, starts) -> bool:
        """The whole segment's rows made, placed and sorted by the compiled path (host_rows.cpp), as
        `_place_segment` of all of it gives them: False, with nothing written, where an instruction
        names a qubit twice (the NumPy path then splits the segment there)."""
        entries = np.array([native_entry(entry[2], entry[3], entry[4]) for entry in segment], dtype=np.int32)
        flags = None if inverted is None else np.ascontiguousarray(inverted).view(np.uint8)
        return self._place_compiled(lib, entries, np.ascontiguousarray(qubits, dtype=np.int64), flags,
                                    np.ascontiguousarray(starts, dtype=np.int64), checked=False)

    def _place_compiled(self, lib, entries: np.ndarray, qubits: np.ndarray, flags: Optional[np.ndarray],
                        bounds: np.ndarray, checked: bool) -> bool:
        """Rows of whole instructions (host_rows.cpp's entries, int32 [m, 8]; their qubits, int64;
        '!' per target, uint8, or None; each one's first target and the end, int64) placed and
        sorted by the compiled path: False, with nothing written, where the check refuses them
        (`qq_host_check_segment`; `checked`: a printer's check passed, none made here). Their rows
        are written by the library's writer threads while the walk goes on (`_RowWriter`)."""
        m = len(entries)
        address = native.address
        flags_at = None if flags is None else address(flags)
        free = self.free
        stamp0, stamp = 0, None
        if not checked:
            if self._stamp is None or len(self._stamp) < len(free):
                self._stamp = np.full(len(free), -1, dtype=np.int64)
            stamp0, stamp = self._stamps, address(self._stamp)
            self._stamps += m
        pos = np.empty(3 * len(qubits), dtype=np.int64)  # a new one a segment: the writer reads it later
        counts, out = self._counts, self._placed
        if lib.qq_host_place_segment(address(entries), m, address(qubits), flags_at, address(bounds), len(free),
                                     stamp, stamp0, address(free), address(pos), address(counts), len(counts),
                                     address(out)):
            return False
        rows, low, high, records, rands, record_top, width = out.tolist()
        # the builder keeps the counts and the writer reads them: a copy of the scratch's (a view would
        # keep all of it)
        counts = counts[:width].copy() if width <= len(counts) else np.bincount(pos[:rows] - low, minlength=width)
        b = self.b
        rec0, rand0 = b.take_records(records), b.take_rand(rands)
        kept = b.kept_rows(rows)
        if self._writer is None:
            self._writer = _RowWriter(lib)
        scratch = np.empty(max(1, width), dtype=np.int64)  # the writer's own: each position's next row
        self._writer.write((entries, qubits, flags, bounds, pos, counts, scratch, kept),
                           address(entries), m, address(qubits), flags_at, address(bounds), address(pos), rows,
                           low, high, rec0, rand0, b.cond, b.step, address(counts), address(scratch), address(kept))
        b.add_sorted(kept, low, counts, self._writer.wait)
        self.touched.append(qubits)
        if record_top >= 0:
            self._wrote_record(record_top)
        if records:
            b.add_record_keys(rec0, records)
        return True

    def _rows_written(self) -> None:
        """Wait for the writer (the walk's end, or an error: its arrays stay alive until then)."""
        if self._writer is not None:
            self._writer.wait()

    def _segment_targets(self, segment):
        """`_parse_targets` of the segment's targets: their text's, or where an entry names a line
        whose targets were read already (`line_targets`), that line's (a view where all entries name
        lines that follow one another, as they do but for a line of another kind between them)."""
        read = self.line_targets
        texts = [entry[5] for entry in segment if type(entry[5]) is str]
        if len(texts) == len(segment):
            return _parse_targets("\n".join(texts))
        which = read.line[[entry[5] for entry in segment if type(entry[5]) is int]]
        if not texts:
            if which[-1] - which[0] == len(which) - 1:  # consecutive
                lo, hi = read.starts[which[0]], read.starts[which[-1] + 1]
                at = slice(lo, hi)
                starts = read.starts[which[0]:which[-1] + 2] - lo
            else:
                counts = read.starts[which + 1] - read.starts[which]
                at = expand_ranges(read.starts[which], counts)[1]
                starts = np.concatenate([[0], np.cumsum(counts)])
            inverted = None if read.inverted is None else read.inverted[at]
            return read.qubits[at], (inverted if inverted is not None and inverted.any() else None), starts
        # targets read and targets in text, in the entries' order
        parsed = _parse_targets("\n".join(texts))
        if parsed is None:
            return None
        qubits, inverted, counts = [], [], []
        lines, texts_seen = iter(which.tolist()), 0
        for entry in segment:
            if type(entry[5]) is int:
                source, g = read, next(lines)
            else:
                source, g = parsed, texts_seen
                texts_seen += 1
            lo, hi = int(source[2][g]), int(source[2][g + 1])
            qubits.append(source[0][lo:hi])
            inverted.append(source[1][lo:hi] if source[1] is not None else np.zeros(hi - lo, dtype=bool))
            counts.append(hi - lo)
        inverted = np.concatenate(inverted)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return np.concatenate(qubits), (inverted if inverted.any() else None), starts

    def _place_segment(self, segment, lo: int, hi: int, qubits, inverted, starts, seen, base: int) -> None:
        """Rows, slots and positions of `segment[lo:hi]` (no instruction names a qubit twice; `seen`:
        per target the id of the target before it on its qubit, `base`: the id of target 0): the rows
        (`stim_rows.segment_rows`), then their positions batch by batch (`_place_rows`)."""
        b = self.b
        bounds = starts[lo:hi + 1].tolist()
        made = segment_rows([entry[2:5] for entry in segment[lo:hi]], qubits, inverted, bounds, seen, base,
                            b.num_records, b.num_rand, b.cond)
        self._place_rows(made, qubits[bounds[0]:bounds[-1]])

    def _place_rows(self, made: SegmentRows, span, shared: bool = False) -> None:
        """Give rows made ahead (slots final) their positions, batch by batch from each qubit's next
        free position, and write them (`shared`: rows the builder copies, a mapped file's); `span`:
        their qubits (the open step's, cleared when it closes)."""
        b = self.b
        rec0 = b.num_records
        b.take_records(made.records)
        b.take_rand(made.rand)
        free = self.free
        qa, qb = made.qa, made.qb
        pos = np.empty(len(qa), dtype=np.int64)
        for r0, r1, kind in made.batches.tolist():
            a, p = qa[r0:r1], pos[r0:r1]
            if kind == TRIPLES:  # an X / Y collapse: its target's next three positions
                q = a[0::3]
                first = free.take(q, mode="clip")
                free[q] = first + 3
                p.reshape(-1, 3)[:] = first[:, None] + _THREE
                continue
            free.take(a, out=p, mode="clip")
            if kind == PAIRS:
                other = qb[r0:r1]
                np.maximum(p, free.take(other, mode="clip"), out=p)
                p1 = p + 1
                free[a] = p1
                free[other] = p1
            else:
                free[a] = p + 1
        if shared:
            b.emit_shared_rows(made.rows, pos, _SORTED_ROWS)
        else:
            b.emit_rows(made.rows, pos)
        self.touched.append(span)
        if len(made.rec_rows):
            self._wrote_record(int(pos[made.rec_rows].max()))
        if made.records:
            b.add_record_keys(rec0, made.records)

    def _walk_prepared(self, piece: PreparedPiece) -> None:
        """A piece whose rows a printer made (`stim_rows.digest_piece`), at the top level: its slots
        moved on by the records and random slots so far (the rows are a private mapping of the
        printer's file: only the pages of rows with slots are copied), each run placed, each TICK a
        moment's end, as the walk of its text would."""
        self._flush_segment()
        b = self.b
        rec, rand = b.num_records, b.num_rand
        for made in piece.runs:
            if made is None:
                self._moment()
                continue
            if rec and len(made.rec_rows):
                made.rows[made.rec_rows, REC] += rec
            if rand and len(made.rand_rows):
                made.rows[made.rand_rows, RAND] += rand
            self._place_rows(made, made.qa, shared=True)
            if made.qb is not made.qa:
                self.touched.append(made.qb)

    def _walk_compiled(self, piece: CompiledPiece) -> None:
        """A piece read and checked for the compiled path (by a printer, `stim_rows.digest_piece`, or a
        whole compile's text here, `stim_rows.compiled_runs`), at the top level: each run placed in
        groups of whole instructions of about _COMPILED_GROUP targets (the writer threads write one
        group while the next is placed), each TICK a moment's end, as the walk of its text would."""
        lib = native.compiled()
        if lib is None:
            raise RuntimeError("a piece read for the compiled path, which is off")
        self._flush_segment()
        for run in piece.runs:
            if run is None:
                self._moment()
                continue
            entries, qubits, flags, bounds = run
            self.tid += len(qubits)  # (the targets' ids, as a segment's)
            cuts = [0] + (np.flatnonzero(np.diff(bounds // _COMPILED_GROUP)) + 1).tolist() + [len(entries)]
            for i, j in zip(cuts[:-1], cuts[1:]):
                if j > i:
                    lo, hi = int(bounds[i]), int(bounds[j])
                    self._place_compiled(lib, entries[i:j], qubits[lo:hi], None if flags is None else flags[lo:hi],
                                         bounds[i:j + 1] - lo, checked=True)

    def _repeat(self, block, index: int, top: bool, walk_body=None) -> None:
        """A REPEAT block: its body compiled once by `walk_body(top)` (by default from its instruction
        objects), one loop of the Program (REPEAT 1 inlined)."""
        if walk_body is None:
            walk_body = lambda body_top: self._walk(block.body_copy(), body_top)  # noqa: E731
        count = block.repeat_count
        self.path.append((index, count))
        if count == 1:
            walk_body(top)
        else:
            self.layered = False
            if top:
                self._moment()
            self._close()
            self.b.begin_loop(count)
            walk_body(False)
            self._flush_segment()
            self._close()
            self.b.end_loop()
            if top:
                self._moment()
        self.path.pop()

    # -- runs of annotations ---------------------------------------------------------------------
    def _annotation_objects(self, circuit, lo: int, insts: List[object]) -> None:
        """`_annotation_run` of instructions `insts`, lo, lo + 1, ... of `circuit` (the object walk)."""
        if len(insts) < _ANNOTATION_RUN_MIN:
            self._flush_segment()
            for i, inst in enumerate(insts):
                self._annotation(inst, lo + i, inst.name)
            return
        self._annotation_run(circuit, lo, lo + len(insts), _encoded(circuit_text(circuit, lo, lo + len(insts), self.n)))

    def _annotation_run(self, circuit, lo: int, hi: int, raw: np.ndarray, indent: int = 0) -> None:
        """Instructions lo .. hi - 1 of `circuit`, all DETECTOR / OBSERVABLE_INCLUDE, whose text is
        `raw` (uint8, `indent` spaces before each line, a newline after each but perhaps the last):
        parsed at once (`_parse_annotations`; without their tags when they have some), given to the
        builder as arrays. Short runs, text in another form and a rec target looking back before the
        first measurement (its error) go one by one (`_annotation`), which gives the same Program."""
        self._flush_segment()  # its records come first
        parsed = None
        if self.whole_annotations and hi - lo >= _ANNOTATION_RUN_MIN:
            if raw[-1] != 10:  # the circuit's last line
                raw = np.append(raw, np.uint8(10))
            parsed = _parse_annotations(raw, indent)
            if parsed is None and hasattr(circuit, "without_tags"):  # Stim >= 1.15
                parsed = _parse_annotations(_encoded(str(circuit[lo:hi].without_tags())))
        if parsed is not None and len(parsed.detector) == hi - lo and self._annotation_arrays(circuit, lo, hi, parsed):
            return
        for index in range(lo, hi):
            inst = circuit[index]
            self._annotation(inst, index, inst.name)

    def _annotation_arrays(self, circuit, lo: int, hi: int, parsed: _Annotations) -> bool:
        """The builder's detectors and includes of `_annotation_run` from the parsed tables; False,
        having given nothing, when a record looks back before the first measurement."""
        b = self.b
        records = b.num_records - parsed.rec_back
        if len(records) and records.min() < 0:
            return False
        detector, rec_line = parsed.detector, parsed.rec_line
        on_detector = detector[rec_line]
        per_line = np.bincount(rec_line, minlength=len(detector))
        lines = np.flatnonzero(detector)
        if len(lines):
            offsets = np.concatenate([[0], np.cumsum(per_line[lines])])
            if parsed.has_args[lines].any():  # Stim's exact arguments (its text rounds them), by one call
                found = list(circuit[lo:hi].get_detector_coordinates().values())
                if len(found) != len(lines):
                    return False
                widths = np.fromiter(map(len, found), dtype=np.int64, count=len(found))
                coords = ragged_rows(np.fromiter(itertools.chain.from_iterable(found), dtype=np.float64,
                                                 count=int(widths.sum())), widths)
                coords = shift_rows(coords, widths, b.coord_offset)  # SHIFT_COORDS so far (`_annotation`)
            else:
                widths, coords = np.zeros(len(lines), dtype=np.int64), np.zeros((len(lines), 0))
            b.add_detectors(offsets, records[on_detector], coords, widths)
        lines = np.flatnonzero(~detector)
        if len(lines):
            index = parsed.index[lines]
            b.add_observable_includes(index, np.concatenate([[0], np.cumsum(per_line[lines])]), records[~on_detector])
            for line, q, letter in zip(parsed.pauli_line.tolist(), parsed.pauli_qubit.tolist(),
                                       parsed.pauli_letter.tolist()):
                self._pauli_term(q, letter, int(parsed.index[line]))
        return True
