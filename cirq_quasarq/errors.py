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


class GpuFaultError(QuasarqError, RuntimeError):
    """A CUDA error during GPU work. The message names the kernel, its stage and launch shape (for
    a fault found at a synchronisation point: the last kernel launched before it) and says whether
    the CUDA context survived. Attributes: kernel, stage, grid, block (3-tuples), shared_bytes,
    where (the engine call or synchronisation point), cuda_call and cuda_error (the driver call and
    its text), context_ok: True when the engine stays usable (an invalid launch configuration, out
    of memory); False after a sticky error (illegal address, ...): the process must be restarted."""

    def __init__(self, message: str, *, kernel=None, stage=None, grid=None, block=None, shared_bytes: int = 0,
                 where=None, cuda_call=None, cuda_error=None, context_ok: bool = True):
        super().__init__(message)
        self.kernel, self.stage, self.grid, self.block = kernel, stage, grid, block
        self.shared_bytes, self.where, self.cuda_call, self.cuda_error = shared_bytes, where, cuda_call, cuda_error
        self.context_ok = bool(context_ok)

    def __reduce__(self):  # keeps the fields through pickling (worker processes)
        return _rebuild_fault, (type(self), self.args[0] if self.args else "", dict(self.__dict__))


def _rebuild_fault(cls, message, fields):
    err = cls(message)
    err.__dict__.update(fields)
    return err


class OutOfMemoryError(QuasarqError, MemoryError):
    """The circuit needs more memory than the engine has; the message says how much."""


class TooLargeError(QuasarqError, ValueError):
    """A request that would be too large to answer (e.g. a state vector of many qubits)."""


class InvalidInputError(QuasarqError, ValueError):
    """An argument of a public call is out of its range or of the wrong kind (an initial state that
    is not a stabilizer state, ...); the message says what is accepted."""


class InvalidRepetitionsError(InvalidInputError, TypeError):
    """`repetitions` is not a non-negative integral number (bool excluded; NumPy integers and
    integral floats such as 1e6 accepted). Also a TypeError, for code that catches either."""


class InvalidSeedError(InvalidInputError, TypeError):
    """A seed that is not what Cirq's simulators take (cirq.RANDOM_STATE_OR_SEED_LIKE)."""


class InvalidConfusionMapError(InvalidInputError):
    """A measurement's confusion map is not a stochastic matrix of the right size (entries in
    [0, 1], each row summing to 1): Cirq's simulators reject it, and so do we, never renormalising."""


class InvalidProbabilityError(InvalidInputError):
    """A noise probability outside [0, 1] (or a channel whose probabilities sum past 1), found
    after parameter resolution."""


class LongRunWarning(UserWarning):
    """Issued before work estimated to take long (the message gives the estimate and how to
    cut it); the work is not refused. Silence with `warnings.filterwarnings`."""


class TwirlWarning(UserWarning):
    """Issued once per compilation for each non-Pauli channel that `non_pauli="twirl"` replaces by
    its Pauli twirl (an approximation of the channel). Silence with `warnings.filterwarnings`."""


class NotStreamable(Exception):
    """Internal, never raised to a caller of the public API: a circuit (or a piece of it) that the
    piecewise path (a compile that hands its pieces to the engine as it goes) does not take; the
    caller compiles and runs it whole instead."""

