"""The shapes of cirq.CliffordSimulator's own tests, through QuasarqSimulator (code written for
CliffordSimulator must run unchanged). State vectors are compared up to global phase: ours is
normalised so the first nonzero amplitude is real and positive."""

import random

import cirq
import numpy as np
import pytest
import sympy

from cirq_quasarq import QuasarqSimulator


def close(a, b):
    return cirq.allclose_up_to_global_phase(np.asarray(a), np.asarray(b), atol=1e-7)


def test_simulate_no_circuit(device):
    q0, q1 = cirq.LineQubit.range(2)
    result = QuasarqSimulator(device=device).simulate(cirq.Circuit(), qubit_order=[q0, q1])
    np.testing.assert_almost_equal(result.final_state.to_numpy(), np.array([1, 0, 0, 0]))
    assert len(result.measurements) == 0


def test_run_no_repetitions(device):
    q0 = cirq.LineQubit(0)
    result = QuasarqSimulator(device=device).run(cirq.Circuit(cirq.H(q0), cirq.measure(q0)), repetitions=0)
    assert sum(result.measurements["q(0)"]) == 0


def test_run_hadamard_and_correlations(device):
    q0, q1 = cirq.LineQubit.range(2)
    sim = QuasarqSimulator(device=device)
    result = sim.run(cirq.Circuit(cirq.H(q0), cirq.measure(q0)), repetitions=100)
    assert 20 < sum(result.measurements["q(0)"])[0] < 80
    circuit = cirq.Circuit(cirq.H(q0), cirq.CNOT(q0, q1), cirq.measure(q0, q1))
    for _ in range(10):
        bits = sim.run(circuit).measurements["q(0),q(1)"][0]
        assert bits[0] == bits[1]


def test_parameters_not_resolved(device):
    a = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.XPowGate(exponent=sympy.Symbol("a"))(a), cirq.measure(a))
    with pytest.raises(ValueError, match="symbols were not specified"):
        QuasarqSimulator(device=device).run_sweep(circuit, cirq.ParamResolver({}))
    with pytest.raises(ValueError, match="symbols were not specified"):
        QuasarqSimulator(device=device).simulate_sweep(circuit, cirq.ParamResolver({}))


def test_simulate_and_qubit_order_and_initial_state(device):
    q0, q1 = cirq.LineQubit.range(2)
    sim = QuasarqSimulator(device=device)
    result = sim.simulate(cirq.Circuit(cirq.H(q0), cirq.H(q1)), qubit_order=[q0, q1])
    np.testing.assert_almost_equal(result.final_state.to_numpy(), np.array([0.5, 0.5, 0.5, 0.5]))
    for b0 in (0, 1):
        for b1 in (0, 1):
            circuit = cirq.Circuit()
            if b0:
                circuit.append(cirq.X(q0))
            if b1:
                circuit.append(cirq.X(q1))
            circuit.append(cirq.measure(q0, q1))
            expected = np.zeros((2, 2))
            expected[b1][b0] = 1.0
            got = sim.simulate(circuit, qubit_order=[q1, q0]).final_state.to_numpy()
            np.testing.assert_almost_equal(got, expected.reshape(4))
            expected = np.zeros((2, 2))
            expected[b0][1 - b1] = 1.0
            got = sim.simulate(circuit, initial_state=1).final_state.to_numpy()
            np.testing.assert_almost_equal(got, expected.reshape(4))
            result = sim.run(circuit, repetitions=3)
            np.testing.assert_equal(result.measurements, {"q(0),q(1)": [[b0, b1]] * 3})


def test_simulate_moment_steps_and_sample():
    q0, q1 = cirq.LineQubit.range(2)
    sim = QuasarqSimulator(seed=2)
    circuit = cirq.Circuit(cirq.H(q0), cirq.H(q1), cirq.H(q0), cirq.H(q1))
    for i, step in enumerate(sim.simulate_moment_steps(circuit)):
        expected = np.array([0.5] * 4) if i == 0 else np.array([1, 0, 0, 0])
        np.testing.assert_almost_equal(step.state.to_numpy(), expected)
    circuit = cirq.Circuit(cirq.H(q0), cirq.CNOT(q0, q1))
    for i, step in enumerate(sim.simulate_moment_steps(circuit)):
        allowed = ([[1, 0], [0, 0]] if i == 0 else [[1, 1], [0, 0]])
        samples = step.sample([q0, q1], repetitions=10)
        assert all(list(s.astype(int)) in allowed for s in samples)
    q = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.H(q), cirq.measure(q), cirq.H(q))
    for i, step in enumerate(sim.simulate_moment_steps(circuit)):
        if i == 1:
            result = int(step.measurements["q(0)"][0])
            expected = np.zeros(2)
            expected[result] = 1
            np.testing.assert_almost_equal(step.state.to_numpy(), expected)
        if i == 2:
            expected = np.array([np.sqrt(0.5), np.sqrt(0.5) * (-1) ** result])
            np.testing.assert_almost_equal(step.state.to_numpy(), expected)


@pytest.mark.parametrize("seed", range(6))
def test_clifford_circuits_match_state_vector_simulator(device, seed):
    rnd = random.Random(seed)
    np.random.seed(seed)
    q0, q1 = cirq.LineQubit.range(2)

    def random_clifford_gate():
        matrix = np.eye(2)
        for _ in range(10):
            matrix = matrix @ cirq.unitary(np.random.choice((cirq.H, cirq.S)))
        return cirq.MatrixGate(matrix * np.exp(1j * np.random.uniform(0, 2 * np.pi)))

    circuit = cirq.Circuit()
    for _ in range(60):
        x = rnd.randrange(8)
        q = rnd.choice((q0, q1))
        circuit.append([cirq.X(q), cirq.Z(q), cirq.Y(q), cirq.S(q), cirq.H(q), cirq.CNOT(q0, q1),
                        cirq.CZ(q0, q1), random_clifford_gate()(q)][x])
    ours = QuasarqSimulator(device=device).simulate(circuit).final_state.state_vector()
    assert close(ours, cirq.Simulator().simulate(circuit).final_state_vector)


def test_non_clifford_circuit_raises_type_error_too(device):
    q0 = cirq.LineQubit(0)
    with pytest.raises(TypeError, match="cirq.T"):
        QuasarqSimulator(device=device).simulate(cirq.Circuit(cirq.T(q0)))


def test_swap_and_sample(device):
    a, b = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.X(a), cirq.SWAP(a, b), cirq.SWAP(a, b) ** 4,
                           cirq.measure(a, key="a"), cirq.measure(b, key="b"))
    r = QuasarqSimulator(device=device).sample(circuit)
    assert not r["a"][0]
    assert r["b"][0]
    with pytest.raises(TypeError):
        QuasarqSimulator(device=device).simulate(cirq.Circuit(cirq.SWAP(a, b) ** 3.5))


def test_is_supported_operation():
    q1, q2 = cirq.LineQubit.range(2)
    assert QuasarqSimulator.is_supported_operation(cirq.X(q1))
    assert QuasarqSimulator.is_supported_operation(cirq.CNOT(q1, q2))
    assert QuasarqSimulator.is_supported_operation(cirq.measure(q1))
    assert QuasarqSimulator.is_supported_operation(cirq.global_phase_operation(1j))
    assert not QuasarqSimulator.is_supported_operation(cirq.T(q1))


def test_pauli_string_global_phase_and_reset(device):
    q = cirq.NamedQubit("q")
    sim = QuasarqSimulator(device=device)
    state = sim.simulate(cirq.Circuit([cirq.PauliString({q: "X"}), cirq.PauliString({q: "Z"})]))
    assert close(state.final_state.state_vector(), [0, 1])
    state = sim.simulate(cirq.Circuit(cirq.global_phase_operation(1j), cirq.X(q)))
    assert close(state.final_state.state_vector(), [0, 1])
    q0, q1 = cirq.LineQubit.range(2)
    circuit = cirq.Circuit(cirq.X(q0), cirq.CX(q0, q1), cirq.reset(q0), cirq.reset(q1))
    assert close(sim.simulate(circuit).final_state.state_vector(), [1, 0, 0, 0])


def test_device_gpu_without_gpu_is_a_clear_error():
    from cirq_quasarq import DeviceUnavailableError
    from cirq_quasarq.engines import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceUnavailableError, match="PyCUDA"):
        QuasarqSimulator(device="gpu")
