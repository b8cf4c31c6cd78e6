"""Step 4 of the pipeline: packed engine records -> Cirq's measurement arrays.

Records stay bit-packed (uint64 [num_records, shot words], bit l of word w = shot 64w + l) until
here; each key's bits are gathered by slicing with the Program's key table, never by searching."""

from __future__ import annotations

from typing import Dict

import numpy as np

from .program import Program


def unpack_records(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [R, W] -> uint8 [shots, R] (shot-major, as Cirq's arrays)."""
    if packed.shape[0] == 0:
        return np.zeros((shots, 0), dtype=np.uint8)
    bits = np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=1, bitorder="little")
    return np.ascontiguousarray(bits[:, :shots].T)


def key_arrays(program: Program, bits: np.ndarray) -> Dict[str, np.ndarray]:
    """{key: int8 [shots, instances, qubits]} from shot-major record bits (Cirq's `records`)."""
    out = {}
    for entry in program.keys:
        out[entry.key] = bits[:, entry.records].astype(np.int8, copy=False)
    return out


def records_from_packed(program: Program, packed: np.ndarray, shots: int) -> Dict[str, np.ndarray]:
    return key_arrays(program, unpack_records(packed, shots))


def last_measurements(program: Program, records: np.ndarray) -> Dict[str, np.ndarray]:
    """{key: uint8 [qubits]} of each key's latest instance from one shot's records (simulate())."""
    return {entry.key: records[entry.records[-1]].astype(np.uint8) for entry in program.keys}

