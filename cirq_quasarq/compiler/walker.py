"""The walk: `cirq.Circuit` -> `Program`, visiting every operation once.

Each operation is looked up in the registry (`registry.py`: exact value, protocol, type, unitary,
channel, decompose) and compiled by the `Lowering` it gets; the walk itself handles only the
structure around operations: moments, tags, `CircuitOperation` (REPEAT blocks; the body is walked
once), classical control, parametrized operations (template slots, `template.py`) and
decomposition. What is left raises `UnsupportedOperationError` naming the operation, its moment
and what was tried.

Rows: every moment opens a new step of the ProgramBuilder; an instruction at position p of its
operation's lowering (as soon as possible per qubit, `emitter.Cursor`) gets step `moment step +
p`, so instructions of one step touch disjoint qubits. Each gate's lowering is turned once per walk
into a plan: a tuple of ready rows for unitaries and one- or two-qubit channels (the common case),
or a callable for the rest.

Moments are lowered in bulk: the operations of a moment whose plans are rows become one block of
rows (`RowPlans`: a few array operations for the whole run, whatever its gates), and a run of
operations whose lowering takes many at once (`Lowering.many`: measurements, resets; gate-less
operations by their type: stimcirq's detectors) is one call.
Everything else, and runs shorter than `Walker.group_min`, goes one operation at a time. The block
holds the rows, record and random slots that the operations one by one would write, in the same
order (operations in moment order, then rows by position), so the Program is the same.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Dict, List, Optional, Tuple

import cirq
import numpy as np
import sympy

from .. import errors
from ..core import memory, opcodes
from ..core.program import A, AUX, B, COND, FLAGS, NUM_FIELDS, OP, RAND, Program
from ..core.ranges import expand_ranges
from . import channels
from .conditions import condition_table
from .emitter import Cursor, Emitter
from .idmap import IdMap
from .keys import GATE as _GATE, Scope, readers
from .lowerings import noise_on_many
from .params import resolve_chain
from .registry import Lowering, lower, lower_operation
from .template import probe_slot

CODE = opcodes.CODE
# Host bytes per measurement record of a compiled circuit (key tables, reference sample, a shot's
# records: about 32 measured at compile, the rest at sampling), and per repetition-id name.
_BYTES_PER_RECORD = 48
_BYTES_PER_NAME = 120

_TAGGED = cirq.TaggedOperation
_CIRCUIT_OP = cirq.CircuitOperation
_CONTROLLED = cirq.ClassicallyControlledOperation
_ROWS, _ALONE = 0, -1  # how a gate's operations go in bulk (see Walker._kinds)
_NO_GATE = id(None)  # the gate id of a gate-less operation


def _unsupported(error: Exception, op) -> str:
    """A gate's own verdict, and that Cirq's stabilizer simulator would refuse it too (code written
    for cirq.CliffordSimulator may match its message)."""
    if isinstance(error, errors.NonCliffordError):
        return f"{error}; cirq.CliffordSimulator doesn't support {op!r} either"
    return str(error)


class Rewalk(Exception):
    """Template mode met something that only a resolved walk can compile."""


class Ops:
    """A pseudo-moment: operations on disjoint qubits from a noise model's OP_TREE."""

    __slots__ = ("operations",)

    def __init__(self, operations):
        self.operations = tuple(operations)


def unitary_plan(ops, phase: int = -1) -> Tuple:
    """(code, local a, local b, position, aux, random) rows, positions as soon as possible per
    local qubit; the gate's global phase id rides on its first row (an `I` row when it has none)."""
    at = Cursor()
    rows = []
    for name, targets in ops or (("I", (0,)),) * (phase >= 0):
        p = at.place(targets)
        rows.append((CODE[name], targets[0], targets[1] if len(targets) > 1 else -1, p, phase, 0))
        phase = -1
    return tuple(rows)


class RowPlans:
    """The row plans of one walk as one table: a run of operations with row plans, whatever their
    gates, becomes its block of rows by array operations (`block`)."""

    def __init__(self):
        self.number: Dict[int, int] = {}  # id(gate) -> its plan's number (equal plans share one)
        self._by_id: Optional[IdMap] = None  # `number` for arrays of ids (made when first needed)
        self._numbers: Dict[Tuple, int] = {}  # (plan, qubits) -> number
        self._rows: List[Tuple] = []  # every plan's rows, plan after plan
        self._spans: List[Tuple[int, int, int]] = []  # per plan: first row, rows, qubits
        self._table = None  # the arrays of `_rows` and `_spans`, made when first needed

    def add(self, gate_id: int, plan: Tuple, num_qubits: int) -> None:
        key = (plan, num_qubits)
        number = self._numbers.get(key)
        if number is None:
            number = self._numbers[key] = len(self._spans)
            self._spans.append((len(self._rows), len(plan), num_qubits))
            self._rows.extend(plan)
            self._table = None
        self.number[gate_id] = number
        self._by_id = None

    def numbers(self, gate_ids: np.ndarray) -> Tuple[np.ndarray, bool]:
        """(the plan number of each gate id, -1 for a gate without one; whether every gate has one)."""
        if self._by_id is None:
            self._by_id = IdMap.of(self.number)
        return self._by_id.lookup(gate_ids)

    def _arrays(self):
        if self._table is None:
            rows = np.array(self._rows, dtype=np.int64).reshape(-1, 6)
            template = np.full((len(rows), NUM_FIELDS), -1, dtype=np.int32)
            template[:, OP], template[:, AUX], template[:, FLAGS] = rows[:, 0], rows[:, 4], 0
            local = tuple(rows[:, j].copy() for j in (1, 2, 3))  # local a, local b, position
            random = rows[:, 5].astype(bool)
            spans = np.array(self._spans, dtype=np.int64).reshape(-1, 3)
            self._table = (template, local, random, spans.T.copy(), bool(random.any()))
        return self._table

    def block(self, numbers: np.ndarray, qubits: np.ndarray, b) -> Tuple[np.ndarray, np.ndarray]:
        """(rows, positions) of operations with plans `numbers` on `qubits` (program indices, the
        operations' qubits one after another), taking their random slots from the builder `b`."""
        template, (local_a, local_b, local_position), random, (first, count, width), noisy = self._arrays()
        counts, widths = count[numbers], width[numbers]
        if counts.max() <= 1:  # at most a row each (none: an identity), at position 0
            owner = None if counts.min() else np.flatnonzero(counts)  # the operation of each row
            index = first[numbers] if owner is None else first[numbers[owner]]
            position = np.zeros(len(index), dtype=np.int64)
        else:
            owner, index = expand_ranges(first[numbers], counts)
            position = local_position[index]
        rows = template.take(index, axis=0)  # whole rows: take is several times faster than indexing
        if len(qubits) == len(numbers) and widths.min() == 1:  # a qubit each: the rows' target
            rows[:, A] = qubits if owner is None else qubits[owner]
        else:
            base = np.cumsum(widths) - widths  # each operation's first qubit in `qubits`
            if owner is not None:
                base = base[owner]
            rows[:, A] = qubits[base + local_a[index]]
            second = local_b[index]  # each row's second local target (-1: none)
            rows[:, B] = np.where(second >= 0, qubits[base + second], -1)
        if noisy:
            drawn = random[index]
            k = int(np.count_nonzero(drawn))
            if k:
                start = b.take_rand(k)
                rows[drawn, RAND] = np.arange(start, start + k, dtype=np.int32)
        if b.cond >= 0:
            rows[:, COND] = b.cond
        return rows, position


class Walker(Emitter):
    """One compilation (see `Emitter` for the state lowerings use)."""

    # The fewest consecutive operations of a moment lowered in bulk: a block costs about as much as
    # a hundred operations one by one (measured on two CPU cores); None lowers every operation
    # alone, as the tests' oracle.
    group_min: Optional[int] = 96

    def __init__(self, qubits: Tuple, mode: str = "template", resolver=None, non_pauli: str = "error"):
        super().__init__(qubits, mode, resolver)
        self.non_pauli = non_pauli  # registry.lower's option: refuse or twirl non-Pauli channels
        # id(gate) -> plan; `_keep` keeps the ids valid. A gate-less operation (id(None)) goes
        # through emit_op.
        self._plans: Dict[int, Any] = {id(None): lambda op, gate, scope, at: self.emit_op(op, scope, at)}
        self._keep: List[Any] = []
        self._plan_by_lowering: Dict[int, Any] = {}  # id(lowering) -> plan
        self._rows = RowPlans()
        # id(gate) -> how its operations go in bulk: _ROWS, or k for the `many` lowering _bulk[k]
        # (absent: one at a time).
        self._kinds: Dict[int, int] = {}
        self._bulk: List[Any] = [None]
        self._bulk_kind: Dict[Any, int] = {}  # `many` lowering -> k
        self._kinds_by_type: Dict[type, int] = {}  # a gate-less operation's type -> its kind
        self._warned: set = set()  # the twirled channels named in a warning

    def run(self, moments, indices: Optional[List[int]] = None, num_moments: Optional[int] = None) -> Program:
        """Compile top-level moments (`indices`: their moment numbers in the user's circuit, of
        which there are `num_moments`)."""
        qidx = {q: i for i, q in enumerate(self.qubits)}
        self._moment_rows: List[int] = []
        self._moment_records: List[int] = []
        self._walk(moments, Scope(qidx), indices)
        count = len(moments) if num_moments is None else num_moments
        rows = self._moment_rows + [self.b.num_rows()] * (count - len(self._moment_rows))
        records = self._moment_records + [self.b.num_records] * (count - len(self._moment_records))
        program = self.b.build(self.qubits, rows[:count], records[:count])
        program.pauli_observables = tuple(sorted(self.accumulators.items()))
        return program

    # -- the walk -------------------------------------------------------------------------------
    def _walk(self, moments, scope: Scope, indices: Optional[List[int]] = None) -> None:
        b = self.b
        group_min = self.group_min
        loc = self.loc
        top = not loc
        loc.append(0)
        for mi, moment in enumerate(moments):
            if top:  # the first row of each user moment, for moment steps
                index = mi if indices is None else indices[mi]
                while len(self._moment_rows) <= index:
                    self._moment_rows.append(b.num_rows())
                    self._moment_records.append(b.num_records)
            ops = moment.operations
            if not ops:
                continue
            loc[-1] = mi if indices is None else indices[mi]
            b.begin_moment()
            if group_min is not None and len(ops) >= group_min:
                self._grouped(ops, scope)
            else:
                self._one_by_one(ops, map(_GATE, ops), scope)
            self.end_moment()
        loc.pop()

    def _grouped(self, ops, scope: Scope) -> None:
        """A moment's operations (see the module's docstring)."""
        gate_of, qubits_of = readers(ops)
        numbers, every = self._rows.numbers(np.fromiter(map(id, map(gate_of, ops)), np.int64, len(ops)))
        if every:  # row plans only (made before: no new object's id is among them)
            return self._row_run(ops, None, numbers, scope, qubits_of)
        gates = list(map(gate_of, ops))
        ids = list(map(id, gates))
        plans = self._plans
        if None not in map(plans.get, ids):
            return self._lower_span(ops, gates, ids, scope, qubits_of)
        # New plans take phase and channel ids (the builder's tables) in the order the operations
        # one by one would take them: made ahead of earlier operations except where one of those
        # might take such ids itself (one lowered alone), which is written first.
        start, alone = 0, -1
        for i, gate_id in enumerate(ids):
            if gate_id not in plans:
                if alone >= start:
                    self._lower_span(ops[start:alone + 1], gates[start:alone + 1], ids[start:alone + 1], scope,
                                     qubits_of)
                    start = alone + 1
                self._plan(gates[i])
            if gate_id not in self._kinds:
                alone = i
        self._lower_span(ops[start:], gates[start:], ids[start:], scope, qubits_of)

    def _lower_span(self, ops, gates, ids, scope: Scope, qubits_of) -> None:
        """Operations of a moment whose plans are made, in runs of one kind: row plans as a block,
        one `many` lowering in one call, the rest (and short runs) one by one."""
        group_min = self.group_min
        if len(ops) < group_min:
            return self._one_by_one(ops, gates, scope)
        kinds = np.fromiter(map(self._kinds.get, ids, itertools.repeat(_ALONE)), np.int64, len(ids))
        for i in np.flatnonzero(kinds == _ALONE).tolist():  # gate-less operations go by their type
            if ids[i] == _NO_GATE:
                kinds[i] = self._type_kind(ops[i])
        starts = (np.flatnonzero(kinds[1:] != kinds[:-1]) + 1).tolist()
        for start, end in zip([0] + starts, starts + [len(ops)]):
            kind = int(kinds[start])
            if kind == _ALONE or end - start < group_min:
                self._one_by_one(ops[start:end], gates[start:end], scope)
            elif kind == _ROWS:
                numbers = np.fromiter(map(self._rows.number.__getitem__, ids[start:end]), np.int64, end - start)
                self._row_run(ops[start:end], gates[start:end], numbers, scope, qubits_of)
            else:
                self._bulk[kind](self, ops[start:end], gates[start:end], scope)

    def _row_run(self, ops, gates, numbers: np.ndarray, scope: Scope, qubits_of) -> None:
        """Consecutive operations of a moment with row plans (`numbers`; `gates`: None for the
        operations' own; `qubits_of`: their reader, `keys.readers`): one block."""
        if len(ops) >= self.group_min:
            try:
                qubits = scope.indices(ops, qubits_of)
            except KeyError:  # a qubit outside the circuit: one by one, as ever
                pass
            else:
                return self.b.emit_rows(*self._rows.block(numbers, qubits, self.b))
        self._one_by_one(ops, map(_GATE, ops) if gates is None else gates, scope)

    def _one_by_one(self, ops, gates, scope: Scope) -> None:
        """Operations of a moment one at a time, with their `gates` (an iterable: `op.gate` may be a
        new object each time), planning those met first."""
        plans, lowered, qidx = self._plans, self.b.lowered, scope.qidx
        for op, gate in zip(ops, gates):
            plan = plans.get(id(gate))
            if plan is None:
                plan = self._plan(gate)
            if plan.__class__ is tuple:
                lowered(plan, op.qubits, qidx)
            else:
                plan(op, gate, scope, Cursor())

    def emit_op(self, op, scope: Scope, at: Cursor) -> None:
        """Any operation, placed by `at` after earlier instructions of the same operation."""
        gate = op.gate
        if gate is not None:
            plan = self._plans.get(id(gate))
            if plan is None:
                plan = self._plan(gate)
            if plan.__class__ is tuple:
                if any(q not in scope.qidx for q in op.qubits):
                    self.fail(errors.UnsupportedOperationError, op, "it acts on qubits outside the circuit")
                qi = [scope.qidx[q] for q in op.qubits]
                for code, la, lb, _, aux, random in plan:
                    qs = (qi[la],) if lb < 0 else (qi[la], qi[lb])
                    self.b.emit(code, qs[0], qs[1] if lb >= 0 else -1, -1,
                                self.b.take_rand() if random else -1, aux, pos=at.place(qs))
            else:
                plan(op, gate, scope, at)
            return
        if isinstance(op, _TAGGED):
            return self.emit_op(op.untagged, scope, at)
        if isinstance(op, _CIRCUIT_OP):
            at.free.clear()
            return self._circuit_op(op, scope)
        if isinstance(op, _CONTROLLED):
            return self._controlled(op, scope, at)
        lowering = lower_operation(op)
        if lowering.kind == Lowering.EMIT:
            return lowering.emit(self, op, None, scope, at)
        self._decompose(op, scope, at)

    def _decompose(self, op, scope: Scope, at: Cursor) -> None:
        try:
            parts = cirq.decompose_once(op, default=None)
        except (TypeError, ValueError) as error:
            parts, reason = None, f" ({error})"
        else:
            reason = ""
        if parts is None:
            self.fail(errors.UnsupportedOperationError, op,
                      "it is not a measurement, reset, Pauli noise channel, annotation, classical "
                      "control or subcircuit, the registry has no lowering for it (exact value, "
                      "protocol, type, Clifford unitary, Pauli channel) and cirq.decompose_once "
                      f"gives nothing{reason}; cirq.CliffordSimulator doesn't support {op!r} either")
        for part in cirq.flatten_to_ops(parts):
            self.emit_op(part, scope, at)

    # -- plans per gate object ------------------------------------------------------------------
    def _plan(self, gate):
        n = cirq.num_qubits(gate)
        lowering = lower(gate, n, self.non_pauli)
        if lowering.twirled:
            channels.warn_twirled(gate, self._warned)
        # Equal gates share a lowering (the registry's cache), and so a plan.
        plan = self._plan_by_lowering.get(id(lowering))
        if plan is None:
            plan = self._plan_by_lowering[id(lowering)] = self._plan_of(lowering, gate)
            self._keep.append(lowering)
        self._plans[id(gate)] = plan
        self._keep.append(gate)
        if plan.__class__ is tuple:
            self._rows.add(id(gate), plan, n)
            self._kinds[id(gate)] = _ROWS
        elif lowering.many is not None:
            self._kinds[id(gate)] = self._bulk_kind_of(lowering.many)
        return plan

    def _bulk_kind_of(self, many) -> int:
        """The kind (`_kinds`' values) of a `many` lowering: its index in `_bulk`."""
        kind = self._bulk_kind.get(many)
        if kind is None:
            kind = self._bulk_kind[many] = len(self._bulk)
            self._bulk.append(many)
        return kind

    def _type_kind(self, op) -> int:
        """How a gate-less operation goes in bulk, by its type: its lowering's `many` (an EMIT
        lowering of the registry's by-type table is the same for every operation of a type), or
        one at a time (tagged, controlled and subcircuit operations among them)."""
        kind = self._kinds_by_type.get(type(op))
        if kind is None:
            lowering = lower_operation(op)
            many = lowering.many if lowering.kind == Lowering.EMIT else None
            kind = self._kinds_by_type[type(op)] = _ALONE if many is None else self._bulk_kind_of(many)
        return kind

    def _plan_of(self, lowering: Lowering, gate):
        kind = lowering.kind
        if kind == Lowering.OPS:
            n = cirq.num_qubits(gate)
            phase = self.b.phase_id(lowering.phase_of(gate, n))
            if n == 0:  # a global phase on no qubit
                return () if phase < 0 else (lambda op, gate, scope, at: self.b.phase_row(phase, at.place((0,))))
            return unitary_plan(lowering.ops, phase)
        if kind == Lowering.NOISE:
            spec = lowering.spec
            if spec is None:
                return ()
            channel = self.b.channel_id(spec.arity, spec.probs, spec.paulis)
            if opcodes.BY_NAME[spec.opname].arity == 0:  # E: targets in ext_qubits
                ext = spec.paulis[0] if len(spec.probs) == 1 else None
                return functools.partial(noise_on_many(spec.opname, channel, ext), self)
            return ((CODE[spec.opname], 0, 1 if spec.arity == 2 else -1, 0, channel, 1),)
        if kind == Lowering.EMIT:
            return functools.partial(lowering.emit, self)
        if kind == Lowering.PARAMETRIZED:
            return self._parametrized
        if kind == Lowering.DECOMPOSE:
            return lambda op, gate, scope, at: self._decompose(op, scope, at)
        error = lowering.error_for(gate)
        return lambda op, gate, scope, at: self.fail(type(error), op, _unsupported(error, op))

    # -- parameters -----------------------------------------------------------------------------
    def _parametrized(self, op, gate, scope: Scope, at: Cursor) -> None:
        if self.mode == "resolve":
            resolved = resolve_chain(op, scope.resolvers, self.resolver)
            if cirq.is_parameterized(resolved):
                self.fail(errors.UnsupportedOperationError, op,
                          f"unresolved parameters {sorted(cirq.parameter_names(resolved))} "
                          "(symbols were not specified in the resolver)")
            return self.emit_op(resolved, scope, at)
        info = probe_slot(op, scope.resolvers, self.non_pauli)
        if info is None:
            raise Rewalk()
        kind, size = info
        qs = [scope.qidx[q] for q in op.qubits]
        if kind == "noise":
            channel = self.b.channel_slot(len(qs))
            name = {1: "PAULI_CHANNEL_1", 2: "PAULI_CHANNEL_2"}.get(len(qs), "E")
            self.b.noise(name, qs, channel, pos=at.place(qs))
            self.template_slot("noise", op, scope, qs, 0, at, channel)
            return
        self.template_slot(kind, op, scope, qs, size, at)

    # -- subcircuits ------------------------------------------------------------------------------
    def _circuit_op(self, op: cirq.CircuitOperation, scope: Scope) -> None:
        if op.repeat_until is not None:
            self.fail(errors.UnsupportedOperationError, op,
                      "repeat_until loops depend on measurement results (not supported)")
        reps = op.repetitions
        if isinstance(reps, sympy.Basic):
            if self.mode != "resolve":
                raise Rewalk()
            reps = resolve_chain(reps, scope.resolvers, self.resolver)
            if isinstance(reps, sympy.Basic) and not reps.is_number:
                self.fail(errors.UnsupportedOperationError, op, f"unresolved repetitions {reps}")
            if abs(float(reps) - round(float(reps))) > 1e-9:
                self.fail(errors.UnsupportedOperationError, op, f"non-integer repetitions {reps}")
        reps = int(round(float(reps)))
        if reps == 0:
            return
        body = op.circuit
        if reps < 0:
            try:
                body = cirq.inverse(body.unfreeze())
            except TypeError as error:
                self.fail(errors.UnsupportedOperationError, op, f"negative repetitions of a body "
                          f"that cannot be inverted ({error})")
            reps = -reps
        if reps > 1 and self.controlled:
            self.fail(errors.UnsupportedOperationError, op,
                      "a repeated subcircuit under classical control is not supported")
        try:
            qidx = {q: scope.qidx[op.qubit_map.get(q, q)] for q in body.all_qubits()}
        except KeyError:
            self.fail(errors.UnsupportedOperationError, op, "it acts on qubits outside the circuit")
        use_ids = op.use_repetition_ids and op.repetition_ids is not None
        path = tuple(op.parent_path)
        if use_ids and reps == 1:
            path += (op.repetition_ids[0],)
        kmaps = ((dict(op.measurement_key_map),) + scope.kmaps if op.measurement_key_map
                 else scope.kmaps)
        resolvers = ((op.param_resolver,) + scope.resolvers if op.param_resolver
                     else scope.resolvers)
        b = self.b
        b.end_moment()
        if reps > 1:
            loop_id = b.begin_loop(reps)
            var = self.keys.open_loop(loop_id, reps, op.repetition_ids if use_ids else None)
            if var is not None:
                path += (var,)
        child_path = scope.path + path
        child = Scope(qidx, child_path, kmaps, resolvers,
                      scope.starts + (self.keys.serial,) * len(path))
        self._walk(body, child)
        if reps > 1:
            b.end_moment()
            b.end_loop()
            self._check_record_tables(op, reps, use_ids)
            self.keys.close_loop(b.loops[loop_id].rec_stride)
        b.begin_moment()

    def _check_record_tables(self, op, reps: int, use_ids: bool) -> None:
        """Refuse, before they are built, the per-record tables of a loop that measures more times
        than host memory can list (key tables, reference sample, one shot's record bits; and a
        name per iteration where Cirq gives repetition ids)."""
        records = self.b.num_records
        nbytes = _BYTES_PER_RECORD * records + (_BYTES_PER_NAME * reps if use_ids else 0)
        free = memory.host_headroom()
        if nbytes > free.bytes:
            self.fail(errors.OutOfMemoryError, op,
                      f"its {reps:,} repetitions make the circuit write {records:,} measurement records per "
                      f"shot; listing them needs about {nbytes / 2**30:.1f} GiB of host memory and "
                      f"{free.bytes / 2**30:.1f} GiB is available under {free.describe()} (fewer repetitions, "
                      "or measure less inside the loop)")

    # -- classical control ------------------------------------------------------------------------
    def _controlled(self, op: cirq.ClassicallyControlledOperation, scope: Scope, at: Cursor) -> None:
        combined = self.controls + tuple((c, scope) for c in op.classical_controls)
        cid = self._make_condition(combined, op)
        with self.under(cid, combined):
            self.emit_op(op.without_classical_controls(), scope, at.after(self.b.max_pos() + 1))

    def _make_condition(self, combined, op) -> int:
        widths: List[Tuple[cirq.MeasurementKey, int, int]] = []
        refs: List[Tuple[int, int]] = []
        seen = set()
        box: List[int] = []  # the condition id, known once the refs are complete

        for condition, scope in combined:
            index = getattr(condition, "index", -1)
            for mkey in condition.keys:
                if (mkey, index, id(scope)) in seen:
                    continue
                seen.add((mkey, index, id(scope)))
                span = [len(refs), 0]

                def finish(depth, span=span):
                    self.b.conditions[box[0]].refs[span[0]:span[0] + span[1], 1] = depth

                slots, depth = self.read_key(scope, mkey, op, True, finish, False, index)
                span[1] = len(slots)
                widths.append((mkey, len(slots), index))
                refs.extend((int(s), depth) for s in slots)
        try:
            table = condition_table([c for c, _ in combined], widths)
        except errors.UnsupportedOperationError as error:
            self.fail(errors.UnsupportedOperationError, op, str(error))
        cid = self.b.condition(refs, table)
        box.append(cid)
        return cid
