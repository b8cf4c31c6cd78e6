"""Lowerings the compiler does itself: measurements, resets, noise, classical control, stimcirq.

Mixed into `compile.Walker`; each handler is called as `handler(op, gate, scope, fr, base)` where
`fr` / `base` place the instructions after earlier ones of the same operation (see `place`).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import cirq
import numpy as np
import sympy

from .. import errors, opcodes
from ..program import FLAG_INVERT, Confusion
from . import stim_types
from .conditions import condition_table
from .template import resolve_chain

CODE = opcodes.CODE
_M, _R, _MR = CODE["M"], CODE["R"], CODE["MR"]
_H, _H_YZ, _CX = CODE["H"], CODE["H_YZ"], CODE["CX"]
_CONFUSION = CODE["CONFUSION"]
_PAULI_CODE = {cirq.X: CODE["X"], cirq.Y: CODE["Y"], cirq.Z: CODE["Z"]}
_BASIS_TO_Z = {1: _H, 2: _H_YZ}  # DensePauliString mask codes: 1=X, 2=Y, 3=Z


def place(qs, fr, base: int) -> int:
    """As-soon-as-possible position of an instruction on qubits `qs` within one operation:
    after `base` and after earlier instructions of the operation on those qubits (`fr`)."""
    p = base
    for q in qs:
        v = fr.get(q)
        if v is not None and v > p:
            p = v
    for q in qs:
        fr[q] = p + 1
    return p


def _handlers() -> Dict[type, str]:
    table = {
        cirq.MeasurementGate: "_h_measure",
        cirq.PauliMeasurementGate: "_h_pauli_measure",
        cirq.ResetChannel: "_h_reset",
    }
    for t, name in ((stim_types.MeasureAndOrResetGate, "_h_measure_reset"),
                    (stim_types.SweepPauli, "_h_sweep"), (stim_types.FeedbackPauli, "_h_feedback")):
        if t is not None:
            table[t] = name
    return table


class LoweringMixin:
    TYPE_HANDLERS = _handlers()

    # -- measurements ---------------------------------------------------------------------------
    def _no_control(self, op, what: str) -> None:
        if self.cond >= 0:
            self.fail(errors.UnsupportedOperationError, op,
                      f"a classically controlled {what} is not supported (its record would "
                      "exist only in some shots)")

    def _h_measure(self, op, gate: cirq.MeasurementGate, scope, fr, base):
        self._no_control(op, "measurement")
        if any(d != 2 for d in cirq.qid_shape(gate)):
            self.fail(errors.UnsupportedOperationError, op, "measurement of qudits")
        qidx = scope.qidx
        qs = [qidx[q] for q in op.qubits]
        n = len(qs)
        mask = gate.invert_mask
        inv = [bool(mask[i]) if i < len(mask) else False for i in range(n)]
        cmap = gate.confusion_map
        order = list(range(n))
        if cmap:  # each confusion group's records must be consecutive, in the group's order
            grouped = [i for idxs in cmap for i in idxs]
            order = grouped + [i for i in range(n) if i not in set(grouped)]
        b = self.b
        rec0 = b.take_records(n)
        slots = [0] * n
        for j, i in enumerate(order):
            slots[i] = rec0 + j
            q = qs[i]
            pos = place((q,), fr, base)
            self.row(pos, _M, q, -1, rec0 + j, b.take_rand(), -1, FLAG_INVERT if inv[i] else 0)
        for idxs, matrix in cmap.items():
            k = len(idxs)
            matrix = np.asarray(matrix, dtype=np.float64)
            # Cirq confuses the raw bits and inverts afterwards (SimulationState.measure); our
            # CONFUSION acts on the recorded (inverted) bits, so conjugate the matrix by the
            # group's invert mask. When Cirq samples terminal measurements it inverts first
            # (Simulator._confuse_results); the compiler follows the path Cirq would take.
            v = 0
            for i in idxs:
                v = (v << 1) | int(inv[i])
            if v and not self.cirq_samples_terminally():
                perm = np.arange(1 << k) ^ v
                matrix = matrix[perm][:, perm]
            self._confusion(slots[idxs[0]], matrix, [qs[i] for i in idxs], fr, base)
        self.register_key(scope.key_of(gate.mkey), slots)

    def _confusion(self, first: int, matrix: np.ndarray, qs, fr, base) -> None:
        b = self.b
        b.confusions.append(Confusion(int(round(np.log2(matrix.shape[0]))), matrix))
        pos = place(qs, fr, base)
        self.row(pos, _CONFUSION, first, len(qs) if len(qs) else 1, first, b.take_rand(),
                 len(b.confusions) - 1)

    def _h_pauli_measure(self, op, gate: cirq.PauliMeasurementGate, scope, fr, base):
        self._no_control(op, "measurement")
        obs = gate.observable()
        coefficient = complex(obs.coefficient)
        if abs(coefficient - 1) > 1e-9 and abs(coefficient + 1) > 1e-9:
            self.fail(errors.UnsupportedOperationError, op, "Pauli measurement with a coefficient "
                      "other than +1 or -1")
        support = [(scope.qidx[q], int(m)) for q, m in zip(op.qubits, obs.pauli_mask) if m]
        if not support:
            self.fail(errors.UnsupportedOperationError, op, "measurement of the identity")
        before = [(_BASIS_TO_Z[m], (q,)) for q, m in support if m in _BASIS_TO_Z]
        first = support[0][0]
        before += [(_CX, (q, first)) for q, _ in support[1:]]
        for code, qs in before:
            self.row(place(qs, fr, base), code, qs[0], qs[1] if len(qs) > 1 else -1)
        b = self.b
        rec = b.take_records(1)
        self.row(place((first,), fr, base), _M, first, -1, rec, b.take_rand(), -1,
                 FLAG_INVERT if coefficient.real < 0 else 0)
        for code, qs in reversed(before):
            self.row(place(qs, fr, base), code, qs[0], qs[1] if len(qs) > 1 else -1)
        self.register_key(scope.key_of(gate.mkey), [rec])

    def _h_measure_reset(self, op, gate, scope, fr, base):
        if gate.measure:
            self._no_control(op, "measurement")
        q = scope.qidx[op.qubits[0]]
        core = ("MR" if gate.reset else "M") if gate.measure else "R"
        if gate.basis not in ("X", "Y", "Z"):
            self.fail(errors.UnsupportedOperationError, op, f"unknown basis {gate.basis!r}")
        if gate.basis == "Z":
            before = after = None
        else:
            before, core, after = opcodes.LOWERED_BASIS[core + gate.basis]
        b = self.b
        if before is not None:
            self.row(place((q,), fr, base), CODE[before], q)
        pos = place((q,), fr, base)
        if gate.measure:
            rec = b.take_records(1)
            self.row(pos, CODE[core], q, -1, rec, b.take_rand(), -1,
                     FLAG_INVERT if gate.invert_measure else 0)
        else:
            self.row(pos, CODE[core], q, -1, -1, b.take_rand())
        if after is not None:
            self.row(place((q,), fr, base), CODE[after], q)
        if gate.measure:
            p = float(gate.measure_flip_probability or 0)
            if p > 0:
                self._confusion(rec, np.array([[1 - p, p], [p, 1 - p]]), [q], fr, base)
            key = gate.key if isinstance(gate.key, cirq.MeasurementKey) else \
                cirq.MeasurementKey.parse_serialized(str(gate.key))
            self.register_key(scope.key_of(key), [rec])

    def _h_reset(self, op, gate, scope, fr, base):
        if gate.dimension != 2:
            self.fail(errors.UnsupportedOperationError, op, "reset of a qudit")
        b = self.b
        for q in op.qubits:
            i = scope.qidx[q]
            self.row(place((i,), fr, base), _R, i, -1, -1, b.take_rand())

    # -- noise ----------------------------------------------------------------------------------
    def _h_noise(self, code, cid, op, gate, scope, fr, base, ext_paulis=None):
        """A Pauli channel instruction; E lists its targets (and, for a single Pauli product,
        that product) in ext_qubits / ext_paulis."""
        qidx = scope.qidx
        qs = [qidx[q] for q in op.qubits]
        b = self.b
        pos = place(qs, fr, base)
        if opcodes.OPCODES[code].arity == 0:
            start = len(b.ext_qubits)
            b.ext_qubits.extend(qs)
            b.ext_paulis.extend(ext_paulis if ext_paulis is not None else [0] * len(qs))
            self.row(pos, code, start, len(qs), -1, b.take_rand(), cid)
        else:
            self.row(pos, code, qs[0], qs[1] if len(qs) > 1 else -1, -1, b.take_rand(), cid)

    # -- stimcirq sweep / feedback -------------------------------------------------------------------
    def _h_sweep(self, op, gate, scope, fr, base):
        q = scope.qidx[op.qubits[0]]
        if self.mode != "resolve":
            return self._slot_rows("sweep", op, scope, [q], 1, fr, base)
        value = resolve_chain(sympy.Symbol(str(gate.cirq_sweep_symbol)), scope.resolvers,
                              self.resolver)
        if isinstance(value, sympy.Basic) and value.free_symbols:
            self.fail(errors.UnsupportedOperationError, op,
                      f"unresolved sweep symbol {gate.cirq_sweep_symbol}")
        if bool(value):
            self.row(place((q,), fr, base), _PAULI_CODE[gate.pauli], q)

    def _h_feedback(self, op, gate, scope, fr, base):
        q = scope.qidx[op.qubits[0]]
        rec = self.b.num_records + int(gate.relative_measurement_index)
        if rec < 0:
            raise errors.MeasurementKeyError(
                f"{op!r} at {self.where()} looks back {-gate.relative_measurement_index} records, "
                f"but only {self.b.num_records} were written before it")
        if self._cond_list:
            self.fail(errors.UnsupportedOperationError, op, "feedback under another classical control")
        cid = self.b.condition([(rec, len(self.keys.frames))], [False, True])
        saved = self.cond
        self.cond = cid
        try:
            self.row(place((q,), fr, max(base, self.max_pos() + 1)), _PAULI_CODE[gate.pauli], q)
        finally:
            self.cond = saved

    # -- classical control ------------------------------------------------------------------------
    def _controlled(self, op: cirq.ClassicallyControlledOperation, scope, fr, base):
        combined = self._cond_list + tuple((c, scope) for c in op.classical_controls)
        cid = self._make_condition(combined, op)
        saved = self.cond, self._cond_list
        self.cond, self._cond_list = cid, combined
        try:
            self._emit_op(op.without_classical_controls(), scope, fr, max(base, self.max_pos() + 1))
        finally:
            self.cond, self._cond_list = saved

    def _make_condition(self, combined, op) -> int:
        widths: List[Tuple[cirq.MeasurementKey, int]] = []
        refs: List[Tuple[int, int]] = []
        seen = set()
        box: List[int] = []  # the condition id, known once the refs are complete

        for condition, scope in combined:
            if getattr(condition, "index", -1) != -1:
                self.fail(errors.UnsupportedOperationError, op, "conditions on an earlier instance "
                          "of a repeated key (index != -1); only the latest instance is supported")
            for mkey in condition.keys:
                if (mkey, id(scope)) in seen:
                    continue
                seen.add((mkey, id(scope)))
                span = [len(refs), 0]

                def finish(depth, span=span):
                    self.b.conditions[box[0]].refs[span[0]:span[0] + span[1], 1] = depth

                slots, depth = self.read_key(scope, mkey, op, True, finish, False)
                span[1] = len(slots)
                widths.append((mkey, len(slots)))
                refs.extend((int(s), depth) for s in slots)
        try:
            table = condition_table([c for c, _ in combined], widths)
        except errors.UnsupportedOperationError as error:
            self.fail(errors.UnsupportedOperationError, op, str(error))
        cid = self.b.condition(refs, table)
        box.append(cid)
        return cid

    # -- stimcirq annotations -----------------------------------------------------------------------
    def _annotation(self, op, scope) -> None:
        b = self.b
        if isinstance(op, stim_types.ShiftCoordsAnnotation):
            b.shift_coords(op.shift)
            return
        is_det = isinstance(op, stim_types.DetAnnotation)
        if not is_det and getattr(op, "pauli_keys", None):
            self.fail(errors.UnsupportedOperationError, op, "observables with pauli_keys")
        records: List[int] = []
        for key in sorted(op.parity_keys):
            mkey = key if isinstance(key, cirq.MeasurementKey) else \
                cirq.MeasurementKey.parse_serialized(str(key))
            slots, _ = self.read_key(scope, mkey, op, False, lambda depth: None, True)
            records.extend(int(s) for s in slots)
        for k in sorted(op.relative_keys):
            r = b.num_records + int(k)
            if k >= 0 or r < 0:
                raise errors.MeasurementKeyError(
                    f"{op!r} at {self.where()} refers to record {k} with only {b.num_records} "
                    "records written before it")
            records.append(r)
        if is_det:
            coords = tuple(float(c) for c in op.coordinate_metadata)
            offset = b.coord_offset
            coords = tuple(c + (offset[i] if i < len(offset) else 0.0) for i, c in enumerate(coords))
            b.add_annotation("detector", records, coords)
        else:
            b.add_annotation("observable", records, (), int(op.observable_index))

