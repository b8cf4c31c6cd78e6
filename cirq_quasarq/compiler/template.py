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

import collections
import itertools
from typing import Callable, List, Optional, Tuple

import cirq
import numpy as np
import sympy

from .. import errors
from ..core import opcodes
from ..core.program import AUX, Channel, Program
from . import channels
from .emitter import Slot
from .lowerings import sweep_opcode
from .params import resolve_chain
from .registry import Lowering, lower

PROBE_VALUES = (0.0, 0.5, 1.0, 1.5, -0.5, 0.25, 2.0)
MAX_PROBES = 200

_PROBE_CACHE: dict = {}
_SHARED_RESOLUTIONS = 8  # resolutions whose derived caches a template keeps


def probe_slot(op, resolvers, non_pauli: str = "error") -> Optional[Tuple[str, int]]:
    """("unitary", instructions) or ("noise", 1) for a parametrized op; None if unknown
    (`non_pauli`: as `registry.lower`'s)."""
    try:
        cache_key = (op.gate, len(op.qubits), tuple(resolvers), non_pauli)
        hit = _PROBE_CACHE.get(cache_key, _PROBE_CACHE)
    except TypeError:
        cache_key, hit = None, _PROBE_CACHE
    if hit is not _PROBE_CACHE:
        return hit
    result = _probe(op, resolvers, non_pauli)
    if cache_key is not None:
        if len(_PROBE_CACHE) > 4096:
            _PROBE_CACHE.clear()
        _PROBE_CACHE[cache_key] = result
    return result


def _probe(op, resolvers, non_pauli: str) -> Optional[Tuple[str, int]]:
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
        except Exception:  # invalid probe values (e.g. a probability above 1)
            continue
        gate = resolved.gate
        if gate is None or cirq.is_parameterized(resolved):
            continue
        try:
            lowering = lower(gate, n, non_pauli)
        except Exception:  # a value the gate's own code rejects
            continue
        if lowering.kind == Lowering.ERROR:  # this probe value is not Clifford / not a channel
            continue
        if lowering.kind == Lowering.NOISE:
            kinds.add("noise")
            continue
        if lowering.kind != Lowering.OPS:
            return None
        kinds.add("unitary")
        size = max(size, len(lowering.ops))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    return (kind, 1) if kind == "noise" else (kind, max(size, 1))


def _noise_spec(gate, n: int, lowering: Optional[Lowering]):
    """The channel a noise slot resolved to (a Pauli gate left by with_probability(1) included)."""
    if lowering is not None and lowering.kind == Lowering.NOISE:
        return lowering.spec
    if lowering is not None and lowering.kind == Lowering.ERROR:
        error = lowering.error_for(gate)
        if isinstance(error, errors.UnsupportedNoiseError):
            raise error
    return channels.from_channel(gate, n)


class Template:
    """A compiled circuit whose parametrized operations are resolved by `resolve`.

    `rewalk(resolver)` compiles the circuit from scratch for values the slots cannot take (the
    compiler passes it in, so this module never imports the walk)."""

    def __init__(self, program: Optional[Program], slots: List[Slot], rewalk: Callable[[object], Program],
                 needs_rewalk: bool = False, non_pauli: str = "error"):
        self.program = program
        self.non_pauli = non_pauli  # registry.lower's option, for the slots' resolved gates
        self._warned: set = set()  # the twirled channels named in a warning
        self.slots = slots
        self.rewalk = rewalk
        self.needs_rewalk = needs_rewalk
        # derived caches (schedule, reference sample, frame plan) of recent resolutions, keyed by
        # the rows they patch: resolutions that differ only in noise probabilities share them
        self._derived: "collections.OrderedDict[bytes, dict]" = collections.OrderedDict()
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
        return self.needs_rewalk or bool(self.slots)

    def resolve(self, resolver=None) -> Program:
        """The Program for these parameter values (the shared base Program when there are no
        parametrized operations)."""
        if self.needs_rewalk:
            return self.rewalk(resolver)
        if not self.slots:
            return self.program
        r = cirq.ParamResolver(resolver)
        rows: List[int] = []
        ops: List[str] = []
        a: List[int] = []
        b: List[int] = []
        aux: List[int] = []
        phases: List[complex] = []
        chans = list(self.program.channels)
        for slot in self.slots:
            if slot.kind == "sweep":
                gate = slot.op.gate
                value = resolve_chain(sympy.Symbol(str(gate.cirq_sweep_symbol)), slot.resolvers, r)
                if isinstance(value, sympy.Basic) and value.free_symbols:
                    raise errors.UnsupportedOperationError(
                        f"cannot compile {slot.op!r} at {slot.where}: unresolved sweep symbol "
                        f"{gate.cirq_sweep_symbol}")
                rows.append(self._row_index[slot.rows[0]])
                ops.append(sweep_opcode(gate, value))
                a.append(slot.qubits[0])
                b.append(-1)
                aux.append(-1)
                continue
            try:
                op = resolve_chain(slot.op, slot.resolvers, r)
            except (errors.InvalidProbabilityError, ValueError) as error:
                if slot.kind != "noise":
                    raise
                raise errors.InvalidProbabilityError(f"cannot compile {slot.op!r} at {slot.where} for {dict(r.param_dict)}: "
                                                     f"{error}") from None
            if cirq.is_parameterized(op):
                raise errors.UnsupportedOperationError(
                    f"cannot compile {slot.op!r} at {slot.where}: unresolved parameters "
                    f"{sorted(cirq.parameter_names(op))} (symbols were not specified in the resolver)")
            n = len(slot.qubits)
            lowering = lower(op.gate, n, self.non_pauli) if op.gate is not None else None
            if lowering is not None and lowering.twirled:
                channels.warn_twirled(op.gate, self._warned)
            if slot.kind == "noise":
                try:
                    spec = _noise_spec(op.gate, n, lowering)
                except errors.UnsupportedNoiseError as error:
                    raise errors.UnsupportedNoiseError(
                        f"cannot compile {slot.op!r} at {slot.where}: {error}") from None
                if spec is None:
                    chans[slot.channel] = Channel(n, np.zeros(0), np.zeros((0, n), dtype=np.uint8))
                else:
                    probs = np.asarray(spec.probs, dtype=np.float64)
                    letters = np.asarray(spec.paulis, dtype=np.uint8).reshape(len(probs), n)
                    keep = probs > 0
                    chans[slot.channel] = Channel(n, probs[keep], letters[keep])
                continue
            if lowering is not None and lowering.kind == Lowering.ERROR:
                error = lowering.error_for(op.gate)
                raise type(error)(f"cannot compile {slot.op!r} at {slot.where}: resolved to {op!r}, "
                                  f"which is not Clifford ({error})") from None
            if lowering is None or lowering.kind != Lowering.OPS or len(lowering.ops) > len(slot.rows):
                return self.rewalk(resolver)
            qs = slot.qubits
            c = lowering.phase_of(op.gate, n)
            phase = -1
            if abs(c - 1) > 1e-12 or c != c:
                phase = len(self.program.phases) + len(phases)
                phases.append(c)
            for i, rid in enumerate(slot.rows):
                rows.append(self._row_index[rid])
                aux.append(phase if i == 0 else -1)
                if i < len(lowering.ops):
                    name, targets = lowering.ops[i]
                    ops.append(name)
                    a.append(qs[targets[0]])
                    b.append(qs[targets[1]] if len(targets) > 1 else -1)
                else:
                    ops.append("I")
                    a.append(qs[0])
                    b.append(-1)
        codes = np.array([opcodes.CODE[name] for name in ops], dtype=np.int32)
        a32, b32, aux32 = (np.asarray(v, dtype=np.int32) for v in (a, b, aux))
        program = self.program.patched(np.asarray(rows, dtype=np.int64), codes, a32, b32, aux32, chans, phases)
        program.derived = self._derived_for(b"".join(v.tobytes() for v in (codes, a32, b32, aux32)))
        return program

    def _derived_for(self, patch: bytes) -> dict:
        """The derived-cache dict shared by every resolution that writes the same rows (the
        schedule, the reference sample and the frame plan depend on the instructions, the
        conditions and the confusions, never on the channels' probabilities)."""
        shared = self._derived.get(patch)
        if shared is None:
            shared = self._derived[patch] = {}
            while len(self._derived) > _SHARED_RESOLUTIONS:
                self._derived.popitem(last=False)
        else:
            self._derived.move_to_end(patch)
        return shared
