"""Frame mode as one GF(2) map: the records of a shot are a linear function of its random bits.

Without classical control or confusion maps, a shot's record flips are XORs of its random bits:
the initial Z frames (FRAME_INIT, one per qubit), the fresh Z frames of collapses (FRAME_MEASURE,
one per collapse slot) and the X / Z bits of every noise instance's Pauli on each of its targets.
`LinearFrames` finds that map once per program by running the compiled frame plan (frames.py) on
unit inputs, one lane per input bit, and then samples a chunk of shots by drawing exactly the
words the plan would draw and XORing each one into the outputs it reaches. The bits are the plan's
(the same draws through the same linear map); what changes is the cost of a call: a few array
operations on the draws instead of one per frame update, which is what a call of a few thousand
shots on a small code (a decoder's batch) pays for. The plan stays the oracle
(`NumpyEngine(linear_frames=False)`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...core import native, rng
from ...core.draws import ChannelDraw
from ...core.parities import Parities
from ...core.paulis import spread
from ...core.program import Program
from ...core.ranges import expand_ranges, nonzero_2d
from .frames import _OP_SECONDS, _WORD_SECONDS, FramePlan

_ONE = np.uint64(1)
MAX_MAP_BYTES = 1 << 26  # the run that finds the map, and the map unpacked, stay this small


def applies(program: Program) -> bool:
    """Whether a program's records are linear in its draws (no feedback, no confusion map)."""
    return not program.conditions and not program.confusions


class _UnitDraws:
    """The plan's draws as unit vectors: input i is bit i % 64 of word i // 64 of each block.

    Inputs: qubit q's initial Z frame is input q; collapse slot s (the plan's inventory, sorted) is
    input n + its index; channel `aux`'s instance at slot s (sorted per channel) takes 2 * arity
    inputs from `noise_base[aux]`: target j's X bit and Z bit."""

    def __init__(self, program: Program, plan: FramePlan):
        self.n = program.num_qubits
        self.collapse_slots, noise_slots = plan.inventory()
        self.noise_slots = noise_slots
        self.arity = {aux: program.channels[aux].arity for aux in noise_slots}
        self.noise_base = {}
        at = self.n + len(self.collapse_slots)
        for aux, slots in noise_slots.items():
            self.noise_base[aux] = at
            at += 2 * self.arity[aux] * len(slots)
        self.num_inputs = at
        self.count = max(1, (at + 63) // 64)

    @staticmethod
    def _unit(inputs: np.ndarray):
        return inputs // 64, _ONE << (inputs % 64).astype(np.uint64)

    def fresh(self, slots: np.ndarray, shifts: np.ndarray) -> np.ndarray:
        out = np.zeros((len(slots), len(shifts) * self.count), dtype=np.uint64)
        rows = np.arange(len(slots))
        for b, shift in enumerate(shifts):
            word, bit = self._unit(self.n + np.searchsorted(self.collapse_slots, slots + shift))
            out[rows, b * self.count + word] = bit
        return out

    def noise(self, aux: int, slots: np.ndarray, targets: np.ndarray, shifts: np.ndarray, fx, fz) -> None:
        arity = self.arity[aux]
        for b, shift in enumerate(shifts):
            index = np.searchsorted(self.noise_slots[aux], slots + shift)
            for j in range(arity):
                first = self.noise_base[aux] + 2 * (index * arity + j)
                for frame, inputs in ((fx, first), (fz, first + 1)):
                    word, bit = self._unit(inputs)
                    frame[targets[:, j], b * self.count + word] ^= bit  # (qubit, word) pairs are distinct


class LinearFrames:
    """A program's outputs (its records, or the parities given) as a GF(2) map of its draws."""

    def __init__(self, program: Program, plan: FramePlan, parities: Optional[Parities] = None):
        unit = self.inputs = _UnitDraws(program, plan)
        n, words = program.num_qubits, unit.count
        fx = np.zeros((n, words), dtype=np.uint64)
        fz = np.zeros((n, words), dtype=np.uint64)
        q = np.arange(n)
        fz[q, q // 64] = _ONE << (q % 64).astype(np.uint64)
        flips = np.zeros((program.num_records, words), dtype=np.uint64)
        plan.run(fx, fz, flips, unit, None, None, 0, words)  # no feedback or confusion reads them
        # parities.reduce XORs its flips into every row: they go in `constant`, not in the map
        matrix = flips if parities is None else parities.reduce(flips) ^ spread(parities.flip)[:, None]
        self.num_outputs = len(matrix)
        outputs, inputs = _set_bits(matrix, unit.num_inputs)  # sorted by output
        # Gauge inputs (initial and collapse frames) are dense words: XOR them output by output.
        gauge = inputs < n + len(unit.collapse_slots)
        self.gauge_outputs, starts = np.unique(outputs[gauge], return_index=True)
        self.gauge_starts = starts
        gauge_inputs = inputs[gauge]
        self.init_qubits = np.unique(gauge_inputs[gauge_inputs < n])
        self.collapse_inputs = np.unique(gauge_inputs[gauge_inputs >= n]) - n
        # row of each gauge pair in the stacked draws [init words of init_qubits; collapse words]
        self.gauge_rows = np.where(gauge_inputs < n, np.searchsorted(self.init_qubits, gauge_inputs),
                                   len(self.init_qubits) + np.searchsorted(self.collapse_inputs, gauge_inputs - n))
        # Noise inputs reach few outputs: a CSR table from input to outputs.
        noise_in, noise_out = inputs[~gauge], outputs[~gauge]
        order = np.argsort(noise_in, kind="stable")
        self.noise_outputs = np.ascontiguousarray(noise_out[order], dtype=np.int64)
        self.noise_ptr = np.ascontiguousarray(np.searchsorted(noise_in[order], np.arange(unit.num_inputs + 1)),
                                              dtype=np.int64)
        self.noise_channels = [aux for aux in unit.noise_slots
                               if self._reaches(unit.noise_base[aux], 2 * unit.arity[aux] * len(unit.noise_slots[aux]))]

    def seconds(self, words: int) -> float:
        """The frame plan's cost model applied to a call of `words` words: a few dozen array
        operations, and the gauge words XORed into the outputs they reach (noise hits are few)."""
        return (30 + 10 * len(self.noise_channels)) * _OP_SECONDS + len(self.gauge_rows) * words * _WORD_SECONDS

    def _reaches(self, first: int, length: int) -> bool:
        return bool(self.noise_ptr[first + length] > self.noise_ptr[first])

    @staticmethod
    def num_inputs(program: Program, plan: FramePlan) -> int:
        """The map's inputs: initial frames, collapse frames, and 2 x arity bits per noise instance."""
        collapses, noise = plan.inventory()
        return program.num_qubits + len(collapses) + sum(
            2 * program.channels[aux].arity * len(slots) for aux, slots in noise.items())

    @staticmethod
    def cost(program: Program, plan: FramePlan) -> int:
        """Bytes of the run that finds the map (frames and records, a bit per input) and of the map
        unpacked to a byte per bit (to compare with MAX_MAP_BYTES)."""
        inputs = LinearFrames.num_inputs(program, plan)
        words = (inputs + 63) // 64
        return 8 * words * (2 * program.num_qubits + program.num_records) + program.num_records * inputs

    def constant(self, reference: np.ndarray, parities: Optional[Parities]) -> np.ndarray:
        """uint64 [outputs, 1]: what a shot without any draw gives (the reference records, or the
        parities' `reduce` of them). The last one made is kept: a sampling loop asks for the same
        (the same Parities object and an equal reference) each call."""
        bits = np.asarray(reference, dtype=np.uint8) & 1
        kept = getattr(self, "_constant", None)
        if kept is not None and kept[0] is parities and np.array_equal(kept[1], bits):
            return kept[2]
        ref = spread(bits)[:, None]
        made = ref if parities is None else parities.reduce(ref)
        self._constant = (parities, bits, made)
        return made

    def _channel_draw(self, program: Program):
        """(the draw of this map's noise slots at `program`'s probabilities, each of its slots' first
        input: its instance's target 0 X bit); the last one made is kept (a sampling loop passes the
        same program, so the same channel objects)."""
        channels = [program.channels[aux] for aux in self.noise_channels]
        kept = getattr(self, "_kept_draw", None)
        if kept is not None and len(kept[0]) == len(channels) and all(a is b for a, b in zip(kept[0], channels)):
            return kept[1]
        unit = self.inputs
        slots = [unit.noise_slots[aux] for aux in self.noise_channels]
        first_input = np.concatenate([unit.noise_base[aux] + 2 * unit.arity[aux] * np.arange(len(s), dtype=np.int64)
                                      for aux, s in zip(self.noise_channels, slots)])
        made = (ChannelDraw(channels, slots), first_input)
        self._kept_draw = (channels, made)
        return made

    def sample(self, program: Program, key, start: int, count: int, constant: np.ndarray) -> np.ndarray:
        """uint64 [outputs, count]: words [start, start + count) of every output, as the plan's
        chunk gives them (`constant` XORed in). `program`: the one sampled, whose channels give the
        probabilities (sweep points that differ only in noise share one plan, and so one map)."""
        unit = self.inputs
        out = np.zeros((self.num_outputs, count), dtype=np.uint64)
        if len(self.gauge_outputs):
            init = rng.words_range(key, rng.Stream.FRAME_INIT, self.init_qubits.astype(np.uint64), 0, start, count)
            fresh = rng.words_range(key, rng.Stream.FRAME_MEASURE,
                                    unit.collapse_slots[self.collapse_inputs].astype(np.uint64), 0, start, count)
            drawn = np.concatenate([init.reshape(-1, count), fresh.reshape(-1, count)])
            out[self.gauge_outputs] = np.bitwise_xor.reduceat(drawn[self.gauge_rows], self.gauge_starts, axis=0)
        if self.noise_channels:
            # every firing lane's X and Z bits as inputs (target j's X bit is its instance's first
            # input + 2j, its Z bit the next), then one scatter into the outputs they reach (XOR commutes)
            draw, first_input = self._channel_draw(program)
            lib = native.compiled()
            if lib is not None:  # compiled: each lane straight into its outputs (cuda_src/host_draws.cpp)
                draw.scatter(lib, key, start, count, first_input, self.noise_ptr, self.noise_outputs, out)
            else:
                r, c, _, entry, lane, row = draw.lanes(key, start, count)
                hits, column = nonzero_2d(draw.letters[row])
                word = entry[hits]
                inputs, at_word, masks = first_input[r[word]] + column, c[word], _ONE << lane[hits].astype(np.uint64)
                lo = self.noise_ptr[inputs]
                hit, at = expand_ranges(lo, self.noise_ptr[inputs + 1] - lo)  # the outputs each reaches
                if len(at):
                    np.bitwise_xor.at(out, (self.noise_outputs[at], at_word[hit]), masks[hit])
        out ^= constant
        return out


def _set_bits(matrix: np.ndarray, columns: int):
    """(row, column) of every set bit of the packed rows `matrix` (uint64 [rows, words], bit b of
    word w is column 64 w + b) below `columns`, in np.nonzero's order (by row, then column). Only
    the nonzero words are read, by `rng.set_bits` (the draws' own, a lowest bit at a time where words
    have few): a map's rows reach a few percent of its inputs, so unpacking every word (a byte a
    bit) and scanning it had been half of the map's making (d = 7: 7 of 14 ms)."""
    words = matrix.shape[1]
    at = np.flatnonzero(matrix)
    entry, bit = rng.set_bits(matrix.reshape(-1)[at])
    rows, word = np.divmod(at[entry], words)
    cols = 64 * word + bit
    keep = cols < columns  # (the run's words are zero past its inputs: a guard, not a filter in practice)
    return rows[keep], cols[keep]


def linear_frames(program: Program, plan: FramePlan, parities: Optional[Parities]) -> LinearFrames:
    """The program's map for these outputs (its records, or these parities), kept with the plan
    (it depends on the program's operations and the outputs, not on noise probabilities)."""
    last = plan.__dict__.get("_linear_last")  # (parities, map): a sampling loop passes the same object
    if last is not None and last[0] is parities:
        return last[1]
    cache = plan.__dict__.setdefault("_linear", {})
    key = None if parities is None else (parities.offsets.tobytes(), parities.records.tobytes())
    made = cache.get(key)
    if made is None:
        if len(cache) >= 8:
            cache.clear()
        made = cache[key] = LinearFrames(program, plan, parities)
    plan.__dict__["_linear_last"] = (parities, made)
    return made
