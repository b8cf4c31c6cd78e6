"""Where Cirq's `run()` of a sampled circuit spends its time: sampling (reference + frames +
records to host) against turning the packed records into Cirq's arrays.

    PYTHONPATH=. python -m benchmarks.bench_cirq_run_stages [--d 11] [--shots 100000] [--device gpu]
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=11)
    ap.add_argument("--shots", type=int, default=100_000)
    ap.add_argument("--device", default="gpu")
    a = ap.parse_args(argv)
    from cirq_quasarq import QuasarqSimulator
    from cirq_quasarq.results import records_from_packed

    from .circuits import surface_code_cirq

    circuit, _ = surface_code_cirq(a.d, a.d, 1e-3)
    sim = QuasarqSimulator(seed=1, device=a.device)
    sim.run(circuit, repetitions=a.shots)
    program = sim.compile(circuit)
    best = {"run_s": 9e9, "sample_packed_s": 9e9, "records_s": 9e9}
    for _ in range(5):
        t0 = time.perf_counter()
        QuasarqSimulator(seed=2, device=a.device).run(circuit, repetitions=a.shots)
        t1 = time.perf_counter()
        packed = sim.sample_packed(program, a.shots)
        t2 = time.perf_counter()
        records_from_packed(program, packed, a.shots)
        t3 = time.perf_counter()
        for k, v in zip(best, (t1 - t0, t2 - t1, t3 - t2)):
            best[k] = min(best[k], v)
    print(json.dumps({"d": a.d, "shots": a.shots, "device": a.device, **best}))


if __name__ == "__main__":
    main()
