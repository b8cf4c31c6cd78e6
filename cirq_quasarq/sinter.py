"""A sinter plug-in: sinter's collection loop with this package's engines sampling the shots.

    import sinter, cirq_quasarq.sinter
    stats = sinter.collect(num_workers=4, tasks=tasks, decoders=["quasarq"], max_shots=10**6,
                           custom_decoders={"quasarq": cirq_quasarq.sinter.QuasarqSampler(seed=5)})

    sinter collect --circuits *.stim --decoders quasarq --max_shots 1000000 --processes 4 \\
        --custom_decoders_module_function cirq_quasarq.sinter:sinter_samplers --save_resume_filepath out.csv

`QuasarqSampler(decoder="pymatching", device="auto", seed=None, *, count_detection_events=False,
count_observable_error_combos=False)` is a `sinter.Sampler`: for each task it compiles the stim
circuit once (without Cirq), then each `sample(n)` draws at most n shots of detection events
(bit-packed, reduced on the GPU where there is one), decodes them with one of sinter's decoders
(any name of `sinter.BUILT_IN_DECODERS`, or a `sinter.Decoder`), discards the shots that
`postselection_mask` / `postselected_observables_mask` and the decoder's discard byte say to, and
counts the errors: a collection stops at exactly `max_shots`.

Batches: the sampler sizes them itself (`handles_throttling`), so sinter's `max_batch_size` does
not apply: up to 16,384 shots a call on the CPU, growing from 1,024 while calls are short, and
262,144 on the GPU (sinter's own ramp stops at 1,024 by default, where a call's fixed cost would
dominate).

Shots: a task's shots are one stream, keyed by (seed, the task's strong id): shot i of a task has
the same bits wherever and whenever it is sampled (the engines key every draw by the absolute
shot, `cirq_quasarq/shots.py`). Each `sample(n)` takes the next n shots of the stream from a
counter that sinter's worker processes share (sinter hands the sampler to each process it starts,
and the counters travel with it), so workers never draw the same shots, and the shots of a
collection are shots 0, 1, ..., N - 1 of each task's stream whatever the number of workers and the
batches: with a fixed seed, a collection that `max_shots` ends gives the same counts every time
(one that `max_errors` ends stops after a batch whose size depends on timing). Without a seed each
`QuasarqSampler` draws a fresh one. Adding to earlier results (sinter's resume file) with the seed
that made them would sample the same shots again: give such a run a new seed. A copy of the sampler
made other than by sinter starting a process samples a stream of its own (a fresh seed).

Counts: sinter refuses its own `count_detection_events` / `count_observable_error_combos` for any
custom `Sampler` (sinter's MuxSampler raises NotImplementedError), so they are options of
`QuasarqSampler`, filling `AnonTaskStats.custom_counts` with sinter's keys: `detectors_checked`,
`detection_events` (before postselection), and `obs_mistake_mask=E_E_` per pattern of mispredicted
observables. `sinter collect --custom_decoders_module_function` calls a function of no arguments
and takes the dict it returns as its `custom_decoders`: `sinter_samplers` names a sampler for each
decoder ("quasarq" decodes with pymatching, "quasarq-<name>" with sinter's decoder <name>), and
`sinter_samplers_counting` the same ones with both counts on.
"""

from __future__ import annotations

import collections
import multiprocessing
import multiprocessing.context
import secrets
import time
from typing import Counter, Dict, Optional, Tuple, Union

import numpy as np
import sinter

from .core import rng
from .engines import select_engine
from .shots import Shots

# This sampler sizes its own batches (sinter's ramp starts at 1 shot and stops at its
# max_batch_size, 1,024 by default). On the GPU: GPU_BATCH shots a call. On the CPU: from CPU_BATCH_FIRST,
# four times more after a call shorter than CPU_BATCH_SECONDS / 4, up to CPU_BATCH, and half after one
# longer than 4 x CPU_BATCH_SECONDS: a call's fixed cost (about 1 ms, mostly its draws' passes) is
# spread over 16x sinter's shots (d = 5, 100k shots: 279 -> 185 ms a task). The shots are a stream,
# so the counts do not depend on the batches.
GPU_BATCH = 1 << 18
CPU_BATCH_FIRST, CPU_BATCH = 1 << 10, 1 << 14
CPU_BATCH_SECONDS = 0.25


class _Counters:
    """The next unsampled shot of each task's stream, in shared memory: a table of (task id,
    next shot) with open addressing, one lock. Made in the 'spawn' context, as sinter starts its
    workers, whose arguments it travels in."""

    SLOTS = 1 << 12

    def __init__(self):
        ctx = multiprocessing.get_context("spawn")
        self.lock = ctx.Lock()
        self.ids = ctx.RawArray("Q", self.SLOTS)  # 0: a free slot
        self.next = ctx.RawArray("Q", self.SLOTS)

    def take(self, task: int, shots: int) -> int:
        """The first of the next `shots` shots of task `task` (a nonzero 64-bit id)."""
        with self.lock:
            for probe in range(self.SLOTS):
                slot = (task + probe) % self.SLOTS
                if self.ids[slot] in (0, task):
                    self.ids[slot] = task
                    first = self.next[slot]
                    self.next[slot] = first + shots
                    return int(first)
        raise RuntimeError(f"QuasarqSampler counts the shots of at most {self.SLOTS} tasks; use a new sampler "
                           "for further tasks")


class QuasarqSampler(sinter.Sampler):
    def __init__(self, decoder: Union[str, "sinter.Decoder"] = "pymatching", device: str = "auto",
                 seed: Optional[int] = None, *, count_detection_events: bool = False,
                 count_observable_error_combos: bool = False):
        if isinstance(decoder, str) and decoder not in sinter.BUILT_IN_DECODERS:
            raise ValueError(f"decoder {decoder!r} is not one of sinter's decoders "
                             f"({', '.join(sinter.BUILT_IN_DECODERS)}); pass a sinter.Decoder for others")
        if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be None or a non-negative integer, not {seed!r}")
        self.decoder = decoder
        self.device = device
        self.seed = secrets.randbits(63) if seed is None else int(seed)
        self.count_detection_events = count_detection_events
        self.count_observable_error_combos = count_observable_error_combos
        self._counters = _Counters()

    def __getstate__(self):
        state = dict(self.__dict__)
        if multiprocessing.context.get_spawning_popen() is None:  # not sinter starting a worker
            state["_counters"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self._counters is None:  # a copy with counters of its own: a stream of its own
            self._counters = _Counters()
            self.seed = secrets.randbits(63)

    def compiled_sampler_for_task(self, task: "sinter.Task") -> "sinter.CompiledSampler":
        return _CompiledQuasarqSampler(self, task)


class _CompiledQuasarqSampler(sinter.CompiledSampler):
    def __init__(self, sampler: QuasarqSampler, task: "sinter.Task"):
        from .compiler.stim_circuit import compile_stim

        self.task, self.counters = task, sampler._counters
        self.count_detection_events = sampler.count_detection_events
        self.count_observable_error_combos = sampler.count_observable_error_combos
        # as sinter's collection makes it (heralded channels need the disjoint errors approximated)
        dem = task.detector_error_model or task.circuit.detector_error_model(
            decompose_errors=True, approximate_disjoint_errors=True)
        if task.decoder is None or task.detector_error_model is None:  # a task not from sinter.collect
            task = sinter.Task(circuit=task.circuit, decoder=task.decoder or "quasarq", detector_error_model=dem,
                               postselection_mask=task.postselection_mask, json_metadata=task.json_metadata,
                               postselected_observables_mask=task.postselected_observables_mask)
        strong_id = int(task.strong_id(), 16)
        self.task_id = (strong_id & 0xFFFFFFFFFFFFFFFF) | 1
        seed = np.random.SeedSequence([sampler.seed, strong_id]).generate_state(1, np.uint64)[0]
        self.key = rng.make_key(int(seed))
        self.engine = select_engine(sampler.device)
        self.batch = CPU_BATCH_FIRST if self.engine.name == "numpy" else GPU_BATCH  # shots a call at most
        self.program = compile_stim(task.circuit)
        self.shots = Shots(self.engine, self.program, "detectors")
        decoder = sinter.BUILT_IN_DECODERS[sampler.decoder] if isinstance(sampler.decoder, str) else sampler.decoder
        self.decoder = decoder.compile_decoder_for_dem(dem=dem)

    def handles_throttling(self) -> bool:
        return True  # batches past sinter's 1,024 shots (GPU_BATCH, CPU_BATCH)

    def sample(self, suggested_shots: int) -> "sinter.AnonTaskStats":
        t0 = time.monotonic()
        shots = min(max(1, int(suggested_shots)), self.batch)
        first = self.counters.take(self.task_id, shots)
        dets, obs = self.shots.sample(self.key, first, shots)
        counts: Counter[str] = collections.Counter()
        if self.count_detection_events:
            counts["detectors_checked"] += len(self.program.detectors) * shots
            counts["detection_events"] += int(np.bitwise_count(dets).sum())
        errors, discards = count_errors(
            self.decoder, dets, obs, self.task.postselection_mask, self.task.postselected_observables_mask,
            combos=counts if self.count_observable_error_combos else None,
            num_observables=len(self.program.observables))
        seconds = time.monotonic() - t0
        if self.engine.name == "numpy" and shots == self.batch:
            if seconds < CPU_BATCH_SECONDS / 4:
                self.batch = min(CPU_BATCH, 4 * self.batch)
            elif seconds > 4 * CPU_BATCH_SECONDS:
                self.batch = max(1, self.batch // 2)
        return sinter.AnonTaskStats(shots=shots, errors=errors, discards=discards, seconds=seconds,
                                    custom_counts=counts)


def count_errors(decoder: "sinter.CompiledDecoder", dets: np.ndarray, obs: np.ndarray,
                 postselection_mask: Optional[np.ndarray] = None,
                 postselected_observables_mask: Optional[np.ndarray] = None, *,
                 combos: Optional[Counter[str]] = None, num_observables: int = 0) -> Tuple[int, int]:
    """(errors, discards) of a batch of bit-packed detection events `dets` and observable flips
    `obs` (uint8 [shots, bytes], as sample_detectors(separate_observables=True, bit_packed=True)
    gives them), decoded by a compiled sinter decoder; shots are discarded as sinter does (the
    postselection masks, and the decoder's own discard byte). With `combos`, each error also
    counts its pattern of mispredicted observables under sinter's key `obs_mistake_mask=E_E_`
    (`num_observables` letters)."""
    discards = 0
    if postselection_mask is not None:
        drop = np.any(dets & postselection_mask, axis=1)
        discards += int(np.count_nonzero(drop))
        dets, obs = dets[~drop], obs[~drop]
    predictions = decoder.decode_shots_bit_packed(bit_packed_detection_event_data=dets)
    if predictions.shape[1] == obs.shape[1] + 1:  # the decoder's own discard byte
        drop = predictions[:, -1] != 0
        discards += int(np.count_nonzero(drop))
        predictions, obs = predictions[~drop, :-1], obs[~drop]
    if postselected_observables_mask is not None:
        drop = np.any((obs ^ predictions) & postselected_observables_mask, axis=1)
        discards += int(np.count_nonzero(drop))
        predictions, obs = predictions[~drop], obs[~drop]
    mistakes = obs ^ predictions
    failed = np.any(mistakes != 0, axis=1)
    if combos is not None and failed.any():
        bits = np.unpackbits(mistakes[failed], axis=1, count=num_observables, bitorder="little")
        patterns, counts = np.unique(bits, axis=0, return_counts=True)
        for pattern, count in zip(patterns, counts):
            combos["obs_mistake_mask=" + "".join("_E"[b] for b in pattern)] += int(count)
    return int(np.count_nonzero(failed)), discards


def _samplers(**options) -> Dict[str, QuasarqSampler]:
    named = {"quasarq": QuasarqSampler("pymatching", **options)}
    for name in sinter.BUILT_IN_DECODERS:
        named[f"quasarq-{name}"] = QuasarqSampler(name, **options)
    return named


def sinter_samplers() -> Dict[str, QuasarqSampler]:
    """For `sinter collect --custom_decoders_module_function cirq_quasarq.sinter:sinter_samplers`:
    "quasarq" (pymatching) and "quasarq-<name>" for each of sinter's decoders, each with a fresh
    seed, on the GPU where one is usable."""
    return _samplers()


def sinter_samplers_counting() -> Dict[str, QuasarqSampler]:
    """`sinter_samplers` with `count_detection_events` and `count_observable_error_combos` on (the
    counts that `sinter collect --count_detection_events ...` refuses for custom samplers)."""
    return _samplers(count_detection_events=True, count_observable_error_combos=True)
