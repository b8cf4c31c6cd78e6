"""Step 3 of the pipeline: engines run a scheduled Program (NumPy everywhere, CUDA on NVIDIA GPUs)."""

from __future__ import annotations

import warnings

from ..errors import DeviceUnavailableError
from .base import Engine, TableauRun
from .numpy import NumpyEngine

DEVICES = ("auto", "gpu", "cpu")


def cuda_available() -> bool:
    """True when PyCUDA imports and a CUDA device answers (never raises)."""
    try:
        from .cuda import cuda_available as probe
    except Exception:
        return False
    try:
        return bool(probe())
    except Exception:
        return False


_SHARED: dict = {}


def select_engine(device: str) -> Engine:
    """The engine for `device`: "cpu" -> NumPy; "gpu" -> CUDA or a clear error; "auto" -> CUDA
    when a usable GPU is present, else NumPy. One engine of each kind per process, shared by every
    simulator: a new simulator reuses the compiled kernels, device buffers and page-locked memory.
    Once a sticky CUDA error killed the process's context no CUDA engine is handed out: "gpu"
    raises GpuFaultError (restart the process), "auto" warns and gives the NumPy engine."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return _shared("numpy", NumpyEngine)
    if cuda_available():
        from .cuda import CudaEngine
        from .cuda.faults import context_fault, dead_engine_error

        if context_fault() is None:
            return _shared("cuda", CudaEngine)
        _SHARED.pop("cuda", None)
        if device == "gpu":
            raise dead_engine_error('device="gpu"')
        warnings.warn(f'device="auto": the GPU engine is unusable in this process ({context_fault().cuda_error}); '
                      "using the NumPy engine (same results, slower). Restart the process to use the GPU again.",
                      RuntimeWarning, stacklevel=2)
        return _shared("numpy", NumpyEngine)
    if device == "gpu":
        raise DeviceUnavailableError(
            'device="gpu" needs PyCUDA and an NVIDIA GPU with a working driver; none was found. '
            'Install the GPU extra (pip install ".[gpu]" in the cirq-quasarq checkout) on a CUDA machine, or use '
            'device="cpu" / "auto".')
    return _shared("numpy", NumpyEngine)


def _shared(kind: str, make) -> Engine:
    engine = _SHARED.get(kind)
    if engine is None:
        engine = _SHARED[kind] = make()
    return engine


__all__ = ["Engine", "TableauRun", "NumpyEngine", "select_engine", "cuda_available"]
