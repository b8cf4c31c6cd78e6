"""Step 1 for Stim circuits: `stim.Circuit` -> `Program`, straight from Stim's instructions.

`compile_stim(circuit)` writes the Program through the `core.program.ProgramBuilder`, without
building Cirq objects, so every engine samples Stim circuits; compiling the same circuit again is
a cache hit. Stim is an optional dependency: it is imported inside the function only.

Conventions
-----------
- Qubits: program qubit i is Stim qubit i; `Program.qubits` is `cirq.LineQubit(i)` for i in
  `range(circuit.num_qubits)` (QUBIT_COORDS are ignored).
- Loops: a REPEAT block is one loop of the Program (`begin_loop` / `end_loop`), its body compiled
  once, never unrolled (REPEAT 1 is inlined).
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
PAULI_CHANNEL_1, PAULI_CHANNEL_2, E / CORRELATED_ERROR, I_ERROR / II_ERROR (nothing); CX / CY / CZ
/ XCZ / YCZ with a ``rec[-k]`` control (a classically controlled Pauli); DETECTOR,
OBSERVABLE_INCLUDE (records only), SHIFT_COORDS, QUBIT_COORDS (ignored), TICK, REPEAT.

Refused with `UnsupportedOperationError` naming the instruction, its position and this list:
ELSE_CORRELATED_ERROR, HERALDED_ERASE, HERALDED_PAULI_CHANNEL_1, MPAD (a record without a qubit),
measurements of the identity or of anti-Hermitian products, ``sweep[k]`` controls, OBSERVABLE_INCLUDE
with Pauli targets, and any instruction Stim adds later.
"""

from __future__ import annotations

import collections
import threading
import types
from typing import Dict, List, Optional, Sequence, Tuple

import cirq
import numpy as np

from .. import errors
from ..core import opcodes, paulis
from ..core.program import Program, ProgramBuilder
from . import cache, channels

__all__ = ["compile_stim", "clear_stim_cache"]

SUPPORTED = (
    "supported: Stim's unitary gates with an opcode (all of core.opcodes' unitaries, under any alias), "
    "I, II, SPP, SPP_DAG; M, MX, MY, MR, MRX, MRY, R, RX, RY (inverted targets, flip probability); "
    "MPP, MXX, MYY, MZZ; X_ERROR, Y_ERROR, Z_ERROR, DEPOLARIZE1, DEPOLARIZE2, PAULI_CHANNEL_1, "
    "PAULI_CHANNEL_2, E / CORRELATED_ERROR, I_ERROR, II_ERROR; CX / CY / CZ / XCZ / YCZ with a rec[-k] "
    "control; DETECTOR, OBSERVABLE_INCLUDE (records), SHIFT_COORDS, QUBIT_COORDS, TICK, REPEAT")

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
_REFUSED = {
    "ELSE_CORRELATED_ERROR": "ELSE_CORRELATED_ERROR is not supported (its outcome depends on "
                             "whether the previous E fired)",
    "HERALDED_ERASE": "heralded noise is not supported",
    "HERALDED_PAULI_CHANNEL_1": "heralded noise is not supported",
    "MPAD": "MPAD (a record written without a qubit) is not supported",
}

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
    """The Program of a `stim.Circuit` (cached by the circuit's text; see the module docstring).

    The returned Program is shared with the cache; treat it as read-only."""
    import stim  # optional dependency: never imported by `import cirq_quasarq`

    if not isinstance(circuit, stim.Circuit):
        raise errors.InvalidInputError(f"compile_stim takes a stim.Circuit, got {type(circuit).__name__}")
    with _RECENT_LOCK:
        recent = _RECENT.get(id(circuit))
    if recent is not None and recent[0] is circuit and recent[1] == circuit:  # unchanged since
        return recent[2]
    key = str(circuit)
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[1] == circuit:  # the text rounds arguments: equal circuits only
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


class _StimCompiler:
    """One compilation: the builder, the positions of the open step and where the walk is."""

    def __init__(self, stim, num_qubits: int):
        self.stim = stim
        self.table = _table(stim)
        self.n = num_qubits
        self.b = ProgramBuilder(num_qubits)
        self.free: Dict[int, int] = {}  # qubit -> first free position in the open step
        self.rtop = 0  # first position after every record-writing row of the open step
        self.path: List[Tuple[int, int]] = []  # (instruction index, repeat count) of open REPEATs
        self.specs: Dict[Tuple, Optional[Tuple[int, int, Optional[Tuple[int, ...]]]]] = {}
        self.moment_rows: List[int] = []
        self.moment_records: List[int] = []

    # -- the walk ------------------------------------------------------------------------------
    def run(self, circuit) -> Program:
        self._moment()
        self._walk(circuit, top=True)
        self._close()
        rows, recs = self.moment_rows, self.moment_records
        if rows and rows[-1] == self.b.num_rows() and recs[-1] == self.b.num_records:
            rows.pop(), recs.pop()  # no trailing empty moment
        qubits = tuple(cirq.LineQubit(i) for i in range(self.n))
        return self.b.build(qubits, rows, recs)

    def _close(self) -> None:
        """Close the open step (if anything was placed in it)."""
        if self.free:
            self.b.next_step()
            self.free.clear()
            self.rtop = 0

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
        free = self.free
        for index, inst in enumerate(circuit):
            if isinstance(inst, repeat_block):
                self._repeat(inst, index, top)
                continue
            name = inst.name
            kind, data = table.get(name, ("N", name))
            if kind == "U1":
                for t in inst.targets_copy():
                    q = t.value
                    p = free.get(q, 0)
                    free[q] = p + 1
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
                    pa, pb = free.get(qa, 0), free.get(qb, 0)
                    p = pa if pa > pb else pb
                    free[qa] = free[qb] = p + 1
                    emit(data, qa, qb, pos=p)
            elif data == "TICK":
                if top:
                    self._moment()
                else:
                    self._close()
            else:
                self._other(inst, index, data)

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
        raise cls(f"cannot compile stim instruction {text!r} at {self._where(index)}: {what}; {SUPPORTED}")

    # -- placement -------------------------------------------------------------------------------
    def _place(self, qs: Sequence[int]) -> int:
        free = self.free
        p = 0
        for q in qs:
            v = free.get(q, 0)
            if v > p:
                p = v
        for q in qs:
            free[q] = p + 1
        return p

    def _wrote_record(self, pos: int) -> None:
        if pos + 1 > self.rtop:
            self.rtop = pos + 1

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
        elif name == "MPP":
            p = self._flip_probability(inst, index)
            for group in inst.target_groups():
                sign, support = self._product(inst, index, group)
                self._pauli_measure(support, sign, p)
        elif name in _PAIR_MEASURE:
            p = self._flip_probability(inst, index)
            letter = _PAIR_MEASURE[name]
            for group in inst.target_groups():
                sign, support = self._product(inst, index, group, letter)
                self._pauli_measure(support, sign, p)
        elif name == "SPP" or name == "SPP_DAG":
            for group in inst.target_groups():
                sign, support = self._product(inst, index, group)
                self._pauli_phase(support, sign ^ (name == "SPP_DAG"))
        elif name == "E":
            self._correlated_error(inst, index)
        elif name in _REFUSED:
            self._fail(inst, index, _REFUSED[name])
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
        twice multiplies its letters); `letter` for MXX / MYY / MZZ's qubit targets."""
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
        support = [(q, m) for q, m in acc.items() if m != paulis.I]
        if not support:
            self._fail(inst, index, "a measurement of the identity (a record without a qubit) is "
                                    "not supported")
        return bool(log_i % 4), support

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
        """A Pauli on the qubit where an earlier record is 1 (lowerings.feedback_pauli)."""
        sides = _FEEDBACK_SIDES[name]
        if ta.is_sweep_bit_target or tb.is_sweep_bit_target:
            self._fail(inst, index, "sweep[k] controls are not supported (no sweep bits are given)")
        if ta.is_qubit_target == tb.is_qubit_target:
            self._fail(inst, index, "two classical controls")
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
        pos = max(self.rtop, self.free.get(q, 0))
        self.free[q] = pos + 1
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
        emit, free = b.emit, self.free
        if name in ("DEPOLARIZE2", "PAULI_CHANNEL_2"):
            for k in range(0, len(targets), 2):
                qa, qb = targets[k], targets[k + 1]
                pa, pb = free.get(qa, 0), free.get(qb, 0)
                p = pa if pa > pb else pb
                free[qa] = free[qb] = p + 1
                emit(code, qa, qb, -1, b.take_rand(), channel, pos=p)
        else:
            for q in targets:
                p = free.get(q, 0)
                free[q] = p + 1
                emit(code, q, -1, -1, b.take_rand(), channel, pos=p)

    def _correlated_error(self, inst, index: int) -> None:
        """E(p) P: one Pauli product with probability p (the arity-0 E opcode; a single letter is
        X_ERROR / Y_ERROR / Z_ERROR, as the Cirq compiler makes stimcirq's conversion)."""
        order: List[int] = []
        acc: Dict[int, int] = {}
        for t in inst.targets_copy():
            q = t.value
            if q not in acc:
                order.append(q)
                acc[q] = paulis.I
            acc[q] = int(paulis.multiply((0, (acc[q],)), (0, (_LETTER[t.pauli_type],)))[1][0])
        qs = [q for q in order if acc[q] != paulis.I]
        if not qs:
            return
        letters = tuple(acc[q] for q in qs)
        found = self._spec(inst, index, "E", tuple(inst.gate_args_copy()), letters)
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
        records = []
        for t in inst.targets_copy():
            if not t.is_measurement_record_target:
                self._fail(inst, index, f"{name} with Pauli targets is not supported")
            r = b.num_records + t.value
            if r < 0:
                self._fail(inst, index, f"rec[{t.value}] looks back before the first measurement",
                           errors.MeasurementKeyError)
            records.append(r)
        args = inst.gate_args_copy()
        if name == "DETECTOR":
            offset = b.coord_offset
            coords = tuple(float(c) + (offset[i] if i < len(offset) else 0.0) for i, c in enumerate(args))
            b.add_annotation("detector", records, coords)
        else:
            b.add_annotation("observable", records, (), int(args[0]) if args else 0)
