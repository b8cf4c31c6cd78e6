"""QuasarqSimulator: a drop-in replacement for cirq.CliffordSimulator on GPUs and CPUs.

The simulator only wires the pipeline together: compile (cached) -> schedule -> engine ->
results. `run` samples with Pauli frames against a reference sample (tableau mode with every
random outcome forced to 0); circuits frames cannot express (classically controlled non-Pauli
operations) run tableau mode once per repetition. `simulate` runs tableau mode once.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator

import cirq
import numpy as np

from .compiler import compile_circuit, compile_template
from .core import rng
from .core.program import Program
from .engines import Engine, select_engine
from .results import QuasarqState, last_measurements, records_from_packed
from .schedule import Schedule, schedule


class QuasarqTrialResult(cirq.SimulationTrialResult):
    """What `simulate()` returns: `measurements` (each key's latest instance) and `final_state`."""

    def __init__(self, params: cirq.ParamResolver, measurements, final_state: QuasarqState):
        super().__init__(params=params, measurements=measurements, final_simulator_state=final_state)

    @property
    def final_state(self) -> QuasarqState:
        return self._final_simulator_state

    def __str__(self) -> str:
        return f"measurements: {super().__str__()}\noutput state:\n{self.final_state}"


class QuasarqStepResult:
    """One moment of `simulate_moment_steps`: that moment's `measurements` and the `state` after it."""

    def __init__(self, measurements, state: QuasarqState, seed):
        self.measurements = measurements
        self.state = state
        self._prng = cirq.value.parse_random_state(seed)

    def sample(self, qubits, repetitions: int = 1, seed: Any = None) -> np.ndarray:
        """Z-basis samples of `qubits` from this state, bool [repetitions, len(qubits)]; the state
        itself is left as it is."""
        circuit = cirq.Circuit(cirq.measure(*qubits, key="sample"))
        sim = QuasarqSimulator(seed=self._prng if seed is None else seed, device="cpu")
        program = compile_circuit(circuit, qubit_order=self.state.qubits)
        sched = schedule(program)
        out = np.zeros((repetitions, len(qubits)), dtype=bool)
        for r in range(repetitions):
            run = sim.engine.run_tableau(program, sched, sim._next_key(), initial=self.state.inverse_tableau)
            out[r] = run.records[program.keys[0].records[0]].astype(bool)
        return out

    def __str__(self) -> str:
        return f"measurements: {self.measurements}\noutput state:\n{self.state}"


class QuasarqSimulator(cirq.SimulatesSamples, cirq.SimulatesFinalState):
    """Stabilizer simulator: `run` / `run_sweep` / `sample` / `run_batch` / `simulate` /
    `simulate_sweep` as any Cirq simulator.

    Args:
        seed: makes results reproducible (an int or a np.random.RandomState); for the same seed
            and circuit every engine returns identical bits.
        noise: a cirq.NoiseModel or anything cirq.NOISE_MODEL_LIKE, applied as Cirq does.
        device: "auto" (the GPU engine when a CUDA GPU is usable, else NumPy), "gpu", or "cpu".
    """

    def __init__(self, seed: Any = None, noise: cirq.NOISE_MODEL_LIKE = None, device: str = "auto"):
        self.noise = noise
        self.device = device
        self.engine: Engine = select_engine(device)
        self._prng = cirq.value.parse_random_state(seed)
        # Per compiled Program: its schedule and its reference sample (both seed-independent).
        self._prepared: "weakref.WeakKeyDictionary[Program, list]" = weakref.WeakKeyDictionary()

    @staticmethod
    def is_supported_operation(op: cirq.Operation) -> bool:
        """Whether `op` compiles (as cirq.CliffordSimulator.is_supported_operation)."""
        try:
            compile_circuit(cirq.Circuit(op))
        except (ValueError, TypeError):
            return False
        return True

    # ---------------------------------------------------------------------------- plumbing
    def _next_key(self):
        return rng.make_key(int(self._prng.randint(0, 2**32, dtype=np.int64)) << 32
                            | int(self._prng.randint(0, 2**32, dtype=np.int64)))

    def _prepare(self, program: Program) -> list:
        entry = self._prepared.get(program)
        if entry is None:
            entry = [schedule(program), None]
            self._prepared[program] = entry
        return entry

    def _reference(self, program: Program, sched: Schedule, entry: list) -> np.ndarray:
        if entry[1] is None:
            entry[1] = self.engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
        return entry[1]

    def _programs(self, circuit: cirq.AbstractCircuit, params: cirq.Sweepable,
                  qubit_order=cirq.QubitOrder.DEFAULT) -> Iterator:
        template = compile_template(circuit, qubit_order=qubit_order, noise=self.noise)
        for resolver in cirq.to_resolvers(params):
            yield resolver, template.resolve(resolver)

    # ---------------------------------------------------------------------------- sampling
    def sample_packed(self, program: Program, repetitions: int) -> np.ndarray:
        """Bit-packed records uint64 [num_records, ceil(repetitions/64)] for a compiled Program
        (bit l of word w is repetition 64w + l): the `bit_packed` path, no unpacking."""
        entry = self._prepare(program)
        sched = entry[0]
        key = self._next_key()
        if program.needs_tableau_per_shot():
            return self.engine.sample_tableau_shots(program, sched, key, repetitions)
        reference = self._reference(program, sched, entry)
        return self.engine.sample_frames(program, sched, key, reference, repetitions)

    def run_sweep_iter(self, program: cirq.AbstractCircuit, params: cirq.Sweepable,
                       repetitions: int = 1) -> Iterator[cirq.Result]:
        if not program.has_measurements():
            raise ValueError("Circuit has no measurements to sample.")
        for resolver, compiled in self._programs(program, params):
            if repetitions == 0:
                records = {k.key: np.empty((0,) + k.records.shape, dtype=np.int8) for k in compiled.keys}
            else:
                packed = self.sample_packed(compiled, repetitions)
                records = records_from_packed(compiled, packed, repetitions)
            yield cirq.ResultDict(params=resolver, records=records)

    def _run(self, circuit: cirq.AbstractCircuit, param_resolver: cirq.ParamResolver,
             repetitions: int) -> dict:
        (_, compiled), = self._programs(circuit, param_resolver)
        return records_from_packed(compiled, self.sample_packed(compiled, repetitions), repetitions)

    # ---------------------------------------------------------------------------- final state
    def simulate_sweep_iter(self, program: cirq.AbstractCircuit, params: cirq.Sweepable,
                            qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
                            initial_state: Any = None) -> Iterator[QuasarqTrialResult]:
        circuit = _with_initial_state(program, qubit_order, initial_state)
        for resolver, compiled in self._programs(circuit, params, qubit_order):
            sched = self._prepare(compiled)[0]
            run = self.engine.run_tableau(compiled, sched, self._next_key())
            state = QuasarqState(run.tableau, compiled.qubits)
            yield QuasarqTrialResult(resolver, last_measurements(compiled, run.records), state)


    def simulate_moment_steps(self, circuit: cirq.AbstractCircuit,
                              param_resolver: cirq.ParamResolverOrSimilarType = None,
                              qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
                              initial_state: Any = None) -> Iterator[QuasarqStepResult]:
        """Yields the state after each moment (as cirq.CliffordSimulator does). Each moment is
        compiled on its own, so classical controls must read keys measured in the same moment."""
        circuit = _with_initial_state(circuit, qubit_order, initial_state)
        qubits = cirq.QubitOrder.as_qubit_order(qubit_order).order_for(circuit.all_qubits())
        noise = cirq.NoiseModel.from_noise_model_like(self.noise)
        if noise is not cirq.NO_NOISE:
            circuit = cirq.Circuit(noise.noisy_moments(circuit, sorted(circuit.all_qubits())))
        tableau = None
        resolver = cirq.ParamResolver(param_resolver)
        for moment in circuit:
            program = compile_circuit(cirq.Circuit(moment), qubit_order=qubits, resolver=resolver)
            # A fresh key per moment: each moment's program numbers its random slots from 0.
            run = self.engine.run_tableau(program, schedule(program), self._next_key(), initial=tableau)
            tableau = run.tableau
            measurements = {k: list(v) for k, v in last_measurements(program, run.records).items()}
            yield QuasarqStepResult(measurements, QuasarqState(tableau, qubits), self._prng)


def _with_initial_state(circuit: cirq.AbstractCircuit, qubit_order, initial_state) -> cirq.AbstractCircuit:
    """An integer initial state (big-endian over the ordered qubits, as Cirq) becomes X gates."""
    if initial_state is None or (isinstance(initial_state, (int, np.integer)) and initial_state == 0):
        return circuit
    if not isinstance(initial_state, (int, np.integer)):
        raise ValueError(f"initial_state must be an int computational basis state, got {initial_state!r}")
    qubits = cirq.QubitOrder.as_qubit_order(qubit_order).order_for(circuit.all_qubits())
    n = len(qubits)
    if not 0 <= int(initial_state) < 2**n:
        raise ValueError(f"initial_state {initial_state} is out of range for {n} qubits")
    flips = [cirq.X(q) for i, q in enumerate(qubits) if (int(initial_state) >> (n - 1 - i)) & 1]
    return cirq.Circuit(cirq.Moment(flips)) + cirq.Circuit(circuit)
