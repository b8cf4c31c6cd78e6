"""Tableau mode on every engine: bit-exact against stim's inverse tableau after replaying our
outcomes with postselection (stim applies the same Algorithm-1 collapse, so the whole tableau,
destabilizers and signs included, must be identical)."""

import random

import numpy as np
import pytest

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.core.program import ProgramBuilder
from cirq_quasarq.schedule import schedule

from .programs import UNITARY_1, UNITARY_2, random_program, window_program, window_widths
from .replay import as_stim_inverse, replay_in_stim

# every test here runs both ways: all NumPy, and with the compiled row operations (core/native.py)
pytestmark = pytest.mark.usefixtures("native_path")


@pytest.mark.parametrize("seed", range(25))
def test_random_programs_equal_stim_inverse_tableau(engine, seed):
    n = random.Random(seed).randint(1, 90)
    program, _ = random_program(n, 10, seed)
    sched = schedule(program)
    key = rng.make_key(seed)
    run = engine.run_tableau(program, sched, key)
    sim = replay_in_stim(program, sched, key, run.records)
    assert as_stim_inverse(run.tableau) == sim.current_inverse_tableau(), f"seed={seed} n={n}"


@pytest.mark.parametrize("name", UNITARY_1 + UNITARY_2)
def test_every_unitary_opcode_matches_stim(engine, name):
    stim = pytest.importorskip("stim")
    arity = opcodes.BY_NAME[name].arity
    for seed in range(8):
        r = random.Random(seed)
        b = ProgramBuilder(3)
        sc = stim.Circuit()
        for _ in range(6):  # a random prefix so signs and Y parts are exercised
            g = r.choice(["H", "S", "CX", "SQRT_X", "CZ"])
            qs = r.sample(range(3), 2 if g in ("CX", "CZ") else 1)
            b.next_step()
            b.gate(g, *qs)
            sc.append(g, qs)
        qs = r.sample(range(3), arity)
        b.next_step()
        b.gate(name, *qs)
        sc.append(name, qs)
        program = b.build()
        run = engine.run_tableau(program, schedule(program), rng.make_key(1))
        sim = stim.TableauSimulator()
        sim.do(sc)
        assert as_stim_inverse(run.tableau) == sim.current_inverse_tableau(), f"{name} seed={seed}"


def test_x_then_measure_is_one_and_repeat_measure_agrees(engine):
    b = ProgramBuilder(2)
    b.gate("X", 0)
    b.next_step()
    b.gate("H", 1)
    b.next_step()
    r0 = b.measure(0)
    r1 = b.measure(1)
    b.next_step()
    r2 = b.measure(1)
    program = b.build()
    for seed in range(20):
        rec = engine.run_tableau(program, schedule(program), rng.make_key(seed)).records
        assert rec[r0] == 1
        assert rec[r1] == rec[r2]


def test_reference_forces_random_outcomes_to_zero(engine):
    b = ProgramBuilder(3)
    for q in range(3):
        b.gate("H", q)
    b.next_step()
    b.gate("CX", 0, 1)
    b.next_step()
    recs = [b.measure(q) for q in range(3)]
    program = b.build()
    run = engine.run_tableau(program, schedule(program), rng.make_key(7), reference=True)
    assert list(run.records[recs]) == [0, 0, 0]


def test_loop_equals_unrolled_program(engine):
    def build(loop: bool):
        b = ProgramBuilder(4)
        b.gate("H", 0)
        b.next_step()
        if loop:
            b.begin_loop(5)
        for _ in range(1 if loop else 5):
            b.gate("CX", 0, 1)
            b.next_step()
            b.gate("H", 2)
            b.gate("SQRT_X", 1)
            b.next_step()
            b.measure(1)
            b.measure(2, reset=True)
            b.next_step()
            b.reset(3)
            b.gate("S", 0)
            b.next_step()
        if loop:
            b.end_loop()
        return b.build()

    looped, unrolled = build(True), build(False)
    assert looped.num_records == unrolled.num_records == 10
    assert looped.num_instructions < unrolled.num_instructions
    for seed in range(10):
        key = rng.make_key(seed)
        a = engine.run_tableau(looped, schedule(looped), key)
        u = engine.run_tableau(unrolled, schedule(unrolled), key)
        assert np.array_equal(a.records, u.records), seed
        assert a.tableau.equals(u.tableau), seed


def test_classically_controlled_gate_follows_the_record(engine):
    # H; M -> r; if r: X.  Then M again must always read 0.
    b = ProgramBuilder(1)
    b.gate("H", 0)
    b.next_step()
    r = b.measure(0)
    b.next_step()
    cond = b.condition([(r, 0)], [False, True])
    b.gate("X", 0, cond=cond)
    b.next_step()
    r2 = b.measure(0)
    program = b.build()
    seen = set()
    for seed in range(30):
        rec = engine.run_tableau(program, schedule(program), rng.make_key(seed)).records
        seen.add(int(rec[r]))
        assert rec[r2] == 0
    assert seen == {0, 1}


def test_engines_agree_with_numpy_engine(engine):
    for seed in range(5):
        program, _ = random_program(150, 6, 100 + seed)
        sched = schedule(program)
        key = rng.make_key(seed)
        ours = engine.run_tableau(program, sched, key)
        ref = NumpyEngine().run_tableau(program, sched, key)
        assert np.array_equal(ours.records, ref.records)
        assert ours.tableau.equals(ref.tableau)


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("seed", range(10))
def test_window_batched_collapse_equals_sequential_numpy(seed, exact):
    """The NumPy engine's low-rank window update (TableauState.collapse_window) gives the
    one-collapse-at-a-time path's records and inverse tableau bit for bit: windows of 1..512
    collapses (`exact`: those widths; else merged by the schedule's layering, up to about 1,000),
    random / deterministic, M / R / MR, reference and sampled coins."""
    n = [5, 40, 130, 700, 1500, 64, 65, 300, 1000, 2100][seed]
    program = window_program(n, seed, exact=exact)
    sched = schedule(program)
    if exact:
        actual = window_widths(program, sched)
        assert len(actual) == 8 and set(actual) <= {min(w, n) for w in (1, 2, 3, 17, 64, 200, 512)}, actual
    batched, sequential = NumpyEngine(batch_windows="always"), NumpyEngine(batch_windows=False)
    for repetition, reference in ((0, False), (5, False), (0, True)):
        key = rng.make_key(300 + seed)
        got = batched.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        want = sequential.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        ctx = f"seed={seed} n={n} rep={repetition} ref={reference}"
        assert np.array_equal(got.records, want.records), ctx
        assert got.tableau.equals(want.tableau), ctx


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_window_batched_collapse_matches_stim(seed, exact):
    """The batched windows against stim replaying our coins (postselect_z): the inverse tableau;
    windows of 2, 5, 30 and 128 collapses (`exact`), or as the schedule's layering merges them."""
    n = [12, 50, 200, 700, 1500, 3000][seed]
    program = window_program(n, 50 + seed, widths=(2, 5, 30, 128), layers=5, exact=exact)
    sched = schedule(program)
    if exact:
        actual = window_widths(program, sched)
        assert len(actual) == 5 and set(actual) <= {min(w, n) for w in (2, 5, 30, 128)}, actual
    key = rng.make_key(seed)
    for engine in (NumpyEngine(batch_windows="always"), NumpyEngine()):  # the update, and as the engine picks
        run = engine.run_tableau(program, sched, key)
        sim = replay_in_stim(program, sched, key, run.records)
        assert as_stim_inverse(run.tableau) == sim.current_inverse_tableau(), f"seed={seed} n={n}"


@pytest.mark.parametrize("seed", range(8))
def test_gate_layers_equal_gates_run_by_run(seed):
    """Tableaux of up to 4096 qubits take consecutive gates on disjoint qubits as one layer
    (TableauState.apply_layer: the outputs that are products of one, two or three old rows as a
    group each, in blocks of rows past a size); the same runs as the plain walk (fast_paths=False,
    each run of one opcode on its own): noise, classically controlled gates, collapses and loops in
    between. 2000 and 4096 qubits take several blocks a group, 4097 the runs one by one."""
    from .test_cuda_engine import rich_program

    n = [3, 17, 64, 257, 1100, 2000, 4096, 4097][seed]
    program = rich_program(n, 6, 90 + seed, frames=False)
    sched = schedule(program)
    for repetition, reference in ((0, False), (3, False), (0, True)):
        key = rng.make_key(40 + seed)
        got = NumpyEngine().run_tableau(program, sched, key, repetition=repetition, reference=reference)
        want = NumpyEngine(fast_paths=False).run_tableau(program, sched, key, repetition=repetition,
                                                         reference=reference)
        ctx = f"seed={seed} n={n} rep={repetition} ref={reference}"
        assert np.array_equal(got.records, want.records), ctx
        assert got.tableau.equals(want.tableau), ctx


def test_the_tableau_run_counts_phases_with_the_invalid_flag_ignored(monkeypatch):
    """The phases' bit counts are summed as a float32 BLAS product, on which OpenBLAS now and then
    raises a spurious invalid flag (a RuntimeWarning in CI on exact results): every count of a
    run, gates in layers and one by one, collapses and windows, is made with it ignored, and the
    caller's setting is back after the run."""
    from cirq_quasarq.engines.numpy import tableau

    seen = []
    real = tableau.popcount_rows

    def counted(a):
        seen.append(np.geterr()["invalid"])
        return real(a)

    monkeypatch.setattr(tableau, "popcount_rows", counted)
    program, _ = random_program(300, 40, 5)
    for fast in (True, False):
        NumpyEngine(fast_paths=fast).run_tableau(program, schedule(program), rng.make_key(3))
    assert seen and set(seen) == {"ignore"}, set(seen)
    assert np.geterr()["invalid"] != "ignore"


@pytest.mark.parametrize("text", [
    # a loop's last layer and its next iteration's first gates on other qubits: one layer of two
    # ranges of rows going backwards (GateTable.plan_of)
    "H 2\nREPEAT 4 {\n X 1\n H 0\n S 0\n CX 2 3\n}\nSWAP 1 2",
    "REPEAT 3 {\n ISWAP 0 1\n CY 2 3\n S_DAG 1\n REPEAT 2 {\n  H 3\n  SQRT_X 2\n }\n}\nM 0 1 2 3",
    # identities and a detector's parity between the gate runs of a layer (no gates in between)
    "H 0\nI 1\nS 2\nM 3\nDETECTOR rec[-1]\nCX 0 1\nI 2\nH 3\nY 2\nM 0 1 2 3",
])
def test_gate_layers_across_loop_iterations_and_gaps(text):
    """A layer whose runs are not one range of rows (across loop iterations, or around rows that
    apply nothing) takes its plan range by range: the same records and tableau as the run-by-run
    walk, and Stim's inverse tableau."""
    stim = pytest.importorskip("stim")
    from cirq_quasarq.compiler.stim_circuit import compile_stim

    circuit = stim.Circuit(text)
    program = compile_stim(circuit)
    sched = schedule(program)
    for reference in (True, False):
        key = rng.make_key(7)
        got = NumpyEngine().run_tableau(program, sched, key, reference=reference)
        want = NumpyEngine(fast_paths=False).run_tableau(program, sched, key, reference=reference)
        assert np.array_equal(got.records, want.records) and got.tableau.equals(want.tableau), (text, reference)
    sim = replay_in_stim(program, sched, rng.make_key(7), got.records)
    assert as_stim_inverse(got.tableau) == sim.current_inverse_tableau()


@pytest.mark.parametrize("n", [5, 63, 64, 65, 129, 700])
def test_pending_collapses_go_before_a_growing_layer(n):
    """The reference pass applies deferred collapses (M, R, MR) as soon as a gate run meets their
    qubits, ahead of the layer's buffered gates on other qubits, which keep growing into one
    layer: the same records and tableau as the run-by-run walk."""
    stim = pytest.importorskip("stim")
    from cirq_quasarq.compiler.stim_circuit import compile_stim

    gen = np.random.default_rng(n)
    lines = []
    for _ in range(12):
        order = gen.permutation(n)
        pairs = order[n // 3 : n // 3 + (n - n // 3) // 2 * 2].reshape(-1, 2)
        for names, targets in ((("H", "S", "SQRT_X", "Y"), order[: n // 3]), (("CX", "CZ", "ISWAP", "CY", "SWAP"), pairs)):
            runs = np.array_split(targets, len(names))
            lines += [f"{name} " + " ".join(map(str, run.ravel())) for name, run in zip(names, runs) if len(run)]
        measured = gen.choice(n, size=gen.integers(1, 4), replace=False)
        lines.append(f"{gen.choice(['M', 'M', 'R', 'MR'])} " + " ".join(map(str, measured)))
    program = compile_stim(stim.Circuit("\n".join(lines)))
    sched = schedule(program)
    key = rng.make_key(n)
    got = NumpyEngine().run_tableau(program, sched, key, reference=True)
    want = NumpyEngine(fast_paths=False).run_tableau(program, sched, key, reference=True)
    assert np.array_equal(got.records, want.records) and got.tableau.equals(want.tableau)


def test_inverse_tableau_equality_compares_packed_words():
    """equals() compares the packed words (no n x n unpacking): any bit or sign tells two tableaux
    apart, bits past n in the last word do not."""
    from cirq_quasarq.core.tableau import InverseTableau

    for n in (0, 1, 63, 64, 65, 130):
        a, b = InverseTableau.identity(n), InverseTableau.identity(n)
        assert a.equals(b)
        if not n:
            continue
        b.zx[n - 1, (n - 1) // 64] ^= np.uint64(1) << np.uint64((n - 1) % 64)
        assert not a.equals(b)
        c = InverseTableau.identity(n)
        c.zs[n - 1] = 1
        assert not a.equals(c)
        if n % 64:
            d = InverseTableau.identity(n)
            d.xx[0, -1] |= np.uint64(1) << np.uint64(63)
            assert a.equals(d)


def _inverse_of_stim(tableau):
    """Our inverse tableau of the state stim's `tableau` prepares (rows: its inverse's outputs)."""
    from cirq_quasarq.core.tableau import InverseTableau

    n = len(tableau)
    words = max(1, (n + 63) // 64)

    def pack(bits):
        out = np.zeros((n, 64 * words), dtype=np.uint8)
        out[:, :n] = bits
        return np.packbits(out, axis=1, bitorder="little").view(np.uint64)

    x2x, x2z, z2x, z2z, x_signs, z_signs = tableau.inverse().to_numpy()
    return InverseTableau(n, pack(x2x), pack(x2z), pack(z2x), pack(z2z),
                          x_signs.astype(np.uint8), z_signs.astype(np.uint8))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 63, 64, 65, 127, 128, 129, 200])
def test_forward_by_blocks_equals_row_products_and_stim(n):
    """forward() (signs by blocks of eight rows) equals multiplying the rows out and Stim's own
    forward tableau, at sizes around the chunk (2n rows in eights) and word boundaries, and
    ignores bits past n in the last word."""
    stim = pytest.importorskip("stim")
    for seed in range(3):
        stim_tableau = stim.Tableau.random(n) if n else stim.Tableau(0)
        inv = _inverse_of_stim(stim_tableau)
        xs, zs, rs = inv.forward()
        for want, got in zip(inv.forward_by_products(), (xs, zs, rs)):
            assert np.array_equal(want, got), (n, seed)
        if n:
            outputs = [stim_tableau.x_output(p) for p in range(n)] + [stim_tableau.z_output(p) for p in range(n)]
            assert np.array_equal(xs, np.array([o.to_numpy()[0] for o in outputs])), (n, seed)
            assert np.array_equal(zs, np.array([o.to_numpy()[1] for o in outputs])), (n, seed)
            assert np.array_equal(rs, np.array([o.sign == -1 for o in outputs])), (n, seed)
        if n % 64:
            for part in (inv.xx, inv.xz, inv.zx, inv.zz):
                part[:, -1] |= np.uint64(1) << np.uint64(63)
            assert all(np.array_equal(a, b) for a, b in zip(inv.forward(), (xs, zs, rs))), (n, seed)
