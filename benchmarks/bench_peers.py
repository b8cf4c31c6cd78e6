"""GPU benchmark against the peers, all measured in one run on one machine.

    python -m benchmarks.bench_peers [--quick] [--out results.md]

Peers: stim (one thread), quasarq 1.7.2 (the paper's CUDA tool), NVIDIA cuStabilizer 0.5
(FrameSimulator on cupy tables; it returns measurement flips only, with no reference sample), and
stimcirq's StimSampler for Cirq end to end. Every case runs in its own process (a peer that
crashes with an illegal memory access cannot poison the others) and prints one JSON line.

Workloads (docs/benchmarks-gpu.md says what each number means):
- tableau: the paper's random Clifford circuits (benchmarks/random_clifford.py), single shot;
  ours with per-stage CUDA-event times, the records and the final tableau on the host; quasarq's
  `simulate(circuit).measurements()`, what gives its outcomes (`simulate()` alone is reported too,
  as `simulate_s`, and its sampler's one shot as `sample_s`);
- frames: stim's surface_code:rotated_memory_z, rounds = d, all noise knobs 1e-3: ours = reference
  sample + frames + copy of every record, bit-packed, to host memory;
- Cirq end to end: QuasarqSimulator.run vs stimcirq.StimSampler.run on the same Cirq circuit;
- the reference sample of the d=25 surface code on the GPU and on the NumPy engine;
- the device's copy bandwidth (for the bandwidth floors);
- whether each tool's single-shot outcomes could happen: stim's postselection replays them at 3,000
  qubits (`validity`), our engine at any size (`replay`, benchmarks/replay.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def timed(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ----------------------------------------------------------------------------- cases
def case_bandwidth():
    import cupy as cp

    a = cp.ones(1 << 28, dtype=cp.uint64)  # 2 GiB
    b = cp.empty_like(a)
    b[...] = a
    cp.cuda.Device().synchronize()
    t = timed(lambda: (b.__setitem__(Ellipsis, a), cp.cuda.Device().synchronize()), 5)
    host = cp.cuda.alloc_pinned_memory(a.nbytes // 4)
    import numpy as np

    h = np.frombuffer(host, dtype=np.uint64, count=a.size // 4)
    src = a[: a.size // 4]
    t_d2h = timed(lambda: (src.get(out=h), cp.cuda.Device().synchronize()), 3)
    return {"copy_TBps": 2 * a.nbytes / t / 1e12, "d2h_GBps": src.nbytes / t_d2h / 1e9}


def _ours_tableau_program(n, depth):
    from .random_clifford import random_clifford_program

    return random_clifford_program(n, depth)


def case_ours_tableau(n, depth):
    import numpy as np

    from cirq_quasarq.core import opcodes, rng
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.schedule import schedule

    engine = CudaEngine()
    warm = _ours_tableau_program(300, 5)
    engine.run_tableau(warm, schedule(warm), rng.make_key(0))
    program = _ours_tableau_program(n, depth)
    sched = schedule(program)
    total = timed(lambda: engine.run_tableau(program, sched, rng.make_key(1)), 2 if n > 50000 else 3)
    engine.profile = True
    engine.run_tableau(program, sched, rng.make_key(1))
    engine.profile = False
    gates = int(np.sum(opcodes.KIND[program.instructions[:, 0]] == opcodes.Kind.UNITARY))
    return {"seconds": total, "stages": engine.stage_seconds, "gates": gates,
            "measurements": program.num_records, "n": n}


def _stim_random(n, depth):
    from .random_clifford import paper_random_circuit_stim

    return paper_random_circuit_stim(n, depth)


def _warm_quasarq():
    """quasarq, its simulate().measurements() and its sampler run once on a small circuit."""
    import quasarq

    warm = _stim_random(200, 3)
    quasarq.simulate(warm).measurements()
    quasarq.compile_sampler(warm, seed=1).sample(1, bit_packed=True)
    return quasarq


def case_quasarq_tableau(n, depth):
    """quasarq's single shot as a user gets its outcomes, `simulate(circuit).measurements()` (best of
    2 repeat calls up to 10k qubits, else one); `simulate()` alone (`simulate_s`), which returns
    before its outcomes can be read (they come from `measurements()`: H100, 2026-11-27, the paper's
    circuit at 30k qubits, 0.36 s, then 19.5 s); and its sampler's one shot (`sample_s`, a new
    `compile_sampler` on the circuit). A line is printed after each, so that a crash later still
    leaves the times before it."""
    quasarq = _warm_quasarq()
    circuit = _stim_random(n, depth)
    # its sampler's single shot too: a reference run and one shot of frames
    out = {"sample_s": timed(lambda: quasarq.compile_sampler(circuit, seed=1).sample(1, bit_packed=True), 1)}
    print(json.dumps(out), flush=True)
    out.update(simulate_s=timed(lambda: quasarq.simulate(circuit), 1), error="died making the outcomes")
    print(json.dumps(out), flush=True)
    out["seconds"] = timed(lambda: quasarq.simulate(circuit).measurements(), 2 if n <= 10000 else 1)
    del out["error"]
    return out


def case_stim_tableau(n, depth):
    import stim

    circuit = _stim_random(n, depth)

    def run():
        sim = stim.TableauSimulator(seed=1)
        sim.do(circuit)

    return {"seconds": timed(run, 1)}


def case_validity(n, depth):
    """Are each tool's single-shot outcomes possible at all? (stim replay with postselection)"""
    import numpy as np
    import quasarq

    from cirq_quasarq.core import rng
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.schedule import schedule

    from .replay import postselected

    circuit = _stim_random(n, depth)
    theirs = np.asarray(quasarq.simulate(circuit).measurements()).reshape(-1).astype(int)
    program = _ours_tableau_program(n, depth)
    ours = CudaEngine().run_tableau(program, schedule(program), rng.make_key(3)).records
    return {"measurements": circuit.num_measurements,
            "quasarq_impossible": len(postselected(circuit, theirs)),
            "ours_impossible": len(postselected(circuit, ours))}


def case_quasarq_records(n, depth, sampler=0):
    """quasarq's single-shot records of the paper's circuit, as hex of the bit-packed bytes (bit k of
    byte j: record 8j + k), and its seconds (a first call on this circuit): from
    `simulate(c).measurements()`, or with `sampler` from `compile_sampler(c, seed=1).sample(1)`."""
    import numpy as np

    quasarq = _warm_quasarq()
    circuit = _stim_random(n, depth)
    t0 = time.perf_counter()
    if sampler:
        records = np.asarray(quasarq.compile_sampler(circuit, seed=1).sample(1), dtype=np.uint8).reshape(-1)
    else:
        records = np.asarray(quasarq.simulate(circuit).measurements(), dtype=np.uint8).reshape(-1)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "records": int(len(records)),
            "packed": np.packbits(records, bitorder="little").tobytes().hex()}


def case_replay(n, depth):
    """Could each tool's single-shot outcomes happen at all, at sizes stim's postselection cannot
    replay? Our CUDA engine replays them (benchmarks/replay.py: each random measurement made to
    come out as the tool's outcome, the deterministic ones compared); a contradicted record is an
    outcome no run could have given. quasarq runs in a process of its own (its device memory).
    Controls: our own records (none contradicted, as they must be) and uniformly random ones
    (about half of the deterministic measurements contradicted: what the check can find)."""
    import numpy as np

    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.core import rng
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.schedule import schedule

    from .replay import contradicted

    program = compile_stim(_stim_random(n, depth))
    out, records = {"n": n, "depth": depth, "measurements": int(program.num_records)}, {}
    # quasarq first, while our engine holds no device memory
    for name, sampler in (("quasarq", 0), ("quasarq_sampler", 1)):  # simulate().measurements(); a sampler's shot
        theirs = run_case("quasarq_records", n, depth, sampler, timeout=600)
        out[f"{name}_s"], out[f"{name}_error"] = theirs.get("seconds"), theirs.get("error") or theirs.get("crash")
        if "packed" in theirs:
            packed = np.frombuffer(bytes.fromhex(theirs["packed"]), dtype=np.uint8)
            records[name] = np.unpackbits(packed, bitorder="little", count=theirs["records"])
    engine, key = CudaEngine(), rng.make_key(7)
    records["ours"] = engine.run_tableau(program, schedule(program), rng.make_key(8)).records
    records["random"] = np.random.default_rng(n).integers(0, 2, program.num_records, dtype=np.uint8)
    for name, rec in records.items():
        bad = contradicted(engine, program, key, rec)
        out[f"{name}_contradicted"] = int(len(bad))
        out[f"{name}_first_contradicted"] = int(bad[0]) if len(bad) else None
        out[f"{name}_ones"] = int(rec.sum())
    return out


def _surface(d):
    from .circuits import surface_code_stim

    return surface_code_stim(d, d, 1e-3)


def case_ours_frames(d, shots):
    from cirq_quasarq.core import rng
    from cirq_quasarq.compiler import compile_circuit
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.schedule import schedule

    from .circuits import surface_code_cirq

    circuit, _ = surface_code_cirq(d, d, 1e-3)
    program = compile_circuit(circuit)
    sched = schedule(program)
    engine = CudaEngine()
    ref = engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
    engine.sample_frames(program, sched, rng.make_key(1), ref, 64 * 8)

    def run():
        reference = engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
        return engine.sample_frames(program, sched, rng.make_key(2), reference, shots)

    total = timed(run)
    t_ref = timed(lambda: engine.run_tableau(program, sched, rng.make_key(0), reference=True))
    kernel = engine.last_frame_kernel_s
    return {"seconds": total, "reference_s": t_ref, "kernel_s": kernel, "records": program.num_records,
            "instructions": program.num_instructions, "qubits": program.num_qubits}


def case_quasarq_frames(d, shots):
    import quasarq

    circuit = _surface(d)
    sampler = quasarq.compile_sampler(circuit, seed=1)
    sampler.sample(1024, bit_packed=True)
    return {"seconds": timed(lambda: sampler.sample(shots, bit_packed=True))}


def case_custab_frames(d, shots):
    import cupy as cp
    from cuquantum.stabilizer import Circuit, FrameSimulator

    circuit = _surface(d)
    cc = Circuit(circuit)

    def make():
        return FrameSimulator(circuit.num_qubits, shots, num_measurements=circuit.num_measurements,
                              num_detectors=circuit.num_detectors, package="cupy", seed=1)

    sim = make()
    sim.apply(cc, seed=1)
    cp.cuda.Device().synchronize()

    def on_gpu():
        sim.apply(cc, seed=2)
        cp.cuda.Device().synchronize()

    def to_host():
        sim.apply(cc, seed=3)
        sim.get_measurement_bits(bit_packed=True).get()

    return {"gpu_s": timed(on_gpu), "host_s": timed(to_host)}


def case_stim_frames(d, shots):
    sampler = _surface(d).compile_sampler(seed=1)
    return {"seconds": timed(lambda: sampler.sample(shots, bit_packed=True), 1)}


def case_ours_detectors(d, shots):
    """Detection events and observable flips, bit-packed on the host, a new simulator per call
    (the process's compile cache warm after the first): stim's layout, and record-major."""
    import numpy as np

    from cirq_quasarq import QuasarqSimulator

    circuit = _surface(d)
    t0 = time.perf_counter()
    QuasarqSimulator(seed=0, device="gpu").sample_detectors(circuit, shots, append_observables=True, bit_packed=True)
    first = time.perf_counter() - t0
    stim_layout = timed(lambda: QuasarqSimulator(seed=1, device="gpu").sample_detectors(
        circuit, shots, append_observables=True, bit_packed=True))
    sim = QuasarqSimulator(seed=2, device="gpu")
    program = sim.compile(circuit)
    both = program.detectors + program.observables
    record_major = timed(lambda: QuasarqSimulator(seed=3, device="gpu").sample_parities(program, both, shots))
    same_sim = timed(lambda: sim.sample_detectors(program, shots, append_observables=True, bit_packed=True))
    dets = sim.sample_parities(program, program.detectors, shots)
    return {"first_s": first, "stim_layout_s": stim_layout, "record_major_s": record_major,
            "same_simulator_s": same_sim, "detectors": len(program.detectors),
            "observables": len(program.observables), "event_rate": float(np.mean(np.bitwise_count(dets)) / 64)}


def case_stim_detectors(d, shots):
    sampler = _surface(d).compile_detector_sampler(seed=1)
    return {"seconds": timed(lambda: sampler.sample(shots, append_observables=True, bit_packed=True), 1)}


def case_quasarq_detectors(d, shots):
    import quasarq

    sampler = quasarq.compile_detector_sampler(_surface(d), seed=1)
    sampler.sample(1024, bit_packed=True)
    return {"seconds": timed(lambda: sampler.sample(shots, bit_packed=True))}


def case_custab_detectors(d, shots):
    import cupy as cp
    from cuquantum.stabilizer import Circuit, FrameSimulator

    circuit = _surface(d)
    cc = Circuit(circuit)
    sim = FrameSimulator(circuit.num_qubits, shots, num_measurements=circuit.num_measurements,
                         num_detectors=circuit.num_detectors, package="cupy", seed=1)
    sim.apply(cc, seed=1)
    cp.cuda.Device().synchronize()
    getter = next((getattr(sim, n) for n in ("get_detector_bits", "get_detection_events", "get_detectors")
                   if hasattr(sim, n)), None)
    if getter is None:
        return {"error": "no detector getter on FrameSimulator: " + ", ".join(
            n for n in dir(sim) if not n.startswith("_"))}

    def on_gpu():
        sim.apply(cc, seed=2)
        cp.cuda.Device().synchronize()

    def to_host():
        sim.apply(cc, seed=3)
        out = getter(bit_packed=True)
        if hasattr(out, "get"):
            out.get()

    return {"gpu_s": timed(on_gpu), "host_s": timed(to_host)}


def case_cirq_end_to_end(d, shots):
    import stimcirq

    from cirq_quasarq import QuasarqSimulator

    from .circuits import surface_code_cirq

    circuit, _ = surface_code_cirq(d, d, 1e-3)
    sim = QuasarqSimulator(seed=1, device="gpu")
    t0 = time.perf_counter()
    sim.run(circuit, repetitions=shots)
    first = time.perf_counter() - t0
    ours = timed(lambda: sim.run(circuit, repetitions=shots))
    t0 = time.perf_counter()
    stimcirq.StimSampler().run(circuit, repetitions=shots)
    theirs = time.perf_counter() - t0
    return {"ours_s": ours, "ours_first_s": first, "stimcirq_s": theirs}


def case_reference(d):
    from cirq_quasarq.core import rng
    from cirq_quasarq.compiler import compile_circuit
    from cirq_quasarq.engines import NumpyEngine
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.schedule import schedule

    from .circuits import surface_code_cirq

    program = compile_circuit(surface_code_cirq(d, d, 1e-3)[0])
    sched = schedule(program)
    gpu = CudaEngine()
    gpu.run_tableau(program, sched, rng.make_key(0), reference=True)
    t_gpu = timed(lambda: gpu.run_tableau(program, sched, rng.make_key(0), reference=True))
    t_np = timed(lambda: NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True), 1)
    return {"gpu_s": t_gpu, "numpy_s": t_np, "records": program.num_records}


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


# ----------------------------------------------------------------------------- driver
def run_case(name, *args, timeout=300):
    return run_case_of("benchmarks.bench_peers", name, *args, timeout=timeout)


def run_case_of(module, name, *args, timeout=300):
    """`python -m module --case name args...` in its own process (a crashing peer cannot poison
    the run): its last JSON line, or {"error": ...}."""
    cmd = [sys.executable, "-m", module, "--case", name, *map(str, args)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            found = json.loads(line)
            if proc.returncode != 0:  # died after its last line (a peer's crash): say how
                found["crash"] = tail[0][:200]
            return found
    return {"error": tail[0][:200]}


def plan(quick):
    depth = 20 if quick else 100
    tableau = [5000, 10000] + ([] if quick else [100000])
    frames = [(11, 100_000 if quick else 1_000_000), (25, 10_000 if quick else 100_000),
              (51, 10_000)]
    jobs = [("bandwidth",)]
    for n in tableau:
        jobs += [("ours_tableau", n, depth), ("quasarq_tableau", n, depth)]
        if n <= 10000:
            jobs.append(("stim_tableau", n, depth))
    if not quick:
        jobs.append(("ours_tableau", 180000, 5))
    for d, shots in frames:
        jobs += [("ours_frames", d, shots), ("custab_frames", d, shots), ("quasarq_frames", d, shots),
                 ("stim_frames", d, shots)]
    for d, shots in ((11, 1_000_000), (25, 100_000)):
        jobs += [("ours_detectors", d, shots), ("custab_detectors", d, shots), ("quasarq_detectors", d, shots),
                 ("stim_detectors", d, shots)]
    jobs += [("cirq_end_to_end", 11, 100_000), ("cirq_end_to_end", 25, 10_000), ("reference", 25),
             ("validity", 3000, 60), ("replay", 3000, 60)]
    if not quick:
        jobs += [("replay", 100000, 100), ("replay", 180000, 100)]
    return jobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case")
    ap.add_argument("args", nargs="*")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*", help="run only these case names")
    a = ap.parse_args()
    if a.case:
        args = [int(x) for x in a.args]
        print(json.dumps(CASES[a.case](*args)), flush=True)
        return
    results = []
    for job in plan(a.quick):
        if a.only and job[0] not in a.only:
            continue
        t0 = time.perf_counter()
        res = run_case(*job)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append({"case": job[0], "args": job[1:], **res})
        print(json.dumps(results[-1]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
