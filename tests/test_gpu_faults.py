"""GPU faults become GpuFaultError / OutOfMemoryError naming the kernel and its launch shape, and
say whether the CUDA context survived: faults injected (an invalid launch configuration, mid-run
too; an allocation beyond device memory; an out-of-range store in a test kernel, in a subprocess
since it kills the context). The classification itself is also checked without a GPU, against a
stand-in for pycuda.driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from cirq_quasarq.core import rng
from cirq_quasarq.engines import NumpyEngine, cuda_available
from cirq_quasarq.engines.cuda import faults, loader
from cirq_quasarq.errors import GpuFaultError, OutOfMemoryError
from cirq_quasarq.schedule import schedule

from .test_cuda_engine import rich_program


# ------------------------------------------------------------------------- without a GPU
def _fake_driver(sync_error=None):
    """A stand-in for pycuda.driver: its exception classes and a Context whose synchronize fails
    with `sync_error` (a dead context) or succeeds."""

    class Error(Exception):
        pass

    class LogicError(Error):
        pass

    class LaunchError(Error):
        pass

    class MemoryError_(Error, MemoryError):
        pass

    def synchronize():
        if sync_error is not None:
            raise LogicError(sync_error)

    return types.SimpleNamespace(Error=Error, LogicError=LogicError, LaunchError=LaunchError,
                                 MemoryError=MemoryError_, Context=types.SimpleNamespace(synchronize=synchronize))


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setattr(faults, "_CONTEXT_FAULT", None)

    def install(sync_error=None):
        cuda = _fake_driver(sync_error)
        pycuda = types.ModuleType("pycuda")
        pycuda.driver = cuda
        monkeypatch.setitem(sys.modules, "pycuda", pycuda)
        monkeypatch.setitem(sys.modules, "pycuda.driver", cuda)
        return cuda

    return install


def test_invalid_launch_is_named_and_survived(fake_driver):
    cuda = fake_driver()

    class Kernel:
        def prepared_call(self, grid, block, *args, **kwargs):
            raise cuda.LogicError("cuLaunchKernel failed: invalid argument")

    with pytest.raises(GpuFaultError) as info:
        loader.checked_launch(Kernel(), "gates", "tableau_gates_window", (7, 1), (2048, 1, 1), 1, 2, shared_size=96)
    e = info.value
    assert (e.kernel, e.stage, e.grid, e.block, e.shared_bytes) == ("tableau_gates_window", "gates", (7, 1, 1),
                                                                    (2048, 1, 1), 96)
    assert e.context_ok and e.cuda_call == "cuLaunchKernel" and e.cuda_error == "invalid argument"
    assert "tableau_gates_window" in str(e) and "(2048, 1, 1)" in str(e) and "survived" in str(e)
    assert faults.context_fault() is None


@pytest.mark.parametrize("text,probe", [
    ("an illegal memory access was encountered", None),
    ("misaligned address", None),
    ("an illegal instruction was encountered", None),
    ("unspecified launch failure", None),
    ("some future error", "some future error"),  # not a known text: the synchronize probe decides
])
def test_sticky_errors_kill_the_context(fake_driver, text, probe):
    cuda = fake_driver(sync_error=probe)
    exc = cuda.LogicError(f"cuMemcpyDtoH failed: {text}")
    e = faults.fault(cuda, exc, where="CudaEngine.sample_frames",
                     launch=("frames", "frames_program_shared", (4, 1), (256, 1, 1), 0), at_launch=False)
    assert not e.context_ok and faults.context_fault() is e
    assert "frames_program_shared" in str(e) and "restart the process" in str(e) and "cuMemcpyDtoH" in str(e)
    later = faults.dead_engine_error("CudaEngine.run_tableau")
    assert not later.context_ok and text in str(later)
    import pickle

    again = pickle.loads(pickle.dumps(e))
    assert (again.kernel, again.context_ok, again.block, str(again)) == (e.kernel, False, (256, 1, 1), str(e))


def _fake_engine(cuda, sample):
    """A CudaEngine over the stand-in driver whose frame mode runs `sample` (no GPU needed)."""
    from cirq_quasarq.engines.cuda.engine import CudaEngine

    engine = CudaEngine.__new__(CudaEngine)
    engine.cuda, engine.memory_limit = cuda, None
    engine.launcher = loader.Launcher.__new__(loader.Launcher)
    engine.launcher._cuda, engine.launcher._events = cuda, [("frames", "frames_program_shared", None, None)]
    engine.launcher.last_launch = ("frames", "frames_program_shared", (3, 1), (256, 1, 1), 4096)
    engine._frames = types.SimpleNamespace(sample=sample)
    return engine


def test_ctrl_c_drains_the_device_first(fake_driver):
    synced = []
    cuda = fake_driver()
    cuda.Context.synchronize = lambda: synced.append(True)

    def sample(*args, **kwargs):
        raise KeyboardInterrupt

    engine = _fake_engine(cuda, sample)
    with pytest.raises(KeyboardInterrupt):
        engine.sample_frames(None, None, None, None, 10)
    assert synced and engine.launcher._events == [] and engine.usable


def test_fault_at_a_synchronisation_point_of_an_engine_call(fake_driver, monkeypatch):
    import cirq_quasarq.engines as engines

    text = "an illegal memory access was encountered"
    cuda = fake_driver(sync_error=text)

    def sample(*args, **kwargs):
        raise cuda.LogicError(f"cuMemcpyDtoH failed: {text}")

    engine = _fake_engine(cuda, sample)
    with pytest.raises(GpuFaultError) as info:
        engine.sample_frames(None, None, None, None, 10)
    e = info.value
    assert (e.kernel, e.where, e.block, e.shared_bytes, e.context_ok) == (
        "frames_program_shared", "CudaEngine.sample_frames", (256, 1, 1), 4096, False)
    assert not engine.usable
    with pytest.raises(GpuFaultError, match="unusable"):
        engine.run_tableau(None, None, None)
    monkeypatch.setattr(engines, "cuda_available", lambda: True)
    monkeypatch.setattr(engines, "_SHARED", {"cuda": engine})
    with pytest.raises(GpuFaultError, match="restart the process"):
        engines.select_engine("gpu")
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert isinstance(engines.select_engine("auto"), NumpyEngine)
    assert "cuda" not in engines._SHARED


# ------------------------------------------------------------------------- on a GPU
@pytest.fixture(scope="module")
def cuda_engine():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    return CudaEngine()


def _program():
    program = rich_program(40, 12, 5, frames=True)
    sched = schedule(program)
    ref = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    return program, sched, ref


def _results(engine, program, sched, ref, shots=64 * 9 + 3):
    records = engine.run_tableau(program, sched, rng.make_key(3), repetition=5).records
    return records, engine.sample_frames(program, sched, rng.make_key(4), ref, shots)


def _same(a, b):
    assert np.array_equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])


@pytest.mark.gpu
def test_invalid_launch_configuration(cuda_engine):
    program, sched, ref = _program()
    want = _results(NumpyEngine(), program, sched, ref)
    _same(_results(cuda_engine, program, sched, ref), want)
    with pytest.raises(GpuFaultError) as info:
        cuda_engine.launcher.launch("test", "tableau_init", (1, 1), (2048, 1, 1), 0, 0, 0, 0, 1)
    e = info.value
    assert (e.kernel, e.stage, e.grid, e.block, e.context_ok) == ("tableau_init", "test", (1, 1, 1), (2048, 1, 1), True)
    assert "tableau_init" in str(e) and "(2048, 1, 1)" in str(e)
    assert cuda_engine.usable
    _same(_results(cuda_engine, program, sched, ref), want)

    # The same fault in the middle of each mode's run: the engine's next runs are still exact.
    real = cuda_engine.launcher.launch
    for stage, call in (("gates", lambda: cuda_engine.run_tableau(program, sched, rng.make_key(3), repetition=5)),
                        ("frames", lambda: cuda_engine.sample_frames(program, sched, rng.make_key(4), ref, 999))):
        def bad(s, name, grid, block, *args, **kwargs):
            return real(s, name, grid, (2048, 1, 1) if s == stage else block, *args, **kwargs)

        cuda_engine.launcher.launch = bad
        try:
            with pytest.raises(GpuFaultError) as info:
                call()
        finally:
            del cuda_engine.launcher.launch
        assert info.value.context_ok and info.value.stage == stage and info.value.block == (2048, 1, 1)
        _same(_results(cuda_engine, program, sched, ref), want)


@pytest.mark.gpu
def test_allocation_beyond_device_memory(cuda_engine):
    from cirq_quasarq.engines.cuda import CudaEngine

    program, sched, ref = _program()
    want = _results(NumpyEngine(), program, sched, ref)
    total = cuda_engine.cuda.mem_get_info()[1]
    with pytest.raises(OutOfMemoryError) as info:
        cuda_engine.alloc(10 * total, "a test buffer")
    assert f"{10 * total:,} bytes" in str(info.value) and "free" in str(info.value)
    with pytest.raises(OutOfMemoryError):
        cuda_engine._frames._scratch("frames_out", 10 * total)  # frame mode's own path
    assert cuda_engine.usable
    _same(_results(cuda_engine, program, sched, ref), want)
    capped = CudaEngine(memory_limit="64M")  # refused by the cap, before the driver is asked
    with pytest.raises(OutOfMemoryError, match="memory_limit"):
        capped.alloc(128 << 20)
    _same(_results(capped, program, sched, ref), want)


_FAULT_PROBE = r"""
import json, os, sys, warnings
from pycuda.compiler import SourceModule
from cirq_quasarq.core import rng
from cirq_quasarq.engines import NumpyEngine, select_engine
from cirq_quasarq.errors import GpuFaultError
from cirq_quasarq.schedule import schedule
from tests.test_cuda_engine import rich_program

engine = select_engine("gpu")
fn = SourceModule('''
extern "C" __global__ void qq_test_out_of_range(unsigned long long* p, unsigned long long far) {
    p[far + threadIdx.x] = 1ull;  // far past the 64-byte buffer: an illegal address
}''', no_extern_c=True).get_function("qq_test_out_of_range")
fn.prepare("PQ")
engine.launcher.register("qq_test_out_of_range", fn)
buf = engine.alloc(64, "the test kernel's buffer")
program = rich_program(20, 6, 1, frames=True)
sched = schedule(program)
out = {}


def fields(e):
    return dict({k: list(v) if isinstance(v, tuple) else v for k, v in vars(e).items()}, message=str(e),
                type=type(e).__name__)


try:
    if sys.argv[1] == "direct":  # our launcher, then our synchronisation point
        engine.launcher.launch("test", "qq_test_out_of_range", (2, 1), (32, 1, 1), int(buf), 1 << 40)
        engine.launcher.synchronize("the test's synchronize")
    else:  # in the middle of a run: frame mode's kernel swapped for the faulty one
        real = engine.launcher.launch

        def launch(stage, name, grid, block, *args, **kwargs):
            if stage == "frames":
                return real("test", "qq_test_out_of_range", (2, 1), (32, 1, 1), int(buf), 1 << 40,
                            timed=kwargs.get("timed", False))
            return real(stage, name, grid, block, *args, **kwargs)

        engine.launcher.launch = launch
        ref = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
        engine.sample_frames(program, sched, rng.make_key(1), ref, 1000)
except GpuFaultError as e:
    out["fault"] = fields(e)
out["usable"] = engine.usable
try:
    engine.run_tableau(program, sched, rng.make_key(1))
except GpuFaultError as e:
    out["next_call"] = fields(e)
try:
    select_engine("gpu")
except GpuFaultError as e:
    out["select_gpu"] = fields(e)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["select_auto"] = type(select_engine("auto")).__name__
    out["auto_warned"] = any("unusable" in str(w.message) for w in caught)
print("FAULT-PROBE " + json.dumps(out))
sys.stdout.flush()
os._exit(0)  # a dead context: skip PyCUDA's clean-up at exit
"""


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["direct", "in-run"])
def test_out_of_range_store_kills_the_context(cuda_engine, mode):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _FAULT_PROBE, mode], cwd=root, capture_output=True, text=True,
                          timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("FAULT-PROBE ")]
    assert lines, proc.stdout + proc.stderr
    out = json.loads(lines[-1][len("FAULT-PROBE "):])
    fault = out["fault"]
    assert fault["type"] == "GpuFaultError" and fault["context_ok"] is False
    assert fault["kernel"] == "qq_test_out_of_range" and fault["stage"] == "test"
    assert fault["grid"] == [2, 1, 1] and fault["block"] == [32, 1, 1]
    assert "qq_test_out_of_range" in fault["message"] and "restart the process" in fault["message"]
    assert "illegal" in fault["cuda_error"].lower() or "launch failure" in fault["cuda_error"].lower()
    if mode == "in-run":
        assert fault["where"] == "CudaEngine.sample_frames"
    assert out["usable"] is False
    assert out["next_call"]["context_ok"] is False and "unusable" in out["next_call"]["message"]
    assert out["select_gpu"]["context_ok"] is False
    assert out["select_auto"] == "NumpyEngine" and out["auto_warned"]
