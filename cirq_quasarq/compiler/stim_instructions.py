"""Step 1 for Stim circuits, one instruction at a time: Stim's instruction tables, and the compiler
of an instruction on its own.

`_table` maps every name and alias Stim knows to its kind; `_plain`, every instruction that may be
compiled whole to the rows it makes. `_InstructionCompiler` holds a compilation's state (the
`core.program.ProgramBuilder`, the positions of the open step, the open REPEAT blocks, the
channels, scratch qubits and observable qubits made so far) and compiles any instruction target by
target: unitaries, measurements and resets in any basis, Pauli products (MPP / SPP), classically
controlled Paulis, Pauli channels, E / ELSE chains, heralds, MPAD, DETECTOR / OBSERVABLE_INCLUDE.
`stim_circuit._StimCompiler` extends it with the walk and its bulk paths, which give the same
Program as this one (`whole_instructions=False`, `whole_annotations=False`). What each instruction
becomes, and what is refused: `stim_circuit`'s docstring.
"""

from __future__ import annotations

import types
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import errors
from ..core import opcodes, paulis
from ..core.program import ProgramBuilder
from . import channels

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


def noise_spec(name: str, args: Tuple[float, ...], letters=None) -> Optional[channels.NoiseSpec]:
    """The Pauli channel of a noise instruction with these arguments (`letters`: E's Pauli
    product), as the Cirq compiler builds it for stimcirq's conversion; None when it does nothing.
    Raises errors.UnsupportedOperationError (probabilities summing past 1)."""
    if name in ("DEPOLARIZE1", "DEPOLARIZE2"):
        return channels.depolarize(types.SimpleNamespace(p=args[0]), 1 if name == "DEPOLARIZE1" else 2)
    if name in ("X_ERROR", "Y_ERROR", "Z_ERROR"):
        return channels.spec_from_outcomes({(_LETTER[name[0]],): args[0]}, 1, name)
    if name == "PAULI_CHANNEL_1":
        return channels.spec_from_outcomes({(paulis.X,): args[0], (paulis.Y,): args[1], (paulis.Z,): args[2]}, 1, name)
    if name == "PAULI_CHANNEL_2":
        return channels.spec_from_outcomes(dict(zip(channels.TWO_QUBIT_ORDER, args)), 2, name)
    if name in _HERALDED:  # on (scratch qubit, qubit): the herald's X with each Pauli
        probs = (args[0] / 4,) * 4 if name == "HERALDED_ERASE" else args
        return channels.spec_from_outcomes(
            {(paulis.X, letter): p for letter, p in zip((paulis.I, paulis.X, paulis.Y, paulis.Z), probs)}, 2, name)
    return channels.spec_from_outcomes({letters: args[0]}, len(letters), name)  # E: one Pauli product


class _InstructionCompiler:
    """One compilation's state (the builder, the positions of the open step, the open REPEAT blocks)
    and every instruction compiled on its own, target by target (`_one`). `stim_circuit._StimCompiler`
    extends it with the walk over a circuit and its bulk paths."""

    def __init__(self, stim, num_qubits: int):
        self.stim = stim
        self.table = _table(stim)
        self.n = num_qubits
        self.b = ProgramBuilder(num_qubits)
        self.free = np.zeros(max(1, num_qubits), dtype=np.int64)  # qubit -> first free position in the open step
        self.touched: List[object] = []  # qubits (ints, arrays) given a position in the open step
        self.rtop = 0  # first position after every record-writing row of the open step
        self.path: List[Tuple[int, int]] = []  # (instruction index, repeat count) of open REPEATs
        self.specs: Dict[Tuple, Optional[Tuple[int, int, Optional[Tuple[int, ...]]]]] = {}
        self.moment_rows: List[int] = []
        self.moment_records: List[int] = []
        self.scratch: List[int] = []  # heralds' and MPAD's qubits past the circuit's, |0> between uses
        self.accumulators: Dict[int, int] = {}  # observable index -> the qubit its Pauli terms go to
        # Whether every row so far went to the next free position of its qubits in the one open step,
        # none of them a barrier: then the rows' STEP is the schedule's layer (core.program.LAYERED_FROM).
        # Cleared by a step closed on rows and by every path but the plain gates' and collapses'.
        self.layered = True

    # -- the open step ---------------------------------------------------------------------------
    def _close(self) -> None:
        """Close the open step (if anything was placed in it)."""
        if self.touched:
            self.layered = False
            self.b.next_step()
            free = self.free
            if sum(qs.size if isinstance(qs, np.ndarray) else 1 for qs in self.touched) >= len(free):
                free.fill(0)  # (a step of a large circuit's segments: 44 ms at 100k qubits, one at a time)
            else:
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

    # -- one instruction -------------------------------------------------------------------------
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
        self.layered = False
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
        self.layered = False
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
            spec = noise_spec(name, args, letters)
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
        self.layered = False
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
