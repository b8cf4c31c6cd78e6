"""The random draws of a Program, defined once for every engine (the CUDA kernels mirror them).

Every draw is a pure function of (seed, random slot, shot), never of the simulation state, so
engines may draw in any order and any batch: a collapse's coin, a Pauli channel's firing Paulis
for a 64-shot word, the recorded value under a confusion map. Streams: core/rng.py.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from . import opcodes, rng
from .program import Program

_ONE = np.uint64(1)


def coin(key: Tuple[int, int], slot: int, repetition: int) -> int:
    """The coin of a random collapse (tableau mode): bit 0 of word (COIN, slot, repetition)."""
    return rng.word(key, rng.Stream.COIN, int(slot), 0, int(repetition)) & 1


def sparse_channel(key, channel, slots: np.ndarray, start: int, count: int):
    """The channel's Paulis on words [start, start + count) of each slot, as nonzero entries:
    (slot index, word offset, X masks [arity, E], Z masks [arity, E])."""
    return sparse_channels(key, [channel], [slots], start, count)[0]


def sparse_channels(key, channels, slot_lists, start: int, count: int) -> list:
    """`sparse_channel` of several channels, each on its own slots, drawn together: one Bernoulli
    draw and one Pauli choice for all (the bits are each channel's own draws)."""
    slot_lists = [np.asarray(s, dtype=np.uint64).reshape(-1) for s in slot_lists]
    sizes = np.array([len(s) for s in slot_lists], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    slots = np.concatenate(slot_lists) if slot_lists else np.zeros(0, dtype=np.uint64)
    totals = np.repeat([float(ch.total) for ch in channels], sizes)
    r, c, fire = rng.bernoulli_sparse(key, slots, totals, start, count)
    cuts = np.searchsorted(r, bounds)  # entries are sorted by slot index, so by channel
    # Which Pauli each erring shot of a channel of several Paulis gets: one draw for all of them.
    several = np.repeat([len(ch.probs) > 1 for ch in channels], np.diff(cuts))
    chosen = np.flatnonzero(several)
    entry, lane = _firing_lanes(fire[chosen])
    entry = chosen[entry]
    shots = (np.uint64(start) + c[entry].astype(np.uint64)) * np.uint64(64) + lane.astype(np.uint64)
    u = rng.words(key, rng.Stream.NOISE_CHOICE, slots[r[entry]], 0, shots)
    lane_cuts = np.searchsorted(entry, cuts)
    out = []
    for i, channel in enumerate(channels):
        lo, hi = cuts[i], cuts[i + 1]
        pick = slice(lane_cuts[i], lane_cuts[i + 1])
        xm, zm = _channel_paulis(channel, fire[lo:hi], entry[pick] - lo, lane[pick], u[pick])
        out.append((r[lo:hi] - bounds[i], c[lo:hi], xm, zm))
    return out


_SPARSE_LANES = 8  # words with at most this many firing lanes list them a lane at a time


def _firing_lanes(fire: np.ndarray):
    """(entry, lane) of every set bit of the words `fire`, entry-major and lanes ascending (what
    np.nonzero of the unpacked bits gives). Noise words hold a lane or two: their lowest set bits
    are taken off a round at a time (a few operations on the words), where unpacking made 64 bytes
    a word to scan."""
    counts = np.bitwise_count(fire)
    rounds = int(counts.max()) if len(fire) else 0
    if rounds > _SPARSE_LANES:
        return np.nonzero(np.unpackbits(fire.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"))
    starts = np.zeros(len(fire) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    entry = np.repeat(np.arange(len(fire)), counts)
    lane = np.empty(int(starts[-1]), dtype=np.int64)
    live = np.flatnonzero(counts)
    rest, at = fire[live], starts[live]
    for _ in range(rounds):
        low = rest & (np.uint64(0) - rest)
        lane[at] = np.bitwise_count(low - _ONE)  # the lowest set bit's index: the ones below it
        rest ^= low
        keep = rest != 0
        rest, at = rest[keep], at[keep] + 1
    return entry, lane


def _channel_paulis(channel, fire, entry, lane, u):
    """X / Z masks [arity, E] of a channel's firing lanes `fire` [E]; for a channel of several
    Paulis, its lanes (entry, lane) take the Pauli their 64-bit uniform u picks."""
    xm = np.zeros((channel.arity, len(fire)), dtype=np.uint64)
    zm = np.zeros_like(xm)
    paulis = channel.paulis
    if len(channel.probs) == 1:
        for j in range(channel.arity):
            if paulis[0, j] in (1, 2):
                xm[j] = fire
            if paulis[0, j] in (2, 3):
                zm[j] = fire
        return xm, zm
    outcome = np.searchsorted(rng.thresholds(channel.probs), u, side="right")
    lane_bit = _ONE << lane.astype(np.uint64)
    for j in range(channel.arity):
        letter = paulis[outcome, j]
        sel = (letter == 1) | (letter == 2)
        np.bitwise_or.at(xm[j], entry[sel], lane_bit[sel])
        sel = (letter == 2) | (letter == 3)
        np.bitwise_or.at(zm[j], entry[sel], lane_bit[sel])
    return xm, zm


def channel_masks(key, channel, slots: np.ndarray, start: int, count: int
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """Dense X / Z masks uint64 [arity, len(slots), count] (tableau mode's single-word draws)."""
    r, c, xm_e, zm_e = sparse_channel(key, channel, slots, start, count)
    xm = np.zeros((channel.arity, len(slots), count), dtype=np.uint64)
    zm = np.zeros_like(xm)
    xm[:, r, c] = xm_e
    zm[:, r, c] = zm_e
    return xm, zm


def noise_targets(program: Program, rows: np.ndarray) -> np.ndarray:
    """int [k, arity] qubits of noise instructions of one channel and one opcode (E lists its
    targets in ext_qubits, the others name them in A and B)."""
    if opcodes.ARITY[rows[0, 0]] == 0:
        return np.stack([program.ext_qubits[a : a + b] for a, b in zip(rows[:, 1], rows[:, 2])])
    arity = opcodes.ARITY[rows[0, 0]]
    return rows[:, 1 : 1 + arity]


def confusion_values(key, matrix: np.ndarray, slot: int, shots: np.ndarray, true_values: np.ndarray
                     ) -> np.ndarray:
    """Recorded values under a confusion matrix[true, recorded], per shot."""
    u = rng.words(key, rng.Stream.CONFUSION, np.uint64(slot), 0, shots.astype(np.uint64))
    out = np.empty(len(shots), dtype=np.int64)
    for value in np.unique(true_values):
        sel = true_values == value
        out[sel] = np.searchsorted(rng.thresholds(matrix[value]), u[sel], side="right")
    return out
