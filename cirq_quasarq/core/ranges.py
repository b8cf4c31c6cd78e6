"""Ragged gathers: the elements of many ranges of one array as one flat index, in one pass."""

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
