"""Hypothesis strategies for tests/test_fuzz.py: random Cirq circuits over the supported set.

One composite strategy per family of operations, each drawing one operation on some of the qubits
still free in the moment being built:

- `clifford_ops`:    Clifford gates: the common values, Pow gates at Clifford exponents (with a
                     global shift), PhasedXPow / PhasedXZ at Clifford angles, MatrixGate of a
                     Clifford unitary (with a global phase), SingleQubitCliffordGate, CliffordGate,
                     Pauli strings, Clifford-controlled Paulis, FSim, permutations, global phases;
- `measure_ops`:     measurements and resets: cirq.measure (invert masks, confusion maps), Pauli
                     product measurements, stimcirq's M / R / MR in the X, Y and Z bases;
- `noise_ops`:       Pauli channels, probabilities down to below 1/128;
- `controlled_ops`:  classically controlled Paulis and non-Pauli Cliffords (H, S, CX, ...), on the
                     latest or an earlier instance of a key, on several keys, on a sympy condition;
- `loop_ops`:        `cirq.CircuitOperation` loops (nested, with and without repetition ids), whose
                     bodies are drawn from every family again.

`circuits(...)` puts them together moment by moment; its flags switch families off (a noiseless,
measurement-free circuit for the state-vector comparison, ...). Measurement keys are drawn from a
small pool per width, so keys repeat across moments and loop iterations. `Features` records what a
drawn circuit holds that stimcirq cannot express (confusion maps, controls other than a Pauli on
one bit), so the tests know which oracle applies.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Set

import cirq
import numpy as np
import pytest
import sympy

# Helpers of tests/test_fuzz.py only: without these packages the importing module is skipped.
stimcirq = pytest.importorskip("stimcirq")
st = pytest.importorskip("hypothesis.strategies")

HALVES = [k / 2 for k in range(-4, 5)]  # exponents of X/Y/Z/XX/YY/ZZ Pow gates that are Clifford
INTEGERS = [-2, -1, 0, 1, 2, 3]  # exponents of H/CX/CZ/SWAP/ISWAP Pow gates that are Clifford
SHIFTS = [0.0, 0.5, -0.25, 1 / 3, 0.1]  # a Pow gate's global_shift changes only the global phase
PHASES = [1, -1, 1j, -1j, np.exp(0.25j * np.pi), np.exp(0.3j)]  # global phases (MatrixGate, GlobalPhaseGate)
# Error probabilities: the special points, and the sparse-draw range p < 1/128 (down to 1e-4).
PROBABILITIES = st.one_of(st.sampled_from([0.0, 1e-4, 1 / 1024, 0.005, 1 / 128, 0.05, 0.2, 0.5, 1.0]),
                          st.floats(1e-4, 1 / 128, allow_nan=False))
SMALL_PROBABILITIES = st.one_of(st.sampled_from([1e-4, 1 / 1024, 0.005, 1 / 128 - 1e-6]),
                                st.floats(1e-4, 1 / 128, exclude_max=True))

_POW_1Q = {"X": cirq.XPowGate, "Y": cirq.YPowGate, "Z": cirq.ZPowGate}
_POW_2Q_HALF = {"XX": cirq.XXPowGate, "YY": cirq.YYPowGate, "ZZ": cirq.ZZPowGate}
_POW_INT_2Q = {"CX": cirq.CXPowGate, "CZ": cirq.CZPowGate, "SWAP": cirq.SwapPowGate, "ISWAP": cirq.ISwapPowGate}
_COMMON = [cirq.I, cirq.X, cirq.Y, cirq.Z, cirq.H, cirq.S, cirq.S**-1, cirq.X**0.5, cirq.X**-0.5,
           cirq.Y**0.5, cirq.Y**-0.5, cirq.CNOT, cirq.CZ, cirq.SWAP, cirq.ISWAP, cirq.ISWAP**-1,
           cirq.XX**0.5, cirq.YY**-0.5, cirq.ZZ**0.5, stimcirq.CXSwapGate(inverted=False),
           stimcirq.CXSwapGate(inverted=True), stimcirq.CZSwapGate()]
_GENERATORS_1Q = [(cirq.H, (0,)), (cirq.S, (0,)), (cirq.X**0.5, (0,))]
_GENERATORS_2Q = [(cirq.CNOT, (0, 1)), (cirq.CNOT, (1, 0)), (cirq.CZ, (0, 1)), (cirq.H, (0,)), (cirq.H, (1,)),
                  (cirq.S, (0,)), (cirq.S, (1,)), (cirq.X**0.5, (1,))]
# Non-Pauli Cliffords put under classical control (1 and 2 qubits).
CONTROLLED_CLIFFORDS = [cirq.H, cirq.S, cirq.S**-1, cirq.X**0.5, cirq.Y**-0.5, cirq.MatrixGate(cirq.unitary(cirq.H)),
                        cirq.CNOT, cirq.CZ, cirq.SWAP, cirq.ISWAP]
KEY_NAMES = {1: ["a", "b", "c", "d"], 2: ["p", "q"], 3: ["t"]}  # keys repeat: a small pool per width


@dataclasses.dataclass
class Features:
    """What a drawn circuit holds beyond what stimcirq converts exactly (each a reason)."""

    not_stim: Set[str] = dataclasses.field(default_factory=set)

    @property
    def stim_convertible(self) -> bool:
        return not self.not_stim


class _Keys:
    """The measurement keys a classical control may read at this point: name -> instances so far.

    `fresh_only`: inside a loop with repetition ids, measured keys get names of their own (so a
    read of an outer key never becomes a read of the body's key of the same name), and a name is
    measured either only by stimcirq's gates (keys Cirq does not prefix) or only by Cirq's."""

    def __init__(self, visible: Optional[Dict[str, int]] = None, fresh_only: bool = False,
                 forbidden: Set[str] = frozenset()):
        self.visible: Dict[str, int] = dict(visible or {})
        self.fresh_only = fresh_only
        self.local: Set[str] = set()  # measured in the innermost loop body (this iteration)
        self.forbidden = set(forbidden)  # measured or read in an enclosing moment: not measured here
        self.in_moment: Set[str] = set()  # measured in this moment
        self.read_in_moment: Set[str] = set()  # read by a control in this moment
        self.read_all: Set[str] = set()  # read by a control anywhere in this (sub)circuit
        self.pending: Dict[str, int] = {}

    def unmeasurable(self) -> Set[str]:
        """Keys a measurement in this moment must not take: another operation of the moment (or of
        an enclosing one) measures or reads them, and which instance comes first is ambiguous."""
        return self.in_moment | self.read_in_moment | self.forbidden


class _Context:
    """State shared by the family strategies while one circuit is drawn."""

    def __init__(self, flags: Dict[str, bool], features: Features):
        self.flags = flags
        self.features = features
        self.width: Dict[str, int] = {}  # every key name drawn so far -> its width
        self.unscoped: Set[str] = set()  # keys measured by stimcirq's gates (never prefixed)
        self.keys = _Keys()
        self.depth = 0  # loop nesting
        self.counter = 0

    def fresh_name(self, width: int) -> str:
        self.counter += 1
        return f"{KEY_NAMES[width][0]}{self.counter}"


# -- Clifford gates --------------------------------------------------------------------------------------------


def _clifford_unitary(draw, k: int) -> np.ndarray:
    """A Clifford unitary on k qubits (a product of drawn generators) times a drawn global phase."""
    q = cirq.LineQubit.range(k)
    generators = _GENERATORS_1Q if k == 1 else _GENERATORS_2Q
    ops = [g.on(*[q[i] for i in where]) for g, where in draw(st.lists(st.sampled_from(generators), max_size=5))]
    u = cirq.Circuit(ops).unitary(qubit_order=q, qubits_that_should_be_present=q)
    return draw(st.sampled_from(PHASES)) * u


@st.composite
def clifford_ops(draw, free: List[cirq.Qid], phased_xz: bool = True) -> cirq.Operation:
    """One Clifford operation on qubits of `free` (a global phase needs none); `phased_xz=False`
    leaves out PhasedXZGate."""
    kinds = ["common", "pow1", "phased_x", "matrix1", "single_clifford", "global_phase"] + ["phased_xz"] * phased_xz
    if len(free) >= 2:
        kinds += ["pow2_half", "pow_int2", "matrix2", "clifford_gate", "pauli_string", "controlled_pauli",
                  "fsim", "dense_pauli", "phasor"]
    if len(free) >= 3:
        kinds += ["permutation", "ccz_squared"]
    kind = draw(st.sampled_from(kinds))
    if kind == "global_phase":
        return cirq.global_phase_operation(draw(st.sampled_from(PHASES)))
    if kind == "common":
        gate = draw(st.sampled_from([g for g in _COMMON if cirq.num_qubits(g) <= len(free)]))
        return gate.on(*free[: cirq.num_qubits(gate)])
    a = free[0]
    if kind == "pow1":
        name = draw(st.sampled_from(sorted(_POW_1Q) + ["H"]))
        shift = draw(st.sampled_from(SHIFTS))
        if name == "H":
            return cirq.HPowGate(exponent=draw(st.sampled_from(INTEGERS)), global_shift=shift).on(a)
        return _POW_1Q[name](exponent=draw(st.sampled_from(HALVES)), global_shift=shift).on(a)
    if kind == "phased_x":  # Z^p X^e Z^-p: Clifford for e, p in Z/2, or e in Z and p in Z/4
        exponent = draw(st.sampled_from(HALVES))
        quarter = float(exponent).is_integer()
        phase = draw(st.sampled_from([k / 4 for k in range(-4, 5)] if quarter else HALVES))
        return cirq.PhasedXPowGate(phase_exponent=phase, exponent=exponent,
                                   global_shift=draw(st.sampled_from(SHIFTS))).on(a)
    if kind == "phased_xz":
        x, z, axis = (draw(st.sampled_from(HALVES)) for _ in range(3))
        return cirq.PhasedXZGate(x_exponent=x, z_exponent=z, axis_phase_exponent=axis).on(a)
    if kind == "matrix1":
        return cirq.MatrixGate(_clifford_unitary(draw, 1)).on(a)
    if kind == "single_clifford":
        return draw(st.sampled_from(cirq.SingleQubitCliffordGate.all_single_qubit_cliffords)).on(a)
    b = free[1]
    if kind == "pow2_half":
        gate = _POW_2Q_HALF[draw(st.sampled_from(sorted(_POW_2Q_HALF)))]
        return gate(exponent=draw(st.sampled_from(HALVES)), global_shift=draw(st.sampled_from(SHIFTS))).on(a, b)
    if kind == "pow_int2":
        gate = _POW_INT_2Q[draw(st.sampled_from(sorted(_POW_INT_2Q)))]
        return gate(exponent=draw(st.sampled_from(INTEGERS)), global_shift=draw(st.sampled_from(SHIFTS))).on(a, b)
    if kind == "matrix2":
        return cirq.MatrixGate(_clifford_unitary(draw, 2)).on(a, b)
    if kind == "clifford_gate":
        q = cirq.LineQubit.range(2)
        ops = [g.on(*[q[i] for i in where]) for g, where in draw(st.lists(st.sampled_from(_GENERATORS_2Q), max_size=5))]
        return cirq.CliffordGate.from_op_list(ops, q).on(a, b)
    if kind == "pauli_string":
        letters = draw(st.lists(st.sampled_from([cirq.X, cirq.Y, cirq.Z]), min_size=1, max_size=min(3, len(free))))
        return cirq.PauliString(qubit_pauli_map=dict(zip(free, letters)), coefficient=draw(st.sampled_from([1, -1, 1j, -1j])))
    if kind == "dense_pauli":
        text = draw(st.text("IXYZ", min_size=2, max_size=2))
        return cirq.DensePauliString(text, coefficient=draw(st.sampled_from([1, -1, 1j, -1j]))).on(a, b)
    if kind == "controlled_pauli":
        gate = cirq.ControlledGate(draw(st.sampled_from([cirq.X, cirq.Y, cirq.Z])),
                                   control_values=[draw(st.sampled_from([0, 1]))])
        return gate.on(a, b)
    if kind == "fsim":
        theta, phi = draw(st.sampled_from([0, np.pi / 2, np.pi, -np.pi / 2])), draw(st.sampled_from([0, np.pi]))
        return cirq.FSimGate(theta=theta, phi=phi).on(a, b)
    if kind == "phasor":
        text = draw(st.sampled_from(["XX", "XY", "ZY", "YZ", "ZZ", "XZ"]))
        neg, pos = draw(st.sampled_from(HALVES)), draw(st.sampled_from([0.0, 0.5, -1.0]))
        return cirq.PauliStringPhasorGate(cirq.DensePauliString(text), exponent_neg=neg, exponent_pos=pos).on(a, b)
    if kind == "permutation":
        perm = draw(st.permutations([0, 1, 2]))
        return cirq.QubitPermutationGate(list(perm)).on(*free[:3])
    # ccz_squared: CCZ**2 and CCX**2 are identities, so Clifford (with a shift, a global phase)
    gate = draw(st.sampled_from([cirq.CCZPowGate, cirq.CCXPowGate]))
    return gate(exponent=draw(st.sampled_from([-2, 2, 4])), global_shift=draw(st.sampled_from(SHIFTS))).on(*free[:3])


# -- measurements and resets -----------------------------------------------------------------------------------


def _key(draw, ctx: _Context, width: int, unscoped: bool = False) -> str:
    """A key of `width` bits for a measurement in this moment: an earlier one again, or new.
    `unscoped`: for stimcirq's gate, whose key a loop with repetition ids does not prefix."""
    keys = ctx.keys
    taken = keys.unmeasurable()
    reusable = [k for k, w in ctx.width.items() if w == width and k not in taken
                and (not keys.fresh_only or (k in keys.local and (k in ctx.unscoped) == unscoped))]
    if reusable and draw(st.booleans()):
        name = draw(st.sampled_from(sorted(reusable)))
    else:
        name = draw(st.sampled_from(KEY_NAMES[width])) if not keys.fresh_only else ctx.fresh_name(width)
        if name in taken or ctx.width.get(name, width) != width or (
                keys.fresh_only and name in ctx.width and name not in keys.local):
            name = ctx.fresh_name(width)
    ctx.width[name] = width
    if unscoped:
        ctx.unscoped.add(name)
    keys.in_moment.add(name)
    keys.pending[name] = keys.pending.get(name, 0) + 1
    return name


def _stochastic(draw, k: int) -> np.ndarray:
    """A 2^k x 2^k row-stochastic matrix with entries in eighths (rows sum to 1 exactly)."""
    rows = []
    for _ in range(2**k):
        cuts = sorted(draw(st.lists(st.integers(0, 8), min_size=2**k - 1, max_size=2**k - 1)))
        rows.append(np.diff([0] + cuts + [8]) / 8)
    return np.array(rows, dtype=np.float64)


@st.composite
def measure_ops(draw, ctx: _Context, free: List[cirq.Qid]) -> cirq.Operation:
    kinds = ["measure", "pauli", "pauli_string", "stim_mr", "reset"]
    kind = draw(st.sampled_from(kinds))
    if kind == "measure":
        width = draw(st.integers(1, min(3, len(free))))
        qs = free[:width]
        invert = tuple(draw(st.lists(st.booleans(), max_size=width)))
        confusion = {}
        if ctx.flags["confusion"] and not ctx.flags["stim_only"] and draw(st.integers(0, 3)) == 0:
            group = tuple(sorted(draw(st.lists(st.integers(0, width - 1), min_size=1, max_size=min(2, width),
                                               unique=True))))
            confusion[group] = _stochastic(draw, len(group))
            ctx.features.not_stim.add("confusion map")
        return cirq.measure(*qs, key=_key(draw, ctx, width), invert_mask=invert, confusion_map=confusion or None)
    if kind in ("pauli", "pauli_string"):
        width = draw(st.integers(1, min(3, len(free))))
        alphabet = "XYZ" if kind == "pauli" else "IXYZ"  # PauliMeasurementGate takes no identities
        letters = draw(st.text(alphabet, min_size=width, max_size=width).filter(lambda s: set(s) != {"I"}))
        sign = draw(st.sampled_from([1, -1]))
        if kind == "pauli":
            gate = cirq.PauliMeasurementGate(sign * cirq.DensePauliString(letters), key=_key(draw, ctx, 1))
            return gate.on(*free[:width])
        string = cirq.PauliString(qubit_pauli_map={q: cirq.DensePauliString(c)[0] for q, c in zip(free, letters) if c != "I"},
                                  coefficient=sign)
        return cirq.measure_single_paulistring(string, key=_key(draw, ctx, 1))
    basis = draw(st.sampled_from("XYZ"))
    if kind == "reset":
        if basis == "Z" and draw(st.booleans()):
            return cirq.reset(free[0])
        return stimcirq.MeasureAndOrResetGate(measure=False, reset=True, basis=basis, invert_measure=False,
                                              key="", measure_flip_probability=0).on(free[0])
    flip = draw(st.one_of(st.just(0.0), ctx.flags["probabilities"])) if ctx.flags["noise"] else 0.0
    return stimcirq.MeasureAndOrResetGate(measure=True, reset=draw(st.booleans()), basis=basis,
                                          invert_measure=draw(st.booleans()),
                                          key=_key(draw, ctx, 1, unscoped=True),
                                          measure_flip_probability=flip).on(free[0])


# -- noise -------------------------------------------------------------------------------------------------------


@st.composite
def noise_ops(draw, free: List[cirq.Qid], probabilities=PROBABILITIES) -> cirq.Operation:
    kinds = ["depolarize", "bit_flip", "phase_flip", "asymmetric", "phase_damp", "pauli_with_probability"]
    if len(free) >= 2:
        kinds += ["depolarize2", "asymmetric2", "stim_pauli_channel2", "product_with_probability"]
    kind = draw(st.sampled_from(kinds))
    p = draw(probabilities)
    a = free[0]
    if kind == "depolarize":
        return cirq.depolarize(p).on(a)
    if kind == "bit_flip":
        return cirq.bit_flip(p).on(a)
    if kind == "phase_flip":
        return cirq.phase_flip(p).on(a)
    if kind == "phase_damp":  # exactly a Z flip with probability (1 - sqrt(1 - gamma)) / 2
        return cirq.phase_damp(min(1.0, 4 * p)).on(a)
    if kind == "asymmetric":
        return cirq.asymmetric_depolarize(p / 3, draw(probabilities) / 3, draw(probabilities) / 3).on(a)
    if kind == "pauli_with_probability":
        return draw(st.sampled_from([cirq.X, cirq.Y, cirq.Z])).with_probability(p).on(a)
    b = free[1]
    if kind == "depolarize2":
        return cirq.depolarize(p, n_qubits=2).on(a, b)
    if kind == "asymmetric2":
        pairs = draw(st.lists(st.text("IXYZ", min_size=2, max_size=2).filter(lambda s: s != "II"),
                              min_size=1, max_size=3, unique=True))
        probs = {s: p / len(pairs) for s in pairs}
        probs["II"] = 1 - sum(probs.values())
        return cirq.asymmetric_depolarize(error_probabilities=probs).on(a, b)
    if kind == "stim_pauli_channel2":
        which = draw(st.lists(st.integers(0, 14), min_size=1, max_size=4, unique=True))
        probs = [p / len(which) if i in which else 0.0 for i in range(15)]
        return stimcirq.TwoQubitAsymmetricDepolarizingChannel(probs).on(a, b)
    letters = draw(st.lists(st.sampled_from([cirq.X, cirq.Y, cirq.Z]), min_size=2, max_size=min(3, len(free))))
    return cirq.PauliString(qubit_pauli_map=dict(zip(free, letters))).with_probability(p)


# -- classical control -------------------------------------------------------------------------------------------


@st.composite
def controlled_ops(draw, ctx: _Context, free: List[cirq.Qid]) -> Optional[cirq.Operation]:
    """A Pauli or a non-Pauli Clifford (or a reset, a noise channel) under a classical condition
    on keys measured in earlier moments; None when no key is readable yet."""
    # Keys measured before this moment and not again in it (nor in a loop of it).
    visible = {k: n for k, n in ctx.keys.visible.items() if k not in ctx.keys.in_moment}
    if ctx.flags["stim_only"]:  # what stimcirq converts: a Pauli fed back from one bit, no loop in between
        visible = {k: n for k, n in visible.items() if ctx.width.get(k) == 1 and (ctx.depth == 0 or k in ctx.keys.local)}
    if not visible:
        return None
    names = sorted(visible)
    kinds = ["pauli"] if ctx.flags["stim_only"] else ["pauli", "pauli", "clifford", "clifford", "reset", "noise"]
    kind = draw(st.sampled_from(kinds))
    if kind == "pauli":
        op = draw(st.sampled_from([cirq.X, cirq.Y, cirq.Z])).on(free[0])
    elif kind == "clifford":
        gate = draw(st.sampled_from([g for g in CONTROLLED_CLIFFORDS if cirq.num_qubits(g) <= len(free)]))
        op = gate.on(*free[: cirq.num_qubits(gate)])
    elif kind == "reset":
        op = cirq.reset(free[0])
    else:
        op = draw(noise_ops(free[:1]))
    how = "key" if ctx.flags["stim_only"] else draw(st.sampled_from(["key", "key", "earlier", "two_keys", "sympy"]))
    key = draw(st.sampled_from(names))
    # The instance before the latest, read outside loops (inside, the compiler's documented limit).
    if how == "earlier" and ctx.depth == 0 and visible[key] >= 2:
        conditions = [cirq.KeyCondition(cirq.MeasurementKey.parse_serialized(key), index=-2)]
    elif how == "two_keys" and len(names) >= 2:
        conditions = [key, draw(st.sampled_from([k for k in names if k != key]))]
    elif how == "sympy":
        width = ctx.width[key.split(":")[-1]]
        symbol = sympy.Symbol(key)
        value = draw(st.integers(0, 2**width - 1))
        conditions = [draw(st.sampled_from([sympy.Eq(symbol, value), sympy.Ne(symbol, value), symbol > value]))]
    else:
        conditions = [key]
    simple = (len(conditions) == 1 and isinstance(conditions[0], str) and ctx.width.get(key) == 1
              and kind == "pauli" and (ctx.depth == 0 or key in ctx.keys.local))
    if not simple:
        ctx.features.not_stim.add(f"classical control: {kind} on {conditions}")
    result = op.with_classical_controls(*conditions)
    read = {str(k) for k in cirq.control_keys(result)}
    ctx.keys.read_in_moment |= read
    ctx.keys.read_all |= read
    return result


# -- loops -------------------------------------------------------------------------------------------------------


@st.composite
def loop_ops(draw, ctx: _Context, free: List[cirq.Qid]) -> cirq.Operation:
    """A CircuitOperation looping a drawn body on some of the free qubits (loops nest twice)."""
    qubits = free[: draw(st.integers(1, min(3, len(free))))]
    repetitions = draw(st.sampled_from([1, 2, 3, 5] if ctx.depth == 0 else [1, 2, 3]))
    repetition_ids = draw(st.booleans())
    outer = ctx.keys
    # The body reads no key that another operation of this moment measures, and measures none
    # that one reads or measures (which would come first is ambiguous).
    inner = _Keys({k: n for k, n in outer.visible.items() if k not in outer.in_moment},
                  fresh_only=repetition_ids or outer.fresh_only, forbidden=outer.unmeasurable())
    ctx.keys, ctx.depth = inner, ctx.depth + 1
    try:
        body = cirq.Circuit(draw(_moments(ctx, qubits, max_moments=3)))
    finally:
        ctx.keys, ctx.depth = outer, ctx.depth - 1
    if not body.all_qubits():
        body = cirq.Circuit(cirq.I.on_each(*qubits))
    measured = {k: n - outer.visible.get(k, 0) for k, n in inner.visible.items() if n != outer.visible.get(k, 0)}
    for k, count in measured.items():
        if repetition_ids and repetitions > 1 and k not in ctx.unscoped:
            for i in range(repetitions):  # each iteration's instances, readable after the loop as "i:key"
                outer.pending[f"{i}:{k}"] = count
        else:
            outer.pending[k] = outer.pending.get(k, 0) + repetitions * count
    outer.in_moment.update(measured)
    outer.read_in_moment |= inner.read_all
    outer.read_all |= inner.read_all
    op = cirq.CircuitOperation(body.freeze(), repetitions=repetitions, use_repetition_ids=repetition_ids)
    if len(body.all_qubits()) >= 2 and draw(st.integers(0, 3)) == 0:  # the body on permuted qubits
        order = sorted(body.all_qubits())
        op = op.with_qubit_mapping(dict(zip(order, draw(st.permutations(order)))))
    return op


# -- circuits ----------------------------------------------------------------------------------------------------


@st.composite
def _moments(draw, ctx: _Context, qubits: List[cirq.Qid], max_moments: int, min_moments: int = 1) -> List[cirq.Moment]:
    families = ["clifford", "clifford", "clifford"]
    if ctx.flags["measure"]:
        families += ["measure", "measure"]
    if ctx.flags["noise"]:
        families += ["noise"]
    if ctx.flags["control"]:
        families += ["control", "control"]
    if ctx.flags["loops"] and ctx.depth < 2:
        families += ["loop"]
    moments = []
    for _ in range(draw(st.integers(min_moments, max_moments))):
        free = list(draw(st.permutations(qubits)))
        ops = []
        while free and draw(st.integers(0, 4)) > 0:
            family = draw(st.sampled_from(families))
            if family == "clifford":
                op = draw(clifford_ops(free, ctx.flags["phased_xz"]))
            elif family == "measure":
                op = draw(measure_ops(ctx, free))
            elif family == "noise":
                op = draw(noise_ops(free, ctx.flags["probabilities"]))
            elif family == "control":
                op = draw(controlled_ops(ctx, free))
            else:
                op = draw(loop_ops(ctx, free))
            if op is None:
                continue
            ops.append(op)
            free = [q for q in free if q not in op.qubits]
        moments.append(cirq.Moment(ops))
        keys = ctx.keys  # the moment's keys become readable from the next moment on
        for k, count in keys.pending.items():
            keys.visible[k] = keys.visible.get(k, 0) + count
            if ctx.depth:
                keys.local.add(k)
        keys.pending, keys.in_moment, keys.read_in_moment = {}, set(), set()
    return moments


@st.composite
def circuits(draw, *, max_qubits: int = 5, max_moments: int = 8, min_qubits: int = 2, min_moments: int = 2,
             measure: bool = True, noise: bool = True,
             control: bool = True, loops: bool = True, confusion: bool = True, final_measurement: bool = False,
             probabilities=PROBABILITIES, phased_xz: bool = True, stim_only: bool = False):
    """(circuit, Features): a random circuit over the families switched on.

    The qubits are LineQubits with gaps (their order, not their numbers, fixes the state vector);
    `final_measurement` measures every qubit at the end (key "final", with an invert mask);
    `stim_only` keeps to what stimcirq converts exactly (no confusion map, only a Pauli fed back
    from one bit, ...)."""
    n = draw(st.integers(min_qubits, max_qubits))
    qubits = sorted(draw(st.lists(st.integers(0, 2 * max_qubits), min_size=n, max_size=n, unique=True)))
    qubits = [cirq.LineQubit(i) for i in qubits]
    features = Features()
    flags = dict(measure=measure, noise=noise, control=control and measure, loops=loops, confusion=confusion,
                 probabilities=probabilities, phased_xz=phased_xz, stim_only=stim_only)
    ctx = _Context(flags, features)
    circuit = cirq.Circuit(draw(_moments(ctx, qubits, max_moments, min_moments)))
    if final_measurement:
        invert = tuple(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        circuit.append(cirq.Moment(cirq.measure(*qubits, key="final", invert_mask=invert)))
    for q in qubits:  # every drawn qubit is part of the circuit (an idle one included)
        if q not in circuit.all_qubits():
            circuit.insert(0, cirq.Moment(cirq.I(q)))
    return circuit, features


__all__ = ["Features", "circuits", "clifford_ops", "measure_ops", "noise_ops", "controlled_ops", "loop_ops",
           "SMALL_PROBABILITIES", "PROBABILITIES"]
