"""A noise sweep's next circuit (compiler/stim_sweep.py) against the full compile, its definition:
after compiling one circuit, compiling another of equal counts gives the Program the full compile
gives (every table, channel by channel), whether the sweep's path takes it or hands it back, and
the same shots for a seed. Random circuits of every swept channel, REPEAT blocks, flips,
annotations, and every way a sweep's probabilities can move: fresh, to and from 0, channels that
merge or split, a channel's Paulis changing, and changes the path must refuse (a flip
probability, coordinates past the printed digits, an observable's index, a tag, E chains)."""

import random

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq.compiler import stim_circuit
from cirq_quasarq.compiler.stim_circuit import clear_stim_cache, compile_stim
from cirq_quasarq.core import rng
from cirq_quasarq.engines import select_engine
from cirq_quasarq.shots import Shots

from .test_stim_circuit import assert_programs_equal

SWEPT = {"X_ERROR": 1, "Y_ERROR": 1, "Z_ERROR": 1, "DEPOLARIZE1": 1, "DEPOLARIZE2": 1, "PAULI_CHANNEL_1": 3,
         "PAULI_CHANNEL_2": 15}


@pytest.fixture
def taken(monkeypatch):
    """The sweep path's answers, in order (a Program, or None where it handed the circuit back)."""
    answers = []
    original = stim_circuit.swept_variant

    def spy(circuit, entries):
        answers.append(original(circuit, entries))
        return answers[-1]

    monkeypatch.setattr(stim_circuit, "swept_variant", spy)
    yield answers
    clear_stim_cache()


def variant_and_full(base: stim.Circuit, other: stim.Circuit):
    """(`other` compiled right after `base`, `other` compiled alone)."""
    clear_stim_cache()
    compile_stim(base)
    got = compile_stim(other)
    clear_stim_cache()
    return got, compile_stim(other)


def same_shots(p, q, shots=700, engine=None):
    engine, key = engine or select_engine("cpu"), rng.make_key(11)
    mine, theirs = (Shots(engine, program, "detectors").sample(key, 0, shots) for program in (p, q))
    for a, b in zip(mine, theirs):
        assert np.array_equal(a, b)


# -- random circuits: a skeleton with a slot for each swept instruction's arguments ---------------------


def skeleton(rnd: random.Random, n: int = 6):
    """Lines of a random circuit; a swept channel's line is (name, targets) and takes its arguments
    from the sweep point."""
    lines, measured = [], 0

    def body(depth):
        nonlocal measured
        for _ in range(rnd.randint(4, 14)):
            kind = rnd.random()
            if kind < 0.35:
                name = rnd.choice(sorted(SWEPT))
                k = 2 * rnd.randint(1, n // 2) if name in ("DEPOLARIZE2", "PAULI_CHANNEL_2") else rnd.randint(1, n)
                lines.append((name, " ".join(map(str, rnd.sample(range(n), k)))))
            elif kind < 0.55:
                gate = rnd.choice(["H", "S", "CX", "CZ", "SQRT_X"])
                k = 2 * rnd.randint(1, n // 2) if gate in ("CX", "CZ") else rnd.randint(1, n)
                lines.append(f"{gate} " + " ".join(map(str, rnd.sample(range(n), k))))
            elif kind < 0.72:
                qs = rnd.sample(range(n), rnd.randint(1, n))
                flip = f"({rnd.choice([0.01, 0.02])})" if rnd.random() < 0.25 else ""
                lines.append(f"{rnd.choice(['M', 'MR', 'MX'])}{flip} " + " ".join(map(str, qs)))
                measured += len(qs)
            elif kind < 0.82 and measured:
                back = sorted({rnd.randint(1, min(measured, 4)) for _ in range(2)})
                lines.append(f"DETECTOR({rnd.randint(0, 9)}, 0.5) " + " ".join(f"rec[-{b}]" for b in back))
            elif kind < 0.88 and measured:
                lines.append(f"OBSERVABLE_INCLUDE({rnd.randint(0, 2)}) rec[-1]")
            elif kind < 0.93:
                lines.append("TICK")
            elif depth == 0 and rnd.random() < 0.5:
                lines.append(f"REPEAT {rnd.randint(2, 4)} {{")
                body(1)
                lines.append("}")
            else:
                lines.append(f"R {rnd.randrange(n)}")

    body(0)
    lines.append("M " + " ".join(map(str, range(n))))
    return lines


def text(lines, args) -> stim.Circuit:
    at, out = 0, []
    for line in lines:
        if isinstance(line, tuple):
            out.append(f"{line[0]}({', '.join(repr(a) for a in args[at])}) {line[1]}")
            at += 1
        else:
            out.append(line)
    return stim.Circuit("\n".join(out))


def draw(rnd: random.Random, name: str, zero: float = 0.0):
    """Arguments of a swept channel, each 0 with probability `zero`, from a few values (so that
    channels meet each other) or fresh."""
    width = SWEPT[name]
    scale = 0.9 / width  # keeps a channel's sum under 1
    pool = [0.001, 0.002, 0.01]
    return tuple(0.0 if rnd.random() < zero else (rnd.choice(pool) if rnd.random() < 0.5 else rnd.random() * scale)
                 for _ in range(width))


MOVES = ["fresh", "to zero", "from zero", "one changes", "all equal", "from all equal", "scaled"]


def move(rnd: random.Random, how: str, swept, base):
    if how == "fresh":
        return [draw(rnd, name) for name, _ in swept]
    if how == "to zero":
        return [tuple(0.0 if rnd.random() < 0.3 else a for a in args) for args in base]
    if how == "from zero":
        return [tuple(draw(rnd, name)[0] if a == 0 else a for a in args) for (name, _), args in zip(swept, base)]
    if how == "one changes":
        out = list(base)
        i = rnd.randrange(len(out))
        out[i] = draw(rnd, swept[i][0])
        return out
    if how == "all equal":  # every channel of a name the same: merges
        by_name = {}
        return [by_name.setdefault(name, draw(rnd, name)) for name, _ in swept]
    if how == "from all equal":  # the base had them merged; now they split
        return [draw(rnd, name) for name, _ in swept]
    return [tuple(a * 0.5 for a in args) for args in base]  # "scaled": a threshold sweep's next p


@pytest.mark.parametrize("seed", range(60))
def test_random_sweeps_equal_the_full_compile(taken, seed):
    rnd = random.Random(seed)
    lines = skeleton(rnd)
    swept = [line for line in lines if isinstance(line, tuple)]
    if not swept:
        lines.insert(0, ("X_ERROR", "0"))
        swept = [("X_ERROR", "0")]
    for how in MOVES:
        if how == "from all equal":
            by_name = {}
            base = [by_name.setdefault(name, draw(rnd, name)) for name, _ in swept]
        else:
            base = [draw(rnd, name, zero=0.3 if how == "from zero" else 0.0) for name, _ in swept]
        point = move(rnd, how, swept, base)
        asked = len(taken)
        got, full = variant_and_full(text(lines, base), text(lines, point))
        assert_programs_equal(got, full, f"{how}: {point}")
        if taken[asked:] != [None]:  # the path's Program (or the cache's, for an equal point)
            same_shots(got, full)


def test_the_sweeps_path_is_taken_where_only_probabilities_move(taken):
    """Not a test of speed: a path never taken would leave the test above checking nothing."""
    for seed in range(20):
        rnd = random.Random(seed)
        lines = skeleton(rnd) + [("X_ERROR", "0 1")]
        swept = [line for line in lines if isinstance(line, tuple)]
        base = [tuple(0.001 * (i + 1) + 0.0001 * j for j in range(SWEPT[name])) for i, (name, _) in enumerate(swept)]
        point = [tuple(2 * a for a in args) for args in base]  # distinct before and after, none 0
        got, full = variant_and_full(text(lines, base), text(lines, point))
        assert taken[-1] is got, seed
        assert_programs_equal(got, full)
        same_shots(got, full)


def generated(p, d=3, kind="surface_code:rotated_memory_z"):
    return stim.Circuit.generated(kind, distance=d, rounds=d, after_clifford_depolarization=p,
                                  before_measure_flip_probability=p, after_reset_flip_probability=p,
                                  before_round_data_depolarization=p)


@pytest.mark.parametrize("kind", ["surface_code:rotated_memory_z", "surface_code:rotated_memory_x",
                                  "repetition_code:memory", "color_code:memory_xyz"])
def test_a_generated_codes_threshold_sweep_takes_the_path_with_the_full_compiles_shots(taken, kind, engine):
    """On each engine: the points share their first's preparation (`Program.derived`), and each
    samples its own noise, as its full compile does."""
    ps = [1e-3, 2e-3, 3e-3, 5e-3, 0.01]
    clear_stim_cache()
    made = [compile_stim(generated(p, kind=kind)) for p in ps]
    assert len(taken) == len(ps) - 1 and all(t is m for t, m in zip(taken, made[1:]))  # the first compiles in full
    for p, program in zip(ps, made):
        clear_stim_cache()
        full = compile_stim(generated(p, kind=kind))
        assert_programs_equal(program, full, p)
        same_shots(program, full, 5000, engine)


@pytest.mark.parametrize("base, point", [
    ("X_ERROR(0.1) 0\nH 2\nX_ERROR(0.1) 1\nM 0 1", "X_ERROR(0.1) 0\nH 2\nX_ERROR(0.2) 1\nM 0 1"),  # one channel splits
    ("X_ERROR(0.1) 0\nH 2\nX_ERROR(0.2) 1\nM 0 1", "X_ERROR(0.3) 0\nH 2\nX_ERROR(0.3) 1\nM 0 1"),  # two merge
    ("X_ERROR(0.1) 0\nZ_ERROR(0.2) 1\nM 0 1", "X_ERROR(0.2) 0\nZ_ERROR(0.2) 1\nM 0 1"),  # other Paulis: none merge
    ("X_ERROR(0.1) 0 1\nH 0\nM 0 1", "X_ERROR(0) 0 1\nH 0\nM 0 1"),  # no longer fires: no rows
    ("X_ERROR(0) 0 1\nH 0\nM 0 1\nX_ERROR(0.1) 0", "X_ERROR(0.2) 0 1\nH 0\nM 0 1\nX_ERROR(0.1) 0"),  # fires now
    ("PAULI_CHANNEL_1(0.1, 0.1, 0) 0\nM 0", "PAULI_CHANNEL_1(0.1, 0, 0) 0\nM 0"),  # one outcome: X_ERROR's rows
    ("PAULI_CHANNEL_1(0.1, 0.1, 0) 0\nM 0", "PAULI_CHANNEL_1(0, 0.1, 0.1) 0\nM 0"),  # other Paulis
    ("PAULI_CHANNEL_2(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0) 0 1\nM 0",
     "PAULI_CHANNEL_2(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.2, 0.1) 0 1\nM 0"),  # E becomes a channel
    ("DEPOLARIZE1(0.1) 0\nM(0.01) 0", "DEPOLARIZE1(0.2) 0\nM(0.02) 0"),  # a flip probability moves too
    ("DEPOLARIZE1(0.1) 0\nM 0\nDETECTOR(0.1234567) rec[-1]",
     "DEPOLARIZE1(0.2) 0\nM 0\nDETECTOR(0.12345671) rec[-1]"),  # coordinates past the printed digits
    ("DEPOLARIZE1(0.1) 0\nM 0 1\nOBSERVABLE_INCLUDE(0) rec[-1]\nOBSERVABLE_INCLUDE(1) rec[-2]",
     "DEPOLARIZE1(0.2) 0\nM 0 1\nOBSERVABLE_INCLUDE(1) rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-2]"),  # observables' indexes
    ("DEPOLARIZE1(0.1) 0\nM 0\nSHIFT_COORDS(1)\nDETECTOR(0) rec[-1]",
     "DEPOLARIZE1(0.2) 0\nM 0\nSHIFT_COORDS(2)\nDETECTOR(0) rec[-1]"),
    ("X_ERROR(0.1) 0\nE(0.1) X0\nM 0", "X_ERROR(0.2) 0\nE(0.1) X0\nM 0"),  # E could share its channel
    ("X_ERROR(0.1) 0\nMPAD(0.1) 0\nM 0", "X_ERROR(0.2) 0\nMPAD(0.1) 0\nM 0"),
    ("X_ERROR(0.1) 0\nMPAD 0 1\nMPP X0*Z1 Y2\nMZZ 0 1\nM 0", "X_ERROR(0.2) 0\nMPAD 0 1\nMPP X0*Z1 Y2\nMZZ 0 1\nM 0"),
    ("X_ERROR(0.1) 0\nMPP(0.1) X0*Z1 X2*X2\nM 0", "X_ERROR(0.2) 0\nMPP(0.1) X0*Z1 X2*X2\nM 0"),  # +-I: a channel
    ("X_ERROR[a](0.1) 0\nM 0", "X_ERROR[a](0.2) 0\nM 0"),  # a tag
    ("X_ERROR(0.1) 0\nM 0", "X_ERROR(0.1) 1\nM 0"),  # other targets (equal counts)
    ("X_ERROR(0.1) 0\nM 0", "Z_ERROR(0.1) 0\nM 0"),
    ("X_ERROR(1) 0\nM 0\nDETECTOR rec[-1]", "X_ERROR(0.5) 0\nM 0\nDETECTOR rec[-1]"),  # from certain (its reference)
    ("X_ERROR(0.5) 0\nM 0\nDETECTOR rec[-1]", "X_ERROR(1) 0\nM 0\nDETECTOR rec[-1]"),  # to certain
    ("REPEAT 2 {\n X_ERROR(0.1) 0\n M 0\n}", "REPEAT 3 {\n X_ERROR(0.2) 0\n M 0\n}"),  # other counts: no bucket
    ("REPEAT 2 {\n X_ERROR(0.1) 0\n M 0\n}\nX_ERROR(0.1) 0", "REPEAT 2 {\n X_ERROR(0.2) 0\n M 0\n}\nX_ERROR(0.1) 0"),
])
def test_edge_points_equal_the_full_compile(taken, base, point):
    got, full = variant_and_full(stim.Circuit(base), stim.Circuit(point))
    assert_programs_equal(got, full, point)
    same_shots(got, full)


def test_the_path_refuses_what_would_change_the_rows(taken):
    refused = [("X_ERROR(0.1) 0\nH 2\nX_ERROR(0.1) 1\nM 0 1", "X_ERROR(0.1) 0\nH 2\nX_ERROR(0.2) 1\nM 0 1"),
               ("X_ERROR(0.1) 0\nH 2\nX_ERROR(0.2) 1\nM 0 1", "X_ERROR(0.3) 0\nH 2\nX_ERROR(0.3) 1\nM 0 1"),
               ("X_ERROR(0.1) 0 1\nH 0\nM 0 1", "X_ERROR(0) 0 1\nH 0\nM 0 1"),
               ("PAULI_CHANNEL_1(0.1, 0.1, 0) 0\nM 0", "PAULI_CHANNEL_1(0.1, 0, 0) 0\nM 0"),
               ("DEPOLARIZE1(0.1) 0\nM(0.01) 0", "DEPOLARIZE1(0.2) 0\nM(0.02) 0"),
               ("DEPOLARIZE1(0.1) 0\nM 0\nDETECTOR(0.1234567) rec[-1]",
                "DEPOLARIZE1(0.2) 0\nM 0\nDETECTOR(0.12345671) rec[-1]"),
               ("DEPOLARIZE1(0.1) 0\nM 0 1\nOBSERVABLE_INCLUDE(0) rec[-1]\nOBSERVABLE_INCLUDE(1) rec[-2]",
                "DEPOLARIZE1(0.2) 0\nM 0 1\nOBSERVABLE_INCLUDE(1) rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-2]"),
               ("X_ERROR(0.1) 0\nE(0.1) X0\nM 0", "X_ERROR(0.2) 0\nE(0.1) X0\nM 0"),
               ("X_ERROR(0.1) 0\nMPP(0.1) X0*Z1 X2*X2\nM 0", "X_ERROR(0.2) 0\nMPP(0.1) X0*Z1 X2*X2\nM 0"),
               ("X_ERROR[a](0.1) 0\nM 0", "X_ERROR[a](0.2) 0\nM 0"),
               ("X_ERROR(0.1) 0\nM 0", "X_ERROR(0.1) 1\nM 0")]
    for base, point in refused:
        asked = len(taken)
        variant_and_full(stim.Circuit(base), stim.Circuit(point))
        assert taken[asked:] == [None], point  # asked (a circuit of equal counts), and refused
    variant_and_full(stim.Circuit("X_ERROR(0.1) 0\nZ_ERROR(0.2) 1\nM 0 1"),
                     stim.Circuit("X_ERROR(0.2) 0\nZ_ERROR(0.2) 1\nM 0 1"))
    assert taken[-1] is not None  # X and Z channels of one probability are two channels either way
    variant_and_full(stim.Circuit("X_ERROR(0.1) 0\nMPAD 0 1\nMPP X0*Z1 Y2\nMZZ 0 1\nM 0"),
                     stim.Circuit("X_ERROR(0.2) 0\nMPAD 0 1\nMPP X0*Z1 Y2\nMZZ 0 1\nM 0"))
    assert taken[-1] is not None  # products and pads without a flip probability make no channel
