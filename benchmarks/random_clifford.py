"""The paper's random Clifford benchmark circuits (single-shot tableau workloads).

Per layer, 70% of the qubits (a random subset) each get a gate drawn uniformly from
{X, Y, Z, H, S, S†, CX, CY, CZ, SWAP, ISWAP}; a two-qubit gate takes its second qubit from the
other 30% (when none is left it becomes a uniformly drawn one-qubit gate), so about 0.7·n gates a
layer on disjoint qubits (n = 10k, depth 100: ~700k gates). After each layer, max(1, n // 1400)
distinct random qubits are measured in Z. Fixed seeds; the same circuit is returned for Cirq and
as a stim.Circuit (for the peers), op for op.
"""

from __future__ import annotations

from typing import Tuple

import cirq
import numpy as np

GATES = ("X", "Y", "Z", "H", "S", "S_DAG", "CX", "CY", "CZ", "SWAP", "ISWAP")
TWO_QUBIT = {"CX", "CY", "CZ", "SWAP", "ISWAP"}
ONE_QUBIT = tuple(g for g in GATES if g not in TWO_QUBIT)
CIRQ_GATES = {
    "X": cirq.X, "Y": cirq.Y, "Z": cirq.Z, "H": cirq.H, "S": cirq.S, "S_DAG": cirq.S**-1,
    "CX": cirq.CX, "CY": cirq.Y.controlled(1), "CZ": cirq.CZ, "SWAP": cirq.SWAP, "ISWAP": cirq.ISWAP,
}


def layers(n: int, depth: int, seed: int, measured: int = None):
    """Yields per layer: (list of (gate name, qubits)), measured qubits (`measured` of them a layer;
    the paper's max(1, n // 1400) by default)."""
    rng = np.random.default_rng(seed)
    active = int(round(0.7 * n))
    per_layer = max(1, n // 1400) if measured is None else measured
    for _ in range(depth):
        order = rng.permutation(n)
        anchors, partners = order[:active], list(order[active:])
        draws = rng.integers(0, len(GATES), size=active)
        fallback = rng.integers(0, len(ONE_QUBIT), size=active)
        ops = []
        for i, q in enumerate(anchors):
            gate = GATES[draws[i]]
            if gate in TWO_QUBIT and partners:
                ops.append((gate, (int(q), int(partners.pop()))))
                continue
            if gate in TWO_QUBIT:
                gate = ONE_QUBIT[fallback[i]]
            ops.append((gate, (int(q),)))
        yield ops, [int(q) for q in rng.choice(n, size=per_layer, replace=False)]


def paper_random_circuit(n: int, depth: int, seed: int = 0) -> Tuple[cirq.Circuit, "object"]:
    """(cirq.Circuit, stim.Circuit) of the same random Clifford circuit; layer L's measurements
    use key f"m{L}"."""
    import stim

    qubits = cirq.LineQubit.range(n)
    moments = []
    text = []
    for layer, (ops, measured) in enumerate(layers(n, depth, seed)):
        moments.append(cirq.Moment(CIRQ_GATES[g](*(qubits[q] for q in qs)) for g, qs in ops))
        moments.append(cirq.Moment([cirq.measure(*(qubits[q] for q in measured), key=f"m{layer}")]))
        by_gate = {}
        for g, qs in ops:
            by_gate.setdefault(g, []).extend(qs)
        text.extend(f"{g} " + " ".join(map(str, qs)) for g, qs in by_gate.items())
        text.append("M " + " ".join(map(str, measured)))
    return cirq.Circuit(moments), stim.Circuit("\n".join(text))


def paper_random_circuit_stim(n: int, depth: int, seed: int = 0, ticks: bool = False):
    """The same circuit as a stim.Circuit only (no Cirq objects: cheap at 100k qubits). With
    `ticks`, a TICK after each layer's measurements, as stimcirq writes the Cirq circuit's moments
    (the same operations in the same order; our compile ends a step at each)."""
    import stim

    text = []
    for ops, measured in layers(n, depth, seed):
        by_gate = {}
        for g, qs in ops:
            by_gate.setdefault(g, []).extend(qs)
        text.extend(f"{g} " + " ".join(map(str, qs)) for g, qs in by_gate.items())
        text.append("M " + " ".join(map(str, measured)))
        if ticks:
            text.append("TICK")
    return stim.Circuit("\n".join(text))


def count_ops(n: int, depth: int, seed: int = 0) -> Tuple[int, int]:
    gates = measurements = 0
    for ops, measured in layers(n, depth, seed):
        gates += len(ops)
        measurements += len(measured)
    return gates, measurements
