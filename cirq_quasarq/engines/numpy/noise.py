"""Frame mode's noise: every draw of a shot chunk made up front, applied while walking.

Noise draws depend only on (seed, random slot, shot word), never on the frames (core/draws.py),
so frame mode draws every noise instance of a chunk in a few large vectorised batches
(`NoisePlan`) and only XORs the sparse results in while walking the program."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ...core import opcodes
from ...core.draws import noise_targets, sparse_channel
from ...core.program import AUX, RAND, Program
from ...schedule.walk import walk


class NoisePlan:
    """Every noise draw of one shot chunk, sampled per channel in one batch, applied on demand."""

    def __init__(self, key, program: Program, schedule, start: int, count: int):
        slots: Dict[int, list] = {}
        kind = opcodes.KIND
        for step in walk(program, schedule):
            if kind[step.op] != opcodes.Kind.NOISE:
                continue
            rows = schedule.instructions[step.start : step.end]
            for aux in np.unique(rows[:, AUX]):
                slots.setdefault(int(aux), []).append(rows[rows[:, AUX] == aux, RAND] + step.rand_shift)
        self.entries = {}
        for aux, parts in slots.items():
            unique = np.unique(np.concatenate(parts)).astype(np.int64)
            r, c, xm, zm = sparse_channel(key, program.channels[aux], unique, start, count)
            self.entries[aux] = (unique[r], c, xm, zm)  # sorted by slot (row-major nonzero)

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
