"""Non-Pauli noise by its Pauli twirl (`QuasarqSimulator(non_pauli="twirl")`).

Oracles: closed forms of the twirl of amplitude / phase damping; the Pauli-transfer diagonal of the
original channel computed from `cirq.kraus` (the twirl must keep it); `cirq.DensityMatrixSimulator`
running the twirled channel written out as a Cirq Pauli channel; and the same circuit sampled with
that explicit channel (same seed, same bits)."""

from __future__ import annotations

import itertools
import math
import warnings

import cirq
import numpy as np
import pytest
import sympy

from cirq_quasarq import QuasarqSimulator, TwirlWarning, errors
from cirq_quasarq.compiler import clear_cache, compile_circuit
from cirq_quasarq.compiler import channels
from cirq_quasarq.core import paulis

Q = cirq.LineQubit.range(3)
SHOTS = 20_000


def twirled(gate):
    return channels.twirl_probabilities(cirq.kraus(gate), cirq.num_qubits(gate))


def ptm_diagonal(kraus, n):
    """<<P|E|P>> / 2^n for every Pauli string P: Tr(P E(P)) / 2^n with E(rho) = sum K rho K^dagger."""
    out = []
    for letters in itertools.product(range(4), repeat=n):
        p = paulis.pauli_matrix(letters)
        image = sum(k @ p @ k.conj().T for k in kraus)
        out.append(np.trace(p @ image).real / 2**n)
    return np.array(out)


def explicit(gate):
    """The twirl of `gate` written out as a Cirq Pauli channel our compiler takes as exact."""
    probs = twirled(gate)
    n = cirq.num_qubits(gate)
    if n == 1:
        return cirq.asymmetric_depolarize(probs[(1,)], probs[(2,)], probs[(3,)])
    return cirq.MixedUnitaryChannel([(p, paulis.pauli_matrix(letters)) for letters, p in probs.items() if p > 0])


def thermal_kraus():
    model = cirq.devices.ThermalNoiseModel(
        qubits={Q[0]}, gate_durations_ns={cirq.XPowGate: 40.0}, heat_rate_GHz={Q[0]: 1e-4},
        cool_rate_GHz={Q[0]: 2e-3}, dephase_rate_GHz={Q[0]: 3e-3}, require_physical_tag=False)
    ops = [op for m in model.noisy_moments(cirq.Circuit(cirq.X(Q[0])), [Q[0]]) for op in cirq.flatten_to_ops(m)]
    (op,) = [op for op in ops if isinstance(op.gate, cirq.KrausChannel)]
    return op.gate


def random_channel(n, seed):
    """Kraus operators of a random CPTP map: a random unitary on n qubits and one ancilla."""
    u = cirq.testing.random_unitary(2 ** (n + 1), random_state=seed)
    return cirq.KrausChannel([u[:, :2**n].reshape(2**n, 2, 2**n)[:, a, :] for a in range(2)])


AD2 = cirq.KrausChannel([np.kron(a, b) for a in cirq.kraus(cirq.amplitude_damp(0.2))
                         for b in cirq.kraus(cirq.amplitude_damp(0.35))])
CHANNELS = [cirq.amplitude_damp(0.3), cirq.generalized_amplitude_damp(0.2, 0.4), cirq.phase_damp(0.45),
            thermal_kraus(), random_channel(1, 1), AD2, random_channel(2, 2)]


@pytest.mark.parametrize("gamma", [0.0, 0.01, 0.3, 0.9, 1.0])
def test_closed_forms(gamma):
    ad = twirled(cirq.amplitude_damp(gamma))
    assert ad[(1,)] == pytest.approx(gamma / 4, abs=1e-15) and ad[(2,)] == pytest.approx(gamma / 4, abs=1e-15)
    assert ad[(3,)] == pytest.approx((2 - gamma - 2 * math.sqrt(1 - gamma)) / 4, abs=1e-15)
    pd = twirled(cirq.phase_damp(gamma))
    assert pd[(3,)] == pytest.approx((1 - math.sqrt(1 - gamma)) / 2, abs=1e-15)
    assert pd[(1,)] == pytest.approx(0, abs=1e-15) and pd[(2,)] == pytest.approx(0, abs=1e-15)
    # generalized amplitude damping: the same twirl whatever its p (the X and Y parts do not see it)
    assert twirled(cirq.generalized_amplitude_damp(0.3, gamma)) == pytest.approx(ad, abs=1e-15)


@pytest.mark.parametrize("gate", CHANNELS, ids=repr)
def test_the_twirl_keeps_the_pauli_transfer_diagonal(gate):
    n = cirq.num_qubits(gate)
    original = ptm_diagonal(cirq.kraus(gate), n)
    twirl = ptm_diagonal(cirq.kraus(explicit(gate)), n)
    assert np.allclose(original, twirl, atol=1e-12)
    probs = twirled(gate)
    assert min(probs.values()) >= 0 and sum(probs.values()) == pytest.approx(1, abs=1e-12)


def test_a_two_qubit_channel_twirls_to_fifteen_outcomes():
    spec = channels.twirl(AD2, 2)
    assert (spec.opname, spec.arity, len(spec.probs)) == ("PAULI_CHANNEL_2", 2, 15)
    assert all(p > 0 for p in spec.probs)
    one, two = twirled(cirq.amplitude_damp(0.2)), twirled(cirq.amplitude_damp(0.35))
    for letters, p in zip(spec.paulis, spec.probs):  # a product channel twirls to the product of twirls
        assert p == pytest.approx(one[(letters[0],)] * two[(letters[1],)], abs=1e-15)


def _circuit(gate, prep=True):
    """A small circuit in which the channel acts on varied states, then everything measured."""
    n = cirq.num_qubits(gate)
    qs = Q[:n]
    ops = [cirq.X(Q[0]), cirq.H(Q[1]), cirq.CNOT(Q[1], Q[2])] if prep else []
    return cirq.Circuit(ops + [gate.on(*qs), cirq.H(Q[1]), gate.on(*qs), cirq.measure(*Q, key="m")])


@pytest.mark.parametrize("gate", CHANNELS, ids=repr)
def test_twirled_sampling_equals_the_explicit_channel_and_the_density_matrix(gate):
    ours = QuasarqSimulator(seed=5, device="cpu", non_pauli="twirl")
    with pytest.warns(TwirlWarning) if "phase_damp" not in repr(gate) else warnings.catch_warnings():
        bits = ours.run(_circuit(gate), repetitions=SHOTS).measurements["m"]
    written = _circuit(explicit(gate))
    same = QuasarqSimulator(seed=5, device="cpu").run(written, repetitions=SHOTS).measurements["m"]
    assert np.array_equal(bits, same)
    # the exact distribution of the written-out circuit, against our sampled frequencies (6 sigma)
    rho = cirq.DensityMatrixSimulator().simulate(written[:-1], qubit_order=Q).final_density_matrix
    exact = np.real(np.diag(rho))
    counts = np.bincount(bits @ (1 << np.arange(len(Q)))[::-1], minlength=2 ** len(Q)) / SHOTS
    sigma = np.sqrt(np.maximum(exact * (1 - exact), 1e-12) / SHOTS)
    assert (np.abs(counts - exact) <= 6 * sigma + 1e-12).all(), (counts, exact)


def test_the_default_refuses_naming_the_opt_in_and_the_moment():
    circuit = _circuit(cirq.amplitude_damp(0.1))
    with pytest.raises(errors.UnsupportedNoiseError, match=r"at moment 1: .*non_pauli='twirl'"):
        QuasarqSimulator(device="cpu").run(circuit)


def test_non_trace_preserving_channels_are_refused_even_twirled():
    lossy = cirq.KrausChannel([np.diag([1.0, 0.8])], validate=False)
    with pytest.raises(errors.UnsupportedNoiseError, match="trace-preserving"):
        QuasarqSimulator(device="cpu", non_pauli="twirl").run(cirq.Circuit(lossy.on(Q[0]), cirq.measure(Q[0])))


def test_unitaries_are_never_twirled():
    with pytest.raises(errors.NonCliffordError):
        QuasarqSimulator(device="cpu", non_pauli="twirl").run(cirq.Circuit(cirq.T(Q[0]), cirq.measure(Q[0])))


def test_the_option_is_checked():
    with pytest.raises(errors.InvalidInputError, match="non_pauli"):
        QuasarqSimulator(device="cpu", non_pauli="approximate")


def test_each_twirled_channel_is_named_once_per_compilation():
    gate = cirq.amplitude_damp(0.2)
    circuit = cirq.Circuit([gate.on(q) for q in Q] * 3 + [cirq.measure(*Q)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_circuit(circuit, non_pauli="twirl")
    assert [str(w.message).count("amplitude_damp") for w in caught if w.category is TwirlWarning] == [1]


def test_a_noise_model_of_thermal_relaxation():
    model = cirq.devices.ThermalNoiseModel(
        qubits=set(Q), gate_durations_ns={cirq.XPowGate: 40.0, cirq.HPowGate: 40.0, cirq.CXPowGate: 80.0,
                                          cirq.MeasurementGate: 400.0},
        heat_rate_GHz={q: 1e-4 for q in Q}, cool_rate_GHz={q: 2e-3 for q in Q},
        dephase_rate_GHz={q: 3e-3 for q in Q}, require_physical_tag=False)
    circuit = cirq.Circuit(cirq.X(Q[0]), cirq.H(Q[1]), cirq.CNOT(Q[1], Q[2]), cirq.X(Q[2]), cirq.measure(*Q, key="m"))
    with pytest.raises(errors.UnsupportedNoiseError, match="non_pauli"):
        QuasarqSimulator(device="cpu", noise=model).run(circuit)
    with pytest.warns(TwirlWarning):
        bits = QuasarqSimulator(seed=2, device="cpu", noise=model, non_pauli="twirl").run(
            circuit, repetitions=SHOTS).measurements["m"]
    noisy = cirq.Circuit(model.noisy_moments(circuit, Q))
    written = noisy.map_operations(lambda op: explicit(op.gate).on(*op.qubits)
                                   if isinstance(op.gate, cirq.KrausChannel) else op)
    assert any(isinstance(op.gate, cirq.KrausChannel) for op in noisy.all_operations())
    same = QuasarqSimulator(seed=2, device="cpu").run(written, repetitions=SHOTS).measurements["m"]
    assert np.array_equal(bits, same)
    rho = cirq.DensityMatrixSimulator().simulate(cirq.drop_terminal_measurements(written),
                                                 qubit_order=Q).final_density_matrix
    marginal = [sum(np.real(rho[i, i]) for i in range(8) if (i >> (2 - k)) & 1) for k in range(3)]
    sigma = np.sqrt(np.maximum(np.multiply(marginal, np.subtract(1, marginal)), 1e-12) / SHOTS)
    assert (np.abs(bits.mean(axis=0) - marginal) <= 6 * sigma).all(), (bits.mean(axis=0), marginal)


class _Damp(cirq.Gate):
    """Amplitude damping whose gamma is a symbol until resolved (the parametrized path)."""

    def __init__(self, gamma):
        self.gamma = gamma

    def _num_qubits_(self):
        return 1

    def _is_parameterized_(self):
        return cirq.is_parameterized(self.gamma)

    def _parameter_names_(self):
        return cirq.parameter_names(self.gamma)

    def _resolve_parameters_(self, resolver, recursive):
        return cirq.amplitude_damp(float(resolver.value_of(self.gamma, recursive)))


def test_a_parametrized_channel_is_twirled_per_resolution():
    g = sympy.Symbol("g")
    circuit = cirq.Circuit(cirq.X(Q[0]), _Damp(g).on(Q[0]), cirq.measure(Q[0], key="m"))
    sim = QuasarqSimulator(seed=4, device="cpu", non_pauli="twirl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TwirlWarning)
        results = sim.run_sweep(circuit, cirq.Points("g", [0.1, 0.6]), repetitions=SHOTS)
    for gamma, result in zip([0.1, 0.6], results):
        rate = result.measurements["m"].mean()
        flip = gamma / 2  # X or Y of the twirl flips |1>
        assert abs(rate - (1 - flip)) <= 6 * math.sqrt(flip * (1 - flip) / SHOTS)


def test_twirled_and_refused_compiles_never_share_a_cache_entry():
    clear_cache()
    circuit = _circuit(cirq.amplitude_damp(0.2))
    with pytest.warns(TwirlWarning):
        twirled_program = compile_circuit(circuit, non_pauli="twirl")
    assert compile_circuit(circuit, non_pauli="twirl") is twirled_program  # cached
    with pytest.raises(errors.UnsupportedNoiseError):
        compile_circuit(circuit)
    clear_cache()
    with pytest.raises(errors.UnsupportedNoiseError):
        QuasarqSimulator(device="cpu").run(circuit)
    with pytest.warns(TwirlWarning):
        QuasarqSimulator(device="cpu", non_pauli="twirl").run(circuit)


def test_a_surface_code_with_amplitude_damping_idles_equals_its_twirl_written_out():
    """A Cirq surface-code memory experiment (stimcirq's annotations) with amplitude damping on every
    qubit after each moment: its detection events and observables under non_pauli="twirl" are the
    bits of the same circuit with the twirled channels written out by hand (closed form, same seed),
    and the detection rate moves with the damping (the noise is not dropped)."""
    stim = pytest.importorskip("stim")
    stimcirq = pytest.importorskip("stimcirq")
    code = stimcirq.stim_circuit_to_cirq_circuit(
        stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3))
    rates = {}
    for gamma in (0.0, 0.02):
        damped = code.with_noise(cirq.ConstantQubitNoiseModel(cirq.amplitude_damp(gamma)))
        # by hand: amplitude damping's twirl is X, Y with gamma / 4 each, Z with (2 - gamma - 2 sqrt(1 - gamma)) / 4
        by_hand = cirq.asymmetric_depolarize(gamma / 4, gamma / 4, (2 - gamma - 2 * math.sqrt(1 - gamma)) / 4)
        written = damped.map_operations(
            lambda op: by_hand.on(*op.qubits) if isinstance(op.gate, cirq.AmplitudeDampingChannel) else op)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TwirlWarning)
            dets, obs = QuasarqSimulator(seed=9, device="cpu", non_pauli="twirl").sample_detectors(
                damped, 4000, separate_observables=True)
        want_dets, want_obs = QuasarqSimulator(seed=9, device="cpu").sample_detectors(
            written, 4000, separate_observables=True)
        assert np.array_equal(dets, want_dets) and np.array_equal(obs, want_obs), gamma
        rates[gamma] = dets.mean()
    assert rates[0.0] == 0 and rates[0.02] > 0.01, rates
