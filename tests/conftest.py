"""Shared fixtures: every engine test runs on each engine; CUDA skips cleanly without a GPU."""

import pytest

from cirq_quasarq.core import memory
from cirq_quasarq.engines import NumpyEngine, cuda_available


@pytest.fixture(autouse=True)
def _fresh_memory_reading():
    """Each test reads the host's limits anew (a reading stands for half a second: core.memory)."""
    memory.forget_reading()
    yield


def _make_engine(name):
    if name == "numpy":
        return NumpyEngine()
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    return CudaEngine()


@pytest.fixture(params=["numpy", pytest.param("cuda", marks=pytest.mark.gpu)])
def engine(request):
    """Each engine in turn (the CUDA one only where a GPU is usable)."""
    return _make_engine(request.param)


@pytest.fixture(params=["numpy", "native"])
def native_path(request, monkeypatch):
    """The NumPy engine each way in turn: all NumPy (the definition) and with its compiled path
    (core/native.py: the draws and tableau mode's row operations; skipped where no C++ compiler
    builds it)."""
    from cirq_quasarq.core import native

    if request.param == "native" and native.library() is None:
        pytest.skip(f"the compiled path is not available here: {native.why_not()}")
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1" if request.param == "native" else "0")
    return request.param


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    """Simulator device strings, GPU only where usable."""
    if request.param == "gpu" and not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    return request.param


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="tests/test_fuzz.py: the long profile (many more random examples, not derandomized)")
    parser.addoption("--gpu-long", action="store_true", default=False,
                     help="also run the tests marked gpu_long: the GPU paths on tableaux of 60k-100k qubits")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--gpu-long"):
        return
    skip = pytest.mark.skip(reason="a long GPU test: run with --gpu-long")
    for item in items:
        if "gpu_long" in item.keywords:
            item.add_marker(skip)


def stream_from(monkeypatch, qubits: int) -> None:
    """A first call streams its compile from `qubits` qubits on, whether or not the compile can run in
    a process of its own (`shots.STREAM_MIN_QUBITS` and `STREAM_MIN_QUBITS_UNFORKED`)."""
    from cirq_quasarq import shots

    monkeypatch.setattr(shots, "STREAM_MIN_QUBITS", qubits)
    monkeypatch.setattr(shots, "STREAM_MIN_QUBITS_UNFORKED", qubits)
