"""Host-side work on bit-packed rows (uint64 [rows, words], bit l of word w = shot 64w + l):
the process's one pool of helper threads, and the per-row reductions over shots that the engines
also run on the device (`Engine.reduce_frames`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import native

if TYPE_CHECKING:
    import concurrent.futures

HOST_THREADS = min(8, native.processors())  # the pool's threads: at most the processors this process may run on
_POOL = None
_LOCK = threading.Lock()

# The reductions `Engine.reduce_frames` knows: set bits per row, and the XOR of a row's words (a
# checksum that combines across shards by XOR, so a run's checksum does not depend on sharding).
REDUCTIONS = ("popcount", "xor")


def host_pool() -> concurrent.futures.ThreadPoolExecutor:
    """A few threads for NumPy work on large arrays (NumPy releases the GIL in its loops)."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            # imported here: a process that never needs the pool (a sinter worker's small batches)
            # does not pay concurrent.futures' import (4 ms)
            import concurrent.futures

            _POOL = concurrent.futures.ThreadPoolExecutor(HOST_THREADS, thread_name_prefix="quasarq-host")
    return _POOL


def by_row_blocks(packed: np.ndarray, fn: Callable[[int, int], None]) -> None:
    """fn(lo, hi) over blocks of rows, on the pool's threads for large arrays."""
    rows = packed.shape[0]
    step = max(1, -(-rows // 32))
    if packed.nbytes < (1 << 22):
        fn(0, rows)
    else:
        list(host_pool().map(lambda lo: fn(lo, min(rows, lo + step)), range(0, rows, step)))


def tail_mask(shots: int) -> np.uint64:
    """The bits of the last word that hold shots (all of them when shots is a multiple of 64)."""
    return np.uint64((1 << (shots % 64)) - 1 if shots % 64 else (1 << 64) - 1)


def popcount_rows(packed: np.ndarray, shots: int) -> np.ndarray:
    """int64 [rows]: set bits of each row among the first `shots` shots (the bits past them are
    unspecified and not counted)."""
    out = np.zeros(packed.shape[0], dtype=np.int64)
    if out.size == 0 or shots == 0:
        return out
    full = shots // 64

    def count(lo: int, hi: int) -> None:
        block = packed[lo:hi]
        out[lo:hi] = np.bitwise_count(block[:, :full]).sum(axis=1, dtype=np.int64)
        if shots % 64:
            out[lo:hi] += np.bitwise_count(block[:, full] & tail_mask(shots)).astype(np.int64)

    by_row_blocks(packed, count)
    return out


def xor_rows(packed: np.ndarray, shots: int) -> np.ndarray:
    """uint64 [rows]: the XOR of each row's words among the first `shots` shots (bits past them
    cleared)."""
    out = np.zeros(packed.shape[0], dtype=np.uint64)
    if out.size == 0 or shots == 0:
        return out
    full = shots // 64

    def fold(lo: int, hi: int) -> None:
        block = packed[lo:hi]
        out[lo:hi] = np.bitwise_xor.reduce(block[:, :full], axis=1) if full else 0
        if shots % 64:
            out[lo:hi] ^= block[:, full] & tail_mask(shots)

    by_row_blocks(packed, fold)
    return out


def reduce_rows(packed: np.ndarray, shots: int, op: str) -> np.ndarray:
    """`op` of REDUCTIONS over each row's first `shots` shots, as uint64 [rows]."""
    if op == "popcount":
        return popcount_rows(packed, shots).astype(np.uint64)
    if op == "xor":
        return xor_rows(packed, shots)
    raise ValueError(f"unknown reduction {op!r}; known: {', '.join(REDUCTIONS)}")


_TRANSPOSE8 = tuple((np.uint64(shift), np.uint64(mask)) for shift, mask in (
    (7, 0x00AA00AA00AA00AA), (14, 0x0000CCCC0000CCCC), (28, 0x00000000F0F0F0F0)))


def column_bytes(rows: np.ndarray, columns: int) -> np.ndarray:
    """Packed bit rows uint64 [R, W] (bit c of row r: bit c % 64 of word c // 64) -> uint8
    [ceil(R/8), columns]: bit a of [k, c] is bit c of row 8k + a (rows past R read as 0). Each 8 x 8
    block of bits is transposed inside one word by three delta swaps, no unpacking to bytes."""
    groups = -(-rows.shape[0] // 8)
    if not groups:
        return np.zeros((0, columns), dtype=np.uint8)
    padded = np.zeros((8 * groups, rows.shape[1]), dtype=np.uint64)
    padded[: rows.shape[0]] = rows
    block = np.ascontiguousarray(padded.view(np.uint8).reshape(groups, 8, -1).transpose(0, 2, 1)).view(np.uint64)
    del padded  # at most two copies of the bits are held at once (parities.shot_major_bytes)
    t = np.empty_like(block)
    for shift, mask in _TRANSPOSE8:
        np.right_shift(block, shift, out=t)
        t ^= block
        t &= mask
        block ^= t
        t <<= shift
        block ^= t
    return block.view(np.uint8).reshape(groups, -1)[:, :columns]
