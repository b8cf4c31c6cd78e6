"""cirq-quasarq: a stabilizer simulator for Cirq on NVIDIA GPUs (PyCUDA) and NumPy.

    sim = cirq_quasarq.QuasarqSimulator(seed=5, device="auto")
    result = sim.run(circuit, repetitions=100_000)
"""

from .errors import (
    DeviceUnavailableError,
    GpuFaultError,
    InvalidConfusionMapError,
    InvalidInputError,
    InvalidProbabilityError,
    InvalidRepetitionsError,
    InvalidSeedError,
    LongRunWarning,
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


def json_resolver(cirq_type: str):
    """For `cirq.read_json(..., resolvers=[cirq_quasarq.json_resolver, *cirq.DEFAULT_RESOLVERS])`."""
    return {"cirq_quasarq.QuasarqState": QuasarqState}.get(cirq_type)

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
    "GpuFaultError",
    "OutOfMemoryError",
    "TooLargeError",
    "InvalidInputError",
    "InvalidRepetitionsError",
    "InvalidSeedError",
    "InvalidConfusionMapError",
    "InvalidProbabilityError",
    "LongRunWarning",
    "json_resolver",
]
