"""Frame mode's compiled gate runs (cuda_src/host_frames.cpp) against their NumPy form, the
definition (engines/numpy/frames.py, `_Unitary.run`): every unitary and frame-only opcode, on random
frames at the words' edges, bit for bit; then whole samples with the compiled path on and off."""

import numpy as np
import pytest

import cirq_quasarq
from cirq_quasarq.core import native, opcodes
from cirq_quasarq.engines.numpy import frames

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler on this machine")

GATE_CODES = [op.code for op in opcodes.OPCODES if op.kind in (opcodes.Kind.UNITARY, opcodes.Kind.FRAME)]
WORDS = [1, 2, 3, 8, 17]


def _run_both(monkeypatch, op, fx, fz):
    """`op.run` on copies of the frames with the compiled path on, then off: both results."""
    if native.library() is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", flag)
        r = frames._Run(fx.copy(), fz.copy(), None, None, np.zeros(1, dtype=np.int64), 0, (0,), None, None, 0,
                        fx.shape[1])
        op.run(r)
        out.append((r.fx, r.fz))
    return out


@pytest.mark.parametrize("code", GATE_CODES, ids=[opcodes.OPCODES[c].name for c in GATE_CODES])
@pytest.mark.parametrize("words", WORDS)
def test_a_run_of_gates_equals_numpys(monkeypatch, code, words):
    """A run of gates on distinct random qubits (some qubits idle) of random frames."""
    r = np.random.default_rng(code * 100 + words)
    n = 40
    arity = int(opcodes.ARITY[code])
    count = int(r.integers(2, n // arity + 1))
    qubits = r.permutation(n)[: arity * count].astype(np.int32)
    q0 = qubits[:count]
    q1 = qubits[count:] if arity == 2 else np.full(count, -1, dtype=np.int32)
    op = frames._Unitary(code, q0, q1)
    fx = r.integers(0, 2**64, (n, words), dtype=np.uint64)
    fz = r.integers(0, 2**64, (n, words), dtype=np.uint64)
    (cx, cz), (nx, nz) = _run_both(monkeypatch, op, fx, fz)
    np.testing.assert_array_equal(cx, nx)
    np.testing.assert_array_equal(cz, nz)
    if op.outputs:  # the compiled path was the one taken, and the gates changed something
        assert op.native_args is not None
        assert not (np.array_equal(cx, fx) and np.array_equal(cz, fz))


def test_gates_that_share_a_qubit_keep_numpys_form(monkeypatch):
    """The compiled path updates one gate after another: a run whose gates share a qubit (never a
    schedule window's) is left to NumPy's gather, products and scatter."""
    code = opcodes.CODE["CX"]
    op = frames._Unitary(code, np.array([0, 1], dtype=np.int32), np.array([1, 2], dtype=np.int32))
    assert op.native_args is None
    r = np.random.default_rng(7)
    fx = r.integers(0, 2**64, (3, 4), dtype=np.uint64)
    fz = r.integers(0, 2**64, (3, 4), dtype=np.uint64)
    (cx, cz), (nx, nz) = _run_both(monkeypatch, op, fx, fz)
    np.testing.assert_array_equal(cx, nx)
    np.testing.assert_array_equal(cz, nz)


def test_frames_the_compiled_path_does_not_take_go_to_numpy(monkeypatch):
    """Frames that are not C-contiguous uint64 tables of one shape run the NumPy form."""
    code = opcodes.CODE["H"]
    op = frames._Unitary(code, np.array([0, 2], dtype=np.int32), np.array([-1, -1], dtype=np.int32))
    r = np.random.default_rng(3)
    wide_x = r.integers(0, 2**64, (3, 8), dtype=np.uint64)
    wide_z = r.integers(0, 2**64, (3, 8), dtype=np.uint64)
    fx, fz = wide_x[:, ::2], wide_z[:, ::2]  # views with a stride
    assert not frames._compiled_frames(fx, fz)
    (cx, cz), (nx, nz) = _run_both(monkeypatch, op, fx, fz)
    np.testing.assert_array_equal(cx, nx)
    np.testing.assert_array_equal(cz, nz)


def _random_circuit(seed: int, n: int = 12, layers: int = 12):
    """Random layers of every Clifford name Stim has on 1 and 2 qubits, noise, collapses and a loop
    (a stim.Circuit: these tests need the test extra's stim)."""
    stim = pytest.importorskip("stim")
    r = np.random.default_rng(seed)
    one = [g.name for g in stim.gate_data().values() if g.is_unitary and g.is_single_qubit_gate]
    two = [g.name for g in stim.gate_data().values() if g.is_unitary and g.is_two_qubit_gate]
    c = stim.Circuit()
    for layer in range(layers):
        order = r.permutation(n).tolist()
        while order:
            if len(order) >= 2 and r.random() < 0.5:
                c.append(str(r.choice(two)), [order.pop(), order.pop()])
            else:
                c.append(str(r.choice(one)), [order.pop()])
        c.append("DEPOLARIZE1", r.permutation(n)[: n // 2].tolist(), 0.05)
        c.append("M" if layer % 3 else "MR", r.permutation(n)[: n // 3].tolist())
    body = stim.Circuit()
    body.append("H", list(range(0, n, 2)))
    body.append("CX", [q for q in range(n - n % 2)])
    body.append("X_ERROR", list(range(n)), 0.1)
    body.append("M", list(range(n)))
    c.append(stim.CircuitRepeatBlock(5, body))
    return c


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shots", [1, 100, 1500])
def test_samples_with_and_without_the_compiled_gates_are_equal(monkeypatch, seed, shots):
    """Whole calls, the plan and the linear map both: the same bits with the compiled path on and
    off (the draws' compiled path is tested against NumPy elsewhere, so it stays on here)."""
    circuit = _random_circuit(seed)
    out = []
    for use in (True, False):
        monkeypatch.setattr(frames, "_compiled_frames", (lambda fx, fz, real=frames._compiled_frames: real(fx, fz))
                            if use else (lambda fx, fz: False))
        sim = cirq_quasarq.QuasarqSimulator(seed=11, device="cpu")
        out.append(sim.sample_measurements(circuit, shots, bit_packed=True))
        out.append(sim.sample_measurements(circuit, shots, bit_packed=True))  # the map's call, where one is made
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[1], out[3])


_WITHOUT_LIBRARY = """
import sys, cirq, numpy as np, cirq_quasarq
from cirq_quasarq.core import native
q = cirq.LineQubit.range(8)
c = cirq.Circuit([cirq.H.on_each(*q), cirq.CNOT(q[0], q[1]), cirq.CNOT(q[2], q[3]), cirq.CZ(q[4], q[5]),
                  cirq.S.on_each(*q[::2]), cirq.depolarize(0.1).on_each(*q), cirq.measure(*q, key="m")])
bits = cirq_quasarq.QuasarqSimulator(seed=3, device="cpu").run(c, repetitions=500).measurements["m"]
assert native._char is None  # the library was never loaded in this process
np.save(sys.argv[1], bits)
"""


def test_a_process_without_the_compiled_path_never_asks_for_it(tmp_path):
    """With the compiled path off from the start (CIRQ_QUASARQ_NATIVE=0, as where there is no
    compiler), a plan of multi-gate runs is made and run in NumPy alone, with the same bits."""
    import os
    import subprocess
    import sys

    import cirq

    out = tmp_path / "bits.npy"
    env = dict(os.environ, CIRQ_QUASARQ_NATIVE="0")
    done = subprocess.run([sys.executable, "-c", _WITHOUT_LIBRARY, str(out)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    q = cirq.LineQubit.range(8)
    c = cirq.Circuit([cirq.H.on_each(*q), cirq.CNOT(q[0], q[1]), cirq.CNOT(q[2], q[3]), cirq.CZ(q[4], q[5]),
                      cirq.S.on_each(*q[::2]), cirq.depolarize(0.1).on_each(*q), cirq.measure(*q, key="m")])
    here = cirq_quasarq.QuasarqSimulator(seed=3, device="cpu").run(c, repetitions=500).measurements["m"]
    np.testing.assert_array_equal(np.load(out), here)
