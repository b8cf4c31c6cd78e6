"""compile_stim: stim.Circuit -> Program, against Stim itself and against stimcirq's conversion.

Oracles: the flattened Stim circuit's own records (detectors, observables, measurement count);
the Cirq compiler on stimcirq's conversion (same detectors, observables, channels); Stim's
detector and measurement samplers (rates within 6 binomial standard deviations); Stim's tableau
simulator replaying our tableau-mode shots with postselection (every record must be possible, the
final stabilizer groups equal).
"""

import random
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.compiler import compile_circuit, compile_stim
from cirq_quasarq.compiler import stim_circuit
from cirq_quasarq.core import opcodes
from cirq_quasarq.core.draws import coin
from cirq_quasarq.core.program import AUX, COND, FLAGS, OP, RAND, REC, STEP, A, B
from cirq_quasarq.core.rng import make_key
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.errors import MeasurementKeyError, UnsupportedOperationError
from cirq_quasarq.schedule import schedule
from cirq_quasarq.schedule.walk import walk

from .replay import as_stim_inverse

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")

NOISE_KNOBS = dict(after_clifford_depolarization=0.01, before_round_data_depolarization=0.01,
                   before_measure_flip_probability=0.01, after_reset_flip_probability=0.01)
CODES = ["surface_code:rotated_memory_z", "surface_code:rotated_memory_x", "repetition_code:memory",
         "color_code:memory_xyz"]


def generated(code, distance=3, rounds=3, **knobs):
    return stim.Circuit.generated(code, distance=distance, rounds=rounds, **(knobs or NOISE_KNOBS))


def flat_annotations(circuit):
    """Absolute records of each DETECTOR (in order) and each OBSERVABLE_INCLUDE, from Stim's flattening."""
    detectors, observables, m = [], [], 0
    for inst in circuit.flattened():
        if inst.name == "DETECTOR":
            detectors.append(sorted(m + t.value for t in inst.targets_copy()))
        elif inst.name == "OBSERVABLE_INCLUDE":
            observables.append((int(inst.gate_args_copy()[0]), sorted(m + t.value for t in inst.targets_copy())))
        m += inst.num_measurements
    return detectors, observables


def annotation_sets(anns):
    return [sorted(a.records.tolist()) for a in anns]


def assert_steps_disjoint(program):
    """The builder's STEP contract: rows sharing a STEP act on disjoint qubits (E's ext qubits too)."""
    ins = program.instructions
    e_code = opcodes.CODE["E"]
    seen = {}
    for row in ins:
        op = int(row[OP])
        if op == e_code:
            qs = program.ext_qubits[row[A]:row[A] + row[B]].tolist()
        elif opcodes.OPCODES[op].arity == 0:
            continue
        else:
            qs = [int(q) for q in (row[A], row[B]) if q >= 0]
        used = seen.setdefault(int(row[STEP]), set())
        assert not used & set(qs), (int(row[STEP]), qs)
        used |= set(qs)


# -- structure: generated QEC circuits --------------------------------------------------------------


@pytest.mark.parametrize("code", CODES)
def test_generated_circuits_compile_to_stims_detectors_and_observables(code):
    c = generated(code)
    p = compile_stim(c)
    assert p.num_qubits == c.num_qubits
    assert p.num_records == c.num_measurements
    assert len(p.detectors) == c.num_detectors
    assert len({o.index for o in p.observables}) == c.num_observables
    coords = c.get_detector_coordinates()
    for i, d in enumerate(p.detectors):
        assert d.coords == pytest.approx(tuple(coords[i])), i
    detectors, observables = flat_annotations(c)
    assert annotation_sets(p.detectors) == detectors
    assert [(o.index, sorted(o.records.tolist())) for o in p.observables] == observables
    assert p.loops and p.loops[0].count == 2  # the rounds' REPEAT block is a loop, not unrolled
    assert_steps_disjoint(p)


@pytest.mark.parametrize("code", CODES)
def test_generated_circuits_match_the_cirq_compiler_on_stimcirqs_conversion(code):
    c = generated(code)
    p = compile_stim(c)
    q = compile_circuit(stimcirq.stim_circuit_to_cirq_circuit(c))
    assert p.num_records == q.num_records
    assert annotation_sets(p.detectors) == annotation_sets(q.detectors)
    assert [d.coords for d in p.detectors] == [d.coords for d in q.detectors]
    assert [(o.index, sorted(o.records.tolist())) for o in p.observables] == \
        [(o.index, sorted(o.records.tolist())) for o in q.observables]
    assert channel_set(p) == channel_set(q)
    assert {k.key: k.records.tolist() for k in p.keys} == {k.key: k.records.tolist() for k in q.keys}
    assert p.num_instructions == q.num_instructions
    assert p.num_rand_slots == q.num_rand_slots


def channel_set(program):
    return sorted((c.arity, c.probs.tolist(), c.paulis.tolist()) for c in program.channels)


def row_multiset(program):
    """Rows without STEP / RAND, with channel / confusion / condition ids replaced by their contents."""
    out = []
    kind = opcodes.KIND
    for row in program.instructions:
        op = int(row[OP])
        aux = int(row[AUX])
        if kind[op] == opcodes.Kind.NOISE:
            c = program.channels[aux]
            aux = (c.arity, tuple(c.probs.tolist()), tuple(map(tuple, c.paulis.tolist())))
        elif kind[op] == opcodes.Kind.RECORD_NOISE:
            aux = tuple(map(tuple, program.confusions[aux].matrix.tolist()))
        cond = int(row[COND])
        if cond >= 0:
            cnd = program.conditions[cond]
            cond = (tuple(map(tuple, cnd.refs.tolist())), tuple(cnd.table.tolist()))
        a, b = int(row[A]), int(row[B])
        if opcodes.OPCODES[op].name == "E":
            a = tuple(program.ext_qubits[a:a + b].tolist()) + tuple(program.ext_paulis[a:a + b].tolist())
        out.append(repr((op, a, b, int(row[REC]), aux, cond, int(row[FLAGS]))))
    return sorted(out)


EVERY_CHANNEL = """
H 0
CX 0 1 2 3
X_ERROR(0.1) 0 1
Y_ERROR(0.05) 2
Z_ERROR(0.2) 3
DEPOLARIZE1(0.03) 0 1 2
DEPOLARIZE2(0.04) 0 1 2 3
PAULI_CHANNEL_1(0.01, 0.02, 0.03) 1
PAULI_CHANNEL_1(0, 0.02, 0) 2
PAULI_CHANNEL_2(0.001,0.002,0.003,0.004,0.005,0.006,0.007,0.008,0.009,0.01,0.011,0.012,0.013,0.014,0.015) 0 1
PAULI_CHANNEL_2(0, 0, 0, 0, 0.05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) 2 3
E(0.1) X0 Y1 Z2
"""


def test_every_channel_as_the_cirq_compiler_builds_it():
    text = EVERY_CHANNEL + """
CORRELATED_ERROR(0.2) Z3
I_ERROR(0.1) 0
II_ERROR(0.1) 0 1
TICK
M(0.01) 0 !1
MX(0.02) 2
MR 3
MPP X0*Y1 !Z2*Z3
MZZ 0 1
CX rec[-1] 2
CZ 3 rec[-2]
REPEAT 3 {
    DEPOLARIZE1(0.03) 0
    MRY 0
    CY rec[-1] 1
    DETECTOR(1, 2) rec[-1]
    SHIFT_COORDS(0, 1)
}
DETECTOR(0) rec[-1] rec[-2]
OBSERVABLE_INCLUDE(1) rec[-3]
"""
    c = stim.Circuit(text)
    p = compile_stim(c)
    q = compile_circuit(stimcirq.stim_circuit_to_cirq_circuit(c))
    assert channel_set(p) == channel_set(q)
    assert row_multiset(p) == row_multiset(q)
    assert p.num_records == q.num_records == c.num_measurements
    assert p.num_rand_slots == q.num_rand_slots
    assert [(sorted(d.records.tolist()), d.coords) for d in p.detectors] == [(sorted(d.records.tolist()), d.coords)
                                                                      for d in q.detectors]
    assert {k.key: k.records.tolist() for k in p.keys} == {k.key: k.records.tolist() for k in q.keys}
    assert p.detectors[2].coords == (1.0, 4.0)  # shifted twice by the loop
    names = [opcodes.OPCODES[o].name for o in p.instructions[:, OP]]
    assert names.count("E") == 2 and "PAULI_CHANNEL_2" in names and "Y_ERROR" in names


def test_a_correlated_error_chain_is_one_channel_with_one_draw():
    """The chain's rows are one noise instruction (one random slot) on the union of its qubits;
    its sampled statistics are checked against Stim in test_stim_differential.py."""
    chain = compile_stim(stim.Circuit("E(0.1) X0\nELSE_CORRELATED_ERROR(0.2) Z1 Z2\nELSE_CORRELATED_ERROR(0.3) Y0"))
    lone = compile_stim(stim.Circuit("E(0.1) X0"))
    assert chain.num_rand_slots == lone.num_rand_slots == 1 and len(chain.instructions) == 1
    (channel,) = chain.channels
    assert channel.arity == 3 and len(channel.probs) == 3
    assert chain.ext_qubits.tolist() == [0, 1, 2]


def test_keys_are_record_slots_repeated_per_iteration():
    p = compile_stim(stim.Circuit("M 0\nREPEAT 4 {\n H 1\n M 1 2\n}\nMPP X0*X1"))
    keys = {k.key: k.records.tolist() for k in p.keys}
    assert keys == {"0": [[0]], "1": [[1], [3], [5], [7]], "2": [[2], [4], [6], [8]], "9": [[9]]}


def test_record_keys_are_made_when_read_and_sampling_reads_none():
    """A Stim circuit's keys (one a record slot) are made on first use: sampling reads none of them,
    so a compile leaves no key object for the garbage collector to track; Cirq's results read them."""
    import pickle

    from cirq_quasarq.core.program import RecordKeys

    circuit = stim.Circuit("M 0\nREPEAT 4 {\n H 1\n M 1 2\n DETECTOR rec[-1]\n}\nMPP X0*X1\nOBSERVABLE_INCLUDE(0) rec[-1]")
    sim = QuasarqSimulator(seed=3)
    p = sim.compile(circuit)
    assert isinstance(p.keys, RecordKeys) and len(p.keys) == 4 and p.keys
    sim.sample_measurements(circuit, 10)
    sim.sample_measurements(circuit, 70, bit_packed=True)
    sim.sample_detectors(circuit, 10, separate_observables=True)
    assert p.keys._made is None
    copy = pickle.loads(pickle.dumps(p))  # (Dask ships programs)
    assert [k.key for k in p.keys] == ["0", "1", "2", "9"] and p.keys[-1].key == "9" and len(p.keys[1:3]) == 2
    assert [(k.key, k.records.tolist()) for k in copy.keys] == [(k.key, k.records.tolist()) for k in p.keys]
    result = sim.run(circuit, repetitions=5)  # Cirq's result of the Stim circuit: its keys made now
    assert result.records["1"].shape == (5, 4, 1) and result.records["9"].shape == (5, 1, 1)
    assert p.keys._made is not None
    assert not compile_stim(stim.Circuit("H 0")).keys


# -- the gate table ------------------------------------------------------------------------------


def stim_aliases():
    out = []
    for name, gate in stim.gate_data().items():
        if gate.is_unitary and gate.name in opcodes.CODE:
            out.extend((alias, gate.name) for alias in sorted(set(gate.aliases) | {name}))
    return out


def our_tableau(opname):
    op = opcodes.BY_NAME[opname]
    images = [stim.PauliString(im) for im in op.images]
    return stim.Tableau.from_conjugated_generators(xs=images[0::2], zs=images[1::2])


@pytest.mark.parametrize("alias,canonical", stim_aliases())
def test_every_stim_alias_compiles_to_the_opcode_with_its_tableau(alias, canonical):
    gate = stim.gate_data(alias)
    n = 2 if gate.is_two_qubit_gate else 1
    p = compile_stim(stim.Circuit(f"{alias} " + " ".join(map(str, range(n)))))
    if canonical == "I":
        assert p.num_instructions == 0  # as the Cirq compiler: the identity writes no row
        return
    (row,) = p.instructions
    assert opcodes.OPCODES[row[OP]].name == canonical
    assert our_tableau(canonical) == stim.Tableau.from_named_gate(alias)


def test_every_unitary_opcode_is_reachable_from_stim():
    reached = {canonical for _, canonical in stim_aliases()}
    assert reached == {op.name for op in opcodes.OPCODES if op.kind == opcodes.Kind.UNITARY}


@pytest.mark.parametrize("text", ["SPP X0*Y1*Z2", "SPP_DAG Y0*X2", "SPP !Z1", "SPP_DAG !X0*X1",
                                  "SPP Z0", "H 0 1 2\nSPP X0*Y1 Z2\nSPP_DAG Y2*Y0"])
def test_spp_has_stims_tableau(text):
    c = stim.Circuit(text)
    p = compile_stim(c)
    run = NumpyEngine().run_tableau(p, schedule(p), make_key(0))
    sim = stim.TableauSimulator()
    sim.set_num_qubits(c.num_qubits)
    sim.do(c)
    assert as_stim_inverse(run.tableau) == sim.current_inverse_tableau()


# -- sampling: detectors and observables against Stim's detector sampler ---------------------------


def unpack(packed, shots):
    return np.unpackbits(packed.view(np.uint8), axis=1, bitorder="little")[:, :shots]


def parities(anns, bits, ref):
    """Per annotation, per shot: XOR of its records, against the reference sample's XOR."""
    out = np.zeros((len(anns), bits.shape[1]), dtype=np.uint8)
    for i, a in enumerate(anns):
        if len(a.records):
            out[i] = np.bitwise_xor.reduce(bits[a.records], axis=0) ^ np.bitwise_xor.reduce(ref[a.records])
    return out


def observable_flips(program, bits, ref, num_observables):
    out = np.zeros((num_observables, bits.shape[1]), dtype=np.uint8)
    for o, row in zip(program.observables, parities(program.observables, bits, ref)):
        out[o.index] ^= row
    return out


def assert_rates_agree(ours, theirs, what):
    """Rows of 0/1 events (shots along axis 1): rates, and joint rates of every pair, within 6
    binomial standard deviations of the difference of two independent estimates."""
    n1, n2 = ours.shape[1], theirs.shape[1]
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    for name, x, y in (("rate", a.mean(axis=1), b.mean(axis=1)),
                       ("joint rate", (a @ a.T) / n1, (b @ b.T) / n2)):
        pooled = (x * n1 + y * n2) / (n1 + n2)
        var = np.maximum(pooled * (1 - pooled), 1 / (n1 + n2)) * (1 / n1 + 1 / n2)
        z = np.abs(x - y) / np.sqrt(var)
        worst = np.unravel_index(np.argmax(z), z.shape)
        assert z.max() < 6, f"{what} {name} {worst}: ours {x[worst]:.5f}, stim {y[worst]:.5f} ({z.max():.1f} sigma)"


def sample_program(program, shots, seed):
    engine = NumpyEngine()
    sched = schedule(program)
    ref = engine.run_tableau(program, sched, make_key(0), reference=True).records
    packed = engine.sample_frames(program, sched, make_key(seed), ref, shots)
    return unpack(packed, shots), ref


@pytest.mark.parametrize("code,shots", [("surface_code:rotated_memory_z", 100_000),
                                        ("surface_code:rotated_memory_x", 50_000),
                                        ("color_code:memory_xyz", 100_000)])
def test_detector_and_observable_rates_match_stims_detector_sampler(code, shots):
    c = generated(code, rounds=3)
    p = compile_stim(c)
    bits, ref = sample_program(p, shots, seed=7)
    dets = parities(p.detectors, bits, ref)
    obs = observable_flips(p, bits, ref, c.num_observables)
    sd, so = c.compile_detector_sampler(seed=11).sample(shots, separate_observables=True)
    assert_rates_agree(np.concatenate([dets, obs]), np.concatenate([sd.T, so.T]).astype(np.uint8), code)
    assert dets.mean() > 0.01  # the noise is there


# -- random circuits with every supported instruction -----------------------------------------------


def unitary_names():
    one, two = [], []
    for alias, canonical in stim_aliases():
        (one if opcodes.BY_NAME[canonical].arity == 1 else two).append(alias)
    return one, two


ONE, TWO = unitary_names()
FEEDBACK = ["CX", "CNOT", "ZCX", "CY", "ZCY", "CZ", "ZCZ", "XCZ", "YCZ"]
MEASURES = ["M", "MZ", "MX", "MY", "MR", "MRZ", "MRX", "MRY"]
RESETS = ["R", "RZ", "RX", "RY"]


def random_circuit(seed, n=6, noisy=False):
    r = random.Random(seed)
    state = {"m": 0}

    def p():
        return round(r.uniform(0.01, 0.2), 3)

    def inv():
        return "!" if r.random() < 0.3 else ""

    def block(depth):
        lines = []
        for _ in range(r.randint(6, 14)):
            roll = r.random()
            qs = list(range(n))
            r.shuffle(qs)
            if roll < 0.22:
                lines.append(f"{r.choice(ONE)} " + " ".join(map(str, r.choices(range(n), k=r.randint(1, 3)))))
            elif roll < 0.40:
                pairs = [f"{qs[2 * k]} {qs[2 * k + 1]}" for k in range(r.randint(1, n // 2))]
                lines.append(f"{r.choice(TWO)} " + " ".join(pairs))
            elif roll < 0.50:
                k = r.randint(1, 3)
                arg = f"({p()})" if noisy and r.random() < 0.5 else ""
                lines.append(f"{r.choice(MEASURES)}{arg} " + " ".join(inv() + str(q) for q in qs[:k]))
                state["m"] += k
            elif roll < 0.55:
                lines.append(f"{r.choice(RESETS)} " + " ".join(map(str, qs[:r.randint(1, 2)])))
            elif roll < 0.62:
                products, used = [], 0
                for _ in range(r.randint(1, 2)):
                    size = r.randint(1, 3)
                    group = qs[used:used + size]
                    used += size
                    if group and r.random() < 0.1:  # +-I: a constant record
                        letter = r.choice("XYZ")
                        products.append(f"{inv()}{letter}{group[0]}*{letter}{group[0]}")
                    elif group:
                        products.append("*".join(inv() + r.choice("XYZ") + str(q) for q in group))
                arg = f"({p()})" if noisy and r.random() < 0.5 else ""
                lines.append(f"MPP{arg} " + " ".join(products))
                state["m"] += len(products)
            elif roll < 0.66:
                lines.append(f"{r.choice(['MXX', 'MYY', 'MZZ'])} {inv()}{qs[0]} {inv()}{qs[1]} {qs[2]} {inv()}{qs[3]}")
                state["m"] += 2
            elif roll < 0.69:
                group = "*".join(inv() + r.choice("XYZ") + str(q) for q in qs[:r.randint(1, 3)])
                lines.append(f"{r.choice(['SPP', 'SPP_DAG'])} {group}")
            elif roll < 0.77 and state["m"]:
                gate = r.choice(FEEDBACK)
                rec = f"rec[-{r.randint(1, min(state['m'], 4))}]"
                if gate in ("XCZ", "YCZ") or (gate in ("CZ", "ZCZ") and r.random() < 0.5):
                    lines.append(f"{gate} {qs[0]} {rec}")
                else:
                    lines.append(f"{gate} {rec} {qs[0]}")
            elif roll < 0.80:
                lines.append("TICK")
            elif roll < 0.84 and depth < 2:
                lines.append(f"REPEAT {r.randint(2, 3)} {{")
                lines.extend("    " + line for line in block(depth + 1))
                lines.append("}")
            elif roll < 0.88 and state["m"]:
                recs = " ".join(f"rec[-{k}]" for k in sorted(r.sample(range(1, state["m"] + 1), min(2, state["m"]))))
                lines.append(r.choice([f"DETECTOR({qs[0]}, {depth}) {recs}", f"OBSERVABLE_INCLUDE({depth}) {recs}",
                                       f"OBSERVABLE_INCLUDE({depth}) {recs} {inv()}{r.choice('XYZ')}{qs[1]}",
                                       f"OBSERVABLE_INCLUDE({depth}) {r.choice('XYZ')}{qs[0]} {r.choice('XYZ')}{qs[1]}",
                                       "SHIFT_COORDS(1)", f"QUBIT_COORDS(1, 2) {qs[0]}"]))
            elif roll < 0.90:
                bits = [str(r.randint(0, 1)) for _ in range(r.randint(1, 3))]
                arg = f"({p()})" if noisy and r.random() < 0.5 else ""
                lines.append(f"MPAD{arg} " + " ".join(bits))
                state["m"] += len(bits)
            elif roll < 0.92 and noisy:
                k = r.randint(1, 3)
                probs = [p()] if r.random() < 0.5 else [round(r.uniform(0, 0.1), 3) for _ in range(4)]
                name = "HERALDED_ERASE" if len(probs) == 1 else "HERALDED_PAULI_CHANNEL_1"
                lines.append(f"{name}({', '.join(map(str, probs))}) " + " ".join(inv() + str(q) for q in qs[:k]))
                state["m"] += k
            elif noisy:
                lines.append(r.choice([
                    f"X_ERROR({p()}) {qs[0]} {qs[1]}", f"Y_ERROR({p()}) {qs[0]}", f"Z_ERROR({p()}) {qs[0]}",
                    f"DEPOLARIZE1({p()}) {qs[0]} {qs[1]}", f"DEPOLARIZE2({p()}) {qs[0]} {qs[1]} {qs[2]} {qs[3]}",
                    f"PAULI_CHANNEL_1({p()}, 0, {p()}) {qs[0]}",
                    "PAULI_CHANNEL_2(" + ", ".join(str(round(r.uniform(0, 0.02), 3)) for _ in range(15))
                    + f") {qs[0]} {qs[1]}",
                    f"E({p()}) X{qs[0]} Y{qs[1]} Z{qs[2]}", f"CORRELATED_ERROR({p()}) Y{qs[0]}",
                    f"I_ERROR({p()}) {qs[0]}", f"II_ERROR({p()}) {qs[0]} {qs[1]}"]))
        return lines

    lines = [f"{r.choice(ONE)} " + " ".join(map(str, range(n)))]
    while state["m"] < 6:
        lines.extend(block(0))
    return stim.Circuit("\n".join(lines))


_POSTSELECT = {"Z": "postselect_z", "X": "postselect_x", "Y": "postselect_y"}
_PEEK = {"Z": "peek_z", "X": "peek_x", "Y": "peek_y"}
_BASIS = {"M": "Z", "MX": "X", "MY": "Y", "MR": "Z", "MRX": "X", "MRY": "Y", "R": "Z", "RX": "X", "RY": "Y"}


def reset_coins(program, sched, key, repetition, reference):
    """Per qubit, the coins of our R rows in execution order (a reset's random collapse)."""
    coins = {}
    r_code = opcodes.CODE["R"]
    for step in walk(program, sched):
        if step.op != r_code:
            continue
        for row in sched.instructions[step.start:step.end]:
            value = 0 if reference else coin(key, int(row[RAND]) + step.rand_shift, repetition)
            coins.setdefault(int(row[A]), []).append(value)
    return coins


def pauli_product(group, n, letter=None):
    """A stim.PauliString of an MPP / MXX group, its sign the product of the inversions."""
    ps = stim.PauliString(n)
    for t in group:
        single = stim.PauliString(n)
        single[t.value] = letter or t.pauli_type
        ps *= single
        if t.is_inverted_result_target:
            ps *= -1
    return ps


def replay(circuit, records, coins):
    """Run `circuit` (noise-free) in Stim, forcing every collapse to ours; returns the simulator.
    Raises if one of our records is impossible."""
    sim = stim.TableauSimulator()
    n = circuit.num_qubits
    sim.set_num_qubits(n)
    m = 0
    for inst in circuit.flattened():
        name = inst.name
        if name == "MPAD":  # without noise: its bits
            for t in inst.targets_copy():
                assert records[m] == t.value, (m, str(inst))
                m += 1
            sim.do(inst)
        elif name in ("M", "MX", "MY", "MR", "MRX", "MRY"):
            for t in inst.targets_copy():
                raw = bool(records[m] ^ t.is_inverted_result_target)
                getattr(sim, _POSTSELECT[_BASIS[name]])(t.value, desired_value=raw)
                sim.do(stim.CircuitInstruction(name, [t]))
                assert sim.current_measurement_record()[-1] == bool(records[m]), (m, str(inst))
                m += 1
        elif name in ("MPP", "MXX", "MYY", "MZZ"):
            letter = None if name == "MPP" else name[1]
            for group in inst.target_groups():
                sim.postselect_observable(pauli_product(group, n, letter), desired_value=bool(records[m]))
                text = ("*" if name == "MPP" else " ").join(
                    ("!" if t.is_inverted_result_target else "") + (t.pauli_type if letter is None else "")
                    + str(t.value) for t in group)
                sim.do(stim.Circuit(f"{name} {text}"))
                assert sim.current_measurement_record()[-1] == bool(records[m]), (m, str(inst))
                m += 1
        elif name in ("R", "RX", "RY"):
            basis = _BASIS[name]
            for t in inst.targets_copy():
                value = coins[t.value].pop(0)
                if getattr(sim, _PEEK[basis])(t.value) == 0:
                    getattr(sim, _POSTSELECT[basis])(t.value, desired_value=bool(value))
                sim.do(stim.CircuitInstruction(name, [t]))
        else:
            sim.do(inst)
    assert m == len(records)
    assert not any(coins.values())
    return sim


@pytest.mark.parametrize("seed", range(40))
def test_random_circuits_replay_exactly_in_stim(seed):
    c = random_circuit(seed)
    p = compile_stim(c)
    assert p.num_records == c.num_measurements
    assert_steps_disjoint(p)
    engine, sched = NumpyEngine(), schedule(p)
    key = make_key(seed)
    for repetition in range(3):
        run = engine.run_tableau(p, sched, key, repetition=repetition)
        sim = replay(c, run.records, reset_coins(p, sched, key, repetition, False))
        ours = as_stim_inverse(run.tableau.restricted(c.num_qubits)).inverse()  # scratch qubits dropped
        assert ours.to_stabilizers(canonicalize=True) == sim.canonical_stabilizers(), (seed, repetition)


@pytest.mark.parametrize("seed", range(10))
def test_noisy_random_circuits_reference_sample_replays_in_stim(seed):
    c = random_circuit(100 + seed, noisy=True)
    p = compile_stim(c)
    assert_steps_disjoint(p)
    sched = schedule(p)
    run = NumpyEngine().run_tableau(p, sched, make_key(0), reference=True)
    replay(c.without_noise(), run.records, reset_coins(p, sched, make_key(0), 0, True))


@pytest.mark.parametrize("seed", range(6))
def test_noisy_random_circuits_sample_as_stim(seed):
    c = random_circuit(200 + seed, noisy=True)
    p = compile_stim(c)
    shots = 40_000
    bits, _ = sample_program(p, shots, seed)
    theirs = c.compile_sampler(seed=seed).sample(shots).T.astype(np.uint8)
    assert_rates_agree(bits, theirs, f"seed {seed}")
    # detection events and observable flips (Pauli targets included), and their pairs
    ours = QuasarqSimulator(seed=seed, device="cpu").sample_detectors(c, shots, append_observables=True)
    theirs = c.compile_detector_sampler(seed=seed).sample(shots, append_observables=True)
    assert ours.shape == theirs.shape
    if ours.shape[1]:
        assert_rates_agree(ours.T.astype(np.uint8), theirs.T.astype(np.uint8), f"events of seed {seed}")


def test_random_circuits_do_use_every_instruction():
    text = "\n".join(str(random_circuit(s, noisy=True)) for s in range(100, 120))
    text += "\n".join(str(random_circuit(s)) for s in range(40))
    for name in ["MPP", "MXX", "MYY", "MZZ", "MX", "MY", "MRX", "MRY", "RX", "RY", "SPP", "REPEAT",
                 "rec[-1]", "!", "XCZ", "DEPOLARIZE2", "PAULI_CHANNEL_2", "E(", "M(", "MPP(", "DETECTOR",
                 "OBSERVABLE_INCLUDE", "SHIFT_COORDS", "MPAD 1", "MPAD(", "HERALDED_ERASE(",
                 "HERALDED_PAULI_CHANNEL_1(", "X1*X1"]:
        assert name in text, name
    assert re.search(r"OBSERVABLE_INCLUDE\(\d\) rec\[-\d\] rec\[-\d\] !?[XYZ]\d", text)  # Pauli targets


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,named", [
    ("X_ERROR(0.1) 0\nELSE_CORRELATED_ERROR(0.2) Z1", "ELSE_CORRELATED_ERROR(0.2) Z1"),
    ("MPP X0*Z0", "MPP X0*Z0"),  # anti-Hermitian products: Stim's samplers refuse them too
    ("H 0\nMPP(0.1) Z1 Y0*X0", "MPP(0.1) Z1 Y0*X0"),
    ("MXX 0 1\nSPP_DAG Z2*Y2", "SPP_DAG Z2*Y2"),
])
def test_unsupported_instructions_are_named(text, named):
    with pytest.raises(UnsupportedOperationError) as info:
        compile_stim(stim.Circuit(text))
    message = str(info.value)
    assert named in message and "instruction" in message and "supported:" in message


def test_the_error_names_the_repeat_nesting():
    c = stim.Circuit("H 0\nREPEAT 3 {\n  M 0\n  REPEAT 2 {\n    H 0\n    MPP X0*Z0\n  }\n}")
    where = (r"instruction 1 of the body of the REPEAT 2 block at instruction 1 of the body of the REPEAT 3 "
             r"block at instruction 1")
    with pytest.raises(UnsupportedOperationError, match=where):
        compile_stim(c)


def test_feedback_before_any_measurement_is_refused():
    with pytest.raises(MeasurementKeyError, match="rec"):
        compile_stim(stim.Circuit("CX rec[-1] 0"))


# -- loops, steps, speed, caching -----------------------------------------------------------------


def test_steps_hold_disjoint_qubits_and_tick_opens_a_new_step():
    c = stim.Circuit("H 0 1 0\nCX 0 1 1 2\nM 2\nCX rec[-1] 3\nH 4\nTICK\nH 5")
    p = compile_stim(c)
    ins = p.instructions
    for step in np.unique(ins[:, STEP]):
        rows = ins[ins[:, STEP] == step]
        qs = [q for r in rows for q in (r[A], r[B]) if q >= 0]
        assert len(qs) == len(set(qs)), rows
    step_of = {(opcodes.OPCODES[r[OP]].name, int(r[A])): int(r[STEP]) for r in ins}
    assert step_of[("H", 4)] == step_of[("H", 1)]  # as soon as possible
    assert step_of[("X", 3)] > step_of[("M", 2)]  # feedback after the record
    assert step_of[("H", 5)] > max(v for k, v in step_of.items() if k != ("H", 5))  # TICK


def test_a_large_surface_code_compiles_fast_without_unrolling():
    c = generated("surface_code:rotated_memory_z", distance=25, rounds=25,
                  **dict.fromkeys(NOISE_KNOBS, 0.001))
    stim_circuit.clear_stim_cache()
    start = time.perf_counter()
    p = compile_stim(c)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed
    small = compile_stim(generated("surface_code:rotated_memory_z", distance=25, rounds=5,
                                   **dict.fromkeys(NOISE_KNOBS, 0.001)))
    assert p.num_instructions == small.num_instructions and len(p.loops) == 1  # the body is compiled once
    flat_rows = sum(len(inst.targets_copy()) for inst in c.flattened())
    assert p.num_instructions * 10 < flat_rows
    assert p.num_records == c.num_measurements and len(p.detectors) == c.num_detectors
    start = time.perf_counter()
    again = compile_stim(c)
    assert again is p and time.perf_counter() - start < 0.05


def test_the_cache_tells_apart_circuits_whose_text_is_the_same():
    a = stim.Circuit("X_ERROR(0.1) 0\nM 0")
    b = stim.Circuit("X_ERROR(0.1000000000000001) 0\nM 0")
    assert str(a) == str(b)
    pa, pb = compile_stim(a), compile_stim(b)
    assert pa.channels[0].probs[0] == 0.1 and pb.channels[0].probs[0] == 0.1000000000000001
    assert compile_stim(b.copy()) is pb  # a hit for an equal circuit


def test_the_cache_tells_apart_circuits_that_differ_only_in_their_qubits():
    """The cache's key leaves out num_qubits (a pass over every target in Stim): circuits of the same
    counts share a key (on other qubits, or noise variants of one code), each keeps its own Program
    (a hit must equal the circuit), the latest few of a key are kept."""
    from cirq_quasarq.compiler import stim_circuit

    variants = [stim.Circuit("H 0\nCX 0 1\nM 0 1"), stim.Circuit("H 4\nCX 4 9\nM 4 9")]
    variants += [stim.Circuit(f"H 0\nX_ERROR({p}) 1\nM 0 1") for p in (0.1, 0.2, 0.3)]
    programs = [compile_stim(c) for c in variants]
    assert (programs[0].num_qubits, programs[1].num_qubits) == (2, 10)
    assert [p.channels[0].probs[0] for p in programs[2:]] == [0.1, 0.2, 0.3]
    kept = variants[-stim_circuit._BUCKET:]  # the latest of the shared key
    assert all(compile_stim(c.copy()) is p for c, p in zip(variants[-len(kept):], programs[-len(kept):]))
    again = compile_stim(variants[0].copy())  # the oldest was dropped from its key: compiled again, equal
    assert again is not programs[0] and np.array_equal(again.instructions, programs[0].instructions)


def test_noise_variants_share_what_is_derived_and_sample_their_own_noise():
    """A sweep's circuits, compiled one by one, differ only in their probabilities: the later ones take
    the first one's `derived` (schedule, frame plan, linear map). Each samples its own noise, bit for
    bit what it gives compiled alone; a circuit that differs in anything else shares nothing."""
    from cirq_quasarq.compiler import stim_circuit

    def code(p, q=None):
        return generated("surface_code:rotated_memory_x", distance=3, rounds=3,
                         after_clifford_depolarization=p, before_measure_flip_probability=p if q is None else q)

    ps = (0.002, 0.3, 0.01, 0.3)
    alone = []
    for p in ps:
        stim_circuit.clear_stim_cache()
        alone.append(QuasarqSimulator(device="cpu", seed=9).sample_detectors(compile_stim(code(p)), 4096,
                                                                             separate_observables=True))
    stim_circuit.clear_stim_cache()
    programs = [compile_stim(code(p)) for p in ps]
    assert all(pr.derived is programs[0].derived for pr in programs) and programs[1] is programs[3]  # a hit
    for p, pr, expected in zip(ps, programs, alone):
        got = QuasarqSimulator(device="cpu", seed=9).sample_detectors(pr, 4096, separate_observables=True)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected)), p
    sim = QuasarqSimulator(device="cpu", seed=9)
    # the detection event rates follow each point's own noise
    rates = [float(np.mean(sim.sample_detectors(pr, 4096)[0])) for pr in programs]
    assert rates[1] > 5 * rates[0] and rates[1] > 2 * rates[2]
    # the same counts (one key of the cache) but other Paulis or other rows: nothing shared
    other = [stim.Circuit("X_ERROR(0.1) 0\nM 0"), stim.Circuit("Z_ERROR(0.1) 0\nM 0"),
             stim.Circuit("X_ERROR(0.1) 1\nM 1"), stim.Circuit("X_ERROR(0.2) 0\nM 0")]
    made = [compile_stim(c) for c in other]
    for pr in made:
        sim.sample_detectors(pr, 64)  # each fills its derived (or the one it shares)
    assert made[1].derived is not made[0].derived and made[2].derived is not made[0].derived
    assert made[3].derived is made[0].derived
    assert not made[3].differs_only_in_probabilities(made[1])
    noiseless = [compile_stim(stim.Circuit("H 0\nM 0")), compile_stim(stim.Circuit("H 0\nM 0\nTICK"))]
    assert noiseless[0].derived is not noiseless[1].derived


def test_importing_the_package_does_not_import_stim():
    code = "import sys, cirq_quasarq, cirq_quasarq.compiler; assert 'stim' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_same_circuit_object_again_is_not_recompiled_unless_changed():
    """A sampling loop passes one stim.Circuit object again and again: it gets the same Program
    (without printing the circuit to text); mutated in place, it gets the new circuit's Program."""
    c = stim.Circuit("H 0\nCX 0 1\nM 0 1")
    first = compile_stim(c)
    assert compile_stim(c) is first
    c.append("X", [1])
    c.append("M", [1])
    changed = compile_stim(c)
    assert changed is not first and changed.num_records == 3
    assert compile_stim(stim.Circuit("H 0\nCX 0 1\nM 0 1")) is first  # an equal circuit: the text cache


# -- whole instructions: the one-block path against the per-target path ----------------------------


def assert_programs_equal(p, q, what=""):
    """Every table of two Programs equal (instructions row for row, slots, channels, keys, annotations)."""
    assert np.array_equal(p.instructions, q.instructions), what
    assert (p.num_qubits, p.num_records, p.num_rand_slots) == (q.num_qubits, q.num_records, q.num_rand_slots), what
    assert np.array_equal(p.ext_qubits, q.ext_qubits) and np.array_equal(p.ext_paulis, q.ext_paulis), what
    assert [(c.arity, c.probs.tolist(), c.paulis.tolist()) for c in p.channels] == \
        [(c.arity, c.probs.tolist(), c.paulis.tolist()) for c in q.channels], what
    assert [(c.num_bits, c.matrix.tolist()) for c in p.confusions] == \
        [(c.num_bits, c.matrix.tolist()) for c in q.confusions], what
    assert [(c.refs.tolist(), c.table.tolist()) for c in p.conditions] == \
        [(c.refs.tolist(), c.table.tolist()) for c in q.conditions], what
    assert [vars(l) for l in p.loops] == [vars(l) for l in q.loops], what
    assert [(k.key, k.records.tolist()) for k in p.keys] == [(k.key, k.records.tolist()) for k in q.keys], what
    for mine, theirs in ((p.detectors, q.detectors), (p.observables, q.observables)):
        assert [(a.records.tolist(), a.coords, a.index) for a in mine] == \
            [(a.records.tolist(), a.coords, a.index) for a in theirs], what
    assert np.array_equal(p.moment_rows, q.moment_rows) and np.array_equal(p.moment_records, q.moment_records), what
    assert p.pauli_observables == q.pauli_observables, what


def _both(circuit):
    whole = stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit)
    per_target = stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_instructions=False).run(circuit)
    return whole, per_target


WHOLE_EDGE_CASES = [
    "H 0 0 1\nCX 0 1 1 2\nS 2",  # a qubit twice: per target
    "M !0 1 !2\nMX 0 !1\nMRY !2 0\nRX 1 2\nR 0\nM 0",
    "X_ERROR(0) 0 1\nH 0\nDEPOLARIZE2(0) 0 1\nCX 0 1",  # channels that never fire take no position
    "M(0.1) 0 1\nM(0) 2\nMX(0.2) !0",  # flip probabilities: per target
    "PAULI_CHANNEL_2(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0) 0 1\nH 0",  # one outcome: E
    "H 0\nTICK\nH 0 1\nREPEAT 3 {\n  CX 0 1\n  M 1\n  TICK\n  DEPOLARIZE1(0.1) 0 1\n}\nM 0",
    "H[tagged] 0 1\nM 0\nCX rec[-1] 1\nMPP X0*Z1\nE(0.1) X0 Y1",
    "X_ERROR(0.1) 0 1\nE(0.1) X0\nELSE_CORRELATED_ERROR(0.2) Z1 Z2\nX_ERROR(0.1) 3\nH 0 1",  # a chain
    "",
]


@pytest.mark.parametrize("text", WHOLE_EDGE_CASES)
def test_whole_instructions_equal_the_per_target_path_on_edge_cases(text):
    whole, per_target = _both(stim.Circuit(text))
    assert_programs_equal(whole, per_target, text)


@pytest.mark.parametrize("seed", range(30))
def test_whole_instructions_equal_the_per_target_path_on_random_circuits(seed):
    circuit = random_circuit(300 + seed, n=8, noisy=seed % 2 == 0)
    whole, per_target = _both(circuit)
    assert_programs_equal(whole, per_target, str(circuit))


@pytest.mark.parametrize("code", CODES)
def test_whole_instructions_equal_the_per_target_path_on_generated_codes(code):
    circuit = generated(code, distance=5, rounds=4)
    assert_programs_equal(*_both(circuit), code)


def test_whole_instructions_equal_the_per_target_path_on_the_paper_circuits():
    from benchmarks.random_clifford import paper_random_circuit_stim

    circuit = paper_random_circuit_stim(700, 12, seed=4)
    assert_programs_equal(*_both(circuit))


@pytest.mark.parametrize("pair", ["CZ rec[-1] rec[-2]", "CZ rec[-2] rec[-1]", "CX sweep[0] 1", "CY sweep[2] 0",
                                  "CZ sweep[0] 1", "CZ 1 sweep[3]", "XCZ 0 sweep[1]", "YCZ 1 sweep[0]",
                                  "CZ sweep[0] rec[-1]", "CZ sweep[0] sweep[1]"])
def test_sweep_controls_and_record_pairs_do_nothing(pair):
    """As in Stim's samplers (no sweep bits: all 0) and Stim itself (no phase between classical
    bits): the circuit samples, bit for bit, as it does without the pair, and as Stim's samplers."""
    body = "H 0\nCX 0 1\nX_ERROR(0.2) 0 1\nM 0 1\n{}\nH 1\nM 0 1\nDETECTOR rec[-1] rec[-3]\n"
    with_pair, without = stim.Circuit(body.format(pair)), stim.Circuit(body.format(""))
    for method in ("sample_measurements", "sample_detectors"):
        got = getattr(QuasarqSimulator(seed=4, device="cpu"), method)(with_pair, 2000)
        want = getattr(QuasarqSimulator(seed=4, device="cpu"), method)(without, 2000)
        np.testing.assert_array_equal(got, want)
    theirs = with_pair.compile_sampler(seed=1).sample(20000).mean(axis=0)
    ours = QuasarqSimulator(seed=5, device="cpu").sample_measurements(with_pair, 20000).mean(axis=0)
    assert np.all(np.abs(ours - theirs) < 0.03), (ours, theirs)
