"""The CUDA engine against the NumPy engine, bit for bit: same key -> identical records, final
inverse tableau and frame samples (noise included), independent of chunk sizes and of where the
frames live. Programs are built directly with ProgramBuilder: every opcode, M / R / MR, Pauli
channels (dense and sparse Bernoulli), confusion maps, classical control and nested loops."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.engines import NumpyEngine, cuda_available
from cirq_quasarq.errors import OutOfMemoryError
from cirq_quasarq.core.program import ProgramBuilder
from cirq_quasarq.schedule import schedule

from .programs import UNITARY_1, UNITARY_2, measure_window_program, window_program, window_widths

pytestmark = pytest.mark.gpu

Kind = opcodes.Kind
PAULIS = ["I", "X", "Y", "Z"]
PROBS = [0.0, 1e-4, 1e-3, 0.003, 0.01, 1 / 128, 0.05, 0.2, 0.5, 1.0]


@pytest.fixture(scope="module")
def cuda_engine():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    return CudaEngine()


@pytest.fixture(scope="module", params=["block", "lowrank", "rows", "no-sync", "sync"])
def cuda_engines(request):
    """Each measurement path: small windows in one block; the window as a low-rank update
    (measure_lowrank.cu); the window in one pass over the rows, each row through every collapse
    (measure_rows.cu); per collapse, transposed, with and without the per-window host read of
    deterministic / random flags (the batched paths' sequential oracle)."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    if request.param == "block":
        return CudaEngine()
    if request.param == "lowrank":
        engine = CudaEngine(block_windows=False)
        engine.lowrank_min = 2
        return engine
    if request.param == "rows":
        return CudaEngine(block_windows=False, lowrank_windows=False)
    return CudaEngine(window_sync=request.param == "sync", block_windows=False, batch_windows=False)


@pytest.fixture(scope="module")
def numpy_engine():
    return NumpyEngine()


# ---------------------------------------------------------------------------------- programs
class _Gen:
    """Random programs over the whole instruction set, built with ProgramBuilder."""

    def __init__(self, n: int, seed: int, frames: bool):
        self.r = random.Random(seed)
        self.b = ProgramBuilder(n)
        self.n = n
        self.frames = frames  # classically controlled ops limited to Paulis (frame mode can run it)
        self.scopes = [[]]  # per open loop depth: (iteration-0 record slot) measured in that scope

    def layer_unitaries(self, fill=0.8):
        b, r = self.b, self.r
        b.next_step()
        qs = list(range(self.n))
        r.shuffle(qs)
        qs = qs[: max(1, int(len(qs) * fill))]
        while qs:
            if len(qs) >= 2 and r.random() < 0.5:
                b.gate(r.choice(UNITARY_2), qs.pop(), qs.pop())
            else:
                b.gate(r.choice(UNITARY_1), qs.pop())

    def channel(self, name, arity):
        b, r = self.b, self.r
        p = r.choice(PROBS)
        if name in ("X_ERROR", "Y_ERROR", "Z_ERROR"):
            return b.channel_id(1, [p], [["XYZ".index(name[0]) + 1]])
        if name == "DEPOLARIZE1":
            return b.channel_id(1, [p / 3] * 3, [[1], [2], [3]])
        if name == "DEPOLARIZE2":
            paulis = [[a, c] for a in range(4) for c in range(4)][1:]
            return b.channel_id(2, [p / 15] * 15, paulis)
        if name == "PAULI_CHANNEL_1":
            w = [r.random() for _ in range(3)]
            return b.channel_id(1, [p * x / sum(w) for x in w], [[1], [2], [3]])
        if name == "PAULI_CHANNEL_2":
            paulis = [[a, c] for a in range(4) for c in range(4)][1:]
            w = [r.random() * (r.random() < 0.5) for _ in range(15)]
            w[r.randrange(15)] += 0.1
            return b.channel_id(2, [p * x / sum(w) for x in w], paulis)
        # E: one Pauli product on `arity` qubits
        return b.channel_id(arity, [p], [[r.randrange(1, 4) for _ in range(arity)]])

    def layer_noise(self):
        b, r = self.b, self.r
        b.next_step()
        qs = list(range(self.n))
        r.shuffle(qs)
        qs = qs[: max(1, len(qs) // 2)]
        while qs:
            name = r.choice(["X_ERROR", "Y_ERROR", "Z_ERROR", "DEPOLARIZE1", "DEPOLARIZE2", "PAULI_CHANNEL_1",
                             "PAULI_CHANNEL_2", "E"])
            if name == "E":
                k = min(len(qs), r.randint(1, 3))
                targets = [qs.pop() for _ in range(k)]
                b.noise("E", targets, self.channel("E", k))
            elif opcodes.BY_NAME[name].arity == 2:
                if len(qs) < 2:
                    break
                targets = [qs.pop(), qs.pop()]
                b.noise(name, targets, self.channel(name, 2))
            else:
                q = qs.pop()
                b.noise(name, [q], self.channel(name, 1))

    def layer_collapse(self):
        b, r = self.b, self.r
        b.next_step()
        qs = r.sample(range(self.n), r.randint(1, max(1, self.n // 3)))
        for q in qs:
            k = r.random()
            if k < 0.55:
                self.scopes[-1].append(b.measure(q, invert=r.random() < 0.3))
            elif k < 0.75:
                b.reset(q)
            else:
                self.scopes[-1].append(b.measure(q, invert=r.random() < 0.3, reset=True))

    def confusion(self):
        recs = self.scopes[-1]
        if not recs:
            return
        k = self.r.randint(1, min(2, len(recs)))
        first = recs[-1] - k + 1
        if first not in recs or any(f not in recs for f in range(first, first + k)):
            return
        m = np.array([[self.r.random() ** 3 for _ in range(2**k)] for _ in range(2**k)])
        m += np.eye(2**k) * self.r.random() * 4
        self.b.next_step()
        self.b.confusion(first, m / m.sum(axis=1, keepdims=True))

    def controlled(self):
        b, r = self.b, self.r
        avail = [(slot, d) for d, scope in enumerate(self.scopes) for slot in scope]
        if not avail:
            return
        refs = r.sample(avail, r.randint(1, min(2, len(avail))))
        table = [r.random() < 0.5 for _ in range(2 ** len(refs))]
        cond = b.condition(refs, table)
        b.next_step()
        q = r.randrange(self.n)
        if self.frames or r.random() < 0.4:
            b.gate(r.choice(PAULIS), q, cond=cond)
        else:
            kind = r.random()
            if kind < 0.5:
                if r.random() < 0.5 and self.n >= 2:
                    q1 = r.choice([x for x in range(self.n) if x != q])
                    b.gate(r.choice(UNITARY_2), q, q1, cond=cond)
                else:
                    b.gate(r.choice(UNITARY_1), q, cond=cond)
            elif kind < 0.8:
                b.measure(q, cond=cond)  # its record is only compared, never referenced
            else:
                b.noise("DEPOLARIZE1", [q], self.channel("DEPOLARIZE1", 1), cond=cond)
        b.next_step()

    def body(self, depth, layers):
        for _ in range(layers):
            k = self.r.random()
            if k < 0.35:
                self.layer_unitaries()
            elif k < 0.5:
                self.layer_noise()
            elif k < 0.75:
                self.layer_collapse()
            elif k < 0.82:
                self.confusion()
            elif k < 0.9:
                self.controlled()
            elif depth < 2:
                self.b.begin_loop(self.r.choice([0, 1, 2, 3]))
                self.scopes.append([])
                if self.r.random() < 0.6:
                    self.layer_collapse()
                    self.controlled()
                self.body(depth + 1, self.r.randint(1, 4))
                self.scopes.pop()
                self.b.end_loop()
                self.b.next_step()
            else:
                self.layer_unitaries()


def rich_program(n: int, layers: int, seed: int, *, frames: bool = True):
    g = _Gen(n, seed, frames)
    g.layer_unitaries(1.0)
    g.body(0, layers)
    g.layer_collapse()
    return g.b.build()


def assert_same_tableau_run(cuda_engine, numpy_engine, program, key, repetition=0, reference=False, ctx=""):
    sched = schedule(program)
    got = cuda_engine.run_tableau(program, sched, key, repetition=repetition, reference=reference)
    want = numpy_engine.run_tableau(program, sched, key, repetition=repetition, reference=reference)
    bad = np.flatnonzero(got.records != want.records)
    assert len(bad) == 0, f"{ctx}: records differ at {bad[:10]} (of {len(want.records)})"
    t, u = got.tableau, want.tableau
    for name in ("xx", "xz", "zx", "zz", "xs", "zs"):
        a, b = getattr(t, name), getattr(u, name)
        assert a.shape == b.shape and np.array_equal(a, b), (
            f"{ctx}: tableau part {name} differs at rows {np.flatnonzero((a != b).reshape(len(a), -1).any(axis=1))[:10]}")
    assert t.equals(u), ctx


def frames_of(engine, program, seed, shots):
    sched = schedule(program)
    ref = NumpyEngine().run_tableau(program, sched, rng.make_key(seed), reference=True).records
    return engine.sample_frames(program, sched, rng.make_key(seed + 1), ref, shots)


def assert_same_frames(got, want, shots, ctx=""):
    mask = np.full(got.shape[1] if got.ndim == 2 else 0, ~np.uint64(0), dtype=np.uint64)
    if shots % 64 and len(mask):
        mask[-1] = np.uint64((1 << (shots % 64)) - 1)
    diff = (got ^ want) & mask
    bad = np.argwhere(diff != 0)
    assert got.shape == want.shape and len(bad) == 0, f"{ctx}: frame bits differ at (record, word) {bad[:8].tolist()}"


# ---------------------------------------------------------------------------------- tableau mode
@pytest.mark.parametrize("seed", range(24))
def test_random_programs_tableau(cuda_engines, numpy_engine, seed):
    n = [1, 2, 5, 17, 64, 65, 130, 200][seed % 8]
    program = rich_program(n, 14, seed, frames=seed % 2 == 0)
    key = rng.make_key(1000 + seed)
    for repetition, reference in ((0, False), (77, False), (0, True)):
        assert_same_tableau_run(cuda_engines, numpy_engine, program, key, repetition, reference,
                                ctx=f"seed={seed} n={n} rep={repetition} ref={reference}")


@pytest.mark.parametrize("n", [700, 2500])
def test_large_random_clifford_tableau(cuda_engines, numpy_engine, n):
    """A few thousand qubits: dense tableau, many words per row, several random collapses per window."""
    r = random.Random(n)
    b = ProgramBuilder(n)
    for layer in range(12):
        b.next_step()
        qs = list(range(n))
        r.shuffle(qs)
        qs = qs[: int(0.7 * n)]
        while qs:
            if len(qs) >= 2 and r.random() < 0.4:
                b.gate(r.choice(["CX", "CY", "CZ", "SWAP", "ISWAP"]), qs.pop(), qs.pop())
            else:
                b.gate(r.choice(["X", "Y", "Z", "H", "S", "S_DAG"]), qs.pop())
        if layer % 3 == 2:
            b.next_step()
            for q in r.sample(range(n), 6):
                if r.random() < 0.7:
                    b.measure(q)
                else:
                    b.reset(q)
    program = b.build()
    assert_same_tableau_run(cuda_engines, numpy_engine, program, rng.make_key(n), ctx=f"n={n}")


def test_every_opcode(cuda_engine, numpy_engine):
    """Each entry of opcodes.OPCODES, in tableau and frame mode, on entangled random states."""
    for op in opcodes.OPCODES:
        for seed in range(3):
            r = random.Random(seed * 1000 + op.code)
            n = 5
            b = ProgramBuilder(n)
            g = _Gen(n, seed, frames=True)
            g.b = b
            g.layer_unitaries(1.0)
            g.layer_unitaries(1.0)
            b.next_step()
            qs = r.sample(range(n), 3)
            if op.kind == Kind.UNITARY:
                b.gate(op.name, qs[0], qs[1] if op.arity == 2 else -1)
            elif op.kind in (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET):
                b.emit(op.code, qs[0], -1, rec=b.take_records(1) if op.kind != Kind.RESET else -1,
                       rand=b.take_rand(), flags=seed % 2)
            elif op.kind == Kind.NOISE:
                k = op.arity or 3
                ch = g.channel(op.name, k)
                b.noise(op.name, qs[:k], ch)
            elif op.kind == Kind.RECORD_NOISE:
                first = b.measure(qs[0])
                b.measure(qs[1])
                b.next_step()
                b.confusion(first, np.array([[0.7, 0.1, 0.1, 0.1], [0.2, 0.5, 0.2, 0.1],
                                             [0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]]))
            elif op.kind == Kind.FRAME:  # frame mode's parity into qs[1]'s X frame, read by its measurement
                b.emit(op.code, qs[0], qs[1])
            elif op.kind == Kind.LOOP:
                b.begin_loop(3)
                g.layer_unitaries(0.5)
                b.next_step()
                b.measure(qs[0])
                b.end_loop()
            b.next_step()
            for q in range(n):
                b.measure(q)
            program = b.build()
            key = rng.make_key(seed)
            for repetition in (0, 3):
                assert_same_tableau_run(cuda_engine, numpy_engine, program, key, repetition,
                                        ctx=f"opcode {op.name} seed={seed}")
            shots = 200
            assert_same_frames(frames_of(cuda_engine, program, seed, shots),
                               frames_of(numpy_engine, program, seed, shots), shots, ctx=f"opcode {op.name}")


def test_lazy_tableau_survives_the_next_run(cuda_engine, numpy_engine):
    """A run's tableau is downloaded lazily; a later run must not overwrite an unread one."""
    p1, p2 = rich_program(70, 10, 1, frames=False), rich_program(33, 10, 2, frames=False)
    key = rng.make_key(9)
    first = cuda_engine.run_tableau(p1, schedule(p1), key)
    second = cuda_engine.run_tableau(p2, schedule(p2), key)
    assert first.tableau.equals(numpy_engine.run_tableau(p1, schedule(p1), key).tableau)
    assert second.tableau.equals(numpy_engine.run_tableau(p2, schedule(p2), key).tableau)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 63, 64, 65, 130, 700, 2500])
def test_forward_rows_on_the_device(cuda_engine, numpy_engine, n, monkeypatch):
    """forward.cu's stabilizers and destabilizers (letters and signs) equal the host's blocked
    derivation and the row products, at sizes around the word and the 8-generator block; from the
    workspace (the tableau still on the device) and from an uploaded copy (after a later run), the
    letters in one band and in bands of one word."""
    from cirq_quasarq.engines.cuda import tableau as cuda_tableau

    program = rich_program(n, 10, n, frames=False)
    key = rng.make_key(n)
    want = numpy_engine.run_tableau(program, schedule(program), key).tableau
    oracle = dict(zip(("destabilizers", "stabilizers"), np.split(np.arange(2 * n), 2)))
    xs, zs, rs = want.forward_by_products()
    for band in (cuda_tableau.FWD_LETTER_BAND_BYTES, 1):
        monkeypatch.setattr(cuda_tableau, "FWD_LETTER_BAND_BYTES", band)
        for later_run in (False, True):
            run = cuda_engine.run_tableau(program, schedule(program), key)
            if later_run:
                cuda_engine.run_tableau(program, schedule(program), rng.make_key(n + 1))
            for half, rows in oracle.items():
                letters, signs = run.forward_rows(half)
                x, z = xs[rows].view(np.uint8), zs[rows].view(np.uint8)
                assert np.array_equal(letters, (z << 1) | (x ^ z)), (n, half, band, later_run)
                assert np.array_equal(signs, rs[rows]), (n, half, band, later_run)
            assert run.tableau.equals(want)


def test_final_state_tableau_and_stabilizers_from_the_device(cuda_engine):
    """Through simulate(): the GPU state's tableau and stabilizers (derived on the device) equal
    the CPU state's (derived on the host) for the same seed."""
    import cirq

    from cirq_quasarq import QuasarqSimulator

    qubits = cirq.LineQubit.range(150)
    r = np.random.default_rng(7)
    circuit = cirq.Circuit()
    for _ in range(6):
        circuit.append(cirq.H(q) if r.random() < 0.5 else cirq.S(q) for q in qubits)
        order = r.permutation(150)
        circuit.append(cirq.CZ(qubits[a], qubits[b]) for a, b in zip(order[::2], order[1::2]))
    circuit.append(cirq.measure(*qubits[:40], key="m"))
    gpu = QuasarqSimulator(seed=5, device="gpu").simulate(circuit).final_state
    cpu = QuasarqSimulator(seed=5, device="cpu").simulate(circuit).final_state
    assert gpu.stabilizers() == cpu.stabilizers()
    assert gpu.tableau == cpu.tableau


def test_sample_tableau_shots(cuda_engine, numpy_engine):
    program = rich_program(9, 10, 5, frames=False)
    sched = schedule(program)
    key = rng.make_key(5)
    got = cuda_engine.sample_tableau_shots(program, sched, key, 70)
    want = numpy_engine.sample_tableau_shots(program, sched, key, 70)
    assert_same_frames(got, want, 70)


TABLEAU_PARTS = ("xx", "xz", "zx", "zz", "xs", "zs")


def tableau_copy(t):
    return {name: np.array(getattr(t, name), copy=True) for name in TABLEAU_PARTS}


def assert_same_parts(t, u, ctx=""):
    for name in TABLEAU_PARTS:
        a, b = getattr(t, name), getattr(u, name)
        assert a.shape == b.shape and np.array_equal(a, b), f"{ctx}: tableau part {name} differs"


@pytest.mark.parametrize("seed", range(8))
def test_run_from_initial_tableau(cuda_engines, numpy_engine, seed):
    """Program B run from program A's final tableau: same records and tableau as the NumPy engine
    doing the same, on every measurement path; the `initial` arrays are left as they were."""
    n = [1, 5, 17, 64, 65, 130, 200, 700][seed]
    a, b = rich_program(n, 10, 2000 + seed, frames=False), rich_program(n, 10, 3000 + seed, frames=False)
    key_a, key_b = rng.make_key(40 + seed), rng.make_key(80 + seed)
    got_a = cuda_engines.run_tableau(a, schedule(a), key_a, repetition=seed)
    want_a = numpy_engine.run_tableau(a, schedule(a), key_a, repetition=seed)
    assert np.array_equal(got_a.records, want_a.records), f"seed={seed}: records of A differ"
    start = got_a.tableau
    assert_same_parts(start, want_a.tableau, f"seed={seed} A")
    before = tableau_copy(start)
    for repetition, reference in ((0, False), (5, False), (0, True)):
        got = cuda_engines.run_tableau(b, schedule(b), key_b, repetition=repetition, reference=reference,
                                       initial=start)
        want = numpy_engine.run_tableau(b, schedule(b), key_b, repetition=repetition, reference=reference,
                                        initial=want_a.tableau)
        ctx = f"seed={seed} n={n} rep={repetition} ref={reference}"
        bad = np.flatnonzero(got.records != want.records)
        assert len(bad) == 0, f"{ctx}: records differ at {bad[:10]} (of {len(want.records)})"
        assert_same_parts(got.tableau, want.tableau, ctx)
        assert got.tableau.equals(want.tableau), ctx
        for name in TABLEAU_PARTS:
            assert np.array_equal(getattr(start, name), before[name]), f"{ctx}: initial.{name} was modified"
            assert not np.shares_memory(getattr(got.tableau, name), getattr(start, name)), ctx


def test_run_from_initial_tableau_chain(cuda_engine, numpy_engine):
    """A chain of runs, each from the last one's (lazily downloaded) tableau, with a program of
    another size in between (a new device workspace), equals the NumPy engine's chain."""
    n = 70
    programs = [rich_program(n, 8, 4000 + i, frames=False) for i in range(4)]
    other = rich_program(33, 8, 4100, frames=False)
    got_t = want_t = None
    for i, p in enumerate(programs):
        key = rng.make_key(500 + i)
        got = cuda_engine.run_tableau(p, schedule(p), key, initial=got_t)
        want = numpy_engine.run_tableau(p, schedule(p), key, initial=want_t)
        assert np.array_equal(got.records, want.records), f"step {i}: records differ"
        cuda_engine.run_tableau(other, schedule(other), key)  # another shape: the workspace is replaced
        got_t, want_t = got.tableau, want.tableau
        assert_same_parts(got_t, want_t, f"step {i}")


def test_initial_tableau_of_the_wrong_size_is_refused(cuda_engine):
    from cirq_quasarq.core.tableau import InverseTableau

    program = rich_program(10, 4, 1, frames=False)
    with pytest.raises(ValueError, match="initial tableau"):
        cuda_engine.run_tableau(program, schedule(program), rng.make_key(1), initial=InverseTableau.identity(11))


# ---------------------------------------------------------------------------------- frame mode
@pytest.mark.parametrize("seed", range(16))
def test_random_programs_frames(cuda_engine, numpy_engine, seed):
    n = [3, 12, 40, 100][seed % 4]
    program = rich_program(n, 16, 500 + seed, frames=True)
    shots = [1, 64, 300, 64 * 37 + 5][seed % 4]
    assert_same_frames(frames_of(cuda_engine, program, seed, shots), frames_of(numpy_engine, program, seed, shots),
                       shots, ctx=f"seed={seed} n={n}")


def test_frames_independent_of_chunks_and_slab(numpy_engine):
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    program = rich_program(30, 20, 77, frames=True)
    shots = 64 * 23 + 17
    want = frames_of(numpy_engine, program, 3, shots)
    for kwargs in ({"max_shot_words": 1}, {"max_shot_words": 5}, {}, {"frame_memory": "global"},
                   {"frame_memory": "global", "max_shot_words": 4}, {"frame_noise": "direct"},
                   {"frame_noise": "direct", "frame_memory": "global", "max_shot_words": 3}):
        got = frames_of(CudaEngine(**kwargs), program, 3, shots)
        assert_same_frames(got, want, shots, ctx=str(kwargs))


@pytest.mark.parametrize("n", [3000, 4000])
def test_one_block_a_multiprocessor_between_one_and_two_waves(numpy_engine, monkeypatch, n):
    """Where the plan's blocks outnumber the multiprocessors but number fewer than twice as many,
    the words go out one block a multiprocessor (S = ceil(words / multiprocessors), all the shared
    memory a block may opt in to): n = 4,000 (64 KB a word: one word a block, then two) and 3,000
    (48 KB: two words, then three). Shot counts just inside the band, at twice the multiprocessors'
    words (S kept) and under one wave (S kept); records, shot-major records and shot-major
    parities against the NumPy engine, the S and shared memory of every launch checked."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.core.parities import Parities
    from cirq_quasarq.core.program import Annotation
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.engines.cuda.frames import FrameMode

    engine = CudaEngine(frame_memory="shared")
    frames = engine._frames
    sms, slab_word = engine.sm_count, 16 * n
    room = frames.dynamic_room("frames_program_shared")
    alone = frames.dynamic_room("frames_program_shared", alone=True)
    cap = room // slab_word
    assert cap == {3000: 2, 4000: 1}[n] and (cap + 1) * slab_word <= alone
    launches = []
    piece = FrameMode._piece

    def watched(self, name, n_, S, room_, *args):
        launches.append((S, room_))
        return piece(self, name, n_, S, room_, *args)

    monkeypatch.setattr(FrameMode, "_piece", watched)
    program = measured_rounds_program(n, 2, n, noisy_qubits=50)
    sched = schedule(program)
    ref = numpy_engine.run_tableau(program, sched, rng.make_key(1), reference=True).records
    r = np.random.default_rng(n)
    parities = Parities.of([Annotation("detector", r.integers(0, program.num_records, int(r.integers(1, 4))))
                            for _ in range(700)], ref)
    inside = 64 * cap * (sms + 7) + 3  # cap·(sms + 8) words: cap + 1 a block
    for shots, S in ((inside, cap + 1), (64 * 2 * cap * sms, cap), (64 * (sms - 3), 1)):
        key = rng.make_key(shots)
        for rows, shot_major in ((None, False), (None, True), (parities, True)):
            launches.clear()
            got = engine.sample_frames(program, sched, key, ref, shots, rows, shot_major)
            want = numpy_engine.sample_frames(program, sched, key, ref, shots, rows, shot_major)
            if shot_major:
                assert got.shape == want.shape and np.array_equal(got, want), (n, shots, rows is not None)
            else:
                assert_same_frames(got, want, shots, ctx=f"n={n} shots={shots}")
            assert {s for s, _ in launches} == {S}, (n, shots, launches)
            assert {q for _, q in launches} == {alone if S == cap + 1 else room}, (n, shots, launches)


@pytest.mark.parametrize("seed", range(6))
def test_spread_frames_equal_the_block_kernels(numpy_engine, seed):
    """frames_program_spread (every block on the same words, grid barriers between windows) gives
    the bits of the block kernels (its oracle) and of the NumPy engine: programs with noise of every
    mode, collapses, resets, confusions, classical control and nested loops; one word, a few, 64
    (a launch's most) and more (several launches); noise deferred and direct; chunks of 3 words."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    n = [3, 40, 300, 2000, 700, 60][seed]
    program = rich_program(n, 18, 1300 + seed, frames=True)
    block = CudaEngine()
    block.spread_frames = False
    spread = [CudaEngine(), CudaEngine(frame_noise="direct"), CudaEngine(max_shot_words=3)]
    for engine in spread:
        engine.spread_frames = True
    for shots in (1, 64 * 5 + 7, 64 * 64, 64 * 70 + 3):
        want = frames_of(numpy_engine, program, seed, shots)
        assert_same_frames(frames_of(block, program, seed, shots), want, shots, ctx=f"block kernels, {shots} shots")
        for i, engine in enumerate(spread):
            assert_same_frames(frames_of(engine, program, seed, shots), want, shots, ctx=f"spread {i}, {shots} shots")


def wide_program(n: int, layers: int, seed: int, gates=UNITARY_2):
    """Layers of two-qubit gates (drawn from `gates`) on every qubit, dense and sparse noise on a
    quarter of the qubits and on a few, collapses with resets, a Pauli conditioned on a record, and
    a loop of three such layers: windows of thousands of rows, noise runs longer and shorter than a
    grid's blocks."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    sparse = b.channel_id(1, [1e-3 / 3] * 3, [[1], [2], [3]])
    dense = b.channel_id(1, [0.2], [[1]])

    def layer():
        b.next_step()
        qs = list(range(n))
        r.shuffle(qs)
        while len(qs) >= 2:
            b.gate(r.choice(gates), qs.pop(), qs.pop())
        b.next_step()
        for q in r.sample(range(n), n // 4):
            b.noise("DEPOLARIZE1", [q], sparse)
        b.next_step()
        for q in r.sample(range(n), 30):
            b.noise("X_ERROR", [q], dense)
        b.next_step()
        measured = r.sample(range(n), 60)
        for q in measured:
            b.measure(q, reset=r.random() < 0.3)
        return b.num_records - 1

    for _ in range(layers):
        last = layer()
    cond = b.condition([(last, 0)], [False, True])
    b.next_step()
    b.gate("X", r.randrange(n), cond=cond)
    b.next_step()
    b.begin_loop(3)
    layer()
    b.end_loop()
    b.next_step()
    for q in r.sample(range(n), 500):
        b.measure(q)
    return b.build()


def test_spread_frames_of_wide_windows(numpy_engine):
    """Windows of 5k to 20k rows at 20k qubits (frames in global memory): a thread of the spread
    grid takes several (row, word) items of a window at 64 words, noise runs split between its
    blocks; equal to the block kernels and the NumPy engine, records and Stim's shot-major layout.
    Frame mode takes the spread kernel by itself for one shot word of such a program of a few
    gates (a few long runs a window), not for a three-qubit program."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    auto = CudaEngine()
    few = wide_program(20000, 3, 5, gates=("CX", "CZ"))
    assert auto._frames.spread_pays(auto.device_program(few, schedule(few)), 1, False)
    small = rich_program(3, 6, 2, frames=True)
    assert not auto._frames.spread_pays(auto.device_program(small, schedule(small)), 1, True)
    program = wide_program(20000, 3, 5)
    sched = schedule(program)
    block, spread = CudaEngine(), CudaEngine()
    block.spread_frames, spread.spread_frames = False, True
    ref = block.run_tableau(program, sched, rng.make_key(3), reference=True).records  # (any records do)
    for shots in (1, 64 * 3 + 5, 64 * 64):
        key = rng.make_key(shots)
        want = numpy_engine.sample_frames(program, sched, key, ref, shots)
        for name, engine in (("block", block), ("spread", spread), ("auto", auto)):
            assert_same_frames(engine.sample_frames(program, sched, key, ref, shots), want, shots,
                               ctx=f"{name}, {shots} shots")
    want = numpy_engine.sample_frames(program, sched, rng.make_key(8), ref, 64 * 2 + 1, shot_major=True)
    for fused in (True, False):
        spread.fused_shot_major = fused
        got = spread.sample_frames(program, sched, rng.make_key(8), ref, 64 * 2 + 1, shot_major=True)
        assert got.shape == want.shape and np.array_equal(got, want), f"shot-major, fused={fused}"


def test_results_held_across_calls_keep_their_bits(numpy_engine):
    """Results land in ordinary memory or in kept page-locked buffers (reused only when no result
    holds them): six calls whose results are all kept, then one after each is dropped, each
    still equal to the NumPy engine's; page-locked buffers are made from the engine's fifth call
    that found none free of its size, and no more are kept than two."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine()
    program = rich_program(20, 10, 5, frames=True)
    shots = 64 * 9 + 3
    kept = [(seed, frames_of(engine, program, seed, shots)) for seed in range(6)]
    assert engine.held_bytes()["pinned"] > 0
    assert len(engine._frames._pinned) <= 2
    for seed in range(6, 10):
        kept.append((seed, frames_of(engine, program, seed, shots)))
        kept.pop(0)
    for seed, got in kept:
        assert_same_frames(got, frames_of(numpy_engine, program, seed, shots), shots, ctx=f"seed={seed}")


@pytest.mark.parametrize("prefault_min", [None, 1])
def test_a_loop_keeping_the_previous_result_settles_on_two_page_locked_buffers(numpy_engine, monkeypatch,
                                                                               prefault_min):
    """`r = sample(...)` in a loop holds one result while the next is sampled: after the first
    calls, every result lands in one of two kept page-locked buffers, in turn (before, a hit
    reset the miss count, so every other call of such a loop copied into ordinary memory), with
    the NumPy engine's bits; a loop keeping every result stops at two buffers. With
    `prefault_min` = 1 every result in ordinary memory has its pages touched on threads first."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.engines.cuda import frames as frame_mode

    if prefault_min is not None:
        monkeypatch.setattr(frame_mode, "_PREFAULT_MIN_BYTES", prefault_min)
    engine = CudaEngine()
    program = rich_program(20, 10, 5, frames=True)
    shots = 64 * 9 + 3
    previous = None
    for seed in range(9):
        got = frames_of(engine, program, seed, shots)
        pinned = engine._frames._pinned
        in_pinned = any(np.shares_memory(got, buf) for buf in pinned)
        if seed >= 5:
            assert in_pinned and len(pinned) == 2, f"call {seed}: a kept page-locked buffer"
            assert not np.shares_memory(got, previous)
        assert_same_frames(got, frames_of(numpy_engine, program, seed, shots), shots, ctx=f"seed={seed}")
        previous = got
    kept = [frames_of(engine, program, seed, shots) for seed in range(6)]
    assert len(engine._frames._pinned) == 2
    for seed, got in enumerate(kept):
        assert_same_frames(got, frames_of(numpy_engine, program, seed, shots), shots, ctx=f"kept seed={seed}")


@pytest.mark.parametrize("shot_major", [False, True])
def test_result_memory_made_ahead_is_the_calls_and_changes_no_bit(numpy_engine, monkeypatch, shot_major):
    """`expect_samples` before a call (a first call says it before its schedule and reference): the
    call takes the memory made ahead (its pages touched on threads) and returns the NumPy engine's
    bits; an expectation the call does not match (other records, shots or layout, or parities
    asked) is dropped and the call takes memory of its own, with the same bits."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.core.parities import Parities
    from cirq_quasarq.core.program import Annotation
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.engines.cuda import frames as frame_mode

    monkeypatch.setattr(frame_mode, "_PREFAULT_MIN_BYTES", 1)
    engine = CudaEngine()
    program = rich_program(20, 10, 7, frames=True)
    sched = schedule(program)
    ref = NumpyEngine().run_tableau(program, sched, rng.make_key(3), reference=True).records
    key, records = rng.make_key(4), program.num_records
    shots = 64 * 9 + 3
    want = numpy_engine.sample_frames(program, sched, key, ref, shots, shot_major=shot_major)
    engine.expect_samples(records, shots, shot_major)
    made = engine._frames._expected[1]
    got = engine.sample_frames(program, sched, key, ref, shots, shot_major=shot_major)
    assert np.shares_memory(got, made) and engine._frames._expected is None
    np.testing.assert_array_equal(got, want) if shot_major else assert_same_frames(got, want, shots)
    for other in ((records + 1, shots, shot_major), (records, shots + 64, shot_major), (records, shots, not shot_major)):
        engine.expect_samples(*other)
        made = engine._frames._expected[1]
        got = engine.sample_frames(program, sched, key, ref, shots, shot_major=shot_major)
        assert not np.shares_memory(got, made), other
        np.testing.assert_array_equal(got, want) if shot_major else assert_same_frames(got, want, shots)
    assert records >= 2
    parities = Parities.of([Annotation("detector", np.array([0, records - 1])), Annotation("observable", np.array([1]))],
                           ref)
    engine.expect_samples(records, shots, False)
    made = engine._frames._expected[1]
    got = engine.sample_frames(program, sched, key, ref, shots, parities)
    assert not np.shares_memory(got, made)
    assert_same_frames(got, numpy_engine.sample_frames(program, sched, key, ref, shots, parities), shots)
    engine.expect_samples(0, shots, False)  # (nothing to make)
    assert engine._frames._expected is None


def test_page_locked_memory_is_locked_as_the_engine_starts(numpy_engine, monkeypatch):
    """A new engine starts locking its staging slots and tableau mode's window flags on a thread
    (engine.STAGING_AT_START): a run takes the flags locked so, and frame mode's slots are ready
    without a call; with the setting off, neither exists before the first call that needs it. The
    bits are the NumPy engine's either way."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.engines.cuda import engine as cuda_engine_module
    from cirq_quasarq.engines.cuda import tableau as tableau_mode

    program = rich_program(30, 6, 11, frames=True)
    key = rng.make_key(5)
    engine = CudaEngine()
    flags = engine._tableau.host_flags
    assert flags is not None and engine._frames._staging is not None
    locked = flags.result()
    assert len(locked) == tableau_mode.HOST_FLAGS_MIN
    engine._frames._staging._locking.result()
    assert engine._frames._staging.ready()
    assert_same_tableau_run(engine, numpy_engine, program, key, ctx="flags locked ahead")
    assert engine._tableau.host_flags is locked and engine._tableau.ws.host_flags is locked
    assert_same_frames(frames_of(engine, program, 3, 200), frames_of(numpy_engine, program, 3, 200), 200)
    monkeypatch.setattr(cuda_engine_module, "STAGING_AT_START", False)
    later = CudaEngine()
    assert later._tableau.host_flags is None and later._frames._staging is None
    assert_same_tableau_run(later, numpy_engine, program, key, ctx="flags locked at the run")
    assert len(later._tableau.host_flags) == tableau_mode.HOST_FLAGS_MIN


@pytest.mark.parametrize("seed", range(4))
def test_deferred_noise_equals_direct(numpy_engine, seed):
    """Frame mode's deferred noise (any-lane draws first, fired words queued per warp) gives the
    bits of the direct per-word step and of the NumPy engine: many noise layers of every
    probability mode, enough words that the queues fill and flush many times."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    program = rich_program([60, 150, 300, 700][seed], 30, 900 + seed, frames=True)
    shots = 64 * [401, 77, 130, 9][seed] + 13 * seed
    want = frames_of(numpy_engine, program, seed, shots)
    for kwargs in ({}, {"frame_noise": "direct"}, {"max_shot_words": 7}, {"frame_memory": "global"}):
        for pieces_from in (None, 0):  # as the engine decides; every chunk in pieces on streams
            engine = CudaEngine(**kwargs)
            if pieces_from is not None:
                engine.pipeline_min_bytes = pieces_from
            assert_same_frames(frames_of(engine, program, seed, shots), want, shots,
                               ctx=f"seed={seed} {kwargs} pieces from {pieces_from}")


def test_frames_many_qubits_use_global_memory(cuda_engine, numpy_engine):
    """n = 16k qubits: the frames of one shot word (16 n bytes) exceed shared memory."""
    n = 16000
    r = random.Random(1)
    b = ProgramBuilder(n)
    for _ in range(3):
        b.next_step()
        qs = list(range(n))
        r.shuffle(qs)
        while len(qs) >= 2:
            b.gate(r.choice(UNITARY_2), qs.pop(), qs.pop())
        b.next_step()
        for q in r.sample(range(n), 50):
            b.noise("DEPOLARIZE1", [q], b.channel_id(1, [0.01] * 3, [[1], [2], [3]]))
        b.next_step()
        for q in r.sample(range(n), 40):
            b.measure(q, reset=r.random() < 0.5)
    program = b.build()
    shots = 200
    assert_same_frames(frames_of(cuda_engine, program, 2, shots), frames_of(numpy_engine, program, 2, shots), shots)


def measured_rounds_program(n: int, rounds: int, seed: int, *, noisy_qubits: int = 0, reset_every: int = 3):
    """Rounds of two-qubit gates on neighbouring pairs, depolarizing noise on `noisy_qubits`
    random qubits (if any), then every qubit measured (reset on every `reset_every`-th): n records
    a round, many records for a small program."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    for _ in range(rounds):
        b.next_step()
        for q in range(0, n - 1, 2):
            b.gate(r.choice(UNITARY_2), q, q + 1)
        if noisy_qubits:
            b.next_step()
            for q in r.sample(range(n), noisy_qubits):
                b.noise("DEPOLARIZE1", [q], b.channel_id(1, [0.01] * 3, [[1], [2], [3]]))
        b.next_step()
        for q in range(n):
            b.measure(q, reset=q % reset_every == 0)
    return b.build()


def assert_shot_major_like_numpy(numpy_engine, program, seed: int, shot_counts, engines) -> None:
    """CudaEngine.sample_frames(..., shot_major=True) equals the NumPy engine's for every shot
    count and every engine setting (fused_shot_major, frame_memory, pipeline_min_bytes or None,
    max_shot_words): reference from key `seed`, frames from key `seed + 1`."""
    from cirq_quasarq.engines.cuda import CudaEngine

    sched = schedule(program)
    ref = numpy_engine.run_tableau(program, sched, rng.make_key(seed), reference=True).records
    for shots in shot_counts:
        want = numpy_engine.sample_frames(program, sched, rng.make_key(seed + 1), ref, shots, shot_major=True)
        for fused, memory, pieces_from, max_words in engines:
            engine = CudaEngine(max_shot_words=max_words, frame_memory=memory)
            engine.fused_shot_major = fused
            if pieces_from is not None:
                engine.pipeline_min_bytes = pieces_from
            got = engine.sample_frames(program, sched, rng.make_key(seed + 1), ref, shots, shot_major=True)
            assert got.shape == want.shape and np.array_equal(got, want), (shots, fused, memory, pieces_from, max_words)


@pytest.mark.parametrize("slot, lines_as_one, async_drains", [(1 << 16, True, True), (8 * 4099, True, True),
                                                              (None, True, True), (8 * 4099, False, False)])
def test_results_through_page_locked_staging_slots(numpy_engine, monkeypatch, slot, lines_as_one, async_drains):
    """A result bound for ordinary memory comes back through page-locked slots (frames._Staging:
    the device fills a slot on the piece's stream, threads copy it out): records, shot-major rows
    and parities (pairs of records, some flipped), in pieces on streams, in one chunk and in chunks
    of 37 words, through slots that hold a few pieces' rows, an odd part of one, or the default
    (8 MiB); shot-major rows of 370 and of 5 bytes, copied into the slots as one line and as 2-D
    copies of lines a row long; slots emptied on the touch pool as their copies end, several at
    once, and (the code before) each on the calling thread when taken again; bits equal the NumPy
    engine's, and the slots were used."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import frames as frame_mode

    if slot is not None:
        monkeypatch.setattr(frame_mode, "_STAGING_SLOT", slot)
    monkeypatch.setattr(frame_mode, "_STAGING_MIN_BYTES", 1)
    taken = []
    real_take = frame_mode._Staging._take

    def take(self):
        taken.append(self._state[self._next] is not None)
        return real_take(self)

    monkeypatch.setattr(frame_mode._Staging, "_take", take)
    monkeypatch.setattr(frame_mode._Staging, "lines_as_one", lines_as_one)
    monkeypatch.setattr(frame_mode._Staging, "async_drains", async_drains)
    for n, rounds in ((211, 14), (11, 3)):  # rows of 370 bytes, and of 5 (33 records)
        program = measured_rounds_program(n, rounds, 4, noisy_qubits=n // 4)
        _staged_results_equal_numpy(numpy_engine, program, n, taken)


@pytest.mark.parametrize("slot", [8 * 4099, None])
def test_program_uploads_through_the_staging_slots(numpy_engine, monkeypatch, slot):
    """A program's large arrays go up through the engine's page-locked slots (frames._Staging.upload):
    arrays of sizes at and around the edges of the half-slots and of rounds of all six lanes, in slots
    of an odd size and of the default 8 MiB, read back equal; then every array of programs (a
    measured-rounds program, a window program) goes up that way, and their tableau and frame runs
    equal the NumPy engine's, the slots used."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.engines.cuda import frames as frame_mode

    if slot is not None:
        monkeypatch.setattr(frame_mode, "_STAGING_SLOT", slot)
    monkeypatch.setattr(frame_mode, "_STAGED_UPLOAD_MIN_BYTES", 1)
    staged = []
    real_upload = frame_mode._Staging.upload

    def upload(self, a):
        staged.append(a.nbytes)
        return real_upload(self, a)

    monkeypatch.setattr(frame_mode._Staging, "upload", upload)
    engine = CudaEngine()
    warm = window_program(5, 0, widths=(1, 2))
    engine.sample_frames(warm, schedule(warm), rng.make_key(1), np.zeros(warm.num_records, dtype=np.uint8), 64)
    staging = engine._frames._staging
    if staging._locking is not None:
        staging._locking.result()
    assert staging.ready()
    half, lanes = frame_mode._STAGING_SLOT // 2, frame_mode._STAGING_SLOTS
    gen = np.random.default_rng(5)
    for size in (1, half - 1, half, half + 1, lanes * half, lanes * half + 1, 3 * lanes * half + half // 3):
        a = gen.integers(0, 256, size, dtype=np.uint8)
        back = np.zeros_like(a)
        engine.cuda.memcpy_dtoh(back, engine._frames.upload(a))
        assert np.array_equal(back, a), size
    for program in (measured_rounds_program(211, 6, 4, noisy_qubits=50), window_program(40, 3, widths=(1, 3, 17))):
        staged.clear()
        sched = schedule(program)
        key = rng.make_key(7)
        want = numpy_engine.run_tableau(program, sched, key, reference=True).records
        got = engine.run_tableau(program, sched, key, reference=True).records
        assert np.array_equal(got, want)
        assert staged and sum(staged) >= sched.instructions.nbytes
        shots = 64 * 300 + 5
        frames_key = rng.make_key(8)
        assert_same_frames(engine.sample_frames(program, sched, frames_key, want, shots),
                           numpy_engine.sample_frames(program, sched, frames_key, want, shots), shots)


def _staged_results_equal_numpy(numpy_engine, program, n, taken):
    from cirq_quasarq.core.parities import Parities
    from cirq_quasarq.core.program import Annotation
    from cirq_quasarq.engines.cuda import CudaEngine

    sched = schedule(program)
    ref = numpy_engine.run_tableau(program, sched, rng.make_key(1), reference=True).records
    pairs = [Annotation("detector", np.array([r, r + n])) for r in range(0, program.num_records - n, 3)]
    parities = Parities.of(pairs, ref)
    for max_words in (None, 37):
        engine = CudaEngine(max_shot_words=max_words)
        engine.pipeline_min_bytes = 0  # pieces on streams at any size
        engine.sample_frames(program, sched, rng.make_key(9), ref, 64)  # the engine's first call: slots locking
        staging = engine._frames._staging
        if staging._locking is not None:
            staging._locking.result()
        assert staging.ready()
        for shots in (64 * 70, 64 * 600 + 3):
            for shot_major in (False, True):
                for par in (None, parities):
                    taken.clear()
                    key = rng.make_key(shots + shot_major)
                    want = numpy_engine.sample_frames(program, sched, key, ref, shots, par, shot_major)
                    got = engine.sample_frames(program, sched, key, ref, shots, par, shot_major)
                    ctx = (max_words, shots, shot_major, par is not None)
                    assert not any(np.shares_memory(got, buf) for buf in engine._frames._pinned), ctx
                    assert any(taken), ctx  # some slot was filled and emptied into the result
                    if shot_major:
                        assert got.shape == want.shape and np.array_equal(got, want), ctx
                    else:
                        assert_same_frames(got, want, shots, ctx=str(ctx))
                    engine._frames._misses = []  # keep every result in ordinary memory


def test_shot_major_layout_of_many_records(numpy_engine):
    """Stim's shot-major bit-packed layout laid out on the device: thousands of records (several
    tiles of 1024 records, rows of a byte count that is not a multiple of 8), shot words not a
    multiple of the tile's, whole and in pieces on streams; written by the frame kernel's epilogue
    (frames in shared or global memory, chunks of 37 words or one chunk) and by the separate
    transpose."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    n = 211
    program = measured_rounds_program(n, 14, 4, noisy_qubits=60)
    assert program.num_records == 14 * n and program.num_records % 64 and (program.num_records + 7) // 8 % 8
    assert_shot_major_like_numpy(numpy_engine, program, 1, (64 * 9 + 5, 64 * 70, 64 * 600 + 3),
                                 ((True, "auto", None, 37), (True, "auto", 0, 37), (True, "auto", 0, None),
                                  (True, "global", 0, 37), (False, "auto", None, 37), (False, "auto", 0, 37)))


def test_shot_major_rows_longer_than_shared_memory(numpy_engine):
    """18,000 records: 64 shots' rows (144 KB) do not fit a block's shared memory, so the rows
    are transposed after the frame kernel, whatever fused_shot_major says (frames in shared and
    in global memory); equal to the NumPy engine."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    program = measured_rounds_program(60, 300, 5, reset_every=4)
    assert 64 * ((program.num_records + 7) // 8) > 128 * 1024
    assert_shot_major_like_numpy(numpy_engine, program, 3, (64 * 5 + 17,),
                                 ((True, "auto", None, 3), (True, "global", None, 3), (False, "auto", None, 3)))


def test_the_reference_bits_stay_on_the_device_while_they_are_the_same(numpy_engine):
    """Frame mode keeps the device copy of the last reference array uploaded: the same array again
    is not uploaded again, and the same array with other bits (changed in place) or another array
    is; every result equal to the NumPy engine's with that reference."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    program = measured_rounds_program(40, 6, 3, noisy_qubits=10)
    sched = schedule(program)
    engine = CudaEngine()
    ref = numpy_engine.run_tableau(program, sched, rng.make_key(2), reference=True).records.copy()
    shots = 64 * 3 + 5

    def check(reference):
        key = rng.make_key(int(reference.sum()))
        assert_same_frames(engine.sample_frames(program, sched, key, reference, shots),
                           numpy_engine.sample_frames(program, sched, key, reference, shots), shots)
        return engine._frames.reference_bits[2]

    first = check(ref)
    assert check(ref) is first  # kept
    ref[::3] ^= 1  # the same array, other bits
    changed = check(ref)
    assert changed is not first
    assert check(ref.copy()) is not changed  # another array, the same bits: uploaded again


def rounds_in_loops_program(n: int, seed: int):
    """Rounds of gates, noise and every qubit measured (MR on every fourth), the gates on the first
    half of the qubits only, three layers deep, so that the schedule measures the second half first
    (records written out of their order); a round alone, then REPEAT 7 of a round, REPEAT 2 of
    (REPEAT 0 of a round, a round, REPEAT 3 of a round), a round alone."""
    r = random.Random(seed)
    b = ProgramBuilder(n)

    def round_():
        for _ in range(3):
            b.next_step()
            qs = list(range(n // 2))
            r.shuffle(qs)
            while len(qs) >= 2:
                b.gate(r.choice(UNITARY_2), qs.pop(), qs.pop())
        b.next_step()
        for q in r.sample(range(n), 30):
            b.noise("DEPOLARIZE1", [q], b.channel_id(1, [0.02] * 3, [[1], [2], [3]]))
        b.next_step()
        for q in range(n):
            b.measure(q, reset=q % 4 == 0)

    round_()
    b.begin_loop(7)
    round_()
    b.end_loop()
    b.begin_loop(2)
    b.begin_loop(0)
    round_()
    b.end_loop()
    round_()
    b.begin_loop(3)
    round_()
    b.end_loop()
    b.end_loop()
    round_()
    return b.build()


def test_record_progress_walks_loops_as_the_kernels_do():
    """frames.record_progress on programs with nested loops, a loop of no iterations and records
    written out of their order: one count after each run of M / MR rows, as many rows in all as
    records, every record written once (none twice: the complete prefix reaches them all only at
    the end), and the complete prefix never ahead of the rows counted."""
    from cirq_quasarq.engines.cuda.frames import record_progress

    for seed in range(3):
        program = rounds_in_loops_program(90 + 2 * seed, seed)
        sched = schedule(program)
        counts, complete = record_progress(program, sched)
        assert len(counts) and (np.diff(counts) > 0).all() and (np.diff(complete) >= 0).all()
        assert counts[-1] == complete[-1] == program.num_records
        assert (complete <= counts).all() and (complete[:-1] < program.num_records).all()
        assert (complete < counts).any()  # some record written before an earlier one


@pytest.mark.parametrize("seed", range(3))
def test_banded_copies_equal_the_copies_after_the_kernel(numpy_engine, monkeypatch, seed):
    """A one-wave call whose shot-major rows are transposed after the frame kernel takes them in
    bands (frames_progress_wait): records and parities (0 to 3 records a parity, some parities of
    no record, whose band waits for nothing) of a program of loops whose records the schedule
    writes out of order, in bands of 1,024 rows and a last partial one; one, a few and a wave's
    worth of words; frames in shared and in global memory. Equal to the NumPy engine's and to the
    same engine with the bands off (the copies after the kernel, their oracle); every band's count
    reached every block of the launch.
    Bands where the result is page-locked, or goes through the staging slots with a band's part of
    a row wide enough (`_STAGED_BAND_MIN_BYTES`, lowered here to take this program's rows: "staged
    wide"); results into ordinary memory straight, or through the slots in narrower parts, come
    back after the kernel, with the bands on or off."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.core.parities import Parities
    from cirq_quasarq.core.program import Annotation
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.engines.cuda import frames as frame_mode

    program = rounds_in_loops_program(150 + 2 * seed, seed)
    assert program.num_records > 2 * frame_mode.BAND_ROWS
    sched = schedule(program)
    ref = numpy_engine.run_tableau(program, sched, rng.make_key(seed), reference=True).records
    r = np.random.default_rng(seed)
    groups = [Annotation("detector", np.sort(r.integers(0, program.num_records, int(r.integers(0, 4)))))
              for _ in range(program.num_records - 100 * seed)]
    groups.sort(key=lambda g: int(g.records.max(initial=-1)))  # detectors come roughly in time order
    parities = Parities.of(groups, ref)
    bands_used = []
    real_plan = frame_mode.FrameMode._band_plan

    def plan(self, *args):
        got = real_plan(self, *args)
        bands_used.append(got)
        return got

    monkeypatch.setattr(frame_mode.FrameMode, "_band_plan", plan)
    engines = {}
    for banded, memory in ((True, "auto"), (True, "global"), (False, "auto")):  # frames in shared or global memory
        engine = CudaEngine(frame_memory=memory)
        engine.fused_shot_major = False  # rows this short would else leave in the kernel's epilogue
        engine.banded_copies = banded
        engine.sample_frames(program, sched, rng.make_key(9), ref, 64)  # the engine's first call: slots locking
        staging = engine._frames._staging
        if staging._locking is not None:
            staging._locking.result()
        assert staging.ready()
        engines[banded, memory] = engine
    for shots in (64 + 5, 64 * 7, 64 * engines[True, "auto"].sm_count * 2 - 1):
        for par in (None, parities):
            key = rng.make_key(1000 * seed + shots)
            want = numpy_engine.sample_frames(program, sched, key, ref, shots, par, True)
            for memory in ("ordinary", "staged", "staged wide", "page-locked"):
                monkeypatch.setattr(frame_mode, "_STAGING_MIN_BYTES", 1 if memory.startswith("staged") else 1 << 62)
                monkeypatch.setattr(frame_mode, "_STAGED_BAND_MIN_BYTES", 0 if memory == "staged wide" else 1024)
                for (banded, frame_memory), engine in engines.items():
                    bands_used.clear()
                    frames = engine._frames
                    if memory == "page-locked":  # (the fifth miss at a size locks a buffer)
                        frames._misses = [8 * want.size] * frame_mode._PINNED_AFTER
                    else:
                        frames._pinned, frames._misses = [], []
                    got = engine.sample_frames(program, sched, key, ref, shots, par, True)
                    ctx = (seed, shots, par is not None, memory, banded, frame_memory)
                    assert got.shape == want.shape and np.array_equal(got, want), ctx
                    assert any(np.shares_memory(got, buf) for buf in frames._pinned) == (memory == "page-locked"), ctx
                    assert bool(bands_used) == (banded and memory in ("page-locked", "staged wide")), ctx
                    if bands_used:
                        bands, signal_at = bands_used[0]
                        assert len(bands) >= 2 and bands[-1][1] == (program.num_records if par is None else par.count)
                        counters = np.empty(2 * len(bands), dtype=np.uint32)
                        engine.cuda.memcpy_dtoh(counters, engine._frames._buffers["band_progress"][0])
                        blocks = counters[len(bands):]
                        assert (blocks == blocks[0]).all() and blocks[0] >= 1, (ctx, counters)
                        assert (counters[:len(bands)] == signal_at).all(), ctx


@pytest.mark.parametrize("seed, size", [(0, "small"), (1, "small"), (2, "edge"), (3, "past the edge")])
def test_shot_major_parities_gathered_as_they_are_transposed(numpy_engine, seed, size):
    """Shot-major parities XORed from the records as they are transposed, by the frame kernel's
    epilogue (64 shots' rows in its shared memory) or by parities_shot_major (longer rows, or
    `fused_shot_major=False`), against record_parities' pass then the transpose
    (`fused_parities=False`) and the NumPy engine. Parities of 0 to 9 records (none: the flip alone;
    repeats; random reference bits, so both flips); 1,500 of them (two tiles of 1,024, a row of a
    byte count that is not a multiple of 8), or the most whose 64 rows fit the epilogue's shared
    memory, or 8 more; one chunk and chunks of 37 words, in pieces on streams or not, frames in
    shared and global memory and on every multiprocessor, shot counts around the transpose's tile
    of four words."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.core.parities import Parities
    from cirq_quasarq.core.program import Annotation
    from cirq_quasarq.engines.cuda import CudaEngine

    r = np.random.default_rng(seed)
    program = measured_rounds_program(97 + seed, 9, seed, noisy_qubits=40)
    sched = schedule(program)
    ref = numpy_engine.run_tableau(program, sched, rng.make_key(seed), reference=True).records
    ref = ref ^ r.integers(0, 2, len(ref), dtype=np.uint8)  # flips of both values, whatever the program
    engines = []
    for fused_parities, fused_shot_major in ((True, True), (True, False), (False, True)):
        for memory, spread in (("auto", False), ("global", False), ("auto", True)):
            for pieces_from, max_words in ((0, 37), (None, None), (0, None)):
                engine = CudaEngine(max_shot_words=max_words, frame_memory=memory)
                engine.fused_parities, engine.fused_shot_major = fused_parities, fused_shot_major
                engine.spread_frames = spread
                if pieces_from is not None:
                    engine.pipeline_min_bytes = pieces_from
                engines.append(((fused_parities, fused_shot_major, memory, spread, pieces_from, max_words), engine))
    frames = engines[0][1]._frames
    room = min(frames.dynamic_room(k) for k in ("frames_program_shared", "frames_program_global", "frames_program_spread"))
    count = {"small": 1500, "edge": 8 * (room // 64), "past the edge": 8 * (room // 64) + 8}[size]
    groups = [Annotation("detector", r.integers(0, program.num_records, int(r.integers(0, 10))))
              for _ in range(count)]
    parities = Parities.of(groups, ref)
    assert (np.diff(parities.offsets) == 0).any() and (np.diff(parities.offsets) > 2).any()
    if size == "small":
        assert parities.count % 8 and (parities.count + 7) // 8 % 8
    for shots in (1, 64 * 4, 64 * 5 + 3, 64 * 83 + 17):
        key = rng.make_key(100 * seed + shots)
        want = numpy_engine.sample_frames(program, sched, key, ref, shots, parities, True)
        for setting, engine in engines:
            got = engine.sample_frames(program, sched, key, ref, shots, parities, True)
            assert got.shape == want.shape and np.array_equal(got, want), (shots, setting)


@pytest.mark.parametrize("gathered", [False, True])
def test_shot_major_transpose_at_its_tile_edges(cuda_engine, gathered):
    """parities_shot_major launched as frame mode launches it, on random words: rows of 1, 31 to 33,
    1,023 to 1,025 and 3,077 (a group of 32 parities, a tile of 1,024, partial ones; rows of byte
    counts that are and are not multiples of 4 and 8), 1 to 9 shot words (a tile of 4 and
    partial ones), rows `count + 3` words apart; the parities themselves, or XORed from records by
    the tables (0 to 5 records a parity, repeats, both flips); shot rows back to back, or 131 bytes
    more apart (a band of longer rows; also by parities_shot_major_band). Equal to core.parities on the host (the NumPy engine's
    layout), every byte of every shot's row written, none past it."""
    from cirq_quasarq.core.parities import Parities, parities_shot_major
    from cirq_quasarq.core.program import Annotation
    from cirq_quasarq.engines.cuda import frames as frame_mode
    from cirq_quasarq.engines.cuda.device_program import _pad, upload

    cuda = cuda_engine.cuda
    r = np.random.default_rng(7 + gathered)
    for rows in (1, 31, 32, 33, 1023, 1024, 1025, 3077):
        for count in (1, 3, 4, 5, 9):
            stride = count + 3
            records = rows + 40 if gathered else rows
            words = r.integers(0, 2**63, (records, stride), dtype=np.uint64) * 2 + r.integers(0, 2, (records, stride),
                                                                                                  dtype=np.uint64)
            if gathered:
                groups = [Annotation("detector", r.integers(0, records, int(r.integers(0, 6)))) for _ in range(rows)]
                parities = Parities.of(groups, r.integers(0, 2, records, dtype=np.uint8))
                want_rows = parities.reduce(words[:, :count])
                tables = [upload(cuda, _pad(a, t)) for a, t in ((parities.offsets, np.int32),
                                                                (parities.records, np.int32), (parities.flip, np.uint8))]
            else:
                want_rows, tables = words[:, :count], [0, 0, 0]
            want = parities_shot_major(np.ascontiguousarray(want_rows), 64 * count)
            row_bytes = (rows + 7) // 8
            src = upload(cuda, np.ascontiguousarray(words))
            row_words = (rows + 63) // 64
            grid = (-(-count // frame_mode.TILE_WORDS), -(-row_words // frame_mode.TILE_ROWS))
            # rows back to back, or a band of longer rows (and the kernel of frame mode's bands)
            for pitch, kernel in ((row_bytes, "parities_shot_major"), (row_bytes + 131, "parities_shot_major"),
                                  (row_bytes + 131, "parities_shot_major_band")):
                size = 64 * count * pitch + 64
                out = cuda.mem_alloc(size)
                cuda.memset_d8(out, 0xA5, size)
                cuda_engine.launcher.launch("parities", kernel, grid, (frame_mode.PARITY_BLOCK, 1, 1),
                                            int(src), stride, rows, int(out), row_bytes, pitch, count,
                                            *(int(t) for t in tables))
                got = np.empty(size, dtype=np.uint8)
                cuda.memcpy_dtoh(got, out)
                ctx = (rows, count, gathered, pitch, kernel)
                got_rows = got[:-64].reshape(64 * count, pitch)
                assert np.array_equal(got_rows[:, :row_bytes], want), ctx
                assert (got_rows[:, row_bytes:] == 0xA5).all() and (got[-64:] == 0xA5).all(), ctx


def test_out_of_memory_is_reported():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine(memory_fraction=1e-9)
    program = rich_program(50, 5, 1)
    sched = schedule(program)
    with pytest.raises(OutOfMemoryError, match="GPU memory"):
        engine.run_tableau(program, sched, rng.make_key(1))
    with pytest.raises(OutOfMemoryError, match="GPU memory"):
        engine.sample_frames(program, sched, rng.make_key(1), np.zeros(program.num_records, np.uint8), 1000)



@pytest.mark.gpu
def test_a_larger_tableau_may_use_the_memory_of_the_one_it_replaces():
    """Tableau mode sizes a new workspace with the old one already released: on a device left
    with room for the new one only once the old one is gone, the larger run fits (the largest n
    on one GPU after a smaller run)."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from benchmarks.bench_gpu_tableau import random_clifford_program
    from cirq_quasarq.engines.cuda import CudaEngine, engine as engine_module, tableau

    engine = CudaEngine()
    small, large = random_clifford_program(40000, 2), random_clifford_program(50000, 2)
    engine.run_tableau(small, schedule(small), rng.make_key(1))
    old = engine_module._workspace_bytes(engine._tableau.ws)  # 0.8 GB
    sched = schedule(large)
    engine.device_program(large, sched)  # its tables are on the device before the filler is sized
    need = tableau._Workspace.bytes_needed(50000, large.num_records, False, 50000 // 1400)
    free, _ = engine.cuda.mem_get_info()
    filler = engine.cuda.mem_alloc(free - int(need / engine.memory_fraction) + old // 2)
    try:
        run = engine.run_tableau(large, sched, rng.make_key(1))  # fits only without the old workspace
        assert run.records.shape == (large.num_records,)
    finally:
        filler.free()



@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_window_batched_collapse_equals_sequential(numpy_engine, seed, exact):
    """Windows of 1..512 collapses (random, deterministic, R, MR, inverted M; reference and sampled
    coins): the low-rank update (measure_lowrank.cu), the rows path (measure_rows.cu, one and four
    warps a row) and the per-collapse transposed path give the same records and inverse tableau
    bit for bit, and the NumPy engine's. `exact`: the windows are the widths asked for; else
    as-soon-as-possible layering merges them (windows of up to about 1,100 collapses)."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    lowrank = CudaEngine(block_windows=False)
    lowrank.lowrank_min = 2  # every window of two or more collapses, however small
    rows = CudaEngine(block_windows=False, lowrank_windows=False)
    wide = CudaEngine(block_windows=False, lowrank_windows=False)
    wide.row_warps = 4  # the long-row configuration on rows of any length
    sequential = CudaEngine(block_windows=False, batch_windows=False)
    n = [600, 1500, 5000, 9000, 700, 2048, 4100, 130][seed]
    widths = (1, 2, 3, 17, 64, 65, 200, 512)
    program = window_program(n, 900 + seed, widths=widths, layers=10, exact=exact)
    sched = schedule(program)
    if exact:
        actual = window_widths(program, sched)
        assert len(actual) == 10 and set(actual) <= {min(w, n) for w in widths}, actual
    for repetition, reference in ((0, False), (7, False), (0, True)):
        key = rng.make_key(1000 + seed)
        want = sequential.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        ctx = f"seed={seed} n={n} rep={repetition} ref={reference}"
        for name, engine in (("lowrank", lowrank), ("rows", rows), ("rows, 4 warps", wide)):
            got = engine.run_tableau(program, sched, key, repetition=repetition, reference=reference)
            assert np.array_equal(got.records, want.records), f"{name}: {ctx}"
            assert got.tableau.equals(want.tableau), f"{name}: {ctx}"
        if n <= 2048:
            ref = numpy_engine.run_tableau(program, sched, key, repetition=repetition, reference=reference)
            assert np.array_equal(ref.records, want.records), ctx
            assert ref.tableau.equals(want.tableau), ctx


test_window_batched_collapse_equals_sequential = pytest.mark.gpu(test_window_batched_collapse_equals_sequential)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [5000, 9000])
def test_window_plan_on_any_number_of_blocks_equals_sequential(n):
    """The window's plan in one block (measure_rows_plan) or spread over 1, 2, 3, 7 or W / 8 blocks
    (measure_window_plan: a grid barrier a collapse, each block a range of columns), the slice in
    shared or in global memory: the rows path's records and inverse tableau equal the per-collapse
    transposed path bit for bit, whatever the split; windows of exactly 1 to 140 collapses (140 the
    rows path's widest at n = 9000, past it at 5000) with deterministic ones, R and MR, sampled and
    reference coins."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine, measure

    widths = (1, 2, 3, 17, 33, 64, 65, 140)  # 140: the rows path's widest at n = 9000 (n // 64)
    program = window_program(n, 31 + n, widths=widths, layers=10, exact=True)
    sched = schedule(program)
    actual = window_widths(program, sched)
    assert len(actual) == 10 and set(actual) <= set(widths) and {1, 64, 65} <= set(actual), actual
    sequential = CudaEngine(block_windows=False, batch_windows=False)
    rows = CudaEngine(block_windows=False, lowrank_windows=False)
    spread = -(-((n + 63) // 64) // measure.PLAN_BLOCK_WORDS)
    splits = ((0, True), (0, False), (1, True), (2, False), (3, True), (7, False), (spread, True), (spread, False))
    for repetition, reference in ((0, False), (5, False), (0, True)):
        key = rng.make_key(77 + n)
        want = sequential.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        for blocks, shared in splits:
            rows.plan_blocks, rows.plan_slice_shared = blocks, shared
            got = rows.run_tableau(program, sched, key, repetition=repetition, reference=reference)
            assert np.array_equal(got.records, want.records), (blocks, shared, repetition, reference)
            assert got.tableau.equals(want.tableau), (blocks, shared, repetition, reference)


def _check_folded_gates(program, seed: int, repetition: int, stage: str, absent=()):
    """Tableau mode with gate windows folded into the collapse windows' passes (`stage` among the
    profiled stages) equals the engine that runs the gates with their own kernel (fold_gates=False)
    and the per-collapse path, bit for bit, for repetitions 0 and `repetition` and the reference;
    `absent` stages never run. Returns the schedule and the per-collapse engine."""
    from cirq_quasarq.engines.cuda import CudaEngine

    sched = schedule(program)
    folded = CudaEngine(block_windows=False)
    own = CudaEngine(block_windows=False)
    own.fold_gates = False
    sequential = CudaEngine(block_windows=False, batch_windows=False)
    for rep, reference in ((0, False), (repetition, False), (0, True)):
        key = rng.make_key(seed)
        want = sequential.run_tableau(program, sched, key, repetition=rep, reference=reference)
        for engine in (own, folded):
            engine.profile = rep == 0 and not reference
            got = engine.run_tableau(program, sched, key, repetition=rep, reference=reference)
            engine.profile = False
            assert np.array_equal(got.records, want.records), (engine.fold_gates, rep, reference)
            assert got.tableau.equals(want.tableau), (engine.fold_gates, rep, reference)
            if rep == 0 and not reference:
                stages = engine.stage_seconds
                assert (stage in stages) == engine.fold_gates, stages
                assert not any(name in stages for name in absent), stages
                assert "gates" in stages  # the first layer, and those after a reset or before noise
    return sched, sequential


@pytest.mark.gpu
@pytest.mark.parametrize("n", [3001, 4096])
def test_gate_windows_folded_into_the_lowrank_update_equal_their_own_kernel(n):
    """A gate window after a low-rank collapse window goes through that window's pass 2
    (lowrank_apply_gates): records and inverse tableau equal those of the engine that runs the gates
    with their own kernel (fold_gates=False) and of the per-collapse path, bit for bit; odd n leaves
    a group with one qubit; windows with a reset or followed by noise keep their own kernels."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    _check_folded_gates(measure_window_program(n, 11 + n), 77 + n, 5, "collapse window (low rank) + gates")


@pytest.mark.gpu
@pytest.mark.parametrize("n", [3001, 4096, 10240])
def test_gate_windows_folded_into_the_rows_pass_equal_their_own_kernel(n, monkeypatch):
    """A gate window after a collapse window of the rows path goes through that window's pass
    (measure_rows_apply_gates, a block four gates or idle qubits): records and inverse tableau equal those
    of the engine that runs the gates with their own kernel and of the per-collapse path, bit for
    bit, with resets, a window of deterministic collapses alone and windows of 1 to 7 collapses;
    gates before noise keep their kernel, and so do all when the idle lists exceed their budget."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine, device_program

    program = measure_window_program(n, 5 + n, widths=(1, 3, 7), remeasure=True)
    sched, sequential = _check_folded_gates(program, 91 + n, 3, "collapse window (rows) + gates",
                                            absent=("collapse window (low rank)",))
    monkeypatch.setattr(device_program, "IDLE_LIST_BUDGET", 0)
    over = CudaEngine(block_windows=False)
    over.profile = True
    got = over.run_tableau(program, sched, rng.make_key(91 + n))
    assert "collapse window (rows) + gates" not in over.stage_seconds
    want = sequential.run_tableau(program, sched, rng.make_key(91 + n))
    assert np.array_equal(got.records, want.records) and got.tableau.equals(want.tableau)


def test_repeated_measurements_at_the_end_of_a_large_circuit_repeat():
    """n = 30k random Clifford circuit: measuring a block of qubits twice in a row gives the same
    outcomes twice (the batched path, large tableau)."""
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from benchmarks.bench_gpu_tableau import random_clifford_program
    from cirq_quasarq.engines.cuda import CudaEngine

    n = 30000
    program = random_clifford_program(n, 10)
    measured = random.Random(3).sample(range(n), 300)
    extra = ProgramBuilder(n)
    for _ in range(2):
        extra.next_step()
        for q in measured:
            extra.measure(q)
    second = extra.build()
    engine = CudaEngine()
    first = engine.run_tableau(program, schedule(program), rng.make_key(5))
    again = engine.run_tableau(second, schedule(second), rng.make_key(6), initial=first.tableau)
    assert np.array_equal(again.records[:300], again.records[300:])


test_repeated_measurements_at_the_end_of_a_large_circuit_repeat = pytest.mark.gpu(
    test_repeated_measurements_at_the_end_of_a_large_circuit_repeat)


_CACHE_PROBE = """
import sys, numpy as np, cirq
import pycuda.compiler
if sys.argv[1] == "cached":  # a second process must never call nvcc: every kernel comes from disk
    def refuse(*args, **kwargs):
        raise AssertionError("nvcc called although the kernel cache holds this kernel")
    pycuda.compiler.compile = refuse
from cirq_quasarq import QuasarqSimulator
q = cirq.LineQubit.range(3)
c = cirq.Circuit(cirq.H(q[0]), cirq.CX(q[0], q[1]), cirq.depolarize(0.1).on(q[2]), cirq.measure(*q, key="m"))
bits = QuasarqSimulator(seed=7, device="gpu").run(c, repetitions=200).measurements["m"]
print(int(np.packbits(bits).sum()), int(bits.sum()))
"""


@pytest.mark.gpu
def test_kernels_are_cached_on_disk_across_processes(cuda_engine, tmp_path):
    env = dict(os.environ, CIRQ_QUASARQ_KERNEL_CACHE=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", _CACHE_PROBE, "fresh"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert list(tmp_path.glob("*.cubin")), "no kernel was written to the cache folder"
    second = subprocess.run([sys.executable, "-c", _CACHE_PROBE, "cached"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout


_THREAD_PROBE = """
import threading, numpy as np, cirq
from cirq_quasarq import QuasarqSimulator
q = cirq.LineQubit.range(3)
c = cirq.Circuit(cirq.H(q[0]), cirq.CX(q[0], q[1]), cirq.depolarize(0.1).on(q[2]), cirq.measure(*q, key="m"))
out = {}
def worker():  # the process's engine is made on a thread that then ends
    out["thread"] = QuasarqSimulator(seed=3, device="gpu").run(c, repetitions=300).measurements["m"]
t = threading.Thread(target=worker); t.start(); t.join()
main = QuasarqSimulator(seed=3, device="gpu").run(c, repetitions=300).measurements["m"]
state = QuasarqSimulator(seed=3, device="gpu").simulate(c[:-1]).final_state.stabilizers()
print(np.array_equal(out["thread"], main), len(state))
"""


@pytest.mark.gpu
def test_an_engine_made_on_another_thread_works_everywhere_and_exits_cleanly(cuda_engine):
    proc = subprocess.run([sys.executable, "-c", _THREAD_PROBE], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]  # no "context stack was not empty" abort at exit
    assert proc.stdout.split() == ["True", "3"]


@pytest.mark.gpu
def test_engines_of_one_process_keep_each_others_shared_memory_opt_ins(cuda_engine):
    """A kernel's dynamic shared memory allowance belongs to the compiled function, which every
    engine of a process shares: a smaller launch on another engine must not withdraw it."""
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    from cirq_quasarq.engines.cuda import loader

    module = SourceModule('extern "C" __global__ void first_of_shared(int* out, int n) {'
                          ' extern __shared__ int s[]; s[n - 1 - threadIdx.x] = threadIdx.x; __syncthreads();'
                          ' if (threadIdx.x == 0) out[0] = s[n - 1]; }', no_extern_c=True)
    fn = module.get_function("first_of_shared")
    fn.prepare("Pi")
    out = cuda.mem_alloc(4)
    other = loader.Launcher()
    for launcher in (cuda_engine.launcher, other):
        launcher.register("first_of_shared", fn)
    for launcher, ints in ((cuda_engine.launcher, 24 * 1024), (other, 256), (cuda_engine.launcher, 24 * 1024),
                           (other, 20 * 1024)):
        launcher.launch("test", "first_of_shared", (1, 1), (256, 1, 1), out, ints, shared_size=4 * ints)
        got = np.zeros(1, np.int32)
        cuda.memcpy_dtoh(got, out)
        assert got[0] == 0
