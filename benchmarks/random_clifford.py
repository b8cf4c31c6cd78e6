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

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.program import ProgramBuilder

GATES = ("X", "Y", "Z", "H", "S", "S_DAG", "CX", "CY", "CZ", "SWAP", "ISWAP")
TWO_QUBIT = {"CX", "CY", "CZ", "SWAP", "ISWAP"}
ONE_QUBIT = tuple(g for g in GATES if g not in TWO_QUBIT)
CIRQ_GATES = {
    "X": cirq.X, "Y": cirq.Y, "Z": cirq.Z, "H": cirq.H, "S": cirq.S, "S_DAG": cirq.S**-1,
    "CX": cirq.CX, "CY": cirq.Y.controlled(1), "CZ": cirq.CZ, "SWAP": cirq.SWAP, "ISWAP": cirq.ISWAP,
}


def measured_a_layer(n: int, measured: int = None) -> int:
    """Qubits measured after each layer: `measured`, else the paper's max(1, n // 1400)."""
    return max(1, n // 1400) if measured is None else measured


def layers(n: int, depth: int, seed: int, measured: int = None):
    """Yields per layer: (list of (gate name, qubits)), measured qubits (`measured` of them a layer;
    the paper's max(1, n // 1400) by default)."""
    rng = np.random.default_rng(seed)
    active = int(round(0.7 * n))
    per_layer = measured_a_layer(n, measured)
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


def random_clifford_program(n: int, depth: int, seed: int = 0, measured: int = None):
    """`layers(n, depth, seed, measured)` as a Program (no Cirq objects), built with NumPy a layer at a
    time (the same random draws, so the same circuit op for op: the j-th two-qubit anchor takes the
    j-th partner from the end, as list.pop() does, and falls back to a one-qubit gate when none is
    left)."""
    r = np.random.default_rng(seed)
    active = int(round(0.7 * n))
    per_layer = measured_a_layer(n, measured)
    codes = np.array([opcodes.CODE[g] for g in GATES], dtype=np.int64)
    two = np.array([g in TWO_QUBIT for g in GATES])
    one_codes = np.array([opcodes.CODE[g] for g in ONE_QUBIT], dtype=np.int64)
    b = ProgramBuilder(n)
    for _ in range(depth):
        order = r.permutation(n)
        anchors, partners = order[:active], order[active:]
        draws = r.integers(0, len(GATES), size=active)
        fallback = r.integers(0, len(ONE_QUBIT), size=active)
        is_two = two[draws]
        rank = np.cumsum(is_two) - 1
        paired = is_two & (rank < len(partners))
        second = np.full(active, -1, dtype=np.int64)
        second[paired] = partners[len(partners) - 1 - rank[paired]]
        gate = codes[draws]
        demoted = is_two & ~paired
        gate[demoted] = one_codes[fallback[demoted]]
        b.gate_layer(gate, anchors, second)
        b.next_step()
        for q in r.choice(n, size=per_layer, replace=False):
            b.measure(int(q))
    return b.build()


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
