"""Stim's semantics as the oracle over Stim's whole instruction set, on both engines.

Every name in `stim.gate_data()` is exercised here: a new Stim instruction fails
`test_every_stim_instruction_is_exercised` until someone writes its generator. For each
instruction, random circuits on a few qubits prepare a random stabilizer state (and a
few records), apply the instruction (repeated and inverted targets, flip probabilities, record
controls, alone, inside a REPEAT block and inside nested ones), measure every qubit in a random
basis, and declare detectors and observables over random records (several observable indices,
declared out of order, accumulated over several includes and loop iterations, one index never
included; coordinates shifted inside loops). Our records, detection events and observable flips
are compared with Stim's samplers: shapes and dtypes equal, every column exactly where Stim's
column is constant and within 6 sigma elsewhere; coordinates and counts equal. The same circuits
go through stimcirq's conversion to Cirq and our Cirq front end."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq import QuasarqSimulator  # noqa: E402
from cirq_quasarq.errors import UnsupportedOperationError  # noqa: E402

N = 5  # qubits of every test circuit
OUR_SHOTS, STIM_SHOTS = 4096, 20_000

FEEDBACK = {"CX": "ZX", "CY": "ZY", "CZ": "ZZ", "XCZ": "XZ", "YCZ": "YZ"}  # record on a Z side
MEASURE = {"M", "MX", "MY", "MR", "MRX", "MRY"}
PAIR_MEASURE = {"MXX", "MYY", "MZZ"}
RESET = {"R", "RX", "RY"}
NOISE_1 = {"X_ERROR", "Y_ERROR", "Z_ERROR", "DEPOLARIZE1"}
HERALDED = {"HERALDED_ERASE", "HERALDED_PAULI_CHANNEL_1"}


def _canonical_names():
    return sorted({g.name for g in stim.gate_data().values()})


def _aliases(name):
    return sorted(set(stim.gate_data(name).aliases) | {name})


class _Gen:
    """Random instruction lines for a circuit on N qubits (`records`: records written so far)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.records = 0

    def p(self, lo=0.1, hi=0.35):  # probabilities large enough that no random column looks constant
        return round(self.r.uniform(lo, hi), 3)

    def qubits(self, k):
        return [self.r.randrange(N) for _ in range(k)]

    def pairs(self, k):
        out = []
        for _ in range(k):
            a, b = self.r.sample(range(N), 2)
            out += [a, b]
        return out

    def inv(self, q):
        return f"!{q}" if self.r.random() < 0.3 else str(q)

    def product(self, size, inverted=True):
        qs = self.r.sample(range(N), size)
        return "*".join((self.inv("") if inverted else "") + self.r.choice("XYZ") + str(q) for q in qs)

    def rec(self):
        return f"rec[-{self.r.randint(1, min(self.records, 4))}]"

    def scramble(self):
        """Three layers of random Cliffords on all qubits: a random stabilizer state from any input
        (drawn from this generator's seed, so every run builds the same circuits)."""
        lines = []
        for _ in range(3):
            for q in range(N):
                lines.append(f"{self.r.choice(['H', 'S', 'SQRT_X', 'H_YZ', 'C_XYZ', 'S_DAG'])} {q}")
            a, b, c, d = self.r.sample(range(N), 4)
            lines.append(f"{self.r.choice(['CX', 'CZ', 'CY', 'ISWAP'])} {a} {b} {c} {d}")
        return lines

    def measure_some(self):
        qs = self.r.sample(range(N), 2)
        self.records += 2
        return [f"{self.r.choice(['M', 'MX', 'MY'])} {self.inv(qs[0])} {self.inv(qs[1])}"]

    def line(self, name):
        """One line applying instruction `name` (under a random alias) to random targets."""
        r = self.r
        alias = r.choice(_aliases(name))
        gate = stim.gate_data(name)
        if name in FEEDBACK and r.random() < 0.5:
            side = FEEDBACK[name]
            if side[1] == "Z" and (side[0] != "Z" or r.random() < 0.5):
                return f"{alias} {r.randrange(N)} {self.rec()}"
            return f"{alias} {self.rec()} {r.randrange(N)}"
        if gate.is_unitary and name not in ("SPP", "SPP_DAG"):
            return f"{alias} " + " ".join(map(str, self.qubits(r.randint(1, 4)) if gate.is_single_qubit_gate
                                               else self.pairs(r.randint(1, 3))))
        if name in ("SPP", "SPP_DAG"):
            return f"{alias} " + " ".join(self.product(r.randint(1, 3)) for _ in range(r.randint(1, 2)))
        arg = f"({self.p()})" if r.random() < 0.5 else ""
        if name in MEASURE:
            qs = self.qubits(r.randint(1, 4))
            self.records += len(qs)
            return f"{alias}{arg} " + " ".join(self.inv(q) for q in qs)
        if name in PAIR_MEASURE:
            qs = self.pairs(r.randint(1, 2))
            self.records += len(qs) // 2
            return f"{alias}{arg} " + " ".join(self.inv(q) for q in qs)
        if name == "MPP":
            k = r.randint(1, 3)
            self.records += k
            return f"{alias}{arg} " + " ".join(self.product(r.randint(1, 3)) for _ in range(k))
        if name == "MPAD":
            bits = [r.randint(0, 1) for _ in range(r.randint(1, 4))]
            self.records += len(bits)
            return f"{alias}{arg} " + " ".join(map(str, bits))
        if name in HERALDED:  # repeated and inverted targets (Stim does not invert a herald)
            qs = self.qubits(r.randint(1, 3))
            self.records += len(qs)
            probs = [self.p()] if name == "HERALDED_ERASE" else [self.p(0.02, 0.2) for _ in range(4)]
            return f"{alias}({', '.join(map(str, probs))}) " + " ".join(self.inv(q) for q in qs)
        if name in RESET:
            return f"{alias} " + " ".join(map(str, self.qubits(r.randint(1, 3))))
        if name in NOISE_1:
            return f"{alias}({self.p()}) " + " ".join(map(str, self.qubits(r.randint(1, 3))))
        if name == "DEPOLARIZE2":
            return f"{alias}({self.p()}) " + " ".join(map(str, self.pairs(r.randint(1, 2))))
        if name == "PAULI_CHANNEL_1":
            return f"{alias}({self.p(0.05, 0.2)}, {self.p(0.05, 0.2)}, {self.p(0.05, 0.2)}) {r.randrange(N)}"
        if name == "PAULI_CHANNEL_2":
            args = ", ".join(str(self.p(0.0, 0.05)) for _ in range(15))
            return f"{alias}({args}) " + " ".join(map(str, self.pairs(1)))
        if name == "E":
            return f"{alias}({self.p()}) {self.product(r.randint(1, 3), inverted=False).replace('*', ' ')}"
        if name == "ELSE_CORRELATED_ERROR":  # a chain: E, then links on other or the same qubits
            links = [f"E({self.p()}) {self.product(r.randint(1, 3), inverted=False).replace('*', ' ')}"]
            for _ in range(r.randint(1, 3)):
                links.append(f"{alias}({self.p(0.2, 0.5)}) "
                             f"{self.product(r.randint(1, 3), inverted=False).replace('*', ' ')}")
            return "\n".join(links)
        if name in ("I_ERROR", "II_ERROR", "I", "II"):
            targets = self.qubits(2) if name in ("I_ERROR", "I") else self.pairs(1)
            return f"{alias}{f'({self.p()})' if name.endswith('ERROR') else ''} " + " ".join(map(str, targets))
        if name == "DETECTOR":
            return self.detector()
        if name == "OBSERVABLE_INCLUDE":
            return self.include(r.randrange(4), paulis=True)
        if name == "SHIFT_COORDS":
            return f"{alias}({r.randint(0, 2)}, {r.choice([0.5, 1, 2])})"
        if name == "QUBIT_COORDS":
            return f"{alias}({r.randint(0, 3)}, {r.randint(0, 3)}) {r.randrange(N)}"
        if name == "TICK":
            return "TICK"
        if name == "REPEAT":
            return "\n".join(["REPEAT 2 {"] + self.measure_some() + ["    " + l for l in self.scramble()] + ["}"])
        raise AssertionError(f"no generator for {name}")

    def detector(self):
        coords = ", ".join(str(self.r.randint(0, 5)) for _ in range(self.r.randint(0, 3)))
        recs = sorted({self.rec() for _ in range(self.r.randint(1, 3))})
        return f"DETECTOR({coords}) " + " ".join(recs) if coords else "DETECTOR " + " ".join(recs)

    def include(self, k, paulis=False):
        """Records, and with `paulis` Pauli targets too (perhaps alone, repeated or inverted)."""
        targets = sorted({self.rec() for _ in range(self.r.randint(0 if paulis else 1, 2))})
        if paulis:
            targets += [self.inv(self.r.choice("XYZ") + str(q)) for q in self.qubits(self.r.randint(1, 3))]
        return f"OBSERVABLE_INCLUDE({k}) " + " ".join(targets)


def differential_circuit(name: str, seed: int, shape: str) -> stim.Circuit:
    """Random state and records, instruction `name` (alone, in a loop, in nested loops), every qubit
    measured in a random basis, detectors and observables over the records."""
    g = _Gen(zlib.crc32(f"{name} {seed} {shape}".encode()))
    lines = g.scramble() + g.measure_some() + g.scramble()
    body = [g.line(name) for _ in range(2)]
    if shape == "flat":
        lines += body
    elif shape == "loop":
        inner = body + g.scramble() + g.measure_some() + [g.detector(), g.include(2), "SHIFT_COORDS(1, 0.5)"]
        lines += ["REPEAT 3 {"] + ["    " + l for l in inner] + ["}"]
    else:  # nested loops, annotations at both depths
        inner = body + g.scramble()
        outer = (["REPEAT 2 {"] + ["    " + l for l in inner] + ["}"] + g.measure_some()
                 + [g.include(0), "SHIFT_COORDS(0, 1)", g.detector()])
        lines += ["REPEAT 2 {"] + ["    " + l for l in outer] + ["}"]
    final = [f"{g.r.choice(['M', 'MX', 'MY'])} {g.inv(q)}" for q in range(N)]
    g.records += N
    lines += final
    lines += [g.detector() for _ in range(6)]
    lines += [g.include(k) for k in g.r.sample([3, 0, 3, 2, 0], 5)]  # out of order, accumulated, 1 never
    return stim.Circuit("\n".join(lines))


def assert_same_columns(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    """Every column exactly equal where Stim's is constant, within 6 sigma of Stim's rate elsewhere."""
    assert ours.dtype == theirs.dtype and ours.shape[1:] == theirs.shape[1:], (what, ours.dtype, ours.shape, theirs.shape)
    mine, stims = ours.mean(axis=0), theirs.mean(axis=0)
    constant = (stims == 0) | (stims == 1)
    bad = np.flatnonzero(constant & (mine != stims))
    assert not len(bad), f"{what}: columns {bad.tolist()} are constant {stims[bad].tolist()} in Stim, ours {mine[bad].tolist()}"
    pooled = (mine * len(ours) + stims * len(theirs)) / (len(ours) + len(theirs))
    sigma = np.sqrt(np.maximum(pooled * (1 - pooled), 1e-12) * (1 / len(ours) + 1 / len(theirs)))
    off = np.flatnonzero(~constant & (np.abs(mine - stims) > 6 * sigma))
    assert not len(off), f"{what}: columns {off.tolist()} ours {mine[off].tolist()} Stim {stims[off].tolist()}"


def test_every_stim_instruction_is_exercised():
    unknown = []
    g = _Gen(0)
    g.records = 4
    for name in _canonical_names():
        try:
            stim.Circuit(g.line(name))
        except AssertionError:
            unknown.append(name)
    assert not unknown, f"Stim instructions not exercised here: {unknown}"


@pytest.mark.parametrize("name", _canonical_names())
@pytest.mark.parametrize("shape", ["flat", "loop", "nested"])
def test_each_instruction_samples_as_stim(device, name, shape):
    circuit = differential_circuit(name, 1, shape)
    sim = QuasarqSimulator(seed=7, device=device)
    what = f"{name} ({shape}) on {device}:\n{circuit}"
    assert_same_columns(sim.sample_measurements(circuit, OUR_SHOTS),
                        circuit.compile_sampler(seed=3).sample(STIM_SHOTS), f"records of {what}")
    dets, obs = sim.sample_detectors(circuit, OUR_SHOTS, separate_observables=True)
    sdets, sobs = circuit.compile_detector_sampler(seed=3).sample(STIM_SHOTS, separate_observables=True)
    assert_same_columns(dets, sdets, f"detection events of {what}")
    assert_same_columns(obs, sobs, f"observable flips of {what}")
    assert sim.detector_coordinates(circuit) == circuit.get_detector_coordinates(), what


@pytest.mark.parametrize("name", _canonical_names())
def test_each_instruction_through_stimcirqs_conversion_samples_as_stim(name):
    """The same circuits as a Cirq circuit (stimcirq's conversion) through our Cirq front end."""
    stimcirq = pytest.importorskip("stimcirq")
    circuit = differential_circuit(name, 2, "loop")
    try:
        converted = stimcirq.stim_circuit_to_cirq_circuit(circuit)
    except (TypeError, ValueError, NotImplementedError) as exc:  # stimcirq's gaps are not ours
        pytest.skip(f"stimcirq cannot convert {name}: {exc}")
    sim = QuasarqSimulator(seed=9, device="cpu")
    dets, obs = sim.sample_detectors(converted, OUR_SHOTS, separate_observables=True)
    sdets, sobs = circuit.compile_detector_sampler(seed=4).sample(STIM_SHOTS, separate_observables=True)
    assert_same_columns(dets, sdets, f"detection events of {name} via Cirq:\n{circuit}")
    assert_same_columns(obs, sobs, f"observable flips of {name} via Cirq:\n{circuit}")


@pytest.mark.parametrize("name", ["M", "MPP", "DETECTOR", "OBSERVABLE_INCLUDE", "REPEAT"])
def test_shapes_and_dtypes_equal_stims(name):
    circuit = differential_circuit(name, 3, "nested")
    sim = QuasarqSimulator(seed=1, device="cpu")
    sampler, dsampler = circuit.compile_sampler(seed=1), circuit.compile_detector_sampler(seed=1)
    for packed in (False, True):
        ours, theirs = sim.sample_measurements(circuit, 10, bit_packed=packed), sampler.sample(10, bit_packed=packed)
        assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype), (name, packed)
        for kwargs in ({}, {"append_observables": True}, {"separate_observables": True}):
            ours = sim.sample_detectors(circuit, 10, bit_packed=packed, **kwargs)
            theirs = dsampler.sample(10, bit_packed=packed, **kwargs)
            ours, theirs = (ours, theirs) if isinstance(theirs, tuple) else ((ours,), (theirs,))
            assert [(a.shape, a.dtype) for a in ours] == [(b.shape, b.dtype) for b in theirs], (name, packed, kwargs)


@pytest.mark.parametrize("text", [
    "OBSERVABLE_INCLUDE(2) rec[-1]",  # a lone index k: k + 1 observables, the others zero
    "OBSERVABLE_INCLUDE(0) rec[-1]\nOBSERVABLE_INCLUDE(2) rec[-2]\nOBSERVABLE_INCLUDE(0) rec[-3]",
    "REPEAT 3 {\n X_ERROR(0.2) 0\n M 0\n OBSERVABLE_INCLUDE(1) rec[-1]\n OBSERVABLE_INCLUDE(0) rec[-1]\n}",
    "OBSERVABLE_INCLUDE(1) rec[-1] rec[-1]\nOBSERVABLE_INCLUDE(1) rec[-2]\nOBSERVABLE_INCLUDE(1) rec[-2]",
    "REPEAT 2 {\n DETECTOR(1) rec[-1]\n DETECTOR(2) rec[-2]\n SHIFT_COORDS(1)\n}",  # a loop with no record
])
def test_observables_follow_their_index(device, text):
    circuit = stim.Circuit("X_ERROR(0.3) 0 1 2\nM 0 1 2\n" + text)
    sim = QuasarqSimulator(seed=5, device=device)
    dets, obs = sim.sample_detectors(circuit, OUR_SHOTS, separate_observables=True)
    sdets, sobs = circuit.compile_detector_sampler(seed=5).sample(STIM_SHOTS, separate_observables=True)
    assert obs.shape[1] == circuit.num_observables and dets.shape[1] == circuit.num_detectors
    assert_same_columns(obs, sobs, text)
    assert_same_columns(dets, sdets, text)
    assert sim.detector_coordinates(circuit) == circuit.get_detector_coordinates()


@pytest.mark.parametrize("text", ["H 0\nTICK\nS 1", "X_ERROR(0.1) 0\nDETECTOR", "DETECTOR\nOBSERVABLE_INCLUDE(1)",
                                  "", "REPEAT 3 {\n H 0\n}"])
def test_circuits_without_measurements_sample_empty_records(device, text):
    circuit = stim.Circuit(text)
    sim = QuasarqSimulator(seed=5, device=device)
    for packed in (False, True):
        ours, theirs = sim.sample_measurements(circuit, 100, bit_packed=packed), circuit.compile_sampler().sample(
            100, bit_packed=packed)
        assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype)
        ours = sim.sample_detectors(circuit, 100, append_observables=True, bit_packed=packed)
        theirs = circuit.compile_detector_sampler().sample(100, append_observables=True, bit_packed=packed)
        assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype) and not ours.any()


CHAINS = [
    "E(0.2) X0\nELSE_CORRELATED_ERROR(0.3) X1\nELSE_CORRELATED_ERROR(0.4) X2 X3",  # later links elsewhere
    "E(0.3) X0\nELSE_CORRELATED_ERROR(0.5) X0\nELSE_CORRELATED_ERROR(0.5) Y0 X1",  # a qubit in several links
    "E(0.3) X0 Z1\nELSE_CORRELATED_ERROR(0.4) Z1 Y2 X1",  # a qubit twice in a link (its letters multiply)
    "E(0.4) X0 X0\nELSE_CORRELATED_ERROR(0.5) X1",  # an identity link still excludes the later ones
    "E(1) X0\nELSE_CORRELATED_ERROR(0.5) X1\nELSE_CORRELATED_ERROR(0.3) X2",  # p = 1: never an else
    "E(0) X0\nELSE_CORRELATED_ERROR(0.3) X1\nELSE_CORRELATED_ERROR(0) X2\nELSE_CORRELATED_ERROR(1) X3",
    "E(0.2) X0\nELSE_CORRELATED_ERROR(0.2) X1\nE(0.3) X1\nELSE_CORRELATED_ERROR(0.4) X2",  # two chains
    "E(0.25) X1 X2\nELSE_CORRELATED_ERROR(0.25) Z1\nCORRELATED_ERROR(0.5) X3\nELSE_CORRELATED_ERROR(0.5) X4",
]


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("loop", [False, True])
def test_correlated_error_chains_sample_as_stim(device, chain, loop):
    """E / ELSE_CORRELATED_ERROR chains, each one draw over its links, against Stim's samplers."""
    body = "H 1\n" + chain + "\nM 0 1 2 3 4\nDETECTOR rec[-1] rec[-2]\nDETECTOR rec[-3]\nOBSERVABLE_INCLUDE(0) rec[-4] rec[-5]"
    if loop:
        body = "REPEAT 3 {\n" + body + "\nR 0 1 2 3 4\n}"
    circuit = stim.Circuit("H 1\n" + body)  # qubit 1 in |0> or |+>: a Z link flips it or not
    sim = QuasarqSimulator(seed=11, device=device)
    assert_same_columns(sim.sample_measurements(circuit, OUR_SHOTS),
                        circuit.compile_sampler(seed=2).sample(STIM_SHOTS), f"records of\n{circuit}")
    dets, obs = sim.sample_detectors(circuit, OUR_SHOTS, separate_observables=True)
    sdets, sobs = circuit.compile_detector_sampler(seed=2).sample(STIM_SHOTS, separate_observables=True)
    assert_same_columns(dets, sdets, f"detection events of\n{circuit}")
    assert_same_columns(obs, sobs, f"observable flips of\n{circuit}")


def test_a_chain_is_one_exclusive_draw():
    """Joint outcomes, not only rates: no two links of a chain ever fire in the same shot."""
    circuit = stim.Circuit("E(0.3) X0\nELSE_CORRELATED_ERROR(0.4) X1\nELSE_CORRELATED_ERROR(0.5) X2\nM 0 1 2")
    ours = QuasarqSimulator(seed=3, device="cpu").sample_measurements(circuit, OUR_SHOTS)
    theirs = circuit.compile_sampler(seed=3).sample(STIM_SHOTS)
    assert (ours.sum(axis=1) <= 1).all() and (theirs.sum(axis=1) <= 1).all()
    patterns = lambda bits: np.stack([(bits == v).all(axis=1) for v in np.eye(3, dtype=bool)] +  # noqa: E731
                                     [~bits.any(axis=1)], axis=1)
    assert_same_columns(patterns(ours), patterns(theirs), "one-hot outcomes")


@pytest.mark.parametrize("text", [
    "ELSE_CORRELATED_ERROR(0.25) X1",  # nothing before it
    "H 0\nELSE_CORRELATED_ERROR(0.25) X1",  # after a gate
    "E(0.2) X0\nTICK\nELSE_CORRELATED_ERROR(0.25) X1",  # not directly after its E
    "E(0.2) X0\nX_ERROR(0.1) 0\nELSE_CORRELATED_ERROR(0.25) X1",  # another channel between
    "E(0.2) X0\nREPEAT 2 {\n ELSE_CORRELATED_ERROR(0.25) X1\n}",  # across a block's edge
    "REPEAT 2 {\n E(0.2) X0\n}\nELSE_CORRELATED_ERROR(0.25) X1",
])
def test_else_without_its_e_is_refused_as_stims_error_model_refuses_it(text):
    circuit = stim.Circuit("M 0\n" + text)
    with pytest.raises(ValueError, match="ELSE_CORRELATED_ERROR"):
        circuit.detector_error_model()
    with pytest.raises(UnsupportedOperationError, match=r"ELSE_CORRELATED_ERROR\(0.25\) X1.*must directly follow"):
        QuasarqSimulator(device="cpu").sample_measurements(circuit, 1)

