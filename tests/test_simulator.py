"""QuasarqSimulator end to end, against Cirq's own simulators and exact state vectors.

Statistical checks use 6 standard deviations (chi-square at p = 1e-9): with the fixed seeds used
here each check's false-failure rate is below 1e-6, and the seeds make every run reproducible."""

import cirq
import numpy as np
import pytest
import sympy

import cirq_quasarq
from cirq_quasarq import QuasarqSimulator

Q = cirq.LineQubit.range(8)


def exact_postselected_state(circuit: cirq.Circuit, qubits, outcomes: dict) -> np.ndarray:
    """State vector of `circuit` with each measurement projected onto our recorded outcome."""
    state = cirq.StateVectorSimulationState(qubits=qubits, initial_state=0, dtype=np.complex128)
    index = {q: i for i, q in enumerate(qubits)}
    seen = {}
    for op in circuit.all_operations():
        if cirq.is_measurement(op):
            key = cirq.measurement_key_name(op)
            bits = outcomes[key][seen.get(key, 0)]
            seen[key] = seen.get(key, 0) + 1
            invert = op.gate.full_invert_mask()
            for q, bit, inv in zip(op.qubits, bits, invert):
                vec = state.target_tensor.reshape(-1)
                n = len(qubits)
                axis = n - 1 - index[q]
                keep = ((np.arange(2**n) >> axis) & 1) == (int(bit) ^ int(inv))
                vec[~keep] = 0
                norm = np.linalg.norm(vec)
                assert norm > 1e-9, "our outcome has probability 0"
                state.target_tensor[...] = (vec / norm).reshape(state.target_tensor.shape)
        else:
            cirq.act_on(op, state)
    return state.target_tensor.reshape(-1)


def random_circuit(n, depth, seed, measure=True):
    rng = np.random.default_rng(seed)
    qubits = Q[:n]
    gates1 = [cirq.H, cirq.S, cirq.S**-1, cirq.X, cirq.Y, cirq.Z, cirq.X**0.5, cirq.Y**-0.5]
    gates2 = [cirq.CNOT, cirq.CZ, cirq.SWAP, cirq.ISWAP, cirq.CZ**-1]
    c = cirq.Circuit()
    k = 0
    for _ in range(depth):
        perm = rng.permutation(n)
        ops = []
        i = 0
        while i < n:
            if i + 1 < n and rng.random() < 0.4:
                ops.append(gates2[rng.integers(len(gates2))](qubits[perm[i]], qubits[perm[i + 1]]))
                i += 2
            else:
                ops.append(gates1[rng.integers(len(gates1))](qubits[perm[i]]))
                i += 1
        c.append(cirq.Moment(ops))
        if measure and rng.random() < 0.4:
            q = qubits[rng.integers(n)]
            c.append(cirq.Moment(cirq.measure(q, key=f"k{k}")))
            k += 1
    return c


@pytest.mark.parametrize("seed", range(12))
def test_state_vector_matches_exact_simulation(device, seed):
    n = 2 + seed % 6
    circuit = random_circuit(n, 8, seed)
    trial = QuasarqSimulator(seed=seed, device=device).simulate(circuit)
    outcomes = {k: [v] for k, v in trial.measurements.items()}
    expected = exact_postselected_state(circuit, Q[:n], outcomes)
    assert cirq.allclose_up_to_global_phase(trial.final_state.state_vector(), expected, atol=1e-8), seed


def test_state_vector_matches_clifford_simulator_without_measurements(device):
    for seed in range(8):
        circuit = random_circuit(5, 10, seed, measure=False)
        ours = QuasarqSimulator(device=device).simulate(circuit).final_state.state_vector()
        theirs = cirq.CliffordSimulator().simulate(circuit).final_state.state_vector()
        assert cirq.allclose_up_to_global_phase(ours, theirs, atol=1e-8)


def test_stabilizers_are_cirq_types_and_agree_with_cirq(device):
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.CNOT(Q[0], Q[1]), cirq.S(Q[1]))
    state = QuasarqSimulator(device=device).simulate(circuit).final_state
    stabs = state.stabilizers()
    assert all(isinstance(s, cirq.DensePauliString) for s in stabs)
    vec = cirq.final_state_vector(circuit)
    for s in stabs:
        assert np.allclose(s.on(*Q[:2]).matrix(Q[:2]) @ vec, vec)
    assert isinstance(state.tableau, cirq.CliffordTableau)
    assert len(state.destabilizers()) == 2


def test_run_distribution_matches_exact_probabilities(device):
    circuit = random_circuit(4, 6, 3, measure=False)
    circuit.append(cirq.measure(*Q[:4], key="m"))
    probs = np.abs(cirq.final_state_vector(circuit[:-1], qubit_order=Q[:4])) ** 2
    shots = 40000
    result = QuasarqSimulator(seed=1, device=device).run(circuit, repetitions=shots)
    counts = np.bincount(result.data["m"].to_numpy(), minlength=16)
    support = probs > 1e-12
    assert counts[~support].sum() == 0
    expected = probs[support] * shots
    chi2 = np.sum((counts[support] - expected) ** 2 / expected)
    dof = support.sum() - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof) + 10


def test_same_seed_same_results_different_seed_different(device):
    circuit = cirq.Circuit(cirq.H.on_each(*Q[:5]), cirq.measure(*Q[:5], key="m"))
    a = QuasarqSimulator(seed=4, device=device).run(circuit, repetitions=500)
    b = QuasarqSimulator(seed=4, device=device).run(circuit, repetitions=500)
    c = QuasarqSimulator(seed=5, device=device).run(circuit, repetitions=500)
    assert np.array_equal(a.records["m"], b.records["m"])
    assert not np.array_equal(a.records["m"], c.records["m"])


def test_engines_return_identical_bits():
    from cirq_quasarq.engines import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    circuit = random_circuit(6, 10, 9)
    circuit.append(cirq.measure(*Q[:6], key="end"))
    noisy = QuasarqSimulator(seed=3, device="cpu", noise=cirq.depolarize(0.01)).run(circuit, repetitions=3000)
    gpu = QuasarqSimulator(seed=3, device="gpu", noise=cirq.depolarize(0.01)).run(circuit, repetitions=3000)
    for key in noisy.records:
        assert np.array_equal(noisy.records[key], gpu.records[key])


def test_result_shapes_keys_repeated_and_inverted(device):
    circuit = cirq.Circuit(
        cirq.X(Q[0]),
        cirq.measure(Q[0], Q[1], key="a", invert_mask=(False, True)),
        cirq.measure(Q[0], Q[1], key="rep"),
        cirq.X(Q[1]),
        cirq.measure(Q[0], Q[1], key="rep"),
    )
    ours = QuasarqSimulator(device=device).run(circuit, repetitions=7)
    theirs = cirq.CliffordSimulator().run(circuit, repetitions=7)
    assert set(ours.records) == set(theirs.records)
    for key in theirs.records:
        assert ours.records[key].shape == theirs.records[key].shape
        assert np.array_equal(ours.records[key], theirs.records[key])
    assert ours.records["a"][:, 0, :].tolist() == [[1, 1]] * 7


def test_parameter_sweep(device):
    t = sympy.Symbol("t")
    circuit = cirq.Circuit(cirq.X(Q[0]) ** t, cirq.measure(Q[0], key="m"))
    results = QuasarqSimulator(device=device).run_sweep(circuit, cirq.Points("t", [0, 1, 2, 3]),
                                                        repetitions=5)
    assert [int(r.measurements["m"][0, 0]) for r in results] == [0, 1, 0, 1]
    with pytest.raises(cirq_quasarq.NonCliffordError):
        QuasarqSimulator(device=device).run(circuit, {"t": 0.25})


def test_sweep_shares_what_resolution_cannot_change(device):
    """Noise-only resolutions share the schedule and the reference sample; resolutions that
    write other rows (a swept Pauli) get their own; every point samples what the resolved circuit
    compiled on its own samples, bit for bit."""
    p, t = sympy.Symbol("p"), sympy.Symbol("t")
    circuit = cirq.Circuit(
        cirq.H(Q[0]), cirq.CX(Q[0], Q[1]), cirq.X(Q[2]) ** t, cirq.X.with_probability(p).on_each(*Q[:3]),
        cirq.measure(Q[0], key="a"), cirq.measure(Q[1], Q[2], key="b"), cirq.H(Q[0]),
        cirq.measure(Q[0], key="c"))
    sim = QuasarqSimulator(device=device)
    points = [{"p": 0.001, "t": 0}, {"p": 0.01, "t": 0}, {"p": 0.2, "t": 0}, {"p": 0.01, "t": 1}]
    programs = [sim.compile(circuit, r) for r in points]
    for program in programs:
        sim.reference(program)
    assert programs[0].derived is programs[1].derived is programs[2].derived
    assert programs[3].derived is not programs[0].derived
    assert programs[0].derived["reference"] is programs[2].derived["reference"]
    assert programs[0].derived["reference"][2] == 0 and programs[3].derived["reference"][2] == 1  # X**t on b[1]
    for r in points:
        swept = QuasarqSimulator(seed=5, device=device).run(circuit, r, repetitions=300)
        alone = QuasarqSimulator(seed=5, device=device).run(cirq.resolve_parameters(circuit, r),
                                                             repetitions=300)
        for key in "abc":
            assert np.array_equal(swept.records[key], alone.records[key]), (r, key)


def test_a_noise_sweeps_detection_events_with_pauli_observables_are_each_points_own(device):
    """Detection events of a noise sweep whose observable has Pauli terms (read by a readout
    program made from the program and its channels): each point samples what its resolved circuit
    compiled on its own samples, bit for bit, though the points share `derived`. The readout had
    been kept there as one program, so every point after the first sampled the first one's noise
    (a bit flip of p = 0.3 before a Z observable flipped it never, as at p = 0.01)."""
    stimcirq = pytest.importorskip("stimcirq")
    p = sympy.Symbol("p")
    circuit = cirq.Circuit(
        cirq.H(Q[0]), cirq.CX(Q[0], Q[1]), cirq.X.with_probability(p).on_each(*Q[:3]),
        cirq.measure(Q[0], Q[1], key="m"),
        cirq.Moment(stimcirq.CumulativeObservableAnnotation(pauli_keys=["Z2"], observable_index=0)),
        cirq.Moment(stimcirq.CumulativeObservableAnnotation(parity_keys=["m"], pauli_keys=["Z0"],
                                                            observable_index=1)))
    sim = QuasarqSimulator(seed=11, device=device)
    points = [{"p": 0.01}, {"p": 0.3}, {"p": 0.2}, {"p": 0.3}]
    programs = [sim.compile(circuit, r) for r in points]
    assert programs[0].derived is programs[1].derived is programs[2].derived
    rates = []
    for r, program in zip(points, programs):
        swept = QuasarqSimulator(seed=7, device=device).sample_detectors(program, 4000, separate_observables=True)
        alone = QuasarqSimulator(seed=7, device=device).sample_detectors(
            cirq.resolve_parameters(circuit, r), 4000, separate_observables=True)
        assert all(np.array_equal(a, b) for a, b in zip(swept, alone)), r
        rates.append(swept[1][:, 0].mean())
    n = 4000
    for r, rate in zip(points, rates):  # observable 0 is Z2 alone: it flips with the X on qubit 2
        assert abs(rate - r["p"]) < 6 * np.sqrt(r["p"] * (1 - r["p"]) / n) + 1e-9, (r, rate)


def test_noise_model_like_and_channels(device):
    circuit = cirq.Circuit(cirq.I(Q[0]), cirq.measure(Q[0], key="m"))
    shots = 100_000
    rate = QuasarqSimulator(seed=2, device=device, noise=cirq.bit_flip(0.1)).run(
        circuit, repetitions=shots).measurements["m"].mean()
    # Cirq applies the noise model after every moment: flips after I and after M (not seen).
    assert abs(rate - 0.1) < 6 * np.sqrt(0.09 / shots)
    with pytest.raises(cirq_quasarq.UnsupportedNoiseError):
        QuasarqSimulator(device=device).run(
            cirq.Circuit(cirq.amplitude_damp(0.1)(Q[0]), cirq.measure(Q[0], key="m")))


def test_classical_control_and_loops_match_cirq(device):
    body = cirq.Circuit(
        cirq.H(Q[0]),
        cirq.measure(Q[0], key="a"),
        cirq.X(Q[1]).with_classical_controls("a"),
        cirq.measure(Q[1], key="b"),
        cirq.reset(Q[1]),
    )
    circuit = cirq.Circuit(cirq.CircuitOperation(body.freeze(), repetitions=4))
    ours = QuasarqSimulator(seed=1, device=device).run(circuit, repetitions=300)
    theirs = cirq.Simulator(seed=1).run(circuit, repetitions=300)
    assert set(ours.records) == set(theirs.records)
    for key in theirs.records:
        assert ours.records[key].shape == theirs.records[key].shape
    assert ours.records["a"].shape == (300, 4, 1)
    assert np.array_equal(ours.records["a"], ours.records["b"])
    assert 0.4 < ours.records["a"].mean() < 0.6


def test_classically_controlled_clifford_runs_tableau_per_shot(device):
    circuit = cirq.Circuit(
        cirq.H(Q[0]),
        cirq.measure(Q[0], key="a"),
        cirq.H(Q[1]).with_classical_controls("a"),
        cirq.measure(Q[1], key="b"),
    )
    result = QuasarqSimulator(seed=3, device=device).run(circuit, repetitions=4000)
    a, b = result.measurements["a"][:, 0], result.measurements["b"][:, 0]
    assert b[a == 0].sum() == 0
    assert 0.4 < b[a == 1].mean() < 0.6


def test_unsupported_operation_names_op_and_moment(device):
    circuit = cirq.Circuit(cirq.H(Q[0]), cirq.T(Q[0]), cirq.measure(Q[0], key="m"))
    with pytest.raises(cirq_quasarq.UnsupportedOperationError, match="moment 1"):
        QuasarqSimulator(device=device).run(circuit)


def test_simulate_initial_state_and_qubit_order(device):
    circuit = cirq.Circuit(cirq.I.on_each(*Q[:3]))
    ours = QuasarqSimulator(device=device).simulate(circuit, initial_state=0b011,
                                                     qubit_order=[Q[2], Q[1], Q[0]])
    theirs = cirq.CliffordSimulator().simulate(circuit, initial_state=0b011,
                                               qubit_order=[Q[2], Q[1], Q[0]])
    assert cirq.allclose_up_to_global_phase(ours.final_state.state_vector(),
                                            theirs.final_state.state_vector())


@pytest.mark.parametrize("block_bytes", [1, 300, 4 << 20])
def test_cirq_arrays_from_blocks_of_keys_equal_a_plain_gather(monkeypatch, block_bytes):
    """Keys with consecutive records (views of their block, blocks on threads) and keys repeated
    around others (gathered) give what indexing the unpacked records gives, for any block size."""
    from cirq_quasarq.results import records

    monkeypatch.setattr(records, "_BLOCK_BYTES", block_bytes)
    body = cirq.FrozenCircuit(cirq.H(Q[0]), cirq.measure(Q[0], key="r"), cirq.measure(Q[1], Q[2], key="s"),
                              cirq.X(Q[1]))
    circuit = cirq.Circuit(cirq.H.on_each(*Q[:4]), cirq.measure(*Q[:3], key="a"),
                           cirq.CircuitOperation(body, repetitions=3, use_repetition_ids=False),
                           cirq.measure(Q[3], key="b"), cirq.measure(Q[0], key="r"))
    sim = QuasarqSimulator(seed=4, device="cpu")
    program = sim.compile(circuit)
    shots = 700
    packed = sim.sample_packed(program, shots)
    bits = np.unpackbits(packed.view(np.uint8), axis=1, bitorder="little")[:, :shots].astype(np.int8)
    got = records.records_from_packed(program, packed, shots)
    assert list(got) == [entry.key for entry in program.keys]
    for entry in program.keys:
        assert np.array_equal(got[entry.key], bits[entry.records].transpose(2, 0, 1)), entry.key


def test_stabilizers_are_the_same_by_every_path():
    """stabilizers() / destabilizers(): from the run's half (first read), from the whole forward
    tableau (after .tableau), from a copy of the state, and Cirq's own of that tableau agree."""
    qubits = cirq.LineQubit.range(9)
    r = np.random.default_rng(4)
    circuit = cirq.Circuit()
    for _ in range(30):
        a, b = r.choice(9, 2, replace=False)
        circuit.append([cirq.H(qubits[a]), cirq.S(qubits[b]), cirq.CNOT(qubits[a], qubits[b])])
    circuit.append(cirq.measure(qubits[0], key="m"))
    first = QuasarqSimulator(seed=1).simulate(circuit).final_state
    second = QuasarqSimulator(seed=1).simulate(circuit).final_state
    table = second.tableau  # the whole forward tableau, cached
    for half in ("stabilizers", "destabilizers"):
        got = getattr(first, half)()
        assert got == getattr(second, half)() == getattr(first.copy(), half)() == getattr(table, half)()


def test_qubit_orders_and_initial_qubits_in_turn_on_one_circuit(device):
    """The qubits and their order come from the circuit, the order given and the initial state's
    qubits, call by call, though a circuit's qubit set and order are kept between calls: the same
    circuit simulated with the default order, a reversed order, an initial state on a qubit it does
    not touch, and the default order again, each against cirq.CliffordSimulator."""
    a, b, c, spare = cirq.LineQubit.range(4)
    circuit = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.S(b), cirq.CNOT(b, c), cirq.X(c))
    calls = [dict(), dict(qubit_order=[c, b, a]),
             "a state on four qubits", dict(qubit_order=[spare, c, b, a]), dict()]
    sim = QuasarqSimulator(device=device)
    for options in calls:
        if options == "a state on four qubits":  # a fresh one each: a simulator may act on it
            options = {"initial_state": lambda: cirq.StabilizerChFormSimulationState(qubits=[a, b, c, spare],
                                                                                     initial_state=0b1001)}
        fresh = {k: v() if callable(v) else v for k, v in options.items()}
        ours = sim.simulate(circuit, **fresh)
        fresh = {k: v() if callable(v) else v for k, v in options.items()}
        theirs = cirq.CliffordSimulator().simulate(circuit, **fresh)
        assert ours.qubit_map == theirs.qubit_map, options
        assert cirq.allclose_up_to_global_phase(ours.final_state.state_vector(), theirs.final_state.state_vector())
