"""The input contract of the public calls: every argument checked, and every result's memory and
the work's duration estimated, before any simulation work starts.

Violations raise the specific classes of `errors` (docs/reliability.md lists them with the inputs
tried); long work is not refused but announced with `errors.LongRunWarning`.
"""

from __future__ import annotations

import numbers
import os
import warnings
from typing import Any

import numpy as np

from . import errors
from .core import opcodes
from .core.parities import shot_major_bytes
from .core.program import A, OP, Program
from .results.records import unpack_bytes

# Sustained rates of the engines in instruction x 64-shot-word updates per second (frame mode;
# measured on the benchmark machines, docs/benchmarks-speed.md): the long-work estimate only.
_FRAME_RATE = {"numpy": 1e7, "cuda": 3e10}
# Tableau mode: word updates per second (a gate touches 2n/64 words per qubit, a random
# measurement up to 2n * n/64).
_TABLEAU_RATE = {"numpy": 3e8, "cuda": 3e11}


def repetitions(value: Any, call: str) -> int:
    """`repetitions` as an int: a non-negative integral number (NumPy integers and integral floats
    such as 1e6 included, bool excluded)."""
    if isinstance(value, (bool, np.bool_)):
        raise errors.InvalidRepetitionsError(f"{call}: repetitions must be a non-negative integer, not the bool "
                                             f"{value!r}")
    if isinstance(value, numbers.Integral):
        count = int(value)
    elif isinstance(value, numbers.Real) and float(value).is_integer():
        count = int(value)
    else:
        raise errors.InvalidRepetitionsError(
            f"{call}: repetitions must be a non-negative integer, not {type(value).__name__} {value!r}"
            + (" (convert it with int(...))" if isinstance(value, (str, numbers.Real)) else ""))
    if count < 0:
        raise errors.InvalidRepetitionsError(f"{call}: repetitions must be non-negative, got {count}")
    return count


def seed_int(value: Any):
    """`value` as the int that `seed` seeds a RandomState with, or None where it is no int."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        v = int(value)
        return v & 0xFFFFFFFF if v >= 2**32 or v < 0 else v
    return None


def seed(value: Any):
    """What Cirq's simulators accept as a seed (cirq.RANDOM_STATE_OR_SEED_LIKE) as a random state."""
    if value is None or value is np.random:
        return np.random
    v = seed_int(value)
    if v is not None:
        return np.random.RandomState(v)
    if isinstance(value, (np.random.RandomState, np.random.Generator)):
        return value
    raise errors.InvalidSeedError(
        f"seed must be None, an int, a numpy.random.RandomState or a numpy.random.Generator (what Cirq's "
        f"simulators take), not {type(value).__name__} {value!r}")


def packed_bytes(rows: int, shots: int) -> int:
    """Record-major bit-packed rows: uint64 [rows, ceil(shots / 64)]."""
    return 8 * rows * ((shots + 63) // 64)


def run_bytes(program: Program, shots: int) -> int:
    """Host bytes of run() at its peak: the packed records and Cirq's int8 arrays made from them."""
    return packed_bytes(program.num_records, shots) + unpack_bytes(program, shots)


def measurements_bytes(program: Program, shots: int, bit_packed: bool) -> int:
    """Host bytes of sample_measurements() at its peak: the packed records turned shot-major."""
    rows = program.num_records
    return packed_bytes(rows, shots) + shot_major_bytes(rows, shots, bit_packed)


def detectors_bytes(program: Program, columns: int, shots: int, unpacked: int = 0) -> int:
    """Host bytes of sample_detectors() at its peak, the largest of its stages: where shots branch,
    the packed records and the gather that reduces them to `columns` parities; the packed parities
    turned shot-major; the shot-major bytes and `unpacked` of the columns as bools."""
    parities = packed_bytes(columns, shots)
    stages = [parities + shot_major_bytes(columns, shots), shots * ((columns + 7) // 8 + unpacked)]
    if program.needs_branching():
        stages.append(packed_bytes(program.num_records, shots) + 2 * parities)
    return max(stages)


def executed_rows(program: Program) -> float:
    """Instructions the program executes, loops expanded (kept with the program)."""
    done = program.derived.get("executed_rows")
    if done is None and not program.loops:
        done = program.derived["executed_rows"] = float(program.num_instructions)
    if done is None:
        ins = program.instructions
        weight = np.ones(len(ins), dtype=np.float64)
        repeat, end = opcodes.CODE["REPEAT"], opcodes.CODE["END_REPEAT"]
        stack = []
        for row in np.flatnonzero((ins[:, OP] == repeat) | (ins[:, OP] == end)):
            if ins[row, OP] == repeat:
                stack.append(row)
            else:
                begin = stack.pop()
                loop = program.loops[int(ins[begin, A])]
                weight[begin + 1 : row] *= loop.count
        done = program.derived["executed_rows"] = float(weight.sum())
    return done


def _threshold() -> float:
    try:
        return float(os.environ.get("CIRQ_QUASARQ_WARN_SECONDS", "60"))
    except ValueError:
        return 60.0


def warn_if_long(program: Program, engine_name: str, shots: int = 0, tableau_runs: int = 0) -> None:
    """Announce work estimated past `$CIRQ_QUASARQ_WARN_SECONDS` (default 60 s) before it starts."""
    rows = executed_rows(program)
    words = (shots + 63) // 64
    n = program.num_qubits
    seconds = (rows + n + program.num_records) * words / _FRAME_RATE.get(engine_name, 1e7)
    if tableau_runs:
        tableau_words = rows * max(1, 2 * n // 64) * max(1.0, n / 64 * 0.05)  # ~5% collapses of O(n) rows
        seconds += tableau_runs * tableau_words / _TABLEAU_RATE.get(engine_name, 3e8)
    if seconds > _threshold():
        warnings.warn(errors.LongRunWarning(
            f"this call is estimated to take about {seconds:,.0f} s on the {engine_name} engine "
            f"({rows:,.0f} instructions executed with loops expanded, {n} qubits, "
            f"{shots:,} shots, {tableau_runs} tableau runs); Ctrl-C interrupts it and leaves the simulator "
            f"usable. Fewer repetitions, shorter loops or the GPU engine cut it."), stacklevel=3)
