"""Frame mode's draws: every random word of a shot chunk made up front, used while walking.

Draws depend only on (seed, random slot, shot word), never on the frames (core/draws.py), so
frame mode draws every noise instance of a chunk, and the fresh Z frames of every M / R / MR, in
a few large vectorised batches (`NoisePlan`), instead of one small draw per instruction run."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ...core import opcodes, rng
from ...core.draws import noise_targets, sparse_channel
from ...core.program import AUX, RAND, Program
from ...schedule.walk import walk


_COLLAPSES = (opcodes.Kind.MEASURE, opcodes.Kind.RESET, opcodes.Kind.MEASURE_RESET)


class NoisePlan:
    """Every noise draw of one shot chunk, sampled per channel in one batch, applied on demand, and
    the FRAME_MEASURE words of every collapse, drawn in one batch (`fresh`)."""

    def __init__(self, key, program: Program, schedule, start: int, count: int):
        slots: Dict[int, list] = {}
        collapses: list = []
        kind = opcodes.KIND
        for step in walk(program, schedule):
            rows = schedule.instructions[step.start : step.end]
            if kind[step.op] in _COLLAPSES:
                collapses.append(rows[:, RAND] + step.rand_shift)
            if kind[step.op] != opcodes.Kind.NOISE:
                continue
            for aux in np.unique(rows[:, AUX]):
                slots.setdefault(int(aux), []).append(rows[rows[:, AUX] == aux, RAND] + step.rand_shift)
        self.collapse_slots = (np.unique(np.concatenate(collapses)).astype(np.int64) if collapses
                               else np.zeros(0, dtype=np.int64))
        self.collapse_words = rng.words_range(key, rng.Stream.FRAME_MEASURE, self.collapse_slots.astype(np.uint64),
                                              0, start, count).reshape(len(self.collapse_slots), count)
        self.entries = {}
        for aux, parts in slots.items():
            unique = np.unique(np.concatenate(parts)).astype(np.int64)
            r, c, xm, zm = sparse_channel(key, program.channels[aux], unique, start, count)
            self.entries[aux] = (unique[r], c, xm, zm)  # sorted by slot (row-major nonzero)

    def fresh(self, slots: np.ndarray) -> np.ndarray:
        """The FRAME_MEASURE words [len(slots), count] of these collapse slots."""
        return self.collapse_words[np.searchsorted(self.collapse_slots, slots)]

    def apply(self, program: Program, rows: np.ndarray, rand_shift: int, fx, fz) -> None:
        for aux in np.unique(rows[:, AUX]):
            sel = rows[rows[:, AUX] == aux]
            slot_of_entry, word, xm, zm = self.entries[int(aux)]
            slots = sel[:, RAND].astype(np.int64) + rand_shift
            lo = np.searchsorted(slot_of_entry, slots, side="left")
            hi = np.searchsorted(slot_of_entry, slots, side="right")
            counts = hi - lo
            if counts.sum() == 0:
                continue
            which = np.repeat(np.arange(len(sel)), counts)
            idx = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + lo[which]
            targets = noise_targets(program, sel)
            w = word[idx]
            for j in range(targets.shape[1]):
                q = targets[which, j]
                fx[q, w] ^= xm[j, idx]  # (qubit, word) pairs are distinct within a run
                fz[q, w] ^= zm[j, idx]
