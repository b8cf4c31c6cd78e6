"""Stim's records with no qubit of the circuit behind them (MPAD, HERALDED_ERASE,
HERALDED_PAULI_CHANNEL_1, measurements of +-I: scratch qubits) and OBSERVABLE_INCLUDE of Pauli
targets (FRAME_PARITY rows), against Stim and against exact probabilities.

Oracles: Stim's samplers (every column exactly where Stim's is constant, joint patterns of the
columns within 6 sigma elsewhere); the channels' exact joint distributions (binomial bounds, each
checked to reject a probability 0.02 off); Stim's tableau simulator for final states. Engines: the
NumPy engine's frame mode (plan, plain walk, folded loops, linear map, any chunking) and its tableau
mode shot by shot give the same bits for a key; the CUDA engine gives the NumPy engine's."""

import numpy as np
import pytest

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.compiler import compile_stim
from cirq_quasarq.core import rng
from cirq_quasarq.core.parities import Parities
from cirq_quasarq.engines import NumpyEngine, cuda_available
from cirq_quasarq.schedule import schedule

from .test_stim_differential import assert_same_columns

stim = pytest.importorskip("stim")

OUR_SHOTS, STIM_SHOTS = 8192, 40_000


def patterns(bits: np.ndarray) -> np.ndarray:
    """bool [shots, 2**k]: which of the 2**k patterns of the k columns each shot shows (the joint
    distribution, as columns assert_same_columns compares)."""
    k = bits.shape[1]
    values = bits.astype(np.int64) @ (1 << np.arange(k))
    return values[:, None] == np.arange(1 << k)[None, :]


def assert_samples_as_stim(circuit: stim.Circuit, device: str, seed: int = 3) -> None:
    """Records, detection events and observable flips: exactly Stim's where Stim's are constant,
    their joint patterns within 6 sigma elsewhere; shapes and counts Stim's."""
    sim = QuasarqSimulator(seed=seed, device=device)
    ours = sim.sample_measurements(circuit, OUR_SHOTS)
    theirs = circuit.compile_sampler(seed=seed).sample(STIM_SHOTS)
    assert_same_columns(ours, theirs, f"records of\n{circuit}")
    if 0 < ours.shape[1] <= 8:
        assert_same_columns(patterns(ours), patterns(theirs), f"record patterns of\n{circuit}")
    ours = sim.sample_detectors(circuit, OUR_SHOTS, append_observables=True)
    theirs = circuit.compile_detector_sampler(seed=seed).sample(STIM_SHOTS, append_observables=True)
    assert_same_columns(ours, theirs, f"detection events and observable flips of\n{circuit}")
    if 0 < ours.shape[1] <= 8:
        assert_same_columns(patterns(ours), patterns(theirs), f"event patterns of\n{circuit}")


# -- records: values, order, lookbacks -------------------------------------------------------------

DETERMINISTIC = """
X 1
MPAD 1 0 0 1
HERALDED_PAULI_CHANNEL_1(0, 1, 0, 0) 0 !1
HERALDED_ERASE(0) 2
HERALDED_PAULI_CHANNEL_1(0, 0, 0, 0) 3
M 0 1 2
MPP X3*X3 !Z4*Z4 Z0*X3*X3
MYY !4 4
REPEAT 3 {
    MPAD 0 1
    HERALDED_PAULI_CHANNEL_1(0, 0, 1, 0) 0
    CX rec[-2] 2
    M 2 0
    DETECTOR rec[-1] rec[-5]
    DETECTOR rec[-2] rec[-3]
    OBSERVABLE_INCLUDE(1) rec[-4]
}
HERALDED_PAULI_CHANNEL_1(1, 0, 0, 0) 3
MPAD 1
DETECTOR rec[-1] rec[-2]
DETECTOR rec[-3] rec[-24]
OBSERVABLE_INCLUDE(0) rec[-2] rec[-17]
"""


def test_deterministic_records_order_and_lookbacks_are_stims_exactly(device):
    """Every column constant in Stim: MPAD's bits, heralds that always (and never) fire in target
    order with their Paulis, +-I products, records inside a loop looked back at from it and after."""
    circuit = stim.Circuit(DETERMINISTIC)
    program = compile_stim(circuit)
    assert program.num_records == circuit.num_measurements and len(program.qubits) == circuit.num_qubits
    sim = QuasarqSimulator(seed=1, device=device)
    ours = sim.sample_measurements(circuit, 70)
    theirs = circuit.compile_sampler().sample(1)
    assert (ours == theirs).all(), (ours[0].astype(int), theirs[0].astype(int))
    theirs_records = theirs[0].astype(np.int8)
    ours = sim.sample_detectors(circuit, 70, append_observables=True)
    theirs = circuit.compile_detector_sampler().sample(1, append_observables=True)
    assert (ours == theirs).all(), (ours[0].astype(int), theirs[0].astype(int))
    records = sim.run(circuit, repetitions=5).records  # each key's instances are Stim's records
    for key in program.keys:
        np.testing.assert_array_equal(records[key.key][:, :, 0], np.broadcast_to(theirs_records[key.records[:, 0]],
                                                                                  (5, len(key.records))))


def test_instructions_wider_than_the_scratch_pool_keep_their_record_order():
    """Targets past the 64th reuse scratch qubits: records still in target order, Stim's exactly."""
    bits = [(i * 7) % 3 % 2 for i in range(150)]
    circuit = stim.Circuit("X " + " ".join(map(str, range(0, 100, 3))) + "\nMPAD " + " ".join(map(str, bits))
                           + "\nHERALDED_PAULI_CHANNEL_1(0, 0, 0, 1) " + " ".join(map(str, range(0, 100, 2)))
                           + "\nHERALDED_PAULI_CHANNEL_1(0, 1, 0, 0) " + " ".join(map(str, range(1, 100, 2)))
                           + "\nM " + " ".join(map(str, range(100))))
    program = compile_stim(circuit)
    assert program.num_qubits <= circuit.num_qubits + 64
    ours = QuasarqSimulator(seed=1, device="cpu").sample_measurements(circuit, 3)
    assert (ours == circuit.compile_sampler().sample(1)).all()


LOOKBACKS = """
HERALDED_ERASE(0.3) 0
MPAD(0.1) 0
MPAD(0.15) 1
X_ERROR(0.05) 1
M 1
HERALDED_PAULI_CHANNEL_1(0.02, 0.2, 0, 0) 1
HERALDED_ERASE(0.45) 0
DETECTOR rec[-6]
DETECTOR rec[-5]
DETECTOR rec[-4]
DETECTOR rec[-3]
DETECTOR rec[-2]
DETECTOR rec[-1]
"""


def test_lookbacks_name_the_right_records(device):
    """Records whose events have rates at least 0.05 apart (the MPAD 1's relative to its noiseless
    1), each checked against its exact value: a lookback one record off fails."""
    circuit = stim.Circuit(LOOKBACKS)
    ours = QuasarqSimulator(seed=2, device=device).sample_detectors(circuit, 50_000)
    assert_close(ours.mean(axis=0), np.array([0.3, 0.1, 0.15, 0.05, 0.22, 0.45]), len(ours))
    assert_samples_as_stim(circuit, device)


def zscores(rates: np.ndarray, expected: np.ndarray, shots: int) -> np.ndarray:
    """Distances of observed rates from exact probabilities in binomial standard deviations (a
    probability of 0 or 1 allows no miss at all)."""
    return np.abs(rates - expected) / np.sqrt(np.maximum(expected * (1 - expected), 1 / shots**2) / shots)


def assert_close(rates: np.ndarray, expected: np.ndarray, shots: int, sigmas: float = 5) -> None:
    z = zscores(rates, expected, shots)
    assert z.max() < sigmas, (rates.round(4).tolist(), expected.round(4).tolist(), z.round(1).tolist())


# -- heralds: the joint distribution of herald and Pauli ---------------------------------------------

HERALDS = """
RX 1 4
RY 2
HERALDED_PAULI_CHANNEL_1({pi}, {px}, {py}, {pz}) 0 1 2
HERALDED_ERASE({pe}) 3 4
M 0
MX 1
MY 2
M 3
MX 4
"""


def herald_joint(pi, px, py, pz, pe) -> np.ndarray:
    """Per target of HERALDS, the exact P(herald, flip) for (herald, flip) = (0,0), (1,0), (0,1),
    (1,1): the flip is the measured basis' anticommutation with the applied Pauli."""
    heralded = [(pi + pz, px + py), (pi + px, py + pz), (pi + py, px + pz)]  # Z, X, Y bases: (no flip, flip)
    heralded += [(pe / 2, pe / 2)] * 2
    return np.array([[1 - kept - flipped, kept, 0.0, flipped] for kept, flipped in heralded])


def herald_patterns(bits: np.ndarray) -> np.ndarray:
    """Per target, the rates of (herald, flip) = (0,0), (1,0), (0,1), (1,1)."""
    heralds, flips = bits[:, :5], bits[:, 5:]
    return np.array([patterns(np.stack([heralds[:, t], flips[:, t]], axis=1)).mean(axis=0) for t in range(5)])


@pytest.mark.parametrize("shape", ["flat", "loop"])
def test_heralded_channels_have_their_exact_joint_distribution(device, shape):
    """Each target's (herald, flip) pattern against the exact probabilities, and the same bounds
    reject the distribution of probabilities 0.02 off (px, or pe): the test can fail. Different
    targets are independent (a pair's joint rate is the product)."""
    args = dict(pi=0.04, px=0.08, py=0.12, pz=0.16, pe=0.3)
    text = HERALDS.format(**args)
    if shape == "loop":  # the same shot three times over: records per iteration, in order
        text = "REPEAT 3 {\n" + text + "R 0 1 2 3 4\n}"
    circuit = stim.Circuit(text)
    shots = 60_000
    bits = QuasarqSimulator(seed=4, device=device).sample_measurements(circuit, shots)
    assert bits.shape == (shots, circuit.num_measurements)
    for it in range(bits.shape[1] // 10):
        got = herald_patterns(bits[:, 10 * it : 10 * it + 10])
        assert_close(got.ravel(), herald_joint(**args).ravel(), shots)
        for wrong in (dict(args, px=0.1), dict(args, pe=0.28)):
            assert zscores(got, herald_joint(**wrong), shots).max() > 5, wrong
        h = bits[:, 10 * it : 10 * it + 5].astype(float)
        pair = (h[:, 0] * h[:, 3]).mean()
        assert_close(np.array([pair]), np.array([0.4 * 0.3]), shots)
    assert_samples_as_stim(stim.Circuit(HERALDS.format(**args)), device)


def test_mpad_flips_with_its_probability_independently(device):
    circuit = stim.Circuit("MPAD(0.1) 1 0 1\nMPAD(0.3) 0")
    shots = 60_000
    bits = QuasarqSimulator(seed=5, device=device).sample_measurements(circuit, shots).astype(float)
    rates = np.concatenate([bits.mean(axis=0), [(bits[:, 0] * bits[:, 1]).mean(), (bits[:, 1] * bits[:, 3]).mean()]])
    expected = np.array([0.9, 0.1, 0.9, 0.3, 0.9 * 0.1, 0.1 * 0.3])
    assert_close(rates, expected, shots)
    assert zscores(rates[3], np.array(0.32), shots) > 5  # a flip probability 0.02 off is told apart


HERALD_DETECTORS = """
R 0 1 2
M 2 0
H 1
REPEAT 4 {
    HERALDED_ERASE(0.2) 0 1 2
    HERALDED_PAULI_CHANNEL_1(0.05, 0.1, 0.05, 0.1) 2 0
    CX 1 2
    MR 2
    DETECTOR rec[-1] rec[-8]
    DETECTOR rec[-4]
    DETECTOR rec[-2] rec[-3]
    OBSERVABLE_INCLUDE(0) rec[-6]
    MPAD 1
    DETECTOR rec[-1]
}
M 0 1
DETECTOR rec[-1] rec[-2]
OBSERVABLE_INCLUDE(1) rec[-1]
"""


def test_heralds_in_detectors_and_loops_sample_as_stim(device):
    assert_samples_as_stim(stim.Circuit(HERALD_DETECTORS), device)


# -- OBSERVABLE_INCLUDE of Pauli targets ---------------------------------------------------------------

PAULI_OBSERVABLES = [
    # deterministic: +1 eigenstates, flipped or not by an anticommuting error
    "R 0\nOBSERVABLE_INCLUDE(0) Z0",
    "X_ERROR(1) 0\nOBSERVABLE_INCLUDE(0) Z0",
    "H 0\nZ_ERROR(1) 0\nOBSERVABLE_INCLUDE(0) X0\nOBSERVABLE_INCLUDE(1) !X0",  # the sign changes nothing
    "H 0\nCX 0 1\nZ_ERROR(1) 0\nOBSERVABLE_INCLUDE(0) X0 X1\nOBSERVABLE_INCLUDE(1) Z0 Z1\nOBSERVABLE_INCLUDE(2) Z0",
    "X_ERROR(1) 0\nOBSERVABLE_INCLUDE(0) Z0 Z0\nOBSERVABLE_INCLUDE(1) X0 Z0",  # a qubit twice: letters multiply
    "X 0\nOBSERVABLE_INCLUDE(0) Z0",  # a gate sets the expected value, not a flip
    # random where the frame is (the observable anticommutes with the state), correlated as Stim's
    "R 0\nOBSERVABLE_INCLUDE(0) X0",
    "R 0\nOBSERVABLE_INCLUDE(0) X0\nMX 0\nOBSERVABLE_INCLUDE(1) rec[-1]",
    "R 0\nOBSERVABLE_INCLUDE(0) Y0\nOBSERVABLE_INCLUDE(1) X0\nOBSERVABLE_INCLUDE(2) Z0",
    # nothing collapses: H 0 ... H 0 still measures 0 for sure
    "H 0\nOBSERVABLE_INCLUDE(0) Z0\nH 0\nM 0\nDETECTOR rec[-1]",
    "H 0 1\nCX 0 1\nOBSERVABLE_INCLUDE(0) Z0\nOBSERVABLE_INCLUDE(1) X1\nCX 0 1\nH 0 1\nM 0 1",
    # mixed with records and noise, in loops, out of order
    "X_ERROR(0.3) 0\nMR 0\nOBSERVABLE_INCLUDE(0) rec[-1] Z0",
    "X_ERROR(0.3) 0\nM 0\nOBSERVABLE_INCLUDE(0) rec[-1] Z0\nOBSERVABLE_INCLUDE(2) Z0",
    "REPEAT 3 {\n X_ERROR(0.2) 0\n Z_ERROR(0.1) 1\n OBSERVABLE_INCLUDE(0) Z0 Y1\n}\nOBSERVABLE_INCLUDE(1) Z0",
    "H 1\nREPEAT 2 {\n DEPOLARIZE2(0.2) 0 1\n OBSERVABLE_INCLUDE(1) Z0 X1\n REPEAT 2 {\n  HERALDED_ERASE(0.2) 0\n"
    "  OBSERVABLE_INCLUDE(0) X0 rec[-1]\n }\n}\nMX 1\nM 0\nDETECTOR rec[-1]\nDETECTOR rec[-2]",
    "MPP X0*X1 Z0*Z1\nOBSERVABLE_INCLUDE(0) X0 X1\nDEPOLARIZE1(0.2) 0 1\nOBSERVABLE_INCLUDE(1) Z0 Z1\n"
    "MPP X0*X1 Z0*Z1\nDETECTOR rec[-2] rec[-4]\nDETECTOR rec[-1] rec[-3]",
]


@pytest.mark.parametrize("text", PAULI_OBSERVABLES)
def test_pauli_observables_sample_as_stims(device, text):
    """Observable flips (and the records, which the Pauli targets leave alone) as Stim's samplers
    give them, joint patterns included."""
    assert_samples_as_stim(stim.Circuit(text), device)


@pytest.mark.parametrize("text", PAULI_OBSERVABLES)
def test_pauli_keys_of_cirq_circuits_sample_as_stims(device, text):
    """The same circuits through the Cirq front end: stimcirq writes a Pauli target as a
    CumulativeObservableAnnotation's pauli_keys ("X3", read after its moment's operations); the
    detection events and observable flips are Stim's for stimcirq's Stim circuit of it."""
    stimcirq = pytest.importorskip("stimcirq")
    circuit = stim.Circuit(text)
    try:
        cirq_circuit = stimcirq.stim_circuit_to_cirq_circuit(circuit)
        # stimcirq's own Stim circuit of it is the oracle (it writes X_ERROR(1) as a gate: no flip then)
        oracle = stimcirq.cirq_circuit_to_stim_circuit(cirq_circuit)
    except (TypeError, ValueError, NotImplementedError, KeyError) as exc:
        pytest.skip(f"stimcirq cannot convert it: {exc}")
    ours = QuasarqSimulator(seed=5, device=device).sample_detectors(cirq_circuit, OUR_SHOTS, append_observables=True)
    theirs = oracle.compile_detector_sampler(seed=5).sample(STIM_SHOTS, append_observables=True)
    assert_same_columns(ours, theirs, f"detection events and observable flips of\n{cirq_circuit}")
    if 0 < ours.shape[1] <= 8:
        assert_same_columns(patterns(ours), patterns(theirs), f"event patterns of\n{cirq_circuit}")


def test_pauli_keys_naming_no_qubit_are_refused():
    stimcirq = pytest.importorskip("stimcirq")
    import cirq

    from cirq_quasarq import errors

    q = cirq.LineQubit.range(2)
    for key in ("X2", "W0", "X"):
        circuit = cirq.Circuit(cirq.H(q[0]), cirq.CNOT(*q), stimcirq.CumulativeObservableAnnotation(
            pauli_keys=[key], observable_index=0), cirq.measure(*q, key="m"))
        with pytest.raises(errors.UnsupportedOperationError, match="pauli key"):
            QuasarqSimulator(device="cpu").sample_detectors(circuit, 10)


def test_pauli_targets_read_the_frame_exactly():
    """Stim's rule (observable ^= the frame's anticommutation with the Pauli, relative to a noiseless
    0) where it is exact: after a layer of single-qubit noise the flip of Z0 X1 Y2 is the parity of
    the X-type errors on 0, Z-type on 1, and one of each on 2."""
    circuit = stim.Circuit("H 1\nH_YZ 2\nX_ERROR(0.1) 0\nZ_ERROR(0.2) 1\nX_ERROR(0.3) 2\nOBSERVABLE_INCLUDE(0) Z0 X1 Y2")
    shots = 60_000
    flips = QuasarqSimulator(seed=6, device="cpu").sample_detectors(circuit, shots, append_observables=True)
    odd = 0.1 * 0.8 * 0.7 + 0.9 * 0.2 * 0.7 + 0.9 * 0.8 * 0.3 + 0.1 * 0.2 * 0.3
    assert_close(flips.mean(axis=0), np.array([odd]), shots)


def test_pauli_targets_change_no_record_and_no_m2d():
    """Records and Stim's m2d ignore Pauli targets: the program for records has the circuit's
    records alone, and m2d's conversion gives the record parts only."""
    circuit = stim.Circuit("X_ERROR(0.5) 0\nOBSERVABLE_INCLUDE(0) Z0\nM 0 1\nOBSERVABLE_INCLUDE(1) rec[-2] X1")
    program = compile_stim(circuit)
    assert program.num_records == 2 and [o.records.tolist() for o in program.observables] == [[], [0]]
    readout = program.with_pauli_readout()
    assert readout is program.with_pauli_readout() and readout.num_records == 4
    assert [o.records.tolist() for o in readout.observables] == [[2], [0, 3]]
    measured = np.array([[0, 0], [1, 0], [1, 1]], dtype=bool)
    theirs = circuit.compile_m2d_converter().convert(measurements=measured, append_observables=True)
    from cirq_quasarq.shots import Converter

    ours, = Converter(NumpyEngine(), program, append_observables=True).convert(np.packbits(measured, axis=1,
                                                                                          bitorder="little"))
    assert (np.unpackbits(ours, axis=1, count=2, bitorder="little").astype(bool) == theirs).all()


# -- scratch qubits never show -----------------------------------------------------------------------


def test_scratch_qubits_never_show_in_results():
    circuit = stim.Circuit("H 0\nCX 0 1\nMPAD 1\nHERALDED_PAULI_CHANNEL_1(0, 0, 0, 1) 1\nMPP X2*X2\n"
                           "OBSERVABLE_INCLUDE(0) X0\nOBSERVABLE_INCLUDE(3) Z1\nS 0")
    program = compile_stim(circuit)
    assert program.num_qubits > circuit.num_qubits == len(program.qubits) == 3
    assert program.num_records == circuit.num_measurements
    sim = QuasarqSimulator(seed=1, device="cpu")
    assert sim.sample_measurements(circuit, 10).shape == circuit.compile_sampler().sample(10).shape
    dets, obs = sim.sample_detectors(circuit, 10, separate_observables=True)
    theirs = circuit.compile_detector_sampler().sample(10, separate_observables=True)
    assert (dets.shape, obs.shape) == (theirs[0].shape, theirs[1].shape)
    trial = sim.simulate(circuit)
    assert {k: v.tolist() for k, v in trial.measurements.items()} == {"0": [1], "1": [1], "2": [0]}
    reference = stim.TableauSimulator()
    reference.do(circuit)  # Z on qubit 1 with probability 1: the same state
    state = trial.final_state
    assert len(state.qubits) == 3 and state.tableau.n == 3
    ours = stim.Tableau.from_stabilizers([stim.PauliString(str(s)) for s in state.stabilizers()])
    assert ours.to_stabilizers(canonicalize=True) == reference.canonical_stabilizers()
    overlap = np.vdot(reference.state_vector(endian="big"), state.state_vector())
    assert abs(abs(overlap) - 1) < 1e-6


def test_simulate_from_an_initial_state_with_scratch_qubits():
    circuit = stim.Circuit("CX 0 1\nMPAD 0\nHERALDED_ERASE(0) 1\nM 1")
    trial = QuasarqSimulator(seed=1, device="cpu").simulate(circuit, initial_state=0b10)  # qubit 0 in |1>
    assert {k: v.tolist() for k, v in trial.measurements.items()} == {"0": [0], "1": [0], "2": [1]}
    np.testing.assert_allclose(np.abs(trial.final_state.state_vector()), [0, 0, 0, 1], atol=1e-6)


# -- engines: the same bits for a key ------------------------------------------------------------------

CLASSICAL = """
R 0 1 2 3
X 2
REPEAT 5 {
    HERALDED_ERASE(0.2) 0 1
    HERALDED_PAULI_CHANNEL_1(0.05, 0.1, 0.05, 0.1) 2 3 0
    MPAD(0.1) 1 0
    MPP X4*X4
    CX 0 1 2 3
    X_ERROR(0.05) 3
    M 1 3
    OBSERVABLE_INCLUDE(0) rec[-1] Z2
    DETECTOR rec[-1] rec[-10]
    DETECTOR rec[-2]
}
OBSERVABLE_INCLUDE(1) Z0 Z1
M 0 1 2 3
DETECTOR rec[-1] rec[-2]
"""
ENGINES = {"plan": NumpyEngine(linear_frames=False), "walk": NumpyEngine(fast_paths=False),
           "folded, 1-word chunks": NumpyEngine(fast_paths="always", max_shot_words=1, linear_frames=False),
           "linear map": NumpyEngine(linear_frames="always")}


def assert_same_shots(got: np.ndarray, want: np.ndarray, shots: int, what: str = "") -> None:
    """Packed rows equal on the call's shots (bits past them are unspecified)."""
    assert got.shape == want.shape, what
    last = np.uint64((1 << (shots % 64)) - 1) if shots % 64 else ~np.uint64(0)
    np.testing.assert_array_equal(got[:, :-1], want[:, :-1], err_msg=what)
    np.testing.assert_array_equal(got[:, -1] & last, want[:, -1] & last, err_msg=what)


def _outputs(engine, program, seed, shots):
    sched = schedule(program)
    key = rng.make_key(seed)
    ref = engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
    records = engine.sample_frames(program, sched, key, ref, shots)
    parities = engine.sample_frames(program, sched, key, ref, shots,
                                    Parities.of(list(program.detectors) + list(program.observables), ref))
    return records, parities


@pytest.mark.parametrize("seed", range(3))
def test_numpy_modes_and_tableau_shots_give_the_same_bits(seed):
    """Frame mode's plan, walk, folds, chunks and linear map: the same records and parities; tableau
    mode shot by shot: the same records (every collapse of CLASSICAL is decided by the noise alone,
    whose draws tableau mode takes from frame mode's lanes)."""
    program = compile_stim(stim.Circuit(CLASSICAL)).with_pauli_readout()
    shots = 64 * 3 + 5
    outputs = {name: _outputs(engine, program, seed, shots) for name, engine in ENGINES.items()}
    (first, (records, parities)), *others = outputs.items()
    for name, (r, p) in others:
        assert_same_shots(r, records, shots, f"records: {name} != {first}")
        assert_same_shots(p, parities, shots, f"parities: {name} != {first}")
    circuit_only = compile_stim(stim.Circuit(CLASSICAL))  # tableau mode reads no frame: no Pauli readout
    tableau = NumpyEngine().sample_tableau_shots(circuit_only, schedule(circuit_only), rng.make_key(seed), shots)
    assert_same_shots(tableau, records[: circuit_only.num_records], shots, "tableau mode's shots")


@pytest.mark.gpu
@pytest.mark.parametrize("text", [CLASSICAL, HERALD_DETECTORS, DETERMINISTIC] + PAULI_OBSERVABLES[-3:])
def test_cuda_gives_numpys_bits(text):
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    cuda, numpy = CudaEngine(), NumpyEngine()
    program = compile_stim(stim.Circuit(text)).with_pauli_readout()
    shots = 64 * 3 + 5
    for seed in range(3):
        for got, want in zip(_outputs(cuda, program, seed, shots), _outputs(numpy, program, seed, shots)):
            assert_same_shots(got, want, shots, f"seed {seed} of\n{text}")
        sched = schedule(program)
        for repetition in (0, 7):
            got = cuda.run_tableau(program, sched, rng.make_key(seed), repetition=repetition)
            want = numpy.run_tableau(program, sched, rng.make_key(seed), repetition=repetition)
            np.testing.assert_array_equal(got.records, want.records)
            assert got.tableau.equals(want.tableau)


@pytest.mark.gpu
def test_the_simulator_on_the_gpu_gives_the_cpus_bits():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    for text in [CLASSICAL, HERALD_DETECTORS] + PAULI_OBSERVABLES[-3:]:
        circuit = stim.Circuit(text)
        for method, kwargs in (("sample_measurements", {}), ("sample_detectors", {"append_observables": True}),
                               ("sample_detectors", {"separate_observables": True, "bit_packed": True})):
            got = getattr(QuasarqSimulator(seed=8, device="gpu"), method)(circuit, 1000, **kwargs)
            want = getattr(QuasarqSimulator(seed=8, device="cpu"), method)(circuit, 1000, **kwargs)
            for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                np.testing.assert_array_equal(a, b, err_msg=f"{method} {kwargs} of\n{text}")
