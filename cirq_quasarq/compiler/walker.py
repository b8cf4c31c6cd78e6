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
into a plan: a tuple of ready rows for unitaries and one- or two-qubit channels (the common case:
one builder call per operation), or a callable for the rest.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

import cirq
import sympy

from .. import errors
from ..core import memory, opcodes
from ..core.program import Program
from . import channels
from .conditions import condition_table
from .emitter import Cursor, Emitter
from .keys import Scope
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


class Walker(Emitter):
    """One compilation (see `Emitter` for the state lowerings use)."""

    def __init__(self, qubits: Tuple, mode: str = "template", resolver=None, non_pauli: str = "error"):
        super().__init__(qubits, mode, resolver)
        self.non_pauli = non_pauli  # registry.lower's option: refuse or twirl non-Pauli channels
        self._plans: Dict[int, Any] = {}  # id(gate) -> plan; `_keep` keeps the ids valid
        self._keep: List[Any] = []
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
        return self.b.build(self.qubits, rows[:count], records[:count])

    # -- the walk -------------------------------------------------------------------------------
    def _walk(self, moments, scope: Scope, indices: Optional[List[int]] = None) -> None:
        plans = self._plans
        plan_of = self._plan
        b = self.b
        lowered = b.lowered
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
            qidx = scope.qidx
            for op in ops:
                gate = op.gate
                if gate is not None:
                    plan = plans.get(id(gate))
                    if plan is None:
                        plan = plan_of(gate)
                    if plan.__class__ is tuple:
                        lowered(plan, op.qubits, qidx)
                    else:
                        plan(op, gate, scope, Cursor())
                else:
                    self.emit_op(op, scope, Cursor())
            b.end_moment()
        loc.pop()

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
        lowering = lower(gate, cirq.num_qubits(gate), self.non_pauli)
        if lowering.twirled:
            channels.warn_twirled(gate, self._warned)
        plan = self._plan_of(lowering, gate)
        self._plans[id(gate)] = plan
        self._keep.append(gate)
        return plan

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
