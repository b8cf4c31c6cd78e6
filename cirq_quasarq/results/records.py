"""Step 4 of the pipeline: packed engine records -> Cirq's measurement arrays.

Records stay bit-packed (uint64 [num_records, shot words], bit l of word w = shot 64w + l) until
here; each key's bits are gathered by slicing with the Program's key table, never by searching."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ..core.packed import host_pool
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


# Cirq's arrays are unpacked in blocks of whole keys of about this many bytes, each block its own
# array: blocks stay below the allocator's mmap threshold (32 MiB), so a repeated run() reuses
# heap pages instead of faulting in fresh ones (which costs more than the unpacking itself), and
# the blocks spread over threads (NumPy releases the GIL).
_BLOCK_BYTES = 4 << 20


def records_from_packed(program: Program, packed: np.ndarray, shots: int) -> Dict[str, np.ndarray]:
    """{key: int8 [shots, instances, qubits]} (Cirq's `records`): a key whose records are
    consecutive is a view of its block of unpacked rows, the others are gathered."""
    data = np.ascontiguousarray(packed).view(np.uint8)
    width = 8 * data.shape[1]  # unpacked columns (whole words: shots are sliced off last)
    blocks, gathered = _key_blocks(program, width)

    def unpack(block):
        lo, hi, members = block
        bits = np.unpackbits(data[lo:hi], axis=1, bitorder="little").view(np.int8)
        return [(key, bits[first - lo : first - lo + records.size].reshape(*records.shape, width))
                for key, first, records in members]

    parts = host_pool().map(unpack, blocks) if len(blocks) > 1 else map(unpack, blocks)
    out = {}
    for members in parts:
        for key, rows in members:
            out[key] = rows[..., :shots].transpose(2, 0, 1)
    for key, records in gathered:
        bits = np.unpackbits(data[records.ravel()], axis=1, bitorder="little").view(np.int8)
        out[key] = bits.reshape(*records.shape, width)[..., :shots].transpose(2, 0, 1)
    return {entry.key: out[entry.key] for entry in program.keys}  # the program's key order


def _key_blocks(program: Program, width: int):
    """([(first row, end row, [(key, first record, records)])], [(key, records)]): the keys whose
    records are consecutive, grouped in record order into blocks of about _BLOCK_BYTES; the rest,
    to gather. Made once per program and row width."""
    cache = program.derived.setdefault("key_blocks", {})
    plan = cache.get(width)
    if plan is None:
        consecutive, gathered = [], []
        for entry in program.keys:
            flat = entry.records.ravel()
            if not flat.size or np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
                consecutive.append((entry.key, int(flat[0]) if flat.size else 0, entry.records))
            else:
                gathered.append((entry.key, entry.records))
        consecutive.sort(key=lambda member: member[1])
        rows_per_block = max(1, _BLOCK_BYTES // max(width, 1))
        blocks: list = []
        for member in consecutive:
            first, end = member[1], member[1] + member[2].size
            if blocks and end - blocks[-1][0] <= rows_per_block:
                blocks[-1][1] = max(blocks[-1][1], end)
                blocks[-1][2].append(member)
            else:
                blocks.append([first, end, [member]])
        plan = cache[width] = ([tuple(b) for b in blocks], gathered)
    return plan


def last_measurements(program: Program, records: np.ndarray) -> Dict[str, np.ndarray]:
    """{key: uint8 [qubits]} of each key's latest instance from one shot's records (simulate())."""
    return {entry.key: records[entry.records[-1]].astype(np.uint8) for entry in program.keys}


def shot_major(packed: np.ndarray, shots: int, bit_packed: bool = False) -> np.ndarray:
    """Record-major packed bits -> Stim's shot-major layout: bool [shots, R], or with `bit_packed`
    uint8 [shots, ceil(R/8)] (core.parities.parities_shot_major)."""
    return parities_shot_major(packed, shots, bit_packed)
