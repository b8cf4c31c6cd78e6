"""A first call of a few shots on the NumPy engine: its frames ride the reference run as extra rows
of the tableau (engines/numpy/engine.py, `_Riders`), Pauli noise included, and must give exactly
frame mode's bits.

The oracle is frame mode itself: the reference run, then `sample_frames` (the frame plan, and the
walk without fast paths)."""

from __future__ import annotations

import itertools

import cirq
import numpy as np
import pytest

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.core import rng
from cirq_quasarq.core.parities import parities_shot_major
from cirq_quasarq.engines.numpy.engine import NumpyEngine
from cirq_quasarq.schedule import schedule
from cirq_quasarq.shots import REFERENCE_KEY, sample_frames

from .programs import random_program, window_program, window_widths


def _lanes(packed: np.ndarray, shots: int) -> np.ndarray:
    """The words' bits of the call's shots (bits past `shots` are unspecified)."""
    return packed[:, 0] & np.uint64((1 << shots) - 1)


def _oracle(engine, program, sched, key, shots, word):
    ref = engine.run_tableau(program, sched, REFERENCE_KEY, reference=True).records
    return ref, NumpyEngine(fast_paths=False).sample_frames(program, sched, key, ref, shots, first_word=word)


# Qubit counts at the tableau's word edges, windows from one collapse to every qubit (the low-rank
# window update, one collapse after the other, and the replay of resets), 1 to 64 shots (one shot's
# windows of up to _RIDER_ROWS_AS_INTS collapses row by row, wider ones and more shots as arrays),
# shot words past the first, and the collapse paths of the engine's three window settings.
@pytest.mark.parametrize("n, widths", [(1, (1,)), (5, (1, 2, 5)), (63, (1, 3, 17, 63)), (64, (2, 64)),
                                       (65, (1, 40, 65)), (130, (1, 3, 17, 64, 130)), (300, (9, 300)),
                                       (700, (700,))])  # (64 shots: the anticommutations in blocks of rows)
@pytest.mark.parametrize("batch_windows", [True, False, "always"])
@pytest.mark.parametrize("exact", [True, False])
def test_riders_give_frame_modes_bits(n, widths, batch_windows, exact):
    """`exact`: the windows are those widths (a window of every qubit among them); else as the
    schedule's layering merges and splits them (at n = 700, windows of 1 to 657 collapses)."""
    engine = NumpyEngine(batch_windows=batch_windows, measured_rows=False)
    for seed, shots, word in ((0, 1, 0), (1, 2, 3), (2, 63, 1), (3, 64, 0), (4, 37, 2)):
        program = window_program(n, seed=100 * n + seed, widths=widths, layers=5, exact=exact)
        sched = schedule(program)
        if exact:
            assert set(window_widths(program, sched)) <= set(widths), window_widths(program, sched)
        key = rng.make_key(7 * seed + n)
        ref, packed = engine.sample_with_reference(program, sched, key, shots, first_word=word)
        want_ref, want = _oracle(engine, program, sched, key, shots, word)
        np.testing.assert_array_equal(ref, want_ref)
        np.testing.assert_array_equal(_lanes(packed, shots), _lanes(want, shots), err_msg=f"seed {seed}")


@pytest.mark.parametrize("seed", range(6))
def test_riders_over_every_gate_and_interleaved_collapses(seed):
    """Every unitary opcode, collapses deferred past gates on other qubits (the reference pass's
    liberty) and not (fast_paths=False); one shot (its small windows row by row as Python
    integers) and a word of them."""
    program, _ = random_program(9 + seed, 30, seed, collapse=0.8)
    sched = schedule(program)
    key = rng.make_key(seed)
    for fast, shots in itertools.product((True, False), (1, 64)):
        engine = NumpyEngine(fast_paths=fast, measured_rows=False)
        ref, packed = engine.sample_with_reference(program, sched, key, shots)
        want_ref, want = _oracle(engine, program, sched, key, shots, 0)
        np.testing.assert_array_equal(ref, want_ref)
        np.testing.assert_array_equal(_lanes(packed, shots), _lanes(want, shots))


def _noisy_stim_circuit(stim, r: np.random.Generator, nq: int):
    """Random gates, collapses of every basis, and every Pauli noise instruction Stim has that
    writes no record (E with ELSE_CORRELATED_ERROR after it among them), on nq qubits, no loops."""
    unitary = [g.name for g in stim.gate_data().values() if g.is_unitary and g.name not in ("SPP", "SPP_DAG")]
    noise = sorted(g.name for g in stim.gate_data().values()
                   if g.is_noisy_gate and not g.produces_measurements and not g.is_reset and "HERALDED" not in g.name)
    lines = []
    for _ in range(int(r.integers(10, 60))):
        kind = r.random()
        if kind < 0.5:
            name = unitary[r.integers(len(unitary))]
            arity = 2 if stim.gate_data(name).is_two_qubit_gate else 1
            if arity <= nq:
                lines.append(name + " " + " ".join(map(str, r.choice(nq, arity, replace=False))))
        elif kind < 0.75:
            name = noise[r.integers(len(noise))]
            arity = 2 if stim.gate_data(name).is_two_qubit_gate else 1
            q = r.choice(nq, min(nq, arity), replace=False)
            if name in ("E", "CORRELATED_ERROR", "ELSE_CORRELATED_ERROR"):
                lines.append(f"E(0.3) X{q[0]} Z{(q[0] + 1) % nq}")
                if name == "ELSE_CORRELATED_ERROR":
                    lines.append(f"ELSE_CORRELATED_ERROR(0.25) Y{q[0]}")
            elif len(q) == arity:
                args = {"PAULI_CHANNEL_1": "0.1,0.2,0.05", "PAULI_CHANNEL_2": ",".join(["0.02"] * 15)}.get(name, "0.2")
                lines.append(f"{name}({args}) " + " ".join(map(str, q)))
        else:
            name = ["M", "R", "MR", "MX", "MY", "RX", "MRX", "MRY"][r.integers(8)]
            lines.append(name + " " + " ".join(map(str, r.choice(nq, int(r.integers(1, min(nq, 6) + 1)), replace=False))))
    lines.append("M " + " ".join(map(str, range(nq))))
    return stim.Circuit("\n".join(lines))


@pytest.mark.parametrize("nq", [1, 4, 9, 63, 65, 130])
def test_riders_carry_every_pauli_channel(nq):
    """Pauli noise of every kind Stim has (drawn as frame mode draws it, applied to the riders as the
    rows of its Paulis), between gates and collapses: frame mode's bits."""
    stim = pytest.importorskip("stim")
    from cirq_quasarq.compiler.stim_circuit import compile_stim

    r = np.random.default_rng(nq)
    for i in range(8):
        program = compile_stim(_noisy_stim_circuit(stim, r, nq))
        assert program.channels
        sched = schedule(program)
        shots, word = (1, 37, 64)[i % 3], i % 3
        engine = NumpyEngine(batch_windows=(True, False, "always")[i % 3], measured_rows=False)
        key = rng.make_key(1000 * nq + i)
        ref, packed = engine.sample_with_reference(program, sched, key, shots, first_word=word)
        want_ref, want = _oracle(engine, program, sched, key, shots, word)
        np.testing.assert_array_equal(ref, want_ref)
        np.testing.assert_array_equal(_lanes(packed, shots), _lanes(want, shots), err_msg=f"circuit {i}")


def test_riders_only_where_frames_read_no_records():
    """Confusion maps (a measurement's flip probability among them), classical control and loops
    (frame mode reads records for them, or shifts random slots), no shots or more than a word of
    them: no riders, the caller takes frame mode."""
    engine = NumpyEngine(measured_rows=False)  # riders, not the measured rows' reference
    plain = window_program(6, seed=1, widths=(2,), layers=2)
    key = rng.make_key(1)
    assert engine.sample_with_reference(plain, schedule(plain), key, 64) is not None
    for shots in (0, 65, 1000):
        assert engine.sample_with_reference(plain, schedule(plain), key, shots) is None
    assert NumpyEngine(ride_frames=False).sample_with_reference(plain, schedule(plain), key, 1) is None
    q = cirq.LineQubit.range(2)
    sim = QuasarqSimulator(device="cpu")
    for circuit in (cirq.Circuit(cirq.H(q[0]), cirq.measure(q[0], key="a"), cirq.X(q[1]).with_classical_controls("a"),
                                 cirq.measure(q[1], key="b")),
                    cirq.Circuit(cirq.CircuitOperation(cirq.FrozenCircuit(cirq.H(q[0]), cirq.measure(q[0], key="m")),
                                                       repetitions=3, use_repetition_ids=True)),
                    cirq.Circuit(cirq.H(q[0]), cirq.measure(q[0], key="c", confusion_map={(0,): np.array(
                        [[0.9, 0.1], [0.2, 0.8]])}))):
        program = sim.compile(circuit)
        assert engine.sample_with_reference(program, schedule(program), key, 1) is None
    noisy = sim.compile(cirq.Circuit(cirq.H(q[0]), cirq.depolarize(0.2).on(q[1]), cirq.measure(*q, key="n")))
    assert engine.sample_with_reference(noisy, schedule(noisy), key, 1) is not None


@pytest.mark.parametrize("shots", [1, 10, 64, 65])
def test_a_first_call_gives_a_later_calls_bits(shots, monkeypatch):
    """The simulator's first call on a new circuit (its reference made with the call's frames, up to
    64 shots) against the same seed's call once the reference exists (frame mode): run(),
    sample_measurements and its bit-packed layout; and the reference kept is frame mode's."""
    stim = pytest.importorskip("stim")
    ridden = []
    original = NumpyEngine.sample_with_reference

    def spy(self, *args, **kwargs):
        got = original(self, *args, **kwargs)
        ridden.append(got is not None)
        return got

    monkeypatch.setattr(NumpyEngine, "sample_with_reference", spy)
    circuit = stim.Circuit.generated("repetition_code:memory", distance=5, rounds=4).without_noise().flattened()
    qubits = cirq.LineQubit.range(40)
    cirq_circuit = cirq.Circuit(
        [cirq.H.on_each(*qubits[::2]), cirq.CNOT.on_each(*zip(qubits[::2], qubits[1::2])),
         cirq.measure(*qubits[:20], key="a"), cirq.S.on_each(*qubits[1::3]), cirq.ISWAP(*qubits[3:5]),
         cirq.reset(qubits[7]), cirq.H.on_each(*qubits[:10]), cirq.measure(*qubits, key="b", invert_mask=(1, 0, 1))])
    for bit_packed in (False, True):
        first = QuasarqSimulator(seed=4, device="cpu")
        program = first.compile(circuit)  # (the Program the call takes from the compile cache)
        program.derived.pop("reference", None)  # new to the process
        got = first.sample_measurements(circuit, shots, bit_packed=bit_packed)
        reference = program.derived["reference"]
        program.derived.pop("reference")
        later = QuasarqSimulator(seed=4, device="cpu")
        np.testing.assert_array_equal(later.reference(program), reference)
        np.testing.assert_array_equal(got, later.sample_measurements(circuit, shots, bit_packed=bit_packed))
    first = QuasarqSimulator(seed=9, device="cpu")
    program = first.compile(cirq_circuit)
    program.derived.pop("reference", None)
    got = first.run(cirq_circuit, repetitions=shots)
    reference = program.derived.pop("reference")
    later = QuasarqSimulator(seed=9, device="cpu")
    np.testing.assert_array_equal(later.reference(program), reference)
    assert got == later.run(cirq_circuit, repetitions=shots)
    assert ridden == [shots <= 64] * 3  # the three first calls, and no later one


def test_riders_shot_major_layout():
    """`shots.sample_frames` lays a first call's words out as frame mode's shot-major samples."""
    program = window_program(20, seed=3, widths=(4, 20), layers=3)
    key = rng.make_key(5)
    got = sample_frames(NumpyEngine(measured_rows=False), program, key, 33, shot_major=True)
    sched = schedule(program)
    ref = NumpyEngine().run_tableau(program, sched, REFERENCE_KEY, reference=True).records
    want = NumpyEngine().sample_frames(program, sched, key, ref, 33)
    np.testing.assert_array_equal(got, parities_shot_major(want, 33))


@pytest.mark.parametrize("text", [
    "H 0 1\nHERALDED_ERASE(0.3) 0 1\nCX 0 2\nM 0 1 2",  # heralds on scratch qubits
    "H 0\nHERALDED_PAULI_CHANNEL_1(0.1, 0.2, 0.1, 0.2) 0 1\nMPAD 0 1\nM 0 1\nMPP X0*Z1 Y1",
    "R 0 1 2\nH 0\nCX 0 1\nMXX 0 1\nMZZ 1 2\nDEPOLARIZE2(0.2) 0 2\nMRY 2\nM !0 1",
])
def test_riders_through_scratch_qubits_and_pauli_products(text):
    """Stim's instructions that compile through scratch qubits (heralded channels, MPAD, MPP, MXX /
    MZZ): their records and heralds ride too, with frame mode's bits."""
    stim = pytest.importorskip("stim")
    from cirq_quasarq.compiler.stim_circuit import compile_stim

    program = compile_stim(stim.Circuit(text))
    sched = schedule(program)
    engine = NumpyEngine(measured_rows=False)  # riders, not the measured rows' reference
    for shots in (1, 17, 64):
        key = rng.make_key(shots)
        ref, packed = engine.sample_with_reference(program, sched, key, shots)
        want_ref, want = _oracle(engine, program, sched, key, shots, 0)
        np.testing.assert_array_equal(ref, want_ref)
        np.testing.assert_array_equal(_lanes(packed, shots), _lanes(want, shots))


@pytest.mark.parametrize("nq", [1, 9, 65])
def test_rows_inventory_is_the_walks(nq):
    """The slots the riders draw (`rows_inventory`, read off a loop-free program's rows) are those
    a walk of its schedule finds (`walked_inventory`, frame mode's oracle)."""
    stim = pytest.importorskip("stim")
    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.engines.numpy.noise import rows_inventory, walked_inventory

    r = np.random.default_rng(nq + 7)
    programs = [compile_stim(_noisy_stim_circuit(stim, r, nq)) for _ in range(4)]
    programs += [random_program(nq + 2, 12, nq, collapse=0.7, noise=True)[0], window_program(nq, 3, (1, nq), 3)]
    for program in programs:
        (rows_collapses, rows_noise), (walked_collapses, walked_noise) = (
            rows_inventory(program), walked_inventory(program, schedule(program)))
        np.testing.assert_array_equal(rows_collapses, walked_collapses)
        assert rows_noise.keys() == walked_noise.keys()
        for aux in walked_noise:
            np.testing.assert_array_equal(rows_noise[aux], walked_noise[aux])
