"""Lowerings that write their own rows: measurements, resets, multi-qubit noise, stimcirq's
feedback, sweep bits and annotations.

Each is a registry entry (`registry.py`), called as ``lowering(em, op, gate, scope, at)`` with the
`emitter.Emitter` of the compilation, the operation's `keys.Scope` and its `emitter.Cursor`; gate-
less operations (stimcirq's annotations) get ``gate=None``. They write rows only through `em.b`
(the ProgramBuilder) and keys only through `em.register_key` / `em.read_key`. Some have a bulk
form (`Lowering.many`: measurements, resets, detectors) called as ``many(em, ops, gates, scope)``
on a run of a moment's operations, writing what the lowering on each in turn writes: rows,
records, confusions, keys and detectors (never phase or channel ids: the walk relies on it).
"""

from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, List

import cirq
import numpy as np

from .. import errors
from ..core import opcodes, paulis
from ..core.program import FLAG_INVERT
from ..core.ranges import ragged_rows, shift_rows
from .emitter import Cursor

if TYPE_CHECKING:  # pragma: no cover
    from .emitter import Emitter
    from .keys import Scope

CODE = opcodes.CODE

_BASIS_TO_Z = {paulis.X: "H", paulis.Y: "H_YZ"}  # self-inverse basis changes to Z
PAULI_NAMES = {cirq.X: "X", cirq.Y: "Y", cirq.Z: "Z"}


def sweep_opcode(gate, value) -> str:
    """The opcode of stimcirq.SweepPauli `gate` when its sweep bit resolves to `value`."""
    return PAULI_NAMES[gate.pauli] if bool(value) else "I"


def _no_control(em: "Emitter", op, what: str) -> None:
    if em.controlled:
        em.fail(errors.UnsupportedOperationError, op,
                f"a classically controlled {what} is not supported (its record would exist only "
                "in some shots)")


def _stochastic(em: "Emitter", op, idxs, matrix) -> np.ndarray:
    """A confusion map's matrix, checked as Cirq's simulators check it (never renormalised)."""
    k = len(idxs)
    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        em.fail(errors.InvalidConfusionMapError, op, f"the confusion map of qubit indices {tuple(idxs)} is not a "
                f"numeric matrix")
    if m.shape != (1 << k, 1 << k):
        em.fail(errors.InvalidConfusionMapError, op, f"the confusion map of qubit indices {tuple(idxs)} has shape "
                f"{m.shape}; {k} qubit(s) need a {1 << k}x{1 << k} matrix")
    if not np.all(np.isfinite(m)) or m.min() < -1e-9 or m.max() > 1 + 1e-9:
        em.fail(errors.InvalidConfusionMapError, op, f"the confusion map of qubit indices {tuple(idxs)} has entries "
                f"outside [0, 1]")
    sums = m.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1) > 1e-6)
    if len(bad):
        em.fail(errors.InvalidConfusionMapError, op, f"row {int(bad[0])} of the confusion map of qubit indices "
                f"{tuple(idxs)} sums to {sums[bad[0]]:.6g}; every row must be a probability distribution "
                f"summing to 1 (it is not renormalised)")
    return np.clip(m, 0.0, 1.0)


def measurement(em: "Emitter", op, gate: cirq.MeasurementGate, scope: "Scope", at: "Cursor") -> None:
    _no_control(em, op, "measurement")
    if any(d != 2 for d in cirq.qid_shape(gate)):
        em.fail(errors.UnsupportedOperationError, op, "measurement of qudits")
    qs = [scope.qidx[q] for q in op.qubits]
    n = len(qs)
    mask = gate.invert_mask
    inv = [bool(mask[i]) if i < len(mask) else False for i in range(n)]
    cmap = gate.confusion_map
    order = list(range(n))
    if cmap:  # each confusion group's records must be consecutive, in the group's order
        grouped = [i for idxs in cmap for i in idxs]
        order = grouped + [i for i in range(n) if i not in set(grouped)]
    b = em.b
    slots = [0] * n
    for i in order:
        slots[i] = b.measure(qs[i], invert=inv[i], pos=at.place((qs[i],)))
    for idxs, matrix in cmap.items():
        k = len(idxs)
        matrix = _stochastic(em, op, idxs, matrix)
        # Cirq confuses the raw bits and inverts afterwards (SimulationState.measure); our
        # CONFUSION acts on the recorded (inverted) bits, so conjugate the matrix by the
        # group's invert mask. When Cirq samples terminal measurements it inverts first
        # (Simulator._confuse_results); the compiler follows the path Cirq would take.
        v = 0
        for i in idxs:
            v = (v << 1) | int(inv[i])
        if v and not em.cirq_samples_terminally():
            perm = np.arange(1 << k) ^ v
            matrix = matrix[perm][:, perm]
        b.confusion(slots[idxs[0]], matrix, pos=at.place([qs[i] for i in idxs]))
    em.register_key(scope.key_of(gate.mkey), slots)


def measurements(em: "Emitter", ops, gates, scope: "Scope") -> None:
    """`measurement` of many operations at once: each qubit's M row at position 0, records and
    random slots in the operations' qubit order, a key per operation."""
    if any(gate.confusion_map for gate in gates):  # confusion rows follow their records: one by one
        for op, gate in zip(ops, gates):
            measurement(em, op, gate, scope, Cursor())
        return
    _no_control(em, ops[0], "measurement")
    shapes = list(map(cirq.qid_shape, gates))
    for op, shape in zip(ops, shapes):
        if shape.count(2) != len(shape):
            em.fail(errors.UnsupportedOperationError, op, "measurement of qudits")
    qubits = scope.indices(ops)
    k = len(qubits)
    ends = np.cumsum(list(map(len, shapes))).tolist()
    flags = 0
    if any(gate.invert_mask for gate in gates):
        flags = np.zeros(k, dtype=np.int32)
        for end, shape, gate in zip(ends, shapes, gates):
            mask = gate.invert_mask
            flags[end - len(shape):end - len(shape) + len(mask)] = mask
        flags *= FLAG_INVERT
    b = em.b
    count = np.arange(k, dtype=np.int64)
    records = b.take_records(k) + count
    b.emit_rows(b.block(CODE["M"], qubits, rec=records, rand=b.take_rand(k) + count, flags=flags),
                np.zeros(k, dtype=np.int64))
    em.register_keys([scope.key_of(gate.mkey) for gate in gates], np.split(records, ends[:-1]))


def pauli_measurement(em: "Emitter", op, gate: cirq.PauliMeasurementGate, scope: "Scope", at: "Cursor") -> None:
    """A Pauli-string measurement: basis change to Z, CX parity onto the first qubit, M, undo."""
    _no_control(em, op, "measurement")
    obs = gate.observable()
    coefficient = complex(obs.coefficient)
    if abs(coefficient - 1) > 1e-9 and abs(coefficient + 1) > 1e-9:
        em.fail(errors.UnsupportedOperationError, op, "Pauli measurement with a coefficient "
                "other than +1 or -1")
    support = [(scope.qidx[q], int(m)) for q, m in zip(op.qubits, obs.pauli_mask) if m]
    if not support:
        em.fail(errors.UnsupportedOperationError, op, "measurement of the identity")
    before = [(_BASIS_TO_Z[m], (q,)) for q, m in support if m in _BASIS_TO_Z]
    first = support[0][0]
    before += [("CX", (q, first)) for q, _ in support[1:]]
    b = em.b
    for name, qs in before:
        b.gate(name, *qs, pos=at.place(qs))
    rec = b.measure(first, invert=coefficient.real < 0, pos=at.place((first,)))
    for name, qs in reversed(before):
        b.gate(name, *qs, pos=at.place(qs))
    em.register_key(scope.key_of(gate.mkey), [rec])


def measure_reset(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
    """stimcirq.MeasureAndOrResetGate: M / R / MR in the X, Y or Z basis (with a flip chance)."""
    if gate.measure:
        _no_control(em, op, "measurement")
    q = scope.qidx[op.qubits[0]]
    core = ("MR" if gate.reset else "M") if gate.measure else "R"
    if gate.basis not in ("X", "Y", "Z"):
        em.fail(errors.UnsupportedOperationError, op, f"unknown basis {gate.basis!r}")
    if gate.basis == "Z":
        before = after = None
    else:
        before, core, after = opcodes.LOWERED_BASIS[core + gate.basis]
    b = em.b
    if before is not None:
        b.gate(before, q, pos=at.place((q,)))
    pos = at.place((q,))
    if gate.measure:
        rec = b.measure(q, invert=bool(gate.invert_measure), reset=core == "MR", pos=pos)
    else:
        b.reset(q, pos=pos)
    if after is not None:
        b.gate(after, q, pos=at.place((q,)))
    if gate.measure:
        p = float(gate.measure_flip_probability or 0)
        if p > 0:
            b.confusion(rec, np.array([[1 - p, p], [p, 1 - p]]), pos=at.place((q,)))
        # Cirq does not see this gate's key (it has no measurement-key protocol), so a
        # CircuitOperation neither prefixes it (parent path, repetition ids) nor maps it: it
        # stays as written, one instance per iteration, as stimcirq.StimSampler records it.
        em.register_key(_key_written(gate, scope), [rec])


def _key_of(gate) -> cirq.MeasurementKey:
    """stimcirq.MeasureAndOrResetGate's key."""
    key = gate.key
    return key if isinstance(key, cirq.MeasurementKey) else cirq.MeasurementKey.parse_serialized(str(key))


def _key_written(gate, scope: "Scope") -> tuple:
    """`scope.key_as_written(_key_of(gate))`: a name with no path in it (stimcirq's keys, "0", "1",
    ...) is that key, without a MeasurementKey made and read back for each."""
    key = gate.key
    if type(key) is str and ":" not in key:
        return (key,)
    return scope.key_as_written(_key_of(gate))


def _flip_probability(gate) -> float:
    return float(gate.measure_flip_probability or 0)


def measure_resets(em: "Emitter", ops, gates, scope: "Scope") -> None:
    """`measure_reset` of many operations at once; operations that differ in what they do (measure,
    reset, basis, a flip chance or none) one by one. Per operation its rows at positions 0, 1, ...:
    the basis change, the collapse, the change back, the confusion."""
    first = gates[0]
    kind = (first.measure, first.reset, first.basis, _flip_probability(first) > 0)
    if any((g.measure, g.reset, g.basis, _flip_probability(g) > 0) != kind for g in gates):
        for op, gate in zip(ops, gates):
            measure_reset(em, op, gate, scope, Cursor())
        return
    measure, reset_, basis, flips = kind
    if measure:
        _no_control(em, ops[0], "measurement")
    if basis not in ("X", "Y", "Z"):
        em.fail(errors.UnsupportedOperationError, ops[0], f"unknown basis {basis!r}")
    core = ("MR" if reset_ else "M") if measure else "R"
    before, core, after = (None, core, None) if basis == "Z" else opcodes.LOWERED_BASIS[core + basis]
    qubits = scope.indices(ops)
    b = em.b
    k = len(qubits)
    count = np.arange(k, dtype=np.int64)
    draws = 1 + (measure and flips)  # random slots per operation: the collapse's, the confusion's
    rand = b.take_rand(draws * k) + draws * count
    parts = []
    if before is not None:
        parts.append(b.block(CODE[before], qubits))
    if measure:
        records = b.take_records(k) + count
        inverted = np.fromiter((bool(g.invert_measure) for g in gates), bool, k) * FLAG_INVERT
        parts.append(b.block(CODE[core], qubits, rec=records, rand=rand, flags=inverted))
    else:
        parts.append(b.block(CODE[core], qubits, rand=rand))
    if after is not None:
        parts.append(b.block(CODE[after], qubits))
    if measure and flips:
        confusions = b.flip_confusions([_flip_probability(g) for g in gates]) + count
        parts.append(b.block(CODE["CONFUSION"], records, 1, rec=records, rand=rand + 1, aux=confusions))
    rows = np.stack(parts, axis=1)  # [k, rows per operation, fields]: the operations' rows in turn
    b.emit_rows(rows.reshape(-1, rows.shape[2]), np.tile(np.arange(len(parts)), k))
    if measure:
        em.register_keys([_key_written(gate, scope) for gate in gates], records.reshape(-1, 1))


def reset(em: "Emitter", op, gate: cirq.ResetChannel, scope: "Scope", at: "Cursor") -> None:
    if gate.dimension != 2:
        em.fail(errors.UnsupportedOperationError, op, "reset of a qudit")
    for q in op.qubits:
        i = scope.qidx[q]
        em.b.reset(i, pos=at.place((i,)))


def resets(em: "Emitter", ops, gates, scope: "Scope") -> None:
    """`reset` of many operations at once: an R row per qubit at position 0."""
    for op, gate in zip(ops, gates):
        if gate.dimension != 2:
            em.fail(errors.UnsupportedOperationError, op, "reset of a qudit")
    qubits = scope.indices(ops)
    b = em.b
    k = len(qubits)
    b.emit_rows(b.block(CODE["R"], qubits, rand=b.take_rand(k) + np.arange(k)), np.zeros(k, dtype=np.int64))


def noise_on_many(name: str, channel: int, ext_paulis=None):
    """A Pauli channel over any number of qubits (Stim's E): its targets go to ext_qubits."""

    def lower(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
        qs = [scope.qidx[q] for q in op.qubits]
        em.b.noise(name, qs, channel, pos=at.place(qs), ext_paulis=ext_paulis)

    return lower


def sweep_pauli(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
    """stimcirq.SweepPauli: the Pauli when the sweep bit (a Cirq symbol) is 1."""
    q = scope.qidx[op.qubits[0]]
    if em.mode != "resolve":
        return em.template_slot("sweep", op, scope, [q], 1, at)
    name = sweep_opcode(gate, em.resolve_symbol(gate.cirq_sweep_symbol, scope, op))
    if name != "I":
        em.b.gate(name, q, pos=at.place((q,)))


def feedback_pauli(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
    """stimcirq.FeedbackPauli: the Pauli where an earlier record (relative index) is 1."""
    q = scope.qidx[op.qubits[0]]
    b = em.b
    rec = b.num_records + int(gate.relative_measurement_index)
    if rec < 0:
        raise errors.MeasurementKeyError(
            f"{op!r} at {em.where()} looks back {-gate.relative_measurement_index} records, "
            f"but only {b.num_records} were written before it")
    if em.controls:
        em.fail(errors.UnsupportedOperationError, op, "feedback under another classical control")
    cid = b.condition([(rec, em.loop_depth)], [False, True])
    with em.under(cid, em.controls):
        b.gate(PAULI_NAMES[gate.pauli], q, pos=at.after(b.max_pos() + 1).place((q,)))


# -- stimcirq annotations (gate-less operations) --------------------------------------------------------


def shift_coords(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
    em.b.shift_coords(op.shift)


def _annotation_records(em: "Emitter", op, scope: "Scope") -> List[int]:
    """The records a detector / observable XORs: its keys' latest instances, then relative ones."""
    b = em.b
    records: List[int] = []
    for key in sorted(op.parity_keys):
        mkey = key if isinstance(key, cirq.MeasurementKey) else cirq.MeasurementKey.parse_serialized(str(key))
        slots, _ = em.read_key(scope, mkey, op, False, lambda depth: None, True)
        records.extend(int(s) for s in slots)
    for k in sorted(op.relative_keys):
        r = b.num_records + int(k)
        if k >= 0 or r < 0:
            raise errors.MeasurementKeyError(
                f"{op!r} at {em.where()} refers to record {k} with only {b.num_records} "
                "records written before it")
        records.append(r)
    return records


def detector(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
    """stimcirq.DetAnnotation, its coordinates shifted by the ShiftCoords seen so far."""
    records = _annotation_records(em, op, scope)
    offset = em.b.coord_offset
    coords = tuple(float(c) + (offset[i] if i < len(offset) else 0.0)
                   for i, c in enumerate(op.coordinate_metadata))
    em.b.add_annotation("detector", records, coords)


_PARITY_KEYS = operator.attrgetter("parity_keys")


def detectors(em: "Emitter", ops, gates, scope: "Scope") -> None:
    """`detector` of many stimcirq.DetAnnotations in turn: one block of detectors where it can be
    (`_detector_block`), else one at a time, so that a key's read and an error are `detector`'s own."""
    if not _detector_block(em.b, ops):
        for op in ops:
            detector(em, op, None, scope, None)


def _detector_block(b, ops) -> bool:
    """The detectors as one block (`add_detectors`) where none names a measurement key and none
    looks back before the first record (stimcirq's conversion of Stim's rec targets); False, having
    written nothing, where that does not hold."""
    if any(map(_PARITY_KEYS, ops)):
        return False
    relative = [sorted(op.relative_keys) for op in ops]
    counts = np.fromiter(map(len, relative), np.int64, len(ops))
    back = np.fromiter(itertools.chain.from_iterable(relative), np.int64, int(counts.sum()))
    records = b.num_records + back
    if len(back) and (back.max() >= 0 or records.min() < 0):
        return False
    coords = [op.coordinate_metadata for op in ops]
    widths = np.fromiter(map(len, coords), np.int64, len(ops))
    rows = ragged_rows(np.fromiter(itertools.chain.from_iterable(coords), np.float64, int(widths.sum())), widths)
    offsets = np.zeros(len(ops) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    b.add_detectors(offsets, records, shift_rows(rows, widths, b.coord_offset), widths)
    return True


def observable(em: "Emitter", op, gate, scope: "Scope", at: "Cursor") -> None:
    """stimcirq.CumulativeObservableAnnotation. Its `pauli_keys` ("X3": a letter and a qubit's
    index in the circuit's qubit order, as stimcirq's conversion to Stim numbers them) are Pauli
    targets of Stim's OBSERVABLE_INCLUDE, read at the end of the moment (`Emitter.pauli_term`)."""
    index = int(op.observable_index)
    em.b.add_annotation("observable", _annotation_records(em, op, scope), (), index)
    for key in sorted(getattr(op, "pauli_keys", ())):
        letter, number = str(key)[:1], str(key)[1:]
        if letter not in ("X", "Y", "Z") or not number.isdigit() or int(number) >= len(em.qubits):
            em.fail(errors.UnsupportedOperationError, op,
                    f"pauli key {key!r} is not a Pauli letter and a qubit index below {len(em.qubits)}")
        em.pauli_term(int(number), letter, index)
