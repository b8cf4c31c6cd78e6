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
    TwirlWarning,
    UnsupportedNoiseError,
    UnsupportedOperationError,
)

__version__ = "0.1.0"

# Imported when first used (PEP 562): `import cirq_quasarq` and the Stim path (the `quasarq`
# command on a .stim file, `cirq_quasarq.sinter`) load neither Cirq nor sympy.
_LAZY = {"QuasarqSimulator": ".simulator", "QuasarqTrialResult": ".simulator", "QuasarqState": ".results.state"}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = globals()[name] = getattr(importlib.import_module(where, __name__), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def json_resolver(cirq_type: str):
    """For `cirq.read_json(..., resolvers=[cirq_quasarq.json_resolver, *cirq.DEFAULT_RESOLVERS])`."""
    if cirq_type == "cirq_quasarq.QuasarqState":
        from .results.state import QuasarqState

        return QuasarqState
    return None


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
    "TwirlWarning",
    "json_resolver",
]
