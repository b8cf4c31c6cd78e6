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
  any basis without a flip probability, Pauli channels) is parsed from its text as one array and
  written as one block of rows (`ProgramBuilder.emit_rows`); consecutive such instructions on
  disjoint qubits take their positions together. The rest, and an instruction naming a qubit twice,
  go target by target; `_StimCompiler(..., whole_instructions=False)` takes that path for all, and
  tests check that both give the same Program.
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
import threading
import types
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import errors
from ..core import opcodes, paulis
from ..core.program import A, AUX, B, COND, FLAG_INVERT, FLAGS, NUM_FIELDS, OP, RAND, REC, Program, ProgramBuilder
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
_HERALDED = {"HERALDED_ERASE", "HERALDED_PAULI_CHANNEL_1"}
_PARITY_CODE = {paulis.X: _CODE["FRAME_PARITY_X"], paulis.Y: _CODE["FRAME_PARITY_Y"],
                paulis.Z: _CODE["FRAME_PARITY_Z"]}
# Scratch qubits of heralds and MPAD at most (target i of an instruction takes scratch qubit i mod
# this): a layer of heralds takes a few positions, not two per target, while tableau mode, quadratic
# in the qubits, grows little.
_SCRATCH = 64

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


class _StimCompiler:
    """One compilation: the builder, the positions of the open step and where the walk is.

    With `whole_instructions` (the default) an instruction whose targets are all plain qubits
    (unitaries, M / MR / R in any basis without a flip probability, Pauli channels) is compiled as
    one block of rows from its targets parsed as one array; the rest, and instructions that name a
    qubit twice, go target by target. Both give the same Program (tests/test_stim_circuit.py)."""

    def __init__(self, stim, num_qubits: int, whole_instructions: bool = True):
        self.stim = stim
        self.table = _table(stim)
        self.n = num_qubits
        self.b = ProgramBuilder(num_qubits)
        self.whole = whole_instructions
        self.free = np.zeros(max(1, num_qubits), dtype=np.int64)  # qubit -> first free position in the open step
        self.touched: List[object] = []  # qubits (ints, arrays) given a position in the open step
        self.mark = np.full(max(1, num_qubits), -1, dtype=np.int64)  # scratch of `_distinct`
        self.counting = np.arange(1024, dtype=np.int64)  # `_count`
        # whole instructions waiting for their positions (`_whole`, `_flush_batch` says the entries'
        # fields); `owner` marks the batch's qubits with `batch_id`
        self.batch: List[tuple] = []
        self.owner = np.full(max(1, num_qubits), -1, dtype=np.int64)
        self.batch_id = 0
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
        self._walk(circuit, top=True)
        self._flush_batch()
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
        table = self.table
        repeat_block = self.stim.CircuitRepeatBlock
        b = self.b
        emit = b.emit
        chain_end = 0  # instructions before it were compiled as part of an E ... ELSE chain
        for index, inst in enumerate(circuit):
            if index < chain_end:
                continue
            if isinstance(inst, repeat_block):
                self._flush_batch()
                self._repeat(inst, index, top)
                continue
            name = inst.name
            kind, data = table.get(name, ("N", name))
            if self.whole and self._whole(inst, index, kind, data):
                continue
            self._flush_batch()
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
                chain_end = self._correlated_chain(circuit, inst, index)
            else:
                self._other(inst, index, data)

    # -- whole instructions ----------------------------------------------------------------------
    @staticmethod
    def _targets_text(line: str) -> Optional[str]:
        """The targets of one instruction's text ('NAME 0 !3 5', 'NAME(0.1, 0.2) 0 1') when they are
        all plain qubits, perhaps inverted; None for a tagged instruction or any other target."""
        cut = line.find(")") + 1 if "(" in line else line.find(" ")
        if cut <= 0:
            cut = len(line)
        head, rest = line[:cut], line[cut + 1 :]
        # a tag is '[...]' in the head; rec[-k] and sweep[k] hold '[', Pauli targets a letter,
        # products '*': none of them is plain
        if "[" in head or "[" in rest or "*" in rest or "X" in rest or "Y" in rest or "Z" in rest:
            return None
        return rest

    def _plain_targets(self, inst):
        """(qubits int64 [k], inverted bool [k] or None) of an instruction whose targets are all
        qubits, perhaps inverted, parsed from its text as one array; None otherwise."""
        if inst.tag:
            return None
        rest = self._targets_text(str(inst))
        if rest is None:
            return None
        which = None
        if "!" in rest:
            raw = np.frombuffer(rest.encode(), dtype=np.uint8)
            which = np.searchsorted(np.flatnonzero(raw == 32), np.flatnonzero(raw == 33))  # token of each '!'
            rest = rest.replace("!", "")
        qubits = np.fromstring(rest, dtype=np.int64, sep=" ") if rest else np.zeros(0, dtype=np.int64)
        if len(qubits) != (rest.count(" ") + 1 if rest else 0):  # not the format this reads: per target
            return None
        if which is None:
            return qubits, None
        inverted = np.zeros(len(qubits), dtype=bool)
        inverted[which] = True
        return qubits, inverted

    def _count(self, k: int) -> np.ndarray:
        """0, 1, ..., k - 1 (a view of one array that grows)."""
        if len(self.counting) < k:
            self.counting = np.arange(2 * k, dtype=np.int64)
        return self.counting[:k]

    def _distinct(self, qubits: np.ndarray) -> bool:
        """Whether no qubit appears twice (a scratch mark per qubit: the last writer wins)."""
        order = self._count(len(qubits))
        self.mark[qubits] = order
        return bool((self.mark[qubits] == order).all())

    def _block(self, k: int, op, a: np.ndarray, rec=-1, rand=-1, flags=0) -> np.ndarray:
        """k one-qubit rows of one opcode on qubits `a`, STEP left for the builder (`rec`, `rand`,
        `flags`: a value for all rows, or an array of k)."""
        rows = np.empty((k, NUM_FIELDS), dtype=np.int32)
        rows[:] = (op, -1, -1, -1, -1, -1, self.b.cond, 0, 0)
        rows[:, A] = a
        for field, value in ((REC, rec), (RAND, rand), (FLAGS, flags)):
            rows[:, field] = value
        return rows

    def _whole(self, inst, index: int, kind: str, data) -> bool:
        """Compile `inst` (its table entry `kind`, `data`: an opcode, or the canonical name) as one
        block of rows where it may be (see the class docstring): the rows, positions, record and
        random slots the per-target path gives. False: it did nothing.

        Consecutive such instructions on disjoint qubits gather in a batch (`self.batch`): their rows
        take their positions together when the batch is flushed (before any other instruction)."""
        name = data
        found = None
        collapse = name in _MEASURE or name in _MEASURE_RESET or name in _RESET
        if collapse:
            args = inst.gate_args_copy()
            if args and args[0] != 0:  # a flip probability: per target (a confusion row each)
                return False
        elif name in _NOISE:
            found = self._spec(inst, index, name, tuple(inst.gate_args_copy()))
            if found is None:  # a channel that never fires: no rows, no positions taken
                return True
            if opcodes.BY_NAME[found[0]].arity == 0:
                return False
        elif kind not in ("U1", "U2"):
            return False
        parsed = self._plain_targets(inst)
        if parsed is None:
            return False
        qubits, inverted = parsed
        if not len(qubits):
            return True
        if (inverted is not None and not collapse) or not self._distinct(qubits):
            return False
        if collapse and (_RESET.get(name) or _MEASURE_RESET.get(name) or _MEASURE.get(name)) != "Z":
            self._flush_batch()
            self._collapses(name, qubits, inverted)
            return True
        if self.batch and (self.owner[qubits] == self.batch_id).any():  # shares a qubit with the batch
            self._flush_batch()
        self.owner[qubits] = self.batch_id
        b = self.b
        pair = kind == "U2" or name in ("DEPOLARIZE2", "PAULI_CHANNEL_2")
        first, second = (qubits[0::2], qubits[1::2]) if pair else (qubits, None)
        k = len(first)
        code, rec, rand, aux, flags = name, -1, -1, -1, None
        if kind not in ("U1", "U2"):
            rand = b.take_rand(k)  # random slots (and records) in target order
            if not collapse:  # a Pauli channel
                code, aux = _CODE[found[0]], found[1]
            else:  # M, MR or R in the Z basis
                reset = name in _RESET
                code = _CODE["R" if reset else ("MR" if name in _MEASURE_RESET else "M")]
                if not reset:
                    rec = b.take_records(k)
                    b.add_record_keys(rec, k)
                flags = inverted
        self.batch.append((code, first, second, rec, rand, aux, flags))
        return True

    def _flush_batch(self) -> None:
        """Give the batch's rows their positions (the qubits of a batch are distinct) and write them,
        built column by column: (opcode, first qubits, second qubits or None, first record or -1,
        first random slot or -1, aux, inverted targets or None) an instruction."""
        batch = self.batch
        if not batch:
            return
        self.batch = []
        self.batch_id += 1
        sizes = np.array([len(item[1]) for item in batch])
        total = int(sizes.sum())
        first = np.concatenate([item[1] for item in batch]) if len(batch) > 1 else batch[0][1]
        paired = [item[2] is not None for item in batch]
        second = (np.concatenate([item[1] if item[2] is None else item[2] for item in batch]) if any(paired)
                  else first)
        rows = np.empty((total, NUM_FIELDS), dtype=np.int32)
        rows[:, OP] = np.repeat([item[0] for item in batch], sizes)
        rows[:, A] = first
        rows[:, B] = second if all(paired) else (
            np.where(np.repeat(paired, sizes), second, -1) if any(paired) else -1)
        local = self._count(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # a target's index in its instruction
        for field, at in ((REC, 3), (RAND, 4)):
            starts = np.array([item[at] for item in batch])
            rows[:, field] = -1 if (starts < 0).all() else np.where(np.repeat(starts >= 0, sizes),
                                                                     np.repeat(starts, sizes) + local, -1)
        rows[:, AUX] = np.repeat([item[5] for item in batch], sizes)
        rows[:, COND] = self.b.cond
        inverted = [item[6] for item in batch]
        rows[:, FLAGS] = 0 if all(f is None for f in inverted) else np.concatenate(
            [np.zeros(len(item[1]), dtype=bool) if f is None else f for item, f in zip(batch, inverted)]) * FLAG_INVERT
        free = self.free
        pos = np.maximum(free[first], free[second]) if second is not first else free[first]
        free[first] = pos + 1
        if second is not first:
            free[second] = pos + 1
            self.touched.append(second)
        self.touched.append(first)
        self.b.emit_rows(rows, pos)
        records = [item[3] >= 0 for item in batch]
        if any(records):
            written = pos if all(records) else pos[np.repeat(records, sizes)]
            self._wrote_record(int(written.max()))

    def _collapses(self, name: str, qubits: np.ndarray, inverted) -> None:
        """M / MR / R in the X or Y basis on distinct qubits (the Z basis goes in a batch): per target
        the basis change, the collapse and the change back, each on the next position of its qubit,
        interleaved as the per-target path writes them; records and random slots in target order."""
        b, free = self.b, self.free
        k = len(qubits)
        reset = name in _RESET
        basis = _RESET[name] if reset else _MEASURE_RESET.get(name) or _MEASURE[name]
        op = "R" if reset else ("MR" if name in _MEASURE_RESET else "M")
        pos = free[qubits]
        free[qubits] = pos + 3
        self.touched.append(qubits)
        rand = b.take_rand(k) + self._count(k)
        rec = -1 if reset else b.take_records(k) + self._count(k)
        flags = 0 if inverted is None else np.where(inverted, FLAG_INVERT, 0)
        before, _, after = opcodes.LOWERED_BASIS[op + basis]
        block = np.empty((k, 3, NUM_FIELDS), dtype=np.int32)
        block[:, 0] = self._block(k, _CODE[before], qubits)
        block[:, 1] = self._block(k, _CODE[op], qubits, rec=rec, rand=rand, flags=flags)
        block[:, 2] = self._block(k, _CODE[after], qubits)
        b.emit_rows(block.reshape(3 * k, NUM_FIELDS), (pos[:, None] + np.arange(3)[None, :]).reshape(-1))
        if not reset:
            self._wrote_record(int(pos.max()) + 1)
            b.add_record_keys(int(rec[0]), k)

    def _repeat(self, block, index: int, top: bool) -> None:
        count = block.repeat_count
        self.path.append((index, count))
        body = block.body_copy()
        if count == 1:
            self._walk(body, top)
        else:
            if top:
                self._moment()
            self._close()
            self.b.begin_loop(count)
            self._walk(body)
            self._flush_batch()
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
        b.add_key(str(rec), (rec,))

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
        self.b.add_key(str(rec), (rec,))

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
