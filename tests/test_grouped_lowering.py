"""Moments lowered in bulk give the Programs that lowering one operation at a time gives.

The walk lowers a moment's operations in bulk (`compiler/walker.py`); `Walker.group_min = None`
lowers every operation alone, as the walk did before, and is the oracle here: both must give equal
Programs, table for table (rows, record and random slots, channels, confusions, conditions, keys,
annotations), so that every seed samples the same bits. They are compared on `CASES` (seeded random
circuits over every kind of operation the compiler takes, on line, grid and named qubits, with
qubit orders, noise models, loops, classical control and parameters; wide uniform moments;
stimcirq's surface code), on edge cases and on hypothesis-drawn circuits, with bulk lowering from
runs of one operation on (`group_min = 1`) and as the compiler runs it.

tests/data/cirq_program_digests.json holds a digest of every table of the Programs that `CASES`
compiled to with the code as it stood before bulk lowering; the compiler must still give exactly
those. Regenerate (``python -m tests.test_grouped_lowering --write``) only when a Program changes on
purpose, and say so in the commit.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pathlib
import random
import sys

import cirq
import numpy as np
import pytest
import sympy

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.compiler import clear_cache
from cirq_quasarq.compiler.compile import build_template, compile_resolved
from cirq_quasarq.compiler.walker import Walker
from cirq_quasarq.core.program import ProgramBuilder

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from .fuzz_strategies import circuits  # noqa: E402
from .test_stim_circuit import assert_programs_equal  # noqa: E402

DIGESTS = pathlib.Path(__file__).parent / "data" / "cirq_program_digests.json"


class _Decomposable(cirq.Gate):
    """A gate the registry does not know: compiled through its decomposition."""

    def _num_qubits_(self):
        return 2

    def _decompose_(self, qubits):
        a, b = qubits
        yield cirq.H(a)
        yield cirq.CZ(a, b)
        yield cirq.S(b)

    def __repr__(self):
        return "_Decomposable()"


ONE = [cirq.I, cirq.X, cirq.Y, cirq.Z, cirq.H, cirq.S, cirq.S**-1, cirq.X**0.5, cirq.X**-0.5, cirq.Y**0.5,
       cirq.Y**-0.5, cirq.XPowGate(exponent=0.5, global_shift=0.25), cirq.HPowGate(exponent=1, global_shift=1 / 3),
       cirq.PhasedXZGate(x_exponent=0.5, z_exponent=-0.5, axis_phase_exponent=0.5),
       cirq.PhasedXPowGate(phase_exponent=0.25, exponent=1), cirq.MatrixGate(1j * cirq.unitary(cirq.H)),
       *cirq.SingleQubitCliffordGate.all_single_qubit_cliffords[::4]]
TWO = [cirq.CNOT, cirq.CZ, cirq.SWAP, cirq.ISWAP, cirq.ISWAP**-1, cirq.XX**0.5, cirq.YY**-0.5, cirq.ZZ**0.5,
       cirq.CZPowGate(exponent=1, global_shift=0.5), cirq.Y.controlled(1), cirq.FSimGate(theta=np.pi / 2, phi=0),
       cirq.QubitPermutationGate([1, 0]), cirq.DensePauliString("XY", coefficient=-1), _Decomposable(),
       stimcirq.CXSwapGate(inverted=True), stimcirq.CZSwapGate()]
THREE = [cirq.QubitPermutationGate([2, 0, 1]), cirq.CCZ**2]
NOISE = {1: [lambda: cirq.depolarize(0.01), lambda: cirq.bit_flip(0.02), lambda: cirq.phase_flip(0.03),
             lambda: cirq.asymmetric_depolarize(0.01, 0.02, 0.03), lambda: cirq.phase_damp(0.04),
             lambda: cirq.X.with_probability(0.05), lambda: cirq.depolarize(0.0)],
         2: [lambda: cirq.depolarize(0.01, n_qubits=2),
             lambda: stimcirq.TwoQubitAsymmetricDepolarizingChannel([0.001 * (i % 3) for i in range(15)])],
         3: [lambda: cirq.depolarize(0.02, n_qubits=3)]}
T, U = sympy.Symbol("t"), sympy.Symbol("u")


class _Builder:
    """A seeded random circuit over every kind of operation (see `CASES`)."""

    def __init__(self, seed: int, qubits, params: bool = False):
        self.r = random.Random(seed)
        self.qubits = list(qubits)
        self.params = params
        self.measured = {}  # key -> width, measured in an earlier moment (readable by controls)
        self.serial = 0

    def key(self, width: int, in_moment: set) -> str:
        """A key of `width` bits new to this moment (a key of an earlier moment again, at times)."""
        again = [k for k, w in self.measured.items() if w == width and k not in in_moment and k[0] == "k"]
        if again and self.r.random() < 0.4:
            key = self.r.choice(sorted(again))
        else:
            self.serial += 1
            key = f"k{width}_{self.serial}"
        in_moment.add(key)
        return key

    def op(self, free, in_moment: set, top: bool):
        r = self.r
        family = r.choice(["one", "one", "one", "two", "two", "three", "noise", "noise", "measure", "measure",
                           "reset", "control", "loop", "param"])
        k = {"one": 1, "two": 2, "three": 3}.get(family, 1)
        if family in ("one", "two", "three") and len(free) >= k:
            gate = r.choice({1: ONE, 2: TWO, 3: THREE}[k])
            op = gate.on(*free[:k])
            return op.with_tags("tag") if r.random() < 0.1 else op
        if family == "noise":
            k = r.choice([1, 1, 1, 2, 2, 3])
            if len(free) >= k:
                return r.choice(NOISE[k])().on(*free[:k])
        if family == "measure":
            kind = r.choice(["measure", "measure", "measure", "pauli", "stim"])
            if kind == "measure":
                width = r.randint(1, min(3, len(free)))
                invert = tuple(r.random() < 0.5 for _ in range(r.randint(0, width)))
                confusion = None
                if r.random() < 0.2:
                    confusion = {(0,): np.array([[0.875, 0.125], [0.25, 0.75]])}
                return cirq.measure(*free[:width], key=self.key(width, in_moment), invert_mask=invert,
                                    confusion_map=confusion)
            if kind == "pauli" and len(free) >= 2:
                return cirq.PauliMeasurementGate(cirq.DensePauliString("XZ"), key=self.key(1, in_moment)).on(*free[:2])
            self.serial += 1
            return stimcirq.MeasureAndOrResetGate(
                measure=True, reset=r.random() < 0.5, basis=r.choice("XYZ"), invert_measure=r.random() < 0.5,
                key=f"s{self.serial}", measure_flip_probability=r.choice([0.0, 0.01])).on(free[0])
        if family == "reset":
            return cirq.reset(free[0])
        if family == "control" and top:
            readable = sorted(k for k, w in self.measured.items() if k not in in_moment)
            if readable:
                gate = r.choice([cirq.X, cirq.Z, cirq.H, cirq.S])
                return gate.on(free[0]).with_classical_controls(r.choice(readable))
        if family == "loop" and top and len(free) >= 2:
            inner = _Builder(r.randrange(1 << 30), free[: r.randint(2, min(4, len(free)))])
            inner.serial = 1000 * (self.serial + 1)
            self.serial += 1
            body = cirq.Circuit(inner.moment(top=False) for _ in range(r.randint(1, 3)))
            if not body.all_qubits():
                body = cirq.Circuit(cirq.H.on_each(*inner.qubits))
            return cirq.CircuitOperation(body.freeze(), repetitions=r.choice([1, 2, 3]),
                                         use_repetition_ids=r.random() < 0.5)
        if family == "param" and self.params:
            return r.choice([cirq.X**T, cirq.ZPowGate(exponent=U)]).on(free[0])
        return cirq.H(free[0])

    def moment(self, top: bool = True) -> cirq.Moment:
        r = self.r
        shape = r.random()
        qubits = self.qubits
        if shape < 0.05:
            return cirq.Moment()
        if shape < 0.15:  # one gate on every qubit (pairs for a two-qubit gate)
            gate = r.choice(ONE[:11] + TWO[:8] + [cirq.depolarize(0.01), cirq.depolarize(0.01, n_qubits=2)])
            k = cirq.num_qubits(gate)
            order = r.sample(qubits, len(qubits))
            return cirq.Moment(gate.on(*order[i:i + k]) for i in range(0, len(order) - k + 1, k))
        free = r.sample(qubits, len(qubits))
        ops, in_moment = [], set()
        while free and r.random() < 0.95:
            op = self.op(free, in_moment, top)
            ops.append(op)
            free = [q for q in free if q not in op.qubits]
        if r.random() < 0.05:
            ops.append(cirq.global_phase_operation(1j))
        moment = cirq.Moment(ops)
        for op in ops:
            for key in cirq.measurement_key_names(op):
                if top and key.startswith("k") and ":" not in key:
                    self.measured[key] = int(key[1:key.index("_")])
        return moment

    def circuit(self, depth: int) -> cirq.Circuit:
        return cirq.Circuit(self.moment() for _ in range(depth))


def _qubits(kind: str, n: int):
    if kind == "line":
        return cirq.LineQubit.range(0, 2 * n, 2)
    if kind == "grid":
        return [cirq.GridQubit(i // 4, i % 4) for i in range(n)]
    return [cirq.NamedQubit(f"q{i}") for i in range(n)]


class _OneByOne(cirq.NoiseModel):
    """A noise model whose OP_TREE is loose operations (the walk's pseudo-moments)."""

    def noisy_moment(self, moment, system_qubits):
        return [moment, [cirq.bit_flip(0.01).on(q) for q in sorted(moment.qubits)]]


def _surface_code(d: int, basis: str = "x") -> cirq.Circuit:
    return stimcirq.stim_circuit_to_cirq_circuit(stim.Circuit.generated(
        f"surface_code:rotated_memory_{basis}", distance=d, rounds=d, after_clifford_depolarization=0.001,
        before_round_data_depolarization=0.002, before_measure_flip_probability=0.003,
        after_reset_flip_probability=0.004))


def _wide() -> cirq.Circuit:
    q = cirq.LineQubit.range(3000)
    return cirq.Circuit(cirq.H.on_each(*q), cirq.CNOT.on_each(*zip(q[::2], q[1::2])),
                        cirq.depolarize(0.01).on_each(*q),
                        cirq.Moment(cirq.measure(x, key=f"m{i}") for i, x in enumerate(q)),
                        cirq.measure(*q[:7], key="all", invert_mask=(True, False, True)))


def _cases():
    """name -> (circuit, options of the compile, resolver)."""
    cases = {}
    for seed in range(12):
        kind = ("line", "grid", "named")[seed % 3]
        qubits = _qubits(kind, 4 + 3 * seed)
        builder = _Builder(seed, qubits, params=seed % 4 == 1)
        circuit = builder.circuit(6 + seed)
        options = {}
        if seed % 4 == 2:
            options["qubit_order"] = list(reversed(sorted(circuit.all_qubits())))
        if seed % 4 == 3:
            options["noise"] = cirq.depolarize(0.01) if seed % 8 == 3 else _OneByOne()
        resolver = {"t": 0.5, "u": 1.5} if seed % 4 == 1 else None
        cases[f"random-{kind}-{seed}"] = (circuit, options, resolver)
    cases["twirl"] = (cirq.Circuit(cirq.H.on_each(*cirq.LineQubit.range(3)),
                                   cirq.amplitude_damp(0.1).on_each(*cirq.LineQubit.range(3)),
                                   cirq.measure(*cirq.LineQubit.range(3), key="m")), {"non_pauli": "twirl"}, None)
    cases["wide"] = (_wide(), {}, None)
    cases["surface-x-5"] = (_surface_code(5), {}, None)
    cases["surface-z-3"] = (_surface_code(3, "z"), {}, None)
    return cases


CASES = _cases()


def programs(circuit, options, resolver):
    """The programs a circuit compiles to: its template resolved, and the resolving walk."""
    clear_cache()
    template = build_template(circuit, **options)
    return template.resolve(resolver), compile_resolved(circuit, resolver=resolver, **options)


def digest(program) -> str:
    """A digest of every table of a Program (what the engines read, and the keys and annotations)."""
    h = hashlib.sha256()

    def add(*items):
        for item in items:
            h.update(np.ascontiguousarray(item).tobytes() if isinstance(item, np.ndarray) else repr(item).encode())

    add(program.num_qubits, program.instructions, program.num_records, program.num_rand_slots, program.ext_qubits,
        program.ext_paulis, program.phases, program.base_phase, program.moment_rows, program.moment_records,
        program.qubits)
    for c in program.channels:
        add(c.arity, c.probs, c.paulis)
    for c in program.confusions:
        add(c.num_bits, c.matrix)
    for c in program.conditions:
        add(c.refs, c.table)
    for loop in program.loops:
        add(vars(loop))
    for k in program.keys:
        add(k.key, k.records)
    for a in list(program.detectors) + list(program.observables):
        add(a.kind, a.records, a.coords, a.index)
    return h.hexdigest()


def compute():
    return {name: [digest(p) for p in programs(*case)] for name, case in CASES.items()}


@pytest.fixture(scope="module")
def digests():
    return json.loads(DIGESTS.read_text())


@pytest.mark.filterwarnings("ignore::cirq_quasarq.TwirlWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_programs_are_as_before(name, digests):
    assert [digest(p) for p in programs(*CASES[name])] == digests[name]


def outcome(circuit, options=None, resolver=None):
    """The programs of `programs`, or the error it raises (type and message)."""
    try:
        return programs(circuit, options or {}, resolver)
    except Exception as error:  # noqa: BLE001 - both paths must fail alike
        return type(error), str(error)


def assert_same_outcome(monkeypatch, circuit, options=None, resolver=None, group_min=1):
    """Bulk lowering (from runs of `group_min` operations on) and one at a time agree."""
    monkeypatch.setattr(Walker, "group_min", None)
    expected = outcome(circuit, options, resolver)
    monkeypatch.setattr(Walker, "group_min", group_min)
    got = outcome(circuit, options, resolver)
    if isinstance(expected, tuple) and isinstance(expected[0], type):
        assert got == expected
        return
    assert not (isinstance(got, tuple) and isinstance(got[0], type)), got
    for mine, theirs in zip(got, expected):
        assert_programs_equal(mine, theirs, repr(circuit))


@pytest.mark.filterwarnings("ignore::cirq_quasarq.TwirlWarning")
@pytest.mark.parametrize("group_min", [1, 16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_bulk_equals_one_at_a_time_on_the_cases(monkeypatch, name, group_min):
    assert_same_outcome(monkeypatch, *CASES[name], group_min=group_min)


def _edge_cases():
    a, b, c, d = cirq.LineQubit.range(4)
    grid = [cirq.GridQubit(i, j) for i in range(3) for j in range(3)]
    named = [cirq.NamedQubit(n) for n in "abcdefgh"]
    wide = cirq.LineQubit.range(40)
    return {
        "empty moments": (cirq.Circuit([cirq.Moment(), cirq.Moment(cirq.H(a)), cirq.Moment()]), {}),
        "one op per group": (cirq.Circuit(cirq.H(a), cirq.S(b), cirq.CNOT(c, d), cirq.measure(a, key="m")), {}),
        "groupable and not in one moment": (cirq.Circuit(
            cirq.measure(a, key="m"),
            cirq.Moment(cirq.H(a), cirq.X(b).with_classical_controls("m"), cirq.CZ(c, d)),
            cirq.Moment(cirq.measure(a, key="m2"), cirq.depolarize(0.1).on(b), cirq.reset(c),
                        cirq.measure(d, key="m3", confusion_map={(0,): np.array([[0.9, 0.1], [0.2, 0.8]])}))), {}),
        "gate objects new on each read": (cirq.Circuit(  # ControlledOperation.gate: a new gate each time
            cirq.Moment(cirq.X(q).controlled_by(p) for p, q in zip(wide[::2], wide[1::2]))), {}),
        "a gate object per operation": (cirq.Circuit(
            cirq.Moment(copy.copy(ONE[i % len(ONE)]).on(q) for i, q in enumerate(wide)),
            cirq.Moment(copy.copy(TWO[i % 9]).on(p, q) for i, (p, q) in enumerate(zip(wide[::2], wide[1::2]))),
            cirq.Moment(cirq.depolarize(0.01 * (i % 3)).on(q) for i, q in enumerate(wide))), {}),
        "tagged": (cirq.Circuit(cirq.Moment(cirq.H(q).with_tags("t") for q in wide)), {}),
        # qubits equal by value but a new object in every operation (Cirq's own qubit types are
        # interned): the walk looks qubits up by object identity first, so each is new to it once
        "a qubit object per operation": (cirq.Circuit(
            cirq.Moment(cirq.H(_Fresh(i)) for i in range(40)),
            cirq.Moment(cirq.CZ(_Fresh(i), _Fresh(i + 1)) for i in range(0, 40, 2)),
            cirq.Moment(cirq.S(_Fresh(i)) for i in range(0, 40, 3)),
            cirq.measure(*(_Fresh(i) for i in range(40)), key="m")), {}),
        # a GateOperation subclass whose properties differ from what it stores: the bulk path reads
        # stored attributes only for types that keep GateOperation's properties (keys.readers)
        "operations that override gate and qubits": (cirq.Circuit(
            cirq.Moment(_Overriding(cirq.H, (q,), cirq.S) for q in wide),
            cirq.Moment([cirq.X(q) for q in wide[:20]] + [_Overriding(cirq.Y, (q,), cirq.Z) for q in wide[20:]]),
            cirq.Moment(_Overriding(cirq.CX, (p, q), cirq.CX, reverse=True) for p, q in zip(wide[::2], wide[1::2])),
            cirq.Moment(cirq.Z(q) for q in wide),
            cirq.Moment(_Overriding(cirq.depolarize(0.2), (q,), cirq.bit_flip(0.3)) for q in wide),
            cirq.Moment(_Overriding(cirq.MeasurementGate(2, key=f"r{i}"), (p, q), cirq.MeasurementGate(2, key=f"r{i}"),
                                    reverse=True) for i, (p, q) in enumerate(zip(wide[::2], wide[1::2])))), {}),
        # stimcirq's detectors in bulk (lowerings.detectors) and where they go one at a time
        "detectors": (cirq.Circuit(
            cirq.Moment(cirq.measure(q, key=f"d{i}") for i, q in enumerate(wide)),
            cirq.Moment(stimcirq.ShiftCoordsAnnotation([1.5, -2.0])),
            cirq.Moment(stimcirq.DetAnnotation(relative_keys=[-1 - i, -3 - i][:1 + i % 2],
                                               coordinate_metadata=[(-0.0, 1, 2.5, 3)[j] for j in range(i % 5)])
                        for i in range(30)),
            cirq.Moment(stimcirq.DetAnnotation(coordinate_metadata=[i]) for i in range(20)),  # no records
            cirq.Moment([stimcirq.DetAnnotation(relative_keys=[-1]) for _ in range(10)]
                        + [stimcirq.DetAnnotation(parity_keys=["d3", "d5"], relative_keys=[-2])]
                        + [stimcirq.DetAnnotation(relative_keys=[-4], coordinate_metadata=[7, 8, 9])
                           for _ in range(20)]),
            cirq.Moment([cirq.measure(q, key=f"e{i}") for i, q in enumerate(wide[:20])]
                        + [stimcirq.DetAnnotation(relative_keys=[-1, -21]) for _ in range(20)]),
            cirq.CircuitOperation(cirq.FrozenCircuit(
                cirq.Moment(cirq.measure(q, key=f"f{i}") for i, q in enumerate(wide[:20])),
                cirq.Moment(stimcirq.DetAnnotation(relative_keys=[-1 - i, -21 - i], coordinate_metadata=[i, 0])
                            for i in range(20)),
                cirq.Moment(stimcirq.ShiftCoordsAnnotation([0, 1, 2]))), repetitions=3)), {}),
        "a detector before the first record": (cirq.Circuit(
            cirq.Moment(cirq.measure(q, key=f"d{i}") for i, q in enumerate(wide[:4])),
            cirq.Moment(stimcirq.DetAnnotation(relative_keys=[-1 - i % 6]) for i in range(20))), {}),
        "grid, explicit order": (cirq.Circuit(cirq.H.on_each(*grid), cirq.CZ(grid[0], grid[4]),
                                              cirq.measure(*grid, key="g")), {"qubit_order": grid[::-1]}),
        "named, order with extra qubits": (cirq.Circuit(cirq.H.on_each(*named[:5]), cirq.measure_each(*named[:5])),
                                           {"qubit_order": named[::-1]}),
        "very wide": (cirq.Circuit(cirq.H.on_each(*cirq.LineQubit.range(5000)),
                                   cirq.measure(*cirq.LineQubit.range(5000), key="all")), {}),
        "resets and stim measurements": (cirq.Circuit(
            cirq.Moment(cirq.reset(q) for q in wide),
            cirq.Moment(stimcirq.MeasureAndOrResetGate(measure=True, reset=i % 2 == 0, basis="XYZ"[i % 3],
                                                       invert_measure=i % 5 == 0, key=f"s{i}",
                                                       measure_flip_probability=0.01 * (i % 2)).on(q)
                        for i, q in enumerate(wide)),
            cirq.Moment(stimcirq.MeasureAndOrResetGate(measure=True, reset=False, basis="X", invert_measure=True,
                                                       key=f"t{i}", measure_flip_probability=0.02).on(q)
                        for i, q in enumerate(wide))), {}),
        "a classically controlled subcircuit": (cirq.Circuit(
            cirq.measure(a, key="c"),
            cirq.CircuitOperation(cirq.FrozenCircuit(
                cirq.H.on_each(*wide), cirq.depolarize(0.1).on_each(*wide),
                cirq.Moment(cirq.X(q) ** 0.5 for q in wide))).with_classical_controls("c")), {}),
        "parameters on many qubits": (cirq.Circuit(cirq.Moment(cirq.X(q) ** T for q in wide), cirq.H.on_each(*wide),
                                                   cirq.Moment(cirq.Z(q) ** U for q in wide[::2]),
                                                   cirq.measure_each(*wide)), {}),
        "noise on qubits outside the circuit": (cirq.Circuit(cirq.H.on_each(*wide)), {"noise": _Elsewhere()}),
        "inside a loop with repetition ids": (cirq.Circuit(cirq.CircuitOperation(cirq.FrozenCircuit(
            cirq.H.on_each(*wide), cirq.measure_each(*wide), cirq.Moment(cirq.X(q).with_classical_controls(f"q({i})")
                                                                         for i, q in enumerate(wide))),
            repetitions=3, use_repetition_ids=True)), {}),
    }


class _Fresh(cirq.Qid):
    """A qubit type whose equal qubits are distinct objects."""

    def __init__(self, x: int):
        self.x = x

    def _comparison_key(self):
        return self.x

    @property
    def dimension(self) -> int:
        return 2


class _Overriding(cirq.GateOperation):
    """Stores one gate (and qubit order) and gives another through its properties."""

    def __init__(self, stored, qubits, shown, reverse: bool = False):
        super().__init__(stored, qubits)
        self._shown, self._reverse = shown, reverse

    @property
    def gate(self):
        return self._shown

    @property
    def qubits(self):
        return self._qubits[::-1] if self._reverse else self._qubits


class _Elsewhere(cirq.NoiseModel):
    """Noise on a qubit the circuit does not have."""

    def noisy_moment(self, moment, system_qubits):
        return [moment, cirq.Moment(cirq.bit_flip(0.1).on(cirq.LineQubit(1000 + i)) for i in range(20))]


EDGE_CASES = _edge_cases()


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_bulk_equals_one_at_a_time_on_edge_cases(monkeypatch, name):
    circuit, options = EDGE_CASES[name]
    resolver = {"t": 0.5, "u": -0.5}
    assert_same_outcome(monkeypatch, circuit, options, resolver)
    assert_same_outcome(monkeypatch, circuit, options, resolver, group_min=16)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(circuits(max_qubits=10, max_moments=6))
def test_bulk_equals_one_at_a_time_on_drawn_circuits(monkeypatch, drawn):
    circuit, _ = drawn
    assert_same_outcome(monkeypatch, circuit)


def test_operations_read_through_their_stored_attributes_only_where_they_are_the_properties():
    from cirq_quasarq.compiler.keys import readers

    q = cirq.LineQubit.range(4)
    plain, pauli = cirq.H(q[0]), cirq.X(q[1])
    assert type(pauli) is not cirq.GateOperation and isinstance(pauli, cirq.GateOperation)
    stored_gate, stored_qubits = readers([plain, pauli])
    for op in (plain, pauli, cirq.CZ(q[2], q[3])):
        assert stored_gate(op) is op.gate and stored_qubits(op) is op.qubits
    assert stored_gate is not readers([plain, _Overriding(cirq.H, (q[2],), cirq.S)])[0]
    gate_of, qubits_of = readers([plain, _Overriding(cirq.CX, (q[2], q[3]), cirq.CX, reverse=True)])
    overriding = _Overriding(cirq.CX, (q[2], q[3]), cirq.CZ, reverse=True)
    assert gate_of(overriding) is cirq.CZ and qubits_of(overriding) == (q[3], q[2])
    tagged = cirq.H(q[0]).with_tags("t")
    assert readers([tagged])[0](tagged) == cirq.H


def test_a_stimcirq_key_as_written_is_the_parsed_key():
    from cirq_quasarq.compiler.keys import Scope
    from cirq_quasarq.compiler.lowerings import _key_of, _key_written

    scope = Scope({})
    for key in ("0", "17", "", "name", "a:b", "a:b:c", ":x", "x:", cirq.MeasurementKey("m"),
                cirq.MeasurementKey("m", path=("p", "q")), 5):
        gate = stimcirq.MeasureAndOrResetGate(measure=True, reset=False, basis="Z", invert_measure=False, key=key)
        assert _key_written(gate, scope) == scope.key_as_written(_key_of(gate)), key


def test_keys_measured_in_bulk_are_read_as_measured_one_by_one():
    """`KeyTable.measured_many` defers its entries until a key is read or a loop closes: a read
    straight after it (no `bind` first), an older instance, a scoped bind and a loop's close see
    what measuring the keys one at a time gives."""
    from cirq_quasarq.compiler.keys import KeyTable, Scope

    def table(bulk):
        t = KeyTable()
        rows = np.arange(6, dtype=np.int64).reshape(-1, 1)
        keys = [("a",), ("b",), ("a",), ("c",), ("b",), ("a",)]
        if bulk:
            t.measured_many(keys[:4], rows[:4])
            t.measured_many(keys[4:], rows[4:])
        else:
            for key, row in zip(keys, rows):
                t.measured(key, row)
        return t

    for bulk in (False, True):
        t = table(bulk)
        assert t.serial == 6
        slots, depth = t.read(("a",), "here", None, False)
        assert slots.tolist() == [5] and depth == 0, bulk
        assert t.read(("a",), "here", None, False, index=-3)[0].tolist() == [0], bulk
        t = table(bulk)
        assert t.bind(Scope({}), ("b",)) == ("b",) and t.entries[("b",)].serial == 5, bulk
        t = table(bulk)
        t.open_loop(0, 2, None)
        t.measured_many([("d",)], [np.array([6])])
        t.close_loop(1)
        assert t.entries[("d",)].slots.tolist() == [7] and t.entries[("c",)].serial == 4, bulk


def test_wide_moments_go_in_bulk(monkeypatch):
    """A wide moment of gates, of measurements, of resets and of stimcirq's measurements is one block
    of rows each: the bulk path runs (not one operation at a time)."""
    blocks = []
    emit_rows = ProgramBuilder.emit_rows
    monkeypatch.setattr(ProgramBuilder, "emit_rows", lambda self, rows, pos: (blocks.append(len(rows)),
                                                                                emit_rows(self, rows, pos)))
    n = 2 * Walker.group_min
    q = cirq.LineQubit.range(n)
    circuit = cirq.Circuit(cirq.H.on_each(*q), cirq.Moment(cirq.CNOT(a, b) for a, b in zip(q[::2], q[1::2])),
                           cirq.depolarize(0.01).on_each(*q), cirq.Moment(cirq.reset(x) for x in q),
                           cirq.measure_each(*q),
                           cirq.Moment(stimcirq.MeasureAndOrResetGate(measure=True, reset=True, basis="Z",
                                                                      invert_measure=False, key=f"s{i}").on(x)
                                       for i, x in enumerate(q)))
    clear_cache()
    build_template(circuit)
    assert blocks == [n, n // 2, n, n, n, n]


def test_same_bits_for_the_same_seed(monkeypatch):
    circuit = CASES["surface-x-5"][0]
    records = []
    for group_min in (None, Walker.group_min):
        monkeypatch.setattr(Walker, "group_min", group_min)
        clear_cache()
        result = QuasarqSimulator(seed=7).run(circuit, repetitions=200)
        records.append({k: v.tolist() for k, v in result.records.items()})
    assert records[0] == records[1]


if __name__ == "__main__" and "--write" in sys.argv:
    DIGESTS.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
