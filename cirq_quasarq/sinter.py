"""A sinter plug-in: sinter's collection loop with this package's engines sampling the shots.

    import sinter, cirq_quasarq.sinter
    stats = sinter.collect(num_workers=4, tasks=tasks, decoders=["quasarq"],
                           custom_decoders={"quasarq": cirq_quasarq.sinter.QuasarqSampler()})

`QuasarqSampler(decoder="pymatching", device="auto", seed=None)` is a `sinter.Sampler`: for each
task it compiles the stim circuit once, then each `sample()` draws a batch of detection events
(bit-packed, reduced on the GPU where there is one), decodes them with one of sinter's decoders
(any name of `sinter.BUILT_IN_DECODERS`, or a `sinter.Decoder`), discards the shots that
`postselection_mask` / `postselected_observables_mask` say to, and counts the errors.

Seeds: sinter runs `compiled_sampler_for_task` in every worker process. Each compiled sampler gets
its own simulator seed, drawn from a `numpy.random.SeedSequence` of (the base seed or fresh
entropy, a checksum of the task's circuit and metadata, the process id, a counter of this process), so no two workers (or
two tasks of one worker) ever draw the same shots; with a base seed the streams are reproducible
per process. The paper's tool's plug-in hands every worker the same seed: its "independent" shot
blocks repeat.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
import zlib
from typing import Optional, Tuple, Union

import numpy as np
import sinter

from .simulator import QuasarqSimulator

# Shots per sample() call at least: the engines amortise their setup over large batches.
MIN_BATCH = {"gpu": 1 << 16, "cpu": 1 << 10}
_COUNTER = itertools.count()


class QuasarqSampler(sinter.Sampler):
    def __init__(self, decoder: Union[str, "sinter.Decoder"] = "pymatching", device: str = "auto",
                 seed: Optional[int] = None):
        self.decoder = decoder
        self.device = device
        self.seed = secrets.randbits(63) if seed is None else int(seed)

    def compiled_sampler_for_task(self, task: "sinter.Task") -> "sinter.CompiledSampler":
        decoder = sinter.BUILT_IN_DECODERS[self.decoder] if isinstance(self.decoder, str) else self.decoder
        task_id = zlib.crc32(str(task.circuit).encode()) ^ zlib.crc32(repr(task.json_metadata).encode())
        entropy = np.random.SeedSequence([self.seed, task_id, os.getpid(), next(_COUNTER)])
        return _CompiledQuasarqSampler(task, decoder, self.device, int(entropy.generate_state(1, np.uint64)[0]))


class _CompiledQuasarqSampler(sinter.CompiledSampler):
    def __init__(self, task: "sinter.Task", decoder: "sinter.Decoder", device: str, seed: int):
        self.task = task
        self.simulator = QuasarqSimulator(seed=np.random.default_rng(seed), device=device)
        self.program = self.simulator.compile(task.circuit)
        dem = task.detector_error_model or task.circuit.detector_error_model(decompose_errors=True)
        self.decoder = decoder.compile_decoder_for_dem(dem=dem)
        self.batch = MIN_BATCH["cpu" if self.simulator.engine.name == "numpy" else "gpu"]

    def sample(self, suggested_shots: int) -> "sinter.AnonTaskStats":
        t0 = time.monotonic()
        shots = max(int(suggested_shots), self.batch)
        dets, obs = self.simulator.sample_detectors(self.program, shots, separate_observables=True, bit_packed=True)
        errors, discards = count_errors(self.decoder, dets, obs, self.task.postselection_mask,
                                        self.task.postselected_observables_mask)
        return sinter.AnonTaskStats(shots=shots, errors=errors, discards=discards, seconds=time.monotonic() - t0)


def count_errors(decoder: "sinter.CompiledDecoder", dets: np.ndarray, obs: np.ndarray,
                 postselection_mask: Optional[np.ndarray] = None,
                 postselected_observables_mask: Optional[np.ndarray] = None) -> Tuple[int, int]:
    """(errors, discards) of a batch of bit-packed detection events `dets` and observable flips
    `obs` (uint8 [shots, bytes], as sample_detectors(separate_observables=True, bit_packed=True)
    gives them), decoded by a compiled sinter decoder; shots are discarded as sinter does (the
    postselection masks, and the decoder's own discard byte)."""
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
    return int(np.count_nonzero(np.any(predictions != obs, axis=1))), discards
