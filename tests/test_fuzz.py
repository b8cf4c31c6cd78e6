"""Differential fuzzing: random circuits over the whole supported set (tests/fuzz_strategies.py)
against independent oracles and against our other engines.

- stim, exactly: `simulate` (tableau mode) is replayed in a stim.TableauSimulator, each random
  collapse forced to our coin, each Pauli channel applying the Paulis our draw picked, each
  confusion map our draw: every record must come out the same, and the final stabilizer group;
- stim, statistically: marginals and parities of `run` against stim's sampler on the stimcirq
  conversion, at 6 sigma (where stimcirq cannot express a circuit exactly — confusion maps,
  controls of non-Paulis or on several bits — against our tableau mode shot by shot, itself held
  to stim by the exact replay); the stim.Circuit input path likewise;
- Cirq: `final_state_vector` of noiseless, measurement-free circuits equals Cirq's, global
  phase included;
- engines: NumPy with its fast paths against the plain walks (and with loops always folded, in
  one-word chunks; a first call of 1 to 64 shots with its frames in the reference run against
  frame mode; the reference from the measured rows wherever they apply against the full run),
  and NumPy against CUDA (`-m gpu`), identical bits for the same seed;
- a mutation check: each comparison reports a circuit with one extra X or H.

CI runs a derandomized profile (fixed examples, about 50 s on two cores); `--fuzz-long` runs
LONG_FACTOR times as many random examples, not derandomized (a failure prints the seed blob for
@reproduce_failure): `pytest --fuzz-long tests/test_fuzz.py` (everything, about 25 minutes on two
cores), `pytest -m gpu --fuzz-long tests/test_fuzz.py` (NumPy against CUDA, on the GPU machine).

Bugs found are at the end, minimised, as strict xfails; the properties keep clear of them (each
place says which), so that the fuzzing goes on finding new ones.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Tuple

import cirq
import numpy as np
import pytest

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

# stimcirq's own converter with each record's key (what stimcirq.StimSampler uses), so that stim can
# be sampled with a seed and its records keyed as Cirq keys them.
from stimcirq._cirq_to_stim import cirq_circuit_to_stim_data

from cirq_quasarq import QuasarqSimulator, errors
from cirq_quasarq.core import opcodes
from cirq_quasarq.core.draws import channel_masks, coin, confusion_values, noise_targets
from cirq_quasarq.core.program import AUX, COND, FLAG_INVERT, FLAGS, OP, RAND, REC, A, B, Program
from cirq_quasarq.engines import NumpyEngine, branching, cuda_available
from cirq_quasarq.results import last_measurements, records_from_packed, unpack_records
from cirq_quasarq.schedule import Schedule, schedule
from cirq_quasarq.schedule.walk import assignment_index, condition_refs, walk
from cirq_quasarq.simulator import _draw_key, _parse_seed

from .fuzz_strategies import SMALL_PROBABILITIES, circuits
from .replay import as_stim_inverse, replay_in_stim

# -- profiles ------------------------------------------------------------------------------------------------

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
           HealthCheck.filter_too_much]
CI_PROFILE = dict(deadline=None, derandomize=True, database=None, print_blob=True, suppress_health_check=_HEALTH)
LONG_PROFILE = dict(deadline=None, derandomize=False, database=None, print_blob=True, suppress_health_check=_HEALTH)
LONG_FACTOR = 40  # --fuzz-long: this many times the CI examples, drawn at random

SIGMAS = 6.0
SHOTS = 2048  # run() and stim's sampler
TABLEAU_SHOTS = 192  # our tableau mode shot by shot (the oracle where stim cannot express a circuit)
SEEDS = st.integers(0, 2**32 - 1)


@pytest.fixture
def fuzz(request):
    """fuzz(check, strategy, examples): runs `check` on `examples` drawn values (CI profile), or
    on LONG_FACTOR times as many random ones with --fuzz-long."""
    long = bool(request.config.getoption("--fuzz-long", default=False))

    def run(check, strategy, examples: int) -> None:
        profile = LONG_PROFILE if long else CI_PROFILE
        settings(max_examples=examples * (LONG_FACTOR if long else 1), **profile)(given(strategy)(check))()

    return run


# Messages of the compiler's documented limits on reading keys across loops (compiler/keys.py): a
# drawn circuit that reaches one is rejected, as the documented UnsupportedOperationError.
DOCUMENTED_LIMITS = ("measures it again later in its body", "across a loop", "re-measure it in a way",
                     "(inside a loop) reads key")


def admissible(circuit: cirq.AbstractCircuit) -> Program:
    """The compiled circuit; rejects the example where the compiler names a documented limit."""
    try:
        return QuasarqSimulator(device="cpu").compile(circuit)
    except errors.UnsupportedOperationError as error:
        if any(limit in str(error) for limit in DOCUMENTED_LIMITS):
            reject()
        raise


# -- exact replay in stim ------------------------------------------------------------------------------------


_PAULI = {(1, 0): "X", (1, 1): "Y", (0, 1): "Z"}


def replay_all_in_stim(program: Program, sched: Schedule, key, repetition: int = 0
                       ) -> Tuple[np.ndarray, stim.TableauSimulator]:
    """Tableau mode once more, with stim holding the state: what tests/replay.py does for gates and
    collapses, extended to classical control, Pauli channels, confusion maps and inverted records.

    Randomness is ours (the draws of core.draws for this key and repetition); everything else is
    stim's: a collapse is random exactly when stim says so (then forced to our coin), a
    deterministic outcome is stim's, a condition reads the records written so far. Returns the
    records and the simulator after the last instruction."""
    sim = stim.TableauSimulator()
    sim.set_num_qubits(program.num_qubits)
    records = np.zeros(program.num_records, dtype=np.uint8)
    word, lane = repetition // 64, repetition % 64
    for step in walk(program, sched):
        for row in sched.instructions[step.start : step.end]:
            if row[COND] >= 0:
                table = program.conditions[int(row[COND])].table
                if not table[assignment_index(records[condition_refs(program, int(row[COND]), step)])]:
                    continue
            name, kind, q = opcodes.OPCODES[row[OP]].name, opcodes.KIND[row[OP]], int(row[A])
            slot = int(row[RAND]) + step.rand_shift
            if kind == opcodes.Kind.UNITARY:
                if name != "I":
                    sim.do(stim.Circuit(f"{name} {q}" + (f" {int(row[B])}" if row[B] >= 0 else "")))
            elif name in ("M", "MR", "R"):
                if sim.peek_z(q) == 0:  # random in stim: our coin decides
                    sim.postselect_z(q, desired_value=bool(coin(key, slot, repetition)))
                outcome = int(sim.measure(q))
                if name != "R":
                    records[int(row[REC]) + step.rec_shift] = outcome ^ (int(row[FLAGS]) & FLAG_INVERT)
                if name != "M":
                    sim.reset(q)
            elif kind == opcodes.Kind.NOISE:
                xm, zm = channel_masks(key, program.channels[int(row[AUX])], np.array([slot]), word, 1)
                for j, t in enumerate(noise_targets(program, row[None])[0]):
                    x, z = int(xm[j, 0, 0] >> np.uint64(lane)) & 1, int(zm[j, 0, 0] >> np.uint64(lane)) & 1
                    if x or z:
                        sim.do(stim.Circuit(f"{_PAULI[x, z]} {int(t)}"))
            elif kind == opcodes.Kind.RECORD_NOISE:
                confusion = program.confusions[int(row[AUX])]
                first, k = int(row[REC]) + step.rec_shift, confusion.num_bits
                true = int("".join(str(int(b)) for b in records[first : first + k]), 2)
                got = int(confusion_values(key, confusion.matrix, slot, np.array([repetition]), np.array([true]))[0])
                records[first : first + k] = [(got >> (k - 1 - i)) & 1 for i in range(k)]
            else:
                raise NotImplementedError(name)
    return records, sim


def _stabilizers(inverse_tableau):
    return as_stim_inverse(inverse_tableau).inverse().to_stabilizers(canonicalize=True)


def _plain(program: Program) -> bool:
    """A program that tests/replay.py replays as it is (no control, noise, confusion, inversion)."""
    ins = program.instructions
    kinds = opcodes.KIND[ins[:, OP]] if len(ins) else np.zeros(0)
    return not ((ins[:, COND] >= 0).any() or (ins[:, FLAGS] & FLAG_INVERT).any()
                or np.isin(kinds, [opcodes.Kind.NOISE, opcodes.Kind.RECORD_NOISE]).any())


def assert_replays(ours: Program, reference: Program, key, repetition: int, engine=None) -> None:
    """Our tableau-mode run of `ours` against stim replaying `reference` with the same draws: the
    same records and the same final stabilizer group."""
    engine = engine or NumpyEngine()
    run = engine.run_tableau(ours, schedule(ours), key, repetition=repetition)
    sched = schedule(reference)
    records, sim = replay_all_in_stim(reference, sched, key, repetition)
    np.testing.assert_array_equal(run.records, records, err_msg="records differ from stim's replay")
    assert _stabilizers(run.tableau) == sim.canonical_stabilizers(), "final stabilizer group differs from stim's"
    if _plain(reference):  # tests/replay.py's replay (postselected on our records) agrees
        plain = replay_in_stim(reference, sched, key, run.records, repetition)
        assert _stabilizers(run.tableau) == plain.canonical_stabilizers()


def check_simulate_replays_in_stim(drawn) -> None:
    (circuit, _), seed, repetition = drawn
    admissible(circuit)
    sim = QuasarqSimulator(seed=seed, device="cpu")
    trial = sim.simulate(circuit)
    program = sim.compile(circuit)
    # simulate() is one tableau-mode run with the first key the seed gives: the same records and state.
    key = _draw_key(_parse_seed(seed))
    run = NumpyEngine().run_tableau(program, schedule(program), key)
    want = last_measurements(program, run.records)
    assert sorted(trial.measurements) == sorted(want)
    for k, bits in want.items():
        np.testing.assert_array_equal(trial.measurements[k], bits, err_msg=k)
    assert _stabilizers(trial.final_state.inverse_tableau) == _stabilizers(run.tableau)
    # ... and stim agrees, on that run and on another repetition (other lanes of the noise words).
    for r in (0, repetition):
        assert_replays(program, program, key, r)
    stim_circuit = stim_form(circuit)
    if stim_circuit is not None:  # the stim.Circuit input path, replayed the same way
        stim_program = sim.compile(stim_circuit)
        assert_replays(stim_program, stim_program, key, repetition)


def test_simulate_replays_exactly_in_stim(fuzz):
    fuzz(check_simulate_replays_in_stim, st.tuples(circuits(), SEEDS, st.integers(1, 200)), examples=100)


def test_simulate_replays_deep_loops_and_controls(fuzz):
    strategy = st.tuples(circuits(max_qubits=3, max_moments=4, noise=False), SEEDS, st.integers(1, 200))
    fuzz(check_simulate_replays_in_stim, strategy, examples=50)


# -- statistics against stim's sampler ----------------------------------------------------------------------


# How stimcirq fails on what it cannot convert (its loop conversion also trips over qubit maps with a
# KeyError; stim refuses a feedback before the first measurement with an IndexError).
_STIMCIRQ_FAILURES = (TypeError, ValueError, NotImplementedError, KeyError, IndexError)


def _stim_converts(op: cirq.Operation) -> bool:
    try:
        stimcirq.cirq_circuit_to_stim_circuit(cirq.Circuit(op))
    except _STIMCIRQ_FAILURES:
        return False
    return True


_TO_Z = {cirq.X: [cirq.H], cirq.Y: [cirq.S**-1, cirq.H], cirq.Z: []}  # basis changes to Z


def _parity_measurement(op: cirq.Operation):
    """A Pauli product measurement as basis changes, CNOTs onto the first qubit, one Z measurement
    and the inverse (stimcirq's MPP conversion announces one bit per qubit for its key)."""
    gate = op.gate
    obs = gate.observable()
    qubits = [q for q, p in zip(op.qubits, obs) if p != cirq.I]
    change = [g.on(q) for q, p in zip(op.qubits, obs) if p != cirq.I for g in _TO_Z[p]]
    change += [cirq.CNOT(q, qubits[0]) for q in qubits[1:]]
    invert = (complex(obs.coefficient).real < 0,)
    return change + [cirq.measure(qubits[0], key=gate.mkey, invert_mask=invert)] + list(cirq.inverse(change))


def _as_stim_gates(op: cirq.Operation, _=None):
    """An operation stimcirq does not convert, if it is a Clifford unitary, as stim's gates (via
    stim's own tableau of its unitary); a Pauli product measurement as a parity measurement; any
    other operation as it is."""
    if isinstance(op.gate, cirq.PauliMeasurementGate) and len(op.qubits) > 1:
        return _parity_measurement(op)
    if isinstance(op, cirq.CircuitOperation) or _stim_converts(op) or not cirq.has_unitary(op):
        return op
    if not op.qubits:  # a global phase
        return []
    tableau = stim.Tableau.from_unitary_matrix(cirq.unitary(op), endian="big")
    gates = stimcirq.stim_circuit_to_cirq_circuit(tableau.to_circuit("elimination"))
    return gates.transform_qubits(lambda q: op.qubits[q.x]).all_operations()


def oracle_circuit(circuit: cirq.AbstractCircuit, unroll: bool = True) -> cirq.Circuit:
    """The circuit for stimcirq: its loops unrolled by Cirq itself (`unroll`: stimcirq's own loop
    conversion misplaces qubits of CircuitOperations with a qubit map and feedback offsets), and
    every Clifford gate stimcirq lacks (MatrixGate, PhasedXPow, shifted Pow gates, ...) rewritten
    as stim's gates: the same channel, up to global phase."""
    if unroll:
        circuit = cirq.unroll_circuit_op(circuit, deep=True, tags_to_check=None)
    return cirq.map_operations(circuit, _as_stim_gates, deep=True)


def stim_form(circuit: cirq.AbstractCircuit) -> Optional[stim.Circuit]:
    """stimcirq's conversion of the circuit with its loops as REPEAT blocks, to test the stim.Circuit
    input path; None where stimcirq fails or makes a circuit stim refuses. (Any valid stim circuit
    serves: ours is compared with stim on the same stim.Circuit.)"""
    try:
        converted = stimcirq.cirq_circuit_to_stim_circuit(oracle_circuit(circuit, unroll=False))
        converted.compile_sampler()
    except _STIMCIRQ_FAILURES:
        return None
    return converted


def stim_records(circuit: cirq.AbstractCircuit, shots: int, seed: int) -> Optional[Dict[str, np.ndarray]]:
    """Cirq-shaped records {key: [shots, instances, bits]} sampled by stim (as stimcirq.StimSampler
    does, but seeded), or None where stimcirq cannot convert the circuit."""
    oracle = oracle_circuit(circuit)
    try:
        converted, key_ranges = cirq_circuit_to_stim_data(oracle, flatten=True)
    except _STIMCIRQ_FAILURES:
        return None
    samples = converted.compile_sampler(seed=seed).sample(shots).astype(np.int8)
    columns: Dict[str, list] = {}
    start = 0
    for key, width in key_ranges:
        columns.setdefault(key, []).append(samples[:, start : start + width])
        start += width
    return {key: np.stack(parts, axis=1) for key, parts in columns.items()}


def tableau_records(circuit: cirq.AbstractCircuit, shots: int, seed: int) -> Dict[str, np.ndarray]:
    """Cirq-shaped records of our tableau mode run once per shot (exactly replayable in stim)."""
    program = QuasarqSimulator(device="cpu").compile(circuit)
    packed = NumpyEngine().sample_tableau_shots(program, schedule(program), _draw_key(_parse_seed(seed)), shots)
    return records_from_packed(program, packed, shots)


def _flat(records: Dict[str, np.ndarray]):
    keys = sorted(records)
    names = [f"{k}[{i},{j}]" for k in keys for i in range(records[k].shape[1]) for j in range(records[k].shape[2])]
    if not keys:
        return names, None
    return names, np.concatenate([records[k].reshape(len(records[k]), -1) for k in keys], axis=1).astype(np.uint8)


def assert_same_distribution(ours: Dict[str, np.ndarray], reference: Dict[str, np.ndarray],
                             sigmas: float = SIGMAS) -> None:
    """Same keys and shapes; each bit's frequency, and the parities of pairs of bits (neighbours,
    bits half the record apart) and of the whole record, equal within `sigmas` standard deviations
    (pooled two-sample test: a bit that is constant in both must be the same constant)."""
    assert sorted(ours) == sorted(reference), f"keys {sorted(ours)} != {sorted(reference)}"
    for k in ours:
        assert ours[k].shape[1:] == reference[k].shape[1:], f"key {k}: {ours[k].shape} != {reference[k].shape}"
    names, a = _flat(ours)
    _, b = _flat(reference)
    if a is None or a.shape[1] == 0:
        return
    m = a.shape[1]
    tests = [(names[i], a[:, i], b[:, i]) for i in range(m)]
    for gap in sorted({1, 2, m // 2} - {0}):
        tests += [(f"{names[i]} ^ {names[i + gap]}", a[:, i] ^ a[:, i + gap], b[:, i] ^ b[:, i + gap])
                  for i in range(m - gap)]
    tests.append(("parity of all", np.bitwise_xor.reduce(a, axis=1), np.bitwise_xor.reduce(b, axis=1)))
    bad = []
    for label, x, y in tests:
        p1, p2 = x.mean(), y.mean()
        pooled = (x.sum() + y.sum()) / (len(x) + len(y))
        sigma = math.sqrt(pooled * (1 - pooled) * (1 / len(x) + 1 / len(y)))
        if abs(p1 - p2) > sigmas * sigma:
            bad.append(f"{label}: ours {p1:.4f} reference {p2:.4f} ({abs(p1 - p2) / max(sigma, 1e-300):.1f} sigma)")
    assert not bad, "distributions differ:\n" + "\n".join(bad[:20])


def _tableau_fallback(program: Program) -> bool:
    """run() samples this program with one tableau-mode run per shot (classically controlled
    non-Paulis inside loops: engines/branching.py), so it gets the oracle's shot count."""
    if not program.needs_branching():
        return False
    sched = schedule(program)
    return branching._inside_loops(sched, branching.decision_rows(sched))


def check_run_matches_stim(drawn) -> None:
    """run() against stim's sampler on stimcirq's conversion (circuits it converts exactly; else
    against our tableau mode shot by shot); the stim.Circuit input path against stim likewise."""
    (circuit, features), seed, shots = drawn
    admissible(circuit)
    stim_side = stim_records(circuit, shots, seed + 1) if features.stim_convertible else None
    if stim_side is None:
        return check_run_matches_tableau_mode(((circuit, features), seed))
    ours = QuasarqSimulator(seed=seed, device="cpu").run(circuit, repetitions=shots).records
    assert_same_distribution(ours, stim_side)
    stim_circuit = stim_form(circuit)
    if stim_circuit is not None:
        mine = QuasarqSimulator(seed=seed, device="cpu").sample_measurements(stim_circuit, shots)
        theirs = stim_circuit.compile_sampler(seed=seed + 2).sample(shots)
        assert_same_distribution({"m": mine[:, None, :].astype(np.int8)}, {"m": theirs[:, None, :].astype(np.int8)})


def check_run_matches_tableau_mode(drawn) -> None:
    """run() (Pauli frames, shot branching) against our tableau mode run once per shot."""
    (circuit, _), seed = drawn
    program = admissible(circuit)
    shots = TABLEAU_SHOTS if _tableau_fallback(program) else SHOTS
    ours = QuasarqSimulator(seed=seed, device="cpu").run(circuit, repetitions=shots).records
    assert_same_distribution(ours, tableau_records(circuit, TABLEAU_SHOTS, seed + 1))


def test_run_matches_stim_statistics(fuzz):
    strategy = st.tuples(circuits(final_measurement=True, stim_only=True), SEEDS, st.just(SHOTS))
    fuzz(check_run_matches_stim, strategy, examples=50)


def test_run_matches_tableau_mode_statistics(fuzz):
    """Confusion maps, controlled non-Paulis (branching), controls on several bits or on earlier
    instances: beyond stimcirq, against tableau mode (held to stim exactly by the replay tests)."""
    beyond_stim = circuits(max_qubits=3, max_moments=4, final_measurement=True).filter(
        lambda drawn: not drawn[1].stim_convertible)
    fuzz(check_run_matches_tableau_mode, st.tuples(beyond_stim, SEEDS), examples=10)


def test_run_with_rare_errors_matches_stim(fuzz):
    """Only error probabilities below 1/128 (the sparse draws), enough shots to see their rates."""
    noisy = circuits(max_qubits=4, max_moments=5, stim_only=True, final_measurement=True,
                     probabilities=SMALL_PROBABILITIES).filter(lambda drawn: _has_noise(drawn[0]))
    fuzz(check_run_matches_stim, st.tuples(noisy, SEEDS, st.just(1 << 16)), examples=15)


def _has_noise(circuit: cirq.AbstractCircuit) -> bool:
    def ops(c):
        for op in c.all_operations():
            yield from ops(op.circuit) if isinstance(op, cirq.CircuitOperation) else [op]

    def noisy(op):
        if isinstance(op.gate, stimcirq.MeasureAndOrResetGate):
            return bool(op.gate.measure_flip_probability)
        return cirq.has_mixture(op) and not cirq.has_unitary(op)

    return any(noisy(op) for op in ops(circuit))


# -- state vectors against Cirq -----------------------------------------------------------------------------


def assert_same_state_vector(ours: cirq.AbstractCircuit, reference: cirq.AbstractCircuit, initial: int = 0) -> None:
    """Our final state vector of `ours` equals Cirq's of `reference`, global phase included."""
    qubits = sorted(ours.all_qubits() | reference.all_qubits())
    got = QuasarqSimulator(device="cpu").simulate(ours, qubit_order=qubits, initial_state=initial).final_state_vector
    want = cirq.final_state_vector(reference, qubit_order=qubits, initial_state=initial, dtype=np.complex128)
    np.testing.assert_allclose(got, want, atol=1e-6, err_msg="final state vector differs from Cirq's")


def check_state_vector(drawn) -> None:
    (circuit, _), initial = drawn
    admissible(circuit)
    initial %= 2 ** len(circuit.all_qubits())
    assert_same_state_vector(circuit, circuit, initial)
    qubits = sorted(circuit.all_qubits())
    try:  # cirq.CliffordSimulator too, where it runs (it refuses some gates it says it supports)
        theirs = cirq.CliffordSimulator().simulate(circuit, qubit_order=qubits, initial_state=initial)
    except TypeError:
        return
    ours = QuasarqSimulator(device="cpu").simulate(circuit, qubit_order=qubits, initial_state=initial)
    np.testing.assert_allclose(ours.final_state_vector, theirs.final_state.state_vector(), atol=1e-6,
                               err_msg="final state vector differs from cirq.CliffordSimulator's")


def test_state_vector_matches_cirq(fuzz):
    strategy = st.tuples(circuits(max_qubits=5, max_moments=8, measure=False, noise=False), st.integers(0, 2**5))
    fuzz(check_state_vector, strategy, examples=60)


# -- engine against engine ----------------------------------------------------------------------------------


ENGINE_SHOTS = 3 * 64 + 5
FALLBACK_SHOTS = 64 + 5  # where run() walks tableau mode once per shot


def _tableau_parts(inverse_tableau):
    return [np.asarray(getattr(inverse_tableau, name)) for name in ("xx", "xz", "zx", "zz", "xs", "zs")]


def engine_outputs(engine, circuit: cirq.AbstractCircuit, seed: int, repetition: int):
    """What an engine makes of a circuit: run()'s records (with its own reference sample and
    plans: a fresh copy of the program; padding bits of the last word left out), one tableau-mode
    run, and simulate() through the API."""
    base = QuasarqSimulator(device="cpu").compile(circuit)
    program = dataclasses.replace(base)
    sim = QuasarqSimulator(seed=seed, device="cpu")
    sim.engine = engine
    shots = FALLBACK_SHOTS if _tableau_fallback(base) else ENGINE_SHOTS
    bits = unpack_records(np.asarray(sim.sample_packed(program, shots)), shots)
    few = 1 + seed % 64  # a first call of one word of shots (the NumPy engine's riders, where they apply)
    first = unpack_records(np.asarray(sim.sample_packed(dataclasses.replace(base), few)), few)
    run = engine.run_tableau(program, schedule(program), _draw_key(_parse_seed(seed)), repetition=repetition)
    sim = QuasarqSimulator(seed=seed, device="cpu")
    sim.engine = engine
    trial = sim.simulate(circuit)
    return ([bits, first, np.asarray(run.records)] + _tableau_parts(run.tableau) + _tableau_parts(trial.final_state.inverse_tableau)
            + [np.asarray(trial.measurements[k]) for k in sorted(trial.measurements)])


def assert_engines_agree(drawn) -> None:
    engines, (circuit, _), seed, repetition = drawn
    admissible(circuit)
    outputs = {name: engine_outputs(engine, circuit, seed, repetition) for name, engine in engines.items()}
    (first, expected), *others = outputs.items()
    for name, got in others:
        assert len(got) == len(expected)
        for i, (x, y) in enumerate(zip(got, expected)):
            np.testing.assert_array_equal(x, y, err_msg=f"{name} != {first} (output {i})")


NUMPY_ENGINES = {"fast paths": NumpyEngine(),
                 "plain walks": NumpyEngine(fast_paths=False, ride_frames=False, measured_rows=False),
                 "always folded, 1-word chunks": NumpyEngine(fast_paths="always", max_shot_words=1, linear_frames=False),
                 "linear map": NumpyEngine(linear_frames="always"),
                 "measured rows wherever they apply": NumpyEngine(measured_rows="always")}


def test_numpy_fast_paths_equal_plain_walks(fuzz):
    strategy = st.tuples(st.just(NUMPY_ENGINES), circuits(final_measurement=True), SEEDS, st.integers(0, 200))
    fuzz(assert_engines_agree, strategy, examples=30)


@pytest.mark.gpu
def test_numpy_and_cuda_engines_identical(fuzz):
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    engines = {"numpy": NumpyEngine(), "cuda": CudaEngine()}
    strategy = st.tuples(st.just(engines), circuits(max_qubits=6, final_measurement=True), SEEDS, st.integers(0, 200))
    fuzz(assert_engines_agree, strategy, examples=30)


# -- mutation check: every comparison above catches one inserted gate ---------------------------------------

_K = cirq.LineQubit.range(4)


def _known(measured: bool) -> cirq.Circuit:
    """A reversible classical circuit (every qubit always in a Z eigenstate) with a loop and, when
    `measured`, a mid-circuit measurement and a classical control (else a CNOT in their place):
    one X inserted anywhere flips some later bit for sure, one H makes some later bit random; both
    change the final state."""
    feedback = (cirq.X(_K[3]).with_classical_controls("m") if measured else cirq.CNOT(_K[1], _K[3]))
    return cirq.Circuit(
        cirq.Moment(cirq.X(_K[0]), cirq.X(_K[2])),
        cirq.Moment(cirq.CNOT(_K[0], _K[1]), cirq.CNOT(_K[2], _K[3])),
        cirq.Moment(cirq.measure(_K[1], key="m") if measured else cirq.I(_K[1])),
        cirq.Moment(feedback, cirq.CNOT(_K[0], _K[2])),
        cirq.Moment(cirq.CircuitOperation(cirq.FrozenCircuit(cirq.CNOT(_K[0], _K[3]), cirq.X(_K[1])), repetitions=3)),
        cirq.Moment(cirq.CNOT(_K[3], _K[0]), cirq.SWAP(_K[1], _K[2])),
        cirq.Moment(cirq.CNOT(_K[0], _K[1]), cirq.CNOT(_K[2], _K[3])),
    )


KNOWN, KNOWN_UNITARY = _known(True), _known(False)
FINAL = cirq.Moment(cirq.measure(*_K, key="final"))


def inserted(circuit: cirq.Circuit, where: int, gate: cirq.Gate, qubit: cirq.Qid) -> cirq.Circuit:
    """The circuit with `gate` on `qubit` in a new moment before moment `where`."""
    return circuit[:where] + cirq.Circuit(cirq.Moment(gate.on(qubit))) + circuit[where:]


MUTATIONS = st.tuples(st.integers(0, len(KNOWN)), st.sampled_from([cirq.X, cirq.H]), st.sampled_from(_K))


def test_mutation_check_known_circuit_passes_unmutated():
    circuit = KNOWN + cirq.Circuit(FINAL)
    sim = QuasarqSimulator(device="cpu")
    for c in (circuit, KNOWN_UNITARY):
        assert_replays(sim.compile(c), sim.compile(c), _draw_key(_parse_seed(1)), 0)
    assert_same_distribution(QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=SHOTS).records,
                             stim_records(circuit, SHOTS, 2))
    assert_same_state_vector(KNOWN_UNITARY, KNOWN_UNITARY)


def check_mutation_is_caught(drawn) -> None:
    where, gate, qubit = drawn
    circuit, mutant = KNOWN + cirq.Circuit(FINAL), inserted(KNOWN, where, gate, qubit) + cirq.Circuit(FINAL)
    unitary_mutant = inserted(KNOWN_UNITARY, where, gate, qubit)
    # stim's sampler on the mutant against run() on the circuit: an X flips a deterministic bit,
    # an H makes one random.
    with pytest.raises(AssertionError, match="distributions differ"):
        assert_same_distribution(QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=SHOTS).records,
                                 stim_records(mutant, SHOTS, 2))
    # Cirq's state vector of the mutant against ours of the circuit.
    with pytest.raises(AssertionError, match="state vector"):
        assert_same_state_vector(KNOWN_UNITARY, unitary_mutant)
    # stim replaying the mutant with our draws against our run of the circuit: the records or the
    # final stabilizer group differ (with measurements, only for X: a random outcome that an H
    # brings is forced to our coin, which may agree with the unmutated bit).
    sim, key = QuasarqSimulator(device="cpu"), _draw_key(_parse_seed(1))
    if gate == cirq.X:
        with pytest.raises(AssertionError):
            assert_replays(sim.compile(circuit), sim.compile(mutant), key, 0)
    with pytest.raises(AssertionError):
        assert_replays(sim.compile(KNOWN_UNITARY), sim.compile(unitary_mutant), key, 0)


def test_mutation_check_catches_one_inserted_gate(fuzz):
    fuzz(check_mutation_is_caught, MUTATIONS, examples=24)


# -- bugs the fuzzing found (minimised; an xfail until fixed, then a regression test) ------------------------------------------


# Found by the fuzzing: cirq.PhasedXZGate values that Cirq calls equal (equal up to global phase)
# shared one cached lowering and so one global phase; fixed, kept as a regression test.
def test_phased_xz_gates_equal_up_to_phase_keep_their_own_phase():
    q0, q1 = cirq.LineQubit.range(2)
    first = cirq.PhasedXZGate(axis_phase_exponent=0, x_exponent=0.5, z_exponent=0)
    second = cirq.PhasedXZGate(axis_phase_exponent=1, x_exponent=-0.5, z_exponent=0)
    if first != second or np.allclose(cirq.unitary(first), cirq.unitary(second)):
        pytest.skip("Cirq no longer calls these two gates equal")
    circuit = cirq.Circuit(first.on(q0), second.on(q1))  # ours: i x Cirq's state
    assert_same_state_vector(circuit, circuit)


# Found by the fuzzing: frame mode crashed (ValueError in _lanes_to_matrix) on a folded loop
# whose body writes no record; fixed, kept as a regression test.
@pytest.mark.parametrize("fast_paths,repetitions", [(True, 16), (True, 1000), ("always", 2)])
def test_folded_loop_without_records(fast_paths, repetitions):
    q = cirq.LineQubit(0)
    circuit = cirq.Circuit(cirq.CircuitOperation(cirq.FrozenCircuit(cirq.H(q), cirq.S(q)), repetitions=repetitions),
                           cirq.measure(q, key="m"))
    sim = QuasarqSimulator(seed=1, device="cpu")
    sim.engine = NumpyEngine(fast_paths=fast_paths)
    assert_same_distribution(sim.run(circuit, repetitions=SHOTS).records, stim_records(circuit, SHOTS, 2))


# Found by the fuzzing: KeyCondition(key, index=-2) after a loop that measured the key twice
# raised MeasurementKeyError (the loop's iterations counted as one instance; Cirq reads the first
# iteration's bit); fixed (compiler/keys.py: a closed loop's instances count once per iteration),
# kept as a regression test, with earlier instances of per-iteration keys ("0:d") and nested loops.
def test_earlier_instance_after_loop():
    q0, q1 = cirq.LineQubit.range(2)
    body = cirq.FrozenCircuit(cirq.X(q0), cirq.measure(q0, key="d"))  # d = 1, 0, 1, ...

    def read(key: str, index: int, *loop) -> cirq.Circuit:
        return cirq.Circuit(*loop, cirq.X(q1).with_classical_controls(
            cirq.KeyCondition(cirq.MeasurementKey.parse_serialized(key), index=index)), cirq.measure(q1, key="f"))

    circuits = [
        read("d", -2, cirq.CircuitOperation(body, repetitions=2)),  # d = 1, then 0: f = 1
        read("d", -3, cirq.measure(q0, key="d"), cirq.CircuitOperation(body, repetitions=2)),
        read("d", -4, cirq.CircuitOperation(cirq.FrozenCircuit(
            cirq.CircuitOperation(body, repetitions=3), cirq.measure(q0, key="d")), repetitions=2)),
        read("1:d", -2, cirq.CircuitOperation(body + body, repetitions=2, use_repetition_ids=True)),
    ]
    for circuit in circuits:
        want = cirq.Simulator().run(circuit, repetitions=4).records["f"]
        assert (want == want[0]).all()  # deterministic
        records = QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=64).records
        np.testing.assert_array_equal(records["f"], np.broadcast_to(want[0], records["f"].shape), err_msg=str(circuit))
    assert (QuasarqSimulator(seed=1, device="cpu").run(circuits[0], repetitions=8).records["f"] == 1).all()


# Found by the fuzzing: run() refused circuits whose only measurements are stimcirq's gates
# (Cirq's has_measurements() does not see them); fixed, kept as a regression test.
def test_stimcirq_measurements_only():
    q = cirq.LineQubit(0)
    gate = stimcirq.MeasureAndOrResetGate(measure=True, reset=False, basis="Z", invert_measure=False, key="a",
                                          measure_flip_probability=0.0)
    circuit = cirq.Circuit(cirq.X(q), gate.on(q))
    assert (stimcirq.StimSampler().run(circuit, repetitions=4).records["a"] == 1).all()
    assert (QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=4).records["a"] == 1).all()


# Found by the fuzzing: stimcirq.MeasureAndOrResetGate keys inside a CircuitOperation with
# repetition ids were prefixed ('0:a', '1:a'); Cirq does not see the gate's key, so no loop scopes
# it, and stimcirq.StimSampler keeps 'a' (one instance per iteration). Fixed (compiler/lowerings.py
# measure_reset), kept as a regression test.
def test_stimcirq_key_in_loop_with_repetition_ids():
    q0, q1 = cirq.LineQubit.range(2)
    gate = stimcirq.MeasureAndOrResetGate(measure=True, reset=False, basis="Z", invert_measure=False, key="a",
                                          measure_flip_probability=0.0)
    body = cirq.FrozenCircuit(gate.on(q0), cirq.X(q0))  # a = 1, then 0
    loop = cirq.CircuitOperation(body, repetitions=2, use_repetition_ids=True)
    # Moments spelled out: Cirq does not see that the control depends on the loop.
    circuit = cirq.Circuit(cirq.Moment(cirq.X(q0)), cirq.Moment(loop), cirq.Moment(cirq.X(q1).with_classical_controls("a")),
                           cirq.Moment(cirq.measure(q1, key="f")))
    theirs = stimcirq.StimSampler().run(circuit, repetitions=4).records
    ours = QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=4).records
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    for k in theirs:  # deterministic: the same bits (f reads the second iteration's a)
        np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)


# Found by the fuzzing: a cirq.measure with an invert mask and a confusion map, in a circuit that
# also holds a noisy stimcirq measurement, failed to compile: asking whether Cirq would sample
# terminally (compiler/emitter.py samples_terminally) called cirq.has_unitary, which decomposes
# stimcirq's gate: NotImplementedError 'Noisy measurement as a cirq operation.'. Fixed (an
# operation Cirq cannot tell is not unitary), kept as a regression test.
def test_confusion_with_noisy_stimcirq_measurement():
    q0, q1 = cirq.LineQubit.range(2)
    noisy = stimcirq.MeasureAndOrResetGate(measure=True, reset=False, basis="Z", invert_measure=False, key="a",
                                           measure_flip_probability=0.2)
    confused = cirq.measure(q1, key="b", invert_mask=(True,), confusion_map={(0,): np.array([[0.5, 0.5], [0.25, 0.75]])})
    circuit = cirq.Circuit(noisy.on(q0), confused)
    records = QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=SHOTS).records
    # b: |0> read inverted as 1, then confused by the matrix conjugated by the mask (Cirq confuses
    # the raw bit, then inverts): 1 with probability 0.5 (0.75 were the mask applied first).
    assert abs(records["b"].mean() - 0.5) < SIGMAS * math.sqrt(0.25 / SHOTS)
    assert abs(records["a"].mean() - 0.2) < SIGMAS * math.sqrt(0.16 / SHOTS)  # the flip probability


def fuzz_engines_for(seconds: float, against: str) -> dict:
    """The engine comparison of `test_numpy_and_cuda_engines_identical` (against="cuda") or of
    `test_numpy_fast_paths_equal_plain_walks` (against="plain walks") on fresh random circuits,
    twenty at a time, for about `seconds`: how many were compared, and how many of them a first
    call carries through its reference run (the NumPy engine's riders)."""
    import time

    from cirq_quasarq.engines.numpy.engine import _Riders

    if against == "cuda":
        from cirq_quasarq.engines.cuda import CudaEngine

        other, max_qubits = CudaEngine(), 6
    else:
        other, max_qubits = NUMPY_ENGINES["plain walks"], 8
    engines = {"numpy": NumpyEngine(), against: other}
    count = {"circuits": 0, "riders": 0}

    @settings(max_examples=20, **LONG_PROFILE)
    @given(st.tuples(st.just(engines), circuits(max_qubits=max_qubits, final_measurement=True), SEEDS,
                     st.integers(0, 200)))
    def compared(drawn):
        assert_engines_agree(drawn)
        count["circuits"] += 1
        count["riders"] += _Riders.apply(QuasarqSimulator(device="cpu").compile(drawn[1][0]))

    start = time.time()
    while time.time() - start < seconds:
        compared()
    return count


if __name__ == "__main__":  # python -m tests.test_fuzz --for SECONDS [--against cuda]
    import argparse

    ap = argparse.ArgumentParser(description="The engine comparison on random circuits for a while.")
    ap.add_argument("--for", dest="seconds", type=float, required=True)
    ap.add_argument("--against", choices=("cuda", "plain walks"), default="plain walks")
    args = ap.parse_args()
    print(fuzz_engines_for(args.seconds, args.against))
