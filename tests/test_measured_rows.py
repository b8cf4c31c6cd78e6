"""The reference sample from the measured rows alone (engines/measured_rows.py; the NumPy engine's) against the
full tableau run, which is its oracle: the same records, bit for bit, on every opcode, resets and
inverted records, qubit counts at the word edges, forward windows of 1 to 64 collapses and
measurement counts across the 64-bit words of the backward sweep; and against Stim's tableau
simulator replaying the same collapses (each random one post-selected to 0) in the schedule's order."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.program import FLAG_INVERT, FLAGS, OP, REC, A, B, ProgramBuilder
from cirq_quasarq.engines import measured_rows as shared
from cirq_quasarq.engines.numpy import measured_rows
from cirq_quasarq.engines.numpy.engine import NumpyEngine
from cirq_quasarq.engines.numpy.tableau import TableauState
from cirq_quasarq.schedule import schedule

from .programs import random_program, window_program

FULL = NumpyEngine(measured_rows=False)


def _full(program, sched):
    return FULL.reference_records(program, sched)


def _mixed_program(n: int, layers: int, seed: int):
    """Layers of random gates from the whole unitary set with M (some inverted), MR and R mixed in
    on the other qubits of the layer: resets whose flips reach later measurements of their window."""
    r = np.random.default_rng(seed)
    b = ProgramBuilder(n)
    for _ in range(layers):
        b.next_step()
        order, i = [int(q) for q in r.permutation(n)], 0
        while i < n:
            q, kind = order[i], r.random()
            if kind < 0.5:
                code = int(r.choice(opcodes.UNITARY_CODES))
                if opcodes.ARITY[code] == 2 and i + 1 < n:
                    b.emit(code, q, order[i + 1], -1, -1, -1, 0, None, 0)
                    i += 2
                    continue
                if opcodes.ARITY[code] == 1:
                    b.emit(code, q, -1, -1, -1, -1, 0, None, 0)
            elif kind < 0.7:
                b.measure(q, invert=bool(r.random() < 0.3))
            elif kind < 0.85:
                b.measure(q, reset=True)
            else:
                b.reset(q)
            i += 1
    return b.build()


@pytest.mark.parametrize("code", opcodes.UNITARY_CODES)
def test_pulled_back_rows_are_the_tableaus_zrows(code):
    """Each qubit's Z pulled back through a random prefix and then `code` (the backward sweep's map
    of G† P G on bit-sliced strings) is the zrow the tableau's gates make of it (products of rows)."""
    n, r = 6, np.random.default_rng(code)
    arity = int(opcodes.ARITY[code])
    for _ in range(8):
        gates = []
        for _ in range(25):
            c = int(r.choice(opcodes.UNITARY_CODES))
            qs = r.choice(n, size=2, replace=False)
            gates.append((c, int(qs[0]), int(qs[1]) if opcodes.ARITY[c] == 2 else -1))
        qs = r.choice(n, size=2, replace=False)
        gates.append((code, int(qs[0]), int(qs[1]) if arity == 2 else -1))
        state = TableauState(n)
        for c, a, b in gates:
            state.apply_unitary(c, np.array([a]), np.array([b]))
        x, z, s = np.zeros((n, 1), np.uint64), np.zeros((n, 1), np.uint64), np.zeros(1, np.uint64)
        for q in range(n):
            z[q, 0] = np.uint64(1) << np.uint64(q)
        for c, a, b in reversed(gates):
            measured_rows._pull_back(c, np.array([a]), np.array([b]), x, z, s)
        np.testing.assert_array_equal(measured_rows._rows_of(x, n, 1), state.X[n:])
        np.testing.assert_array_equal(measured_rows._rows_of(z, n, 1), state.Z[n:])
        np.testing.assert_array_equal(np.unpackbits(s.view(np.uint8), bitorder="little")[:n], state.S[n:])


@pytest.mark.parametrize("n", [1, 2, 5, 8, 63, 64, 65, 130])
@pytest.mark.parametrize("seed", range(4))
def test_records_equal_the_full_run(n, seed):
    """Random layers of every unitary opcode, M, MR and R: forward windows of 1, 2, 3 and 64."""
    program = _mixed_program(n, layers=12 if n < 64 else 4, seed=1000 * n + seed)
    sched = schedule(program)
    want = _full(program, sched)
    for window in (1, 2, 3, 64):
        np.testing.assert_array_equal(measured_rows.run_records(program, sched, window=window), want,
                                      err_msg=f"window {window}")


@pytest.mark.parametrize("count", [63, 64, 65, 128, 129])
def test_measurement_counts_at_the_sweeps_word_edges(count):
    """The backward sweep packs 64 measurements a word: counts at its edges, a qubit measured again
    and again (each its own row), resets among them."""
    n, r = 9, random.Random(count)
    b = ProgramBuilder(n)
    made = 0
    while made < count:
        b.next_step()
        code = r.choice([opcodes.CODE["CX"], opcodes.CODE["CZ"], opcodes.CODE["ISWAP"]])
        pairs = list(range(n))
        r.shuffle(pairs)
        for a, c in zip(pairs[0::2], pairs[1::2]):
            b.emit(code, a, c, -1, -1, -1, 0, None, 0)
        b.next_step()
        for q in r.sample(range(n), 4):
            b.emit(opcodes.CODE["H"], q, -1, -1, -1, -1, 0, None, 0)
        b.next_step()
        for q in r.sample(range(n), min(3, count - made)):
            if r.random() < 0.2:
                b.measure(q, reset=True)
            else:
                b.measure(q)
            made += 1
    program = b.build()
    sched = schedule(program)
    assert shared.collapses(sched) == count
    want = _full(program, sched)
    for window in (1, 7, 64):
        np.testing.assert_array_equal(measured_rows.run_records(program, sched, window=window), want)


@pytest.mark.parametrize("n, widths", [(20, (1, 3, 20)), (130, (1, 17, 64, 130)), (300, (9, 100))])
def test_windows_of_the_tableau_paths(n, widths):
    """The programs the tableau paths' tests take (M, R and MR windows of many widths)."""
    for seed in range(3):
        program = window_program(n, seed=7 * n + seed, widths=widths, layers=5)
        sched = schedule(program)
        np.testing.assert_array_equal(measured_rows.run_records(program, sched), _full(program, sched))


def test_the_papers_circuits():
    """The paper's random circuits (n // 1400 measurements a layer), and 20 a layer on 200 qubits,
    where many collapses a window are random."""
    from benchmarks.random_clifford import random_clifford_program

    for n, depth, measured in ((2000, 30, None), (200, 30, 20), (3000, 10, 200)):
        program = random_clifford_program(n, depth, seed=n, measured=measured)
        sched = schedule(program)
        np.testing.assert_array_equal(measured_rows.run_records(program, sched), _full(program, sched))


@pytest.mark.parametrize("seed", range(3))
def test_stim_replays_the_same_collapses(seed):
    """Stim's TableauSimulator through the schedule's rows, each random outcome post-selected to 0:
    an oracle outside the package (the full run shares the collapse code with this path)."""
    stim = pytest.importorskip("stim")
    program, _ = random_program(12, 30, seed=seed, collapse=0.4)
    sched = schedule(program)
    rows = sched.instructions
    sim = stim.TableauSimulator()
    sim.set_num_qubits(program.num_qubits)
    want = np.zeros(program.num_records, dtype=np.uint8)
    for row in rows:
        op = opcodes.OPCODES[int(row[OP])]
        if op.kind == opcodes.Kind.UNITARY:
            sim.do(stim.CircuitInstruction(op.name, [int(row[A])] + ([int(row[B])] if op.arity == 2 else [])))
        elif op.kind in (opcodes.Kind.MEASURE, opcodes.Kind.RESET, opcodes.Kind.MEASURE_RESET):
            q = int(row[A])
            value = sim.peek_z(q)
            if value == 0:
                sim.postselect_z(q, desired_value=False)
            outcome = int(value == -1)
            if op.kind != opcodes.Kind.RESET:
                want[int(row[REC])] = outcome ^ (int(row[FLAGS]) & FLAG_INVERT)
            if op.kind != opcodes.Kind.MEASURE:
                sim.reset(q)
    np.testing.assert_array_equal(measured_rows.run_records(program, sched), want)
    np.testing.assert_array_equal(_full(program, sched), want)


def test_the_engine_takes_it_where_it_pays(monkeypatch):
    """The engine's reference: measured rows for a few collapses on many qubits, the full run for a
    QEC circuit (every qubit measured each round) and wherever loops or conditions are."""
    stim = pytest.importorskip("stim")
    from benchmarks.random_clifford import random_clifford_program
    from cirq_quasarq.compiler.stim_circuit import compile_stim

    taken = []
    engine = NumpyEngine()
    original = measured_rows.run_records

    def spy(*args, **kwargs):
        taken.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(measured_rows, "run_records", spy)

    random_circuit = random_clifford_program(1500, 10, seed=2)
    surface = compile_stim(stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3).flattened())
    looped = compile_stim(stim.Circuit("H 0\nREPEAT 3 {\n CX 0 1\n M 1\n}\nM 0"))
    for program, takes in ((random_circuit, True), (surface, False), (looped, False)):
        taken.clear()
        sched = schedule(program)
        np.testing.assert_array_equal(engine.reference_records(program, sched), _full(program, sched))
        assert bool(taken) == takes
    assert not shared.supports(looped)


# -- the CUDA engine's measured rows (engines/cuda/measured_rows.py) against the full run on the
# -- device and the NumPy engine's measured rows: programs without resets (the CUDA path's domain)


def _cuda(**settings):
    from cirq_quasarq.engines import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine()
    for name, value in settings.items():
        setattr(engine, name, value)
    return engine


def _no_resets(n: int, layers: int, seed: int, per_layer=None):
    """Layers of every unitary opcode on a shuffled order, then M (some inverted) of `per_layer`
    qubits (a random count when None), some of them measured again."""
    r = np.random.default_rng(seed)
    b = ProgramBuilder(n)
    for _ in range(layers):
        b.next_step()
        order = [int(q) for q in r.permutation(n)]
        i = 0
        while i < n:
            code = int(r.choice(opcodes.UNITARY_CODES))
            if opcodes.ARITY[code] == 2 and i + 1 < n:
                b.emit(code, order[i], order[i + 1], -1, -1, -1, 0, None, 0)
                i += 2
                continue
            if opcodes.ARITY[code] == 1:
                b.emit(code, order[i], -1, -1, -1, -1, 0, None, 0)
            i += 1
        b.next_step()
        count = int(r.integers(1, n + 1)) if per_layer is None else per_layer
        for q in r.choice(n, size=min(n, count), replace=False):
            b.measure(int(q), invert=bool(r.random() < 0.3))
        if r.random() < 0.3:  # again, before any gate: deterministic
            b.next_step()
            for q in r.choice(n, size=min(n, count), replace=False)[: max(1, count // 2)]:
                b.measure(int(q))
    return b.build()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 5, 63, 64, 65, 130, 1000, 9000])
@pytest.mark.parametrize("window", [1, 7, 8, 33, 64, 128])
@pytest.mark.parametrize("lowrank", [True, False])
def test_cuda_records_equal_the_full_run(n, window, lowrank):
    """Forward windows of 1 and 7 collapses (the rows pass), 8 to 128 (the low-rank update, or with
    `lowrank` off the rows pass, its oracle); qubit counts at the word edges and up to 9000 (141
    words: the plan in one block; more in test_cuda_the_papers_circuits)."""
    from cirq_quasarq.engines.cuda import measured_rows as cuda_rows

    engine, full = _cuda(lowrank_windows=lowrank), _cuda(measured_rows=False)
    for seed in range(3):
        program = _no_resets(n, layers=8 if n < 200 else 3, seed=10 * n + seed, per_layer=None if n < 200 else 70)
        sched = schedule(program)
        want = full.reference_records(program, sched)
        np.testing.assert_array_equal(cuda_rows.run_records(engine, program, sched, window=window), want)
        np.testing.assert_array_equal(measured_rows.run_records(program, sched), want)


def _device_planes(engine, program, sched, setting):
    """The backward sweep's planes (x, z, s) on the host, the sweep run as `setting` says."""
    from cirq_quasarq.engines.cuda import measured_rows as cuda_rows

    events = shared.Measurements(sched)
    words = -(-len(events.rows) // 64)
    keep = []

    def upload(a):
        buf = engine.alloc(a.nbytes)
        engine.cuda.memcpy_htod(buf, np.ascontiguousarray(a))
        keep.append(buf)
        return buf

    engine.pullback_in_one_launch = setting
    dp = engine.device_program(program, sched)
    planes = cuda_rows.pulled_back(engine, program, sched, events, dp, engine.alloc, upload)
    out = []
    for buf, size in zip(planes, (program.num_qubits * words, program.num_qubits * words, words)):
        host = np.empty(size, dtype=np.uint64)
        engine.cuda.memcpy_dtoh(host, buf)
        out.append(host)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("n, layers, per_layer", [(1, 8, None), (5, 8, None), (63, 8, None), (64, 8, None),
                                                  (65, 8, None), (130, 8, None), (1000, 3, 70), (2000, 3, 700),
                                                  (9000, 2, 4700), ("most", 2, 200)])
def test_cuda_backward_sweep_in_one_launch_is_a_launch_a_windows(n, layers, per_layer):
    """pullback_all (block w: word w through every window) against pullback_window (a launch a
    window), plane for plane: qubit counts at the word edges, measurement counts across words, more
    words than multiprocessors ("always"), and the most qubits whose strings fit a block's shared
    memory; one more qubit, or more words than multiprocessors, takes a launch a window."""
    from cirq_quasarq.engines.cuda import measured_rows as cuda_rows

    engine = _cuda()
    most = (engine.smem_optin - 1024) // 16
    assert cuda_rows.one_launch(engine, most, 1) and not cuda_rows.one_launch(engine, most + 1, 1)
    assert not cuda_rows.one_launch(engine, 100, engine.sm_count + 1)
    n = most if n == "most" else n
    for seed in range(2):
        program = _no_resets(n, layers=layers, seed=7 * n + seed, per_layer=per_layer)
        sched = schedule(program)
        want = _device_planes(engine, program, sched, False)
        for setting in (True, "always"):
            got = _device_planes(engine, program, sched, setting)
            for name, a, b in zip("xzs", got, want):
                np.testing.assert_array_equal(a, b, err_msg=f"plane {name}, n={n} seed={seed} {setting}")
        engine.pullback_in_one_launch = "always"
        np.testing.assert_array_equal(cuda_rows.run_records(engine, program, sched),
                                      measured_rows.run_records(program, sched))


@pytest.mark.gpu
@pytest.mark.parametrize("count", [63, 64, 65, 127, 128, 129])
def test_cuda_measurement_counts_at_the_sweeps_word_edges(count):
    """The backward sweep's words of 64 measurements and the transposes' tiles, at their edges."""
    engine, full = _cuda(), _cuda(measured_rows=False)
    program = _no_resets(300, layers=3, seed=count, per_layer=count // 3 + 1)
    sched = schedule(program)
    engine.measured_rows = "always"
    np.testing.assert_array_equal(engine.reference_records(program, sched), full.reference_records(program, sched))


@pytest.mark.gpu
@pytest.mark.parametrize("n, depth, measured", [(2000, 30, None), (12_000, 10, None), (12_000, 4, 300),
                                                (30_000, 6, None)])
def test_cuda_the_papers_circuits(n, depth, measured):
    """The paper's circuits: rows of one plan block (W <= 160) and of many (12k, 30k qubits)."""
    from benchmarks.random_clifford import random_clifford_program

    engine, full = _cuda(), _cuda(measured_rows=False)
    program = random_clifford_program(n, depth, seed=n + depth, measured=measured)
    sched = schedule(program)
    assert shared.pays(program, sched, engine.measured_rows_share)
    np.testing.assert_array_equal(engine.reference_records(program, sched), full.reference_records(program, sched))


@pytest.mark.gpu
def test_cuda_keeps_the_full_run_for_resets():
    """A program with a reset keeps the full run on the device (its flips are the NumPy engine's)."""
    from cirq_quasarq.engines.cuda import measured_rows as cuda_rows

    program = _mixed_program(40, layers=6, seed=3)
    sched = schedule(program)
    assert shared.supports(program) and not cuda_rows.supports(program, sched)
    engine = _cuda(measured_rows="always")
    np.testing.assert_array_equal(engine.reference_records(program, sched), _full(program, sched))


def test_first_calls_whose_reference_takes_the_measured_rows_compile_whole():
    """A streaming engine streams a large circuit's compile into the full run; where the reference
    will come from the measured rows (few measurements, no reset, no loop) the circuit compiles
    whole instead. Read off the circuit's counts and its first instructions: resets or a loop
    there, or measurements past n / 2, keep streaming; a reset or loop only later is not looked
    for (a pass over every target), and that circuit compiles whole."""
    stim = pytest.importorskip("stim")
    import types

    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq import shots

    engine = types.SimpleNamespace(measured_rows=True, measured_rows_share=0.5)
    circuit = paper_random_circuit_stim(600, 10, seed=1)
    assert shots._measured_rows_likely(engine, circuit, 600)
    for head in ("R 0", "MRX 3", "REPEAT 2 {\n H 0\n}", "QUBIT_COORDS(0) 0\nTICK\nRY 1 2"):
        assert not shots._measured_rows_likely(engine, stim.Circuit(head) + circuit, 600), head
    assert not shots._measured_rows_likely(engine, circuit + stim.Circuit("M " + " ".join(map(str, range(300)))), 600)
    for tail in ("R 0", "REPEAT 2 {\n H 0\n}"):
        assert shots._measured_rows_likely(engine, circuit + stim.Circuit(tail), 600), tail
    assert shots._measured_rows_likely(engine, stim.Circuit("TICK\n" * shots._LEADING + "R 0") + circuit, 600)
    off = types.SimpleNamespace(measured_rows=False, measured_rows_share=1)
    assert not shots._measured_rows_likely(off, circuit, 600)
    assert not shots._measured_rows_likely(object(), circuit, 600)


@pytest.mark.gpu
def test_cuda_first_call_on_the_measured_rows(monkeypatch):
    """A GPU first call on a paper circuit (a streaming size): compiled whole, the reference from
    the measured rows, the same bits as the CPU's call."""
    pytest.importorskip("stim")
    _cuda()  # skips without a GPU
    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq import QuasarqSimulator, shots
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache

    from .conftest import stream_from

    streamed = []
    monkeypatch.setattr(shots, "_streamed", lambda *args: streamed.append(args) or None)
    stream_from(monkeypatch, 1)
    circuit = paper_random_circuit_stim(12_000, 20, seed=4)
    clear_stim_cache()
    got = QuasarqSimulator(seed=2, device="gpu").sample_measurements(circuit, 300, bit_packed=True)
    assert not streamed
    clear_stim_cache()
    want = QuasarqSimulator(seed=2, device="cpu").sample_measurements(circuit, 300, bit_packed=True)
    np.testing.assert_array_equal(got, want)


def test_measured_rows_past_host_memory_are_refused_up_front():
    """The NumPy engine checks the measured rows' memory before any work: an OutOfMemoryError that
    names the collapses, the qubits and the bytes."""
    from benchmarks.random_clifford import random_clifford_program
    from cirq_quasarq.errors import OutOfMemoryError

    program = random_clifford_program(5000, 100, seed=1)
    sched = schedule(program)
    with pytest.raises(OutOfMemoryError, match=r"measured rows \(300 collapses on 5000 qubits\) need about"):
        NumpyEngine(memory_limit="1M").reference_records(program, sched)
    np.testing.assert_array_equal(NumpyEngine(memory_limit="64M").reference_records(program, sched),
                                  _full(program, sched))


@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_backward_sweep_is_the_numpys(seed, monkeypatch):
    """qq_host_pullback (host_tableau.cpp) against the NumPy sweep, its definition: the same planes,
    signs and reset masks, on programs of every opcode with resets, at 63 to 130 qubits."""
    from cirq_quasarq.core import native

    if native.library() is None:
        pytest.skip(f"the compiled path is not available here: {native.why_not()}")
    program = _mixed_program((63, 64, 65, 130)[seed], layers=6, seed=seed)
    sched = schedule(program)
    events = shared.Measurements(sched)
    got = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", flag)
        got[flag] = measured_rows.pulled_back(program.num_qubits, sched, events)
    (x1, z1, s1, m1), (x0, z0, s0, m0) = got["1"], got["0"]
    for a, b in ((x1, x0), (z1, z0), (s1, s0)):
        np.testing.assert_array_equal(a, b)
    assert sorted(m1) == sorted(m0) and events.resets.any()
    for e in m0:
        np.testing.assert_array_equal(m1[e], m0[e])


def _windows_walked(runs):
    """The CUDA sweep's windows as a walk of the runs in order (the definition `_windows_of` keeps)."""
    windows = []
    for lo, hi, code, window in runs.tolist():
        collapse = code in shared.COLLAPSE_CODES
        if windows and windows[-1][3] == window:
            first, _, c_lo, _ = windows[-1]
            if c_lo is not None and not collapse:
                return None
            windows[-1] = (first, hi, lo if c_lo is None and collapse else c_lo, window)
        else:
            windows.append((lo, hi, lo if collapse else None, window))
    return [(lo, hi, hi if c_lo is None else c_lo) for lo, hi, c_lo, _ in windows]


@pytest.mark.parametrize("seed", range(6))
def test_the_cuda_sweeps_windows_are_the_walks(seed):
    """`_windows_of` (array passes) against the walk of the runs: schedules of mixed programs, and
    runs reshuffled so that a gate follows a collapse in its window (None), windows of no collapse,
    a window of collapses only, no runs at all."""
    from cirq_quasarq.engines.cuda.measured_rows import _windows, _windows_of

    program = _mixed_program(40 + 17 * seed, layers=6, seed=seed) if seed % 2 else _no_resets(90, 5, seed)
    sched = schedule(program)
    got = _windows(sched)
    assert got.tolist() == [list(w) for w in _windows_walked(sched.runs)]
    assert _windows(sched) is got  # made once a schedule
    r = np.random.default_rng(seed)
    m, g = opcodes.CODE["M"], opcodes.CODE["H"]
    for _ in range(50):
        count = int(r.integers(1, 12))
        codes = r.choice([m, g, opcodes.CODE["MR"], opcodes.CODE["CX"]], size=count)
        windows = np.sort(r.integers(0, 4, size=count))
        bounds = np.cumsum(r.integers(1, 5, size=count + 1))
        runs = np.stack([bounds[:-1], bounds[1:], codes, windows], axis=1).astype(np.int32)
        want = _windows_walked(runs)
        found = _windows_of(runs)
        assert (found is None) == (want is None)
        if want is not None:
            assert found.tolist() == [list(w) for w in want]
    assert _windows_of(np.zeros((0, 4), dtype=np.int32)).shape == (0, 3)
