"""Frame mode's draws: every random word of a shot chunk made up front, used while walking.

Draws depend only on (seed, random slot, shot word), never on the frames (core/draws.py), so
frame mode draws the fresh Z frames of every M / R / MR of a chunk, and every noise instance, in a
few large vectorised batches (`Draws`), instead of one small draw per instruction run.

Every lookup takes the slots of a run and a vector of slot shifts, one per block of `count` words
side by side in the frame arrays: one block for the usual walk, one per loop iteration when a
loop's iterations are run together (frames.py).
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from ...core import opcodes, rng
from ...core.draws import sparse_channels
from ...core.program import AUX, OP, RAND, Program
from ...core.ranges import expand_ranges
from ...schedule.walk import walk

_COLLAPSES = (int(opcodes.Kind.MEASURE), int(opcodes.Kind.RESET), int(opcodes.Kind.MEASURE_RESET))
_EMPTY = np.zeros(0, dtype=np.int64)

# (every collapse slot, {channel: every slot of a noise instruction of that channel}), unique.
Inventory = Tuple[np.ndarray, Dict[int, np.ndarray]]


def walked_inventory(program: Program, schedule) -> Inventory:
    """The slots a walk of the schedule draws from, found by walking it (loops expanded)."""
    slots: Dict[int, list] = {}
    collapses: list = []
    kind = opcodes.KIND
    for step in walk(program, schedule):
        rows = schedule.instructions[step.start : step.end]
        if kind[step.op] in _COLLAPSES:
            collapses.append(rows[:, RAND] + step.rand_shift)
        elif kind[step.op] == opcodes.Kind.NOISE:
            for aux in np.unique(rows[:, AUX]):
                slots.setdefault(int(aux), []).append(rows[rows[:, AUX] == aux, RAND] + step.rand_shift)
    return (_unique(collapses), {aux: _unique(parts) for aux, parts in slots.items()})


def rows_inventory(program: Program) -> Inventory:
    """`walked_inventory` of a program without loops, whose walk draws each row's slot once and
    unshifted: its rows' slots, read in a few array operations (a walk of the paper's 2000-qubit
    circuit took 10 ms of a 110 ms first call)."""
    assert not program.loops, "rows_inventory: a loop's iterations shift their slots (walked_inventory)"
    ins = program.instructions
    kinds = opcodes.KIND[ins[:, OP]]
    noisy = ins[kinds == opcodes.Kind.NOISE]
    return (_unique([ins[np.isin(kinds, _COLLAPSES), RAND]]),
            {int(aux): _unique([noisy[noisy[:, AUX] == aux, RAND]]) for aux in np.unique(noisy[:, AUX])})


def _unique(parts) -> np.ndarray:
    return np.unique(np.concatenate(parts)).astype(np.int64) if parts else _EMPTY


class Draws:
    """Every random word of one shot chunk (words [start, start + count)): the FRAME_MEASURE words
    of every collapse slot, and each channel's noise as sparse hits."""

    def __init__(self, key, program: Program, inventory: Inventory, start: int, count: int):
        self.count = count
        self.collapse_slots, noise_slots = inventory
        self.collapse_words = rng.words_range(key, rng.Stream.FRAME_MEASURE, self.collapse_slots.astype(np.uint64),
                                              0, start, count).reshape(len(self.collapse_slots), count)
        auxes = list(noise_slots)
        drawn = sparse_channels(key, [program.channels[aux] for aux in auxes], [noise_slots[aux] for aux in auxes],
                                start, count)
        self.entries = {aux: (noise_slots[aux][r], c, xm, zm)  # sorted by slot (row-major nonzero)
                        for aux, (r, c, xm, zm) in zip(auxes, drawn)}

    def fresh(self, slots: np.ndarray, shifts: np.ndarray) -> np.ndarray:
        """FRAME_MEASURE words [len(slots), len(shifts) * count]: block b holds slots + shifts[b]."""
        index = np.searchsorted(self.collapse_slots, slots[:, None] + shifts[None, :])
        return self.collapse_words[index].reshape(len(slots), len(shifts) * self.count)

    def noise(self, aux: int, slots: np.ndarray, targets: np.ndarray, shifts: np.ndarray, fx, fz) -> None:
        """XOR channel `aux`'s hits on instructions (slots [k], target qubits [k, arity]) into the
        frames; block b of the columns takes slots + shifts[b]."""
        slot_of_entry, word, xm, zm = self.entries[aux]
        shifted = (slots[:, None] + shifts[None, :]).ravel()  # pair p = (instruction p // B, block p % B)
        lo = np.searchsorted(slot_of_entry, shifted, side="left")
        pair, idx = expand_ranges(lo, np.searchsorted(slot_of_entry, shifted, side="right") - lo)
        if len(idx) == 0:
            return
        which, block = np.divmod(pair, len(shifts))
        col = block * self.count + word[idx]
        for j in range(targets.shape[1]):
            q = targets[which, j]
            fx[q, col] ^= xm[j, idx]  # (qubit, column) pairs are distinct within a run
            fz[q, col] ^= zm[j, idx]


class NoDraws:
    """Every draw zero: the frames' linear part alone (a loop's transfer matrix, frames.py)."""

    def __init__(self, count: int):
        self.count = count

    def fresh(self, slots: np.ndarray, shifts: np.ndarray) -> np.ndarray:
        return np.zeros((len(slots), len(shifts) * self.count), dtype=np.uint64)

    def noise(self, aux, slots, targets, shifts, fx, fz) -> None:
        return None
