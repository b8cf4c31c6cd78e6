"""Frame mode through the GF(2) map from draws to outputs (engines/numpy/linear.py) against the
frame plan it stands for, bit for bit: records and parities, every chunking and first word, loops
(folded and walked), noise of every arity, and map widths around a word of inputs."""

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.core import rng
from cirq_quasarq.core.parities import Parities
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.engines.numpy import linear
from cirq_quasarq.engines.numpy.frames import frame_plan
from cirq_quasarq.schedule import schedule
from cirq_quasarq.simulator import prepared

from .test_compiled_frames import _loop_circuit

# every test here runs both ways: all NumPy, and with the compiled draws and scatter (core/native.py)
pytestmark = pytest.mark.usefixtures("native_path")

PLAN = NumpyEngine(linear_frames=False)
WALKED = NumpyEngine(fast_paths=False)


def _reference(program, sched):
    return WALKED.run_tableau(program, sched, rng.make_key(0), reference=True).records


def _both(program, shots, seed, parities=None, **engine):
    """(the plan's outputs, the map's outputs) of one sample_frames call."""
    sched = schedule(program)
    ref = _reference(program, sched)
    if parities == "detectors":
        parities = Parities.of(list(program.detectors) + list(program.observables), ref)
    want = NumpyEngine(linear_frames=False, **engine).sample_frames(program, sched, rng.make_key(seed), ref, shots,
                                                                    parities)
    got = NumpyEngine(linear_frames="always", **engine).sample_frames(program, sched, rng.make_key(seed), ref, shots,
                                                                      parities)
    return want, got


def _code(task: str, d: int, p: float) -> stim.Circuit:
    return stim.Circuit.generated(task, distance=d, rounds=d, after_clifford_depolarization=p,
                                  before_round_data_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p)


CODES = [("surface_code:rotated_memory_x", 3, 0.01), ("surface_code:rotated_memory_z", 5, 1e-3),
         ("surface_code:unrotated_memory_x", 3, 0.02), ("repetition_code:memory", 7, 0.05),
         ("color_code:memory_xyz", 3, 0.01)]


@pytest.mark.parametrize("task,d,p", CODES)
@pytest.mark.parametrize("outputs", [None, "detectors"])
def test_map_equals_plan_on_codes(task, d, p, outputs):
    program = QuasarqSimulator().compile(_code(task, d, p))
    for shots, words in ((1, 1 << 14), (65, 1), (1000, 3), (4096, 1 << 14)):
        want, got = _both(program, shots, seed=shots, parities=outputs, max_shot_words=words)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(8))
def test_map_equals_plan_on_random_loops(seed):
    """Random bodies with noise and collapses in loops (nested on odd seeds), folded or walked."""
    program = QuasarqSimulator().compile(_loop_circuit(seed, nested=seed % 2 == 1, count=2 + seed))
    for fast in (True, "always"):
        want, got = _both(program, 64 * 5 + 3, seed, fast_paths=fast)
        np.testing.assert_array_equal(got, want)


def test_map_keeps_the_absolute_shot_words():
    """A call from word 7 on gives what words 7.. of a longer call give (streams are keyed by word)."""
    program = QuasarqSimulator().compile(_code("surface_code:rotated_memory_z", 3, 0.02))
    sched = schedule(program)
    ref = _reference(program, sched)
    engine = NumpyEngine(linear_frames="always")
    whole = engine.sample_frames(program, sched, rng.make_key(3), ref, 64 * 10)
    part = engine.sample_frames(program, sched, rng.make_key(3), ref, 64 * 3, first_word=7)
    np.testing.assert_array_equal(part, whole[:, 7:10])


@pytest.mark.parametrize("qubits,measured,noisy", [(24, 15, 0), (24, 16, 0), (24, 17, 0), (21, 21, 1),
                                                   (43, 41, 0), (43, 42, 0), (43, 43, 0), (32, 32, 16),
                                                   (40, 40, 5)])
def test_map_widths_around_a_word_of_inputs(qubits, measured, noisy):
    """2 qubits + measured + 2 noisy inputs (initial frames, the two measurements' collapses,
    X_ERROR bits): 63 to 130, across one and two words of inputs."""
    c = stim.Circuit()
    c.append("H", range(qubits))
    c.append("CX", [q for pair in zip(range(0, qubits - 1, 2), range(1, qubits, 2)) for q in pair])
    if noisy:
        c.append("X_ERROR", range(noisy), 0.3)
    c.append("H", range(0, qubits, 3))
    c.append("M", range(measured))
    c.append("H", range(qubits))
    c.append("M", range(qubits))
    program = QuasarqSimulator().compile(c)
    plan = frame_plan(program, schedule(program))
    made = linear.LinearFrames(program, plan)
    assert made.inputs.num_inputs == 2 * qubits + measured + 2 * noisy
    want, got = _both(program, 200, seed=qubits + measured)
    np.testing.assert_array_equal(got, want)


def test_default_engine_takes_the_map_from_the_second_call():
    """A call whose map would cost more than the call itself runs the plan; the next call finds
    the map; both give the plan's bits."""
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache

    clear_stim_cache()  # a Program of its own: an earlier test's calls would have made the cached one's map
    circuit = _code("surface_code:rotated_memory_z", 3, 0.01)
    program = QuasarqSimulator().compile(circuit)
    sched = prepared(program)  # the program's own schedule: its plan (and map) are kept
    ref = _reference(program, sched)
    plan = frame_plan(program, sched)
    engine = NumpyEngine()
    for call in range(2):
        got = engine.sample_frames(program, sched, rng.make_key(call), ref, 64)
        np.testing.assert_array_equal(got, PLAN.sample_frames(program, sched, rng.make_key(call), ref, 64))
        assert bool(plan.__dict__.get("_linear")) == (call == 1)


def test_a_large_call_of_detection_events_takes_the_map_only_with_the_compiled_scatter(native_path):
    """Where each word's frame updates dominate the plan's call (16,384 shots), NumPy's map would cost
    as much per lane as the plan does per update, so the plan takes the call; the compiled scatter
    costs nanoseconds a lane, so the map does. The plan's bits either way."""
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache

    clear_stim_cache()
    program = QuasarqSimulator().compile(_code("surface_code:rotated_memory_z", 7, 1e-3))
    sched = prepared(program)
    ref = _reference(program, sched)
    parities = Parities.of(list(program.detectors) + list(program.observables), ref)
    plan = frame_plan(program, sched)
    engine = NumpyEngine()
    for call in range(3):
        got = engine.sample_frames(program, sched, rng.make_key(call), ref, 1 << 14, parities)
        np.testing.assert_array_equal(got, PLAN.sample_frames(program, sched, rng.make_key(call), ref, 1 << 14, parities))
    assert bool(plan.__dict__.get("_linear")) == (native_path == "native")


def test_programs_with_feedback_or_confusion_keep_the_plan():
    c = stim.Circuit("H 0\nM 0\nCX rec[-1] 1\nX_ERROR(0.2) 1\nM 1")
    program = QuasarqSimulator().compile(c)
    assert not linear.applies(program)
    want, got = _both(program, 300, seed=4)
    np.testing.assert_array_equal(got, want)
    assert not frame_plan(program, schedule(program)).__dict__.get("_linear")


def test_simulator_outputs_unchanged_by_the_map():
    """Through the public calls, twice each (the map is found on the second): plan == map."""
    circuit = _code("surface_code:rotated_memory_x", 3, 0.01)
    outs = {}
    for mode in (False, True):
        sim = QuasarqSimulator(seed=11, device="cpu")
        sim.engine = NumpyEngine(linear_frames=mode)
        outs[mode] = [sim.sample_measurements(circuit, 300, bit_packed=True) for _ in range(2)]
        outs[mode] += [x for _ in range(2) for x in sim.sample_detectors(circuit, 300, separate_observables=True)]
    for a, b in zip(outs[False], outs[True]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("text", ["DETECTOR\nOBSERVABLE_INCLUDE(1)", "R 0 1\nX_ERROR(0.5) 0", "H 0\nM 0\nDETECTOR rec[-1]"])
def test_map_of_programs_with_nothing_to_map(text):
    """No qubits, no records, or a detector of a random record (no noise reaches it)."""
    program = QuasarqSimulator().compile(stim.Circuit(text))
    for outputs in (None, "detectors"):
        want, got = _both(program, 130, seed=2, parities=outputs)
        np.testing.assert_array_equal(got, want)


def test_sweep_points_of_other_noise_share_the_map_not_the_probabilities():
    """Points of a noise sweep share one compiled plan, so one map: each samples its own rates."""
    import cirq
    import sympy

    from cirq_quasarq.noise import bit_flip

    q = cirq.LineQubit.range(2)
    p = sympy.Symbol("p")
    circuit = cirq.Circuit(cirq.H(q[0]), cirq.CX(*q), bit_flip(p).on_each(*q), cirq.measure(*q, key="m"))
    for mode in ("always", True):
        for value in (0.0, 0.5, 0.05):
            rates = []
            for _ in range(2):  # the second call takes the map by default
                sim = QuasarqSimulator(seed=3, device="cpu")
                sim.engine = NumpyEngine(linear_frames=mode)
                rates.append(sim.run(circuit, {"p": value}, repetitions=4000).measurements["m"])
            plan_sim = QuasarqSimulator(seed=3, device="cpu")
            plan_sim.engine = NumpyEngine(linear_frames=False)
            want = plan_sim.run(circuit, {"p": value}, repetitions=4000).measurements["m"]
            for got in rates:
                np.testing.assert_array_equal(got, want)


def test_the_kept_constant_follows_the_reference_and_the_parities():
    """LinearFrames.constant keeps the last one made: asked again with the same Parities object and
    an equal reference it is reused; another reference (also the same array changed in place) or
    other parities give their own constant, as one made fresh."""
    program = QuasarqSimulator().compile(_code("surface_code:rotated_memory_z", 3, 0.01))
    sched = schedule(program)
    plan = frame_plan(program, sched)
    ref = _reference(program, sched)
    parities = Parities.of(list(program.detectors) + list(program.observables), ref)
    made = linear.linear_frames(program, plan, parities)

    def fresh(reference, par):
        return linear.LinearFrames(program, plan, par).constant(reference, par)

    first = made.constant(ref, parities)
    assert made.constant(ref.copy(), parities) is first
    flipped = ref.copy()
    flipped[::3] ^= 1
    np.testing.assert_array_equal(made.constant(flipped, parities), fresh(flipped, parities))
    flipped[::2] ^= 1  # the same array, other bits
    np.testing.assert_array_equal(made.constant(flipped, parities), fresh(flipped, parities))
    records = linear.linear_frames(program, plan, None)
    np.testing.assert_array_equal(records.constant(ref, None), fresh(ref, None))
    np.testing.assert_array_equal(made.constant(ref, parities), first)


def test_maps_are_found_by_the_parities_object_and_by_their_contents():
    """linear_frames: the same Parities object, or an equal one, gets the map already made; other
    parities (records alone, or a subset) get their own."""
    program = QuasarqSimulator().compile(_code("repetition_code:memory", 5, 0.05))
    sched = schedule(program)
    plan = frame_plan(program, sched)
    ref = _reference(program, sched)
    chosen = list(program.detectors) + list(program.observables)
    parities = Parities.of(chosen, ref)
    made = linear.linear_frames(program, plan, parities)
    assert linear.linear_frames(program, plan, parities) is made
    assert linear.linear_frames(program, plan, Parities.of(chosen, ref)) is made
    records = linear.linear_frames(program, plan, None)
    assert records is not made and records.num_outputs == program.num_records
    fewer = linear.linear_frames(program, plan, Parities.of(chosen[:3], ref))
    assert fewer.num_outputs == 3 and linear.linear_frames(program, plan, parities) is made


@pytest.mark.parametrize("rows,words,density", [(0, 3, 0.1), (5, 0, 0.1), (1, 1, 0.5), (40, 7, 0.01),
                                                (400, 130, 0.0005), (13, 2, 1.0), (9, 4, 0.0)])
def test_the_maps_set_bits_are_np_nonzero_of_the_unpacked_rows(rows, words, density):
    """linear._set_bits (the nonzero words unpacked alone) against np.nonzero of every row unpacked,
    as the map had found its entries: the same (row, column) pairs in the same order, columns cut
    at the inputs' count inside the last word too."""
    r = np.random.default_rng(rows * 131 + words)
    bits = (r.random((rows, 64 * words)) < density).astype(np.uint8)
    matrix = np.packbits(bits, axis=1, bitorder="little").view(np.uint64).reshape(rows, words)
    for columns in sorted({64 * words, max(0, 64 * words - 5)}):
        want = np.nonzero(bits[:, :columns])
        got = linear._set_bits(matrix, columns)
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), columns
