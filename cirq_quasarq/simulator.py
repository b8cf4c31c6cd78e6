"""QuasarqSimulator: a drop-in replacement for cirq.CliffordSimulator on GPUs and CPUs.

The simulator only wires the pipeline together: compile (cached) -> schedule -> engine ->
results. `run` samples with Pauli frames against a reference sample (tableau mode with every
random outcome forced to 0); circuits with classically controlled non-Pauli gates branch shots
by their decisions (engines/branching.py). `simulate` runs tableau mode once; the final state's
global phase is replayed only when a state vector is asked for (results/phase.py).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import cirq
import numpy as np

from . import contract
from .compiler import compile_circuit, compile_stim, compile_template
from .compiler.compile import circuit_qubits, ordered_qubits
from .compiler.registry import NON_PAULI
from .core import rng
from .core.parities import Parities, parities_shot_major
from .core.memory import require_host_memory
from .core.program import Annotation, Annotations, Program, ProgramBuilder
from .engines import Engine, select_engine
from .errors import InvalidInputError
from .initial import Initial
from .initial import initial_state as make_initial
from .results import QuasarqState, last_measurements, records_from_packed, shot_major
from .results.phase import Amplitudes, replay
from .results.state import canonical_vector
from .schedule import schedule
from .shots import REFERENCE_KEY as _REFERENCE_KEY
from .shots import compiled_with_reference
from .shots import draw_key as _draw_key
from .shots import prepared
from .shots import reference as _reference
from .shots import sample_frames as _sample_frames

_SPLIT_ADVICE = "Ask for fewer repetitions per call (results do not depend on how shots are split)"
_UNPACKED_ADVICE = ("sample_measurements(..., bit_packed=True) / sample_detectors(..., bit_packed=True) keep "
                    "8 shots a byte, and fewer repetitions per call (or cirq_quasarq.distributed) keep less at once")


class QuasarqTrialResult(cirq.SimulationTrialResult):
    """What `simulate()` returns: `measurements` (each key's latest instance), `final_state` (a
    `QuasarqState`) and `final_state_vector`, as cirq.CliffordSimulator's trial results."""

    def __init__(self, params: cirq.ParamResolver, measurements, final_state: QuasarqState):
        super().__init__(params=params, measurements=measurements, final_simulator_state=final_state)

    @property
    def final_state(self) -> QuasarqState:
        return self._final_simulator_state

    @property
    def final_state_vector(self) -> np.ndarray:
        return self.final_state.state_vector()

    def __str__(self) -> str:
        return f"measurements: {super().__str__()}\noutput state: {self.final_state}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("cirq.CliffordTrialResult(...)" if cycle else str(self))  # as Cirq's, for drop-in


class QuasarqStepResult:
    """One moment of `simulate_moment_steps`: that moment's `measurements` and the `state` after it."""

    def __init__(self, measurements: Dict[str, List[int]], state: QuasarqState, engine: Engine, prng):
        self.measurements = measurements
        self.state = state
        self._engine = engine
        self._prng = prng

    def sample(self, qubits: Sequence[cirq.Qid], repetitions: int = 1, seed: Any = None) -> np.ndarray:
        """Z-basis samples of `qubits` from this state, bool [repetitions, len(qubits)], the state
        left as it is. Measuring a stabilizer state gives a reference outcome XOR a uniform element of
        the span of its stabilizers' X parts on those qubits: one tableau run, then vectorised."""
        repetitions = contract.repetitions(repetitions, "sample")
        qs = [self.state.qubit_map[q] for q in qubits]
        inv = self.state.inverse_tableau
        b = ProgramBuilder(self.state.n)
        b.next_step()
        for q in qs:
            b.measure(q)
        program = b.build()
        reference = self._engine.run_tableau(program, schedule(program), _REFERENCE_KEY, reference=True,
                                             initial=inv).records
        prng = self._prng if seed is None else _parse_seed(seed)
        key = _draw_key(prng)
        words = inv.zx.shape[1]
        r = rng.words_range(key, rng.Stream.FRAME_INIT, np.arange(words, dtype=np.uint64), 0, 0, repetitions)
        r = np.ascontiguousarray(r.reshape(words, repetitions).T)  # [repetitions, words]
        flips = np.stack([np.bitwise_count(r & inv.zx[q][None, :]).sum(axis=1) & 1 for q in qs], axis=1) \
            if qs else np.zeros((repetitions, 0), dtype=np.uint8)
        return (flips.astype(np.uint8) ^ reference[None, :]).astype(bool)

    def __str__(self) -> str:
        bits = sorted((key, "".join("1" if v else "0" for v in val)) for key, val in self.measurements.items())
        measured = " ".join(f"{key}={val}" for key, val in bits)
        return f"{measured}\n{self.state}" if bits else f"{self.state}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("cirq.CliffordSimulatorStateResult(...)" if cycle else str(self))  # as Cirq's, for drop-in


class _Replay:
    """The exact amplitudes after `start` and then each (program, schedule, key, records) run of
    `segments` (results/phase.py), computed once, when a state vector is first asked for; with
    `shown`, those of its first `shown` qubits (the rest are scratch qubits in |0>)."""

    def __init__(self, start: Callable[[], Amplitudes], segments: List[tuple], shown: Optional[int] = None):
        self.start, self.segments, self.shown = start, segments, shown
        self._result: Optional[Amplitudes] = None

    def __call__(self) -> Amplitudes:
        if self._result is None:
            amps = self.start().copy()
            for program, sched, key, records in self.segments:
                replay(program, sched, key, records, 0, amps)
            self._result = amps if self.shown is None else amps.restricted(self.shown)
        return self._result


def _zero_state(n: int, phase: complex = 1.0) -> Callable[[], Amplitudes]:
    return lambda: Amplitudes(n, [(0, 0, 1 << k) for k in range(n)], 0, phase)


def _padded(start: Callable[[], Amplitudes], num_qubits: int) -> Callable[[], Amplitudes]:
    return lambda: start().padded(num_qubits)


def _is_stim(circuit: Any) -> bool:
    """A stim.Circuit (recognised without importing stim)."""
    return type(circuit).__module__.split(".")[0] == "stim" and type(circuit).__name__ == "Circuit"


def _measured_in(program: Program, records: np.ndarray, lo: int, hi: int) -> Dict[str, List[int]]:
    """{key: bits} of the latest instance of each key measured into records [lo, hi)."""
    out = {}
    for entry in program.keys:
        inside = np.flatnonzero((entry.records[:, 0] >= lo) & (entry.records[:, 0] < hi))
        if len(inside):
            out[entry.key] = [int(records[s]) for s in entry.records[inside[-1]]]
    return out


_parse_seed = contract.seed  # what Cirq's simulators accept as a seed


_SEEDED = [None, threading.Lock()]  # a RandomState re-seeded in place for first keys, and its lock


def _first_key(seed: int):
    """The first key of a simulator seeded with `seed` (an int): RandomState(seed)'s first draws,
    from one RandomState re-seeded in place (1.5 us, where making a RandomState takes about 90)."""
    with _SEEDED[1]:
        if _SEEDED[0] is None:
            _SEEDED[0] = np.random.RandomState(0)
        _SEEDED[0].seed(seed)
        return _draw_key(_SEEDED[0])


class QuasarqSimulator(cirq.SimulatesSamples, cirq.SimulatesFinalState, cirq.SimulatesExpectationValues):
    """Stabilizer simulator: `run` / `run_sweep` / `sample` / `run_batch` / `simulate` /
    `simulate_sweep` / `simulate_moment_steps` / `simulate_expectation_values` as any Cirq simulator.

    Args:
        seed: makes results reproducible: None, an int, a numpy RandomState or Generator (what
            Cirq's simulators take); for the same seed and circuit every engine returns identical bits.
        split_untangled_states: accepted as cirq.CliffordSimulator accepts it; it has no effect
            here (the tableau of n qubits is simulated as one, at any size).
        noise: a cirq.NoiseModel or anything cirq.NOISE_MODEL_LIKE, applied as Cirq does.
        device: "auto" (the GPU engine when a CUDA GPU is usable, else NumPy), "gpu", or "cpu".
        dtype: the complex dtype of state vectors (default complex128, as cirq.CliffordSimulator's).
        non_pauli: what a noise channel that is not a Pauli channel (amplitude damping, thermal
            relaxation, any cirq.KrausChannel) becomes in a Cirq circuit: "error" (the default, an
            UnsupportedNoiseError naming the operation) or "twirl": its Pauli twirl, the Pauli
            channel with the same Pauli-transfer diagonal, an approximation that drops the
            channel's coherent part (a TwirlWarning names each such channel once per compilation).
    """

    def __init__(self, seed: Any = None, split_untangled_states: bool = False, *,
                 noise: cirq.NOISE_MODEL_LIKE = None, device: str = "auto", dtype: Any = None,
                 non_pauli: str = "error"):
        if non_pauli not in NON_PAULI:
            raise InvalidInputError(f"non_pauli must be one of {NON_PAULI}, not {non_pauli!r}")
        self.noise = noise
        self.non_pauli = non_pauli
        self.device = device
        self.split_untangled_states = bool(split_untangled_states)
        self.dtype = np.complex128 if dtype is None else np.dtype(dtype).type
        if not np.issubdtype(self.dtype, np.complexfloating):
            raise InvalidInputError(f"dtype must be a complex dtype (numpy.complex64 or complex128), not {dtype!r}")
        self.engine: Engine = select_engine(device)
        # An int seed's RandomState is made when first needed: making one costs about 0.1 ms, a
        # fifth of a small GPU call on a new simulator, and the first key needs none (`_first_key`)
        self._seed_int = contract.seed_int(seed)
        self._random_state = None if self._seed_int is not None else _parse_seed(seed)
        self._keys_drawn = 0

    def __getstate__(self) -> Dict[str, Any]:
        """Pickles without the engine (a GPU context does not travel); it is selected again."""
        state = dict(self.__dict__)
        del state["engine"]
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.engine = select_engine(self.device)

    @staticmethod
    def is_supported_operation(op: cirq.Operation) -> bool:
        """Whether `op` compiles (as cirq.CliffordSimulator.is_supported_operation)."""
        try:
            compile_circuit(cirq.Circuit(op))
        except (ValueError, TypeError):
            return False
        return True

    # ---------------------------------------------------------------------------- plumbing
    @property
    def _prng(self):
        """The simulator's random state (numpy RandomState or Generator)."""
        if self._random_state is None:
            state = _parse_seed(self._seed_int)
            for _ in range(self._keys_drawn):  # past the keys given without it
                _draw_key(state)
            self._random_state = state
        return self._random_state

    def _next_key(self):
        if self._random_state is None and self._keys_drawn == 0:
            self._keys_drawn = 1
            return _first_key(self._seed_int)
        return _draw_key(self._prng)

    def reference(self, program: Program) -> np.ndarray:
        """The program's reference sample (every random outcome 0), made once and kept with it."""
        return _reference(self.engine, program)

    def _programs(self, circuit: Any, params: cirq.Sweepable,
                  qubit_order=cirq.QubitOrder.DEFAULT) -> Iterator:
        if _is_stim(circuit):  # compiled straight from Stim's instructions (no parameters)
            program = compile_stim(circuit)
            for resolver in cirq.to_resolvers(params):
                yield resolver, program
            return
        template = compile_template(circuit, qubit_order=qubit_order, noise=self.noise, non_pauli=self.non_pauli)
        for resolver in cirq.to_resolvers(params):
            yield resolver, template.resolve(resolver)

    def compile(self, circuit: Any, param_resolver: cirq.ParamResolverOrSimilarType = None) -> Program:
        """The Program of a Cirq circuit (this simulator's noise applied) or of a stim.Circuit (a
        Program is returned as it is)."""
        if isinstance(circuit, Program):
            return circuit
        if param_resolver is None and _is_stim(circuit):  # (no resolver to make: a sampling loop's calls)
            return compile_stim(circuit)
        (_, program), = self._programs(circuit, cirq.ParamResolver(param_resolver))
        return program

    # ---------------------------------------------------------------------------- sampling
    def sample_packed(self, program: Program, repetitions: int) -> np.ndarray:
        """Bit-packed records uint64 [num_records, ceil(repetitions/64)] for a compiled Program
        (bit l of word w is repetition 64w + l): the `bit_packed` path, no unpacking."""
        repetitions = contract.repetitions(repetitions, "sample_packed")
        require_host_memory(f"{repetitions:,} repetitions of {program.num_records:,} records, bit-packed",
                            contract.packed_bytes(program.num_records, repetitions), _SPLIT_ADVICE)
        contract.warn_if_long(program, self.engine.name, shots=repetitions)
        sched = prepared(program)
        key = self._next_key()
        if program.needs_branching():
            return self.engine.sample_controlled(program, sched, key, repetitions)
        return _sample_frames(self.engine, program, key, repetitions)

    def sample(self, program: cirq.AbstractCircuit, *, repetitions: int = 1, params: cirq.Sweepable = None):
        """cirq.Sampler.sample (a pandas DataFrame), `repetitions` checked first."""
        return super().sample(program, repetitions=contract.repetitions(repetitions, "sample"), params=params)

    def run_sweep_iter(self, program: cirq.AbstractCircuit, params: cirq.Sweepable,
                       repetitions: int = 1) -> Iterator[cirq.Result]:
        repetitions = contract.repetitions(repetitions, "run")
        if not (program.num_measurements if _is_stim(program) else
                program.has_measurements() or self.compile(program).keys):  # stimcirq's measuring gates
            raise ValueError("Circuit has no measurements to sample.")
        for resolver, compiled in self._programs(program, params):
            require_host_memory(
                f"run() of {repetitions:,} repetitions of {compiled.num_records:,} measured bits (Cirq's int8 "
                f"arrays and the packed records)", contract.run_bytes(compiled, repetitions), _UNPACKED_ADVICE)
            if repetitions == 0:  # exactly what Cirq's simulators give: (0, 1, 1) whatever the key
                records = {k.key: np.empty((0, 1, 1), dtype=np.int8) for k in compiled.keys}
            else:
                packed = self.sample_packed(compiled, repetitions)
                records = records_from_packed(compiled, packed, repetitions)
            yield cirq.ResultDict(params=resolver, records=records)

    def _run(self, circuit: cirq.AbstractCircuit, param_resolver: cirq.ParamResolver,
             repetitions: int) -> dict:
        repetitions = contract.repetitions(repetitions, "run")
        (_, compiled), = self._programs(circuit, param_resolver)
        require_host_memory(
            f"run() of {repetitions:,} repetitions of {compiled.num_records:,} measured bits",
            contract.run_bytes(compiled, repetitions), _UNPACKED_ADVICE)
        return records_from_packed(compiled, self.sample_packed(compiled, repetitions), repetitions)

    # ---------------------------------------------------------------------------- QEC
    def sample_detectors(self, circuit: Any, repetitions: int, *, separate_observables: bool = False,
                         append_observables: bool = False, bit_packed: bool = False):
        """Detection events (and observable flips) of `repetitions` shots, shaped exactly as Stim's
        `circuit.compile_detector_sampler().sample(...)` returns them: bool [shots, detectors]
        (observables appended as extra columns, or returned separately as a second array), or
        with `bit_packed` uint8 [shots, ceil(columns / 8)], bit b of byte k being column 8k + b.

        `circuit` is a Cirq circuit with stimcirq's annotations (DetAnnotation,
        CumulativeObservableAnnotation) or a stim.Circuit. Detectors and observables are reported
        relative to the noiseless run, as Stim does; they are reduced from the frames where the
        frames are (on the GPU only their bits travel to the host), and a circuit without
        classical feedback or confusion needs no reference sample at all."""
        if separate_observables and append_observables:
            raise InvalidInputError("sample_detectors: separate_observables and append_observables exclude "
                                    "each other (as in Stim)")
        repetitions = contract.repetitions(repetitions, "sample_detectors")
        program = self.compile(circuit).with_pauli_readout()
        dets, obs = program.detectors, program.observables
        mode = "separate" if separate_observables else "append" if append_observables else "detectors"
        chosen = program.derived.get("columns:" + mode)  # made once a program: the same object each call
        if chosen is None:
            if separate_observables:  # observables from a byte boundary on, so both halves are whole bytes
                pad = [Annotation("pad", np.zeros(0, dtype=np.int64))] * (-len(dets) % 8)
                chosen = dets + pad + obs
            else:
                chosen = dets + obs if append_observables else dets
            program.derived["columns:" + mode] = chosen
        columns = len(dets) + len(obs) if separate_observables else len(chosen)
        require_host_memory(
            f"sample_detectors() of {repetitions:,} shots of {columns:,} detectors and observables"
            + ("" if bit_packed else " as bool arrays"),
            contract.detectors_bytes(program, len(chosen), repetitions, 0 if bit_packed else columns),
            _UNPACKED_ADVICE)
        packed = self.sample_parities(program, chosen, repetitions, shot_major=True)
        if separate_observables:
            split = (len(dets) + 7) // 8
            parts, widths = (packed[:, :split], packed[:, split:]), (len(dets), len(obs))
        else:
            parts, widths = (packed,), (len(chosen),)
        if not bit_packed:  # NumPy's bools are the bytes 0 and 1: the unpacked bits are them, not copied
            parts = tuple(np.unpackbits(p, axis=1, count=w, bitorder="little").view(bool)
                          for p, w in zip(parts, widths))
        return parts if separate_observables else parts[0]

    def sample_parities(self, program: Program, annotations: List[Annotation], repetitions: int,
                        shot_major: bool = False) -> np.ndarray:
        """Detection events / observable flips of the given annotations (relative to the noiseless
        run): record-major uint64 [annotations, words] (bit l of word w: shot 64w + l), or with
        `shot_major` Stim's bit-packed uint8 [shots, ceil(annotations / 8)]."""
        repetitions = contract.repetitions(repetitions, "sample_parities")
        contract.warn_if_long(program, self.engine.name, shots=repetitions)
        sched = prepared(program)
        if program.conditions or program.confusions or program.needs_branching():
            reference = self.reference(program)
            parities = Parities.of(annotations, reference)
        else:  # the frames are the flips themselves: no tableau run for a reference
            # the parities of the last annotations sampled and the zero reference, kept with the
            # program: the same objects each call of a sampling loop (an engine may keep its device copies)
            kept = program.derived.get("zero_reference_parities")
            if kept is None or kept[0] is not annotations:
                reference = np.zeros(program.num_records, dtype=np.uint8)
                reference.flags.writeable = False
                kept = (annotations, Parities.of(annotations, reference), reference)
                program.derived["zero_reference_parities"] = kept
            parities, reference = kept[1], kept[2]
        key = self._next_key()
        if program.needs_branching():
            packed = parities.reduce(self.engine.sample_controlled(program, sched, key, repetitions))
            return parities_shot_major(packed, repetitions) if shot_major else packed
        return self.engine.sample_frames(program, sched, key, reference, repetitions, parities, shot_major)

    def sample_measurements(self, circuit: Any, repetitions: int, *, bit_packed: bool = False) -> np.ndarray:
        """Every measurement record of `repetitions` shots in Stim's layout (its
        `compile_sampler().sample(...)`): bool [shots, records], or uint8 bit-packed."""
        repetitions = contract.repetitions(repetitions, "sample_measurements")
        program = compiled_with_reference(self.engine, circuit) if _is_stim(circuit) else self.compile(circuit)
        require_host_memory(
            f"sample_measurements() of {repetitions:,} shots of {program.num_records:,} records"
            + ("" if bit_packed else " as bool arrays"),
            contract.measurements_bytes(program, repetitions, bit_packed), _UNPACKED_ADVICE)
        if bit_packed and not program.needs_branching():
            contract.warn_if_long(program, self.engine.name, shots=repetitions)  # laid out shot-major where the frames are
            return _sample_frames(self.engine, program, self._next_key(), repetitions, shot_major=True)
        return shot_major(self.sample_packed(program, repetitions), repetitions, bit_packed)

    def detector_coordinates(self, circuit: Any) -> Dict[int, List[float]]:
        """{detector index: coordinates}, as Stim's `circuit.get_detector_coordinates()`."""
        detectors = self.compile(circuit).detectors
        if isinstance(detectors, Annotations):
            return detectors.coordinates()
        return {i: list(d.coords) for i, d in enumerate(detectors)}

    # ---------------------------------------------------------------------------- final state
    def _start(self, initial: Optional[Initial], qubits: tuple):
        """(initial tableau or None, start of the phase replay, segments already run)."""
        n = len(qubits)
        if initial is None:
            return None, _zero_state(n), []
        if initial.tableau is not None:
            tab = initial.tableau

            def start() -> Amplitudes:
                return Amplitudes.from_tableau(tab, canonical_vector(*tab.forward()))

            return tab, start, []
        prep = compile_circuit(initial.circuit, qubit_order=qubits)
        sched = prepared(prep)
        run = self.engine.run_tableau(prep, sched, _REFERENCE_KEY)
        return run.tableau, _zero_state(n, prep.base_phase), [(prep, sched, _REFERENCE_KEY, run.records)]

    def _qubits(self, circuit: Any, qubit_order, initial: Any) -> tuple:
        """(the simulated qubits, the order to compile with: the caller's where the initial state
        names no qubits, so that a repeat call's compile key is not a tuple of every qubit)."""
        if _is_stim(circuit):
            return tuple(cirq.LineQubit.range(circuit.num_qubits)), qubit_order
        given = getattr(initial, "qubits", None)
        if given is None and isinstance(initial, cirq.ProductState):
            given = initial.qubits
        if given is None:
            return ordered_qubits(circuit, qubit_order), qubit_order
        qubits = tuple(cirq.QubitOrder.as_qubit_order(qubit_order).order_for(circuit_qubits(circuit) | set(given)))
        return qubits, qubits

    def simulate_sweep_iter(self, program: cirq.AbstractCircuit, params: cirq.Sweepable,
                            qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
                            initial_state: Any = None) -> Iterator[QuasarqTrialResult]:
        qubits, order = self._qubits(program, qubit_order, initial_state)
        initial = make_initial(initial_state, qubits)
        n = len(qubits)
        for resolver, compiled in self._programs(program, params, order):
            start_tableau, start, segments = self._start(initial, qubits)
            # A Stim circuit's scratch qubits (heralds, MPAD, Pauli observables) follow its own, in
            # |0> at the start and at the end: the state is shown without them.
            scratch = compiled.num_qubits > n
            if scratch:
                start_tableau = None if start_tableau is None else start_tableau.padded(compiled.num_qubits)
                start, segments = _padded(_Replay(start, segments), compiled.num_qubits), []
            sched = prepared(compiled)
            contract.warn_if_long(compiled, self.engine.name, tableau_runs=1)
            key = self._next_key()
            run = self.engine.run_tableau(compiled, sched, key, initial=start_tableau)
            phase = _Replay(start, segments + [(compiled, sched, key, run.records)], n if scratch else None)
            # The final tableau is read when the state is (a GPU run's stays on the device until then).
            if scratch:  # the compiler's scratch qubits are dropped: the host derives the rows
                state = QuasarqState(lambda run=run: run.tableau.restricted(n), compiled.qubits, phase, self.dtype)
            else:
                state = QuasarqState(lambda run=run: run.tableau, compiled.qubits, phase, self.dtype, run=run)
            yield QuasarqTrialResult(resolver, last_measurements(compiled, run.records), state)

    def simulate_moment_steps(self, circuit: cirq.AbstractCircuit,
                              param_resolver: cirq.ParamResolverOrSimilarType = None,
                              qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT,
                              initial_state: Any = None) -> Iterator[QuasarqStepResult]:
        """Yields the state after each moment, as cirq.CliffordSimulator does. The circuit is compiled
        once and run moment by moment, the records carried over, so a classical control may read a
        key measured in any earlier moment."""
        qubits, order = self._qubits(circuit, qubit_order, initial_state)
        compiled = compile_circuit(circuit, qubit_order=order, noise=self.noise, non_pauli=self.non_pauli,
                                   resolver=cirq.ParamResolver(param_resolver))
        tableau, start, segments = self._start(make_initial(initial_state, qubits), qubits)
        key = self._next_key()
        records = np.zeros(compiled.num_records, dtype=np.uint8)
        phase: Callable[[], Amplitudes] = _Replay(start, segments)
        for m in range(len(compiled.moment_rows) - 1):
            part = compiled.moment(m)
            sched = schedule(part)
            run = self.engine.run_tableau(part, sched, key, initial=tableau, records=records)
            tableau, records = run.tableau, run.records
            phase = _Replay(phase, [(part, sched, key, records)])
            measured = _measured_in(compiled, records, compiled.moment_records[m], compiled.moment_records[m + 1])
            yield QuasarqStepResult(measured, QuasarqState(tableau, compiled.qubits, phase, self.dtype),
                                    self.engine, self._prng)

    # ---------------------------------------------------------------------------- expectation values
    def simulate_expectation_values_sweep_iter(
            self, program: cirq.AbstractCircuit, observables: Any, params: cirq.Sweepable,
            qubit_order: cirq.QubitOrderOrList = cirq.QubitOrder.DEFAULT, initial_state: Any = None,
            permit_terminal_measurements: bool = False) -> Iterator[List[complex]]:
        """⟨O⟩ of Pauli sums on the final state, exactly: each Pauli term is 0 or ±1 on a stabilizer
        state, read off the tableau in O(weight · n/64)."""
        if not permit_terminal_measurements and program.are_any_measurements_terminal():
            raise ValueError("Provided circuit has terminal measurements, which may skew expectation "
                             "values. If this is intentional, set permit_terminal_measurements=True.")
        sums = [cirq.PauliSum.wrap(o) for o in (observables if isinstance(observables, (list, tuple))
                                                 else [observables])]
        for trial in self.simulate_sweep_iter(program, params, qubit_order, initial_state):
            state = trial.final_state
            yield [sum((state.expectation(term) for term in psum), 0j) for psum in sums]

