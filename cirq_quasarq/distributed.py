"""Scale-out: shots and sweeps across the workers of a `dask.distributed` cluster.

    import cirq_quasarq
    from cirq_quasarq import distributed
    from distributed import Client, LocalCluster

    client = Client(distributed.local_gpu_cluster())    # one worker per GPU (or any dask cluster)
    sim = cirq_quasarq.QuasarqSimulator(seed=5)
    result = distributed.run(sim, circuit, repetitions=10**7, client=client)   # == sim.run(...)
    counts = distributed.count_detection_events(sim, circuit, 10**10, client=client)

Sharding contract (docs/scale-out.md): a call draws its Philox key from the simulator exactly as the
same `QuasarqSimulator` call does, then splits the shots into shards of whole 64-shot words; a shard
of words [w, w + k) is sampled with `Engine.sample_frames(..., first_word=w)`, whose random streams
are keyed by the absolute shot word. So the union of the shards is bit for bit the single-process
result, whatever the number of workers, the shard size or which worker ran which shard, and a shard
that is run again (a worker died; Dask retries it elsewhere) gives the same bits. Programs with
classically controlled non-Pauli gates whose shot branching does not split exactly
(`engines.branching.splits_exactly`) run as one shard.

Each compiled Program is shipped once per worker (scattered; its schedule, reference sample,
device upload and decoder are built there once and kept while the sampler keeps the program).
Results stream back as shards finish (`iter_shards`), bit-packed, or reduced on the workers
(`count_detection_events`, `count_logical_errors`, any `reduce=` function), so shots never have to
sit in one host's memory. `client=None` runs the same shards in this process, one after the other.

Dask is imported only when a client is used; `import cirq_quasarq` never imports this module.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import subprocess
import threading
import time
import uuid
import warnings
import zlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import cirq
import numpy as np

from .core.packed import REDUCTIONS, popcount_rows, reduce_rows, xor_rows
from .core.parities import Parities, parities_shot_major
from .core.program import Annotation, Program
from .engines import Engine, branching, cuda_available, select_engine
from .errors import DeviceUnavailableError, InvalidInputError
from .results import records_from_packed, shot_major
from .simulator import QuasarqSimulator, _is_stim, prepared

# What a shard returns (iter_shards(what=...)); the single-process call each one matches.
WHAT = {
    "records": "uint64 [records, words] record-major packed measurement records (sample_packed, run)",
    "measurements": "uint8 [shots, ceil(records/8)] Stim's bit-packed records (sample_measurements)",
    "detectors": "uint8 [shots, ceil(detectors/8)] (sample_detectors(bit_packed=True))",
    "detectors+observables": "uint8 [shots, ceil((D+O)/8)] (sample_detectors(append_observables=True, ...))",
    "detectors,observables": "(uint8 [shots, ceil(D/8)], uint8 [shots, ceil(O/8)]) (separate_observables=True)",
    "parities": "uint64 [D+O, words] record-major detection events, then observable flips",
}
# Largest shard by default: its packed result stays under this many bytes.
SHARD_BYTES = 1 << 28
# Default shards per worker thread when no shard size is given (balances the load, streams).
SHARDS_PER_THREAD = 4
# The engines' per-shot draws (a noise channel's outcome, a confusion map's value) count shot >> 1
# in a 61-bit Philox counter (core/rng.py: its bits past 32 sit above the stream id): past this
# many shots of one key they would repeat. A longer run should be split into calls, each of which
# draws its own key.
SHOTS_PER_KEY = 1 << 62


@dataclasses.dataclass
class Shard:
    """One shard's result: shot words [first_word, first_word + ceil(shots/64)) of the call, i.e.
    shots [64 * first_word, 64 * first_word + shots); `data` as WHAT[what] says (local: row /
    column 0 is the shard's first shot), or what the reduce function made of it."""

    index: int
    first_word: int
    shots: int
    data: Any

    @property
    def first_shot(self) -> int:
        return 64 * self.first_word


@dataclasses.dataclass
class DetectionEventCounts:
    """How many of `shots` shots fired each detector and flipped each observable."""

    shots: int
    detectors: np.ndarray  # int64 [D]
    observables: np.ndarray  # int64 [O]


@dataclasses.dataclass
class LogicalErrorCounts:
    """Decoded shots: `errors` of the `shots - discards` kept shots were logical errors."""

    shots: int
    errors: int
    discards: int
    seconds: float = 0.0


# ------------------------------------------------------------------------------------ worker side
_GPU_USABLE: Optional[bool] = None
_DEVICE_THREAD: Optional[concurrent.futures.ThreadPoolExecutor] = None
_PROCESS_LOCK = threading.Lock()


def _gpu_usable() -> bool:
    global _GPU_USABLE
    if _GPU_USABLE is None:
        _GPU_USABLE = cuda_available()
    return _GPU_USABLE


def _on_device(device: str, fn: Callable[[], Any]) -> Any:
    """Run `fn` where this process's engine for `device` may run. The CUDA engine lives on one
    thread of the process (its context is current there, its buffers are not shared between
    concurrent calls): every GPU call of the process goes through that thread, one at a time.
    NumPy work runs on the calling thread."""
    global _DEVICE_THREAD
    if device == "cpu" or (device == "auto" and not _gpu_usable()):
        return fn()
    with _PROCESS_LOCK:
        if _DEVICE_THREAD is None:
            _DEVICE_THREAD = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="quasarq-device")
    return _DEVICE_THREAD.submit(fn).result()


class _Job:
    """What a worker needs for one program; shipped (scattered) once per worker. Its caches (the
    schedule and reference sample in program.derived, the parities, the compiled decoder) are
    built on the worker at first use and are never shipped."""

    def __init__(self, program: Program, device: str, dem: Optional[str] = None, decoder: Any = None,
                 engine: Optional[Engine] = None, local: bool = False):
        self.program = program
        self.device = device
        self.dem = dem  # text of a stim.DetectorErrorModel (count_logical_errors)
        self.decoder = decoder  # a sinter decoder name or sinter.Decoder
        self._init_caches(engine, local)

    def _init_caches(self, engine: Optional[Engine] = None, local: bool = False) -> None:
        # local: no cluster; the shards run on the caller's thread with the caller's engine.
        self.local = local
        self._engine = engine
        self._lock = threading.Lock()
        self._parities: Dict[str, Parities] = {}
        self._compiled_decoder = None

    def __getstate__(self) -> Dict[str, Any]:
        return {"program": dataclasses.replace(self.program), "device": self.device,
                "dem": self.dem, "decoder": self.decoder}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_caches()

    # -- on the device thread
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = select_engine(self.device)
        # The process's engine may have been made on another thread (a cluster of threads in the
        # client's process): each of its calls makes its context current for the call.
        return self._engine

    def reference(self, program: Program) -> np.ndarray:
        """The program's reference sample, as QuasarqSimulator.reference makes and keeps it."""
        ref = program.derived.get("reference")
        if ref is None:
            ref = program.derived["reference"] = self.engine().reference_records(program, prepared(program))
        return ref

    def annotations(self, program: Program, what: str) -> List[Annotation]:
        dets, obs = program.detectors, program.observables
        if what == "detectors":
            return list(dets)
        if what == "detectors,observables":  # observables from a byte boundary, as sample_detectors
            return dets + [Annotation("pad", np.zeros(0, dtype=np.int64))] * (-len(dets) % 8) + obs
        return dets + obs

    def _inputs(self, what: str):
        """(program, schedule, engine, controlled?, reference, parities or None) for `what`,
        built once per worker, whichever thread comes first."""
        with self._lock:
            records = what in ("records", "measurements")
            program = self.program if records else self.program.with_pauli_readout()
            sched = prepared(program)
            engine = self.engine()
            controlled = program.needs_branching()
            needs_ref = records or bool(program.conditions or program.confusions or controlled)
            reference = self.reference(program) if needs_ref else np.zeros(program.num_records, dtype=np.uint8)
            parities = None
            if not records:
                parities = self._parities.get(what)
                if parities is None:
                    parities = self._parities[what] = Parities.of(self.annotations(program, what), reference)
        return program, sched, engine, controlled, reference, parities

    def reduced(self, key, first_word: int, shots: int, what: str, op: str) -> np.ndarray:
        """The shard's record-major rows (`what` "records" or "parities") reduced over its shots
        by the engine (core.packed.REDUCTIONS): uint64 [rows]; on a GPU only these words leave it."""
        program, sched, engine, controlled, reference, parities = self._inputs(what)
        if controlled:
            packed = engine.sample_controlled(program, sched, key, shots, first_word=first_word)
            return reduce_rows(packed if parities is None else parities.reduce(packed), shots, op)
        return engine.reduce_frames(program, sched, key, reference, shots, parities, op=op, first_word=first_word)

    def sample(self, key, first_word: int, shots: int, what: str, copy: bool) -> Any:
        """The shard's bits, exactly as the matching QuasarqSimulator call lays them out."""
        program, sched, engine, controlled, reference, parities = self._inputs(what)
        if what in ("records", "measurements"):
            if what == "measurements" and not controlled:
                out = engine.sample_frames(program, sched, key, reference, shots, shot_major=True,
                                           first_word=first_word)
            else:
                if controlled:
                    packed = engine.sample_controlled(program, sched, key, shots, first_word=first_word)
                else:
                    packed = engine.sample_frames(program, sched, key, reference, shots, first_word=first_word)
                out = packed if what == "records" else shot_major(packed, shots, True)
        else:
            by_shot = what != "parities"
            if controlled:
                packed = parities.reduce(engine.sample_controlled(program, sched, key, shots, first_word=first_word))
                out = parities_shot_major(packed, shots) if by_shot else packed
            else:
                out = engine.sample_frames(program, sched, key, reference, shots, parities, by_shot,
                                           first_word=first_word)
            if what == "detectors,observables":
                split = (len(program.detectors) + 7) // 8
                out = (out[:, :split], out[:, split:])
        if copy:  # out of the engine's reusable (page-locked) buffers before it is kept anywhere
            out = tuple(np.array(o) for o in out) if isinstance(out, tuple) else np.array(out)
        return out

    def compiled_decoder(self):
        with self._lock:
            if self._compiled_decoder is None:
                import sinter
                import stim

                decoder = sinter.BUILT_IN_DECODERS[self.decoder] if isinstance(self.decoder, str) else self.decoder
                self._compiled_decoder = decoder.compile_decoder_for_dem(dem=stim.DetectorErrorModel(self.dem))
            return self._compiled_decoder


class _JobReducer:
    """A reduction that needs the worker's job (its compiled decoder): called as f(shard, job)."""

    def __call__(self, shard: Shard, job: _Job) -> Any:
        raise NotImplementedError


class _CountErrors(_JobReducer):
    def __init__(self, postselection_mask=None, postselected_observables_mask=None):
        self.postselection_mask = postselection_mask
        self.postselected_observables_mask = postselected_observables_mask

    def __call__(self, shard: Shard, job: _Job) -> LogicalErrorCounts:
        from .sinter import count_errors

        t0 = time.monotonic()
        dets, obs = shard.data
        errors, discards = count_errors(job.compiled_decoder(), dets, obs, self.postselection_mask,
                                        self.postselected_observables_mask)
        return LogicalErrorCounts(shard.shots, errors, discards, time.monotonic() - t0)


def _run_shard(job: _Job, key, index: int, first_word: int, shots: int, what: str, reduce) -> Shard:
    """One shard on a worker (or in this process when there is no client). `reduce`: None, a
    function, or the name of a reduction the engine runs where it samples (core.packed.REDUCTIONS)."""
    def work():
        if isinstance(reduce, str):
            return job.reduced(key, first_word, shots, what, reduce)
        return job.sample(key, first_word, shots, what, copy=reduce is None and not job.local)

    data = work() if job.local else _on_device(job.device, work)
    shard = Shard(index, first_word, shots, data)
    if reduce is None or isinstance(reduce, str):
        return shard
    value = reduce(shard, job) if isinstance(reduce, _JobReducer) else reduce(shard)
    return Shard(index, first_word, shots, value)


# ------------------------------------------------------------------------------------ client side
def _plan(shots: int, shard_words: int) -> Iterator[Tuple[int, int, int]]:
    """(index, first word, shots) of each shard, lazily (10^12 shots make many shards): whole
    64-shot words, the last one partial."""
    words = -(-shots // 64)
    shard_words = max(1, int(shard_words))
    return ((i, w, min(64 * (w + shard_words), shots) - 64 * w) for i, w in enumerate(range(0, words, shard_words)))


def _workers_info(client: Any) -> Dict[str, Dict[str, Any]]:
    """{address: info} of every worker (older distributed lists them all without n_workers)."""
    try:
        return client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:
        return client.scheduler_info()["workers"]


def _as_simulator(simulator: Any) -> QuasarqSimulator:
    if isinstance(simulator, QuasarqSimulator):
        return simulator
    return QuasarqSimulator(seed=simulator, device="cpu")  # compiles and draws keys only


class DistributedSampler(cirq.Sampler):
    """A `cirq.Sampler` (run, run_sweep, sample, run_batch, ...) whose shots are sampled in shards
    across a dask.distributed cluster, bit for bit equal to the same calls of `simulator`.

    Args:
        simulator: a QuasarqSimulator (its seed state, noise model and device are used and its
            random state advances as its own call would), or a seed (None, int, RandomState,
            Generator: a QuasarqSimulator(seed=...) made for it).
        client: a distributed.Client, or None to run the shards in this process.
        device: the workers' engine, "auto" | "gpu" | "cpu" (default: the simulator's).
        shard_words: 64-shot words per shard (default: about SHARDS_PER_THREAD shards per worker
            thread, each under SHARD_BYTES of results; with no client, as few as fit).
        workers: restrict the work to these worker addresses or names (default: all).
        retries: Dask retries of a shard that raised (a shard whose worker died is re-run by the
            scheduler anyway, up to its `allowed-failures`).
        in_flight: shards submitted ahead of the results (default: 2 per worker thread + 2).
    """

    def __init__(self, simulator: Any = None, *, client: Any = None, device: Optional[str] = None,
                 shard_words: Optional[int] = None, workers: Optional[Sequence[str]] = None, retries: int = 2,
                 in_flight: Optional[int] = None):
        self.simulator = _as_simulator(simulator)
        self.client = client
        self.device = device or (simulator.device if isinstance(simulator, QuasarqSimulator) else "auto")
        if self.device not in ("auto", "gpu", "cpu"):
            raise ValueError(f'device must be "auto", "gpu" or "cpu", got {self.device!r}')
        self.shard_words = shard_words
        self.workers = list(workers) if workers is not None else None
        self.retries = int(retries)
        self.in_flight = in_flight
        self._jobs: Dict[tuple, tuple] = {}  # scattered jobs, kept while the program is

    # ---------------------------------------------------------------- plumbing
    def _threads(self) -> int:
        if self.client is None:
            return 1
        counts = self.client.nthreads()
        if self.workers is not None:
            chosen = set(self.workers)
            info = _workers_info(self.client)
            counts = {a: n for a, n in counts.items()
                      if a in chosen or info.get(a, {}).get("name") in chosen}
        return max(1, sum(counts.values()))

    def _shard_words(self, shots: int, row_bytes: int) -> int:
        words = max(1, -(-shots // 64))
        cap = max(1, SHARD_BYTES // max(1, 64 * row_bytes))
        if self.shard_words is not None:
            return int(self.shard_words)
        if self.client is None:
            return min(words, cap)
        return max(1, min(cap, -(-words // (SHARDS_PER_THREAD * self._threads()))))

    def _job(self, program: Program, dem: Optional[str] = None, decoder: Any = None):
        """The job of `program`: in this process (no client) or a future of it scattered to every
        worker, made once and kept while this sampler keeps the program."""
        if self.client is None:
            engine = self.simulator.engine if self.device == self.simulator.device else None
            return _Job(program, self.device, dem, decoder, engine=engine, local=True)
        tag = (id(program), self.device, dem and zlib.crc32(dem.encode()), repr(decoder))
        held = self._jobs.get(tag)
        if held is not None and held[0] is program:
            return held[1]
        future = self.client.scatter(_Job(program, self.device, dem, decoder), broadcast=True, hash=False,
                                     workers=self.workers)
        self._jobs[tag] = (program, future)
        while len(self._jobs) > 8:
            self._jobs.pop(next(iter(self._jobs)))
        return future

    def _stream(self, job, philox, plan: Iterator[Tuple[int, int, int]], what: str, reduce) -> Iterator[Shard]:
        """The shards' results as they finish; the outstanding shards are cancelled when the
        consumer stops early."""
        if self.client is None:
            for index, first_word, shots in plan:
                yield _run_shard(job, philox, index, first_word, shots, what, reduce)
            return
        from distributed import as_completed

        token = uuid.uuid4().hex[:12]
        width = self.in_flight or 2 * self._threads() + 2
        todo = iter(plan)
        live: set = set()

        def submit(spec):
            index, first_word, shots = spec
            future = self.client.submit(_run_shard, job, philox, index, first_word, shots, what, reduce,
                                        key=f"quasarq-{what}-{token}-{index}", retries=self.retries,
                                        workers=self.workers, pure=False)
            live.add(future)
            return future

        done = as_completed([submit(spec) for _, spec in zip(range(width), todo)], with_results=True)
        try:
            for future, shard in done:
                # Forget the future: its result is released on the worker (not kept there, not
                # recomputed if that worker dies later).
                live.discard(future)
                del future
                following = next(todo, None)
                if following is not None:
                    done.add(submit(following))
                yield shard
        finally:
            if live:
                self.client.cancel(list(live))

    def _prepare(self, program: Program) -> bool:
        """Whether the program's shots may be split (see engines.branching.splits_exactly)."""
        return not program.needs_branching() or branching.splits_exactly(prepared(program))

    def _shards(self, program: Program, key, repetitions: int, what: str, reduce, job=None,
                shard_words: Optional[int] = None) -> Iterator[Shard]:
        if what not in WHAT:
            raise ValueError(f"what must be one of {sorted(WHAT)}, got {what!r}")
        if isinstance(reduce, str) and (reduce not in REDUCTIONS or what not in ("records", "parities")):
            raise InvalidInputError(f"reduce={reduce!r}: the engines reduce {' or '.join(map(repr, REDUCTIONS))} "
                                    f"of what='records' or what='parities', not of what={what!r}")
        if repetitions > SHOTS_PER_KEY:
            warnings.warn(f"{repetitions} shots in one call: the engines' per-shot random draws repeat past "
                          f"2**62 shots of one key; split the run into calls of at most {SHOTS_PER_KEY} shots "
                          "(each call draws its own key)", stacklevel=3)
        rows = {"records": program.num_records, "measurements": program.num_records}.get(
            what, len(program.detectors) + len(program.observables) + 7)
        row_bytes = (rows + 7) // 8
        if not self._prepare(program):
            words = max(1, -(-repetitions // 64))
        else:
            words = shard_words or self._shard_words(repetitions, row_bytes)
        if repetitions <= 0:
            return iter(())
        return self._stream(job if job is not None else self._job(program), key, _plan(repetitions, words), what,
                            reduce)

    # ---------------------------------------------------------------- shards
    def iter_shards(self, circuit: Any, repetitions: int, *, what: str = "records",
                    param_resolver: cirq.ParamResolverOrSimilarType = None,
                    reduce: Union[None, str, Callable[[Shard], Any]] = None) -> Iterator[Shard]:
        """The shards of one call as they finish (any order; `Shard.index`, `first_word` place
        them), each `data` as WHAT[what] says, or `reduce(shard)` computed on the worker (only the
        reduced value travels). `reduce="popcount"` or `"xor"` (what "records" or "parities"):
        uint64 [rows], each row's set bits or the XOR of its words over the shard's shots,
        computed by the engine where it samples (on a GPU, only those words leave the device);
        counts add and XORs combine across shards, whatever the sharding. The key is drawn from the simulator now, as the matching
        single-process call draws it (run / sample_measurements / sample_detectors)."""
        program = self.simulator.compile(circuit, param_resolver)
        key = self.simulator._next_key()
        return self._shards(program, key, int(repetitions), what, reduce)

    # ---------------------------------------------------------------- cirq.Sampler
    def run_sweep(self, program: cirq.AbstractCircuit, params: cirq.Sweepable,
                  repetitions: int = 1) -> Sequence[cirq.Result]:
        return list(self.run_sweep_iter(program, params, repetitions))

    def run_sweep_iter(self, program: cirq.AbstractCircuit, params: cirq.Sweepable,
                       repetitions: int = 1) -> Iterator[cirq.Result]:
        """As QuasarqSimulator.run_sweep_iter: one key per parameter point, drawn in order."""
        sim = self.simulator
        if not (program.num_measurements if _is_stim(program) else program.has_measurements()):
            raise ValueError("Circuit has no measurements to sample.")
        for resolver, compiled in sim._programs(program, params):
            if repetitions == 0:
                records = {k.key: np.empty((0, 1, 1), dtype=np.int8) for k in compiled.keys}
            else:
                key = sim._next_key()
                packed = np.zeros((compiled.num_records, -(-repetitions // 64)), dtype=np.uint64)
                for shard in self._shards(compiled, key, repetitions, "records", None):
                    packed[:, shard.first_word : shard.first_word + shard.data.shape[1]] = shard.data
                records = records_from_packed(compiled, packed, repetitions)
            yield cirq.ResultDict(params=resolver, records=records)

    # ---------------------------------------------------------------- Stim-shaped samples
    def _gather_shot_major(self, program, key, repetitions, what, widths) -> List[np.ndarray]:
        outs = [np.zeros((repetitions, (w + 7) // 8), dtype=np.uint8) for w in widths]
        for shard in self._shards(program, key, repetitions, what, None):
            parts = shard.data if isinstance(shard.data, tuple) else (shard.data,)
            for out, part in zip(outs, parts):
                out[shard.first_shot : shard.first_shot + shard.shots] = part
        return outs

    def sample_measurements(self, circuit: Any, repetitions: int, *, bit_packed: bool = False) -> np.ndarray:
        """As QuasarqSimulator.sample_measurements."""
        program = self.simulator.compile(circuit)
        key = self.simulator._next_key()
        out, = self._gather_shot_major(program, key, int(repetitions), "measurements", [program.num_records])
        if bit_packed:
            return out
        return np.unpackbits(out, axis=1, count=program.num_records, bitorder="little").astype(bool)

    def sample_detectors(self, circuit: Any, repetitions: int, *, separate_observables: bool = False,
                         append_observables: bool = False, bit_packed: bool = False):
        """As QuasarqSimulator.sample_detectors (Stim's detector sampler's shapes)."""
        if separate_observables and append_observables:
            raise InvalidInputError("sample_detectors: separate_observables and append_observables exclude "
                                    "each other (as in Stim)")
        program = self.simulator.compile(circuit)
        key = self.simulator._next_key()
        d, o = len(program.detectors), len(program.observables)
        if separate_observables:
            what, widths = "detectors,observables", [d, o]
        elif append_observables:
            what, widths = "detectors+observables", [d + o]
        else:
            what, widths = "detectors", [d]
        outs = self._gather_shot_major(program, key, int(repetitions), what, widths)
        if not bit_packed:
            outs = [np.unpackbits(p, axis=1, count=w, bitorder="little").astype(bool) for p, w in zip(outs, widths)]
        return tuple(outs) if separate_observables else outs[0]

    # ---------------------------------------------------------------- reductions on the workers
    def count_detection_events(self, circuit: Any, repetitions: int) -> DetectionEventCounts:
        """How often each detector fired and each observable flipped in `repetitions` shots,
        counted on the workers (the same shots as sample_detectors with the same seed)."""
        program = self.simulator.compile(circuit)
        key = self.simulator._next_key()
        d = len(program.detectors)
        total = np.zeros(d + len(program.observables), dtype=np.int64)
        for shard in self._shards(program, key, int(repetitions), "parities", "popcount"):
            total += shard.data.astype(np.int64)
        return DetectionEventCounts(int(repetitions), total[:d], total[d:])

    def _dem_text(self, circuit: Any, dem: Any) -> str:
        if dem is not None:
            return str(dem)
        if _is_stim(circuit):
            return str(circuit.detector_error_model(decompose_errors=True))
        if self.simulator.noise is not None:
            raise InvalidInputError("count_logical_errors: the simulator's noise model is not in the circuit; "
                                    "pass the detector error model of the noisy circuit as dem=")
        import stimcirq

        return str(stimcirq.cirq_circuit_to_stim_circuit(circuit).detector_error_model(decompose_errors=True))

    def iter_logical_errors(self, circuit: Any, repetitions: int, *, decoder: Any = "pymatching", dem: Any = None,
                            postselection_mask: Optional[np.ndarray] = None,
                            postselected_observables_mask: Optional[np.ndarray] = None,
                            shard_words: Optional[int] = None) -> Iterator[Shard]:
        """Shards whose `data` is the LogicalErrorCounts of their shots, decoded on the workers
        by a sinter decoder (a name of sinter.BUILT_IN_DECODERS or a sinter.Decoder) compiled once
        per worker for `dem` (default: the circuit's own, with decomposed errors)."""
        program = self.simulator.compile(circuit)
        text = self._dem_text(circuit, dem)
        key = self.simulator._next_key()
        job = self._job(program, text, decoder)
        reduce = _CountErrors(postselection_mask, postselected_observables_mask)
        return self._shards(program, key, int(repetitions), "detectors,observables", reduce, job, shard_words)

    def count_logical_errors(self, circuit: Any, repetitions: int, **options) -> LogicalErrorCounts:
        """Logical errors among `repetitions` shots (options as iter_logical_errors), decoded on
        the workers: the same shots as sample_detectors(separate_observables=True) would give."""
        t0 = time.monotonic()
        total = LogicalErrorCounts(0, 0, 0)
        for shard in self.iter_logical_errors(circuit, repetitions, **options):
            total.shots += shard.data.shots
            total.errors += shard.data.errors
            total.discards += shard.data.discards
        total.seconds = time.monotonic() - t0
        return total

    def collect(self, tasks: Sequence[Any], *, max_shots: int, max_errors: Optional[int] = None,
                decoders: Sequence[str] = ("pymatching",), custom_decoders: Optional[Dict[str, Any]] = None,
                shard_words: int = 256, print_progress: bool = False) -> List[Any]:
        """sinter-style collection (`sinter.collect`'s statistics, `sinter.TaskStats`) with each
        task's shots sampled and decoded across the cluster.

        Per task (and per decoder: the task's own, else each of `decoders`) one key is drawn from
        the simulator, in order, and shards of `shard_words` words are sampled until `max_shots`
        (or the task's collection_options.max_shots); with `max_errors`, the counts are those of
        the shortest prefix of shards (in shot order) that reaches it, so the statistics depend on
        the seed, the tasks and `shard_words` only, never on the workers or their timing."""
        import sinter

        stats = []
        for task in tasks:
            names = [task.decoder] if task.decoder is not None else list(decoders)
            for name in names:
                decoder = (custom_decoders or {}).get(name, name)
                opts = task.collection_options
                shots_cap = int(opts.max_shots if opts.max_shots is not None else max_shots)
                errors_cap = opts.max_errors if opts.max_errors is not None else max_errors
                dem = task.detector_error_model
                if dem is None:
                    dem = task.circuit.detector_error_model(decompose_errors=True)
                t0 = time.monotonic()
                shards = self.iter_logical_errors(
                    task.circuit, shots_cap, decoder=decoder, dem=dem, postselection_mask=task.postselection_mask,
                    postselected_observables_mask=task.postselected_observables_mask, shard_words=shard_words)
                arrived: Dict[int, LogicalErrorCounts] = {}
                nxt, shots, errors, discards = 0, 0, 0, 0
                for shard in shards:
                    arrived[shard.index] = shard.data
                    while nxt in arrived:
                        counts = arrived.pop(nxt)
                        shots, errors, discards, nxt = (shots + counts.shots, errors + counts.errors,
                                                        discards + counts.discards, nxt + 1)
                        if errors_cap is not None and errors >= errors_cap:
                            break
                    if errors_cap is not None and errors >= errors_cap:
                        shards.close()  # cancels what is still running
                        break
                named = sinter.Task(circuit=task.circuit, decoder=name, detector_error_model=dem,
                                    postselection_mask=task.postselection_mask,
                                    postselected_observables_mask=task.postselected_observables_mask,
                                    json_metadata=task.json_metadata)
                stat = sinter.TaskStats(strong_id=named.strong_id(), decoder=name, json_metadata=task.json_metadata,
                                        shots=shots, errors=errors, discards=discards,
                                        seconds=time.monotonic() - t0)
                if print_progress:
                    print(f"{name} {task.json_metadata}: {shots} shots, {errors} errors, {discards} discards",
                          flush=True)
                stats.append(stat)
        return stats


# ------------------------------------------------------------------------------------ functions
def _sampler(simulator, client, options) -> DistributedSampler:
    return DistributedSampler(simulator, client=client, **options)


def run(simulator: Any, circuit: cirq.AbstractCircuit, param_resolver: cirq.ParamResolverOrSimilarType = None,
        repetitions: int = 1, *, client: Any = None, **options) -> cirq.Result:
    """`simulator.run(circuit, param_resolver, repetitions)` sampled across `client`'s workers
    (options: those of DistributedSampler): the same cirq.ResultDict, bit for bit."""
    return _sampler(simulator, client, options).run(circuit, param_resolver, repetitions)


def run_sweep(simulator: Any, circuit: cirq.AbstractCircuit, params: cirq.Sweepable, repetitions: int = 1, *,
              client: Any = None, **options) -> Sequence[cirq.Result]:
    """`simulator.run_sweep(...)` across the cluster (one key per point, as the simulator draws)."""
    return _sampler(simulator, client, options).run_sweep(circuit, params, repetitions)


def sample_detectors(simulator: Any, circuit: Any, repetitions: int, *, client: Any = None,
                     separate_observables: bool = False, append_observables: bool = False, bit_packed: bool = False,
                     **options):
    """`simulator.sample_detectors(...)` across the cluster: the same arrays."""
    return _sampler(simulator, client, options).sample_detectors(
        circuit, repetitions, separate_observables=separate_observables, append_observables=append_observables,
        bit_packed=bit_packed)


def sample_measurements(simulator: Any, circuit: Any, repetitions: int, *, client: Any = None,
                        bit_packed: bool = False, **options) -> np.ndarray:
    """`simulator.sample_measurements(...)` across the cluster."""
    return _sampler(simulator, client, options).sample_measurements(circuit, repetitions, bit_packed=bit_packed)


def iter_shards(simulator: Any, circuit: Any, repetitions: int, *, client: Any = None, what: str = "records",
                param_resolver: cirq.ParamResolverOrSimilarType = None,
                reduce: Optional[Callable[[Shard], Any]] = None, **options) -> Iterator[Shard]:
    """The shards of one call as they finish (DistributedSampler.iter_shards)."""
    return _sampler(simulator, client, options).iter_shards(circuit, repetitions, what=what,
                                                            param_resolver=param_resolver, reduce=reduce)


def count_detection_events(simulator: Any, circuit: Any, repetitions: int, *, client: Any = None,
                           **options) -> DetectionEventCounts:
    """Per-detector / per-observable event counts, reduced on the workers."""
    return _sampler(simulator, client, options).count_detection_events(circuit, repetitions)


def count_logical_errors(simulator: Any, circuit: Any, repetitions: int, *, client: Any = None,
                         decoder: Any = "pymatching", dem: Any = None, postselection_mask=None,
                         postselected_observables_mask=None, **options) -> LogicalErrorCounts:
    """Logical errors of `repetitions` decoded shots, sampled and decoded on the workers."""
    return _sampler(simulator, client, options).count_logical_errors(
        circuit, repetitions, decoder=decoder, dem=dem, postselection_mask=postselection_mask,
        postselected_observables_mask=postselected_observables_mask)


def collect(tasks: Sequence[Any], *, client: Any = None, max_shots: int, max_errors: Optional[int] = None,
            decoders: Sequence[str] = ("pymatching",), custom_decoders: Optional[Dict[str, Any]] = None,
            seed: Any = None, device: str = "auto", shard_words: int = 256, print_progress: bool = False,
            **options) -> List[Any]:
    """sinter.collect's statistics for `tasks` (sinter.Task), sampled with this package's engines
    and decoded across the cluster (DistributedSampler.collect); `seed` as QuasarqSimulator's."""
    sampler = DistributedSampler(seed, client=client, device=device, **options)
    return sampler.collect(tasks, max_shots=max_shots, max_errors=max_errors, decoders=decoders,
                           custom_decoders=custom_decoders, shard_words=shard_words, print_progress=print_progress)


# ------------------------------------------------------------------------------------ clusters
def visible_gpus() -> List[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (that variable's
    entries when it is set, else the indices nvidia-smi lists, else PyCUDA's device count)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip() and d.strip() != "-1"]
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=30, check=True).stdout.split()
        return [d.strip() for d in listed if d.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import pycuda.driver as cuda

        cuda.init()
        return [str(i) for i in range(cuda.Device.count())]
    except Exception:  # noqa: BLE001 - no driver, no PyCUDA: no GPU
        return []


def local_gpu_cluster(devices: Optional[Sequence[Any]] = None, *, threads_per_worker: int = 1,
                      dashboard_address: Optional[str] = None, asynchronous: bool = False,
                      worker_options: Optional[Dict[str, Any]] = None, **cluster_options):
    """A local dask cluster with one worker process per GPU (dask-cuda's LocalCUDACluster does the
    same where it is installed): a distributed.SpecCluster of Nanny-managed workers, worker
    "gpu-<d>" with CUDA_VISIBLE_DEVICES=<d>, so its engine's device 0 is GPU d. `devices`:
    default visible_gpus(). One thread per worker by default: the GPU is driven by one thread of
    the process anyway; more threads overlap the host-side reductions with sampling."""
    from distributed import Nanny, Scheduler, SpecCluster

    devices = [str(d) for d in (visible_gpus() if devices is None else devices)]
    if not devices:
        raise DeviceUnavailableError("local_gpu_cluster: no GPU is visible to this process")
    workers = {
        f"gpu-{d}": {"cls": Nanny, "options": {"nthreads": int(threads_per_worker), "name": f"gpu-{d}",
                                               "env": {"CUDA_VISIBLE_DEVICES": d}, **(worker_options or {})}}
        for d in devices
    }
    # No dashboard unless asked for (its HTTP server then takes any free port, never 8787).
    scheduler_options = {"dashboard": dashboard_address is not None, "dashboard_address": dashboard_address or ":0"}
    scheduler = {"cls": Scheduler, "options": scheduler_options}
    return SpecCluster(workers=workers, scheduler=scheduler, asynchronous=asynchronous, name="quasarq-gpu",
                       **cluster_options)


__all__ = [
    "DistributedSampler",
    "Shard",
    "DetectionEventCounts",
    "LogicalErrorCounts",
    "WHAT",
    "run",
    "run_sweep",
    "sample_detectors",
    "sample_measurements",
    "iter_shards",
    "count_detection_events",
    "count_logical_errors",
    "collect",
    "popcount_rows",
    "xor_rows",
    "visible_gpus",
    "local_gpu_cluster",
]
