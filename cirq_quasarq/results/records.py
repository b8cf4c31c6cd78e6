"""Step 4 of the pipeline: packed engine records -> Cirq's measurement arrays.

Records stay bit-packed (uint64 [num_records, shot words], bit l of word w = shot 64w + l) until
here; each key's bits are gathered by slicing with the Program's key table, never by searching."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ..core.parities import parities_shot_major
from ..core.program import Program


def unpack_records(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [shots, R] (shot-major, as Cirq's arrays)."""
    return np.ascontiguousarray(_record_major(packed, shots).T)


def _record_major(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [R, shots], one contiguous row of shots per record."""
    if packed.shape[0] == 0:
        return np.zeros((0, shots), dtype=np.uint8)
    bits = np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=1, bitorder="little")
    return bits[:, :shots]


def records_from_packed(program: Program, packed: np.ndarray, shots: int) -> Dict[str, np.ndarray]:
    """{key: int8 [shots, instances, qubits]} (Cirq's `records`), gathered record-major so each
    key costs one contiguous copy of its own bits."""
    bits = _record_major(packed, shots).view(np.int8)
    return {entry.key: _rows(bits, entry.records).transpose(2, 0, 1) for entry in program.keys}


def _rows(bits: np.ndarray, records: np.ndarray) -> np.ndarray:
    """bits[records] ([instances, qubits, shots]): a view where the key's records are consecutive
    (the usual case, no copy of the shots), else a gathered copy."""
    flat = records.ravel()
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        return bits[flat[0] : flat[0] + flat.size].reshape(*records.shape, bits.shape[1])
    return bits[records]


def last_measurements(program: Program, records: np.ndarray) -> Dict[str, np.ndarray]:
    """{key: uint8 [qubits]} of each key's latest instance from one shot's records (simulate())."""
    return {entry.key: records[entry.records[-1]].astype(np.uint8) for entry in program.keys}




def shot_major(packed: np.ndarray, shots: int, bit_packed: bool = False) -> np.ndarray:
    """Record-major packed bits -> Stim's shot-major layout: bool [shots, R], or with `bit_packed`
    uint8 [shots, ceil(R/8)] (core.parities.parities_shot_major)."""
    return parities_shot_major(packed, shots, bit_packed)
