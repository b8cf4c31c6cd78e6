"""The qec suite: stim's `surface_code:rotated_memory_z`, rounds = d, every noise knob p = 1e-3,
sampled at a ladder of shot counts; every record (and, separately, every detection event with the
observable flips appended) bit-packed in host memory in Stim's layout.

Per shot count (`results["shots"][str(shots)]`), `measurements` and `detectors`:
- ours: `QuasarqSimulator(...).sample_measurements(circuit, shots, bit_packed=True)` and
  `.sample_detectors(circuit, shots, append_observables=True, bit_packed=True)`; `first_s` with the
  compile cache cleared (compile + schedule + reference + frames), `repeat` a new simulator per call,
  `repeat_same_simulator`; stages once per d (compile, schedule, reference) and per shot count
  (frames, and on the GPU the frame kernel's device time: the rest is the copy to the host);
- stim: `compile_sampler(seed=1)` / `compile_detector_sampler(seed=1)` (`compile_s`), then
  `.sample(shots, bit_packed=True)` (the detector sampler with `append_observables=True`);
- quasarq: the same calls on the paper's tool;
- custabilizer: NVIDIA cuStabilizer's `FrameSimulator` on cupy tables, `apply` then
  `get_measurement_bits(bit_packed=True)` copied to the host (`repeat`) or only synchronised on the
  GPU (`on_gpu`); it returns measurement *flips* (no reference sample) and has no detector output.
"""

from __future__ import annotations

import itertools
from typing import List

from ..harness import Case
from .random_circuits import _new_simulator

SIMS = ("ours", "stim", "quasarq", "custabilizer")
P = 1e-3
TINY = "H 0\nCX 0 1\nM 0 1\nDETECTOR rec[-1] rec[-2]"

PLAN = {
    "tiny": {"shots": {3: [1000, 10000]}, "timeout_s": 90, "cpu_peer_timeout_s": 60},
    "quick": {"shots": {3: [10_000, 100_000, 1_000_000], 5: [10_000, 100_000], 11: [10_000, 100_000]},
              "timeout_s": 300, "cpu_peer_timeout_s": 300},
    "gpu": {"shots": {11: [10_000, 100_000, 1_000_000], 25: [10_000, 100_000], 51: [10_000],
                      3: [100_000, 1_000_000, 10_000_000]},
            "timeout_s": 60, "cpu_peer_timeout_s": 60},
    "full": {"shots": {3: [10**4, 10**5, 10**6, 10**7], 5: [10**4, 10**5, 10**6, 10**7],
                       11: [10**4, 10**5, 10**6, 10**7], 17: [10**4, 10**5, 10**6], 25: [10**4, 10**5, 10**6],
                       35: [10**4, 10**5], 51: [10**4, 10**5]},
             "timeout_s": 1800, "cpu_peer_timeout_s": 1800},
}


def cases(profile: str, engine: str) -> List[Case]:
    plan = PLAN[profile]
    out = []
    for d, shots in plan["shots"].items():
        for sim in SIMS:
            gpu = sim != "stim"
            out.append(Case(suite="qec", module="qec", workload=f"surface d={d}", sim=sim,
                            params={"d": d, "rounds": d, "p": P, "shots": list(shots)},
                            timeout_s=plan["timeout_s" if gpu else "cpu_peer_timeout_s"], tier=0,
                            size=(d, max(shots)), circuit={"kind": "surface", "d": d, "rounds": d, "p": P}))
    return out


def _size(ctx, circuit) -> None:
    ctx.emit(size={"qubits": circuit.num_qubits, "measurements": circuit.num_measurements,
                   "detectors": circuit.num_detectors, "observables": circuit.num_observables})


def ours(ctx) -> None:
    import stim

    from cirq_quasarq.compiler import clear_cache
    from cirq_quasarq.core import rng
    from cirq_quasarq.schedule import schedule

    new = _new_simulator(ctx)
    warm = stim.Circuit(TINY)
    new().sample_measurements(warm, 64, bit_packed=True)
    new().sample_detectors(warm, 64, append_observables=True, bit_packed=True)
    _size(ctx, ctx.circuit())
    calls = {
        "measurements": lambda sim, c, shots: sim.sample_measurements(c, shots, bit_packed=True),
        "detectors": lambda sim, c, shots: sim.sample_detectors(c, shots, append_observables=True, bit_packed=True),
    }
    for shots in ctx.params["shots"]:
        for mode, call in calls.items():
            clear_cache()  # the first call compiles again, as a new process would
            circuit = ctx.circuit()
            first = ctx.first(lambda: call(new(), circuit, shots))
            ctx.emit(shots={str(shots): {mode: first}})
            rep = ctx.repeat(lambda: call(new(), circuit, shots), first_s=first["first_s"], cached=True)
            same = new()
            rep_same = ctx.repeat(lambda: call(same, circuit, shots), first_s=first["first_s"], secondary=True)
            ctx.emit(shots={str(shots): {mode: {"repeat": rep, "repeat_same_simulator": rep_same}}})
    if not ctx.opts["stages"]:
        return
    clear_cache()
    circuit = ctx.circuit()
    sim = new()
    engine = sim.engine
    program, compile_s = ctx.timed(lambda: sim.compile(circuit))
    sched, schedule_s = ctx.timed(lambda: schedule(program))
    run, reference_s = ctx.timed(lambda: engine.run_tableau(program, sched, rng.make_key(0), reference=True))
    ctx.emit(stages={"compile_s": compile_s, "schedule_s": schedule_s, "reference_s": reference_s})
    for shots in ctx.params["shots"]:
        frames_s = ctx.call(lambda: engine.sample_frames(program, sched, rng.make_key(2), run.records, shots,
                                                         shot_major=True))
        kernel = engine.last_frame_kernel_s if engine.name == "cuda" else None
        ctx.emit(stages={"frames": {str(shots): {"frames_s": frames_s, "frame_kernel_s": kernel}}})


def _stim_like(ctx, module) -> None:
    """stim and quasarq: the same two sampler calls (`module` is `stim` or `quasarq`)."""
    circuit = ctx.circuit()
    _size(ctx, circuit)
    is_stim = module.__name__ == "stim"
    if is_stim:
        compilers = {"measurements": lambda: circuit.compile_sampler(seed=1),
                     "detectors": lambda: circuit.compile_detector_sampler(seed=1)}
    else:
        compilers = {"measurements": lambda: module.compile_sampler(circuit, seed=1),
                     "detectors": lambda: module.compile_detector_sampler(circuit, seed=1)}
    for shots in ctx.params["shots"]:
        for mode, compile_ in compilers.items():
            sampler, compile_s = ctx.timed(compile_)
            if mode == "measurements":
                sample = lambda: sampler.sample(shots, bit_packed=True)  # noqa: E731
            elif is_stim:
                sample = lambda: sampler.sample(shots, append_observables=True, bit_packed=True)  # noqa: E731
            else:  # quasarq's detector sampler takes only separate_observables
                sample = lambda: sampler.sample(shots, separate_observables=True, bit_packed=True)  # noqa: E731
            first = ctx.first(sample)
            ctx.emit(shots={str(shots): {mode: {"compile_s": compile_s, "first_sample_s": first["first_s"],
                                                "first_s": compile_s + first["first_s"]}}})
            rep = ctx.repeat(sample, first_s=first["first_s"], include_first=is_stim)
            ctx.emit(shots={str(shots): {mode: {"repeat": rep}}})


def stim_(ctx) -> None:
    import stim

    warm = stim.Circuit(TINY)
    warm.compile_sampler(seed=1).sample(64, bit_packed=True)
    warm.compile_detector_sampler(seed=1).sample(64, append_observables=True, bit_packed=True)
    _stim_like(ctx, stim)


def quasarq_(ctx) -> None:
    import quasarq
    import stim

    warm = stim.Circuit(TINY)
    quasarq.compile_sampler(warm, seed=1).sample(64, bit_packed=True)
    quasarq.compile_detector_sampler(warm, seed=1).sample(64, separate_observables=True, bit_packed=True)
    _stim_like(ctx, quasarq)


def custabilizer(ctx) -> None:
    import cupy as cp
    import stim
    from cuquantum.stabilizer import Circuit, FrameSimulator

    def make(circuit, shots):
        return FrameSimulator(circuit.num_qubits, shots, num_measurements=circuit.num_measurements,
                              num_detectors=circuit.num_detectors, package="cupy", seed=1)

    def to_host(sim):
        bits = sim.get_measurement_bits(bit_packed=True)
        return bits.get() if hasattr(bits, "get") else bits

    warm = stim.Circuit(TINY)
    sim = make(warm, 1024)
    sim.apply(Circuit(warm), seed=1)
    to_host(sim)
    del sim
    circuit = ctx.circuit()
    _size(ctx, circuit)
    seeds = itertools.count(2)
    for shots in ctx.params["shots"]:
        held = {}

        def first_call():
            held["circuit"] = Circuit(circuit)
            held["sim"] = make(circuit, shots)
            held["sim"].apply(held["circuit"], seed=1)
            return to_host(held["sim"])

        first = ctx.first(first_call)
        ctx.emit(shots={str(shots): {"measurements": first}})
        sim, cc = held["sim"], held["circuit"]

        def host_call():
            sim.apply(cc, seed=next(seeds))
            return to_host(sim)

        def gpu_call():
            sim.apply(cc, seed=next(seeds))
            cp.cuda.Device().synchronize()

        rep = ctx.repeat(host_call, first_s=first["first_s"])
        on_gpu = ctx.repeat(gpu_call, first_s=first["first_s"])
        ctx.emit(shots={str(shots): {"measurements": {"repeat": rep, "on_gpu": on_gpu,
                                                      "note": "measurement flips (no reference sample)"},
                                     "detectors": {"not_available": "cuStabilizer 0.5 has no detector output"}}})
        held.clear()
        sim = cc = None  # free the tables before the next shot count
        cp.get_default_memory_pool().free_all_blocks()


RUNNERS = {"ours": ours, "stim": stim_, "quasarq": quasarq_, "custabilizer": custabilizer}
