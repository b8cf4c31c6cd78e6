"""Frame mode on every engine: every sampled shot is a possible outcome (replayed in stim with
postselection), marginals match stim's sampler, noise rates match their probabilities, and the
results do not depend on how shots are chunked."""

import numpy as np
import pytest

from cirq_quasarq.core import rng
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.core.program import ProgramBuilder
from cirq_quasarq.results import unpack_records
from cirq_quasarq.schedule import schedule

from .programs import random_program

# Binomial checks use 6 standard deviations: a false failure has probability < 2e-9 per check.
SIGMAS = 6


def sample(engine, program, shots, seed):
    sched = schedule(program)
    ref = engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
    packed = engine.sample_frames(program, sched, rng.make_key(seed), ref, shots)
    return unpack_records(packed, shots)


def test_x_then_measure_gives_one(engine):
    b = ProgramBuilder(2)
    b.gate("X", 0)
    b.gate("H", 1)
    b.next_step()
    b.measure(0)
    b.measure(1)
    bits = sample(engine, b.build(), 1000, 3)
    assert bits[:, 0].all()
    assert 350 < bits[:, 1].sum() < 650


@pytest.mark.parametrize("seed", range(12))
def test_every_shot_is_a_possible_outcome(engine, seed):
    stim = pytest.importorskip("stim")
    n = 3 + seed % 9
    program, circuit = random_program(n, 8, seed, collapse=0.7)
    bits = sample(engine, program, 64, seed)
    sched = schedule(program)
    # Records are numbered in program order; stim's circuit has the same measurement order.
    for shot in bits[:16]:
        sim = stim.TableauSimulator()
        sim.set_num_qubits(n)
        k = 0
        for inst in circuit:
            for t in inst.targets_copy():
                q = t.value
                if inst.name in ("M", "MR"):
                    sim.postselect_z(q, desired_value=bool(shot[k]))  # raises if impossible
                    k += 1
                    sim.measure(q)
                    if inst.name == "MR":
                        sim.reset(q)
                elif inst.name == "R":
                    sim.reset(q)
            if inst.name not in ("M", "MR", "R"):
                sim.do(stim.Circuit(str(inst)))
        assert k == program.num_records
    del sched


@pytest.mark.parametrize("seed", range(4))
def test_marginals_match_stim(engine, seed):
    program, circuit = random_program(12, 10, 50 + seed, collapse=0.8)
    shots = 20000
    ours = sample(engine, program, shots, seed).mean(axis=0)
    theirs = circuit.compile_sampler(seed=seed).sample(shots).mean(axis=0)
    # Each record's marginal is 0, 1/2 or 1 in a noiseless stabilizer circuit.
    for mean_ours, mean_theirs in zip(ours, theirs):
        exact = round(mean_theirs * 2) / 2
        assert abs(mean_ours - exact) < SIGMAS * np.sqrt(0.25 / shots) + 1e-12


def test_noise_rates(engine):
    b = ProgramBuilder(3)
    p = 0.013
    b.noise("X_ERROR", [0], b.channel_id(1, [p], [[1]]))
    b.noise("DEPOLARIZE1", [1], b.channel_id(1, [0.1, 0.1, 0.1], [[1], [2], [3]]))
    b.gate("H", 2)
    b.next_step()
    b.noise("Z_ERROR", [2], b.channel_id(1, [0.3], [[3]]))
    b.next_step()
    b.gate("H", 2)
    b.next_step()
    for q in range(3):
        b.measure(q)
    shots = 200_000
    bits = sample(engine, b.build(), shots, 11)
    for rate, expected in zip(bits.mean(axis=0), [p, 0.2, 0.3]):
        assert abs(rate - expected) < SIGMAS * np.sqrt(expected * (1 - expected) / shots)


def test_same_seed_same_bits_and_chunks_do_not_matter(engine):
    program, _ = random_program(40, 8, 5, collapse=0.9, noise=True)
    sched = schedule(program)
    ref = engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
    a = engine.sample_frames(program, sched, rng.make_key(9), ref, 5000)
    b = engine.sample_frames(program, sched, rng.make_key(9), ref, 5000)
    c = NumpyEngine(max_shot_words=3).sample_frames(program, sched, rng.make_key(9), ref, 5000)
    d = engine.sample_frames(program, sched, rng.make_key(10), ref, 5000)
    assert np.array_equal(unpack_records(a, 5000), unpack_records(b, 5000))
    assert np.array_equal(unpack_records(a, 5000), unpack_records(c, 5000))
    assert not np.array_equal(unpack_records(a, 5000), unpack_records(d, 5000))


def test_noisy_rates_match_stim(engine):
    program, circuit = random_program(10, 6, 77, collapse=0.9, noise=True)
    shots = 40000
    ours = sample(engine, program, shots, 1).mean(axis=0)
    theirs = circuit.compile_sampler(seed=2).sample(shots).mean(axis=0)
    for a, b in zip(ours, theirs):
        assert abs(a - b) < SIGMAS * np.sqrt(0.5 / shots)


def test_numpy_engine_reports_memory_it_lacks():
    from cirq_quasarq import OutOfMemoryError

    program, _ = random_program(30, 3, 1)
    tiny = NumpyEngine(memory_fraction=1e-12)
    sched = schedule(program)
    with pytest.raises(OutOfMemoryError, match="30 qubits"):
        tiny.run_tableau(program, sched, rng.make_key(0))
    ref = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    with pytest.raises(OutOfMemoryError, match="1000 shots of 30 qubits"):
        tiny.sample_frames(program, sched, rng.make_key(0), ref, 1000)
