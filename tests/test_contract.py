"""The input contract (cirq_quasarq/contract.py): each bad input of docs/reliability.md gets its named
error before any heavy work, results beyond host memory are refused with the number, long work is
announced before it starts."""

import pickle
import time
import warnings

import cirq
import numpy as np
import pytest
import sympy

import cirq_quasarq
from cirq_quasarq import QuasarqSimulator, errors, noise
from cirq_quasarq.core import memory

Q = cirq.LineQubit.range(4)
CIRCUIT = cirq.Circuit(cirq.H(Q[0]), cirq.CX(Q[0], Q[1]), cirq.measure(*Q[:2], key="m"))


def _loop(reps, measure_inside=True):
    body = [cirq.H(Q[0]), cirq.CNOT(Q[0], Q[1])]
    if measure_inside:
        body.append(cirq.measure(Q[0], key="m"))
    body += [cirq.reset(Q[0]), cirq.X(Q[1])]
    return cirq.Circuit(cirq.CircuitOperation(cirq.FrozenCircuit(*body), repetitions=reps),
                        cirq.measure(Q[1], key="z"))


CALLS = {
    "run": lambda sim, r: sim.run(CIRCUIT, repetitions=r),
    "run_sweep": lambda sim, r: sim.run_sweep(CIRCUIT, cirq.UnitSweep, repetitions=r),
    "sample": lambda sim, r: sim.sample(CIRCUIT, repetitions=r),
    "sample_measurements": lambda sim, r: sim.sample_measurements(CIRCUIT, r),
    "sample_detectors": lambda sim, r: sim.sample_detectors(pytest.importorskip("stim").Circuit("M 0\nDETECTOR rec[-1]"), r),
    "sample_packed": lambda sim, r: sim.sample_packed(sim.compile(CIRCUIT), r),
    "step sample": lambda sim, r: next(iter(sim.simulate_moment_steps(CIRCUIT))).sample(Q[:2], repetitions=r),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("bad", [-1, 1.5, "10", True, np.bool_(False), None, 2**0.5, float("nan")])
def test_bad_repetitions_are_named(call, bad):
    with pytest.raises(errors.InvalidRepetitionsError, match="repetitions"):
        CALLS[call](QuasarqSimulator(seed=1, device="cpu"), bad)


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("good", [np.int64(3), np.int32(3), np.uint8(3), 3.0, np.float64(3.0)])
def test_integral_repetitions_of_any_type(call, good):
    CALLS[call](QuasarqSimulator(seed=1, device="cpu"), good)


def test_repetitions_errors_are_value_and_type_errors():
    sim = QuasarqSimulator(device="cpu")
    with pytest.raises(ValueError):
        sim.run(CIRCUIT, repetitions=-1)
    with pytest.raises(TypeError):
        sim.run(CIRCUIT, repetitions="10")


@pytest.mark.parametrize("bad", ["abc", 1.5, [1, 2], True])
def test_bad_seeds_are_named(bad):
    with pytest.raises(errors.InvalidSeedError, match="seed"):
        QuasarqSimulator(seed=bad)


@pytest.mark.parametrize("seed", [None, 0, 2**40, -5, np.int64(7), np.random.RandomState(1),
                                  np.random.default_rng(1)])
def test_cirqs_seeds_are_taken(seed):
    QuasarqSimulator(seed=seed, device="cpu").run(CIRCUIT, repetitions=3)


@pytest.mark.parametrize("seed", [0, 1, 2**40, -5, np.int64(7)])
def test_an_int_seed_gives_what_its_random_state_gives(seed):
    """An int seed's RandomState is made when first needed (the first key comes from one state
    re-seeded in place): every call's shots, and the state itself once asked for, are those of
    RandomState(seed) given at once, whether the state is first asked for before, after or between
    the calls, with simulators of other seeds drawing first keys in between."""
    state = lambda: np.random.RandomState(int(seed) & 0xFFFFFFFF)  # noqa: E731
    stim = pytest.importorskip("stim")
    circuit = stim.Circuit("H 0 1\nCX 0 2\nM 0 1 2\nH 0\nM 0")
    for touch_after in (0, 1, 2, 3):
        ours, theirs = QuasarqSimulator(seed=seed, device="cpu"), QuasarqSimulator(seed=state(), device="cpu")
        for call in range(3):
            QuasarqSimulator(seed=int(seed) + 1, device="cpu")._next_key()  # another seed's first key
            if call == touch_after:
                assert ours._prng.randint(0, 2**31) == theirs._prng.randint(0, 2**31)
            assert np.array_equal(ours.sample_measurements(circuit, 100, bit_packed=True),
                                  theirs.sample_measurements(circuit, 100, bit_packed=True)), (touch_after, call)
        assert ours.run(CIRCUIT, repetitions=5) == theirs.run(CIRCUIT, repetitions=5)


@pytest.mark.parametrize("matrix, match, cirq_rejects", [
    (np.array([[0.8, 0.1], [0.1, 0.9]]), "row 0 .* sums to 0.9", True),
    (np.array([[1.2, -0.2], [0.0, 1.0]]), "outside", True),
    (np.eye(4), "shape", False),  # Cirq samples with it anyway; we name it
])
def test_confusion_maps_are_checked_not_renormalised(matrix, match, cirq_rejects):
    circuit = cirq.Circuit(cirq.measure(Q[0], key="m", confusion_map={(0,): matrix}))
    with pytest.raises(errors.InvalidConfusionMapError, match=match):
        QuasarqSimulator(device="cpu").run(circuit)
    if cirq_rejects:
        with pytest.raises(ValueError):  # as Cirq's own simulator (ours is a ValueError too)
            cirq.Simulator().run(circuit)


def test_swept_noise_probabilities_resolve_like_gate_parameters():
    p = sympy.Symbol("p")
    circuit = cirq.Circuit(noise.bit_flip(p).on(Q[0]), noise.depolarize(p).on(Q[1]),
                           noise.asymmetric_depolarize(p_x=p / 2).on(Q[2]), cirq.measure(*Q[:3], key="m"))
    shots = 40_000
    results = QuasarqSimulator(seed=3, device="cpu").run_sweep(circuit, cirq.Points("p", [0.0, 0.3]),
                                                               repetitions=shots)
    want = [[0, 0, 0], [0.3, 0.2, 0.15]]  # flip rates: bit_flip p, depolarize 2p/3, X at p/2
    for result, rates in zip(results, want):
        got = result.measurements["m"].mean(axis=0)
        sigma = np.sqrt(np.maximum(np.array(rates) * (1 - np.array(rates)), 1e-12) / shots)
        assert np.all(np.abs(got - rates) <= 6 * sigma + 1e-12), (got, rates)
    resolved = cirq.resolve_parameters(circuit, {"p": 0.1})
    assert isinstance(resolved[0].operations[0].gate, cirq.BitFlipChannel)  # Cirq's own channel again
    pickle.loads(pickle.dumps(circuit))


@pytest.mark.parametrize("gate", [noise.depolarize(sympy.Symbol("p")), cirq.X.with_probability(sympy.Symbol("p"))])
def test_swept_probability_out_of_range_is_named(gate):
    circuit = cirq.Circuit(gate.on(Q[0]), cirq.measure(Q[0], key="m"))
    with pytest.raises(errors.InvalidProbabilityError, match="moment 0"):
        QuasarqSimulator(device="cpu").run(circuit, {"p": 1.5})


def test_results_beyond_host_memory_are_refused_up_front(monkeypatch):
    stim = pytest.importorskip("stim")
    monkeypatch.setattr(memory, "host_headroom", lambda: memory.Headroom(8 << 30, "cgroup memory.max"))
    sim = QuasarqSimulator(device="cpu")
    four = cirq.Circuit(cirq.measure(*Q, key="m"))
    t0 = time.perf_counter()
    with pytest.raises(errors.OutOfMemoryError, match=r"run\(\) of 3,000,000,000 repetitions .* GiB .*under cgroup memory.max"):
        sim.run(four, repetitions=3e9)  # 12 GiB of Cirq arrays: 8x the packed records
    with pytest.raises(errors.OutOfMemoryError, match="bit_packed=True"):
        sim.sample_measurements(four, 3_000_000_000)
    with pytest.raises(errors.OutOfMemoryError, match="sample_detectors"):
        sim.sample_detectors(stim.Circuit("M 0 1 2 3\n" + "DETECTOR rec[-1]\n" * 8), 10_000_000_000)
    assert time.perf_counter() - t0 < 5  # refused, not attempted
    sim.sample_measurements(four, 3_000_000, bit_packed=True)  # what fits still runs


def test_stabilizers_beyond_host_memory_are_refused(monkeypatch):
    state = QuasarqSimulator(device="cpu").simulate(cirq.Circuit(cirq.H.on_each(cirq.LineQubit.range(3000)))).final_state
    monkeypatch.setattr(memory, "host_headroom", lambda: memory.Headroom(1 << 20, "RLIMIT_DATA"))
    with pytest.raises(errors.OutOfMemoryError, match="stabilizers.*under RLIMIT_DATA"):
        state.stabilizers()


def test_a_loop_whose_records_cannot_be_listed_is_refused_at_compile():
    t0 = time.perf_counter()
    with pytest.raises(errors.OutOfMemoryError, match="10,000,000,000 repetitions .* GiB"):
        QuasarqSimulator(device="cpu").run(_loop(10**10), repetitions=10)
    assert time.perf_counter() - t0 < 5


def test_long_work_is_announced_before_it_starts():
    with warnings.catch_warnings():
        warnings.simplefilter("error", errors.LongRunWarning)  # the warning stops the call before work
        t0 = time.perf_counter()
        with pytest.raises(errors.LongRunWarning, match="estimated to take about"):
            QuasarqSimulator(device="cpu").run(_loop(10**9, measure_inside=False), repetitions=10)
        assert time.perf_counter() - t0 < 5
        QuasarqSimulator(device="cpu").run(_loop(10, measure_inside=False), repetitions=10)  # short: silent


def test_error_types_are_exported_and_documented():
    for name in ("InvalidRepetitionsError", "InvalidSeedError", "InvalidConfusionMapError",
                 "InvalidProbabilityError", "OutOfMemoryError", "LongRunWarning"):
        assert getattr(cirq_quasarq, name) is getattr(errors, name)
        assert getattr(errors, name).__doc__
