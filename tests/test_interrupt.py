"""Ctrl-C leaves the simulator usable: a KeyboardInterrupt injected in the middle of a run (the
reference pass, the frame plan's compilation, the sampling, a tableau run; on the GPU at the k-th
kernel launch) propagates, and the same simulator's next run gives exactly the bits an
uninterrupted simulator gives from the same random state (nothing half-made is kept: schedule,
reference sample and frame plan in `program.derived`, the CUDA engine's buffers and plans)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.engines import cuda_available

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")


def _circuit():
    """A new circuit object each time (compile caches are keyed by identity: nothing shared)."""
    c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=4,
                               after_clifford_depolarization=0.02, before_measure_flip_probability=0.02)
    return stimcirq.stim_circuit_to_cirq_circuit(c)


def _state(rs):
    fresh = np.random.RandomState()
    fresh.set_state(rs.get_state())
    return fresh


def _interrupt_on(monkeypatch, owner, name, k):
    """Make owner.<name> raise KeyboardInterrupt on its k-th call."""
    real = getattr(owner, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def _same(a, b):
    """Two cirq.Results (every record) or two simulate() results (measurements and final state)."""
    got, want = (a.records, b.records) if hasattr(a, "records") else (a.measurements, b.measurements)
    assert got.keys() == want.keys()
    for key in got:
        assert np.array_equal(got[key], want[key]), key
    if not hasattr(a, "records"):
        ta, tb = a.final_state.inverse_tableau, b.final_state.inverse_tableau
        for part in ("xx", "xz", "zx", "zz", "xs", "zs"):
            assert np.array_equal(getattr(ta, part), getattr(tb, part)), part


def _check(monkeypatch, device, inject, call, reps=300):
    """`inject(monkeypatch)` arms the interruption; `call(sim, circuit, reps)` runs."""
    rs = np.random.RandomState(17)
    sim = QuasarqSimulator(seed=rs, device=device)
    circuit = _circuit()
    inject(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        call(sim, circuit, reps)
    monkeypatch.undo()
    clean = QuasarqSimulator(seed=_state(rs), device="cpu")
    got = call(sim, circuit, reps)
    want = call(clean, _circuit(), reps)
    _same(got, want)
    _same(call(sim, circuit, reps), call(clean, _circuit(), reps))  # and the next one too


def _run(sim, circuit, reps):
    return sim.run(circuit, repetitions=reps)


def _simulate(sim, circuit, reps):
    return sim.simulate(circuit)


def _at(path, k):
    module, _, attr = path.rpartition(":")
    owner_path, _, name = attr.rpartition(".")
    owner = importlib.import_module(module)
    for part in filter(None, owner_path.split(".")):
        owner = getattr(owner, part)
    return lambda monkeypatch: _interrupt_on(monkeypatch, owner, name, k)


@pytest.mark.parametrize("path,k,call", [
    ("cirq_quasarq.engines.numpy.engine:NumpyEngine._collapse_run", 2, _run),  # the reference pass
    ("cirq_quasarq.engines.numpy.frames:_compile", 1, _run),  # the frame plan being made
    ("cirq_quasarq.engines.numpy.frames:_Collapse.run", 3, _run),  # sampling
    ("cirq_quasarq.engines.numpy.engine:NumpyEngine._collapse_run", 3, _simulate),  # a tableau run
])
def test_ctrl_c_in_a_numpy_run(monkeypatch, path, k, call):
    _check(monkeypatch, "cpu", _at(path, k), call)


@pytest.mark.gpu
@pytest.mark.parametrize("k,call", [(1, _run), (3, _run), ("frames", _run), (2, _simulate)])
def test_ctrl_c_in_a_gpu_run(monkeypatch, k, call):
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import loader

    def inject(monkeypatch):  # the k-th launch (or frame mode's first) raises
        real = loader.Launcher.launch
        calls = [0]

        def launch(self, stage, *args, **kwargs):
            calls[0] += 1
            if calls[0] == k or (k == "frames" and stage == "frames" and calls[0] > 0):
                calls[0] = -(10**9)  # once
                raise KeyboardInterrupt
            return real(self, stage, *args, **kwargs)

        monkeypatch.setattr(loader.Launcher, "launch", launch)

    _check(monkeypatch, "gpu", inject, call)
