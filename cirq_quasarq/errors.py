"""Error types: each kind of bad input its own class, raised before any simulation work."""


class QuasarqError(Exception):
    """Base class of every error this package raises on purpose."""


class UnsupportedOperationError(QuasarqError, ValueError, TypeError):
    """An operation has no stabilizer effect the compiler can reach (names the op and its moment).

    Also a TypeError, as cirq.CliffordSimulator raises for unsupported gates, so code written for
    it catches ours too."""


class NonCliffordError(UnsupportedOperationError):
    """A gate, after parameter resolution, is not Clifford."""


class UnsupportedNoiseError(UnsupportedOperationError):
    """A noise channel is not a Pauli channel (amplitude damping, ...)."""


class MeasurementKeyError(QuasarqError, ValueError):
    """A classical control or annotation refers to a key that is not measured before it."""


class DeviceUnavailableError(QuasarqError, RuntimeError):
    """device="gpu" was asked for but no usable CUDA device / PyCUDA is present."""


class OutOfMemoryError(QuasarqError, MemoryError):
    """The circuit needs more memory than the engine has; the message says how much."""


class TooLargeError(QuasarqError, ValueError):
    """A request that would be too large to answer (e.g. a state vector of many qubits)."""


class InvalidInputError(QuasarqError, ValueError):
    """An argument of a public call is out of its range or of the wrong kind (an initial state that
    is not a stabilizer state, ...); the message says what is accepted."""
