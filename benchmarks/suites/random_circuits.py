"""Runners of the light and heavy suites: the paper's random Clifford circuits
(`benchmarks/random_clifford.py`: per layer 70% of the qubits get a random gate from {X, Y, Z, H,
S, S†, CX, CY, CZ, SWAP, ISWAP}, then max(1, n // 1400) random Z measurements; about 0.7·n·depth
gates), single shot and `shots`-shot sampling, each simulator as its users call it.

Params: n, depth, seed, single (bool), shots (0: no sampling). Results (seconds):
- single: `first_s`, `repeat` (measure.Context.repeat), and per tool:
  ours `QuasarqSimulator(...).simulate(circuit)`: a new simulator per call, `repeat_same_simulator`;
  stim `stim.TableauSimulator().do(circuit)`; quasarq `quasarq.simulate(circuit).measurements()`
  (repeat = the same circuit object again; `new_object_s` = an equal copy, once);
  stimcirq `StimSampler().run(circuit, repetitions=1)`; cirq `CliffordSimulator().simulate(circuit)`.
- sampling (records bit-packed in Stim's layout where the tool has it): ours
  `sample_measurements(circuit, shots, bit_packed=True)`; stim and quasarq
  `compile_sampler(circuit, seed=1)` (`compile_s`) then `.sample(shots, bit_packed=True)`; stimcirq
  `StimSampler().run(circuit, repetitions=shots)`.
- stages (ours, when the single shot is cheap enough): compile, schedule, the tableau run (with
  the CUDA engine's per-stage device times: gates, transpose, pivots, elimination: the paper's
  Table 1 analogue), reference sample, frames (with the frame kernel's device time on the GPU).
"""

from __future__ import annotations

import itertools

TINY = "H 0\nCX 0 1\nS 1\nM 0 1\nH 0\nCX 0 1\nM 0"


def _new_simulator(ctx):
    from cirq_quasarq import QuasarqSimulator

    seeds = itertools.count(1)
    return lambda: QuasarqSimulator(seed=next(seeds), device=ctx.device)


def _size(ctx, circuit) -> None:
    ctx.emit(size={"qubits": circuit.num_qubits, "measurements": circuit.num_measurements,
                   "gates_approx": int(round(0.7 * ctx.params["n"])) * ctx.params["depth"]})


def ours_stages(ctx, new, shots: int) -> dict:
    """Compile / schedule / tableau (device stages on CUDA) / reference / frames, each on its own."""
    from cirq_quasarq.compiler import clear_cache
    from cirq_quasarq.core import rng
    from cirq_quasarq.schedule import schedule

    clear_cache()
    circuit = ctx.circuit()
    sim = new()
    engine = sim.engine
    cuda = engine.name == "cuda"
    program, compile_s = ctx.timed(lambda: sim.compile(circuit))
    sched, schedule_s = ctx.timed(lambda: schedule(program))
    out = {"compile_s": compile_s, "schedule_s": schedule_s}
    if cuda:
        engine.profile = True
    try:
        out["tableau_s"] = ctx.call(lambda: engine.run_tableau(program, sched, rng.make_key(1)))
        out["device_stages_s"] = dict(engine.stage_seconds) if cuda else None
    finally:
        if cuda:
            engine.profile = False
    if shots:
        run, out["reference_s"] = ctx.timed(lambda: engine.run_tableau(program, sched, rng.make_key(0), reference=True))
        reference = run.records
        out["frames_s"] = ctx.call(lambda: engine.sample_frames(program, sched, rng.make_key(2), reference, shots,
                                                                shot_major=True))
        out["frame_kernel_s"] = engine.last_frame_kernel_s if cuda else None
    return out


def ours(ctx) -> None:
    """Most telling first (a case cut by its time limit keeps what it measured): the first calls,
    the repeats, then the same-simulator repeats and the stages."""
    import stim

    from cirq_quasarq.compiler import clear_cache

    p = ctx.params
    new = _new_simulator(ctx)
    warm = stim.Circuit(TINY)
    new().simulate(warm)
    new().sample_measurements(warm, 64, bit_packed=True)
    circuit = ctx.circuit()
    _size(ctx, circuit)
    shots = p.get("shots", 0)
    single = sampling = None
    if p.get("single", True):
        single = ctx.first(lambda: new().simulate(circuit))
        ctx.emit(single=single)
    if shots:
        clear_cache()  # the first call compiles again, as a new process would
        fresh = ctx.circuit()
        sample = lambda sim: sim.sample_measurements(fresh, shots, bit_packed=True)  # noqa: E731
        sampling = ctx.first(lambda: sample(new()))
        ctx.emit(sampling=sampling)
        ctx.emit(sampling={"repeat": ctx.repeat(lambda: sample(new()), first_s=sampling["first_s"], cached=True)})
    if single:
        ctx.emit(single={"repeat": ctx.repeat(lambda: new().simulate(circuit), first_s=single["first_s"])})
        same = new()
        ctx.emit(single={"repeat_same_simulator": ctx.repeat(lambda: same.simulate(circuit), first_s=single["first_s"],
                                                             secondary=True)})
    if sampling:
        same = new()
        ctx.emit(sampling={"repeat_same_simulator": ctx.repeat(lambda: sample(same), first_s=sampling["first_s"],
                                                               secondary=True)})
    if ctx.opts["stages"]:
        if single is None or single["first_s"] <= ctx.opts["max_repeat_s"]:
            ctx.emit(stages=ours_stages(ctx, new, shots))
        else:
            ctx.emit(stages={"skipped": "the single shot's first call is over max_repeat_s"})


def stim_(ctx) -> None:
    import stim

    p = ctx.params
    warm = stim.Circuit(TINY)
    stim.TableauSimulator(seed=1).do(warm)
    warm.compile_sampler(seed=1).sample(64, bit_packed=True)
    circuit = ctx.circuit()
    _size(ctx, circuit)
    if p.get("single", True):
        run = lambda: stim.TableauSimulator(seed=1).do(circuit)  # noqa: E731
        first = ctx.first(run)
        ctx.emit(single={**first, "repeat": ctx.repeat(run, first_s=first["first_s"], include_first=True)})
    shots = p.get("shots", 0)
    if shots:
        sampler, compile_s = ctx.timed(lambda: circuit.compile_sampler(seed=1))
        sample = lambda: sampler.sample(shots, bit_packed=True)  # noqa: E731
        first = ctx.call(sample)
        ctx.emit(sampling={"compile_s": compile_s, "first_s": compile_s + first,
                           "repeat": ctx.repeat(sample, first_s=first, include_first=True)})


def quasarq_(ctx) -> None:
    import quasarq
    import stim

    p = ctx.params
    warm = stim.Circuit(TINY)
    quasarq.simulate(warm).measurements()
    quasarq.compile_sampler(warm, seed=1).sample(64, bit_packed=True)
    circuit = ctx.circuit()
    _size(ctx, circuit)
    if p.get("single", True):
        run = lambda: quasarq.simulate(circuit).measurements()  # noqa: E731
        first = ctx.first(run)
        ctx.emit(single=first)
        ctx.emit(single={"repeat": ctx.repeat(run, first_s=first["first_s"])})
        if first["first_s"] <= ctx.opts["max_repeat_s"]:
            copy = circuit.copy()
            ctx.emit(single={"new_object_s": ctx.call(lambda: quasarq.simulate(copy).measurements())})
    shots = p.get("shots", 0)
    if shots:
        sampler, compile_s = ctx.timed(lambda: quasarq.compile_sampler(circuit, seed=1))
        sample = lambda: sampler.sample(shots, bit_packed=True)  # noqa: E731
        first = ctx.first(sample)
        ctx.emit(sampling={"compile_s": compile_s, "first_sample_s": first["first_s"],
                           "first_s": compile_s + first["first_s"]})
        ctx.emit(sampling={"repeat": ctx.repeat(sample, first_s=first["first_s"])})


def _cirq_circuit(ctx):
    from ..random_clifford import paper_random_circuit

    p = ctx.params
    return paper_random_circuit(p["n"], p["depth"], p["seed"])[0]


def _tiny_cirq():
    import cirq

    q = cirq.LineQubit.range(2)
    return cirq.Circuit(cirq.H(q[0]), cirq.CNOT(*q), cirq.measure(*q, key="m"))


def stimcirq_(ctx) -> None:
    import stimcirq

    p = ctx.params
    stimcirq.StimSampler().run(_tiny_cirq(), repetitions=64)
    circuit = _cirq_circuit(ctx)
    if p.get("single", True):
        run = lambda: stimcirq.StimSampler().run(circuit, repetitions=1)  # noqa: E731
        first = ctx.first(run)
        ctx.emit(single={**first, "repeat": ctx.repeat(run, first_s=first["first_s"], include_first=True)})
    shots = p.get("shots", 0)
    if shots:
        run = lambda: stimcirq.StimSampler().run(circuit, repetitions=shots)  # noqa: E731
        first = ctx.first(run)
        ctx.emit(sampling={**first, "repeat": ctx.repeat(run, first_s=first["first_s"], include_first=True)})


def cirq_(ctx) -> None:
    import cirq

    cirq.CliffordSimulator(seed=1).simulate(_tiny_cirq())
    circuit = _cirq_circuit(ctx)
    if ctx.params.get("single", True):
        run = lambda: cirq.CliffordSimulator(seed=1).simulate(circuit)  # noqa: E731
        first = ctx.first(run)
        ctx.emit(single={**first, "repeat": ctx.repeat(run, first_s=first["first_s"], include_first=True)})
    if ctx.params.get("shots", 0):
        ctx.emit(sampling={"not_run": "cirq.CliffordSimulator.run simulates the whole circuit once per repetition "
                                      "when measurements are mid-circuit"})


RUNNERS = {"ours": ours, "stim": stim_, "quasarq": quasarq_, "stimcirq": stimcirq_, "cirq": cirq_}
