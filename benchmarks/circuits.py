"""Benchmark circuits shared by the benchmark scripts.

- `random_clifford_circuit(n, depth, seed)`: layers of random Clifford gates on random qubits,
  then a few Z measurements.
- `clifford_layers(n, depth, seed)`: layers of one-qubit Cliffords on every qubit and two-qubit
  Cliffords on random pairs, then every qubit measured under a key of its own.
- `surface_code_cirq(d, rounds, p)`: Stim's rotated surface-code memory experiment with every
  noise knob set to `p`, converted to Cirq by stimcirq; returns (cirq circuit, stim circuit).
"""

from __future__ import annotations

import copy
from typing import Tuple

import cirq
import numpy as np

from .stim_circuits import surface_code_stim  # noqa: F401 - the scripts import it from here too

_ONE_QUBIT = (cirq.X, cirq.Y, cirq.Z, cirq.H, cirq.S, cirq.S**-1)
_TWO_QUBIT = (cirq.CX, cirq.CY, cirq.CZ, cirq.SWAP, cirq.ISWAP)
_GATES = _ONE_QUBIT + _TWO_QUBIT


def random_clifford_circuit(n: int, depth: int, seed: int = 0, *, active: float = 0.7,
                            num_measured: int = 8) -> cirq.Circuit:
    """`depth` moments on `n` line qubits; per moment a fraction `active` of the qubits get one of
    X, Y, Z, H, S, S†, CX, CY, CZ, SWAP, ISWAP (two-qubit gates on random disjoint pairs), then
    one moment measuring `num_measured` random qubits in Z (one key each: "m0", "m1", ...).

    About n * active * depth * 11/16 operations (two-qubit gates take two of the active qubits).
    """
    rng = np.random.default_rng(seed)
    qubits = cirq.LineQubit.range(n)
    n_active = max(1, int(round(active * n)))
    moments = []
    for _ in range(depth):
        chosen = rng.permutation(n)[:n_active]
        kinds = rng.integers(0, len(_GATES), size=n_active)
        ops = []
        i = 0
        while i < n_active:
            gate = _GATES[kinds[i]]
            if gate in _TWO_QUBIT:
                if i + 1 >= n_active:
                    break
                ops.append(gate(qubits[chosen[i]], qubits[chosen[i + 1]]))
                i += 2
            else:
                ops.append(gate(qubits[chosen[i]]))
                i += 1
        moments.append(cirq.Moment(ops))
    measured = rng.permutation(n)[: min(num_measured, n)]
    moments.append(cirq.Moment(cirq.measure(qubits[q], key=f"m{k}") for k, q in enumerate(measured)))
    return cirq.Circuit(moments)


def random_clifford_circuit_ops(num_ops: int, n: int = 1000, seed: int = 0) -> cirq.Circuit:
    """A `random_clifford_circuit` on `n` qubits with about `num_ops` operations."""
    per_layer = max(1, int(round(0.7 * n * 11 / 16)))
    depth = max(1, num_ops // per_layer)
    return random_clifford_circuit(n, depth, seed)


_LAYER_ONE_QUBIT = (cirq.H, cirq.S, cirq.X, cirq.Y, cirq.Z, cirq.S**-1,
                    *cirq.SingleQubitCliffordGate.all_single_qubit_cliffords)
_LAYER_TWO_QUBIT = (cirq.CZ, cirq.CNOT, cirq.SWAP, cirq.ISWAP, cirq.ISWAP**-1)


def clifford_layers(n: int, depth: int, seed: int = 0, fresh_gates: bool = False) -> cirq.Circuit:
    """`depth` layers on `n` line qubits, each two moments: a one-qubit Clifford on every qubit (H,
    S, X, Y, Z, S†, or one of the 24 SingleQubitCliffordGates), then a two-qubit Clifford (CZ, CNOT,
    SWAP, ISWAP, ISWAP†) on each of n // 2 random disjoint pairs; then every qubit measured, qubit i
    under key f"m{i}". 1.5 * n * depth + n operations. `fresh_gates`: each operation's gate a new
    object (equal to the shared one), as code that makes its gates in a loop gives them."""
    rng = np.random.default_rng(seed)
    qubits = cirq.LineQubit.range(n)
    instance = copy.copy if fresh_gates else (lambda g: g)
    moments = []
    for _ in range(depth):
        ones = rng.integers(0, len(_LAYER_ONE_QUBIT), size=n)
        moments.append(cirq.Moment(instance(_LAYER_ONE_QUBIT[g])(q) for g, q in zip(ones, qubits)))
        pairs = rng.permutation(n)[: 2 * (n // 2)].reshape(-1, 2)
        twos = rng.integers(0, len(_LAYER_TWO_QUBIT), size=len(pairs))
        moments.append(cirq.Moment(instance(_LAYER_TWO_QUBIT[g])(qubits[a], qubits[b]) for g, (a, b) in zip(twos, pairs)))
    moments.append(cirq.Moment(cirq.measure(q, key=f"m{i}") for i, q in enumerate(qubits)))
    return cirq.Circuit(moments)


def surface_code_cirq(d: int, rounds: int, p: float, basis: str = "z") -> Tuple[cirq.Circuit, "object"]:
    """(cirq circuit, stim circuit) of the rotated surface-code memory experiment in `basis`."""
    import stimcirq

    stim_circuit = surface_code_stim(d, rounds, p, basis)
    return stimcirq.stim_circuit_to_cirq_circuit(stim_circuit), stim_circuit
