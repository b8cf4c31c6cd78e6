"""Sampling speed as users call it: a new simulator per call, the first call of a process (kernels
compiled or taken from the disk cache), long loops and wide circuits on the NumPy engine.

    PYTHONPATH=. python -m benchmarks.bench_speed gpu [--quick] [--out results.jsonl]
    PYTHONPATH=. python -m benchmarks.bench_speed cpu [--quick] [--out results.jsonl]

Every case runs in its own process and prints one JSON line; peers run in the same invocation.
GPU workloads: stim's surface_code:rotated_memory_z, rounds = d, every noise knob 1e-3, every
measurement record bit-packed in host memory in Stim's layout (`sample_measurements(...,
bit_packed=True)`), against NVIDIA cuStabilizer's FrameSimulator (records to host; its on-GPU time
too) and the Cirq end to end `run()` against stimcirq.StimSampler. CPU workloads: the loop of a
5-operation body (a measurement and a reset in it) at 1000 shots, GHZ circuits at 1000 shots
against stimcirq.StimSampler, and the d=11 surface code at 100k shots against stim's sampler.
docs/benchmarks-speed.md has the numbers and the device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(fn, repeat=5):
    """(best, median) seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def _surface_stim(d):
    from .circuits import surface_code_stim

    return surface_code_stim(d, d, 1e-3)


# ----------------------------------------------------------------------------- GPU cases
def case_gpu_sampling(d, shots):
    """Ours: the process's first call, a new simulator per call, the same simulator again."""
    from cirq_quasarq import QuasarqSimulator

    circuit = _surface_stim(d)
    t0 = time.perf_counter()
    QuasarqSimulator(seed=0, device="gpu").sample_measurements(circuit, shots, bit_packed=True)
    first = time.perf_counter() - t0
    seeds = iter(range(1, 1000))
    new_best, new_median = timed(lambda: QuasarqSimulator(seed=next(seeds), device="gpu").sample_measurements(
        circuit, shots, bit_packed=True))
    sim = QuasarqSimulator(seed=1, device="gpu")
    same_best, same_median = timed(lambda: sim.sample_measurements(circuit, shots, bit_packed=True))
    program = sim.compile(circuit)
    record_major, _ = timed(lambda: sim.sample_packed(program, shots))
    kernel = sim.engine.last_frame_kernel_s
    return {"first_call_s": first, "new_simulator_s": new_best, "new_simulator_median_s": new_median,
            "same_simulator_s": same_best, "same_simulator_median_s": same_median,
            "record_major_s": record_major, "frame_kernel_s": kernel, "records": program.num_records,
            "instructions": program.num_instructions, "qubits": program.num_qubits,
            "host_bytes": shots * ((program.num_records + 7) // 8)}


def case_gpu_custab(d, shots):
    from .bench_peers import case_custab_frames

    return case_custab_frames(d, shots)


def case_gpu_cirq_run(d, shots):
    """Cirq end to end: `run()` of a Cirq circuit (a new simulator each call) against stimcirq."""
    import stimcirq

    from cirq_quasarq import QuasarqSimulator

    from .circuits import surface_code_cirq

    circuit, _ = surface_code_cirq(d, d, 1e-3)
    t0 = time.perf_counter()
    QuasarqSimulator(seed=0, device="gpu").run(circuit, repetitions=shots)
    first = time.perf_counter() - t0
    ours, _ = timed(lambda: QuasarqSimulator(seed=1, device="gpu").run(circuit, repetitions=shots), 3)
    theirs, _ = timed(lambda: stimcirq.StimSampler().run(circuit, repetitions=shots), 1)
    return {"ours_s": ours, "ours_first_s": first, "stimcirq_s": theirs}


_FIRST_CALL = """
import time, sys
t0 = time.perf_counter()
from cirq_quasarq import QuasarqSimulator
from benchmarks.circuits import surface_code_stim
circuit = surface_code_stim(11, 11, 1e-3)
t1 = time.perf_counter()
QuasarqSimulator(seed=0, device="gpu").sample_measurements(circuit, 10000, bit_packed=True)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def case_gpu_first_call():
    """A new process's first call (d=11, 10k shots): kernels compiled (empty disk cache), then
    taken from the disk cache by the next process."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, CIRQ_QUASARQ_KERNEL_CACHE=cache)
        for label in ("cold_cache", "warm_cache"):
            proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True,
                                  timeout=600)
            if proc.returncode:
                return {"error": proc.stderr.strip().splitlines()[-1][:200]}
            setup, call = map(float, proc.stdout.split())
            out[label] = {"import_and_circuit_s": setup, "first_call_s": call}
    return out


# ----------------------------------------------------------------------------- CPU cases
def _loop(k):
    import cirq

    q = cirq.LineQubit.range(2)
    body = cirq.FrozenCircuit(cirq.H(q[0]), cirq.CNOT(q[0], q[1]), cirq.measure(q[0], key="m"), cirq.reset(q[0]),
                              cirq.X(q[1]))
    return cirq.Circuit(cirq.CircuitOperation(body, repetitions=k))


def case_cpu_loop(iterations):
    from cirq_quasarq import QuasarqSimulator

    one, _ = timed(lambda: QuasarqSimulator(seed=1, device="cpu").run(_loop(1), repetitions=1000), 5)
    many, _ = timed(lambda: QuasarqSimulator(seed=1, device="cpu").run(_loop(iterations), repetitions=1000),
                    1 if iterations > 10**5 else 3)
    return {"one_iteration_s": one, "seconds": many, "ratio": many / one}


def _ghz(n):
    import cirq

    q = cirq.LineQubit.range(n)
    return cirq.Circuit(cirq.H(q[0]), [cirq.CNOT(q[i], q[i + 1]) for i in range(n - 1)], cirq.measure(*q, key="m"))


def case_cpu_ghz(n):
    """A new circuit object each call (as a user building it), for both."""
    import stimcirq

    from cirq_quasarq import QuasarqSimulator

    ours, _ = timed(lambda: QuasarqSimulator(seed=1, device="cpu").run(_ghz(n), repetitions=1000), 3)
    theirs, _ = timed(lambda: stimcirq.StimSampler().run(_ghz(n), repetitions=1000), 3)
    return {"ours_s": ours, "stimcirq_s": theirs}


def case_cpu_surface(d, shots):
    from cirq_quasarq import QuasarqSimulator

    from .circuits import surface_code_cirq

    circuit, stim_circuit = surface_code_cirq(d, d, 1e-3)
    ours, _ = timed(lambda: QuasarqSimulator(seed=1, device="cpu").run(circuit, repetitions=shots), 2)
    stim_s, _ = timed(lambda: stim_circuit.compile_sampler().sample(shots), 2)
    return {"ours_run_s": ours, "stim_sampler_s": stim_s}


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def plan(which, quick):
    if which == "gpu":
        sizes = [(11, 1_000_000), (25, 100_000), (51, 10_000)]
        if quick:
            sizes = [(11, 100_000), (25, 10_000)]
        jobs = [("gpu_first_call",)]
        for d, shots in sizes:
            jobs += [("gpu_sampling", d, shots), ("gpu_custab", d, shots)]
        jobs.append(("gpu_cirq_run", 11, 10_000 if quick else 100_000))
        return jobs
    jobs = [("cpu_loop", 1000 if quick else 10_000), ("cpu_ghz", 500 if quick else 2000)]
    if not quick:
        jobs += [("cpu_ghz", 10_000), ("cpu_surface", 11, 100_000), ("cpu_loop", 1_000_000)]
    else:
        jobs.append(("cpu_surface", 5, 10_000))
    return jobs


def run_case(name, *args, timeout=600):
    from .bench_peers import run_case_of

    return run_case_of("benchmarks.bench_speed", name, *args, timeout=timeout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="?", choices=["gpu", "cpu"])
    ap.add_argument("--case", nargs="+", metavar="NAME ARG", help="run one case in this process")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if a.case:
        name, *args = a.case
        print(json.dumps(CASES[name](*(int(x) for x in args))), flush=True)
        return
    results = []
    for job in plan(a.which or "cpu", a.quick):
        t0 = time.perf_counter()
        res = run_case(*job)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append({"case": job[0], "args": list(job[1:]), **res})
        print(json.dumps(results[-1]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
