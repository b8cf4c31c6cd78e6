"""Ragged gathers (the elements of many ranges of one array as one flat index, in one pass) and
index lists."""

from __future__ import annotations

from typing import Tuple

import numpy as np


def expand_ranges(starts: np.ndarray, counts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(owner, index) of every element of the ranges [starts[i], starts[i] + counts[i]), range
    by range: element k belongs to range owner[k] and sits at index[k]."""
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    index = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts) + np.asarray(starts)[owner]
    return owner, index


def ragged_rows(values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """float64 [len(widths), max(widths)]: row i holds the next widths[i] of `values`, then zeros."""
    widths = np.asarray(widths, dtype=np.int64)
    width = int(widths.max()) if len(widths) else 0
    rows = np.zeros((len(widths), width))
    if width and (widths == width).all():
        rows[:] = np.asarray(values, dtype=np.float64).reshape(len(widths), width)
    elif width:
        rows[np.arange(width)[None, :] < widths[:, None]] = values
    return rows


def shift_rows(rows: np.ndarray, widths: np.ndarray, offset) -> np.ndarray:
    """`rows` (ragged_rows' form) with offset[i] added to column i of each row that has it (i <
    widths[row]), 0.0 past the offset, as `float(c) + (offset[i] if i < len(offset) else 0.0)` does
    (so a -0.0 comes out 0.0 alike): a detector's coordinates after SHIFT_COORDS so far. The padding
    stays zero."""
    width = rows.shape[1]
    if width:
        shift = np.zeros(width)
        v = min(width, len(offset))
        shift[:v] = offset[:v]
        widths = np.asarray(widths)
        if (widths == width).all():
            rows += shift
        else:
            rows = np.where(np.arange(width)[None, :] < widths[:, None], rows + shift, 0.0)
    return rows


def nonzero_2d(a: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """`np.nonzero` of a 2-D array, (rows, columns) in row-major order, from its flat indices: on
    the few-thousand-element masks of a sampling call a quarter of np.nonzero's time, which makes
    two index arrays element by element."""
    width = a.shape[1]
    if width == 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    return np.divmod(np.flatnonzero(a), width)
