"""GPU faults: a CUDA driver error becomes a `GpuFaultError` naming the kernel, its stage and launch
shape, and saying whether the CUDA context survived.

Sticky errors (an illegal or misaligned address, an illegal instruction, a launch failure or other
exception on the device, a device-side assert, a watchdog timeout, an uncorrectable ECC error)
leave the context in a state where every later CUDA call of the process fails the same way: the
fault is recorded process-wide (`context_fault()`), every engine refuses further work with a clear
error, `engines.select_engine` hands out no CUDA engine any more, and the message says to restart
the process. Any other error (an invalid launch configuration, out of memory, ...) leaves the
context as it was, and the engine stays usable. Other texts (errors newer than this list) are
decided by a `Context.synchronize()` probe, which fails again only in a dead context.

Kernel faults are asynchronous: they surface at the next call that waits for the device (a copy
back, an event, a synchronize). A fault found there names the last kernel launched before it;
CUDA_LAUNCH_BLOCKING=1 makes every launch wait for its kernel, which pins the faulty one.

Importing this module never imports PyCUDA.
"""

from __future__ import annotations

import threading
from typing import Optional, Tuple

from ...errors import GpuFaultError, OutOfMemoryError

# cuGetErrorString's texts (lower case) of the errors that destroy the context (cuda.h: "This
# leaves the process in an inconsistent state and any further CUDA work will return the same error").
STICKY_TEXTS = (
    "illegal memory access",  # CUDA_ERROR_ILLEGAL_ADDRESS
    "illegal address",
    "misaligned address",  # CUDA_ERROR_MISALIGNED_ADDRESS
    "illegal instruction",  # CUDA_ERROR_ILLEGAL_INSTRUCTION
    "unspecified launch failure",  # CUDA_ERROR_LAUNCH_FAILED
    "exception occurred on the device",
    "hardware stack error",  # CUDA_ERROR_HARDWARE_STACK_ERROR
    "device-side assert",  # CUDA_ERROR_ASSERT
    "invalid program counter",  # CUDA_ERROR_INVALID_PC
    "global/shared address space",  # CUDA_ERROR_INVALID_ADDRESS_SPACE
    "timed out and was terminated",  # CUDA_ERROR_LAUNCH_TIMEOUT
    "uncorrectable ecc",  # CUDA_ERROR_ECC_UNCORRECTABLE
    "context is destroyed",  # CUDA_ERROR_CONTEXT_IS_DESTROYED
)

RESTART = ('The CUDA context of this process is dead (a sticky error): every later GPU call of the process '
           'would fail; restart the process (device="cpu" works meanwhile).')
SURVIVED = "The CUDA context survived: the engine stays usable (this call's results are lost; run it again)."

# A launch: (stage, kernel name, grid, block, dynamic shared bytes).
Launch = Tuple[str, str, tuple, tuple, int]

_LOCK = threading.Lock()
_CONTEXT_FAULT: Optional[GpuFaultError] = None


def context_fault() -> Optional[GpuFaultError]:
    """The sticky fault that killed this process's CUDA context, or None while it is alive."""
    return _CONTEXT_FAULT


def _record(fault: GpuFaultError) -> None:
    global _CONTEXT_FAULT
    with _LOCK:
        if _CONTEXT_FAULT is None:
            _CONTEXT_FAULT = fault


def is_sticky_text(text: str) -> bool:
    text = text.lower()
    return any(t in text for t in STICKY_TEXTS)


def context_alive(cuda) -> bool:
    """False when the context no longer works (the probe itself fails); waits for the device."""
    if _CONTEXT_FAULT is not None:
        return False
    try:
        cuda.Context.synchronize()
        return True
    except cuda.Error:
        return False


def shape(grid, block, shared_bytes: int) -> str:
    return f"grid {_dim3(grid)}, block {_dim3(block)}, {int(shared_bytes or 0)} bytes of dynamic shared memory"


def _dim3(v) -> tuple:
    v = tuple(int(x) for x in v)
    return v + (1,) * (3 - len(v))


def _split(exc: BaseException) -> Tuple[str, str]:
    """("cuMemcpyDtoH", "an illegal memory access was encountered") from PyCUDA's message
    "cuMemcpyDtoH failed: an illegal memory access was encountered"."""
    text = str(exc)
    call, sep, rest = text.partition(" failed: ")
    return (call.strip(), rest.strip()) if sep else ("", text.strip())


def fault(cuda, exc: BaseException, *, where: str, launch: Optional[Launch], at_launch: bool) -> GpuFaultError:
    """The GpuFaultError of a driver error: at a launch (`at_launch`: `launch` is the kernel that
    failed) or at a synchronisation point `where` (`launch`: the last kernel launched before it).
    A sticky one is recorded process-wide."""
    call, text = _split(exc)
    ok = not is_sticky_text(text) and context_alive(cuda)
    stage = kernel = None
    grid = block = None
    shared = 0
    if launch is not None:
        stage, kernel, grid, block, shared = launch
        grid, block = _dim3(grid), _dim3(block)
    if at_launch:
        head = f"CUDA error launching kernel {kernel} (stage {stage!r}) with {shape(grid, block, shared)}"
    elif launch is not None:
        head = (f"CUDA error at {call or 'a synchronisation'} in {where}; the last kernel launched before it was "
                f"{kernel} (stage {stage!r}) with {shape(grid, block, shared)} (kernel faults surface at the "
                f"next synchronisation; CUDA_LAUNCH_BLOCKING=1 pins the kernel)")
    else:
        head = f"CUDA error at {call or 'a CUDA call'} in {where} (no kernel launched yet)"
    message = f"{head}: {text} [{type(exc).__name__}]. {SURVIVED if ok else RESTART}"
    err = GpuFaultError(message, kernel=kernel, stage=stage, grid=grid, block=block, shared_bytes=int(shared or 0),
                        where=where, cuda_call=call, cuda_error=text, context_ok=ok)
    if not ok:
        _record(err)
    return err


def dead_engine_error(where: str) -> GpuFaultError:
    """What a call on an engine of a dead context raises (instead of a confusing driver error)."""
    dead = _CONTEXT_FAULT
    return GpuFaultError(
        f"{where}: the CUDA engine is unusable: its context died earlier ({dead.cuda_error}"
        f"{f', kernel {dead.kernel}' if dead.kernel else ''}). {RESTART}",
        kernel=dead.kernel, stage=dead.stage, grid=dead.grid, block=dead.block, shared_bytes=dead.shared_bytes,
        where=where, cuda_call=dead.cuda_call, cuda_error=dead.cuda_error, context_ok=False)


def out_of_memory(exc: Optional[BaseException], nbytes: Optional[int], what: str, free: Optional[int],
                  place: str = "GPU") -> OutOfMemoryError:
    """OutOfMemoryError of a failed allocation, naming the bytes asked for (when known) and free."""
    call, text = _split(exc) if exc is not None else ("", "")
    free_text = "unknown" if free is None else f"{free / 2**30:.2f} GiB ({free:,} bytes)"
    asked = f"{nbytes / 2**30:.2f} GiB ({nbytes:,} bytes) of " if nbytes is not None else ""
    return OutOfMemoryError(
        f"allocating {asked}{place} memory for {what} failed"
        f"{f' ({call}: {text})' if text else ''}; {free_text} free. Fewer shots per call (results do not depend "
        f"on how shots are split), fewer qubits, or device=\"cpu\".")
