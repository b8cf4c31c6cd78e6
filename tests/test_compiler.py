"""Tests of the compiler cirq.Circuit -> Program.

Programs are checked against Cirq itself: unitary parts by multiplying `opcodes.unitary_of` per
instruction into a state vector, whole programs (measurements, loops, classical control, keys) by
a small reference executor below whose records are compared with `cirq.Simulator().run`.
"""

from __future__ import annotations

import dataclasses
import time

import cirq
import numpy as np
import pytest
import sympy

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cirq_quasarq import errors
from cirq_quasarq.core import opcodes
from cirq_quasarq.compiler import clear_cache, compile_circuit, compile_template
from cirq_quasarq.compiler import walker as walker_module
from cirq_quasarq.core.program import A, AUX, B, COND, FLAGS, OP, REC, STEP

stimcirq = pytest.importorskip("stimcirq")
stim = pytest.importorskip("stim")

NAME = {op.code: op.name for op in opcodes.OPCODES}
KIND = {op.code: op.kind for op in opcodes.OPCODES}
_UNITARY_CACHE = {}


def unitary_of(code):
    if code not in _UNITARY_CACHE:
        _UNITARY_CACHE[code] = opcodes.unitary_of(NAME[code])
    return _UNITARY_CACHE[code]


# ---------------------------------------------------------------------------------------------
# Reference executor (state vector, n <= ~8 qubits)


def apply_unitary(psi, u, targets):
    """psi: tensor with axis q = qubit q (plus trailing batch axes); u little-endian local."""
    if len(targets) == 1:
        out = np.tensordot(u, psi, axes=([1], [targets[0]]))
        return np.moveaxis(out, 0, targets[0])
    t = u.reshape(2, 2, 2, 2).transpose(1, 0, 3, 2)  # (out0, out1, in0, in1)
    out = np.tensordot(t, psi, axes=([2, 3], list(targets)))
    return np.moveaxis(out, [0, 1], list(targets))


_PAULI_U = {1: np.array([[0, 1], [1, 0]], complex), 2: np.array([[0, -1j], [1j, 0]]),
            3: np.diag([1, -1]).astype(complex)}


def _pair(ins, i):
    depth = 0
    for j in range(i, len(ins)):
        if NAME[ins[j, OP]] == "REPEAT":
            depth += 1
        elif NAME[ins[j, OP]] == "END_REPEAT":
            depth -= 1
            if depth == 0:
                return j
    raise AssertionError("unbalanced loop")


def execute(p, seed=0, noisy=False):
    """Run a Program once; returns the recorded bits (int array, -1 where never written)."""
    rng = np.random.default_rng(seed)
    n = p.num_qubits
    psi = np.zeros((2,) * n, dtype=complex)
    psi[(0,) * n] = 1
    rec = np.full(p.num_records, -1, dtype=np.int64)
    ins = p.instructions
    state = {"psi": psi}

    def measure(q):
        psi = state["psi"]
        p1 = float(np.sum(np.abs(np.take(psi, 1, axis=q)) ** 2))
        outcome = int(rng.random() < p1) if 1e-9 < p1 < 1 - 1e-9 else int(p1 > 0.5)
        idx = [slice(None)] * psi.ndim
        idx[q] = 1 - outcome
        psi = psi.copy()
        psi[tuple(idx)] = 0
        state["psi"] = psi / np.linalg.norm(psi)
        return outcome

    def run(lo, hi, stack):
        i = lo
        while i < hi:
            row = ins[i]
            name = NAME[row[OP]]
            if name == "REPEAT":
                j = _pair(ins, i)
                loop = p.loops[row[A]]
                for it in range(loop.count):
                    run(i + 1, j, stack + [(loop, it)])
                i = j + 1
                continue
            shift = sum(it * loop.rec_stride for loop, it in stack)
            if row[COND] >= 0:
                c = p.conditions[row[COND]]
                a = 0
                for k, (slot, depth) in enumerate(c.refs):
                    s = slot + sum(it * loop.rec_stride for loop, it in stack[:depth])
                    assert rec[s] >= 0, "condition reads an unwritten record"
                    a |= int(rec[s]) << k
                if not c.table[a]:
                    i += 1
                    continue
            kind = KIND[row[OP]]
            if kind == opcodes.Kind.UNITARY:
                targets = [row[A]] if row[B] < 0 else [row[A], row[B]]
                state["psi"] = apply_unitary(state["psi"], unitary_of(row[OP]), targets)
            elif name in ("M", "MR", "R"):
                out = measure(row[A])
                if name != "R":
                    rec[row[REC] + shift] = out ^ (row[FLAGS] & 1)
                if name != "M" and out:
                    state["psi"] = apply_unitary(state["psi"], _PAULI_U[1], [row[A]])
            elif kind == opcodes.Kind.NOISE and noisy:
                ch = p.channels[row[AUX]]
                targets = (list(p.ext_qubits[row[A]:row[A] + row[B]]) if opcodes.OPCODES[row[OP]].arity == 0
                           else [row[A]] + ([row[B]] if row[B] >= 0 else []))
                r = rng.random()
                acc = 0.0
                for prob, paulis in zip(ch.probs, ch.paulis):
                    acc += prob
                    if r < acc:
                        for t, pl in zip(targets, paulis):
                            if pl:
                                state["psi"] = apply_unitary(state["psi"], _PAULI_U[int(pl)], [t])
                        break
            elif name == "CONFUSION" and noisy:
                conf = p.confusions[row[AUX]]
                first = row[A] + shift
                k = conf.num_bits
                true = 0
                for j in range(k):
                    true = (true << 1) | int(rec[first + j])
                got = rng.choice(1 << k, p=conf.matrix[true])
                for j in range(k):
                    rec[first + j] = (got >> (k - 1 - j)) & 1
            i += 1

    run(0, len(ins), [])
    return rec


def key_values(p, rec):
    return {k.key: rec[k.records] for k in p.keys}


def assert_same_as_cirq(circuit, seeds=(0,), **kw):
    """Records of our program equal Cirq's for deterministic circuits (any seed)."""
    p = compile_circuit(circuit, **kw)
    expected = cirq.Simulator().run(circuit).records
    for seed in seeds:
        ours = key_values(p, execute(p, seed))
        assert set(ours) == set(expected), (sorted(ours), sorted(expected))
        for key, value in expected.items():
            assert ours[key].shape == value.shape[1:], (key, ours[key].shape, value.shape)
            np.testing.assert_array_equal(ours[key], value[0], err_msg=key)
    return p


def program_state(p):
    """Unitary of a measurement-free program applied to |0..0>."""
    psi = np.zeros((2,) * p.num_qubits, dtype=complex)
    psi[(0,) * p.num_qubits] = 1
    for row in p.instructions:
        assert KIND[row[OP]] == opcodes.Kind.UNITARY
        targets = [row[A]] if row[B] < 0 else [row[A], row[B]]
        psi = apply_unitary(psi, unitary_of(row[OP]), targets)
    return psi.reshape(-1)


def program_unitary(p):
    n = p.num_qubits
    dim = 2**n
    u = np.eye(dim, dtype=complex).reshape((2,) * n + (dim,))
    for row in p.instructions:
        assert KIND[row[OP]] == opcodes.Kind.UNITARY, NAME[row[OP]]
        targets = [row[A]] if row[B] < 0 else [row[A], row[B]]
        u = apply_unitary(u, unitary_of(row[OP]), targets)
    return u.reshape(dim, dim)


def assert_equal_up_to_phase(u, v):
    cirq.testing.assert_allclose_up_to_global_phase(u, v, atol=1e-7)


def assert_steps_disjoint(p):
    seen = {}
    for row in p.instructions:
        op = opcodes.OPCODES[row[OP]]
        if op.kind == opcodes.Kind.LOOP or op.name == "CONFUSION":
            continue
        qs = (list(p.ext_qubits[row[A]:row[A] + row[B]]) if op.arity == 0
              else [row[A]] + ([row[B]] if row[B] >= 0 else []))
        used = seen.setdefault(int(row[STEP]), set())
        assert not (used & set(qs)), f"step {row[STEP]} reuses qubits {used & set(qs)}"
        used |= set(qs)


# ---------------------------------------------------------------------------------------------
# Unitary equivalence


class _Decomposable(cirq.Gate):
    """A gate the gate table does not know: only its decomposition (H, CZ, S) is Clifford."""

    def _num_qubits_(self):
        return 2

    def _decompose_(self, qubits):
        a, b = qubits
        yield cirq.H(a)
        yield cirq.CZ(a, b)
        yield cirq.S(b)
        yield cirq.SWAP(a, b)

    def __repr__(self):
        return "_Decomposable()"


ONE = [cirq.X, cirq.Y, cirq.Z, cirq.H, cirq.S, cirq.S**-1, cirq.X**0.5, cirq.Y**-0.5, cirq.Z**1.5,
       cirq.PhasedXZGate(x_exponent=0.5, z_exponent=0.5, axis_phase_exponent=0.5), cirq.I,
       *cirq.SingleQubitCliffordGate.all_single_qubit_cliffords[::3]]
TWO = [cirq.CX, cirq.CY if hasattr(cirq, "CY") else cirq.ControlledGate(cirq.Y), cirq.CZ, cirq.SWAP,
       cirq.ISWAP, cirq.ISWAP**-1, cirq.XX**0.5, cirq.YY**-0.5, cirq.ZZ**0.5, cirq.CX**-1,
       cirq.ControlledGate(cirq.Y), _Decomposable(), stimcirq.CXSwapGate(inverted=True),
       stimcirq.CZSwapGate()]
THREE = [cirq.QubitPermutationGate([2, 0, 1]), cirq.CCZ**2]


@st.composite
def clifford_circuits(draw, max_qubits=5):
    n = draw(st.integers(2, max_qubits))
    qubits = cirq.LineQubit.range(n)
    ops = []
    for _ in range(draw(st.integers(1, 25))):
        k = draw(st.sampled_from([1, 1, 2, 2, 3])) if n >= 3 else draw(st.sampled_from([1, 2]))
        qs = draw(st.permutations(qubits))[:k]
        gate = draw(st.sampled_from({1: ONE, 2: TWO, 3: THREE}[k]))
        ops.append(gate.on(*qs))
    if draw(st.booleans()):
        ops.append(cirq.X(qubits[0]) * cirq.Y(qubits[1]))  # a PauliString operation
    return cirq.Circuit(ops), qubits


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clifford_circuits())
def test_unitary_equivalence(data):
    circuit, qubits = data
    p = compile_circuit(circuit, qubit_order=qubits)
    assert p.qubits == tuple(qubits)
    assert_equal_up_to_phase(program_unitary(p), circuit.unitary(qubit_order=qubits))
    assert_steps_disjoint(p)


def test_unitary_equivalence_detects_a_wrong_lowering(monkeypatch):
    # The check above must be able to fail: swap S for S_DAG in the compiled program.
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.H(a), cirq.S(a), cirq.CX(a, b))
    p = compile_circuit(circuit)
    ins = p.instructions.copy()
    ins[ins[:, OP] == opcodes.CODE["S"], OP] = opcodes.CODE["S_DAG"]
    bad = dataclasses.replace(p, instructions=ins)
    with pytest.raises(AssertionError):
        assert_equal_up_to_phase(program_unitary(bad), cirq.unitary(circuit))


def test_qubit_order_is_cirqs():
    a, b, c = cirq.LineQubit.range(3)
    circuit = cirq.Circuit(cirq.CX(c, a), cirq.H(b))
    p = compile_circuit(circuit)
    assert p.qubits == (a, b, c)
    order = [c, b, a]
    p2 = compile_circuit(circuit, qubit_order=order)
    assert p2.qubits == (c, b, a)
    assert_equal_up_to_phase(program_unitary(p2), circuit.unitary(qubit_order=order))
    p3 = compile_circuit(circuit, qubit_order=cirq.QubitOrder.explicit([b, c, a]))
    assert p3.qubits == (b, c, a)


def test_steps_are_disjoint_and_shared_within_a_moment():
    qs = cirq.LineQubit.range(6)
    circuit = cirq.Circuit(
        cirq.Moment(cirq.H(qs[0]), cirq.CX(qs[1], qs[2]), cirq.QubitPermutationGate([2, 0, 1]).on(*qs[3:])),
        cirq.Moment(cirq.measure_single_paulistring(cirq.X(qs[0]) * cirq.Y(qs[1]) * cirq.Z(qs[2]), key="p"),
                    cirq.measure(qs[3], qs[4], key="m")),
    )
    p = compile_circuit(circuit)
    assert_steps_disjoint(p)
    steps = p.instructions[:, STEP]
    assert np.all(np.diff(steps) >= 0)  # rows come position by position
    first = steps[(p.instructions[:, OP] == opcodes.CODE["H"]) & (p.instructions[:, A] == 0)][0]
    cx = steps[p.instructions[:, OP] == opcodes.CODE["CX"]][0]
    assert first == cx  # ops of one moment share the step of their first position


# ---------------------------------------------------------------------------------------------
# Measurements and keys against Cirq


def test_measurement_invert_mask_and_layout():
    a, b, c = cirq.LineQubit.range(3)
    circuit = cirq.Circuit(cirq.X(a), cirq.X(c),
                           cirq.measure(a, b, c, key="m", invert_mask=(False, True)),
                           cirq.measure(b, key="n", invert_mask=(True,)))
    p = assert_same_as_cirq(circuit)
    assert p.num_records == 4
    m = [k for k in p.keys if k.key == "m"][0]
    assert m.records.shape == (1, 3)
    flags = p.instructions[p.instructions[:, OP] == opcodes.CODE["M"], FLAGS]
    assert flags.tolist() == [0, 1, 0, 1]


def test_repeated_keys_are_instances():
    a = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.measure(a, key="k"), cirq.X(a), cirq.measure(a, key="k"),
                           cirq.measure(a, key="k", invert_mask=(True,)))
    p = assert_same_as_cirq(circuit)
    assert [k.records.shape for k in p.keys] == [(3, 1)]


def test_pauli_measurements():
    a, b, c = cirq.LineQubit.range(3)
    prep = [cirq.H(a), cirq.H(b), cirq.CZ(a, b), cirq.X(c), cirq.H(c), cirq.S(c)]
    # Stabilizers of the prepared state: X_a Z_b, Z_a X_b, and -Y_c.
    circuit = cirq.Circuit(
        prep,
        cirq.measure_single_paulistring(cirq.X(a) * cirq.Z(b), key="xz"),
        cirq.measure_single_paulistring(-cirq.Z(a) * cirq.X(b), key="mzx"),
        cirq.measure_single_paulistring(cirq.Y(c), key="y"),
        cirq.measure_single_paulistring(-cirq.Y(c), key="my"),
        cirq.CZ(a, b), cirq.H(a), cirq.H(b), cirq.measure(a, b, key="ab_after"),  # back to |00>
    )
    p = assert_same_as_cirq(circuit, seeds=range(5))
    assert p.num_records == 6
    assert_steps_disjoint(p)


def test_measure_and_reset_gate_bases():
    a, b, c = cirq.LineQubit.range(3)
    mr = stimcirq.MeasureAndOrResetGate
    circuit = cirq.Circuit(
        cirq.H(a), cirq.X(b), cirq.H(c), cirq.S(c),
        mr(measure=True, reset=True, basis="X", invert_measure=False, key="mx", measure_flip_probability=0).on(a),
        mr(measure=True, reset=False, basis="Z", invert_measure=True, key="mz", measure_flip_probability=0).on(b),
        mr(measure=True, reset=False, basis="Y", invert_measure=False, key="my", measure_flip_probability=0).on(c),
        mr(measure=False, reset=True, basis="X", invert_measure=False, key="", measure_flip_probability=0).on(b),
        cirq.H(a), cirq.measure(a, key="a_after"),  # MRX left |+>
        cirq.H(b), cirq.measure(b, key="b_after"),
    )
    p = assert_same_as_cirq(circuit, seeds=range(4))
    names = [NAME[c] for c in p.instructions[:, OP]]
    assert "MR" in names and names.count("H_YZ") == 2  # MY lowered to H_YZ M H_YZ


def test_confusion_map_respects_cirqs_order_with_invert_mask():
    a, b, c = cirq.LineQubit.range(3)
    m = np.array([[0.9, 0.1, 0, 0], [0.2, 0.8, 0, 0], [0, 0, 0.7, 0.3], [0, 0, 0.4, 0.6]])
    gate = cirq.MeasurementGate(3, "k", invert_mask=(False, False, True), confusion_map={(2, 0): m})
    p = compile_circuit(cirq.Circuit(gate.on(a, b, c), cirq.H(b)))
    key = p.keys[0]
    # Records of the confusion group (qubits c, a) are consecutive, c first.
    assert key.records[0, 2] + 1 == key.records[0, 0]
    (conf,) = p.confusions
    # Cirq (measuring mid-circuit) confuses raw bits (c, a) and then inverts c: in recorded bits
    # the matrix is conjugated by flipping the first (c) bit.
    perm = np.arange(4) ^ 0b10
    np.testing.assert_allclose(conf.matrix, m[perm][:, perm])
    # Sampling terminal measurements, Cirq inverts first: the matrix applies as it is.
    terminal = compile_circuit(cirq.Circuit(cirq.H(b), gate.on(a, b, c)))
    np.testing.assert_allclose(terminal.confusions[0].matrix, m)
    row = p.instructions[p.instructions[:, OP] == opcodes.CODE["CONFUSION"]][0]
    assert row[A] == key.records[0, 2] and row[B] == 2


@pytest.mark.parametrize("terminal", [True, False])
def test_confusion_statistics_match_cirq(terminal):
    # Cirq confuses raw bits and then inverts them, except when it samples terminal measurements
    # (there it inverts first); the compiler follows whichever path Cirq's simulators take.
    a, b = cirq.LineQubit.range(2)
    m = np.array([[0.7, 0.3], [0.0, 1.0]])
    circuit = cirq.Circuit(cirq.MeasurementGate(2, "k", invert_mask=(True, False),
                                                confusion_map={(0,): m}).on(a, b))
    if not terminal:
        circuit.append(cirq.X(a))
    p = compile_circuit(circuit)
    ours = np.array([key_values(p, execute(p, s, noisy=True))["k"][0] for s in range(400)])
    theirs = cirq.CliffordSimulator(seed=1).run(circuit, repetitions=400).records["k"][:, 0]
    assert abs(ours[:, 0].mean() - theirs[:, 0].mean()) < 0.12
    assert abs(ours[:, 0].mean() - (1.0 if terminal else 0.7)) < 0.1
    assert ours[:, 1].sum() == 0


def test_resets():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.X(a), cirq.H(b), cirq.reset(a), cirq.reset(b),
                           cirq.measure(a, b, key="m"))
    p = assert_same_as_cirq(circuit, seeds=range(5))
    assert [NAME[c] for c in p.instructions[:, OP]].count("R") == 2


# ---------------------------------------------------------------------------------------------
# Noise


def _noise_rows(p):
    return [(NAME[r[OP]], p.channels[r[AUX]]) for r in p.instructions
            if KIND[r[OP]] == opcodes.Kind.NOISE]


def test_noise_channels():
    a, b, c = cirq.LineQubit.range(3)
    ops = [
        cirq.bit_flip(0.1).on(a), cirq.phase_flip(0.2).on(b), cirq.Y.with_probability(0.05).on(c),
        cirq.depolarize(0.3).on(a), cirq.depolarize(0.15, n_qubits=2).on(b, c),
        cirq.asymmetric_depolarize(0.01, 0.02, 0.03).on(a),
        cirq.asymmetric_depolarize(error_probabilities={"XY": 0.1, "ZI": 0.2, "II": 0.7}).on(b, c),
        cirq.asymmetric_depolarize(error_probabilities={"XYZ": 0.1, "III": 0.9}).on(a, b, c),
        cirq.phase_damp(0.36).on(a),
        (cirq.X(a) * cirq.Z(c)).with_probability(0.25),
        cirq.RandomGateChannel(sub_gate=cirq.Z, probability=0.5).on(b),
        stimcirq.TwoQubitAsymmetricDepolarizingChannel([0.005 * (i + 1) for i in range(15)]).on(a, c),
        stimcirq.IErrorGate([0.1]).on(a), stimcirq.IIErrorGate([0.1]).on(a, b),
        cirq.X.with_probability(0.0).on(a),
    ]
    circuit = cirq.Circuit(cirq.Moment(op) for op in ops)
    rows = _noise_rows(compile_circuit(circuit))
    names = [n for n, _ in rows]
    assert names == ["X_ERROR", "Z_ERROR", "Y_ERROR", "DEPOLARIZE1", "DEPOLARIZE2", "PAULI_CHANNEL_1",
                     "PAULI_CHANNEL_2", "E", "Z_ERROR", "E", "Z_ERROR", "PAULI_CHANNEL_2"]
    ch = dict(enumerate(c for _, c in rows))
    np.testing.assert_allclose(ch[0].probs, [0.1])
    np.testing.assert_array_equal(ch[0].paulis, [[1]])
    np.testing.assert_allclose(ch[3].probs, [0.1] * 3)
    assert len(ch[4].probs) == 15 and np.allclose(ch[4].probs, 0.01)
    assert {tuple(r) for r in ch[5].paulis} == {(1,), (2,), (3,)}
    np.testing.assert_allclose(sorted(ch[5].probs), [0.01, 0.02, 0.03])
    pc2 = {tuple(r): pr for r, pr in zip(ch[6].paulis, ch[6].probs)}
    assert pc2 == {(1, 2): pytest.approx(0.1), (3, 0): pytest.approx(0.2)}  # first letter: first qubit
    assert [tuple(r) for r in ch[7].paulis] == [(1, 2, 3)] and ch[7].arity == 3
    np.testing.assert_allclose(ch[8].probs, [(1 - np.sqrt(1 - 0.36)) / 2])
    assert {tuple(r): pr for r, pr in zip(ch[9].paulis, ch[9].probs)} == {(1, 3): pytest.approx(0.25)}
    stim_order = [(x, y) for x in range(4) for y in range(4)][1:]
    got = {tuple(r): pr for r, pr in zip(ch[11].paulis, ch[11].probs)}
    assert got == {k: pytest.approx(0.005 * (i + 1)) for i, k in enumerate(stim_order)}
    p = compile_circuit(circuit)
    e_rows = [r for r in p.instructions if NAME[r[OP]] == "E"]
    assert p.ext_qubits[e_rows[0][A]:e_rows[0][A] + e_rows[0][B]].tolist() == [0, 1, 2]
    assert p.ext_qubits[e_rows[1][A]:e_rows[1][A] + e_rows[1][B]].tolist() == [0, 2]
    assert p.ext_paulis[e_rows[1][A]:e_rows[1][A] + e_rows[1][B]].tolist() == [1, 3]  # X_a Z_c


def test_phase_damping_equivalence():
    # The Z_ERROR probability chosen for phase damping gives the same channel (Choi matrices).
    gamma = 0.37
    p = (1 - np.sqrt(1 - gamma)) / 2
    ours = [np.sqrt(1 - p) * np.eye(2), np.sqrt(p) * np.diag([1, -1])]
    theirs = cirq.kraus(cirq.phase_damp(gamma))

    def choi(ks):
        return sum(np.kron(k, k.conj()) for k in ks)

    np.testing.assert_allclose(choi(ours), choi(theirs), atol=1e-12)


@pytest.mark.parametrize("channel", [
    cirq.amplitude_damp(0.1),
    cirq.generalized_amplitude_damp(0.2, 0.1),
    cirq.KrausChannel([np.diag([1, 0]), np.array([[0, 1], [0, 0]])]),  # reset as a channel
    cirq.RandomGateChannel(sub_gate=cirq.H, probability=0.1),
])
def test_non_pauli_noise_is_rejected(channel):
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.H(a), cirq.CX(a, b), channel.on(a))
    with pytest.raises(errors.UnsupportedNoiseError, match="moment 2"):
        compile_circuit(circuit)


def test_noise_model_is_applied_like_cirqs_simulators():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.H(a), cirq.CX(a, b), cirq.measure(a, b, key="m"))
    p = compile_circuit(circuit, noise=cirq.depolarize(0.01))
    model = cirq.NoiseModel.from_noise_model_like(cirq.depolarize(0.01))
    expected = sum(1 for tree in model.noisy_moments(circuit, [a, b])
                   for op in cirq.flatten_to_ops(tree) if isinstance(op.gate, cirq.DepolarizingChannel))
    assert [n for n, _ in _noise_rows(p)].count("DEPOLARIZE1") == expected > 0
    assert compile_circuit(circuit, noise=cirq.NO_NOISE).num_instructions == compile_circuit(circuit).num_instructions
    assert_steps_disjoint(p)


# ---------------------------------------------------------------------------------------------
# Classical control


def test_classical_control_kinds_match_cirq():
    a, b, c, d = cirq.LineQubit.range(4)
    circuit = cirq.Circuit(
        cirq.X(a), cirq.measure(a, b, key="ab"), cirq.X(c), cirq.measure(c, key="c"),
        cirq.X(d).with_classical_controls("ab"),
        cirq.measure(d, key="d1"),
        cirq.X(d).with_classical_controls(cirq.BitMaskKeyCondition("ab", bitmask=1)),
        cirq.measure(d, key="d2"),
        cirq.X(d).with_classical_controls(
            cirq.SympyCondition(sympy.Eq(sympy.Symbol("ab"), 2) & (sympy.Symbol("c") > 0))),
        cirq.measure(d, key="d3"),
        cirq.X(d).with_classical_controls("c", cirq.SympyCondition(sympy.Symbol("ab") < 2)),
        cirq.measure(d, key="d4"),
    )
    p = assert_same_as_cirq(circuit)
    assert len(p.conditions) == 4
    assert p.conditions[2].refs.shape == (3, 2)  # ab (2 bits) and c


def test_classical_control_with_random_outcomes():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.H(a), cirq.measure(a, key="m"), cirq.X(b).with_classical_controls("m"),
                           cirq.measure(b, key="n"))
    p = compile_circuit(circuit)
    seen = set()
    for seed in range(12):
        vals = key_values(p, execute(p, seed))
        assert vals["m"][0, 0] == vals["n"][0, 0]
        seen.add(int(vals["m"][0, 0]))
    assert seen == {0, 1}
    assert p.needs_branching() is False


def test_controlled_op_lowered_to_several_instructions_carries_cond():
    a, b, c = cirq.LineQubit.range(3)
    circuit = cirq.Circuit(cirq.X(a), cirq.measure(a, key="m"),
                           _Decomposable().on(b, c).with_classical_controls("m"),
                           cirq.H(c), cirq.measure(b, c, key="bc"))  # |0+> -> |00>
    p = assert_same_as_cirq(circuit)
    controlled = p.instructions[p.instructions[:, COND] >= 0]
    assert len(controlled) >= 4 and p.needs_branching()


def test_condition_errors_name_the_moment():
    a, b = cirq.LineQubit.range(2)
    with pytest.raises(errors.MeasurementKeyError, match="moment 1"):
        compile_circuit(cirq.Circuit(cirq.Moment(cirq.H(a)), cirq.Moment(cirq.X(b).with_classical_controls("nope"))))
    qs = cirq.LineQubit.range(13)
    too_many = cirq.Circuit(cirq.Moment(cirq.measure(*qs, key="big")),
                            cirq.Moment(cirq.X(qs[0]).with_classical_controls("big")))
    with pytest.raises(errors.UnsupportedOperationError, match="moment 1"):
        compile_circuit(too_many)


# ---------------------------------------------------------------------------------------------
# Subcircuits and loops


def test_loop_repeated_keys_without_unrolling():
    a, b = cirq.LineQubit.range(2)
    body = cirq.FrozenCircuit(cirq.X(a), cirq.measure(a, key="k"), cirq.CX(a, b), cirq.measure(b, key="j"))
    circuit = cirq.Circuit(cirq.CircuitOperation(body, repetitions=1000))
    p = compile_circuit(circuit)
    assert p.num_records == 2 * 1000
    assert p.num_instructions < 10
    keys = {k.key: k.records for k in p.keys}
    assert keys["k"].shape == (1000, 1)
    np.testing.assert_array_equal(keys["k"][:, 0], np.arange(0, 2000, 2))
    small = cirq.Circuit(cirq.CircuitOperation(body, repetitions=5))
    assert_same_as_cirq(small)


def test_repetition_ids_name_keys_per_iteration():
    a, b = cirq.LineQubit.range(2)
    inner = cirq.CircuitOperation(cirq.FrozenCircuit(cirq.X(a), cirq.measure(a, key="k")),
                                  repetitions=2, use_repetition_ids=True)
    outer = cirq.CircuitOperation(cirq.FrozenCircuit(inner, cirq.X(b), cirq.measure(b, key="o"),
                                                     cirq.measure(a, key="plain")),
                                  repetitions=3, repetition_ids=["x", "y", "z"])
    circuit = cirq.Circuit(outer, cirq.measure(a, b, key="end"))
    p = assert_same_as_cirq(circuit)
    names = {k.key for k in p.keys}
    assert {"x:0:k", "z:1:k", "y:o", "x:plain", "end"} <= names
    assert p.num_instructions < 20


def test_loop_maps_qubits_keys_params_and_inverse():
    a, b, c = cirq.LineQubit.range(3)
    t = sympy.Symbol("t")
    body = cirq.FrozenCircuit(cirq.X(a) ** t, cirq.CX(a, b), cirq.measure(b, key="k"))
    op = cirq.CircuitOperation(body, repetitions=3, qubit_map={a: c, b: a},
                               measurement_key_map={"k": "renamed"}, param_resolver={t: 1})
    circuit = cirq.Circuit(op, cirq.measure(c, key="c"))
    p = assert_same_as_cirq(circuit)
    assert [k.key for k in p.keys] == ["renamed", "c"]
    s_body = cirq.FrozenCircuit(cirq.S(a), cirq.H(a), cirq.CX(a, b), cirq.S(b))
    inv = cirq.Circuit(cirq.CircuitOperation(s_body, repetitions=-2))
    p_inv = compile_circuit(inv)
    flat = cirq.Circuit(cirq.inverse(s_body.unfreeze()) * 2)
    u = program_unitary(_unrolled(p_inv))
    assert_equal_up_to_phase(u, flat.unitary(qubit_order=[a, b]))


def _unrolled(p):
    """The same program with loops expanded (only for unitary tests)."""
    ins = p.instructions
    rows = []

    def run(lo, hi):
        i = lo
        while i < hi:
            if NAME[ins[i, OP]] == "REPEAT":
                j = _pair(ins, i)
                for _ in range(p.loops[ins[i, A]].count):
                    run(i + 1, j)
                i = j + 1
                continue
            rows.append(ins[i])
            i += 1

    run(0, len(ins))
    return dataclasses.replace(p, instructions=np.array(rows, dtype=np.int32).reshape(-1, ins.shape[1]))


def test_nested_loops_and_conditions_inside_loops():
    a, b, c = cirq.LineQubit.range(3)
    inner = cirq.CircuitOperation(cirq.FrozenCircuit(
        cirq.X(a), cirq.measure(a, key="k"), cirq.X(b).with_classical_controls("k"),
        cirq.measure(b, key="j")), repetitions=3)
    outer = cirq.CircuitOperation(cirq.FrozenCircuit(inner, cirq.X(c).with_classical_controls("j"),
                                                     cirq.measure(c, key="c")), repetitions=2)
    p = assert_same_as_cirq(cirq.Circuit(outer))
    assert p.num_records == 2 * (3 * 2 + 1)
    assert len(p.loops) == 2 and p.loops[1].depth == 2


def test_condition_reading_previous_iteration_with_fixed_shift():
    a, b = cirq.LineQubit.range(2)
    body = cirq.FrozenCircuit(cirq.X(b).with_classical_controls("k"), cirq.measure(b, key="j"),
                              cirq.X(a), cirq.measure(a, key="k"))
    circuit = cirq.Circuit(cirq.X(a), cirq.measure(a, key="k"), cirq.CircuitOperation(body, repetitions=4))
    p = assert_same_as_cirq(circuit)
    assert p.conditions[0].refs[0, 1] == 1  # shifts with the loop
    bad = cirq.Circuit(cirq.measure(a, key="k"), cirq.measure(b, key="z"),
                       cirq.CircuitOperation(cirq.FrozenCircuit(
                           cirq.X(b).with_classical_controls("k"), cirq.measure(a, key="k")), repetitions=3))
    with pytest.raises(errors.UnsupportedOperationError, match="previous iteration"):
        compile_circuit(bad)


def test_condition_on_key_from_before_the_loop_does_not_shift():
    a, b = cirq.LineQubit.range(2)
    body = cirq.FrozenCircuit(cirq.X(b).with_classical_controls("k"), cirq.measure(b, key="j"))
    circuit = cirq.Circuit(cirq.X(a), cirq.measure(a, key="k"), cirq.CircuitOperation(body, repetitions=3))
    p = assert_same_as_cirq(circuit)
    assert p.conditions[0].refs.tolist() == [[0, 0]]


def test_repeat_until_is_rejected():
    a = cirq.LineQubit(0)
    op = cirq.CircuitOperation(cirq.FrozenCircuit(cirq.H(a), cirq.measure(a, key="k")),
                               repeat_until=cirq.KeyCondition(cirq.MeasurementKey("k")),
                               use_repetition_ids=False)
    with pytest.raises(errors.UnsupportedOperationError, match="repeat_until"):
        compile_circuit(cirq.Circuit(cirq.H(a), op))


# ---------------------------------------------------------------------------------------------
# Errors


class _Opaque(cirq.Gate):
    def _num_qubits_(self):
        return 1

    def __repr__(self):
        return "_Opaque()"


@pytest.mark.parametrize("bad, error, what", [
    (cirq.T, errors.NonCliffordError, "Clifford"),
    (cirq.X**0.25, errors.NonCliffordError, "Clifford"),
    (_Opaque(), errors.UnsupportedOperationError, "decompose"),
])
def test_bad_ops_raise_named_errors_with_moment(bad, error, what):
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.H(a), cirq.CX(a, b), cirq.Moment(bad.on(b)))
    with pytest.raises(error, match=f"(?s)moment 2.*{what}|{what}.*moment 2") as info:
        compile_circuit(circuit)
    assert repr(bad.on(b)) in str(info.value)


def test_errors_inside_subcircuits_name_both_moments():
    a = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.H(a), cirq.CircuitOperation(cirq.FrozenCircuit(cirq.H(a), cirq.T(a)),
                                                            repetitions=3))
    with pytest.raises(errors.NonCliffordError, match=r"moment 1 \(subcircuit moment 1\)"):
        compile_circuit(circuit)


# ---------------------------------------------------------------------------------------------
# Parameters and templates


KIND_ARR = np.array([int(op.kind) for op in opcodes.OPCODES])


def test_template_resolves_without_rewalking(monkeypatch):
    a, b = cirq.LineQubit.range(2)
    t, s, pr = sympy.symbols("t s pr")
    circuit = cirq.Circuit(cirq.H(a), cirq.X(a) ** t, cirq.CZ(a, b) ** s, cirq.ISWAP(a, b) ** (2 * s),
                           cirq.X.with_probability(pr).on(b), cirq.H(b))
    template = compile_template(circuit)
    assert template.is_parametrized and len(template.slots) == 4
    base = template.program.instructions
    slot_rows = np.zeros(len(base), dtype=bool)
    slot_rows[template._row_index] = True
    calls = []
    monkeypatch.setattr(walker_module.Walker, "run", lambda *args: calls.append(1))
    for tv in (0, 0.5, 1, 1.5):
        for sv, pv in ((0, 0.125), (1, 0.25)):
            r = {"t": tv, "s": sv, "pr": pv}
            p = template.resolve(r)
            ins = p.instructions
            assert ins.shape == base.shape  # resolution never moves an instruction
            np.testing.assert_array_equal(ins[~slot_rows], base[~slot_rows])
            np.testing.assert_array_equal(ins[:, STEP], base[:, STEP])
            resolved = cirq.resolve_parameters(circuit, r)
            unitary_part = cirq.Circuit(op for op in resolved.all_operations() if cirq.has_unitary(op))
            q = dataclasses.replace(p, instructions=ins[KIND_ARR[ins[:, OP]] == 0])
            assert_equal_up_to_phase(program_unitary(q), unitary_part.unitary(qubit_order=[a, b]))
            (noise_row,) = [row for row in ins if KIND[row[OP]] == opcodes.Kind.NOISE]
            np.testing.assert_allclose(p.channels[noise_row[AUX]].probs, [pv])
            assert_steps_disjoint(p)
    assert calls == []
    # compile_circuit with a resolver goes through the same (cached) template.
    p = compile_circuit(circuit, resolver={"t": 1, "s": 1, "pr": 0.5})
    assert calls == [] and p.num_instructions == len(base)


def test_template_follows_subcircuit_resolvers():
    a = cirq.LineQubit(0)
    t, u = sympy.symbols("t u")
    body = cirq.FrozenCircuit(cirq.X(a) ** t, cirq.measure(a, key="k"))
    circuit = cirq.Circuit(cirq.CircuitOperation(body, repetitions=2, param_resolver={t: u}))
    template = compile_template(circuit)
    for value in (0, 1):
        p = template.resolve({"u": value})
        assert key_values(p, execute(p))["k"].ravel().tolist() == [value, 0]
        assert_same_as_cirq(cirq.resolve_parameters(circuit, {"u": value}))


def test_template_non_clifford_value_names_op_and_moment():
    a = cirq.LineQubit(0)
    t = sympy.Symbol("t")
    circuit = cirq.Circuit(cirq.H(a), cirq.H(a), cirq.Z(a) ** t)
    template = compile_template(circuit)
    template.resolve({"t": 0.5})
    with pytest.raises(errors.NonCliffordError, match="moment 2") as info:
        template.resolve({"t": 0.25})
    assert "cirq.Z**sympy.Symbol('t')" in str(info.value)
    with pytest.raises(errors.NonCliffordError, match="moment 2"):
        compile_circuit(circuit, resolver={"t": 0.125})
    with pytest.raises(errors.UnsupportedOperationError, match="unresolved"):
        compile_circuit(circuit)


def test_parametrized_repetitions_fall_back_to_a_resolved_walk():
    a = cirq.LineQubit(0)
    n = sympy.Symbol("n")
    circuit = cirq.Circuit(cirq.CircuitOperation(cirq.FrozenCircuit(cirq.X(a), cirq.measure(a, key="k")),
                                                 repetitions=n))
    assert compile_circuit(circuit, resolver={"n": 4}).num_records == 4
    assert compile_circuit(circuit, resolver={"n": 7}).num_records == 7


def test_sweep_pauli_and_feedback_pauli():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(
        cirq.Moment(stimcirq.SweepPauli(stim_sweep_bit_index=0, cirq_sweep_symbol="sw", pauli=cirq.X).on(a)),
        cirq.Moment(cirq.measure(a, key="m")),
        cirq.Moment(stimcirq.FeedbackPauli(relative_measurement_index=-1, pauli=cirq.X).on(b)),
        cirq.Moment(cirq.measure(b, key="n")),
    )
    for value in (0, 1, True, False):
        p = compile_circuit(circuit, resolver={"sw": value})
        vals = key_values(p, execute(p))
        assert vals["m"][0, 0] == int(bool(value)) == vals["n"][0, 0]
    assert p.conditions[0].refs.tolist() == [[0, 0]]
    with pytest.raises(errors.MeasurementKeyError):
        compile_circuit(cirq.Circuit(stimcirq.FeedbackPauli(relative_measurement_index=-1, pauli=cirq.X).on(b)))
    with pytest.raises(errors.MeasurementKeyError, match="moment 1"):
        compile_circuit(cirq.Circuit(cirq.Moment(cirq.measure(a, key="m")), cirq.Moment(
            stimcirq.FeedbackPauli(relative_measurement_index=-2, pauli=cirq.X).on(b))))


# ---------------------------------------------------------------------------------------------
# stimcirq circuits


def _stim_flat(stim_circuit):
    """Per stim instruction application: (name, targets, args) on the flattened circuit."""
    out = []
    for inst in stim_circuit.flattened():
        name = inst.name
        if name in ("TICK", "QUBIT_COORDS", "SHIFT_COORDS", "DETECTOR", "OBSERVABLE_INCLUDE"):
            continue
        targets = [t.value for t in inst.targets_copy()]
        arity = 2 if name in ("CX", "CZ", "DEPOLARIZE2", "SWAP") else 1
        for i in range(0, len(targets), arity):
            out.append((name, tuple(targets[i:i + arity]), tuple(inst.gate_args_copy())))
    return out


def _ours_flat(p, stim_index):
    out = []
    rows = _unrolled(p).instructions
    for r in rows:
        name = NAME[r[OP]]
        if name in ("I",):
            continue
        targets = (stim_index[r[A]],) if r[B] < 0 else (stim_index[r[A]], stim_index[r[B]])
        if KIND[r[OP]] == opcodes.Kind.NOISE:
            ch = p.channels[r[AUX]]
            args = (float(ch.probs.sum()),)
        else:
            args = ()
        out.append((name, targets, args))
    return out


def _per_qubit(seq):
    by_q = {}
    for name, targets, args in seq:
        for t in targets:
            by_q.setdefault(t, []).append((name, targets, tuple(round(a, 12) for a in args)))
    return by_q


def _stim_detector_records(stim_circuit):
    recs, n = [], 0
    for inst in stim_circuit.flattened():
        if inst.name in ("M", "MR", "MX", "MY", "MRX", "MRY"):
            n += len(inst.targets_copy())
        elif inst.name == "DETECTOR":
            recs.append(sorted(n + t.value for t in inst.targets_copy()))
    return recs


@pytest.mark.parametrize("d", [3, 5, 9])
def test_stimcirq_surface_code(d):
    stim_circuit = stim.Circuit.generated(
        "surface_code:rotated_memory_z", distance=d, rounds=d, after_clifford_depolarization=1e-3,
        before_measure_flip_probability=1e-3, after_reset_flip_probability=1e-3,
        before_round_data_depolarization=1e-3)
    circuit = stimcirq.stim_circuit_to_cirq_circuit(stim_circuit)
    p = compile_circuit(circuit)
    assert p.num_records == stim_circuit.num_measurements
    assert len(p.detectors) == stim_circuit.num_detectors
    assert [sorted(a.records.tolist()) for a in p.detectors] == _stim_detector_records(stim_circuit)
    coords = stim_circuit.get_detector_coordinates()
    for i, det in enumerate(p.detectors):
        np.testing.assert_allclose(det.coords, coords[i])
    assert len(p.observables) == stim_circuit.num_observables == 1
    assert p.num_instructions < len(_stim_flat(stim_circuit))  # the loop is kept
    assert len(p.loops) == 1 and p.loops[0].count == d - 1
    assert_steps_disjoint(p)
    # The op sequence is the stim circuit's: same ops per qubit in the same order, and the
    # records are written by the same qubits in the same order.
    qubit_coords = stim_circuit.get_final_qubit_coordinates()
    to_stim = {cirq.GridQubit(int(c[0]), int(c[1])): i for i, c in qubit_coords.items()}
    stim_index = [to_stim[q] for q in p.qubits]
    stim_seq = _stim_flat(stim_circuit)
    ours = _ours_flat(p, stim_index)
    assert _per_qubit(ours) == _per_qubit(stim_seq)
    ours_meas = [t for n, t, _ in ours if n in ("M", "MR")]
    stim_meas = [t for n, t, _ in stim_seq if n in ("M", "MR")]
    assert ours_meas == stim_meas


def test_stimcirq_annotations_with_parity_keys_and_errors():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(
        cirq.Moment(cirq.measure(a, key="x")), cirq.Moment(cirq.measure(b, key="y")),
        cirq.Moment(stimcirq.ShiftCoordsAnnotation([1, 2])),
        cirq.Moment(stimcirq.DetAnnotation(parity_keys=["x"], relative_keys=[-1], coordinate_metadata=[0, 0, 5])),
        cirq.Moment(stimcirq.CumulativeObservableAnnotation(parity_keys=["y"], observable_index=3)),
    )
    p = compile_circuit(circuit)
    assert p.detectors[0].records.tolist() == [0, 1]
    assert p.detectors[0].coords == (1.0, 2.0, 5.0)
    # Stim's numbering: observables 0..3, the three never included are parities of nothing
    assert [o.index for o in p.observables] == [0, 1, 2, 3]
    assert [o.records.tolist() for o in p.observables] == [[], [], [], [1]]
    with pytest.raises(errors.MeasurementKeyError, match="moment 1"):
        compile_circuit(cirq.Circuit(cirq.Moment(cirq.measure(a, key="x")),
                                     cirq.Moment(stimcirq.DetAnnotation(relative_keys=[-2]))))
    with pytest.raises(errors.MeasurementKeyError):
        compile_circuit(cirq.Circuit(cirq.measure(a, key="x"), stimcirq.DetAnnotation(parity_keys=["q"])))


# ---------------------------------------------------------------------------------------------
# Cache


def test_cache_hit_is_fast_and_detects_changes():
    qs = cirq.LineQubit.range(20)
    rng = np.random.default_rng(1)
    circuit = cirq.Circuit(cirq.Moment(cirq.CX(qs[i], qs[i + 1]) for i in range(int(rng.integers(0, 2)), 19, 2))
                           for _ in range(300))
    circuit.append(cirq.measure(*qs, key="m"))
    clear_cache()
    t0 = time.perf_counter()
    first = compile_circuit(circuit)
    cold = time.perf_counter() - t0
    best = min(_timed(lambda: compile_circuit(circuit)) for _ in range(5))
    assert best < 1e-3, best
    assert compile_circuit(circuit) is first
    assert cold > best
    circuit.append(cirq.X(qs[0]))
    changed = compile_circuit(circuit)
    assert changed is not first and changed.num_instructions == first.num_instructions + 1
    assert compile_circuit(circuit, qubit_order=qs[::-1]) is not changed


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# More scoping, annotations in loops, noise-model trees


def test_conditions_inside_loops_with_repetition_ids():
    a, b, c = cirq.LineQubit.range(3)
    body = cirq.FrozenCircuit(cirq.X(a), cirq.measure(a, key="k"),
                              cirq.X(b).with_classical_controls("k"), cirq.measure(b, key="j"),
                              cirq.X(c).with_classical_controls("top"))
    circuit = cirq.Circuit(cirq.X(c), cirq.measure(c, key="top"),
                           cirq.CircuitOperation(body, repetitions=3, use_repetition_ids=True),
                           cirq.X(c).with_classical_controls("1:k"), cirq.measure(c, key="end"))
    p = assert_same_as_cirq(circuit)
    assert {"0:k", "1:j", "2:k", "top", "end"} <= {k.key for k in p.keys}
    # "k" inside the body binds to this iteration's "<id>:k" (refs shift with the loop), "top"
    # to the key before the loop (no shift), "1:k" after the loop to iteration 1.
    refs = sorted(c.refs.tolist() for c in p.conditions)
    assert refs == [[[0, 0]], [[1, 1]], [[3, 0]]]


def test_detector_in_loop_reading_a_key_remeasured_one_stride_later():
    a, b = cirq.LineQubit.range(2)
    body = cirq.FrozenCircuit(
        cirq.Moment(stimcirq.DetAnnotation(parity_keys=["k"], relative_keys=[-1])),
        cirq.Moment(cirq.measure(b, key="j")),
        cirq.Moment(cirq.measure(a, key="k")))
    circuit = cirq.Circuit(cirq.Moment(cirq.measure(b, key="j")), cirq.Moment(cirq.measure(a, key="k")),
                           cirq.CircuitOperation(body, repetitions=3))
    p = compile_circuit(circuit)
    assert [d.records.tolist() for d in p.detectors] == [[1, 1], [3, 3], [5, 5]]
    unshifted = cirq.Circuit(cirq.Moment(cirq.measure(a, key="k")), cirq.CircuitOperation(
        cirq.FrozenCircuit(cirq.Moment(stimcirq.DetAnnotation(parity_keys=["k"])),
                           cirq.Moment(cirq.measure(b, key="j"))), repetitions=3))
    with pytest.raises(errors.UnsupportedOperationError, match="annotations in a loop"):
        compile_circuit(unshifted)


def test_classically_controlled_subcircuit():
    a, b = cirq.LineQubit.range(2)
    sub = cirq.CircuitOperation(cirq.FrozenCircuit(cirq.X(b), cirq.H(b), cirq.Z(b), cirq.H(b)))
    circuit = cirq.Circuit(cirq.X(a), cirq.measure(a, key="m"), sub.with_classical_controls("m"),
                           cirq.measure(b, key="b"))
    p = assert_same_as_cirq(circuit)
    assert (p.instructions[:, COND] >= 0).sum() == 4
    looped = cirq.Circuit(cirq.measure(a, key="m"), sub.repeat(2).with_classical_controls("m"))
    with pytest.raises(errors.UnsupportedOperationError, match="moment 1"):
        compile_circuit(looped)


class _ListNoise(cirq.NoiseModel):
    """Returns a flat list of operations per moment (gate then its noise on the same qubit)."""

    def noisy_moment(self, moment, system_qubits):
        out = []
        for op in moment:
            out.append(op)
            out.extend(cirq.bit_flip(0.01).on(q) for q in op.qubits)
        return out


def test_noise_model_op_trees_are_split_into_disjoint_groups():
    a, b, c = cirq.LineQubit.range(3)
    circuit = cirq.Circuit(cirq.Moment(cirq.H(a), cirq.CX(b, c)), cirq.Moment(cirq.measure(a, b, c, key="m")))
    p = compile_circuit(circuit, noise=_ListNoise())
    assert_steps_disjoint(p)
    names = [NAME[r[OP]] for r in p.instructions]
    assert names.count("X_ERROR") == 6
    assert names.index("X_ERROR") > names.index("H")  # noise after its gate
    assert names[-1] == "X_ERROR" and names.count("M") == 3


def test_repeat_until_error_names_the_moment():
    a = cirq.LineQubit(0)
    op = cirq.CircuitOperation(cirq.FrozenCircuit(cirq.H(a), cirq.measure(a, key="k")),
                               repeat_until=cirq.KeyCondition(cirq.MeasurementKey("k")),
                               use_repetition_ids=False)
    with pytest.raises(errors.UnsupportedOperationError, match="moment 1"):
        compile_circuit(cirq.Circuit(cirq.H(a), op))


def test_errors_with_a_noise_model_name_the_users_moment():
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.Moment(cirq.H(a)), cirq.Moment(cirq.CX(a, b)), cirq.Moment(cirq.T(b)))
    with pytest.raises(errors.NonCliffordError, match="moment 2"):
        compile_circuit(circuit, noise=cirq.depolarize(0.01))
    with pytest.raises(errors.NonCliffordError, match="moment 2"):
        compile_circuit(circuit, noise=_ListNoise())
