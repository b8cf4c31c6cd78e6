"""The random draws of a Program, defined once for every engine (the CUDA kernels mirror them).

Every draw is a pure function of (seed, random slot, shot), never of the simulation state, so
engines may draw in any order and any batch: a collapse's coin, a Pauli channel's firing Paulis
for a 64-shot word, the recorded value under a confusion map. Streams: core/rng.py.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from . import native, opcodes, rng
from .program import Program


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
    return ChannelDraw(channels, slot_lists).draw(key, start, count)


class ChannelDraw:
    """`sparse_channels` of given channels on given slots. What depends on neither the key nor the
    words (the slots side by side, each slot's probability and its tables, each channel's Pauli
    letters) is made once: a sampler draws the same slots at the same probabilities every call."""

    def __init__(self, channels, slot_lists):
        self.channels = list(channels)
        slot_lists = [np.asarray(s, dtype=np.uint64).reshape(-1) for s in slot_lists]
        sizes = np.array([len(s) for s in slot_lists], dtype=np.int64)
        self.bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.slots = np.concatenate(slot_lists) if slot_lists else np.zeros(0, dtype=np.uint64)
        totals = np.repeat([float(ch.total) for ch in self.channels], sizes).astype(np.float64)
        self.tables = rng.probability_tables(totals)
        # Every channel's outcomes as rows of one table: row first_row[i] + k is outcome k of channel
        # i, column 2j + b whether its Pauli on target j has an X part (b = 0) or a Z part (b = 1).
        self.width = 2 * max((ch.arity for ch in self.channels), default=1)
        outcomes = [len(ch.probs) for ch in self.channels]
        self.first_row = (np.cumsum(outcomes) - outcomes).astype(np.int64)
        self.letters = np.zeros((sum(outcomes), self.width), dtype=np.uint8)
        for i, ch in enumerate(self.channels):
            rows = slice(self.first_row[i], self.first_row[i] + outcomes[i])
            self.letters[rows, 0 : 2 * ch.arity : 2] = (ch.paulis == 1) | (ch.paulis == 2)
            self.letters[rows, 1 : 2 * ch.arity : 2] = (ch.paulis == 2) | (ch.paulis == 3)
        self.slot_row = np.repeat(self.first_row, sizes)  # a slot's channel's first row
        self.several = [i for i, ch in enumerate(self.channels) if len(ch.probs) > 1]
        # the compiled draw's view of the choices: each slot's channel's cumulative thresholds, as a
        # run (at, count) of one array (count 0: a channel of one Pauli)
        cuts = [rng.thresholds(ch.probs) if len(ch.probs) > 1 else np.zeros(0, dtype=np.uint64) for ch in self.channels]
        counts = np.array([len(x) for x in cuts], dtype=np.int64)
        self.cuts = np.concatenate(cuts) if cuts else np.zeros(0, dtype=np.uint64)
        self.slot_cut_at = np.repeat(np.cumsum(counts) - counts, sizes)
        self.slot_cut_count = np.repeat(counts, sizes)

    def lanes(self, key, start: int, count: int):
        """The draw lane by lane: the firing words (slot index r, word offset c, mask fire, as
        `rng.bernoulli_sparse` gives them), then every set bit of them, word by word and lanes
        ascending: its word (an index into r, c), its lane and the row of `letters` its Pauli is. A
        lane of a channel of several Paulis takes the one its NOISE_CHOICE word picks (drawn for
        every lane: one draw, whose words a lane of a one-Pauli channel never reads)."""
        r, c, fire = self._firing(key, start, count)
        lib = native.compiled()
        if lib is not None:
            lanes = int(np.bitwise_count(fire).sum())
            entry, lane, row = (np.empty(lanes, dtype=np.int64) for _ in range(3))
            a = native.address
            lib.qq_host_paulis(*self._choice_args(key, start, r, c, fire), a(entry), a(lane), a(row), a(self.letters),
                               self.width, None)
            return r, c, fire, entry, lane, row
        entry, lane = rng.set_bits(fire)
        slot = r[entry]
        row = self.slot_row[slot]
        if self.several and len(lane):
            shots = (np.uint64(start) + c[entry].astype(np.uint64)) * np.uint64(64) + lane.astype(np.uint64)
            u = rng.words(key, rng.Stream.NOISE_CHOICE, self.slots[slot], 0, shots)
            cuts = np.searchsorted(slot, self.bounds)  # lanes are sorted by slot, so by channel
            for i in self.several:
                lo, hi = cuts[i], cuts[i + 1]
                row[lo:hi] += np.searchsorted(rng.thresholds(self.channels[i].probs), u[lo:hi], side="right")
        return r, c, fire, entry, lane, row

    def _firing(self, key, start: int, count: int):
        """The firing words (slot index r, word offset c, lanes fire) of words [start, start + count)."""
        return rng.bernoulli_sparse(key, self.slots, None, start, count, tables=self.tables)

    def _choice_args(self, key, start: int, r, c, fire) -> tuple:
        """The leading arguments of the compiled draw's Pauli functions (cuda_src/host_draws.cpp): the
        key, the choice stream, the firing words and each slot's channel (its rows and cuts)."""
        a = native.address
        k0, k1 = (int(k) for k in key)
        return (k0, k1, int(rng.Stream.NOISE_CHOICE), int(start), a(r), a(c), a(fire), len(fire), a(self.slots),
                a(self.slot_row), a(self.slot_cut_at), a(self.slot_cut_count), a(self.cuts))

    def scatter(self, lib, key, start: int, count: int, first_input: np.ndarray, ptr: np.ndarray,
                outputs: np.ndarray, out: np.ndarray) -> None:
        """The compiled draw of words [start, start + count) through a linear map: each firing lane's
        Pauli sets input first_input[slot index] + k for its letters k (2j + 1 for target j's Z
        part, 2j for its X part), and each input flips the lane's bit in every output outputs[ptr[i]
        : ptr[i + 1]] lists (out: uint64 [outputs, count], C order)."""
        r, c, fire = self._firing(key, start, count)
        a = native.address
        lib.qq_host_noise_outputs(*self._choice_args(key, start, r, c, fire), a(self.letters), self.width,
                                  a(first_input), a(ptr), a(outputs), a(out), count)

    def draw(self, key, start: int, count: int) -> list:
        """Per channel: (slot index, word offset, X masks [arity, E], Z masks [arity, E])."""
        lib = native.compiled()
        if lib is not None:
            r, c, fire = self._firing(key, start, count)
            masks = np.empty((len(fire), self.width), dtype=np.uint64)
            lib.qq_host_paulis(*self._choice_args(key, start, r, c, fire), None, None, None,
                               native.address(self.letters), self.width, native.address(masks))
        else:
            r, c, fire, entry, lane, row = self.lanes(key, start, count)
            per_lane = self.letters[row].astype(np.uint64) << lane.astype(np.uint64)[:, None]  # [lanes, width]
            masks = np.zeros((len(fire), self.width), dtype=np.uint64)
            if len(fire):  # a word's lanes OR-ed: every word has one
                firsts = np.zeros(len(fire), dtype=np.int64)
                np.cumsum(np.bitwise_count(fire[:-1]), out=firsts[1:])
                masks = np.bitwise_or.reduceat(per_lane, firsts, axis=0)
        cuts = np.searchsorted(r, self.bounds)  # entries are sorted by slot index, so by channel
        out = []
        for i, channel in enumerate(self.channels):
            lo, hi = cuts[i], cuts[i + 1]
            arity = channel.arity
            out.append((r[lo:hi] - self.bounds[i], c[lo:hi], masks[lo:hi, 0 : 2 * arity : 2].T,
                        masks[lo:hi, 1 : 2 * arity : 2].T))
        return out


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
