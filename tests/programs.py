"""Random Programs built twice: as our Program and as the equivalent stim.Circuit (test oracle)."""

import random

import numpy as np
import pytest

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.program import ProgramBuilder

UNITARY_1 = [o.name for o in opcodes.OPCODES if o.kind == opcodes.Kind.UNITARY and o.arity == 1]
UNITARY_2 = [o.name for o in opcodes.OPCODES if o.kind == opcodes.Kind.UNITARY and o.arity == 2]


def random_program(n: int, depth: int, seed: int, *, collapse: float = 0.5, noise: bool = False):
    """A random layered program on n qubits; returns (Program, stim.Circuit of the same ops). Skips
    the calling test without stim (the other helpers need no stim)."""
    stim = pytest.importorskip("stim")
    r = random.Random(seed)
    b = ProgramBuilder(n)
    sc = stim.Circuit()
    for _ in range(depth):
        b.next_step()
        qs = list(range(n))
        r.shuffle(qs)
        while qs:
            if len(qs) >= 2 and r.random() < 0.5:
                a, c = qs.pop(), qs.pop()
                g = r.choice(UNITARY_2)
                b.gate(g, a, c)
                sc.append(g, [a, c])
            else:
                a = qs.pop()
                g = r.choice(UNITARY_1)
                b.gate(g, a)
                sc.append(g, [a])
        if noise:
            b.next_step()
            for q in r.sample(range(n), max(1, n // 4)):
                p = r.choice([0.01, 0.2])
                b.noise("X_ERROR", [q], b.channel_id(1, [p], [[1]]))
                sc.append("X_ERROR", [q], p)
        if r.random() < collapse:
            b.next_step()
            for q in r.sample(range(n), r.randint(1, max(1, n // 3))):
                k = r.random()
                if k < 0.6:
                    b.measure(q)
                    sc.append("M", [q])
                elif k < 0.8:
                    b.reset(q)
                    sc.append("R", [q])
                else:
                    b.measure(q, reset=True)
                    sc.append("MR", [q])
    return b.build(), sc


def window_program(n: int, seed: int, widths=(1, 2, 3, 17, 64, 200, 512), layers: int = 8, cycle: bool = False,
                   exact: bool = False):
    """Layers of random gates, each followed by a window of distinct-qubit collapses: M (some
    inverted), R and MR mixed; wide windows on few qubits make later collapses deterministic.
    Window widths are drawn from `widths`, or taken in turn with `cycle`.

    The schedule layers as soon as possible, so a collapse whose qubit the gates before it leave
    alone moves into an earlier window, and one whose qubit they keep busy longer into a later one:
    the windows run are not these widths (`window_widths`). With `exact` they are: every step gives
    every qubit one operation (a window's step a one-qubit gate to each qubit it does not collapse),
    so all qubits stand at the same layer before each window. Its gates are mostly diagonal (S,
    S_DAG, Z, CZ), so that a qubit measured again may still be deterministic; no classical control,
    so the programs stay in the domain of every fast path."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    for layer in range(layers):
        for _ in range(2 if exact else 4):  # enough scrambling that most collapses of the next window are random
            b.next_step()
            qs = list(range(n))
            r.shuffle(qs)
            if exact:
                _full_layer(b, r, qs)
                continue
            while len(qs) > 1 and r.random() < 0.95:
                if r.random() < 0.5:
                    b.gate(r.choice(UNITARY_2), qs.pop(), qs.pop())
                else:
                    b.gate(r.choice(UNITARY_1), qs.pop())
        b.next_step()
        width = widths[layer % len(widths)] if cycle else r.choice(widths)
        collapsed = r.sample(range(n), min(width, n))
        for q in collapsed:
            kind = r.random()
            if kind < 0.6:
                b.measure(q, invert=r.random() < 0.2)
            elif kind < 0.8:
                b.reset(q)
            else:
                b.measure(q, reset=True)
        if exact:  # the others' operation in this step
            chosen = set(collapsed)
            _full_layer(b, r, [q for q in range(n) if q not in chosen], pairs=False)
    return b.build()


_DIAGONAL_1 = ("S", "S_DAG", "Z")


def _full_layer(b: ProgramBuilder, r: random.Random, qs, pairs: bool = True) -> None:
    """A gate on each of the qubits `qs` (pairs of them for a two-qubit gate half the time when
    `pairs`), diagonal seven times in ten, as one vectorized layer."""
    codes, first, second = [], [], []
    qs = list(qs)
    while qs:
        if pairs and len(qs) >= 2 and r.random() < 0.5:
            g = r.choice(UNITARY_2) if r.random() < 0.3 else "CZ"
            codes.append(opcodes.CODE[g]), first.append(qs.pop()), second.append(qs.pop())
        else:
            g = r.choice(UNITARY_1) if r.random() < 0.3 else r.choice(_DIAGONAL_1)
            codes.append(opcodes.CODE[g]), first.append(qs.pop()), second.append(-1)
    if codes:
        b.gate_layer(np.array(codes), np.array(first), np.array(second))


def measure_window_program(n: int, seed: int, widths=(16, 40, 64), layers: int = 8, remeasure: bool = False):
    """Layers of gates from the whole unitary set (a few qubits left idle), each followed by a window
    of distinct-qubit measurements (some inverted): the low-rank update takes the next layer's gates
    with it. Layer 3's window also resets a qubit and layer 5's gates carry noise, so that those
    windows keep their own kernels. With `remeasure`, layer 6 measures its qubits twice: a window of
    deterministic collapses alone before the next layer's gates."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    flip = b.channel_id(1, [0.3], [[1]])
    for layer in range(layers):
        for _ in range(3):
            b.next_step()
            qs = list(range(n))
            r.shuffle(qs)
            idle = []
            while qs:
                if r.random() < 0.03:
                    idle.append(qs.pop())
                elif len(qs) > 1 and r.random() < 0.5:
                    b.gate(r.choice(UNITARY_2), qs.pop(), qs.pop())
                else:
                    b.gate(r.choice(UNITARY_1), qs.pop())
            if layer == 5 and idle:
                b.noise("X_ERROR", idle[:1], flip)
        b.next_step()
        measured = r.sample(range(n), min(widths[layer % len(widths)], n))
        for q in measured:
            b.measure(q, invert=r.random() < 0.2)
        if layer == 3:
            b.measure(next(q for q in range(n) if q not in measured), reset=True)
        if remeasure and layer == 6:
            b.next_step()
            for q in measured:
                b.measure(q)
    return b.build()


def window_widths(program, sched):
    """The collapse windows' widths as tableau mode runs them."""
    from cirq_quasarq.engines.cuda.device_program import _build_plan

    return [end - start for kind, start, end, _ in _build_plan(program, sched).actions if kind == "C"]
