"""Step 4 of the pipeline: packed engine records -> Cirq's measurement arrays.

Records stay bit-packed (uint64 [num_records, shot words], bit l of word w = shot 64w + l) until
here; each key's bits are gathered by slicing with the Program's key table, never by searching."""

from __future__ import annotations

import sys
import threading
from typing import Dict, Optional

import numpy as np

from ..core.packed import HOST_THREADS, host_pool
from ..core.parities import parities_shot_major
from ..core.program import Program


def unpack_records(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [shots, R] (shot-major, as Cirq's arrays)."""
    return np.ascontiguousarray(_record_major(packed, shots).T)


def _record_major(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [R, shots], a row of shots per record (a view of `_unpacked`)."""
    return _unpacked(packed, shots)[:, :shots]


def _unpacked(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> contiguous uint8 [R, 64 W] (bits past `shots` unspecified)."""
    if packed.shape[0] == 0:
        return np.zeros((0, shots), dtype=np.uint8)
    return np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=1, bitorder="little")


# Cirq's arrays are views of one host buffer of unpacked records, unpacked in blocks of rows of
# about this many bytes spread over threads (NumPy releases the GIL), each block a few rows at a
# time so that the unpacked bits go from cache to the buffer. The buffer is kept for the next call
# and reused once no result holds it any more: touching fresh memory (page faults) costs more than
# the unpacking itself.
_BLOCK_BYTES = 4 << 20
_UNPACK_ROWS = 8
_KEEP_BYTES = 2 << 30  # a larger buffer is not kept
_kept: Optional[np.ndarray] = None
_kept_lock = threading.Lock()


def _host_rows(rows: int, width: int) -> np.ndarray:
    """int8 [rows, width], in the kept buffer when no result holds it (else a new one)."""
    global _kept
    size = rows * width
    with _kept_lock:
        buffer = _kept
        # References when nobody else holds it: the module's, `buffer`'s and getrefcount's own.
        if buffer is None or buffer.size < size or sys.getrefcount(buffer) > 3:
            buffer = np.empty(max(size, 1), dtype=np.int8)
            _kept = buffer if size <= _KEEP_BYTES else None
        return buffer[:size].reshape(rows, width)  # this view marks the buffer as held


def unpack_bytes(program: Program, shots: int) -> int:
    """Host bytes records_from_packed takes at its peak beside the packed records: the buffer of
    unpacked rows, the blocks being unpacked at once (one per thread; a block is at least a whole
    row, however many shots it has) and the keys that are gathered rather than viewed. A kept
    buffer that the call may reuse is not credited."""
    rows, words = program.num_records, (shots + 63) // 64
    width = 64 * words
    step = max(1, _BLOCK_BYTES // max(width, 1))
    blocks = -(-rows // step)
    at_once = (min(blocks, HOST_THREADS) if blocks > 1 else 1) * min(_UNPACK_ROWS, step, rows) * width
    gathered = sum(records.size for _, records, spacing in _key_plan(program) if spacing is None)
    return rows * width + at_once + gathered * (width + 8 * words)


def records_from_packed(program: Program, packed: np.ndarray, shots: int) -> Dict[str, np.ndarray]:
    """{key: int8 [shots, instances, qubits]} (Cirq's `records`): a key whose records are evenly
    spaced (one measurement, or one per loop iteration) is a strided view of the unpacked rows,
    the others are gathered."""
    data = np.ascontiguousarray(packed).view(np.uint8)
    rows, width = data.shape[0], 8 * data.shape[1]  # unpacked columns: whole words, shots sliced off last
    unpacked = _host_rows(rows, width)
    step = max(1, _BLOCK_BYTES // max(width, 1))  # rows a block

    def unpack(lo):
        for at in range(lo, min(rows, lo + step), _UNPACK_ROWS):
            top = min(rows, at + _UNPACK_ROWS, lo + step)
            unpacked[at:top] = np.unpackbits(data[at:top], axis=1, bitorder="little")

    starts = range(0, rows, step)
    list(host_pool().map(unpack, starts) if len(starts) > 1 else map(unpack, starts))
    out = {}
    for key, records, spacing in _key_plan(program):
        if spacing is not None:
            first, (by_instance, by_qubit) = int(records.flat[0]), spacing
            bits = np.lib.stride_tricks.as_strided(unpacked[first:], shape=(*records.shape, width),
                                                   strides=(by_instance * width, by_qubit * width, 1))
        else:
            bits = np.unpackbits(data[records.ravel()], axis=1, bitorder="little").view(np.int8)
            bits = bits.reshape(*records.shape, width)
        out[key] = bits[..., :shots].transpose(2, 0, 1)
    return out


def _key_plan(program: Program):
    """[(key, records [instances, qubits], (instance step, qubit step) or None)] in the program's
    key order: the steps when the key's record slots are evenly spaced along both axes. Made once
    per program."""
    plan = program.derived.get("key_plan")
    if plan is None:
        plan = []
        for entry in program.keys:
            records = np.asarray(entry.records, dtype=np.int64)
            spacing = None
            if records.size and records.ndim == 2:
                by_instance = int(records[1, 0] - records[0, 0]) if records.shape[0] > 1 else 0
                by_qubit = int(records[0, 1] - records[0, 0]) if records.shape[1] > 1 else 0
                inst, qub = np.indices(records.shape)
                if by_instance >= 0 and by_qubit >= 0 and np.array_equal(
                        records, records[0, 0] + inst * by_instance + qub * by_qubit):
                    spacing = (by_instance, by_qubit)
            plan.append((entry.key, records, spacing))
        program.derived["key_plan"] = plan
    return plan


def last_measurements(program: Program, records: np.ndarray) -> Dict[str, np.ndarray]:
    """{key: uint8 [qubits]} of each key's latest instance from one shot's records (simulate())."""
    return {entry.key: records[entry.records[-1]].astype(np.uint8) for entry in program.keys}


def shot_major(packed: np.ndarray, shots: int, bit_packed: bool = False) -> np.ndarray:
    """Record-major packed bits -> Stim's shot-major layout: bool [shots, R], or with `bit_packed`
    uint8 [shots, ceil(R/8)] (core.parities.parities_shot_major)."""
    return parities_shot_major(packed, shots, bit_packed)
