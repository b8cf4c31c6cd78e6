"""Sampling Pauli channels and confusion maps for 64-shot words (shared by both NumPy modes)."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from ... import rng
from ...program import Channel

_ONE = np.uint64(1)


def channel_masks(key, channel: Channel, slots: np.ndarray, start: int, count: int
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """X / Z masks uint64 [arity, len(slots), count] of the Paulis the channel applies to the
    shots of words [start, start + count), for each instance's random slot."""
    k = len(slots)
    fire = rng.bernoulli_words(key, slots, channel.total, start, count)
    xm = np.zeros((channel.arity, k, count), dtype=np.uint64)
    zm = np.zeros_like(xm)
    paulis = channel.paulis
    if len(channel.probs) == 1:
        for j in range(channel.arity):
            if paulis[0, j] in (1, 2):
                xm[j] = fire
            if paulis[0, j] in (2, 3):
                zm[j] = fire
        return xm, zm
    inst, word = np.nonzero(fire)
    if len(inst) == 0:
        return xm, zm
    lanes = np.unpackbits(fire[inst, word].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    hit_row, lane = np.nonzero(lanes)
    inst, word = inst[hit_row], word[hit_row]
    shots = (np.uint64(start) + word.astype(np.uint64)) * np.uint64(64) + lane.astype(np.uint64)
    cut = rng.thresholds(channel.probs)
    u = rng.words(key, rng.Stream.NOISE_CHOICE, slots[inst].astype(np.uint64), 0, shots)
    outcome = np.searchsorted(cut, u, side="right")
    lane_bit = _ONE << lane.astype(np.uint64)
    for j in range(channel.arity):
        letter = paulis[outcome, j]
        sel = (letter == 1) | (letter == 2)
        np.bitwise_or.at(xm[j], (inst[sel], word[sel]), lane_bit[sel])
        sel = (letter == 2) | (letter == 3)
        np.bitwise_or.at(zm[j], (inst[sel], word[sel]), lane_bit[sel])
    return xm, zm


def confusion_values(key, matrix: np.ndarray, slot: int, shots: np.ndarray, true_values: np.ndarray
                     ) -> np.ndarray:
    """Recorded values under a confusion matrix[true, recorded], per shot."""
    u = rng.words(key, rng.Stream.CONFUSION, np.uint64(slot), 0, shots.astype(np.uint64))
    out = np.empty(len(shots), dtype=np.int64)
    for value in np.unique(true_values):
        sel = true_values == value
        out[sel] = np.searchsorted(rng.thresholds(matrix[value]), u[sel], side="right")
    return out
