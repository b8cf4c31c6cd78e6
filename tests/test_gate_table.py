"""Tests of the gate table: opcodes against Stim, and every Cirq gate family against its unitary."""

import itertools
import time

import cirq
import numpy as np
import pytest

from cirq_quasarq.core import opcodes
from cirq_quasarq.compiler import registry
from cirq_quasarq.compiler.cliffords import clifford_opcodes, single_qubit_opcode
from cirq_quasarq.compiler.registry import lower_gate
from cirq_quasarq.core import paulis
from cirq_quasarq.errors import NonCliffordError

UNITARY_NAMES = [op.name for op in opcodes.OPCODES if op.kind == opcodes.Kind.UNITARY]
ONE_QUBIT_NAMES = [n for n in UNITARY_NAMES if opcodes.BY_NAME[n].arity == 1]
TWO_QUBIT_NAMES = [n for n in UNITARY_NAMES if opcodes.BY_NAME[n].arity == 2]


def reverse_qubits(u, n):
    """Big-endian <-> little-endian for a 2^n x 2^n matrix."""
    order = list(range(n - 1, -1, -1))
    return u.reshape((2,) * (2 * n)).transpose(order + [n + i for i in order]).reshape(u.shape)


def big_endian_unitary_of(name):
    return reverse_qubits(opcodes.unitary_of(name), opcodes.BY_NAME[name].arity)


def ops_unitary(ops, n):
    """Big-endian product of an opcode sequence, built with Cirq from the table's unitaries."""
    qubits = cirq.LineQubit.range(n)
    circuit = cirq.Circuit(cirq.I.on_each(*qubits))
    for name, targets in ops:
        assert opcodes.BY_NAME[name].kind == opcodes.Kind.UNITARY, name
        assert len(targets) == opcodes.BY_NAME[name].arity, (name, targets)
        assert all(0 <= t < n for t in targets) and len(set(targets)) == len(targets)
        circuit.append(cirq.MatrixGate(big_endian_unitary_of(name)).on(*[qubits[t] for t in targets]))
    return cirq.unitary(circuit)


def assert_lowers(gate, context=""):
    n = cirq.num_qubits(gate)
    ops = lower_gate(gate, n)
    assert ops is not None, f"{gate!r} not lowered {context}"
    expected = cirq.unitary(gate)
    assert cirq.allclose_up_to_global_phase(ops_unitary(ops, n), expected, atol=1e-7), (
        f"{gate!r} lowered to {ops} {context}")
    return ops


def is_clifford_unitary(u):
    """Independent oracle: Stim accepts exactly the Clifford unitaries."""
    stim = pytest.importorskip("stim")
    try:
        stim.Tableau.from_unitary_matrix(u, endian="big")
        return True
    except ValueError:
        return False


def assert_lowers_or_raises(gate, context=""):
    if is_clifford_unitary(cirq.unitary(gate)):
        return assert_lowers(gate, context)
    with pytest.raises(NonCliffordError):
        lower_gate(gate, cirq.num_qubits(gate))
    return None


# ---------------------------------------------------------------------------------------------
# The opcode table against Stim


def _stim_string(image):
    return image.replace("I", "_")


@pytest.mark.parametrize("name", UNITARY_NAMES)
def test_opcode_unitary_matches_stim(name):
    stim = pytest.importorskip("stim")
    expected = stim.Tableau.from_named_gate(name)
    assert stim.Tableau.from_unitary_matrix(opcodes.unitary_of(name), endian="little") == expected


@pytest.mark.parametrize("name", UNITARY_NAMES)
def test_opcode_images_match_stim(name):
    stim = pytest.importorskip("stim")
    op = opcodes.BY_NAME[name]
    forward = stim.Tableau.from_named_gate(name)
    inverse = forward.inverse()
    expected_forward, expected_inverse = [], []
    for k in range(op.arity):
        expected_forward += [str(forward.x_output(k)), str(forward.z_output(k))]
        expected_inverse += [str(inverse.x_output(k)), str(inverse.z_output(k))]
    assert [_stim_string(s) for s in op.images] == expected_forward
    assert [_stim_string(s) for s in opcodes.INVERSE_IMAGES[op.code]] == expected_inverse


@pytest.mark.parametrize("name", UNITARY_NAMES)
def test_frame_maps_match_stim(name):
    stim = pytest.importorskip("stim")
    op = opcodes.BY_NAME[name]
    forward = stim.Tableau.from_named_gate(name)
    expected = np.zeros((4, 4), dtype=np.uint8)
    for k in range(op.arity):
        for g, image in enumerate((forward.x_output(k), forward.z_output(k))):
            xs, zs = image.to_numpy()
            for q in range(op.arity):
                expected[2 * q, 2 * k + g] = xs[q]
                expected[2 * q + 1, 2 * k + g] = zs[q]
    if op.arity == 1:
        expected[2, 2] = expected[3, 3] = 1
    np.testing.assert_array_equal(opcodes.FRAME_MAPS[op.code], expected)


@pytest.mark.parametrize("name", UNITARY_NAMES)
def test_conjugation_tables_match_unitaries(name):
    arity = opcodes.BY_NAME[name].arity
    u = opcodes.unitary_of(name)
    signs, letters = opcodes.CONJUGATION[opcodes.CODE[name]]
    for index in range(4**arity):
        p = [(index >> (2 * q)) & 3 for q in range(arity)]
        got = (-1) ** int(signs[index]) * paulis.pauli_matrix(list(letters[index]), endian="little")
        np.testing.assert_allclose(u @ paulis.pauli_matrix(p, endian="little") @ u.conj().T, got, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Matchers


@pytest.mark.parametrize("name", ONE_QUBIT_NAMES)
def test_single_qubit_opcode_finds_each_of_24(name):
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    phase = np.exp(2j * np.pi * rng.random())
    assert single_qubit_opcode(phase * opcodes.unitary_of(name)) == name
    assert clifford_opcodes(phase * opcodes.unitary_of(name), 1) == (
        () if name == "I" else ((name, (0,)),))


def test_single_qubit_opcode_rejects_non_clifford():
    with pytest.raises(NonCliffordError):
        single_qubit_opcode(cirq.unitary(cirq.T))
    assert clifford_opcodes(cirq.unitary(cirq.T), 1) is None
    assert clifford_opcodes(cirq.unitary(cirq.CZ**0.5), 2) is None
    assert clifford_opcodes(np.ones((4, 4)), 2) is None  # not unitary


@pytest.mark.parametrize("name", TWO_QUBIT_NAMES)
def test_named_two_qubit_unitary_is_one_opcode(name):
    u_little = opcodes.unitary_of(name)
    assert clifford_opcodes(u_little, 2, endian="little") == ((name, (0, 1)),)
    assert clifford_opcodes(reverse_qubits(u_little, 2), 2) == ((name, (0, 1)),)
    # The same gate on the qubits in the other order: still one opcode (e.g. CX -> XCZ).
    reversed_ops = clifford_opcodes(u_little, 2, endian="big")
    assert len(reversed_ops) == 1
    assert cirq.allclose_up_to_global_phase(ops_unitary(reversed_ops, 2), u_little, atol=1e-9)
    gate = cirq.MatrixGate(1j * big_endian_unitary_of(name))
    assert lower_gate(gate, 2) == ((name, (0, 1)),)


# ---------------------------------------------------------------------------------------------
# Gate families

EXPONENTS = [x / 2 for x in range(-6, 8)]  # -3, -2.5, ..., 3.5
SHIFTS = [0, 0.25, -0.5]
HALF_TURN_FAMILIES = [cirq.XPowGate, cirq.YPowGate, cirq.ZPowGate, cirq.XXPowGate, cirq.YYPowGate,
                      cirq.ZZPowGate]
WHOLE_TURN_FAMILIES = [cirq.HPowGate, cirq.CXPowGate, cirq.CZPowGate, cirq.SwapPowGate,
                       cirq.ISwapPowGate]


@pytest.mark.parametrize("family", HALF_TURN_FAMILIES + WHOLE_TURN_FAMILIES)
def test_eigen_families_at_every_clifford_exponent(family):
    step = 0.5 if family in HALF_TURN_FAMILIES else 1
    for exponent, shift in itertools.product(EXPONENTS, SHIFTS):
        gate = family(exponent=exponent, global_shift=shift)
        if (exponent / step) % 1 == 0:
            ops = assert_lowers(gate)
            if cirq.num_qubits(gate) == 1:
                assert len(ops) <= 1
        else:
            with pytest.raises(NonCliffordError, match="exponent"):
                lower_gate(gate, cirq.num_qubits(gate))


@pytest.mark.parametrize("family", HALF_TURN_FAMILIES + WHOLE_TURN_FAMILIES)
@pytest.mark.parametrize("exponent", [0.25, -0.75, 0.1, 1.3333])
def test_eigen_families_non_clifford_raise(family, exponent):
    gate = family(exponent=exponent)
    with pytest.raises(NonCliffordError, match="not a Clifford gate") as info:
        lower_gate(gate, cirq.num_qubits(gate))
    assert repr(gate) in str(info.value)


@pytest.mark.parametrize("rotation", [cirq.Rx, cirq.Ry, cirq.Rz])
def test_rotations(rotation):
    for k in range(-8, 9):
        assert_lowers(rotation(rads=k * np.pi / 2))
    with pytest.raises(NonCliffordError):
        lower_gate(rotation(rads=0.3), 1)


def test_identity_like_gates():
    stimcirq = pytest.importorskip("stimcirq")
    for gate in [cirq.I, cirq.IdentityGate(3), cirq.IdentityGate(7), cirq.GlobalPhaseGate(1j),
                 cirq.WaitGate(cirq.Duration(nanos=5), num_qubits=2), cirq.Z**0, cirq.Z**2,
                 cirq.X**-4, cirq.CZ**2, cirq.ISWAP**4, cirq.SWAP**-2, cirq.CCZ**2, cirq.CCX**-2,
                 cirq.XPowGate(exponent=2, global_shift=0.25), cirq.MatrixGate(np.eye(4) * 1j),
                 cirq.DensePauliString("III"), stimcirq.IIGate(),
                 cirq.PauliStringPhasorGate(cirq.DensePauliString("XZ"), exponent_neg=1,
                                            exponent_pos=1)]:
        assert lower_gate(gate, cirq.num_qubits(gate)) == (), gate


def test_fast_table_entries():
    for gate, lowering in registry.EXACT.items():
        ops = lowering.ops
        assert lower_gate(gate, cirq.num_qubits(gate)) == ops
        assert_lowers(gate)
        # The slow path (every step after the exact table) must agree with the fast table.
        assert registry._lower_after_exact(gate, cirq.num_qubits(gate)).ops == ops, gate


QUARTERS = [x / 4 for x in range(-4, 5)]


def test_phased_x_pow_gate():
    for phase, exponent in itertools.product(QUARTERS, EXPONENTS):
        assert_lowers_or_raises(cirq.PhasedXPowGate(phase_exponent=phase, exponent=exponent))
    assert lower_gate(cirq.PhasedXPowGate(phase_exponent=0.25), 1) == (("H_XY", (0,)),)


def test_phased_xz_gate():
    for x, z, a in itertools.product(QUARTERS, QUARTERS, QUARTERS):
        gate = cirq.PhasedXZGate(x_exponent=x, z_exponent=z, axis_phase_exponent=a)
        ops = assert_lowers_or_raises(gate)
        if ops is not None:
            assert len(ops) <= 1


def test_fsim_gates():
    angles = [k * np.pi / 4 for k in range(-4, 5)]
    for theta, phi in itertools.product(angles, angles):
        assert_lowers_or_raises(cirq.FSimGate(theta=theta, phi=phi))
    seed = 1234
    rng = np.random.default_rng(seed)
    for _ in range(200):
        theta, zeta, chi, gamma, phi = rng.integers(-4, 5, size=5) * np.pi / 4
        gate = cirq.PhasedFSimGate(theta=theta, zeta=zeta, chi=chi, gamma=gamma, phi=phi)
        assert_lowers_or_raises(gate, f"(seed {seed})")


def test_phased_iswap_gates():
    for phase, exponent in itertools.product(QUARTERS, EXPONENTS):
        assert_lowers_or_raises(cirq.PhasedISwapPowGate(phase_exponent=phase, exponent=exponent))


@pytest.mark.parametrize("gate", [cirq.T, cirq.Z**0.25, cirq.CZ**0.5, cirq.CNOT**0.5, cirq.H**0.5,
                                  cirq.SWAP**0.5, cirq.ISWAP**0.5, cirq.XX**0.25, cirq.CCZ,
                                  cirq.CCX, cirq.CSWAP, cirq.CCZ**0.5, cirq.FSimGate(0.1, 0),
                                  cirq.PhasedXZGate(x_exponent=0.5, z_exponent=0.1,
                                                    axis_phase_exponent=0),
                                  cirq.ControlledGate(cirq.S), cirq.MatrixGate(cirq.unitary(cirq.T)),
                                  cirq.PauliStringPhasorGate(cirq.DensePauliString("XYZZ"),
                                                             exponent_neg=0.25)])
def test_non_clifford_gates_raise_naming_the_gate(gate):
    for _ in range(2):  # the second call comes from the cache
        with pytest.raises(NonCliffordError) as info:
            lower_gate(gate, cirq.num_qubits(gate))
        assert repr(gate) in str(info.value)
        assert (type(gate), gate, repr(gate)) in registry._CACHE


def test_cached_verdict_names_the_gate_asked_about():
    # cirq.CZ**-1.5 == cirq.CZ**0.5, so they share a cache entry but print differently.
    for gate in (cirq.CZ**-1.5, cirq.CZ**0.5):
        with pytest.raises(NonCliffordError) as info:
            lower_gate(gate, 2)
        assert str(info.value).startswith(repr(gate) + " is not a Clifford gate")


class _NoUnitaryGate(cirq.Gate):
    def _num_qubits_(self):
        return 1


class _TwoByTwoUnknown(cirq.Gate):
    """A user gate with only a unitary: found through the general path."""

    def _num_qubits_(self):
        return 2

    def _unitary_(self):
        return cirq.unitary(cirq.CZ) @ np.kron(cirq.unitary(cirq.H), np.eye(2))


def test_unknown_and_non_unitary_gates_return_none():
    for gate in [cirq.MeasurementGate(1, "m"), cirq.ResetChannel(), cirq.depolarize(0.1),
                 cirq.amplitude_damp(0.1), _NoUnitaryGate(),
                 cirq.ControlledGate(cirq.CCZ),  # four qubits: left to decomposition
                 cirq.MatrixGate(np.eye(3), qid_shape=(3,))]:
        assert lower_gate(gate, cirq.num_qubits(gate)) is None, gate


def test_unknown_gate_with_unitary():
    assert_lowers(_TwoByTwoUnknown())
    assert_lowers(cirq.ControlledGate(cirq.Y))
    assert_lowers(cirq.PauliInteractionGate(cirq.X, False, cirq.Y, True))


def test_all_24_single_qubit_clifford_gates():
    seen = set()
    for gate in cirq.SingleQubitCliffordGate.all_single_qubit_cliffords:
        ops = assert_lowers(gate)
        assert len(ops) <= 1
        seen.add(ops[0][0] if ops else "I")
    assert seen == set(ONE_QUBIT_NAMES)


def _random_clifford_ops(rng, qubits, depth):
    ops = []
    for _ in range(depth):
        kind = rng.integers(4)
        if kind == 0 or len(qubits) == 1:
            gate = [cirq.H, cirq.S, cirq.X, cirq.Y, cirq.Z, cirq.S**-1][rng.integers(6)]
            ops.append(gate(qubits[rng.integers(len(qubits))]))
        else:
            a, b = rng.choice(len(qubits), size=2, replace=False)
            gate = [cirq.CNOT, cirq.CZ, cirq.SWAP][kind - 1]
            ops.append(gate(qubits[a], qubits[b]))
    return ops


@pytest.mark.parametrize("num_qubits", [1, 2, 3, 5])
def test_random_clifford_gates(num_qubits):
    seed = 100 + num_qubits
    rng = np.random.default_rng(seed)
    qubits = cirq.LineQubit.range(num_qubits)
    for trial in range(60 if num_qubits < 5 else 15):
        ops = _random_clifford_ops(rng, qubits, depth=int(rng.integers(0, 25)))
        gate = cirq.CliffordGate.from_op_list(ops, qubits)
        lowered = assert_lowers(gate, f"(seed {seed}, trial {trial})")
        if num_qubits == 1:
            assert len(lowered) <= 1


@pytest.mark.parametrize("num_qubits", [1, 2, 3])
def test_random_clifford_matrix_gates(num_qubits):
    stim = pytest.importorskip("stim")
    seed = 200 + num_qubits
    rng = np.random.default_rng(seed)
    for trial in range(60):
        tableau = stim.Tableau.random(num_qubits)
        phase = np.exp(2j * np.pi * rng.random())
        gate = cirq.MatrixGate(phase * tableau.to_unitary_matrix(endian="big"))
        ops = assert_lowers(gate, f"(seed {seed}, trial {trial})")
        if num_qubits == 1:
            assert len(ops) <= 1


def test_random_non_clifford_matrix_gates_raise():
    seed = 300
    for n in (1, 2, 3):
        u = cirq.testing.random_unitary(2**n, random_state=seed)
        with pytest.raises(NonCliffordError):
            lower_gate(cirq.MatrixGate(u), n)


def test_dense_pauli_strings():
    seed = 400
    rng = np.random.default_rng(seed)
    for _ in range(30):
        n = int(rng.integers(1, 6))
        letters = "".join("IXYZ"[i] for i in rng.integers(4, size=n))
        coefficient = [1, -1, 1j, -1j][rng.integers(4)]
        gate = cirq.DensePauliString(letters, coefficient=coefficient)
        assert_lowers(gate, f"(seed {seed})")
    assert lower_gate(cirq.DensePauliString("XZ", coefficient=2), 2) is None
    assert assert_lowers(cirq.PauliString({cirq.q(0): cirq.X, cirq.q(2): cirq.Y}).gate)


def test_pauli_string_phasor_gates():
    seed = 500
    rng = np.random.default_rng(seed)
    for _ in range(80):
        n = int(rng.integers(1, 6))
        letters = "".join("XYZ"[i] for i in rng.integers(3, size=n))
        neg, pos = rng.integers(-4, 5, size=2) / 2
        sign = [1, -1][rng.integers(2)]
        gate = cirq.PauliStringPhasorGate(cirq.DensePauliString(letters, coefficient=sign),
                                          exponent_neg=neg, exponent_pos=pos)
        assert_lowers(gate, f"(seed {seed})")
    assert lower_gate(cirq.PauliStringPhasorGate(cirq.DensePauliString("X"), exponent_neg=0.5),
                      1) in ((("SQRT_X", (0,)),), (("SQRT_X_DAG", (0,)),))


def test_qubit_permutation_gates():
    seed = 600
    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = int(rng.integers(1, 6))
        ops = assert_lowers(cirq.QubitPermutationGate(list(rng.permutation(n))), f"(seed {seed})")
        assert all(name == "SWAP" for name, _ in ops)


def test_stimcirq_gates():
    stimcirq = pytest.importorskip("stimcirq")
    for gate, name in [(stimcirq.CXSwapGate(inverted=False), "CXSWAP"),
                       (stimcirq.CXSwapGate(inverted=True), "SWAPCX"),
                       (stimcirq.CZSwapGate(), "CZSWAP")]:
        assert lower_gate(gate, 2) == ((name, (0, 1)),)
        assert_lowers(gate)
        # The unitary path must agree with the explicit entry.
        assert clifford_opcodes(cirq.unitary(gate), 2) == ((name, (0, 1)),)


def test_ops_unitary_helper_is_big_endian():
    # Guards the test helper itself: CX with control qubit 1 is cirq.CNOT(q1, q0).
    q = cirq.LineQubit.range(2)
    expected = cirq.unitary(cirq.Circuit(cirq.CNOT(q[1], q[0])))
    np.testing.assert_allclose(ops_unitary((("CX", (1, 0)),), 2), expected, atol=1e-9)
    assert not np.allclose(ops_unitary((("CX", (0, 1)),), 2), expected)


def test_cached_lookup_is_fast():
    gates = [cirq.H, cirq.CNOT, cirq.S, cirq.X**0.5, cirq.PhasedXZGate(x_exponent=0.5,
             z_exponent=0.5, axis_phase_exponent=0.5)]
    for gate in gates:
        lower_gate(gate, cirq.num_qubits(gate))
    count = 20000
    start = time.perf_counter()
    sizes = [cirq.num_qubits(gate) for gate in gates]
    for _ in range(count):
        for gate, size in zip(gates, sizes):
            lower_gate(gate, size)
    per_lookup = (time.perf_counter() - start) / (count * len(gates))
    assert per_lookup < 5e-6, per_lookup
