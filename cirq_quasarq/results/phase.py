"""The global phase of a final state: a replay of one tableau-mode run that tracks one amplitude.

The engines keep the tableau, which fixes a stabilizer state only up to global phase. Cirq's
CliffordSimulator tracks the phase too (its CH form), so `state_vector()` is exact: the product
of every gate's unitary (global phases included) and every measurement's normalised projection
Π|ψ⟩/‖Π|ψ⟩‖, a reset being a measurement followed by X on outcome 1. This module reproduces
that, only when a state vector is asked for: it replays the scheduled Program of the run (same
order as the engines, outcomes from the run's records, reset coins and noise from the same
draws) on a small exact stabilizer state that carries the amplitude ⟨b|ψ⟩ at one basis state b of
its support. Each opcode acts by its canonical unitary (`core.opcodes.canonical_unitary`) and a
row with a phase id multiplies by `Program.phases` (the compiler's difference between a Cirq
gate's unitary and its opcodes').

Representation: a generator is (r, x, z) for i^r X^x Z^z (bit k of x / z is qubit k); basis
states are ints with bit k = qubit k.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..core import draws, opcodes, paulis
from ..core.program import AUX, COND, FLAG_INVERT, FLAGS, RAND, REC, A, B, Program
from ..core.tableau import InverseTableau
from ..errors import UnsupportedOperationError
from ..schedule import Schedule
from ..schedule.walk import assignment_index, condition_refs, walk

Kind = opcodes.Kind
Generator = Tuple[int, int, int]
_M, _R, _MR = opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"]
_X = opcodes.CODE["X"]
_PAULI_CODE = {paulis.X: opcodes.CODE["X"], paulis.Y: opcodes.CODE["Y"], paulis.Z: opcodes.CODE["Z"]}
_SQRT_HALF = 2**-0.5


def _mul(g: Generator, h: Generator) -> Generator:
    """(i^r1 X^x1 Z^z1)(i^r2 X^x2 Z^z2) = i^(r1+r2) (-1)^(z1·x2) X^(x1^x2) Z^(z1^z2)."""
    return (g[0] + h[0] + 2 * bin(g[2] & h[1]).count("1")) % 4, g[1] ^ h[1], g[2] ^ h[2]


class Amplitudes:
    """An n-qubit stabilizer state given by n generators and its exact amplitude at basis `b`."""

    def __init__(self, n: int, generators: List[Generator], b: int, amplitude: complex):
        self.n = n
        self.gens = list(generators)
        self.b = b
        self.amp = complex(amplitude)
        self._echelon: Optional[List[Tuple[int, Generator]]] = None

    @classmethod
    def from_tableau(cls, inv: InverseTableau, vector: np.ndarray) -> "Amplitudes":
        """The state of an inverse tableau with the phase of `vector` (big-endian, Cirq's order)."""
        n = inv.num_qubits
        xs, zs, rs = inv.forward()
        gens = []
        for row in range(n, 2 * n):
            x = sum(1 << k for k in range(n) if xs[row, k])
            z = sum(1 << k for k in range(n) if zs[row, k])
            gens.append(((2 * int(rs[row]) + bin(x & z).count("1")) % 4, x, z))
        first = int(np.flatnonzero(np.abs(vector) > 1e-9)[0])
        b = sum(1 << k for k in range(n) if (first >> (n - 1 - k)) & 1)  # big-endian index -> bits
        return cls(n, gens, b, vector[first])

    def copy(self) -> "Amplitudes":
        return Amplitudes(self.n, self.gens, self.b, self.amp)

    def padded(self, num_qubits: int) -> "Amplitudes":
        """This state with qubits up to `num_qubits` added in |0>."""
        return Amplitudes(num_qubits, self.gens + [(0, 0, 1 << k) for k in range(self.n, num_qubits)], self.b, self.amp)

    def restricted(self, n: int) -> "Amplitudes":
        """The first n qubits of this state when the others are in |0> (`padded` undone). No
        stabilizer has an X on those (each commutes with their Z), so dropping their Z bits leaves
        stabilizers of the rest; n independent ones of them are kept."""
        mask = (1 << n) - 1
        gens, leads = [], {}
        for r, x, z in self.gens:
            assert not x >> n, "a qubit past the first n is not in |0>"
            v = x | (z & mask) << n  # the generator's bits, reduced against those kept
            while v and v.bit_length() in leads:
                v ^= leads[v.bit_length()]
            if v:
                leads[v.bit_length()] = v
                gens.append((r, x, z & mask))
        return Amplitudes(n, gens, self.b & mask, self.amp)

    # -- amplitudes -------------------------------------------------------------------------------
    def _basis(self) -> List[Tuple[int, Generator]]:
        """Generators combined so that their X parts have distinct leading bits (highest first)."""
        if self._echelon is None:
            rows: List[Tuple[int, Generator]] = []
            for g in self.gens:
                for lead, h in rows:
                    if (g[1] >> lead) & 1:
                        g = _mul(g, h)
                if g[1]:
                    rows.append((g[1].bit_length() - 1, g))
                    rows.sort(key=lambda item: -item[0])
            self._echelon = rows
        return self._echelon

    def amplitude(self, x: int) -> complex:
        """⟨x|ψ⟩: a stabilizer S whose X part maps b to x gives ⟨x|ψ⟩ = ⟨x|S|b⟩⟨b|ψ⟩."""
        s: Generator = (0, 0, 0)
        for lead, h in self._basis():
            if ((x ^ self.b ^ s[1]) >> lead) & 1:
                s = _mul(s, h)
        if s[1] != x ^ self.b:
            return 0j
        return 1j ** s[0] * (-1) ** bin(s[2] & self.b).count("1") * self.amp

    # -- evolution --------------------------------------------------------------------------------
    def apply(self, code: int, targets, phase: complex = 1.0) -> None:
        """The canonical unitary of a unitary opcode on `targets`, times `phase`."""
        targets = tuple(targets)
        u = opcodes.canonical_unitary(code)
        coset = [self.b & ~sum(1 << t for t in targets) | sum(((v >> j) & 1) << t for j, t in enumerate(targets))
                 for v in range(1 << len(targets))]
        out = u @ np.array([self.amplitude(x) for x in coset])
        v = int(np.argmax(np.abs(out)))
        self.b, self.amp = coset[v], complex(out[v]) * phase
        signs, letters = opcodes.CONJUGATION[code]
        gens = []
        for r, x, z in self.gens:
            index = y_before = 0
            for j, t in enumerate(targets):
                letter = int(paulis.letter_of((x >> t) & 1, (z >> t) & 1))
                index |= letter << (2 * j)
                y_before += letter == paulis.Y
            r += 2 * int(signs[index]) - y_before
            for j, t in enumerate(targets):
                letter = int(letters[index, j])
                x = (x & ~(1 << t)) | (int(paulis.X_BIT[letter]) << t)
                z = (z & ~(1 << t)) | (int(paulis.Z_BIT[letter]) << t)
                r += letter == paulis.Y
            gens.append((r % 4, x, z))
        self.gens = gens
        self._echelon = None

    def is_random(self, q: int) -> bool:
        return any((x >> q) & 1 for _, x, _ in self.gens)

    def measure(self, q: int, outcome: int) -> None:
        """Project Z_q onto `outcome` and renormalise (nothing changes when it is determined)."""
        anti = [i for i, (_, x, _) in enumerate(self.gens) if (x >> q) & 1]
        if not anti:
            return
        if ((self.b >> q) & 1) != outcome:  # move the anchor into the kept half of the support
            r, x, z = self.gens[anti[0]]
            self.amp *= 1j**r * (-1) ** bin(z & self.b).count("1")
            self.b ^= x
        self.amp /= _SQRT_HALF
        pivot = self.gens[anti[0]]
        for i in anti[1:]:
            self.gens[i] = _mul(self.gens[i], pivot)
        self.gens[anti[0]] = (2 * outcome, 0, 1 << q)
        self._echelon = None

    def outcome(self, q: int) -> int:
        """The outcome of measuring Z_q when it is determined (then all of the support agrees)."""
        return (self.b >> q) & 1

    def state_vector(self, canonical: np.ndarray) -> np.ndarray:
        """`canonical` (this state up to phase, big-endian) with this state's exact phase."""
        index = sum(((self.b >> k) & 1) << (self.n - 1 - k) for k in range(self.n))
        return canonical * (self.amp / canonical[index])


def replay(program: Program, schedule: Schedule, key, records: np.ndarray, repetition: int,
           state: Amplitudes) -> Amplitudes:
    """Advance `state` through one tableau-mode run of the scheduled program (in place)."""
    ins = schedule.instructions
    word, lane = repetition // 64, repetition % 64
    for step in walk(program, schedule):
        rows = ins[step.start : step.end]
        kind = opcodes.KIND[step.op]
        if rows[0, COND] >= 0:
            refs = condition_refs(program, int(rows[0, COND]), step)
            if not program.conditions[int(rows[0, COND])].table[assignment_index(records[refs])]:
                continue
        if kind == Kind.UNITARY:
            for row in rows:
                phase = 1.0
                if row[AUX] >= 0:
                    phase = complex(program.phases[int(row[AUX])])
                    if phase != phase:
                        raise UnsupportedOperationError(
                            "the global phase of a gate on more than "
                            "8 qubits is not tracked; its state vector is known only up to phase")
                targets = (int(row[A]),) if row[B] < 0 else (int(row[A]), int(row[B]))
                state.apply(int(row[0]), targets, phase)
        elif kind in (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET):
            for row in rows:
                q, op = int(row[A]), int(row[0])
                if op == _R:
                    outcome = (draws.coin(key, int(row[RAND]) + step.rand_shift, repetition)
                               if state.is_random(q) else state.outcome(q))
                else:
                    outcome = int(records[row[REC] + step.rec_shift]) ^ (int(row[FLAGS]) & FLAG_INVERT)
                state.measure(q, outcome)
                if op != _M and outcome:
                    state.apply(_X, (q,))
        elif kind == Kind.NOISE:
            for row in rows:
                channel = program.channels[int(row[AUX])]
                slot = np.array([row[RAND] + step.rand_shift])
                xm, zm = draws.channel_masks(key, channel, slot, word, 1)
                for j, q in enumerate(draws.noise_targets(program, row[None])[0]):
                    x = int((xm[j, 0, 0] >> np.uint64(lane)) & np.uint64(1))
                    z = int((zm[j, 0, 0] >> np.uint64(lane)) & np.uint64(1))
                    if x or z:
                        state.apply(_PAULI_CODE[int(paulis.letter_of(x, z))], (int(q),))
    return state
