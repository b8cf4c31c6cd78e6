"""cirq-quasarq: a stabilizer simulator for Cirq on NVIDIA GPUs (PyCUDA) and NumPy.

    sim = cirq_quasarq.QuasarqSimulator(seed=5, device="auto")
    result = sim.run(circuit, repetitions=100_000)
"""

from .errors import (
    DeviceUnavailableError,
    MeasurementKeyError,
    NonCliffordError,
    OutOfMemoryError,
    QuasarqError,
    TooLargeError,
    UnsupportedNoiseError,
    UnsupportedOperationError,
)
from .results import QuasarqState
from .simulator import QuasarqSimulator, QuasarqTrialResult

__version__ = "0.1.0"

__all__ = [
    "QuasarqSimulator",
    "QuasarqTrialResult",
    "QuasarqState",
    "QuasarqError",
    "UnsupportedOperationError",
    "NonCliffordError",
    "UnsupportedNoiseError",
    "MeasurementKeyError",
    "DeviceUnavailableError",
    "OutOfMemoryError",
    "TooLargeError",
]
