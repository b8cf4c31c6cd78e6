"""The cirq suite: Cirq's own entry points end to end on Cirq circuits, compile time split out.

Workloads (`params["workload"]`):
- run: stim's rotated surface-code memory experiment (rounds = d, noise p on every knob) converted
  to Cirq by stimcirq (noise channels and detector annotations included): `run(circuit,
  repetitions=shots)`, ours against `stimcirq.StimSampler`;
- run_noiseless: the same circuit without noise and without stimcirq's annotations (what
  cirq.CliffordSimulator accepts), a few shots, ours against stimcirq and cirq.CliffordSimulator;
- simulate: the paper's random Clifford circuit as a Cirq circuit, `simulate(circuit)`, ours against
  cirq.CliffordSimulator.
Results: `first_s` (ours: a new simulator, compile cache cleared), `repeat` (ours: a new simulator
per call; the compile is cached), `repeat_same_simulator`, and the split: ours `compile_s` (a cold
compile) and `compile_cached_s`; stimcirq `compile_s` (`cirq_circuit_to_stim_circuit`) and
`sample_s` (stim's sampler on the converted circuit), the two things `StimSampler.run` does.
"""

from __future__ import annotations

from typing import List

from ..harness import Case
from .random_circuits import _new_simulator, _tiny_cirq

P = 1e-3

PLAN = {
    "tiny": {"run": [(3, 1000)], "run_noiseless": [(3, 10)], "simulate": [(10, 5)], "timeout_s": 90},
    "quick": {"run": [(3, 10_000), (5, 10_000), (11, 10_000)], "run_noiseless": [(3, 100)],
              "simulate": [(100, 20), (100, 100)], "timeout_s": 180},
    "gpu": {"run": [(5, 100_000), (11, 100_000)], "run_noiseless": [(3, 100)], "simulate": [(100, 20), (100, 100)],
            "timeout_s": 60},
    "full": {"run": [(5, 100_000), (11, 100_000), (25, 10_000)], "run_noiseless": [(3, 100), (5, 100)],
             "simulate": [(100, 100), (500, 100)], "timeout_s": 1800},
}
SIMS = {"run": ("ours", "stimcirq"), "run_noiseless": ("ours", "stimcirq", "cirq"), "simulate": ("ours", "cirq")}


def cases(profile: str, engine: str) -> List[Case]:
    plan = PLAN[profile]
    out = []
    for workload in ("run", "run_noiseless", "simulate"):
        for a, b in plan[workload]:
            if workload == "simulate":
                params, label = {"workload": workload, "n": a, "depth": b, "seed": 0}, f"simulate n={a} depth={b}"
            else:
                p = P if workload == "run" else 0.0
                params = {"workload": workload, "d": a, "rounds": a, "p": p, "shots": b}
                label = f"{'run' if p else 'run noiseless'} d={a} shots={b}"
            for sim in SIMS[workload]:
                out.append(Case(suite="cirq", module="cirq_e2e", workload=label, sim=sim, params=dict(params),
                                timeout_s=plan["timeout_s"], tier=1, size=(a, b)))
    return out


def circuit_of(params):
    """The Cirq circuit of a workload (built in the case's process, outside every timed region)."""
    if params["workload"] == "simulate":
        from ..random_clifford import paper_random_circuit

        return paper_random_circuit(params["n"], params["depth"], params["seed"])[0]
    from ..circuits import surface_code_cirq

    circuit, _ = surface_code_cirq(params["d"], params["rounds"], params["p"])
    if params["workload"] == "run_noiseless":
        from ..bench_numpy import strip_annotations

        circuit = strip_annotations(circuit)
    return circuit


def _call(params):
    if params["workload"] == "simulate":
        return "simulate", lambda sim, c: sim.simulate(c)
    return "run", lambda sim, c: sim.run(c, repetitions=params["shots"])


def ours(ctx) -> None:
    from cirq_quasarq.compiler import clear_cache

    new = _new_simulator(ctx)
    warm = _tiny_cirq()
    new().run(warm, repetitions=64)
    new().simulate(warm)
    circuit = circuit_of(ctx.params)
    mode, call = _call(ctx.params)
    clear_cache()
    first = ctx.first(lambda: call(new(), circuit))
    ctx.emit(**{mode: first})
    rep = ctx.repeat(lambda: call(new(), circuit), first_s=first["first_s"], cached=mode == "run")
    same = new()
    rep_same = ctx.repeat(lambda: call(same, circuit), first_s=first["first_s"], secondary=True)
    ctx.emit(**{mode: {"repeat": rep, "repeat_same_simulator": rep_same}})
    clear_cache()
    compile_s = ctx.call(lambda: new().compile(circuit))
    cached_s = ctx.call(lambda: new().compile(circuit))
    ctx.emit(**{mode: {"compile_s": compile_s, "compile_cached_s": cached_s}})


def stimcirq_(ctx) -> None:
    import stimcirq

    stimcirq.StimSampler().run(_tiny_cirq(), repetitions=64)
    circuit = circuit_of(ctx.params)
    shots = ctx.params["shots"]
    run = lambda: stimcirq.StimSampler().run(circuit, repetitions=shots)  # noqa: E731
    first = ctx.first(run)
    ctx.emit(run={**first, "repeat": ctx.repeat(run, first_s=first["first_s"], include_first=True)})
    stim_circuit, compile_s = ctx.timed(lambda: stimcirq.cirq_circuit_to_stim_circuit(circuit))
    sample_s = ctx.call(lambda: stim_circuit.compile_sampler(seed=1).sample(shots))
    ctx.emit(run={"compile_s": compile_s, "sample_s": sample_s})


def cirq_(ctx) -> None:
    import cirq

    cirq.CliffordSimulator(seed=1).run(_tiny_cirq(), repetitions=8)
    circuit = circuit_of(ctx.params)
    mode, call = _call(ctx.params)
    run = lambda: call(cirq.CliffordSimulator(seed=1), circuit)  # noqa: E731
    first = ctx.first(run)
    ctx.emit(**{mode: {**first, "repeat": ctx.repeat(run, first_s=first["first_s"], include_first=True)}})


RUNNERS = {"ours": ours, "stimcirq": stimcirq_, "cirq": cirq_}
