"""The compiler: `cirq.Circuit` -> `Program`, walking the circuit once.

Per operation, in this order: measurements, resets, noise, stimcirq annotations, classical
control and `CircuitOperation` are handled here and in `lowering.py`; unitary gates go through
`gate_table.lower_gate` (cached per gate object, so the common case costs a dict lookup); anything
else is decomposed with `cirq.decompose_once`; what is left raises `UnsupportedOperationError`
naming the operation, its moment and what was tried.

STEP: every moment opens a new step; an instruction at position p of its operation's lowering
(as-soon-as-possible per qubit) gets step `moment step + p`, so instructions of one step touch
disjoint qubits. Rows of a moment are emitted position by position.

Loops (`CircuitOperation` with repetitions) become REPEAT blocks; the body is walked once.
Parametrized operations become fixed-size slots (`template.py`), filled by `Template.resolve`.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

import cirq
import numpy as np
import sympy

from .. import errors, opcodes
from ..program import NUM_FIELDS, Program, ProgramBuilder
from . import cache, channels, stim_types
from .gate_table import lower_gate
from .keys import KeyTable, Scope, render
from .lowering import LoweringMixin, place
from .template import Slot, Template, probe_slot, resolve_chain

CODE = opcodes.CODE
_I = CODE["I"]
_TAGGED = cirq.TaggedOperation
_CIRCUIT_OP = cirq.CircuitOperation
_CONTROLLED = cirq.ClassicallyControlledOperation


class _Rewalk(Exception):
    """Template mode met something that only a resolved walk can compile."""


class _Ops:
    """A pseudo-moment: operations on disjoint qubits from a noise model's OP_TREE."""

    __slots__ = ("operations",)

    def __init__(self, operations):
        self.operations = tuple(operations)


class Walker(LoweringMixin):
    """One compilation. mode "template": parametrized ops become slots; "resolve": they are
    resolved with `resolver` on the way."""

    def __init__(self, qubits: Tuple, mode: str = "template", resolver=None):
        self.qubits = tuple(qubits)
        self.b = ProgramBuilder(len(self.qubits))
        self.mode = mode
        self.resolver = cirq.ParamResolver(resolver) if mode == "resolve" else None
        self.keys = KeyTable()
        self._plans: Dict[int, Any] = {}
        self._keep: List[Any] = []
        self._noise_plans: Dict[Any, Any] = {}
        self._out: List[int] = []
        self._buckets: List[List[int]] = []
        self._step0 = 0
        self.cond = -1
        self._cond_list: Tuple = ()
        self._loc: List[int] = []
        self.slots: List[Slot] = []
        self._slot_count = 0
        self.top_circuit = None  # for cirq_samples_terminally
        self.noisy = False
        self._terminal: Optional[bool] = None

    # -- entry ----------------------------------------------------------------------------------
    def run(self, moments, indices: Optional[List[int]] = None) -> Program:
        """Compile top-level moments (`indices`: their moment numbers in the user's circuit)."""
        qidx = {q: i for i, q in enumerate(self.qubits)}
        self._walk(moments, Scope(qidx), indices)
        self._flush()
        return self.b.build(self.qubits)

    def cirq_samples_terminally(self) -> bool:
        """Whether Cirq's simulators would sample this circuit's measurements at the end (a
        unitary prefix, then only MeasurementGates: SimulatorBase._run) instead of acting on
        them one by one; the two paths order confusion and inversion differently."""
        if self._terminal is None:
            self._terminal = (not self.noisy and self.top_circuit is not None
                              and samples_terminally(self.top_circuit))
        return self._terminal

    # -- locations and errors ---------------------------------------------------------------------
    def where(self) -> str:
        if not self._loc:
            return "the circuit"
        text = f"moment {self._loc[0]}"
        for m in self._loc[1:]:
            text += f" (subcircuit moment {m})"
        return text

    def fail(self, cls, op, what: str):
        raise cls(f"cannot compile {op!r} at {self.where()}: {what}")

    def _h_raise(self, cls, message, op, gate, scope, fr, base):
        self.fail(cls, op, message)

    # -- emission -------------------------------------------------------------------------------
    def row(self, pos: int, code: int, a: int = -1, b: int = -1, rec: int = -1, rand: int = -1,
            aux: int = -1, flags: int = 0) -> None:
        r = (code, a, b, rec, rand, aux, self.cond, flags, self._step0 + pos)
        if pos == 0:
            self._out.extend(r)
        else:
            buckets = self._buckets
            while len(buckets) < pos:
                buckets.append([])
            buckets[pos - 1].extend(r)

    def max_pos(self) -> int:
        return len(self._buckets)

    def _begin_moment(self) -> None:
        self._step0 = self.b.next_step()
        self._buckets = []

    def _end_moment(self) -> None:
        out = self._out
        for bucket in self._buckets:
            out.extend(bucket)
            self.b.next_step()
        self._buckets = []

    def _flush(self) -> None:
        if self._out:
            block = np.fromiter(self._out, dtype=np.int32, count=len(self._out)).reshape(-1, NUM_FIELDS)
            self.b.emit_block(block)
            self._out = []

    # -- the walk -------------------------------------------------------------------------------
    def _walk(self, moments, scope: Scope, indices: Optional[List[int]] = None) -> None:
        plans = self._plans
        plan_gate = self._plan_gate
        b = self.b
        emit_other = self._emit_op
        loc = self._loc
        loc.append(0)
        for mi, moment in enumerate(moments):
            ops = moment.operations
            if not ops:
                continue
            loc[-1] = mi if indices is None else indices[mi]
            self._begin_moment()
            out_extend = self._out.extend
            step0 = self._step0
            cond = self.cond
            qidx = scope.qidx
            for op in ops:
                gate = op.gate
                if gate is not None:
                    plan = plans.get(id(gate))
                    if plan is None:
                        plan = plan_gate(gate)
                    if plan.__class__ is tuple:
                        qs = op.qubits
                        for code, la, lb, pos, aux in plan:
                            if aux < 0:
                                r = (code, qidx[qs[la]], qidx[qs[lb]] if lb >= 0 else -1, -1, -1,
                                     -1, cond, 0, step0 + pos)
                            else:  # a Pauli channel: one random slot
                                rand = b.num_rand
                                b.num_rand = rand + 1
                                r = (code, qidx[qs[la]], qidx[qs[lb]] if lb >= 0 else -1, -1,
                                     rand, aux, cond, 0, step0 + pos)
                            if pos:
                                self._bucket(pos).extend(r)
                            else:
                                out_extend(r)
                        continue
                    plan(op, gate, scope, {}, 0)
                else:
                    emit_other(op, scope, {}, 0)
                # Handlers may have flushed rows or opened a new moment context.
                out_extend = self._out.extend
                step0 = self._step0
            self._end_moment()
        loc.pop()

    def _bucket(self, pos: int) -> List[int]:
        buckets = self._buckets
        while len(buckets) < pos:
            buckets.append([])
        return buckets[pos - 1]

    def _emit_op(self, op, scope: Scope, fr: Dict, base: int) -> None:
        """Any operation, placed after earlier instructions of the same operation (`fr`)."""
        gate = op.gate
        if gate is not None:
            plan = self._plans.get(id(gate))
            if plan is None:
                plan = self._plan_gate(gate)
            if plan.__class__ is tuple:
                try:
                    qi = [scope.qidx[q] for q in op.qubits]
                except KeyError:
                    self.fail(errors.UnsupportedOperationError, op, "it acts on qubits outside the circuit")
                for code, la, lb, _, aux in plan:
                    qs = (qi[la],) if lb < 0 else (qi[la], qi[lb])
                    self.row(place(qs, fr, base), code, qs[0], qs[1] if lb >= 0 else -1, -1,
                             -1 if aux < 0 else self.b.take_rand(), aux)
            else:
                plan(op, gate, scope, fr, base)
            return
        if isinstance(op, _TAGGED):
            return self._emit_op(op.untagged, scope, fr, base)
        if isinstance(op, _CIRCUIT_OP):
            fr.clear()
            return self._circuit_op(op, scope)
        if isinstance(op, _CONTROLLED):
            return self._controlled(op, scope, fr, base)
        if stim_types.ANNOTATION_TYPES and isinstance(op, stim_types.ANNOTATION_TYPES):
            return self._annotation(op, scope)
        self._decompose(op, scope, fr, base)

    def _decompose(self, op, scope: Scope, fr: Dict, base: int) -> None:
        try:
            parts = cirq.decompose_once(op, default=None)
        except (TypeError, ValueError) as error:
            parts, reason = None, f" ({error})"
        else:
            reason = ""
        if parts is None:
            self.fail(errors.UnsupportedOperationError, op,
                      "it is not a measurement, reset, Pauli noise channel, annotation, classical "
                      "control or subcircuit, gate_table.lower_gate cannot lower it and "
                      f"cirq.decompose_once gives nothing{reason}")
        for part in cirq.flatten_to_ops(parts):
            self._emit_op(part, scope, fr, base)

    # -- plans per gate object ------------------------------------------------------------------
    def _plan_gate(self, gate):
        handler = self.TYPE_HANDLERS.get(type(gate))
        if handler is not None:
            return getattr(self, handler)
        plan = self._plan_uncached(gate)
        self._plans[id(gate)] = plan
        self._keep.append(gate)
        return plan

    def _plan_uncached(self, gate):
        if type(gate) in channels.NOISE_TYPES or stim_types.is_stim_noise(gate):
            return self._h_param if cirq.is_parameterized(gate) else self._noise_plan(gate)
        if cirq.is_parameterized(gate):
            return self._h_param
        try:
            ops = lower_gate(gate, cirq.num_qubits(gate))
        except errors.NonCliffordError as error:
            return functools.partial(self._h_raise, errors.NonCliffordError, str(error))
        if ops is not None:
            return unitary_plan(ops)
        if not cirq.has_unitary(gate) and (cirq.has_mixture(gate) or cirq.has_kraus(gate)):
            if not isinstance(gate, cirq.MeasurementGate):
                return self._noise_plan(gate)
        return self._h_decompose

    def _h_decompose(self, op, gate, scope, fr, base):
        self._decompose(op, scope, fr, base)

    def _noise_plan(self, gate):
        try:
            hit = self._noise_plans.get(gate)
        except TypeError:
            hit = None
        if hit is not None:
            return hit
        try:
            spec = channels.noise_spec(gate)
        except errors.UnsupportedNoiseError as error:
            plan = functools.partial(self._h_raise, errors.UnsupportedNoiseError, str(error))
        else:
            if spec is None:
                plan = ()
            else:
                cid = self.b.channel_id(spec.arity, spec.probs, spec.paulis)
                code = CODE[spec.opname]
                if opcodes.OPCODES[code].arity == 0:  # E: targets in ext_qubits
                    ext = spec.paulis[0] if len(spec.probs) == 1 else None
                    plan = functools.partial(self._h_noise, code, cid, ext_paulis=ext)
                else:
                    plan = ((code, 0, 1 if spec.arity == 2 else -1, 0, cid),)
        try:
            self._noise_plans[gate] = plan
        except TypeError:
            pass
        return plan

    # -- parameters -----------------------------------------------------------------------------
    def _h_param(self, op, gate, scope, fr, base):
        if self.mode == "resolve":
            resolved = resolve_chain(op, scope.resolvers, self.resolver)
            if cirq.is_parameterized(resolved):
                self.fail(errors.UnsupportedOperationError, op,
                          f"unresolved parameters {sorted(cirq.parameter_names(resolved))} "
                          "(symbols were not specified in the resolver)")
            return self._emit_op(resolved, scope, fr, base)
        info = probe_slot(op, scope.resolvers)
        if info is None:
            raise _Rewalk()
        kind, size = info
        qs = [scope.qidx[q] for q in op.qubits]
        if kind == "noise":
            n = len(qs)
            cid = len(self.b.channels)
            self.b.channels.append(channels_placeholder(n))
            name = {1: "PAULI_CHANNEL_1", 2: "PAULI_CHANNEL_2"}.get(n, "E")
            self._h_noise(CODE[name], cid, op, gate, scope, fr, base)
            self.slots.append(Slot("noise", op, scope.resolvers, qs, (), self.where(), cid))
            return
        self._slot_rows(kind, op, scope, qs, size, fr, base)

    def _slot_rows(self, kind, op, scope, qs, size, fr, base):
        rows = []
        for _ in range(size):
            rid = self._slot_count
            self._slot_count += 1
            self.row(place(qs, fr, base), _I, qs[0], aux=-2 - rid)
            rows.append(rid)
        self.slots.append(Slot(kind, op, scope.resolvers, qs, tuple(rows), self.where(), -1))

    # -- subcircuits ------------------------------------------------------------------------------
    def _circuit_op(self, op: cirq.CircuitOperation, scope: Scope) -> None:
        if op.repeat_until is not None:
            self.fail(errors.UnsupportedOperationError, op,
                      "repeat_until loops depend on measurement results (not supported)")
        reps = op.repetitions
        if isinstance(reps, sympy.Basic):
            if self.mode != "resolve":
                raise _Rewalk()
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
        if reps > 1 and self.cond >= 0:
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
        self._end_moment()
        if reps > 1:
            self._flush()
            loop_id = self.b.begin_loop(reps)
            var = self.keys.open_loop(loop_id, reps, op.repetition_ids if use_ids else None)
            if var is not None:
                path += (var,)
        child_path = scope.path + path
        child = Scope(qidx, child_path, kmaps, resolvers,
                      scope.starts + (self.keys.serial,) * len(path))
        self._walk(body, child)
        if reps > 1:
            self._end_moment()
            self._flush()
            self.b.end_loop()
            self.keys.close_loop(self.b.loops[loop_id].rec_stride)
        self._begin_moment()

    # -- keys ------------------------------------------------------------------------------------
    def register_key(self, key: Tuple, slots) -> None:
        arr = np.asarray(slots, dtype=np.int64)
        names = self.keys.names(key)
        self.b.add_key(render(key), arr, names=names)
        self.keys.measured(key, arr)

    def read_key(self, scope: Scope, mkey: cirq.MeasurementKey, op, mapped: bool,
                 finish, all_levels: bool):
        """(slots, depth) of the latest instance of a key as seen from `scope`."""
        name = mkey.name
        if mapped:
            for kmap in scope.kmaps:
                name = kmap.get(name, name)
        tail = tuple(mkey.path) + (name,)
        key = self.keys.bind(scope, tail)
        if key is None:
            raise errors.MeasurementKeyError(
                f"{op!r} at {self.where()} reads measurement key {render(tail)!r}, which is not "
                "measured before it")
        return self.keys.read(key, f"{op!r} at {self.where()}", finish, all_levels)


def samples_terminally(circuit) -> bool:
    blocked: set = set()
    for moment in circuit:
        for op in moment.operations:
            if not blocked.intersection(op.qubits) and cirq.has_unitary(op):
                continue
            if not isinstance(op.gate, cirq.MeasurementGate):
                return False
            blocked.update(op.qubits)
    return True


def channels_placeholder(n: int):
    from ..program import Channel

    return Channel(n, np.zeros(0, dtype=np.float64), np.zeros((0, n), dtype=np.uint8))


def unitary_plan(ops) -> Tuple:
    """(code, local a, local b, position, aux) rows, positions as-soon-as-possible per local
    qubit; aux >= 0 marks a Pauli channel instruction (it takes a random slot)."""
    fr: Dict[int, int] = {}
    rows = []
    for name, targets in ops:
        p = place(targets, fr, 0)
        rows.append((CODE[name], targets[0], targets[1] if len(targets) > 1 else -1, p, -1))
    return tuple(rows)


# ---------------------------------------------------------------------------------------------
# Public API (caches: cache.py)


def _qubits_for(circuit, qubit_order) -> Tuple:
    return tuple(cirq.QubitOrder.as_qubit_order(qubit_order).order_for(circuit.all_qubits()))


def _top_moments(circuit, noise_model) -> Tuple[List, Optional[List[int]]]:
    """The moments to walk, and for each the index of the user's moment it came from."""
    if noise_model is None:
        return list(circuit), None
    out: List = []
    indices: List[int] = []
    system_qubits = sorted(circuit.all_qubits())
    for index, tree in enumerate(noise_model.noisy_moments(circuit, system_qubits)):
        start = len(out)
        _append_tree(out, tree)
        indices.extend([index] * (len(out) - start))
    return out, indices


def _append_tree(out: List, tree) -> None:
    """Moments of an OP_TREE; loose operations are grouped while their qubits are disjoint."""
    if isinstance(tree, cirq.Moment):
        out.append(tree)
        return
    pending: List = []
    used: set = set()
    for item in cirq.flatten_to_ops_or_moments(tree):
        if isinstance(item, cirq.Moment):
            if pending:
                out.append(_Ops(pending))
                pending, used = [], set()
            out.append(item)
            continue
        qs = set(item.qubits)
        if qs & used:
            out.append(_Ops(pending))
            pending, used = [], set()
        pending.append(item)
        used |= qs
    if pending:
        out.append(_Ops(pending))


def _noise_model(noise):
    if noise is None:
        return None
    model = cirq.NoiseModel.from_noise_model_like(noise)
    return None if model is cirq.NO_NOISE or model == cirq.NO_NOISE else model


def build_template(circuit, qubit_order=cirq.QubitOrder.DEFAULT, noise=None) -> Template:
    """Walk the circuit once (uncached); see `compile_template`."""
    model = _noise_model(noise)
    qubits = _qubits_for(circuit, qubit_order)
    walker = Walker(qubits, "template")
    walker.top_circuit, walker.noisy = circuit, model is not None
    try:
        program = walker.run(*_top_moments(circuit, model))
    except _Rewalk:
        return Template(None, [], circuit, qubit_order, noise, rewalk=True)
    return Template(program, walker.slots, circuit, qubit_order, noise)


def compile_resolved(circuit, qubit_order=cirq.QubitOrder.DEFAULT, noise=None, resolver=None) -> Program:
    """Walk the circuit resolving parameters on the way (uncached)."""
    model = _noise_model(noise)
    walker = Walker(_qubits_for(circuit, qubit_order), "resolve", resolver)
    walker.top_circuit, walker.noisy = circuit, model is not None
    return walker.run(*_top_moments(circuit, model))


def compile_template(circuit, *, qubit_order=cirq.QubitOrder.DEFAULT, noise=None) -> Template:
    """Compile once for any parameter values: `Template.resolve(resolver)` -> Program (cached)."""
    key = (cache.circuit_key(circuit), cache.option_key(qubit_order), cache.option_key(noise))
    hit = cache.TEMPLATES.get(key)
    if hit is not None:
        return hit[0]
    template = build_template(circuit, qubit_order, noise)
    rows = template.program.num_instructions if template.program is not None else 0
    cache.TEMPLATES.put(key, (template, circuit, tuple(circuit.moments), qubit_order, noise), rows)
    return template


def compile_circuit(circuit, *, qubit_order=cirq.QubitOrder.DEFAULT, noise=None,
                    resolver=None) -> Program:
    """The Program of a circuit (cached: an unmodified circuit compiles once per options).

    The returned Program is shared with the cache; treat it as read-only."""
    key = (cache.circuit_key(circuit), cache.option_key(qubit_order), cache.option_key(noise),
           cache.resolver_key(resolver))
    hit = cache.PROGRAMS.get(key)
    if hit is not None:
        return hit[0]
    program = compile_template(circuit, qubit_order=qubit_order, noise=noise).resolve(resolver)
    cache.PROGRAMS.put(key, (program, circuit, tuple(circuit.moments), qubit_order, noise, resolver),
                       program.num_instructions)
    return program


def clear_cache() -> None:
    cache.TEMPLATES.clear()
    cache.PROGRAMS.clear()
