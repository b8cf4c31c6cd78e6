"""Import time of cirq_quasarq on its own (Cirq, NumPy and sympy already imported).

    python -m benchmarks.bench_import [--repeats 7]

Each sample is a fresh interpreter that imports cirq first (its time is not ours), then times
`import cirq_quasarq`; the median and the minimum over the samples are printed, together with the
heaviest of our own modules from `python -X importtime`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

_SNIPPET = ("import time, cirq, numpy, sympy; t = time.perf_counter(); import cirq_quasarq; "
            "print(time.perf_counter() - t)")


def sample() -> float:
    out = subprocess.run([sys.executable, "-c", _SNIPPET], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def heaviest_modules(count: int = 8):
    """(self µs, cumulative µs, module) of our own modules, heaviest self time first."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cirq, numpy, sympy; import cirq_quasarq"],
                         check=True, capture_output=True, text=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip().startswith("cirq_quasarq"):
            rows.append((int(parts[0].split(":")[1]), int(parts[1]), parts[2].strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    times = [sample() for _ in range(args.repeats)]
    print(f"import cirq_quasarq (Cirq already imported): median {statistics.median(times) * 1e3:.1f} ms, "
          f"min {min(times) * 1e3:.1f} ms over {args.repeats} fresh interpreters")
    for self_us, cum_us, name in heaviest_modules():
        print(f"  {name:45s} self {self_us / 1e3:7.1f} ms   cumulative {cum_us / 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
