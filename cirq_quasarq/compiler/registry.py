"""The one registry from Cirq operations to lowerings.

`lower(gate, num_qubits)` says how a gate compiles, as a `Lowering`; `lower_operation(op)` does
the same for operations without a gate (stimcirq's annotations). They try, in this order, and the
first step that answers decides:

1. exact value:   `EXACT[gate]`, the common gates (cirq.H, cirq.CNOT, ...): one dict lookup;
2. protocol:      ``gate._quasarq_lowering_()``, a gate that describes itself (below);
3. type:          `BY_TYPE[cls]` for each class of the gate's MRO: gate families, measurements,
                  resets, Pauli channels, stimcirq's types (registered once stimcirq is imported);
4. parameters:    a gate with unresolved symbols compiles as a parametrized slot;
5. unitary:       any small gate with a unitary, turned into a Clifford tableau and named opcodes
                  (a unitary that is not Clifford is a `NonCliffordError`);
6. channel:       any other gate with a mixture / Kraus operators that is exactly a Pauli channel
                  (any other channel is an `UnsupportedNoiseError`, or, with
                  ``non_pauli="twirl"``, its Pauli twirl: `channels.twirl`);
7. decompose:     the walk compiles `cirq.decompose_once(op)` instead;
8. error:         when decomposition gives nothing, the walk names the operation, its moment and
                  what was tried.

Answers are cached per gate value (per type where the entry says all of its gates lower alike).
Adding a gate is one entry: a value in `EXACT`, a type in `BY_TYPE` (`unitary(...)`, `noise(...)`
or `emit(...)`), or, for your own gate class, a method

    def _quasarq_lowering_(self):
        return [("H", (0,)), ("CX", (0, 1))]   # opcode names of core.opcodes, local qubits

returning unitary opcodes equal to the gate up to global phase (or NotImplemented to pass).
"""

from __future__ import annotations

import sys
from typing import Callable, Dict, Optional

import cirq

from .. import errors
from ..core import opcodes
from . import channels, cliffords, lowerings
from .cliffords import NotClifford, OpSeq

MAX_CACHE_ENTRIES = 1 << 16  # bounds memory when a circuit has many distinct float gates


class Lowering:
    """How one gate (or gate-less operation) compiles: the registry's one plan type.

    kind OPS:          `ops`, unitary opcodes ((name, local targets), ...); () is the identity.
    kind NOISE:        `spec`, a Pauli channel (`channels.NoiseSpec`); None when it does nothing.
    kind EMIT:         `emit(em, op, gate, scope, at)` writes its rows itself (see lowerings.py).
    kind PARAMETRIZED: unresolved symbols: a template slot, or resolved on the way.
    kind DECOMPOSE:    compile `cirq.decompose_once(op)` instead.
    kind ERROR:        `error_for(gate)` is the exception, raised with the operation's moment.

    What may be lowered in bulk (many operations of a moment at once, `walker.py`): OPS and NOISE
    lowerings are the same rows for every operation of their gate, so any run of them is one
    block; an EMIT lowering with `many` takes a run of operations of its kind in one call,
    ``many(em, ops, gates, scope)``, writing what `emit` on each in turn writes.
    """

    OPS, NOISE, EMIT, PARAMETRIZED, DECOMPOSE, ERROR = "ops", "noise", "emit", "parametrized", "decompose", "error"
    __slots__ = ("kind", "ops", "spec", "emit", "many", "_error", "_phase", "twirled")

    def __init__(self, kind: str, ops: OpSeq = (), spec=None, emit: Optional[Callable] = None, error=None,
                 twirled: bool = False, many: Optional[Callable] = None):
        self.kind, self.ops, self.spec, self.emit, self._error = kind, ops, spec, emit, error
        self.many = many
        self._phase = None
        self.twirled = twirled  # NOISE: the spec is a non-Pauli channel's twirl (an approximation)

    def phase_of(self, gate, num_qubits: int) -> complex:
        """OPS: the global phase c with unitary(gate) = c · product of the opcodes' canonical
        unitaries (NaN when unknown); computed once per lowering (shared by equal gates)."""
        if self._phase is None:
            self._phase = cliffords.global_phase(gate, self.ops, num_qubits)
        return self._phase

    def error_for(self, gate) -> Exception:
        """The error of an ERROR lowering, naming `gate` as the caller wrote it."""
        if isinstance(self._error, NotClifford):
            return self._error.error(gate)
        return type(self._error)(str(self._error))

    def __repr__(self) -> str:
        detail = {self.OPS: self.ops, self.NOISE: self.spec, self.EMIT: getattr(self.emit, "__name__", self.emit),
                  self.ERROR: self._error}.get(self.kind, "")
        return f"Lowering({self.kind}{', ' if detail != '' else ''}{detail})"


_PARAMETRIZED = Lowering(Lowering.PARAMETRIZED)
_DECOMPOSE = Lowering(Lowering.DECOMPOSE)


# -- entries ---------------------------------------------------------------------------------------

class Entry:
    """A BY_TYPE entry: `lower(gate, n) -> Lowering or None` (None: go on to the next step).
    `symbolic`: the entry itself handles gates that carry symbols (stimcirq.SweepPauli).
    `by_type`: every gate of its types lowers alike (they carry no symbols, nor values that change
    the lowering): the answer is cached per type, so a gate new to the walk costs no lookup by
    value (measurements: each key is another gate)."""

    __slots__ = ("lower", "symbolic", "by_type")

    def __init__(self, lower: Callable, symbolic: bool = False, by_type: bool = False):
        self.lower, self.symbolic, self.by_type = lower, symbolic, by_type


def unitary(family: Callable[[cirq.Gate, int], Optional[OpSeq]]) -> Entry:
    """A unitary family: `family(gate, n)` gives opcodes, None, or raises NotClifford."""

    def lower(gate, n):
        try:
            ops = family(gate, n)
        except NotClifford as verdict:
            return Lowering(Lowering.ERROR, error=verdict)
        return None if ops is None else Lowering(Lowering.OPS, tuple(ops))

    return Entry(lower)


def noise(reader: Callable) -> Entry:
    """A Pauli channel type: `reader(gate, n)` gives a NoiseSpec or None, or raises."""

    def lower(gate, n):
        try:
            return Lowering(Lowering.NOISE, spec=reader(gate, n))
        except errors.UnsupportedNoiseError as error:
            return Lowering(Lowering.ERROR, error=error)

    return Entry(lower)


def emit(handler: Callable, symbolic: bool = False, many: Optional[Callable] = None, by_type: bool = False) -> Entry:
    """An operation that writes its own rows (records, keys, conditions): lowerings.py; `many`,
    where given, writes a run of them at once (see `Lowering`); `by_type`: see `Entry`."""
    lowering = Lowering(Lowering.EMIT, emit=handler, many=many)
    return Entry(lambda gate, n: lowering, symbolic, by_type)


def _exact() -> Dict[cirq.Gate, Lowering]:
    one = {cirq.I: None, cirq.X: "X", cirq.Y: "Y", cirq.Z: "Z", cirq.H: "H", cirq.S: "S",
           cirq.S**-1: "S_DAG", cirq.X**0.5: "SQRT_X", cirq.X**-0.5: "SQRT_X_DAG",
           cirq.Y**0.5: "SQRT_Y", cirq.Y**-0.5: "SQRT_Y_DAG"}
    two = {cirq.CNOT: "CX", cirq.CZ: "CZ", cirq.SWAP: "SWAP", cirq.ISWAP: "ISWAP",
           cirq.ISWAP**-1: "ISWAP_DAG", cirq.XX**0.5: "SQRT_XX", cirq.XX**-0.5: "SQRT_XX_DAG",
           cirq.YY**0.5: "SQRT_YY", cirq.YY**-0.5: "SQRT_YY_DAG", cirq.ZZ**0.5: "SQRT_ZZ",
           cirq.ZZ**-0.5: "SQRT_ZZ_DAG"}
    table = {g: Lowering(Lowering.OPS, ((name, (0,)),) if name else ()) for g, name in one.items()}
    table.update({g: Lowering(Lowering.OPS, ((name, (0, 1)),)) for g, name in two.items()})
    return table


EXACT: Dict[cirq.Gate, Lowering] = _exact()

_generic_channel = noise(channels.from_channel)

BY_TYPE: Dict[type, Entry] = {
    # measurements and resets
    cirq.MeasurementGate: emit(lowerings.measurement, many=lowerings.measurements, by_type=True),
    cirq.PauliMeasurementGate: emit(lowerings.pauli_measurement),
    cirq.ResetChannel: emit(lowerings.reset, many=lowerings.resets, by_type=True),
    # unitary gate families
    cirq.IdentityGate: unitary(cliffords.lower_identity),
    cirq.GlobalPhaseGate: unitary(cliffords.lower_identity),
    cirq.WaitGate: unitary(cliffords.lower_identity),
    cirq.XPowGate: unitary(cliffords.exponent_family(0.5)),
    cirq.YPowGate: unitary(cliffords.exponent_family(0.5)),
    cirq.ZPowGate: unitary(cliffords.exponent_family(0.5)),
    cirq.HPowGate: unitary(cliffords.exponent_family(1)),
    cirq.CXPowGate: unitary(cliffords.exponent_family(1)),
    cirq.CZPowGate: unitary(cliffords.exponent_family(1)),
    cirq.SwapPowGate: unitary(cliffords.exponent_family(1)),
    cirq.ISwapPowGate: unitary(cliffords.exponent_family(1)),
    cirq.XXPowGate: unitary(cliffords.exponent_family(0.5)),
    cirq.YYPowGate: unitary(cliffords.exponent_family(0.5)),
    cirq.ZZPowGate: unitary(cliffords.exponent_family(0.5)),
    cirq.CCZPowGate: unitary(cliffords.exponent_family(2)),  # only the identity powers are Clifford
    cirq.CCXPowGate: unitary(cliffords.exponent_family(2)),
    cirq.CSwapGate: unitary(cliffords.lower_unitary),  # raises: never Clifford
    # families whose Clifford points depend on several angles: the unitary decides
    cirq.PhasedXPowGate: unitary(cliffords.lower_unitary),
    cirq.PhasedXZGate: unitary(cliffords.lower_unitary),
    cirq.FSimGate: unitary(cliffords.lower_unitary),
    cirq.PhasedFSimGate: unitary(cliffords.lower_unitary),
    cirq.PhasedISwapPowGate: unitary(cliffords.lower_unitary),
    cirq.ControlledGate: unitary(cliffords.lower_unitary),
    cirq.MatrixGate: unitary(cliffords.lower_matrix_gate),
    cirq.CliffordGate: unitary(cliffords.lower_clifford_gate),  # SingleQubitCliffordGate included
    cirq.BaseDensePauliString: unitary(cliffords.lower_dense_pauli_string),
    cirq.PauliStringPhasorGate: unitary(cliffords.lower_pauli_string_phasor),
    cirq.QubitPermutationGate: unitary(cliffords.lower_qubit_permutation),
    # Pauli channels
    cirq.BitFlipChannel: noise(channels.bit_flip),
    cirq.PhaseFlipChannel: noise(channels.phase_flip),
    cirq.DepolarizingChannel: noise(channels.depolarize),
    cirq.PhaseDampingChannel: noise(channels.phase_damp),
    cirq.AmplitudeDampingChannel: noise(channels.amplitude_damping),
    cirq.GeneralizedAmplitudeDampingChannel: noise(channels.amplitude_damping),
    cirq.AsymmetricDepolarizingChannel: _generic_channel,
    cirq.RandomGateChannel: _generic_channel,
    cirq.KrausChannel: _generic_channel,
    cirq.MixedUnitaryChannel: _generic_channel,
}


def _stimcirq_entries(stimcirq) -> Dict[type, Entry]:
    """stimcirq's gates and annotations (registered when a stimcirq object is first met: stimcirq
    is never imported here, so importing cirq_quasarq does not import it)."""
    return {
        stimcirq.CXSwapGate: unitary(lambda gate, n: (("SWAPCX" if gate.inverted else "CXSWAP", (0, 1)),)),
        stimcirq.CZSwapGate: unitary(lambda gate, n: (("CZSWAP", (0, 1)),)),
        stimcirq.IIGate: unitary(cliffords.lower_identity),
        stimcirq.MeasureAndOrResetGate: emit(lowerings.measure_reset, many=lowerings.measure_resets, by_type=True),
        stimcirq.SweepPauli: emit(lowerings.sweep_pauli, symbolic=True),
        stimcirq.FeedbackPauli: emit(lowerings.feedback_pauli),
        stimcirq.TwoQubitAsymmetricDepolarizingChannel: noise(channels.two_qubit_asymmetric_depolarize),
        stimcirq.IErrorGate: noise(channels.identity_error),
        stimcirq.IIErrorGate: noise(channels.identity_error),
        stimcirq.DetAnnotation: emit(lowerings.detector, many=lowerings.detectors),
        stimcirq.CumulativeObservableAnnotation: emit(lowerings.observable),
        stimcirq.ShiftCoordsAnnotation: emit(lowerings.shift_coords),
    }


_stimcirq_registered = False


def _entry(cls: type) -> Optional[Entry]:
    global _stimcirq_registered
    if not _stimcirq_registered and cls.__module__.startswith("stimcirq"):
        BY_TYPE.update(_stimcirq_entries(sys.modules["stimcirq"]))
        _stimcirq_registered = True
    for base in cls.__mro__:
        entry = BY_TYPE.get(base)
        if entry is not None:
            return entry
    return None


# -- lookup ----------------------------------------------------------------------------------------

def _protocol(gate) -> Optional[Lowering]:
    hook = getattr(gate, "_quasarq_lowering_", None)
    if hook is None:
        return None
    ops = hook()
    if ops is NotImplemented or ops is None:
        return None
    ops = tuple((str(name), tuple(int(t) for t in targets)) for name, targets in ops)
    for name, targets in ops:
        op = opcodes.BY_NAME.get(name)
        if op is None or op.kind != opcodes.Kind.UNITARY or len(targets) != op.arity:
            raise errors.UnsupportedOperationError(
                f"{gate!r}._quasarq_lowering_() gave {(name, targets)!r}: not a unitary opcode of "
                "cirq_quasarq.core.opcodes on the right number of qubits")
    return Lowering(Lowering.OPS, ops)


def _lower_after_exact(gate, num_qubits: int) -> Lowering:
    """Steps 2-7 (everything but the exact table)."""
    found = _protocol(gate)
    if found is not None:
        return found
    entry = _entry(type(gate))
    parametrized = cirq.is_parameterized(gate)
    if entry is not None and (entry.symbolic or not parametrized):
        found = entry.lower(gate, num_qubits)
        if found is not None:
            if entry.by_type:  # found after the protocol step, which the type does not answer
                _BY_TYPE_CACHE[type(gate)] = found
            return found
    if parametrized:
        return _PARAMETRIZED
    try:
        ops = cliffords.lower_unitary(gate, num_qubits)
    except NotClifford as verdict:
        return Lowering(Lowering.ERROR, error=verdict)
    if ops is not None:
        return Lowering(Lowering.OPS, ops)
    if not cirq.has_unitary(gate) and not _measures(gate) and (cirq.has_mixture(gate) or cirq.has_kraus(gate)):
        return _generic_channel.lower(gate, num_qubits)
    return _DECOMPOSE


# Keyed by (type, value): Cirq's value equality can make a subclass instance equal to a built-in
# gate (a user's XPowGate subclass that describes itself equals cirq.X), and each keeps its own.
_EXACT = {(type(gate), gate): lowering for gate, lowering in EXACT.items()}
def _measures(gate) -> bool:
    """A gate that is, or decomposes into, a measurement: a channel in Cirq's eyes, but one that
    records bits, so it is compiled through its decomposition, never as noise."""
    if isinstance(gate, cirq.MeasurementGate) or cirq.is_measurement(gate):
        return True
    try:
        parts = cirq.decompose_once_with_qubits(gate, cirq.LineQubit.range(cirq.num_qubits(gate)), None)
    except (TypeError, ValueError):
        return False
    return parts is not None and any(cirq.is_measurement(op) for op in cirq.flatten_to_ops(parts))


_CACHE: Dict[object, Lowering] = {}
_BY_TYPE_CACHE: Dict[type, Lowering] = {}  # the answers of `by_type` entries


NON_PAULI = ("error", "twirl")
_TWIRLED: Dict[object, Lowering] = {}


def lower(gate: cirq.Gate, num_qubits: int, non_pauli: str = "error") -> Lowering:
    """How `gate` (acting on `num_qubits` qubits) compiles; cached by gate type and value.

    `non_pauli`: what a channel that is not a Pauli channel becomes: "error" (an
    `UnsupportedNoiseError`) or "twirl" (its Pauli twirl, `channels.twirl`)."""
    found = _lower(gate, num_qubits)
    if non_pauli == "twirl" and found.kind == Lowering.ERROR and isinstance(found._error, errors.UnsupportedNoiseError):
        try:
            key = (type(gate), gate, repr(gate))
            hit = _TWIRLED.get(key)
        except TypeError:
            key, hit = None, None
        if hit is None:
            try:
                hit = Lowering(Lowering.NOISE, spec=channels.twirl(gate, num_qubits), twirled=True)
            except errors.UnsupportedNoiseError as error:
                hit = Lowering(Lowering.ERROR, error=error)
            if key is not None:
                if len(_TWIRLED) >= MAX_CACHE_ENTRIES:
                    _TWIRLED.clear()
                _TWIRLED[key] = hit
        return hit
    return found


def _lower(gate: cirq.Gate, num_qubits: int) -> Lowering:
    hit = _BY_TYPE_CACHE.get(type(gate))
    if hit is not None:
        return hit
    key = (type(gate), gate)
    try:
        hit = _EXACT.get(key)
        if hit is not None:
            return hit
        # Cirq calls some gates equal up to global phase (PhasedXZGate, ...): the repr keeps
        # gates of different unitaries apart, so a lowering's cached phase is exact.
        key = (type(gate), gate, repr(gate))
        hit = _CACHE.get(key)
    except TypeError:  # unhashable gate: no caching
        return _lower_after_exact(gate, num_qubits)
    if hit is None:
        hit = _lower_after_exact(gate, num_qubits)
        if len(_CACHE) >= MAX_CACHE_ENTRIES:
            _CACHE.clear()
        _CACHE[key] = hit
    return hit


def lower_operation(op: cirq.Operation) -> Lowering:
    """How an operation without a gate compiles (by its type: stimcirq's annotations)."""
    entry = _entry(type(op))
    if entry is not None:
        found = entry.lower(None, len(op.qubits))
        if found is not None:
            return found
    return _DECOMPOSE


def lower_gate(gate: cirq.Gate, num_qubits: int) -> Optional[OpSeq]:
    """The unitary view of `lower`: the opcodes of a unitary gate, () when it is the identity,
    None when the registry does not lower it to unitary opcodes; raises NonCliffordError for a
    unitary that is not Clifford."""
    found = lower(gate, num_qubits)
    if found.kind == Lowering.ERROR and isinstance(found._error, NotClifford):
        raise found.error_for(gate)
    return found.ops if found.kind == Lowering.OPS else None
