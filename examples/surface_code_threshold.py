"""Plots the logical error rate per round of rotated surface codes (d = 3, 5, 7) against the
physical error rate, sampled by cirq-quasarq inside sinter and decoded by pymatching.

Each point is a sinter collection over Stim's `surface_code:rotated_memory_z` memory experiment
with rounds = d and every noise knob (after-Clifford depolarization, before-round data
depolarization, measurement and reset flips) at p. The default noise range, 0.3% to 2.4%,
brackets the threshold of this noise model with pymatching: the curves cross near p = 1.2-1.5%
(per round). The shaded band around each curve holds the error rates whose likelihood is within a
factor of 1000 of the best fit (sinter.fit_binomial). The figure is written to --out, by default
surface_code_threshold.png in the current directory. It needs the `qec` extra:
pip install ".[qec]" in the
repository's checkout.
"""

from __future__ import annotations

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import sinter  # noqa: E402
import stim  # noqa: E402

from cirq_quasarq.sinter import QuasarqSampler  # noqa: E402

NOISES = (0.003, 0.004, 0.006, 0.008, 0.010, 0.012, 0.014, 0.017, 0.020, 0.024)
LIKELIHOOD_FACTOR = 1e3


def tasks(distances, noises):
    for d in distances:
        for p in noises:
            circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                             after_clifford_depolarization=p, before_round_data_depolarization=p,
                                             before_measure_flip_probability=p, after_reset_flip_probability=p)
            yield sinter.Task(circuit=circuit, json_metadata={"d": d, "p": p})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     add_help=False)
    parser.add_argument("-h", "--help", action="help", help="Shows this help and exits.")
    parser.add_argument("--out", default="surface_code_threshold.png",
                        help="The image file to write (default surface_code_threshold.png in the current directory).")
    parser.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"),
                        help="Where cirq-quasarq samples: 'gpu', 'cpu' or 'auto' (the GPU when one is usable).")
    parser.add_argument("--workers", type=int, default=2, help="How many sinter worker processes sample at once.")
    parser.add_argument("--max-shots", type=int, default=2_000_000,
                        help="The most shots sampled for one point (distance and noise).")
    parser.add_argument("--max-errors", type=int, default=2000,
                        help="A point stops once this many logical errors are seen.")
    parser.add_argument("--seed", type=int, default=None,
                        help="Makes the shots reproducible: for one seed each point samples the same stream of "
                             "shots, so the counts repeat exactly where --max-shots (not --max-errors) ends it.")
    parser.add_argument("--tiny", action="store_true",
                        help="Runs a few thousand shots of d = 3 and 5 at two noise levels (what the tests run).")
    args = parser.parse_args()
    distances = (3, 5) if args.tiny else (3, 5, 7)
    noises = (0.005, 0.02) if args.tiny else NOISES
    shots, errors = (4000, 200) if args.tiny else (args.max_shots, args.max_errors)
    stats = sinter.collect(num_workers=args.workers, tasks=list(tasks(distances, noises)), decoders=["quasarq"],
                           custom_decoders={"quasarq": QuasarqSampler(device=args.device, seed=args.seed)},
                           max_shots=shots, max_errors=errors, print_progress=not args.tiny)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    sinter.plot_error_rate(ax=ax, stats=stats, group_func=lambda s: f"d={s.json_metadata['d']}",
                           x_func=lambda s: s.json_metadata["p"],
                           failure_units_per_shot_func=lambda s: s.json_metadata["d"],
                           highlight_max_likelihood_factor=LIKELIHOOD_FACTOR)
    ax.set_xlabel("physical error rate p (every noise knob)")
    ax.set_ylabel("logical error rate per round")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [p for p in (0.003, 0.005, 0.01, 0.02) if min(noises) <= p <= max(noises)]
    ax.set_xticks(ticks, [f"{100 * p:g}%" for p in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title("Rotated surface code memory (Z), cirq-quasarq + pymatching")
    ax.grid(which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    band = matplotlib.patches.Patch(color="gray", alpha=0.3,
                                    label=f"shaded: likelihood within\n{LIKELIHOOD_FACTOR:g}x of the best fit")
    ax.legend(handles=handles + [band], labels=labels + [band.get_label()], loc="lower right", fontsize=8)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    for s in sorted(stats, key=lambda s: (s.json_metadata["d"], s.json_metadata["p"])):
        print(f"d={s.json_metadata['d']} p={s.json_metadata['p']}: {s.errors}/{s.shots} logical errors")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
