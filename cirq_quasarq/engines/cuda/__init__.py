"""The CUDA engine (PyCUDA): same results as the NumPy engine, bit for bit, on an NVIDIA GPU.

Importing this package never needs PyCUDA; `cuda_available()` says whether the engine can run."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when PyCUDA imports, a CUDA device is present and nvcc can compile the kernels."""
    try:
        import shutil

        import pycuda.driver as cuda

        cuda.init()
        if cuda.Device.count() < 1:
            return False
        import pycuda.compiler  # noqa: F401  (SourceModule is usable)

        return shutil.which("nvcc") is not None
    except Exception:  # noqa: BLE001 - any failure means "no"
        return False


def __getattr__(name):
    if name == "CudaEngine":
        from .engine import CudaEngine

        return CudaEngine
    raise AttributeError(name)


__all__ = ["CudaEngine", "cuda_available"]
