"""Stim's shot data formats (01, b8, r8, ptb64, hits, dets), written and read in batches.

The byte layouts are Stim's (its doc/result_formats.md), checked against `stim.write_shot_data_file`
and `stim.read_shot_data_file` by the tests. A batch is bit-packed shot-major: uint8
[shots, ceil(columns / 8)], bit b of byte k being column 8k + b (what the samplers return). Each
batch is encoded with NumPy in slices of about `SLICE_BITS` bits, so memory stays bounded whatever
the number of shots. Columns are named in `dets` by `Names`: M (measurements), D (detectors) and L
(observables), each numbered from 0.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .core.ranges import nonzero_2d

FORMATS = ("01", "b8", "r8", "ptb64", "hits", "dets")
HELP = ("01: a line of 0s and 1s per shot; b8: ceil(bits/8) bytes per shot, bit b of byte k is bit 8k+b; "
        "r8: per shot, the run lengths of 0s before each 1 (255 continues a run), ending past the last bit; "
        "ptb64: per 64 shots, 8 bytes per bit, one bit per shot (shots must be a multiple of 64); "
        "hits: the indices of the 1s, comma-separated, a line per shot; "
        "dets: 'shot' then M<k> / D<k> / L<k> for each 1, a line per shot")
SLICE_BITS = 1 << 22


class FormatError(ValueError):
    """Shot data that does not parse in its declared format."""


class Names:
    """The column names of `dets`: segments of (letter, count), e.g. (("D", 24), ("L", 1))."""

    def __init__(self, segments: Sequence[Tuple[str, int]]):
        self.segments = tuple((letter, int(count)) for letter, count in segments)
        self.count = sum(count for _, count in self.segments)


def _mask_tail(packed: np.ndarray, columns: int) -> np.ndarray:
    """`packed` with the bits past `columns` in the last byte cleared (copied if any are set)."""
    if columns % 8 and packed.shape[0]:
        keep = np.uint8((1 << (columns % 8)) - 1)
        last = packed[:, -1]
        if np.any(last & ~keep):
            packed = packed.copy()
            packed[:, -1] &= keep
    return packed


def _unpack(packed: np.ndarray, columns: int) -> np.ndarray:
    return np.unpackbits(packed, axis=1, count=columns, bitorder="little")


def joined(*parts: Tuple[np.ndarray, int]) -> np.ndarray:
    """Bit-packed rows (uint8 [shots, ceil(columns / 8)]) of (rows, columns) parts side by side."""
    return np.packbits(np.concatenate([_unpack(packed, columns) for packed, columns in parts], axis=1), axis=1,
                       bitorder="little")


class _Table:
    """Byte strings by id, gathered into one buffer by a vector of ids (no Python per item)."""

    def __init__(self, pieces: List[bytes]):
        self.lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.data = np.frombuffer(b"".join(pieces), dtype=np.uint8)

    def gather(self, ids: np.ndarray) -> np.ndarray:
        lengths = self.lengths[ids]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        index = np.repeat(self.offsets[ids] - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)
        return self.data[index]


def _lines(bits: np.ndarray, table: _Table, first: Optional[int], newline: int) -> np.ndarray:
    """Per shot (row of `bits`): piece `first` (if any), the piece of each set column (piece id =
    column), piece `newline`; returned as the ids in order."""
    rows, cols = nonzero_2d(bits)
    k = bits.shape[0]
    counts = np.bincount(rows, minlength=k)
    head = 0 if first is None else 1
    length = counts + head + 1
    start = np.cumsum(length) - length
    ids = np.empty(int(length.sum()), dtype=np.int64)
    if head:
        ids[start] = first
    ids[start + length - 1] = newline
    before = np.cumsum(counts) - counts  # hits in earlier rows
    ids[start[rows] + head + np.arange(len(rows)) - before[rows]] = cols
    return ids


class Writer:
    """Writes batches of shots of `columns` bits in `fmt` to the binary stream `out`."""

    def __init__(self, out: BinaryIO, fmt: str, columns: int, names: Optional[Names] = None):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
        self.out, self.fmt, self.columns = out, fmt, int(columns)
        self.names = names if names is not None else Names([("M", columns)])
        if self.names.count != self.columns:
            raise ValueError(f"{self.names.count} named columns for {self.columns} columns")
        self._table: Optional[_Table] = None

    def table(self) -> _Table:
        """hits: "<c>," for column c; dets: " <letter><k>"; then the line end (and "shot")."""
        if self._table is None:
            if self.fmt == "hits":
                pieces = [b"%d," % c for c in range(self.columns)] + [b"\n"]
            else:
                pieces = [b" %s%d" % (letter.encode(), k) for letter, count in self.names.segments
                          for k in range(count)] + [b"\n", b"shot"]
            self._table = _Table(pieces)
        return self._table

    def write(self, packed: np.ndarray) -> None:
        """One batch: uint8 [shots, ceil(columns / 8)] bit-packed shot-major (ptb64: shots a
        multiple of 64)."""
        shots = packed.shape[0]
        if self.fmt == "ptb64" and shots % 64:
            raise ValueError(f"ptb64 writes whole groups of 64 shots, got a batch of {shots}")
        if self.fmt == "b8":  # the bytes themselves
            self.out.write(np.ascontiguousarray(_mask_tail(packed, self.columns)).data)
            return
        step = max(64, SLICE_BITS // max(1, self.columns) // 64 * 64)
        for lo in range(0, shots, step):
            self.out.write(self._encode(packed[lo:lo + step]).data)

    def _encode(self, packed: np.ndarray) -> np.ndarray:
        c, k = self.columns, packed.shape[0]
        bits = _unpack(packed, c)
        if self.fmt == "01":
            text = np.empty((k, c + 1), dtype=np.uint8)
            text[:, :c] = bits + ord("0")
            text[:, c] = ord("\n")
            return text
        if self.fmt == "ptb64":  # per group of 64 shots, per column, 64 bits: one per shot
            grouped = bits.reshape(k // 64, 64, c).transpose(0, 2, 1)
            return np.packbits(grouped, axis=2, bitorder="little")
        if self.fmt == "r8":
            return _r8(bits)
        if self.fmt == "hits":
            text = self.table().gather(_lines(bits, self.table(), None, c))
            # each line with hits ends ",\n": drop the comma
            ends = np.flatnonzero(text == ord("\n"))
            return np.delete(text, ends[(ends > 0) & (text[ends - 1] == ord(","))] - 1)
        return self.table().gather(_lines(bits, self.table(), c + 1, c))  # dets


def _r8(bits: np.ndarray) -> np.ndarray:
    """Run lengths: per shot, for each 1 (and one past the last bit) the number of 0s before it,
    a run of 255 or more written as 255s (each 255 zeros, no 1) and then the rest."""
    k, c = bits.shape
    ones = np.flatnonzero(np.concatenate([bits, np.ones((k, 1), dtype=np.uint8)], axis=1))
    # with the 1 past each shot's end, the 0s before a 1 are the gap since the previous 1, across shots
    gaps = np.diff(ones, prepend=-1) - 1
    if not len(gaps) or gaps.max() < 255:
        return gaps.astype(np.uint8)
    lengths = gaps // 255 + 1
    out = np.full(int(lengths.sum()), 255, dtype=np.uint8)
    out[np.cumsum(lengths) - 1] = gaps % 255
    return out


# ------------------------------------------------------------------------------------- reading
class Reader:
    """Reads shots of `columns` bits in `fmt` from the binary stream `inp` in batches of at most
    `batch` shots (ptb64: a multiple of 64), each bit-packed shot-major as `Writer.write` takes."""

    def __init__(self, inp: BinaryIO, fmt: str, columns: int, batch: int, letter: str = "M"):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
        self.inp, self.fmt, self.columns, self.letter = inp, fmt, int(columns), letter
        self.batch = max(64, int(batch) // 64 * 64)
        self.shots = 0  # read so far
        self._rest = b""

    def __iter__(self) -> Iterator[np.ndarray]:
        read = {"01": self._fixed, "b8": self._fixed, "ptb64": self._fixed, "r8": self._r8,
                "hits": self._text, "dets": self._text}[self.fmt]
        for packed in read():
            self.shots += packed.shape[0]
            yield packed

    def _fail(self, what: str) -> FormatError:
        return FormatError(f"{self.fmt} data, shot {self.shots}: {what}")

    def _chunks(self, size: int) -> Iterator[bytes]:
        while True:
            data = self.inp.read(size)
            if not data:
                return
            yield data

    def _fixed(self) -> Iterator[np.ndarray]:
        c = self.columns
        unit = {"01": c + 1, "b8": (c + 7) // 8, "ptb64": 8 * c}[self.fmt]  # bytes per shot, or per 64 shots
        per = 64 if self.fmt == "ptb64" else 1
        if unit == 0:
            raise self._fail("data with no bits per shot has no shots to count (use 01, r8, hits or dets)")
        want = unit * (self.batch // per)
        buffer = b""
        for data in self._chunks(want):
            buffer += data
            while len(buffer) >= want:
                yield self._decode_fixed(buffer[:want], unit)
                buffer = buffer[want:]
        if len(buffer) % unit:
            raise self._fail(f"the data ends inside a {'group of 64 shots' if per == 64 else 'shot'}")
        if buffer:
            yield self._decode_fixed(buffer, unit)

    def _decode_fixed(self, data: bytes, unit: int) -> np.ndarray:
        raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, unit)
        c = self.columns
        if self.fmt == "b8":
            return raw
        if self.fmt == "01":
            if np.any(raw[:, c] != ord("\n")):
                raise self._fail(f"a line is not {c} characters long")
            bits = raw[:, :c] - np.uint8(ord("0"))
            if np.any(bits > 1):
                raise self._fail("a character other than 0 or 1")
            return np.packbits(bits, axis=1, bitorder="little")
        bits = np.unpackbits(raw.reshape(-1, c, 8), axis=2, bitorder="little")  # ptb64: [groups, c, 64]
        return np.packbits(bits.transpose(0, 2, 1).reshape(-1, c), axis=1, bitorder="little")

    def _r8(self) -> Iterator[np.ndarray]:
        span = self.columns + 1  # every shot's runs and 1s add up to columns + 1 bits
        rest = np.zeros(0, dtype=np.uint8)
        for data in self._chunks(max(1 << 16, self.batch * 4)):
            codes = np.concatenate([rest, np.frombuffer(data, dtype=np.uint8)])
            step = codes.astype(np.int64) + (codes != 255)
            end = np.cumsum(step)
            whole = np.flatnonzero(end % span == 0)
            whole = whole[codes[whole] != 255]  # a shot ends on a 1 at bit `columns`
            if not len(whole):
                rest = codes
                continue
            cut = int(whole[-1]) + 1
            yield from self._decode_r8(codes[:cut], end[:cut], span)
            rest = codes[cut:]
        if len(rest):
            raise self._fail("the data ends inside a shot")

    def _decode_r8(self, codes: np.ndarray, end: np.ndarray, span: int) -> Iterator[np.ndarray]:
        if end[-1] % span:
            raise self._fail("a run goes past the end of a shot")
        ones = np.flatnonzero(codes != 255)
        position = end[ones] - 1  # of each 1, counted from the first shot of the chunk
        shot, bit = np.divmod(position, span)
        terminal = bit == self.columns
        if np.count_nonzero(terminal) != end[-1] // span or np.any(np.diff(shot[terminal]) != 1):
            raise self._fail("a run goes past the end of a shot")
        shots = int(end[-1] // span)
        for lo in range(0, shots, self.batch):
            hi = min(shots, lo + self.batch)
            pick = ~terminal & (shot >= lo) & (shot < hi)
            yield self._pack(shot[pick] - lo, bit[pick], hi - lo)

    def _pack(self, shot: np.ndarray, bit: np.ndarray, shots: int) -> np.ndarray:
        bits = np.zeros((shots, self.columns), dtype=np.uint8)
        bits[shot, bit] = 1
        return np.packbits(bits, axis=1, bitorder="little")

    def _text(self) -> Iterator[np.ndarray]:
        lines: List[bytes] = []
        tail = b""
        for data in self._chunks(1 << 20):
            parts = (tail + data).split(b"\n")
            tail = parts.pop()
            lines.extend(parts)
            while len(lines) >= self.batch:
                yield self._parse(lines[: self.batch])
                lines = lines[self.batch:]
        if tail.strip():
            raise self._fail("the last line does not end with a newline")
        if lines:
            yield self._parse(lines)

    def _parse(self, lines: List[bytes]) -> np.ndarray:
        shot: List[int] = []
        bit: List[int] = []
        for i, line in enumerate(lines):
            if self.fmt == "hits":
                words = [w for w in line.split(b",") if w.strip()]
            else:
                words = line.split()
                if not words or words[0] != b"shot":
                    raise self._fail(f"line {self.shots + i + 1} does not start with 'shot'")
                words = words[1:]
                if any(w[:1] != self.letter.encode() for w in words):
                    raise self._fail(f"line {self.shots + i + 1} names a bit that is not {self.letter}<k>")
                words = [w[1:] for w in words]
            try:
                values = [int(w) for w in words]
            except ValueError:
                raise self._fail(f"line {self.shots + i + 1} holds something other than bit indices") from None
            shot.extend([i] * len(values))
            bit.extend(values)
        bits = np.asarray(bit, dtype=np.int64)
        if len(bits) and (bits.min() < 0 or bits.max() >= self.columns):
            raise self._fail(f"a bit index outside 0..{self.columns - 1}")
        return self._pack(np.asarray(shot, dtype=np.int64), bits, len(lines))
