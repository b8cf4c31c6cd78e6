"""Step 3 of the pipeline: engines run a scheduled Program (NumPy everywhere, CUDA on NVIDIA GPUs)."""

from __future__ import annotations

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


def select_engine(device: str) -> Engine:
    """The engine for `device`: "cpu" -> NumPy; "gpu" -> CUDA or a clear error; "auto" -> CUDA
    when a usable GPU is present, else NumPy."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return NumpyEngine()
    if cuda_available():
        from .cuda import CudaEngine

        return CudaEngine()
    if device == "gpu":
        raise DeviceUnavailableError(
            'device="gpu" needs PyCUDA and an NVIDIA GPU with a working driver; none was found. '
            'Install the GPU extra (pip install "cirq-quasarq[gpu]") on a CUDA machine, or use '
            'device="cpu" / "auto".')
    return NumpyEngine()


__all__ = ["Engine", "TableauRun", "NumpyEngine", "select_engine", "cuda_available"]
