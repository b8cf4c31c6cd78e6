"""Step 4 of the pipeline: packed engine records -> Cirq's measurement arrays.

Records stay bit-packed (uint64 [num_records, shot words], bit l of word w = shot 64w + l) until
here; each key's bits are gathered by slicing with the Program's key table, never by searching."""

from __future__ import annotations

import concurrent.futures
import os
from typing import Dict

import numpy as np

from ..core.parities import parities_shot_major
from ..core.program import Program


def unpack_records(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [shots, R] (shot-major, as Cirq's arrays)."""
    return np.ascontiguousarray(_record_major(packed, shots).T)


def _record_major(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [R, shots], a row of shots per record (a view of `_unpacked`)."""
    return _unpacked(packed, shots)[:, :shots]


def _unpacked(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> contiguous uint8 [R, 64 W] (bits past `shots` unspecified). Large arrays
    are unpacked by blocks of rows on several threads (NumPy releases the GIL; first touching the
    fresh pages is most of the cost, and it spreads over the cores too)."""
    rows, words = packed.shape
    if rows == 0:
        return np.zeros((0, shots), dtype=np.uint8)
    data = np.ascontiguousarray(packed).view(np.uint8)
    threads = min(_UNPACK_THREADS, rows, (64 * words * rows) // _UNPACK_BLOCK_BYTES)
    if threads < 2:
        return np.unpackbits(data, axis=1, bitorder="little")
    out = np.empty((rows, 64 * words), dtype=np.uint8)
    step = max(1, _UNPACK_BLOCK_BYTES // (64 * words))

    def unpack(lo: int) -> None:
        out[lo : lo + step] = np.unpackbits(data[lo : lo + step], axis=1, bitorder="little")

    list(_pool().map(unpack, range(0, rows, step)))
    return out


_UNPACK_THREADS = min(8, os.cpu_count() or 1)
_UNPACK_BLOCK_BYTES = 4 << 20  # output bytes a task (big enough to amortise, small enough to spread)
_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(_UNPACK_THREADS, thread_name_prefix="quasarq-unpack")
    return _POOL


def records_from_packed(program: Program, packed: np.ndarray, shots: int) -> Dict[str, np.ndarray]:
    """{key: int8 [shots, instances, qubits]} (Cirq's `records`), gathered record-major so each
    key costs one contiguous copy of its own bits."""
    bits = _unpacked(packed, shots).view(np.int8)  # whole words: slicing shots last keeps views
    out = {}
    for key, first, records in _key_rows(program):
        rows = (bits[first : first + records.size].reshape(*records.shape, bits.shape[1]) if first >= 0
                else bits[records])  # a view where the key's records are consecutive, else a copy
        out[key] = rows[..., :shots].transpose(2, 0, 1)
    return out


def _key_rows(program: Program):
    """(key, first record or -1, records) per key, -1 where its records are not consecutive
    (found once per program)."""
    table = program.derived.get("key_rows")
    if table is None:
        table = []
        for entry in program.keys:
            flat = entry.records.ravel()
            consecutive = flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size))
            table.append((entry.key, int(flat[0]) if consecutive else -1, entry.records))
        program.derived["key_rows"] = table
    return table


def last_measurements(program: Program, records: np.ndarray) -> Dict[str, np.ndarray]:
    """{key: uint8 [qubits]} of each key's latest instance from one shot's records (simulate())."""
    return {entry.key: records[entry.records[-1]].astype(np.uint8) for entry in program.keys}




def shot_major(packed: np.ndarray, shots: int, bit_packed: bool = False) -> np.ndarray:
    """Record-major packed bits -> Stim's shot-major layout: bool [shots, R], or with `bit_packed`
    uint8 [shots, ceil(R/8)] (core.parities.parities_shot_major)."""
    return parities_shot_major(packed, shots, bit_packed)
