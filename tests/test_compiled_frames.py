"""The NumPy engine's fast paths against the walks they replace, bit for bit: the compiled frame
plan (deferred, merged collapses; loops folded into affine maps) against walking the schedule run
by run, and the reference pass's loop cycle finding against walking every iteration."""

import numpy as np
import pytest

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.core import rng
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.engines.numpy.frames import _Fold, _Loop, frame_plan
from cirq_quasarq.schedule import schedule

from .programs import random_program

stim = pytest.importorskip("stim")

WALKED = NumpyEngine(fast_paths=False)


def _random_body(seed: int, n: int, noise: bool) -> stim.Circuit:
    _, circuit = random_program(n, 3, seed, collapse=0.8, noise=noise)
    return circuit


def _loop_circuit(seed: int, n: int = 4, count: int = 9, nested: bool = False, noise: bool = True) -> stim.Circuit:
    """A random prefix, a REPEAT of a random body (with another REPEAT inside when nested), a
    random suffix: every record of it is a loop's or depends on one."""
    c = _random_body(seed, n, noise)
    body = _random_body(seed + 1000, n, noise)
    if nested:
        inner = _random_body(seed + 2000, n, noise)
        body += stim.Circuit(f"REPEAT 3 {{\n{inner}\n}}")
    c += stim.Circuit(f"REPEAT {count} {{\n{body}\n}}")
    c += _random_body(seed + 3000, n, noise)
    c.append("M", range(n))
    return c


def _sample(engine, program, shots, seed):
    sched = schedule(program)
    ref = WALKED.run_tableau(program, sched, rng.make_key(0), reference=True).records
    return engine.sample_frames(program, sched, rng.make_key(seed), ref, shots)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("fast", [True, "always"])
def test_frame_plan_equals_walked_frames(seed, fast):
    program = QuasarqSimulator().compile(_loop_circuit(seed, nested=seed % 2 == 1, count=2 + seed))
    shots = 64 * 5 + 3
    expected = _sample(WALKED, program, shots, seed)
    for words in (1, 2, 1 << 14):
        got = _sample(NumpyEngine(max_shot_words=words, fast_paths=fast, linear_frames=False), program, shots, seed)
        np.testing.assert_array_equal(got, expected)


def test_fold_is_used_and_equal_on_a_long_loop():
    c = stim.Circuit("""
        R 0 1 2
        REPEAT 2000 {
            H 0
            CX 0 1
            DEPOLARIZE1(0.1) 0 1
            M 0
            R 0
            S 2
            CX 1 2
            X_ERROR(0.2) 2
            MR 2
        }
        M 0 1 2
    """)
    program = QuasarqSimulator().compile(c)
    sched = schedule(program)
    plan = frame_plan(program, sched)
    loops = [op for op in plan.ops if isinstance(op, _Loop)]
    assert len(loops) == 1 and isinstance(loops[0].fold, _Fold) and loops[0].fold.wins(16)
    shots = 1000
    expected = _sample(WALKED, program, shots, 4)
    np.testing.assert_array_equal(_sample(NumpyEngine(), program, shots, 4), expected)
    # Blocks of iterations: the fold's memory bound changes nothing.
    engine = NumpyEngine()
    import cirq_quasarq.engines.numpy.frames as frames
    old = frames._FOLD_BYTES
    frames._FOLD_BYTES = 1 << 12
    try:
        program2 = QuasarqSimulator().compile(c)
        np.testing.assert_array_equal(_sample(engine, program2, shots, 4), expected)
    finally:
        frames._FOLD_BYTES = old


@pytest.mark.parametrize("seed", range(10))
def test_reference_pass_equals_the_plain_walk(seed):
    program = QuasarqSimulator().compile(_loop_circuit(seed, nested=seed % 2 == 0, count=5 + 7 * seed, noise=False))
    sched = schedule(program)
    key = rng.make_key(0)
    walked = WALKED.run_tableau(program, sched, key, reference=True).records
    folded = NumpyEngine().run_tableau(program, sched, key, reference=True).records
    np.testing.assert_array_equal(folded, walked)


@pytest.mark.parametrize("period_gate", ["S", "SQRT_X", "H"])
def test_reference_cycle_with_a_long_period(period_gate):
    # The body's state returns only every few iterations; random outcomes and deterministic ones mix.
    c = stim.Circuit(f"""
        H 1
        REPEAT 101 {{
            {period_gate} 0
            CX 0 2
            H 2
            CX 1 3
            M 2 3
            SQRT_Y 1
        }}
    """)
    program = QuasarqSimulator().compile(c)
    sched = schedule(program)
    key = rng.make_key(0)
    walked = WALKED.run_tableau(program, sched, key, reference=True).records
    np.testing.assert_array_equal(NumpyEngine().run_tableau(program, sched, key, reference=True).records, walked)


def test_deferred_collapses_merge_interleaved_measurements():
    # A GHZ chain measured qubit by qubit as the chain goes on: one merged collapse in the plan.
    n = 50
    c = stim.Circuit()
    c.append("H", [0])
    for i in range(n - 1):
        c.append("CX", [i, i + 1])
        c.append("M", [i])
    c.append("M", [n - 1])
    program = QuasarqSimulator().compile(c)
    sched = schedule(program)
    plan = frame_plan(program, sched)
    from cirq_quasarq.engines.numpy.frames import _Collapse
    assert sum(isinstance(op, _Collapse) for op in plan.ops) == 1
    np.testing.assert_array_equal(_sample(NumpyEngine(), program, 200, 1), _sample(WALKED, program, 200, 1))


def test_reference_pass_with_feedback_in_loops():
    # Collapses deferred across a loop's iterations must keep each iteration's record slots.
    import cirq

    q0, q1 = cirq.LineQubit.range(2)
    inner = cirq.Circuit(cirq.X(q0), cirq.measure(q0, key="c"), cirq.X(q1).with_classical_controls("c"),
                         cirq.measure(q1, key="b"), cirq.H(q1), cirq.measure(q1, key="d"))
    circuit = cirq.Circuit(cirq.CircuitOperation(inner.freeze(), repetitions=6, use_repetition_ids=True))
    program = QuasarqSimulator().compile(circuit)
    sched = schedule(program)
    key = rng.make_key(0)
    walked = WALKED.run_tableau(program, sched, key, reference=True).records
    np.testing.assert_array_equal(NumpyEngine().run_tableau(program, sched, key, reference=True).records, walked)
    np.testing.assert_array_equal(walked[[0, 3, 6]], [1, 0, 1])
    np.testing.assert_array_equal(walked[[1, 4, 7]], [1, 0, 1])  # d (random) leaves q1 in |0>


def test_frame_plan_with_correlated_errors_of_different_sizes_in_a_loop():
    """E (CORRELATED_ERROR) on one, two and three qubits in one loop body: the plan's qubit set
    takes each channel's targets apart (it once stacked them as one array and failed)."""
    circuit = stim.Circuit("""
        H 0 1 2 3
        REPEAT 4 {
            E(0.2) X0
            E(0.3) Y1 Z2
            E(0.1) X3 Y0 Z1
            CX 0 1 2 3
            M 0 1 2 3
        }
    """)
    program = QuasarqSimulator().compile(circuit)
    shots = 64 * 3 + 5
    expected = _sample(WALKED, program, shots, 7)
    for fast in (True, "always"):
        np.testing.assert_array_equal(_sample(NumpyEngine(fast_paths=fast), program, shots, 7), expected)


@pytest.mark.parametrize("e_first", [True, False])
def test_frame_plan_with_one_channel_on_e_and_on_a_named_target_in_a_loop(e_first):
    """One channel given to an E row (targets listed in ext_qubits) and to X_ERROR rows (a target
    named in the row) of one loop body, E's step before theirs or after, its target touched by
    nothing else in the loop: the fold's qubit set takes each opcode's targets its own way (it once
    read every row of the channel the way of its first: an X_ERROR row's qubit as an ext offset, or
    E's ext offset as a qubit, and failed)."""
    from cirq_quasarq.core.program import ProgramBuilder

    b = ProgramBuilder(6)
    flip = b.channel_id(1, [0.2], [[1]])
    b.next_step()
    for q in range(6):
        b.gate("H", q)
    b.begin_loop(5)
    steps = [lambda: b.noise("E", [5], flip, ext_paulis=[1]),
             lambda: (b.noise("X_ERROR", [1], flip), b.noise("X_ERROR", [3], flip))]
    for emit in (steps if e_first else steps[::-1]):
        b.next_step()
        emit()
    b.next_step()
    b.gate("CX", 1, 2)
    b.gate("CX", 4, 3)
    b.next_step()
    for q in range(5):
        b.measure(q)
    b.end_loop()
    b.next_step()
    b.measure(5)
    program = b.build()
    shots = 64 * 3 + 5
    expected = _sample(WALKED, program, shots, 3)
    for fast in (True, "always"):
        np.testing.assert_array_equal(_sample(NumpyEngine(fast_paths=fast), program, shots, 3), expected)
