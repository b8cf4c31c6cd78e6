"""A true drop-in for cirq.CliffordSimulator: exact global phase, initial states, moment steps,
controlled Cliffords by shot branching, expectation values, seeds, pickling, printing.

Oracles: an exact state vector with every measurement projected onto our outcome (Π|ψ⟩/‖Π|ψ⟩‖,
as cirq.Simulator and Cirq's CH form both do), cirq.CliffordSimulator's CH form projected the
same way, cirq.Simulator's exact probabilities (6σ), and every engine against the NumPy engine.
"""

import itertools
import pickle

import cirq
import numpy as np
import pytest

import cirq_quasarq
from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.compiler import compile_circuit
from cirq_quasarq.engines import NumpyEngine, cuda_available
from cirq_quasarq.errors import InvalidInputError

Q = cirq.LineQubit.range(10)


def _gates(a, b, rng):
    phase = np.exp(2j * np.pi * rng.random())
    one = [cirq.H(a), cirq.S(a), cirq.S(a) ** -1, cirq.X(a), cirq.Y(a), cirq.Z(a), cirq.X(a) ** 0.5,
           cirq.Y(a) ** -0.5, cirq.XPowGate(exponent=1, global_shift=0.37)(a),
           cirq.ZPowGate(exponent=0.5, global_shift=-0.2)(a),
           cirq.MatrixGate(phase * cirq.unitary(cirq.H) @ cirq.unitary(cirq.S)).on(a),
           cirq.PhasedXZGate(x_exponent=0.5, z_exponent=1, axis_phase_exponent=0.5)(a),
           cirq.global_phase_operation(phase)]
    if b == a:
        return one
    return one + [cirq.CNOT(a, b), cirq.CZ(a, b), cirq.ISWAP(a, b), cirq.SWAP(a, b) ** -1,
                  cirq.CZPowGate(exponent=1, global_shift=0.1)(a, b)]


def random_circuit(n, depth, seed, measure=True):
    rng = np.random.default_rng(seed)
    qubits = Q[:n]
    circuit = cirq.Circuit()
    k = 0
    for _ in range(depth):
        a, b = (qubits[i] for i in rng.choice(n, 2, replace=False)) if n > 1 else (qubits[0], qubits[0])
        options = _gates(a, b, rng)
        circuit.append(options[rng.integers(len(options))])
        if measure and rng.random() < 0.2:
            circuit.append(cirq.measure(qubits[rng.integers(n)], key=f"m{k}"))
            k += 1
    return circuit


def exact_state(circuit, qubits, outcomes, initial=None):
    """Exact state vector, each measurement projected onto our outcome and renormalised."""
    state = cirq.StateVectorSimulationState(qubits=qubits, initial_state=0 if initial is None else initial,
                                            dtype=np.complex128)
    index = {q: i for i, q in enumerate(qubits)}
    n = len(qubits)
    for op in circuit.all_operations():
        if cirq.is_measurement(op):
            for q, bit in zip(op.qubits, outcomes[cirq.measurement_key_name(op)]):
                vec = state.target_tensor.reshape(-1)
                keep = ((np.arange(2**n) >> (n - 1 - index[q])) & 1) == int(bit)
                vec[~keep] = 0
                vec /= np.linalg.norm(vec)
                state.target_tensor[...] = vec.reshape(state.target_tensor.shape)
        else:
            cirq.act_on(op, state)
    return state.target_tensor.reshape(-1)


def ch_form_state(circuit, qubits, outcomes):
    """cirq.CliffordSimulator's CH form, each measurement projected onto our outcome."""
    state = cirq.StabilizerChFormSimulationState(qubits=qubits, prng=np.random.RandomState(0))
    index = {q: i for i, q in enumerate(qubits)}
    for op in circuit.all_operations():
        if cirq.is_measurement(op):
            for q, bit in zip(op.qubits, outcomes[cirq.measurement_key_name(op)]):
                state.state.project_Z(index[q], int(bit))
        else:
            cirq.act_on(op, state)
    return state.state.state_vector()


# ---------------------------------------------------------------------------------------------
# Exact global phase


@pytest.mark.parametrize("seed", range(24))
def test_state_vector_equals_cirq_including_phase(device, seed):
    n = 1 + seed % 10
    circuit = random_circuit(n, 25, seed)
    trial = QuasarqSimulator(seed=seed, device=device).simulate(circuit, qubit_order=Q[:n])
    outcomes = dict(trial.measurements)
    ours = trial.final_state.state_vector()
    np.testing.assert_allclose(ours, exact_state(circuit, Q[:n], outcomes), atol=1e-6, err_msg=f"seed {seed}")
    np.testing.assert_allclose(ours, ch_form_state(circuit, Q[:n], outcomes), atol=1e-6, err_msg=f"seed {seed}")
    np.testing.assert_allclose(trial.final_state_vector, ours)


def test_state_vector_with_resets_and_pauli_measurements(device):
    a, b = Q[:2]
    circuit = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.measure(a, key="m"), cirq.reset(a),
                           cirq.S(b), cirq.H(a), cirq.global_phase_operation(1j),
                           cirq.PauliMeasurementGate(cirq.DensePauliString("XX"), key="p").on(a, b))
    for seed in range(8):
        trial = QuasarqSimulator(seed=seed, device=device).simulate(circuit)
        m, p = int(trial.measurements["m"][0]), int(trial.measurements["p"][0])
        state = cirq.final_state_vector(cirq.Circuit(cirq.H(a), cirq.CNOT(a, b)), qubit_order=[a, b])
        proj = np.array([1 - m, 0, 0, m], dtype=complex)  # the Bell pair: a and b both read m
        state = state * proj / np.linalg.norm(state * proj)
        state = cirq.unitary(cirq.Circuit(cirq.X(a) ** m, cirq.S(b), cirq.H(a))) @ state * 1j
        xx = cirq.unitary(cirq.Circuit(cirq.X(a), cirq.X(b)))
        state = (state + (-1) ** p * (xx @ state)) / 2
        state /= np.linalg.norm(state)
        np.testing.assert_allclose(trial.final_state.state_vector(), state, atol=1e-7, err_msg=str(seed))


# ---------------------------------------------------------------------------------------------
# Initial states


def _random_stabilizer(n, seed):
    circuit = random_circuit(n, 20, seed, measure=False)
    return cirq.final_state_vector(circuit, qubit_order=Q[:n])


@pytest.mark.parametrize("seed", range(10))
def test_initial_state_vector_and_product_state(device, seed):
    n = 1 + seed % 5
    start = _random_stabilizer(n, 100 + seed)
    circuit = random_circuit(n, 15, seed)
    trial = QuasarqSimulator(seed=seed, device=device).simulate(circuit, initial_state=start, qubit_order=Q[:n])
    expected = exact_state(circuit, Q[:n], dict(trial.measurements), initial=start)
    np.testing.assert_allclose(trial.final_state.state_vector(), expected, atol=1e-6)
    kets = [cirq.KET_PLUS, cirq.KET_MINUS, cirq.KET_IMAG, cirq.KET_MINUS_IMAG, cirq.KET_ZERO, cirq.KET_ONE]
    product = cirq.ProductState({q: kets[(seed + i) % 6] for i, q in enumerate(Q[:n])})
    trial = QuasarqSimulator(seed=seed, device=device).simulate(circuit, initial_state=product, qubit_order=Q[:n])
    expected = exact_state(circuit, Q[:n], dict(trial.measurements), initial=product.state_vector())
    np.testing.assert_allclose(trial.final_state.state_vector(), expected, atol=1e-6)


def test_initial_simulation_states_and_tableaux(device):
    a, b = Q[:2]
    circuit = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.S(b))
    ch = cirq.StabilizerChFormSimulationState(qubits=[a, b], initial_state=2)
    ours = QuasarqSimulator(device=device).simulate(circuit, initial_state=ch).final_state.state_vector()
    theirs = cirq.CliffordSimulator().simulate(circuit, initial_state=ch).final_state.state_vector()
    np.testing.assert_allclose(ours, theirs, atol=1e-7)
    tableau = cirq.CliffordTableau(2, initial_state=1)
    for initial in (tableau, cirq.CliffordTableauSimulationState(tableau, qubits=[a, b])):
        got = QuasarqSimulator(device=device).simulate(circuit, initial_state=initial).final_state.state_vector()
        assert cirq.allclose_up_to_global_phase(got, cirq.final_state_vector(circuit, initial_state=1))
    with pytest.raises(InvalidInputError, match="stabilizer"):
        t_plus = cirq.unitary(cirq.T) @ np.array([1, 1]) / np.sqrt(2)
        QuasarqSimulator(device=device).simulate(circuit, initial_state=np.kron(t_plus, [1, 0]))
    with pytest.raises(InvalidInputError, match="out of range"):
        QuasarqSimulator(device=device).simulate(circuit, initial_state=4)


# ---------------------------------------------------------------------------------------------
# Moment steps and sampling from a step


def test_moment_steps_read_keys_of_earlier_moments(device):
    a, b = Q[:2]
    circuit = cirq.Circuit(cirq.H(a), cirq.measure(a, key="m"), cirq.X(b).with_classical_controls("m"),
                           cirq.measure(b, key="n"))
    for seed in range(6):
        steps = list(QuasarqSimulator(seed=seed, device=device).simulate_moment_steps(circuit))
        assert len(steps) == 4
        m, n = steps[1].measurements["m"][0], steps[3].measurements["n"][0]
        assert m == n and "m" not in steps[3].measurements
        np.testing.assert_allclose(steps[2].state.state_vector(), np.eye(4)[3 * m], atol=1e-9)


def test_step_sample_is_vectorised_and_exact(device):
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.CNOT(Q[0], Q[1]), cirq.CNOT(Q[1], Q[2]), cirq.S(Q[2]))
    step = list(QuasarqSimulator(seed=3, device=device).simulate_moment_steps(circuit))[-1]
    samples = step.sample(Q[:3], repetitions=20000)
    assert samples.shape == (20000, 3) and samples.dtype == bool
    assert np.all(samples.all(axis=1) | ~samples.any(axis=1))
    assert abs(samples[:, 0].mean() - 0.5) < 6 * np.sqrt(0.25 / 20000)
    again = list(QuasarqSimulator(seed=3, device=device).simulate_moment_steps(circuit))[-1].sample(Q[:3], 20000)
    assert np.array_equal(samples, again)


# ---------------------------------------------------------------------------------------------
# Shot branching


def _feed_forward(kind):
    a, b, c = Q[:3]
    if kind == "teleport":  # teleport S·H|0>; the corrections are controlled CX and CZ (not Paulis)
        return cirq.Circuit(cirq.H(a), cirq.S(a), cirq.H(b), cirq.CNOT(b, c), cirq.CNOT(a, b), cirq.H(a),
                            cirq.measure(a, key="ma"), cirq.measure(b, key="mb"),
                            cirq.CNOT(b, c).with_classical_controls("mb"),
                            cirq.CZ(a, c).with_classical_controls("ma"),
                            cirq.S(c) ** -1, cirq.H(c), cirq.measure(c, key="out"))
    if kind == "magic":  # controlled H, S and CX on fresh randomness, two levels deep
        return cirq.Circuit(cirq.H(a), cirq.measure(a, key="x"), cirq.H(b).with_classical_controls("x"),
                            cirq.measure(b, key="y"), cirq.S(c).with_classical_controls("y"), cirq.H(c),
                            cirq.CNOT(c, a).with_classical_controls(cirq.KeyCondition(cirq.MeasurementKey("x"))),
                            cirq.measure(a, c, key="z"))
    raise ValueError(kind)


def exact_outcomes(circuit, qubits):
    """{records: probability} of a circuit with measurements and classical control, by following
    every measurement branch with an exact state vector (Cirq's own evaluation of conditions)."""
    n = len(qubits)
    index = {q: i for i, q in enumerate(qubits)}
    branches = [(1.0, cirq.one_hot(index=0, shape=(2**n,), dtype=np.complex128), {})]
    for op in circuit.all_operations():
        grown = []
        for p, vec, records in branches:
            if cirq.is_measurement(op):
                key = cirq.measurement_key_name(op)
                for bits in itertools.product((0, 1), repeat=len(op.qubits)):
                    keep = np.ones(2**n, dtype=bool)
                    for q, bit in zip(op.qubits, bits):
                        keep &= ((np.arange(2**n) >> (n - 1 - index[q])) & 1) == bit
                    part = np.where(keep, vec, 0)
                    weight = np.vdot(part, part).real
                    if weight > 1e-12:
                        grown.append((p * weight, part / np.sqrt(weight), {**records, key: bits}))
                continue
            inner = op
            if isinstance(op, cirq.ClassicallyControlledOperation):
                store = cirq.ClassicalDataDictionaryStore(
                    _records={cirq.MeasurementKey(k): [v] for k, v in records.items()})
                if not all(c.resolve(store) for c in op.classical_controls):
                    grown.append((p, vec, records))
                    continue
                inner = op.without_classical_controls()
            vec = cirq.Circuit(inner).final_state_vector(initial_state=vec, qubit_order=qubits,
                                                         dtype=np.complex128)
            grown.append((p, vec, records))
        branches = grown
    out = {}
    for p, _, records in branches:
        row = tuple(b for k in sorted(records) for b in records[k])
        out[row] = out.get(row, 0.0) + p
    return out


@pytest.mark.parametrize("kind", ["teleport", "magic"])
def test_shot_branching_matches_exact_distributions(device, kind):
    circuit = _feed_forward(kind)
    shots = 50000
    ours = QuasarqSimulator(seed=7, device=device).run(circuit, repetitions=shots)
    keys = sorted(circuit.all_measurement_key_names())
    rows = np.concatenate([ours.measurements[k] for k in keys], axis=1)
    exact = exact_outcomes(circuit, Q[:3])
    seen = {tuple(r) for r in rows}
    assert seen <= set(exact), (kind, seen - set(exact))
    for outcome, p in exact.items():
        got = np.mean(np.all(rows == outcome, axis=1))
        assert abs(got - p) < 6 * np.sqrt(p * (1 - p) / shots) + 1e-12, (kind, outcome, got, p)
    if kind == "teleport":
        assert np.all(ours.measurements["out"] == 0)  # S·H|0> teleported, then undone


def test_shot_branching_bits_do_not_depend_on_the_shot_count():
    circuit = _feed_forward("magic")
    big = QuasarqSimulator(seed=11, device="cpu").run(circuit, repetitions=3000)
    small = QuasarqSimulator(seed=11, device="cpu").run(circuit, repetitions=129)
    for key in big.records:
        assert np.array_equal(big.records[key][:129], small.records[key])


def test_shot_branching_engines_agree():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    for kind in ("teleport", "magic"):
        circuit = _feed_forward(kind)
        cpu = QuasarqSimulator(seed=5, device="cpu").run(circuit, repetitions=5000)
        gpu = QuasarqSimulator(seed=5, device="gpu").run(circuit, repetitions=5000)
        for key in cpu.records:
            assert np.array_equal(cpu.records[key], gpu.records[key]), (kind, key)


test_shot_branching_engines_agree = pytest.mark.gpu(test_shot_branching_engines_agree)


def test_controlled_cliffords_in_loops_fall_back_per_shot(device):
    a, b = Q[:2]
    body = cirq.FrozenCircuit(cirq.H(a), cirq.measure(a, key="m"), cirq.H(b).with_classical_controls("m"),
                              cirq.measure(b, key="n"), cirq.reset(b))
    result = QuasarqSimulator(seed=2, device=device).run(cirq.Circuit(cirq.CircuitOperation(body, repetitions=3)),
                                                         repetitions=600)
    m, n = result.records["m"][:, :, 0], result.records["n"][:, :, 0]
    assert np.all(n[m == 0] == 0)
    assert 0.35 < n[m == 1].mean() < 0.65


# ---------------------------------------------------------------------------------------------
# Expectation values


@pytest.mark.parametrize("seed", range(6))
def test_expectation_values_are_exact(device, seed):
    n = 2 + seed % 3
    circuit = random_circuit(n, 20, seed, measure=False)
    rng = np.random.default_rng(seed)
    observables = []
    for _ in range(6):
        letters = rng.integers(0, 4, n)
        observables.append(cirq.PauliString({q: (cirq.X, cirq.Y, cirq.Z)[p - 1] for q, p in zip(Q, letters) if p},
                                            coefficient=rng.normal()))
    observables.append(sum(observables[:3], cirq.PauliSum()) + 0.5)
    ours = QuasarqSimulator(device=device).simulate_expectation_values(circuit, observables, qubit_order=Q[:n])
    vector = cirq.final_state_vector(circuit, qubit_order=Q[:n])
    qmap = {q: i for i, q in enumerate(Q[:n])}
    for got, obs in zip(ours, observables):
        want = cirq.PauliSum.wrap(obs).expectation_from_state_vector(vector, qmap)
        assert abs(got - want) < 1e-6, (seed, obs, got, want)


def test_expectation_values_refuse_terminal_measurements(device):
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.measure(Q[0], key="m"))
    with pytest.raises(ValueError, match="terminal measurements"):
        QuasarqSimulator(device=device).simulate_expectation_values(circuit, cirq.X(Q[0]))


# ---------------------------------------------------------------------------------------------
# Arguments, seeds, pickling, shapes, printing


def test_constructor_takes_what_cirq_takes():
    sim = QuasarqSimulator(seed=3, split_untangled_states=True, noise=cirq.depolarize(0.01), dtype=np.complex64)
    assert sim.split_untangled_states
    vec = sim.simulate(cirq.Circuit(cirq.H(Q[0]))).final_state.state_vector()
    assert vec.dtype == np.complex64
    with pytest.raises(InvalidInputError):
        QuasarqSimulator(dtype=np.float32)


@pytest.mark.parametrize("seed", [None, 5, np.int64(5), np.random.RandomState(5), np.random.default_rng(5), np.random])
def test_seeds_as_cirq_takes_them(seed):
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.measure(Q[0], key="m"))
    QuasarqSimulator(seed=seed, device="cpu").run(circuit, repetitions=10)
    a = QuasarqSimulator(seed=np.random.default_rng(9), device="cpu").run(circuit, repetitions=200)
    b = QuasarqSimulator(seed=np.random.default_rng(9), device="cpu").run(circuit, repetitions=200)
    assert np.array_equal(a.records["m"], b.records["m"])


def test_bad_seed_is_a_type_error():
    with pytest.raises(TypeError, match="seed"):
        QuasarqSimulator(seed="five")


def test_simulator_pickles():
    sim = QuasarqSimulator(seed=4, noise=cirq.bit_flip(0.1), device="cpu")
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.measure(Q[0], key="m"))
    copy = pickle.loads(pickle.dumps(sim))
    assert np.array_equal(copy.run(circuit, repetitions=100).records["m"], sim.run(circuit, repetitions=100).records["m"])


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_final_state_is_read_when_asked_and_pickles(device):
    """simulate()'s final state takes the tableau from the run when first read (a GPU run's stays
    on the device until then), also after the simulator has run again; a pickle carries it."""
    if device == "gpu" and not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    sim = QuasarqSimulator(seed=3, device=device)
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.CX(Q[0], Q[1]), cirq.S(Q[1]), cirq.measure(Q[2], key="m"))
    first = sim.simulate(circuit).final_state
    sim.simulate(cirq.Circuit(cirq.X(Q[0]), cirq.X(Q[1]), cirq.X(Q[2])))  # overwrites the engine's buffers
    want = cirq.final_state_vector(circuit, qubit_order=Q[:3], ignore_terminal_measurements=True)
    assert cirq.allclose_up_to_global_phase(first.state_vector(), want)
    again = pickle.loads(pickle.dumps(first))
    assert again == first


def test_zero_repetitions_shape_as_cirq():
    circuit = cirq.Circuit(cirq.measure(Q[0], Q[1], key="m"), cirq.measure(Q[0], Q[1], key="m"))
    ours = QuasarqSimulator(device="cpu").run(circuit, repetitions=0)
    theirs = cirq.CliffordSimulator().run(circuit, repetitions=0)
    assert ours.records["m"].shape == theirs.records["m"].shape


def test_gate_decomposing_into_a_measurement_compiles():
    class XBasisMeasure(cirq.Gate):
        def _num_qubits_(self):
            return 1

        def _decompose_(self, qs):
            return [cirq.H(qs[0]), cirq.measure(qs[0], key="a"), cirq.H(qs[0])]

    circuit = cirq.Circuit(cirq.H(Q[0]), XBasisMeasure().on(Q[0]))
    assert compile_circuit(circuit).num_records == 1  # was: a raw TypeError from cirq.kraus
    for seed in range(5):
        trial = QuasarqSimulator(seed=seed, device="cpu").simulate(circuit)
        assert trial.measurements["a"][0] == 0
        np.testing.assert_allclose(trial.final_state.state_vector(), [2**-0.5, 2**-0.5], atol=1e-9)


def test_earlier_instances_of_a_repeated_key():
    a, b = Q[:2]
    circuit = cirq.Circuit(cirq.X(a), cirq.measure(a, key="k"), cirq.X(a), cirq.measure(a, key="k"),
                           cirq.X(b).with_classical_controls(cirq.KeyCondition(cirq.MeasurementKey("k"), index=-2)),
                           cirq.measure(b, key="out"))
    assert np.all(QuasarqSimulator(device="cpu").run(circuit, repetitions=10).records["out"] == 1)


def test_state_equality_repr_and_json_round_trip():
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.CNOT(Q[0], Q[1]), cirq.S(Q[1]))
    state = QuasarqSimulator(device="cpu").simulate(circuit).final_state
    other = QuasarqSimulator(device="cpu").simulate(circuit[:-1] + cirq.Circuit(cirq.S(Q[0]))).final_state
    assert state == state.copy() and state == other  # S on either qubit of a Bell pair: the same state
    assert state != QuasarqSimulator(device="cpu").simulate(circuit[:-1]).final_state
    cirq.testing.assert_equivalent_repr(state, global_vals={"cirq_quasarq": cirq_quasarq})
    text = cirq.to_json(state)
    back = cirq.read_json(json_text=text, resolvers=[cirq_quasarq.json_resolver, *cirq.DEFAULT_RESOLVERS])
    assert back == state
    assert str(state).startswith("0.71|00⟩")


def test_str_shows_stabilizers_beyond_small_states():
    circuit = cirq.Circuit(cirq.H.on_each(*Q[:10]), cirq.I.on_each(*cirq.LineQubit.range(10, 20)))
    text = str(QuasarqSimulator(device="cpu").simulate(circuit).final_state)
    assert text.startswith("stabilizers: ") and "+X" in text


def test_engines_are_only_used_through_the_interface():
    state = QuasarqSimulator(device="cpu").simulate(cirq.Circuit(cirq.H(Q[0])))
    assert isinstance(QuasarqSimulator(device="cpu").engine, NumpyEngine)
    assert list(itertools.islice(iter(state.final_state.stabilizers()), 1))


def test_results_held_survive_later_runs(device):
    """Results are views of one reusable host buffer of unpacked records: a result still held is
    never overwritten by a later run, and a run after the results are dropped (the buffer reused)
    gives the same arrays. Keys of one qubit, of several, and repeated in a loop (strided views)."""
    a, b, c = Q[:3]
    body = cirq.FrozenCircuit(cirq.H(a), cirq.CNOT(a, b), cirq.measure(a, b, key="ab"), cirq.X(c) ** 0.5,
                              cirq.measure(c, key="c"), cirq.reset(a))
    circuit = cirq.Circuit(cirq.H(c), cirq.CircuitOperation(body, repetitions=5, use_repetition_ids=False),
                           cirq.measure(c, a, key="last"))
    other = cirq.Circuit(cirq.X.on_each(a, b, c), cirq.measure(a, b, key="ab"), cirq.measure(c, key="c"))
    first = QuasarqSimulator(seed=9, device=device).run(circuit, repetitions=300)
    kept = {key: value.copy() for key, value in first.records.items()}
    assert kept["ab"].shape == (300, 5, 2) and kept["last"].shape == (300, 1, 2)
    later = QuasarqSimulator(seed=10, device=device).run(other, repetitions=400)
    assert (later.records["ab"] == 1).all()
    for key, value in kept.items():
        np.testing.assert_array_equal(first.records[key], value)
    del first, later
    again = QuasarqSimulator(seed=9, device=device).run(circuit, repetitions=300)
    for key, value in kept.items():
        np.testing.assert_array_equal(again.records[key], value)
