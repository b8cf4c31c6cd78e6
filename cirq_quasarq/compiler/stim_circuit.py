"""Step 1 for Stim circuits: `stim.Circuit` -> `Program`, straight from Stim's instructions.

`compile_stim(circuit)` writes the Program through the `core.program.ProgramBuilder`, without
building Cirq objects, so every engine samples Stim circuits; compiling the same circuit again is
a cache hit. Stim is an optional dependency: it is imported inside the function only.

Conventions
-----------
- Qubits: program qubit i is Stim qubit i; `Program.qubits` is `cirq.LineQubit(i)` for i in
  `range(circuit.num_qubits)`, made when first read (QUBIT_COORDS are ignored).
- Loops: a REPEAT block is one loop of the Program (`begin_loop` / `end_loop`), its body compiled
  once, never unrolled (REPEAT 1 is inlined).
- Whole instructions: an instruction whose targets are all plain qubits (unitaries, M / MR / R in
  any basis without a flip probability, Pauli channels) joins a segment of consecutive such
  instructions (up to `_SEGMENT_CHARS` of target text). A segment's targets are parsed from their
  text as one array, its rows built as one block (`ProgramBuilder.emit_rows`), and runs of its
  instructions on disjoint qubits take their positions together. The rest, and an instruction
  naming a qubit twice, go target by target; `_StimCompiler(..., whole_instructions=False)` takes
  that path for all, and tests check that both give the same Program. A circuit is walked from its
  text (`_walk_text`), REPEAT bodies included: no instruction object for a plain line, nor for
  QUBIT_COORDS.
- Annotations: a run of consecutive DETECTOR / OBSERVABLE_INCLUDE instructions is compiled at once
  (`_annotation_run`): its rec targets, Pauli targets and observable indices parsed from its text
  in one vectorized pass, detectors' coordinates from one `get_detector_coordinates` call on the run
  (Stim's text rounds arguments), handed to the builder as arrays. Short runs, a rec target looking
  back before the first measurement (its error) and text of another form go one by one
  (`_annotation`); `_StimCompiler(..., whole_annotations=False)` takes that path for all, and tests
  check that both give the same Program.
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
import itertools
import threading
import types
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .. import errors
from ..core import opcodes, paulis
from ..core.program import A, AUX, B, COND, FLAG_INVERT, FLAGS, NUM_FIELDS, OP, RAND, REC, Program, ProgramBuilder
from ..core.ranges import ragged_rows
from . import cache, channels

__all__ = ["compile_stim", "clear_stim_cache"]

SUPPORTED = (
    "supported: Stim's unitary gates with an opcode (all of core.opcodes' unitaries, under any alias), "
    "I, II, SPP, SPP_DAG; M, MX, MY, MR, MRX, MRY, R, RX, RY (inverted targets, flip probability); "
    "MPP, MXX, MYY, MZZ; X_ERROR, Y_ERROR, Z_ERROR, DEPOLARIZE1, DEPOLARIZE2, PAULI_CHANNEL_1, "
    "PAULI_CHANNEL_2, E / CORRELATED_ERROR (ELSE_CORRELATED_ERROR directly after it), I_ERROR, II_ERROR, "
    "HERALDED_ERASE, HERALDED_PAULI_CHANNEL_1; MPAD; CX / CY / CZ / XCZ / YCZ with a rec[-k] or sweep[k] "
    "control; DETECTOR, OBSERVABLE_INCLUDE (records, Pauli targets), SHIFT_COORDS, QUBIT_COORDS, TICK, REPEAT")

_CODE = opcodes.CODE
_TO_Z = {paulis.X: _CODE["H"], paulis.Y: _CODE["H_YZ"]}  # self-inverse basis changes to Z
_CX = _CODE["CX"]
_PAULI_CODE = {paulis.X: _CODE["X"], paulis.Y: _CODE["Y"], paulis.Z: _CODE["Z"]}
_LETTER = {"X": paulis.X, "Y": paulis.Y, "Z": paulis.Z}

# Instruction kinds (besides unitaries, found through stim.gate_data()).
_MEASURE = {"M": "Z", "MX": "X", "MY": "Y"}
_MEASURE_RESET = {"MR": "Z", "MRX": "X", "MRY": "Y"}
_RESET = {"R": "Z", "RX": "X", "RY": "Y"}
_PAIR_MEASURE = {"MXX": paulis.X, "MYY": paulis.Y, "MZZ": paulis.Z}
_NOISE = {"X_ERROR", "Y_ERROR", "Z_ERROR", "DEPOLARIZE1", "DEPOLARIZE2", "PAULI_CHANNEL_1",
          "PAULI_CHANNEL_2"}
_NOTHING = {"I", "II", "I_ERROR", "II_ERROR", "QUBIT_COORDS"}
# Gates that take a measurement record as a control: the Pauli letter of each side (the record
# must sit on a Z side; the other side's letter is the Pauli applied to the qubit).
_FEEDBACK_SIDES = {"CX": ("Z", "X"), "CY": ("Z", "Y"), "CZ": ("Z", "Z"), "XCZ": ("X", "Z"),
                   "YCZ": ("Y", "Z")}
_FEEDBACK_CODES = {_CODE[name] for name in _FEEDBACK_SIDES}
_HERALDED = {"HERALDED_ERASE", "HERALDED_PAULI_CHANNEL_1"}
_PARITY_CODE = {paulis.X: _CODE["FRAME_PARITY_X"], paulis.Y: _CODE["FRAME_PARITY_Y"],
                paulis.Z: _CODE["FRAME_PARITY_Z"]}
# Scratch qubits of heralds and MPAD at most (target i of an instruction takes scratch qubit i mod
# this): a layer of heralds takes a few positions, not two per target, while tableau mode, quadratic
# in the qubits, grows little.
_SCRATCH = 64
# A segment of whole instructions is written once its targets' text has this many characters: its
# arrays then stay in the processor's caches (one array of a 30k-qubit circuit's targets did not).
_SEGMENT_CHARS = 1 << 17
_ANNOTATIONS = frozenset(("DETECTOR", "OBSERVABLE_INCLUDE"))
# A run of annotations this long or longer is read from its text at once; a shorter one, one by one
# (a few NumPy calls cost more than a few annotations).
_ANNOTATION_RUN_MIN = 8

_TABLE: Optional[Dict[str, Tuple[str, object]]] = None


def _table(stim) -> Dict[str, Tuple[str, object]]:
    """Every Stim gate name and alias -> (kind, data): ("U1" | "U2", opcode) for unitaries, ("N",
    canonical name) for the rest Stim knows (their kind is decided by the canonical name)."""
    global _TABLE
    if _TABLE is None:
        table = {}
        for name, gate in stim.gate_data().items():
            canon = gate.name
            op = opcodes.BY_NAME.get(canon)
            if gate.is_unitary and op is not None and op.kind == opcodes.Kind.UNITARY and canon not in _NOTHING:
                entry = ("U1" if op.arity == 1 else "U2", op.code)
            else:
                entry = ("N", canon)
            for alias in set(gate.aliases) | {name, canon}:
                table[alias] = entry
        _TABLE = table
    return _TABLE


# Kinds of whole instructions (`_plain`): one- and two-qubit unitaries (_FB: one that may take a
# record or sweep control), M / MR / R in the Z basis, in the X or Y basis, Pauli channels.
_U1, _U2, _FB, _Z, _XY, _N = range(6)
_PLAIN: Optional[Dict[str, Tuple]] = None


def _plain(stim) -> Dict[str, Tuple]:
    """Every name (and alias) of an instruction that may be whole -> (kind, opcode of its rows, two
    qubits a row, writes records, (basis change, collapse, change back) opcodes of _XY)."""
    global _PLAIN
    if _PLAIN is None:
        plain = {}
        for name, (kind, data) in _table(stim).items():
            if kind == "U1":
                plain[name] = (_U1, data, False, False, None)
            elif kind == "U2":
                plain[name] = (_FB if data in _FEEDBACK_CODES else _U2, data, True, False, None)
            elif data in _MEASURE or data in _MEASURE_RESET or data in _RESET:
                reset = data in _RESET
                basis = _RESET[data] if reset else _MEASURE_RESET.get(data) or _MEASURE[data]
                op = "R" if reset else ("MR" if data in _MEASURE_RESET else "M")
                if basis == "Z":
                    plain[name] = (_Z, _CODE[op], False, not reset, None)
                else:
                    codes = tuple(_CODE[c] for c in opcodes.LOWERED_BASIS[op + basis])
                    plain[name] = (_XY, _CODE[op], False, not reset, codes)
            elif data in _NOISE:
                plain[name] = (_N, None, data in ("DEPOLARIZE2", "PAULI_CHANNEL_2"), False, None)
        _PLAIN = plain
    return _PLAIN


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
    with _RECENT_LOCK:
        recent = _RECENT.get(id(circuit))
    if recent is not None and recent[0] is circuit and recent[1] == circuit:  # unchanged since
        return recent[2]
    # A cheap fingerprint (its text took as long as the rest of a large compile); a hit is used only
    # when its circuit equals this one.
    key = (circuit.num_qubits, circuit.num_measurements, circuit.num_detectors, circuit.num_observables,
           circuit.num_ticks, len(circuit))
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[1] == circuit:
        program, kept = hit[0], hit[1]
    else:
        program, kept = _StimCompiler(stim, circuit.num_qubits).run(circuit), circuit.copy()
        _PROGRAMS.put(key, (program, kept), program.num_instructions)
    with _RECENT_LOCK:  # the cache's copy serves both: neither is ever changed
        _RECENT[id(circuit)] = (circuit, kept, program)
        _RECENT.move_to_end(id(circuit))
        while len(_RECENT) > _RECENT_MAX:
            _RECENT.popitem(last=False)
    return program


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
        return tuple(self) == (tuple(other) if isinstance(other, collections.abc.Sequence) else other)

    def __repr__(self) -> str:
        return f"cirq.LineQubit.range({self._n})"


_POWERS = 10 ** np.arange(10, dtype=np.int32)


def _parse_targets(text: str):
    """(qubits int64 [k], inverted bool [k] or None, first target of each line int64 [lines + 1]) of
    lines of targets ('0 !3 5'), one space between targets, a newline between lines; None when the
    text is not in that form. Vectorized: a target's digits are read back from its end, one digit
    place per NumPy pass (np.fromstring took twice as long)."""
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    gaps = np.flatnonzero(raw <= 32)  # target i ends at gap i
    total = len(gaps) + 1
    ends = np.empty(total, dtype=np.intp)
    ends[:-1], ends[-1] = gaps, len(raw)
    lengths = np.empty(total, dtype=np.intp)
    lengths[0] = ends[0]
    np.subtract(ends[1:], gaps + 1, out=lengths[1:])
    digits = raw - np.uint8(48)
    inverted = None
    if np.count_nonzero(digits <= 9) + total - 1 != len(raw):  # not all digits: '!' or not this form
        bangs = np.flatnonzero(raw == 33)
        inverted = np.zeros(total, dtype=bool)
        which = np.searchsorted(gaps, bangs)
        inverted[which] = True
        lengths[which] -= 1
        begins = ends[which] - lengths[which]  # a '!' must be its target's first character, alone
        if np.count_nonzero(digits <= 9) + total - 1 + len(bangs) != len(raw) or \
                not (raw[begins - 1] == 33).all() or len(np.unique(which)) != len(which):
            return None
    if not total or not 1 <= lengths.min() <= lengths.max() <= 9:
        return None
    short = lengths.astype(np.uint8)
    qubits = digits.take(ends - 1).astype(np.int32)
    at = ends - 1
    for place in range(1, int(lengths.max())):
        at -= 1
        value = digits.take(at, mode="clip")
        value *= short > place  # none from before the target
        qubits += value * _POWERS[place]
    qubits = qubits.astype(np.int64)
    lines = np.flatnonzero(raw[gaps] == 10)  # gap of each line's last target
    starts = np.empty(len(lines) + 2, dtype=np.int64)
    starts[0], starts[1:-1], starts[-1] = 0, lines + 1, total
    return qubits, inverted, starts


def _encoded(text: str) -> np.ndarray:
    """A circuit's text as uint8, with a newline after its last line too."""
    return np.frombuffer((text + "\n").encode(), dtype=np.uint8)


def _spells(raw: np.ndarray, at: np.ndarray, word: bytes) -> np.ndarray:
    """Per position in `at`: whether `word` is written there (reads past the end clipped)."""
    found = np.ones(len(at), dtype=bool)
    for k, char in enumerate(word):
        found &= raw.take(at + k, mode="clip") == char
    return found


def _numbers(raw: np.ndarray, begins: np.ndarray, ends: np.ndarray, longest: int) -> Optional[np.ndarray]:
    """int64 values of the decimal numbers raw[begins[i]:ends[i]]; None unless each is 1 to `longest`
    digits. Read back from their ends, one digit place per NumPy pass."""
    lengths = ends - begins
    values = np.zeros(len(lengths), dtype=np.int64)
    if not len(lengths):
        return values
    if lengths.min() < 1 or lengths.max() > longest:
        return None
    for place in range(int(lengths.max())):
        has = lengths > place
        digit = raw.take(ends - 1 - place, mode="clip").astype(np.int64) - 48
        if ((digit < 0) | (digit > 9))[has].any():
            return None
        values += np.where(has, digit, 0) * 10 ** place
    return values


class _Annotations(NamedTuple):
    """`_parse_annotations`' tables of a run of DETECTOR / OBSERVABLE_INCLUDE lines."""

    detector: np.ndarray  # bool [lines]: a DETECTOR line (else an OBSERVABLE_INCLUDE one)
    has_args: np.ndarray  # bool [lines]: with parens arguments
    index: np.ndarray  # int64 [lines]: an OBSERVABLE_INCLUDE's index (0 on DETECTOR lines)
    rec_line: np.ndarray  # int64 [rec targets]: per rec[-k] target, in text order, its line
    rec_back: np.ndarray  # int64 [rec targets]: its k
    pauli_line: np.ndarray  # int64 [Pauli targets]: per Pauli target, in text order, its line
    pauli_qubit: np.ndarray  # int64 [Pauli targets]
    pauli_letter: np.ndarray  # int64 [Pauli targets]: core.paulis letters


_DETECTOR = b"DETECTOR"
_OBSERVABLE = b"OBSERVABLE_INCLUDE"
_PAULI_BYTE = np.zeros(256, dtype=np.int64)  # byte -> core.paulis letter (0: none)
_PAULI_BYTE[[ord("X"), ord("Y"), ord("Z")]] = (paulis.X, paulis.Y, paulis.Z)


def _parse_annotations(raw: np.ndarray, indent: int = 0) -> Optional[_Annotations]:
    """The tables of DETECTOR / OBSERVABLE_INCLUDE lines as Stim prints them (uint8 text, a newline
    after each line, `indent` spaces before each): name, then perhaps parens arguments, then targets
    one space apart; None when the text is in another form (a tag, a target that is neither a rec[-k]
    nor an OBSERVABLE_INCLUDE's Pauli, an observable index that is not a plain integer). The
    arguments' other numbers are not read: Stim prints them rounded. Vectorized over the lines."""
    ends = np.flatnonzero(raw == 10)
    if not len(ends) or ends[-1] != len(raw) - 1:
        return None
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    starts += indent
    detector = raw.take(starts, mode="clip") == _DETECTOR[0]
    if not np.where(detector, _spells(raw, starts, _DETECTOR), _spells(raw, starts, _OBSERVABLE)).all():
        return None
    name_end = starts + np.where(detector, len(_DETECTOR), len(_OBSERVABLE))
    has_args = raw.take(name_end, mode="clip") == ord("(")
    closes = np.flatnonzero(raw == ord(")"))  # one per line with arguments (a tag is refused below)
    if len(closes) != np.count_nonzero(has_args) or \
            not (np.searchsorted(ends, closes) == np.flatnonzero(has_args)).all():
        return None
    head_end = name_end.copy()
    head_end[has_args] = closes + 1
    after = raw.take(head_end, mode="clip")
    if not ((after == 32) | (after == 10)).all():
        return None
    # targets: after each space past the line's head, up to the next space or the line's end
    spaces = np.flatnonzero(raw == 32)
    line = np.searchsorted(ends, spaces)
    past_head = spaces >= head_end[line]
    begin, line = spaces[past_head] + 1, line[past_head]
    end = ends[line]
    end[:-1] = np.minimum(end[:-1], begin[1:] - 1)
    if (end <= begin).any():
        return None
    rec = raw.take(begin) == ord("r")
    rec_begin, rec_end = begin[rec], end[rec]
    if not (_spells(raw, rec_begin, b"rec[-").all() and (raw.take(rec_end - 1) == ord("]")).all()):
        return None
    rec_back = _numbers(raw, rec_begin + 5, rec_end - 1, 9)
    pauli_begin, pauli_end, pauli_line = begin[~rec], end[~rec], line[~rec]
    letter_at = pauli_begin + (raw.take(pauli_begin) == ord("!"))  # the sign changes no flip (`_annotation`)
    letter = _PAULI_BYTE.take(raw.take(letter_at))
    qubit = _numbers(raw, letter_at + 1, pauli_end, 9)
    if rec_back is None or qubit is None or not letter.all() or detector[pauli_line].any():
        return None
    index = np.zeros(len(ends), dtype=np.int64)
    observable = np.flatnonzero(~detector)
    if len(observable):
        if not has_args[observable].all():
            return None
        found = _numbers(raw, name_end[observable] + 1, head_end[observable] - 1, 15)
        if found is None:
            return None
        index[observable] = found
    return _Annotations(detector, has_args, index, line[rec], rec_back, pauli_line, qubit, letter)


# Kinds of a circuit text's lines (`_line_layout`).
_LINE_OTHER, _LINE_ANNOTATION, _LINE_COORDS, _LINE_CLOSE = range(4)
_LINE_WORDS = ((_DETECTOR, _LINE_ANNOTATION), (_OBSERVABLE, _LINE_ANNOTATION), (b"QUBIT_COORDS", _LINE_COORDS))


class _Layout(NamedTuple):
    """A circuit's text, line by line: what `_StimCompiler._walk_lines` walks."""

    lines: List[str]
    raw: np.ndarray  # the text as uint8
    starts: np.ndarray  # int64 [lines]: first byte of each line
    ends: np.ndarray  # int64 [lines]: its newline (past the text for the last line)
    indent: np.ndarray  # int64 [lines]: its leading spaces
    depth: np.ndarray  # int64 [lines]: REPEAT blocks around it (a closing brace: those around its block; -1: empty)
    kind: np.ndarray  # int8 [lines]: _LINE_*


def _line_layout(text: str) -> _Layout:
    lines = text.split("\n")
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    # the lines' ends from their lengths when characters are bytes: a scan of the whole text (and its
    # temporaries, as large) cost more
    if len(raw) == len(text):
        ends = np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1) - 1
    else:
        ends = np.append(np.flatnonzero(raw == 10), len(raw))
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    at = starts.copy()
    while True:
        space = raw.take(at, mode="clip") == 32
        if not space.any():
            break
        at += space
    lead = raw.take(at, mode="clip")
    kind = np.full(len(ends), _LINE_OTHER, dtype=np.int8)
    closes = lead == ord("}")
    kind[closes] = _LINE_CLOSE
    opens = raw.take(ends - 1, mode="clip") == ord("{")  # a REPEAT line
    depth = np.cumsum(opens) - opens - np.cumsum(closes)
    depth[lead == 10] = -1  # an empty line (an empty REPEAT body's): no instruction
    for word, line_kind in _LINE_WORDS:
        maybe = np.flatnonzero(lead == word[0])
        if len(maybe):
            name_end = at[maybe] + len(word)
            after = raw.take(name_end, mode="clip")  # the name ends: a space, arguments, a tag, the line
            after[name_end >= len(raw)] = 10
            named = _spells(raw, at[maybe], word) & ((after == 32) | (after == 40) | (after == 91) | (after == 10))
            kind[maybe[named]] = line_kind
    return _Layout(lines, raw, starts, ends, at - starts, depth, kind)


class _StimCompiler:
    """One compilation: the builder, the positions of the open step and where the walk is.

    With `whole_instructions` (the default) an instruction whose targets are all plain qubits
    (unitaries, M / MR / R in any basis without a flip probability, Pauli channels) waits in a
    segment of such instructions, compiled together (`_flush_segment`); the rest, and instructions
    that name a qubit twice, go target by target. With `whole_annotations` (the default) a run of
    consecutive DETECTOR / OBSERVABLE_INCLUDE instructions is read from its text in one pass and
    given to the builder as arrays (`_annotation_run`); without, one by one (`_annotation`). Each
    way gives the same Program (tests/test_stim_circuit.py, tests/test_stim_annotations.py)."""

    def __init__(self, stim, num_qubits: int, whole_instructions: bool = True, whole_annotations: bool = True):
        self.stim = stim
        self.table = _table(stim)
        self.n = num_qubits
        self.b = ProgramBuilder(num_qubits)
        self.free = np.zeros(max(1, num_qubits), dtype=np.int64)  # qubit -> first free position in the open step
        self.touched: List[object] = []  # qubits (ints, arrays) given a position in the open step
        self.counting = np.arange(1024, dtype=np.int64)  # `_count`
        self._minus = np.full(1024, -1, dtype=np.int64)  # column B of one-qubit rows (views of it)
        self.plain = _plain(stim) if whole_instructions else {}
        # Whole instructions waiting for their rows (`_flush_segment` says the entries' fields). `last` holds
        # per qubit the id of the last target naming it (ids grow over the compile, `tid` the next).
        self.segment: List[tuple] = []
        self.pending = 0  # characters of the segment's targets
        self.last = np.full(max(1, num_qubits), -1, dtype=np.int64)
        self.tid = 0
        self.whole_annotations = whole_annotations
        self.rtop = 0  # first position after every record-writing row of the open step
        self.path: List[Tuple[int, int]] = []  # (instruction index, repeat count) of open REPEATs
        self.specs: Dict[Tuple, Optional[Tuple[int, int, Optional[Tuple[int, ...]]]]] = {}
        self.moment_rows: List[int] = []
        self.moment_records: List[int] = []
        self.scratch: List[int] = []  # heralds' and MPAD's qubits past the circuit's, |0> between uses
        self.accumulators: Dict[int, int] = {}  # observable index -> the qubit its Pauli terms go to

    # -- the walk ------------------------------------------------------------------------------
    def run(self, circuit) -> Program:
        self._moment()
        if self.plain and len(circuit) > 1:
            self._walk_text(circuit, str(circuit))
        else:
            self._walk(circuit, top=True)
        self._flush_segment()
        self._close()
        rows, recs = self.moment_rows, self.moment_records
        if rows and rows[-1] == self.b.num_rows() and recs[-1] == self.b.num_records:
            rows.pop(), recs.pop()  # no trailing empty moment
        program = self.b.build(LineQubits(self.n), rows, recs)
        program.pauli_observables = tuple(sorted(self.accumulators.items()))
        return program

    def _close(self) -> None:
        """Close the open step (if anything was placed in it)."""
        if self.touched:
            self.b.next_step()
            free = self.free
            for qs in self.touched:
                free[qs] = 0
            self.touched = []
            self.rtop = 0

    def _free_at(self, q: int) -> int:
        return int(self.free[q])

    def _take(self, q: int, pos: int) -> None:
        """Qubit q is busy up to position `pos` of the open step (exclusive)."""
        self.free[q] = pos
        self.touched.append(q)

    def _moment(self) -> None:
        """A top-level moment boundary (dropped when nothing was written since the last)."""
        self._close()
        rows, recs = self.b.num_rows(), self.b.num_records
        if self.moment_rows and self.moment_rows[-1] == rows and self.moment_records[-1] == recs:
            return
        self.moment_rows.append(rows)
        self.moment_records.append(recs)

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

    def _walk_text(self, circuit, text: str) -> None:
        """`_walk` of the whole circuit from its text (`text`), REPEAT bodies included (`_walk_lines`)."""
        layout = _line_layout(text)
        self._walk_lines(circuit, layout, 0, len(layout.lines), 0, True)

    def _walk_lines(self, circuit, layout: _Layout, lo: int, hi: int, depth: int, top: bool) -> None:
        """`_walk` of `circuit` from its lines layout.lines[lo:hi] (nested `depth` REPEAT blocks deep): a
        line of plain qubit targets of a unitary, M, MR or R (no arguments, no tag) joins the segment
        as it is; a run of DETECTOR / OBSERVABLE_INCLUDE lines is compiled from its text at once
        (`_annotation_run`), a run of QUBIT_COORDS skipped; any other line is compiled from its
        instruction object (`circuit[index]`), a REPEAT block's body from its lines. Makes no
        instruction object for most lines of a large random circuit or of a QEC circuit (iterating
        a circuit copies every instruction's targets)."""
        plain, segment, lines = self.plain, self.segment, layout.lines
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
            for line in lines[at:at + count]:
                if index < skip:
                    index += 1
                    continue
                if indent:
                    line = line[indent:]
                cut = line.find(" ")
                entry = plain.get(line[:cut]) if cut > 0 else None
                if entry is not None and entry[0] != _N and (entry[0] != _FB or "[" not in line):
                    rest = line[cut + 1:]
                    segment.append((circuit, index, entry, entry[1], -1, rest))
                    self.pending += len(rest)
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

    def _one(self, circuit, inst, index: int, entry, top: bool = False) -> int:
        """Compile one instruction target by target (its table entry `entry`). Returns the index of
        the next instruction of `circuit` to compile when an E / ELSE chain took several, else 0."""
        kind, data = entry
        name = inst.name
        b = self.b
        emit = b.emit
        if data == "TICK":
            if top:
                self._moment()
            else:
                self._close()
        elif kind == "U1":
            for t in inst.targets_copy():
                q = t.value
                p = self._free_at(q)
                self._take(q, p + 1)
                emit(data, q, -1, pos=p)
        elif kind == "U2":
            targets = inst.targets_copy()
            feedback = name in _FEEDBACK_SIDES
            for k in range(0, len(targets), 2):
                ta, tb = targets[k], targets[k + 1]
                if feedback and not (ta.is_qubit_target and tb.is_qubit_target):
                    self._feedback(inst, index, name, ta, tb)
                    continue
                qa, qb = ta.value, tb.value
                pa, pb = self._free_at(qa), self._free_at(qb)
                p = pa if pa > pb else pb
                self._take(qa, p + 1)
                self._take(qb, p + 1)
                emit(data, qa, qb, pos=p)
        elif data == "E":
            return self._correlated_chain(circuit, inst, index)
        else:
            self._other(inst, index, data)
        return 0

    # -- whole instructions ----------------------------------------------------------------------
    def _count(self, k: int) -> np.ndarray:
        """0, 1, ..., k - 1 (a view of one array that grows)."""
        if len(self.counting) < k:
            self.counting = np.arange(2 * k, dtype=np.int64)
        return self.counting[:k]

    def _block(self, k: int, op, a: np.ndarray, rec=-1, rand=-1, flags=0) -> np.ndarray:
        """k one-qubit rows of one opcode on qubits `a`, STEP left for the builder (`rec`, `rand`,
        `flags`: a value for all rows, or an array of k)."""
        rows = np.empty((k, NUM_FIELDS), dtype=np.int32)
        rows[:] = (op, -1, -1, -1, -1, -1, self.b.cond, 0, 0)
        rows[:, A] = a
        for field, value in ((REC, rec), (RAND, rand), (FLAGS, flags)):
            rows[:, field] = value
        return rows

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
        parsed = _parse_targets("\n".join([entry[5] for entry in segment]))
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
        total = len(qubits)
        # the target before each on its qubit, as an id (< base: before the segment)
        base = self.tid
        self.tid += total
        ids = np.arange(base, base + total, dtype=np.int64)
        last = self.last
        seen = np.empty(total, dtype=np.int64)
        bounds = starts.tolist()
        for i in range(len(segment)):
            s, e = bounds[i], bounds[i + 1]
            q = qubits[s:e]
            last.take(q, out=seen[s:e], mode="clip")  # "clip": no buffered copy
            last[q] = ids[s:e]
        # A target that no later one sees and that is not its qubit's last lost its place in `last`
        # to a repeat of its qubit in its own instruction.
        named = last[qubits] == ids
        later = seen[seen >= base] - base
        named[later] = True
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

    def _place_segment(self, segment, lo: int, hi: int, qubits, inverted, starts, seen, base: int) -> None:
        """Rows, slots and positions of `segment[lo:hi]` (no instruction names a qubit twice; `seen`:
        per target the id of the target before it on its qubit, `base`: the id of target 0).

        Greedily, instructions on disjoint qubits form a batch whose rows take their positions with
        a few NumPy calls; an X or Y basis collapse is a batch of its own (three rows a target)."""
        b = self.b
        entries = segment[lo:hi]
        bounds = starts[lo:hi + 1].tolist()
        m = hi - lo
        # Per instruction (in Python: a segment holds a few hundred at most): its rows (none here for
        # an X / Y collapse), its record and random slots (one a row, or a target of an X / Y
        # collapse), in instruction order.
        rec0 = rec = b.num_records
        rand = b.num_rand
        codes, auxes, repeats, pairs, slots, collapses = [], [], [], [], [], []
        firsts, seconds, columns = [], [], []  # per instruction: its rows' qubits, column B
        row_at = [0]  # per instruction: its first row
        at = 0  # rows so far
        minus = self._minus
        for i in range(m):
            entry = entries[i]
            kind, _, pair, measures, _ = entry[2]
            s, e = bounds[i], bounds[i + 1]
            k = e - s
            if kind == _XY:
                collapses.append((i, at, rec if measures else -1, rand))
                rand += k
                if measures:
                    rec += k
                pairs.append(False)
                row_at.append(at)
                continue
            q = qubits[s:e]
            if pair:
                r = k >> 1
                firsts.append(q[0::2])
                seconds.append(q[1::2])
                columns.append(q[1::2])
            else:
                r = k
                firsts.append(q)
                seconds.append(q)
                if len(minus) < r:
                    minus = self._minus = np.full(2 * r, -1, dtype=np.int64)
                columns.append(minus[:r])
            codes.append(entry[3])
            auxes.append(entry[4])
            repeats.append(r)
            pairs.append(pair)
            if kind >= _Z:
                slots.append((at, at + r, RAND, rand))
                rand += r
                if measures:
                    slots.append((at, at + r, REC, rec))
                    rec += r
            at += r
            row_at.append(at)
        total = at
        b.take_records(rec - rec0)
        b.take_rand(rand - b.num_rand)
        span = qubits[bounds[0]:bounds[-1]]
        any_pair = any(pairs)
        if not any_pair and not collapses:  # the rows' qubits, the second's (the first for one row)
            qa = qb = span
        elif all(pairs) and not collapses:
            qa, qb = span[0::2], span[1::2]
        else:
            qa = np.concatenate(firsts) if firsts else span[:0]
            qb = np.concatenate(seconds) if seconds else span[:0]
        template = np.empty((len(codes), NUM_FIELDS), dtype=np.int32)
        template[:] = (0, 0, -1, -1, -1, -1, b.cond, 0, 0)
        template[:, OP] = codes
        template[:, AUX] = auxes
        rows = template.repeat(repeats, axis=0)
        rows[:, A] = qa
        if any_pair:
            rows[:, B] = qb if all(pairs) and not collapses else np.concatenate(columns)
        for r0, r1, field, first in slots:
            rows[r0:r1, field] = self._count(r1 - r0) + first
        if inverted is not None:
            for i in range(m):
                if entries[i][2][0] == _Z:
                    rows[row_at[i]:row_at[i + 1], FLAGS] = inverted[bounds[i]:bounds[i + 1]] * FLAG_INVERT
        # positions: batch by batch, in order
        free = self.free
        pos = np.empty(total, dtype=np.int64)
        wrote = -1  # the highest position of a record-writing row
        done = 0  # rows written to the builder
        lengths = np.diff(starts[lo:hi + 1])
        prev = np.maximum.reduceat(seen[bounds[0]:bounds[-1]], lengths.cumsum() - lengths).tolist()
        collapse_at = {i: c for i, *c in collapses}
        i = 0
        while i < m:
            if i in collapse_at:
                r, rec_first, rand_first = collapse_at[i]
                b.emit_rows(rows[done:r], pos[done:r])
                done = r
                wrote = max(wrote, self._collapse(entries[i], qubits[bounds[i]:bounds[i + 1]], inverted, bounds[i],
                                                   rec_first, rand_first))
                i += 1
                continue
            first_id = base + bounds[i]
            j = i + 1  # the batch: instructions i .. j - 1
            while j < m and prev[j] < first_id and j not in collapse_at:
                j += 1
            r0, r1 = row_at[i], row_at[j]
            a, p = qa[r0:r1], pos[r0:r1]
            free.take(a, out=p, mode="clip")
            if any_pair and any(pairs[i:j]):
                other = qb[r0:r1]
                np.maximum(p, free.take(other, mode="clip"), out=p)
                p1 = p + 1
                free[a] = p1
                free[other] = p1
            else:
                free[a] = p + 1
            i = j
        b.emit_rows(rows[done:], pos[done:])
        for r0, r1, field, _ in slots:
            if field == REC:
                wrote = max(wrote, int(pos[r0:r1].max()))
        self.touched.append(span)
        if wrote >= 0:
            self._wrote_record(wrote)
        if rec > rec0:
            b.add_record_keys(rec0, rec - rec0)

    def _collapse(self, entry, qubits: np.ndarray, inverted, at: int, rec: int, rand: int) -> int:
        """M / MR / R in the X or Y basis on distinct qubits: per target the basis change, the
        collapse and the change back, each on the next position of its qubit, interleaved as the
        per-target path writes them. Returns the highest position of a record row (-1: none)."""
        k = len(qubits)
        _, op, _, measures, (before, _, after) = entry[2]
        pos = self.free[qubits]
        self.free[qubits] = pos + 3
        count = self._count(k)
        flags = 0 if inverted is None else inverted[at:at + k] * FLAG_INVERT
        block = np.empty((k, 3, NUM_FIELDS), dtype=np.int32)
        block[:, 0] = self._block(k, before, qubits)
        block[:, 1] = self._block(k, op, qubits, rec=rec + count if measures else -1, rand=rand + count, flags=flags)
        block[:, 2] = self._block(k, after, qubits)
        self.b.emit_rows(block.reshape(3 * k, NUM_FIELDS), (pos[:, None] + np.arange(3)[None, :]).reshape(-1))
        return int(pos.max()) + 1 if measures else -1

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

    # -- errors ----------------------------------------------------------------------------------
    def _where(self, index: int) -> str:
        text = f"instruction {index}"
        for i, count in reversed(self.path):
            text += f" of the body of the REPEAT {count} block at instruction {i}"
        return text

    def _fail(self, inst, index: int, what: str, cls=errors.UnsupportedOperationError):
        text = str(inst)
        if len(text) > 200:
            text = text[:200] + " ..."
        error = cls(f"cannot compile stim instruction {text!r} at {self._where(index)}: {what}; {SUPPORTED}")
        # where it is, for whoever holds the circuit's text (the command line names the line):
        # the instruction's index in each enclosing REPEAT body, outermost first
        error.instruction_path = tuple(i for i, _ in self.path) + (index,)
        raise error

    # -- placement -------------------------------------------------------------------------------
    def _place(self, qs: Sequence[int]) -> int:
        p = 0
        for q in qs:
            v = self._free_at(q)
            if v > p:
                p = v
        for q in qs:
            self._take(q, p + 1)
        return p

    def _wrote_record(self, pos: int) -> None:
        if pos + 1 > self.rtop:
            self.rtop = pos + 1

    def _new_qubit(self) -> int:
        """A qubit past the circuit's, for the compiler's own use (`Program.qubits` never shows it)."""
        q = self.b.add_qubit()
        if q >= len(self.free):
            self.free = np.concatenate([self.free, np.zeros(len(self.free), dtype=np.int64)])
        return q

    def _scratch(self, i: int) -> int:
        """The scratch qubit of a herald's or MPAD's target i (in |0> before and after)."""
        k = i % _SCRATCH
        while len(self.scratch) <= k:
            self.scratch.append(self._new_qubit())
        return self.scratch[k]

    # -- the other instructions ------------------------------------------------------------------
    def _other(self, inst, index: int, name: str) -> None:
        b = self.b
        if name in _MEASURE or name in _MEASURE_RESET:
            reset = name in _MEASURE_RESET
            basis = (_MEASURE_RESET if reset else _MEASURE)[name]
            p = self._flip_probability(inst, index)
            for t in inst.targets_copy():
                self._measure(t.value, basis, reset, t.is_inverted_result_target, p)
        elif name in _RESET:
            basis = _RESET[name]
            for t in inst.targets_copy():
                q = t.value
                if basis == "Z":
                    b.reset(q, pos=self._place((q,)))
                else:
                    before, _, after = opcodes.LOWERED_BASIS["R" + basis]
                    b.gate(before, q, pos=self._place((q,)))
                    b.reset(q, pos=self._place((q,)))
                    b.gate(after, q, pos=self._place((q,)))
        elif name in _NOISE:
            self._noise(inst, index, name)
        elif name == "DETECTOR" or name == "OBSERVABLE_INCLUDE":
            self._annotation(inst, index, name)
        elif name == "SHIFT_COORDS":
            b.shift_coords(inst.gate_args_copy())
        elif name in _NOTHING:
            pass
        elif name == "MPP" or name in _PAIR_MEASURE:
            p = self._flip_probability(inst, index)
            letter = _PAIR_MEASURE.get(name)
            for i, group in enumerate(inst.target_groups()):
                sign, support = self._product(inst, index, group, letter)
                if support:
                    self._pauli_measure(support, sign, p)
                else:  # of +-I: a constant record, as Stim gives it
                    self._constant(i, sign, self._spec(inst, index, "X_ERROR", (p,)))
        elif name == "SPP" or name == "SPP_DAG":
            for group in inst.target_groups():
                sign, support = self._product(inst, index, group)
                if support:  # of +-I: a global phase, dropped as SPP's lowering drops its own
                    self._pauli_phase(support, sign ^ (name == "SPP_DAG"))
        elif name in _HERALDED:
            self._herald(inst, index, name)
        elif name == "MPAD":
            self._pad(inst, index)
        elif name == "ELSE_CORRELATED_ERROR":  # one that no chain took
            self._fail(inst, index, "ELSE_CORRELATED_ERROR must directly follow E / CORRELATED_ERROR or "
                                    "another ELSE_CORRELATED_ERROR (as Stim's detector error model requires)")
        else:
            self._fail(inst, index, f"{name} is not supported")

    def _flip_probability(self, inst, index: int) -> float:
        args = inst.gate_args_copy()
        p = float(args[0]) if args else 0.0
        if not 0 <= p <= 1:
            self._fail(inst, index, f"flip probability {p} outside [0, 1]")
        return p

    def _confusion(self, rec: int, q: int, p: float) -> None:
        pos = self._place((q,))
        self.b.confusion(rec, np.array([[1 - p, p], [p, 1 - p]]), pos=pos)
        self._wrote_record(pos)

    def _measure(self, q: int, basis: str, reset: bool, invert: bool, p: float) -> None:
        b = self.b
        if basis != "Z":
            before, _, after = opcodes.LOWERED_BASIS[("MR" if reset else "M") + basis]
            b.gate(before, q, pos=self._place((q,)))
        pos = self._place((q,))
        rec = b.measure(q, invert=invert, reset=reset, pos=pos)
        self._wrote_record(pos)
        if basis != "Z":
            b.gate(after, q, pos=self._place((q,)))
        if p > 0:
            self._confusion(rec, q, p)
        b.add_record_keys(rec, 1)

    def _product(self, inst, index: int, group, letter: Optional[int] = None) -> Tuple[bool, List[Tuple[int, int]]]:
        """A Pauli product's sign and support [(qubit, letter)], in target order (a qubit named
        twice multiplies its letters; empty for +-I); `letter` for MXX / MYY / MZZ's qubit targets."""
        log_i = 0
        acc: Dict[int, int] = {}
        for t in group:
            if letter is None:
                if t.is_combiner:
                    continue
                if not (t.is_x_target or t.is_y_target or t.is_z_target):
                    self._fail(inst, index, f"target {t!r} is not a Pauli target")
                pauli = _LETTER[t.pauli_type]
            else:
                pauli = letter
            if t.is_inverted_result_target:
                log_i += 2
            q = t.value
            old = acc.get(q, paulis.I)
            step, (new,) = paulis.multiply((0, (old,)), (0, (pauli,)))
            log_i += step
            acc[q] = new
        if log_i % 2:
            self._fail(inst, index, "the Pauli product is anti-Hermitian")
        return bool(log_i % 4), [(q, m) for q, m in acc.items() if m != paulis.I]

    def _parity(self, support: List[Tuple[int, int]]) -> List[Tuple[int, Tuple[int, ...]]]:
        """Rows that map the product onto Z of its first qubit (each row self-inverse)."""
        first = support[0][0]
        rows = [(_TO_Z[m], (q,)) for q, m in support if m in _TO_Z]
        rows += [(_CX, (q, first)) for q, _ in support[1:]]
        return rows

    def _rows(self, rows) -> None:
        emit = self.b.emit
        for code, qs in rows:
            emit(code, qs[0], qs[1] if len(qs) > 1 else -1, pos=self._place(qs))

    def _pauli_measure(self, support, sign: bool, p: float) -> None:
        """Basis change, CX parity onto the first qubit, M, undo (lowerings.pauli_measurement)."""
        rows = self._parity(support)
        first = support[0][0]
        self._rows(rows)
        pos = self._place((first,))
        rec = self.b.measure(first, invert=sign, pos=pos)
        self._wrote_record(pos)
        self._rows(reversed(rows))
        if p > 0:
            self._confusion(rec, first, p)
        self.b.add_record_keys(rec, 1)

    def _pauli_phase(self, support, dagger: bool) -> None:
        """SPP: exp(i pi/4 (1 - P)), i.e. S on the product's parity (S_DAG for SPP_DAG or -P)."""
        rows = self._parity(support)
        first = support[0][0]
        self._rows(rows)
        self.b.gate("S_DAG" if dagger else "S", first, pos=self._place((first,)))
        self._rows(reversed(rows))

    def _feedback(self, inst, index: int, name: str, ta, tb) -> None:
        """A Pauli on the qubit where an earlier record is 1 (lowerings.feedback_pauli). A pair with
        a sweep[k] control does nothing: sweep bits are all 0 here, as in Stim's samplers, which take
        none. So does a pair of two records: a controlled phase between classical bits changes
        neither (Stim refuses the other record-record pairs)."""
        sides = _FEEDBACK_SIDES[name]
        if ta.is_sweep_bit_target or tb.is_sweep_bit_target or not (ta.is_qubit_target or tb.is_qubit_target):
            return
        rec_side = 0 if ta.is_measurement_record_target else 1
        if sides[rec_side] != "Z":
            self._fail(inst, index, "a record controls only the Z side of a controlled gate")
        control, target = (ta, tb) if rec_side == 0 else (tb, ta)
        b = self.b
        rec = b.num_records + control.value
        if rec < 0:
            self._fail(inst, index, f"rec[{control.value}] looks back before the first measurement",
                       errors.MeasurementKeyError)
        cid = b.condition([(rec, b.depth)], [False, True])
        q = target.value
        pos = max(self.rtop, self._free_at(q))
        self._take(q, pos + 1)
        b.emit(_PAULI_CODE[_LETTER[sides[1 - rec_side]]], q, -1, cond=cid, pos=pos)

    # -- noise -----------------------------------------------------------------------------------
    def _spec(self, inst, index: int, name: str, args: Tuple[float, ...], letters=None):
        """(opcode, channel id, ext paulis) of a Pauli channel, as the Cirq compiler builds the
        same channel of stimcirq's conversion; None when it does nothing."""
        key = (name, args, letters)
        if key in self.specs:
            return self.specs[key]
        if any(p < 0 for p in args):
            self._fail(inst, index, "negative probability")
        try:
            if name in ("DEPOLARIZE1", "DEPOLARIZE2"):
                spec = channels.depolarize(types.SimpleNamespace(p=args[0]), 1 if name == "DEPOLARIZE1" else 2)
            elif name in ("X_ERROR", "Y_ERROR", "Z_ERROR"):
                spec = channels.spec_from_outcomes({(_LETTER[name[0]],): args[0]}, 1, name)
            elif name == "PAULI_CHANNEL_1":
                spec = channels.spec_from_outcomes(
                    {(paulis.X,): args[0], (paulis.Y,): args[1], (paulis.Z,): args[2]}, 1, name)
            elif name == "PAULI_CHANNEL_2":
                spec = channels.spec_from_outcomes(dict(zip(channels.TWO_QUBIT_ORDER, args)), 2, name)
            elif name in _HERALDED:  # on (scratch qubit, qubit): the herald's X with each Pauli
                probs = (args[0] / 4,) * 4 if name == "HERALDED_ERASE" else args
                spec = channels.spec_from_outcomes(
                    {(paulis.X, letter): p for letter, p in zip((paulis.I, paulis.X, paulis.Y, paulis.Z), probs)},
                    2, name)
            else:  # E: one Pauli product
                spec = channels.spec_from_outcomes({letters: args[0]}, len(letters), name)
        except errors.UnsupportedOperationError as error:
            self._fail(inst, index, str(error))
        found = None
        if spec is not None:
            channel = self.b.channel_id(spec.arity, spec.probs, spec.paulis)
            ext = tuple(spec.paulis[0]) if len(spec.probs) == 1 else None
            found = (spec.opname, channel, ext)
        self.specs[key] = found
        return found

    def _noise(self, inst, index: int, name: str) -> None:
        found = self._spec(inst, index, name, tuple(inst.gate_args_copy()))
        if found is None:
            return
        opname, channel, ext = found
        targets = [t.value for t in inst.targets_copy()]
        b = self.b
        if opcodes.BY_NAME[opname].arity == 0:  # one-outcome PAULI_CHANNEL_2: Stim's E
            for k in range(0, len(targets), 2):
                qs = targets[k:k + 2]
                b.noise(opname, qs, channel, pos=self._place(qs), ext_paulis=ext)
            return
        code = _CODE[opname]
        emit = b.emit
        if name in ("DEPOLARIZE2", "PAULI_CHANNEL_2"):
            for k in range(0, len(targets), 2):
                qa, qb = targets[k], targets[k + 1]
                p = max(self._free_at(qa), self._free_at(qb))
                self._take(qa, p + 1)
                self._take(qb, p + 1)
                emit(code, qa, qb, -1, b.take_rand(), channel, pos=p)
        else:
            for q in targets:
                p = self._free_at(q)
                self._take(q, p + 1)
                emit(code, q, -1, -1, b.take_rand(), channel, pos=p)

    def _herald(self, inst, index: int, name: str) -> None:
        """HERALDED_ERASE / HERALDED_PAULI_CHANNEL_1: per target, a channel on (scratch qubit,
        qubit) whose every outcome flips the scratch qubit and applies its Pauli to the qubit, then
        an MR of the scratch qubit: the herald, a record in target order (Stim ignores an inverted
        target here)."""
        found = self._spec(inst, index, name, tuple(inst.gate_args_copy()))
        for i, t in enumerate(inst.targets_copy()):
            s = self._scratch(i)
            self._emit_noise(found, [s, t.value])
            self._measure(s, "Z", True, False, 0.0)

    def _pad(self, inst, index: int) -> None:
        """MPAD: per target its bit, flipped with the flip probability."""
        flip = self._spec(inst, index, "X_ERROR", (self._flip_probability(inst, index),))
        for i, t in enumerate(inst.targets_copy()):
            self._constant(i, t.value == 1, flip)

    def _constant(self, i: int, value: bool, flip) -> None:
        """A record of `value` (MPAD, a measurement of +-I): an MR of scratch qubit i, inverted for a
        1, after `flip` (`_spec`'s X_ERROR of the flip probability, or None) on it."""
        s = self._scratch(i)
        self._emit_noise(flip, [s])
        self._measure(s, "Z", True, value, 0.0)

    @staticmethod
    def _error_product(inst) -> Tuple[List[int], Tuple[int, ...]]:
        """The qubits and letters of an E / ELSE_CORRELATED_ERROR product (a qubit named twice
        multiplies its letters; qubits left with the identity are dropped)."""
        order: List[int] = []
        acc: Dict[int, int] = {}
        for t in inst.targets_copy():
            q = t.value
            if q not in acc:
                order.append(q)
                acc[q] = paulis.I
            acc[q] = int(paulis.multiply((0, (acc[q],)), (0, (_LETTER[t.pauli_type],)))[1][0])
        qs = [q for q in order if acc[q] != paulis.I]
        return qs, tuple(acc[q] for q in qs)

    def _correlated_chain(self, circuit, inst, index: int) -> int:
        """E(p1) P1 and the ELSE_CORRELATED_ERROR(p_k) P_k lines directly after it in the same block:
        P1 with probability p1, else P2 with p2, and so on (a link fires only where no earlier one
        did). Returns the index of the first instruction after the chain.

        A lone E is one Pauli product (the arity-0 E opcode; a single letter is X_ERROR / Y_ERROR /
        Z_ERROR, as the Cirq compiler makes stimcirq's conversion). A chain is one channel on the
        union of its qubits: outcome k is P_k with probability p_k * prod_{i<k} (1 - p_i), so the
        links share one draw and exclude each other exactly as Stim's samplers make them."""
        links = [(inst, index)]
        end = index + 1
        while end < len(circuit):
            nxt = circuit[end]
            if isinstance(nxt, self.stim.CircuitRepeatBlock) or \
                    self.table.get(nxt.name, ("N", nxt.name))[1] != "ELSE_CORRELATED_ERROR":
                break
            links.append((nxt, end))
            end += 1
        if len(links) == 1:
            qs, letters = self._error_product(inst)
            if qs:
                self._emit_noise(self._spec(inst, index, "E", tuple(inst.gate_args_copy()), letters), qs)
            return end
        union: List[int] = []
        products = []
        remaining = 1.0  # the probability that no link so far fired
        for link, at in links:
            p = float(link.gate_args_copy()[0])
            if not 0 <= p <= 1:
                self._fail(link, at, f"probability {p} outside [0, 1]")
            qs, letters = self._error_product(link)
            union += [q for q in qs if q not in union]
            products.append((dict(zip(qs, letters)), remaining * p))
            remaining *= 1 - p
        outcomes: Dict[Tuple[int, ...], float] = {}
        for acc, p in products:
            letters = tuple(acc.get(q, paulis.I) for q in union)
            if any(letters) and p > 0:  # an identity link still takes its share from the later ones
                outcomes[letters] = outcomes.get(letters, 0.0) + p
        if outcomes:
            spec = channels.spec_from_outcomes(outcomes, len(union), "ELSE_CORRELATED_ERROR")
            channel = self.b.channel_id(spec.arity, spec.probs, spec.paulis)
            self._emit_noise((spec.opname, channel, tuple(spec.paulis[0]) if len(spec.probs) == 1 else None), union)
        return end

    def _emit_noise(self, found, qs: List[int]) -> None:
        """One noise row of `_spec`'s (opcode, channel id, ext paulis) on qubits qs (None: nothing)."""
        if found is None:
            return
        opname, channel, ext = found
        if opcodes.BY_NAME[opname].arity == 0:
            self.b.noise(opname, qs, channel, pos=self._place(qs), ext_paulis=ext)
        else:
            self.b.noise(opname, qs, channel, pos=self._place(qs))

    # -- annotations -----------------------------------------------------------------------------
    def _annotation_objects(self, circuit, lo: int, insts: List[object]) -> None:
        """`_annotation_run` of instructions `insts`, lo, lo + 1, ... of `circuit` (the object walk)."""
        if len(insts) < _ANNOTATION_RUN_MIN:
            self._flush_segment()
            for i, inst in enumerate(insts):
                self._annotation(inst, lo + i, inst.name)
            return
        self._annotation_run(circuit, lo, lo + len(insts), _encoded(str(circuit[lo:lo + len(insts)])))

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
                # plus the offset of SHIFT_COORDS so far, on the coordinates each has (`_annotation`)
                shift = np.zeros(coords.shape[1])
                offset = b.coord_offset[:coords.shape[1]]
                shift[:len(offset)] = offset
                if (widths == coords.shape[1]).all():
                    coords += shift
                else:
                    coords = np.where(np.arange(coords.shape[1])[None, :] < widths[:, None], coords + shift, 0.0)
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

    def _annotation(self, inst, index: int, name: str) -> None:
        b = self.b
        records, terms = [], []
        for t in inst.targets_copy():
            if t.is_measurement_record_target:
                r = b.num_records + t.value
                if r < 0:
                    self._fail(inst, index, f"rec[{t.value}] looks back before the first measurement",
                               errors.MeasurementKeyError)
                records.append(r)
            elif name == "OBSERVABLE_INCLUDE" and (t.is_x_target or t.is_y_target or t.is_z_target):
                terms.append((t.value, _LETTER[t.pauli_type]))  # its sign changes no flip: ignored, as Stim does
            else:
                self._fail(inst, index, f"target {t!r} of {name} is not supported")
        args = inst.gate_args_copy()
        if name == "DETECTOR":
            offset = b.coord_offset
            coords = tuple(float(c) + (offset[i] if i < len(offset) else 0.0) for i, c in enumerate(args))
            b.add_annotation("detector", records, coords)
            return
        k = int(args[0]) if args else 0
        b.add_annotation("observable", records, (), k)
        for q, letter in terms:
            self._pauli_term(q, letter, k)

    def _pauli_term(self, q: int, letter: int, k: int) -> None:
        """A Pauli target of OBSERVABLE_INCLUDE(k): as Stim's samplers, the observable flips where the
        frame anticommutes with it, nothing collapses. A FRAME_PARITY row XORs that parity into the X
        frame of the observable's own qubit, measured when detection events are sampled
        (`Program.with_pauli_readout`)."""
        acc = self.accumulators.get(k)
        if acc is None:
            acc = self.accumulators[k] = self._new_qubit()
        self.b.emit(_PARITY_CODE[letter], q, acc, pos=self._place((q, acc)))
