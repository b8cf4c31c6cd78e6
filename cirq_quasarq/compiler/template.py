"""Parametrized circuits: compile once, resolve many times.

Template mode gives every parametrized operation a fixed slot: a unitary gets as many
instructions as the largest Clifford lowering found when probing its parameters (the rest are `I`
no-ops on its first qubit), so resolution patches rows in place and never moves an instruction; a
noise channel gets one instruction with its own channel table, patched on resolution. Only those
operations are evaluated by `Template.resolve`.

Anything the probes cannot size (a parametrized loop count, a gate that needs decomposition, ...)
makes the template fall back to a full walk with the resolver (`rewalk`).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, List, Optional, Sequence, Tuple

import cirq
import numpy as np
import sympy

from .. import errors, opcodes
from ..program import AUX, A, B, OP, Channel, Program
from . import channels
from .gate_table import lower_gate

PROBE_VALUES = (0.0, 0.5, 1.0, 1.5, -0.5, 0.25, 2.0)
MAX_PROBES = 200
_I = opcodes.CODE["I"]
_PAULI = {cirq.X: opcodes.CODE["X"], cirq.Y: opcodes.CODE["Y"], cirq.Z: opcodes.CODE["Z"]}


@dataclasses.dataclass
class Slot:
    kind: str  # "unitary" | "noise" | "sweep"
    op: Any  # the operation as written (parametrized)
    resolvers: Tuple  # its CircuitOperations' resolvers, innermost first
    qubits: Sequence[int]  # program qubit index per op qubit
    rows: Tuple[int, ...]  # slot row ids (see Template._row_index)
    where: str
    channel: int  # noise: the channel id to patch


def resolve_chain(value, resolvers, final=None):
    """Resolve through enclosing CircuitOperations' resolvers (innermost first), then `final`."""
    for r in resolvers:
        value = cirq.resolve_parameters(value, r, recursive=False)
    if final is not None:
        value = cirq.resolve_parameters(value, final)
    return value


_PROBE_CACHE: dict = {}


def probe_slot(op, resolvers) -> Optional[Tuple[str, int]]:
    """("unitary", instructions) or ("noise", 1) for a parametrized op; None if unknown."""
    try:
        cache_key = (op.gate, len(op.qubits), tuple(resolvers))
        hit = _PROBE_CACHE.get(cache_key, _PROBE_CACHE)
    except TypeError:
        cache_key, hit = None, _PROBE_CACHE
    if hit is not _PROBE_CACHE:
        return hit
    result = _probe(op, resolvers)
    if cache_key is not None:
        if len(_PROBE_CACHE) > 4096:
            _PROBE_CACHE.clear()
        _PROBE_CACHE[cache_key] = result
    return result


def _probe(op, resolvers) -> Optional[Tuple[str, int]]:
    if op.gate is None:
        return None
    partial = resolve_chain(op, resolvers)
    names = sorted(cirq.parameter_names(partial))
    combos = list(itertools.product(PROBE_VALUES, repeat=len(names)))
    if len(combos) > MAX_PROBES:
        rng = np.random.default_rng(0)
        combos = [combos[i] for i in rng.choice(len(combos), MAX_PROBES, replace=False)]
    kinds, size = set(), 0
    n = len(op.qubits)
    for combo in combos:
        try:
            resolved = cirq.resolve_parameters(partial, dict(zip(names, combo)))
            gate = resolved.gate
            if gate is None or cirq.is_parameterized(resolved):
                continue
            if channels.is_noise_gate(gate):
                channels.noise_spec(gate)
                kinds.add("noise")
                continue
            lowered = lower_gate(gate, n)
        except errors.NonCliffordError:
            continue
        except Exception:  # invalid probe values (e.g. a probability above 1)
            continue
        if lowered is None:
            return None
        kinds.add("unitary")
        size = max(size, len(lowered))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    return (kind, 1) if kind == "noise" else (kind, max(size, 1))


class Template:
    """A compiled circuit whose parametrized operations are resolved by `resolve`."""

    def __init__(self, program: Optional[Program], slots: List[Slot], circuit, qubit_order, noise,
                 rewalk: bool = False):
        self.program = program
        self.slots = slots
        self.circuit = circuit
        self.qubit_order = qubit_order
        self.noise = noise
        self.rewalk = rewalk
        self._row_index = None
        if program is not None and slots:
            aux = program.instructions[:, AUX]
            rows = np.flatnonzero(aux <= -2)
            index = np.empty(len(rows), dtype=np.int64)
            index[-2 - aux[rows]] = rows
            self._row_index = index
            program.instructions[rows, AUX] = -1

    @property
    def is_parametrized(self) -> bool:
        return self.rewalk or bool(self.slots)

    def resolve(self, resolver=None) -> Program:
        """The Program for these parameter values (the shared base Program when there are no
        parametrized operations)."""
        if self.rewalk:
            from .compile import compile_resolved

            return compile_resolved(self.circuit, self.qubit_order, self.noise, resolver)
        if not self.slots:
            return self.program
        r = cirq.ParamResolver(resolver)
        ins = self.program.instructions.copy()
        chans = list(self.program.channels)
        for slot in self.slots:
            if slot.kind == "sweep":
                self._fill_sweep(slot, r, ins)
                continue
            op = resolve_chain(slot.op, slot.resolvers, r)
            if cirq.is_parameterized(op):
                raise errors.UnsupportedOperationError(
                    f"cannot compile {slot.op!r} at {slot.where}: unresolved parameters "
                    f"{sorted(cirq.parameter_names(op))} (symbols were not specified in the resolver)")
            if slot.kind == "noise":
                try:
                    spec = channels.noise_spec(op.gate)
                except errors.UnsupportedNoiseError as error:
                    raise errors.UnsupportedNoiseError(
                        f"cannot compile {slot.op!r} at {slot.where}: {error}") from None
                n = len(slot.qubits)
                if spec is None:
                    chans[slot.channel] = Channel(n, np.zeros(0), np.zeros((0, n), dtype=np.uint8))
                else:
                    probs = np.asarray(spec.probs, dtype=np.float64)
                    paulis = np.asarray(spec.paulis, dtype=np.uint8).reshape(len(probs), n)
                    keep = probs > 0
                    chans[slot.channel] = Channel(n, probs[keep], paulis[keep])
                continue
            try:
                lowered = lower_gate(op.gate, len(slot.qubits)) if op.gate is not None else None
            except errors.NonCliffordError as error:
                raise errors.NonCliffordError(
                    f"cannot compile {slot.op!r} at {slot.where}: resolved to {op!r}, which is "
                    f"not Clifford ({error})") from None
            if lowered is None or len(lowered) > len(slot.rows):
                from .compile import compile_resolved

                return compile_resolved(self.circuit, self.qubit_order, self.noise, resolver)
            qs = slot.qubits
            for i, rid in enumerate(slot.rows):
                idx = self._row_index[rid]
                if i < len(lowered):
                    name, targets = lowered[i]
                    ins[idx, OP] = opcodes.CODE[name]
                    ins[idx, A] = qs[targets[0]]
                    ins[idx, B] = qs[targets[1]] if len(targets) > 1 else -1
                else:
                    ins[idx, OP], ins[idx, A], ins[idx, B] = _I, qs[0], -1
        return dataclasses.replace(self.program, instructions=ins, channels=chans)

    def _fill_sweep(self, slot: Slot, r, ins) -> None:
        gate = slot.op.gate
        value = resolve_chain(sympy.Symbol(str(gate.cirq_sweep_symbol)), slot.resolvers, r)
        if isinstance(value, sympy.Basic) and value.free_symbols:
            raise errors.UnsupportedOperationError(
                f"cannot compile {slot.op!r} at {slot.where}: unresolved sweep symbol "
                f"{gate.cirq_sweep_symbol}")
        idx = self._row_index[slot.rows[0]]
        ins[idx, OP] = _PAULI[gate.pauli] if bool(value) else _I
