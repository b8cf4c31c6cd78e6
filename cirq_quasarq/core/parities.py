"""Parities of records: detectors and observables, reduced where the records are made.

A `Parities` is a list of XORs of record bits (each a row of `records` between two `offsets`),
each XORed with a constant `flip`. Detectors and logical observables are parities whose flip is
the parity of the noiseless reference over the same records, so that they come out as Stim
reports them: detection events and observable flips relative to the noiseless run. An engine
given parities returns them instead of the records (the CUDA engine reduces them on the device, so
only those bits travel to the host).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from .packed import column_bytes
from .program import Annotation, Annotations


@dataclasses.dataclass(frozen=True)
class Parities:
    offsets: np.ndarray  # int64 [P + 1]: parity p XORs records[offsets[p]:offsets[p + 1]]
    records: np.ndarray  # int64 [offsets[-1]]: absolute record slots
    flip: np.ndarray  # uint8 [P]: XORed into each parity

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def of(cls, annotations: Sequence[Annotation], reference: np.ndarray) -> "Parities":
        """The parities of detectors / observables, relative to the records' reference values."""
        table = Annotations.of(annotations)
        offsets, records = table.offsets, table.records
        ref = np.asarray(reference, dtype=np.uint8) & 1
        # each parity's flip: the XOR of its records' reference bits, from one running XOR
        running = np.concatenate([[0], np.bitwise_xor.accumulate(ref[records])]) if len(records) else np.zeros(1, np.uint8)
        flip = (running[offsets[1:]] ^ running[offsets[:-1]]).astype(np.uint8)
        return cls(offsets, records, flip)

    def reduce(self, packed: np.ndarray) -> np.ndarray:
        """uint64 [P, W] from packed records uint64 [R, W] (bit l of word w: shot 64w + l)."""
        words = packed.shape[1]
        out = np.zeros((self.count, words), dtype=np.uint64)
        lengths = np.diff(self.offsets)
        for length in np.unique(lengths):  # parities of one length at once: a gather and XORs
            rows = np.flatnonzero(lengths == length)
            if length == 0:
                continue
            index = self.offsets[rows][:, None] + np.arange(length)[None, :]
            acc = packed[self.records[index[:, 0]]]  # a gather: a new array
            for j in range(1, int(length)):
                acc ^= packed[self.records[index[:, j]]]
            out[rows] = acc
        out ^= np.uint64(0) - self.flip.astype(np.uint64)[:, None]
        return out


_CHUNK_BYTES = 1 << 26  # parities_shot_major's unpacked bits at a time


def shot_major_bytes(rows: int, shots: int, bit_packed: bool = True) -> int:
    """Host bytes parities_shot_major takes beside its input: the result and, for a chunk of shots,
    its bits twice (rows padded to eights: the 8 x 8 blocks before and after their transpose) and,
    where bit_packed is False, once more a byte a bit."""
    out = shots * ((rows + 7) // 8 if bit_packed else rows)
    if not (rows and shots):
        return out
    chunk_words = min((shots + 63) // 64, max(1, _CHUNK_BYTES // (64 * rows)))
    blocks = 8 * ((rows + 7) // 8) * 8 * chunk_words
    return out + 2 * blocks + (0 if bit_packed else 64 * chunk_words * rows)


def parities_shot_major(packed: np.ndarray, shots: int, bit_packed: bool = True) -> np.ndarray:
    """uint64 [R, W] record-major packed bits -> Stim's shot-major layout: uint8 [shots, ceil(R/8)]
    (bit b of byte k is column 8k + b), or with bit_packed=False bool [shots, R]. Converted in
    chunks of shots (shot_major_bytes: the memory)."""
    rows = packed.shape[0]
    row_bytes = (rows + 7) // 8
    out = np.zeros((shots, row_bytes) if bit_packed else (shots, rows), dtype=np.uint8 if bit_packed else bool)
    step = max(1, _CHUNK_BYTES // max(1, 64 * rows))  # words of 64 shots per chunk
    for w0 in range(0, packed.shape[1], step):
        w1 = min(packed.shape[1], w0 + step)
        lo, hi = 64 * w0, min(shots, 64 * w1)
        if lo >= hi:
            break
        block = column_bytes(packed[:, w0:w1], hi - lo).T  # [shots, row bytes]
        out[lo:hi] = block if bit_packed else np.unpackbits(block, axis=1, count=rows, bitorder="little")
    return out
