"""Logical error rate against physical error rate of rotated surface codes (d = 3, 5, 7), sampled by
cirq-quasarq (the GPU where there is one) inside sinter, decoded by pymatching, saved as a plot.

    python examples/surface_code_threshold.py [--out docs/figures/surface_code_threshold.png]
                                              [--device auto|gpu|cpu] [--workers 2] [--tiny]
                                              [--max-shots 2000000] [--max-errors 2000]

Each point is sinter.collect over a `surface_code:rotated_memory_z` memory experiment with
rounds = d and every noise knob at p; the curves cross near the threshold of this noise model with
pymatching (about 1%, docs/figures/surface_code_threshold.png). --tiny runs a few thousand shots of d = 3, 5 (for the tests).
Needs the `qec` extra: pip install ".[qec]" in the repository's checkout.
"""

from __future__ import annotations

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import sinter  # noqa: E402
import stim  # noqa: E402

from cirq_quasarq.sinter import QuasarqSampler  # noqa: E402


def tasks(distances, noises):
    for d in distances:
        for p in noises:
            circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                             after_clifford_depolarization=p, before_round_data_depolarization=p,
                                             before_measure_flip_probability=p, after_reset_flip_probability=p)
            yield sinter.Task(circuit=circuit, json_metadata={"d": d, "p": p})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/figures/surface_code_threshold.png")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--max-shots", type=int, default=2_000_000)
    parser.add_argument("--max-errors", type=int, default=2000)
    args = parser.parse_args()
    distances = (3, 5) if args.tiny else (3, 5, 7)
    noises = (0.004, 0.012) if args.tiny else (0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.01, 0.012)
    shots, errors = (4000, 200) if args.tiny else (args.max_shots, args.max_errors)
    stats = sinter.collect(num_workers=args.workers, tasks=list(tasks(distances, noises)), decoders=["quasarq"],
                           custom_decoders={"quasarq": QuasarqSampler(device=args.device)},
                           max_shots=shots, max_errors=errors, print_progress=not args.tiny)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    sinter.plot_error_rate(ax=ax, stats=stats, group_func=lambda s: f"d={s.json_metadata['d']}",
                           x_func=lambda s: s.json_metadata["p"],
                           failure_units_per_shot_func=lambda s: s.json_metadata["d"])
    ax.set_xlabel("physical error rate p (every noise knob)")
    ax.set_ylabel("logical error rate per round")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("Rotated surface code memory (Z), cirq-quasarq + pymatching")
    ax.grid(which="both", alpha=0.3)
    ax.legend()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    for s in sorted(stats, key=lambda s: (s.json_metadata["d"], s.json_metadata["p"])):
        print(f"d={s.json_metadata['d']} p={s.json_metadata['p']}: {s.errors}/{s.shots} logical errors")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
