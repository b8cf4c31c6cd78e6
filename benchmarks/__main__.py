"""python -m benchmarks: every benchmark number and figure of docs/benchmarks.md from one command.

    python -m benchmarks all --quick-gpu          # on a GPU machine: every suite in under 9 minutes
    python -m benchmarks all --quick --engine numpy   # a CPU run of minutes
    python -m benchmarks qec --peers stim,quasarq     # one suite, some peers
    python -m benchmarks report                       # figures + README block from the JSON

Each case runs in its own process and appends a JSON line to docs/benchmarks/results/<run>.jsonl;
`all` then runs `report`, which redraws the figures in docs/benchmarks/, the generated part of
docs/benchmarks.md and the README's benchmark block from the JSON files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import harness

GPU_BUDGET_S = 480.0


def _peers(text: str):
    if text.strip().lower() in ("", "none"):
        return ()
    peers = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in peers if p not in harness.PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peers {unknown}; choose from {','.join(harness.PEERS)}")
    return peers


def parser() -> argparse.ArgumentParser:
    from .suites import PROFILES, SUITES

    ap = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0],
        epilog="Profiles: tiny (smoke test), quick (CPU, minutes), gpu (one GPU run under 9 minutes: "
               "--quick-gpu = --profile gpu --engine cuda --budget-s 480), full (the issue's sizes, hours). "
               "Details: docs/benchmarks.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=[*SUITES, "all", "report"],
                    help="a suite, every suite (then report), or report (figures and README block from the JSON)")
    ap.add_argument("--engine", choices=["numpy", "cuda"],
                    help="our engine (default: cuda where a CUDA GPU is usable, else numpy)")
    ap.add_argument("--peers", type=_peers, default=harness.PEERS,
                    help=f"comma-separated peers to run (default: {','.join(harness.PEERS)}; 'none' for none)")
    ap.add_argument("--profile", choices=PROFILES, default=None, help="sizes and time limits (default: full)")
    ap.add_argument("--quick", action="store_true", help="= --profile quick")
    ap.add_argument("--quick-gpu", action="store_true",
                    help=f"= --profile gpu --engine cuda --budget-s {GPU_BUDGET_S:.0f}")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no case after this many seconds; cut the last one's limit to what is left")
    ap.add_argument("--jobs", type=int, default=1, help="cases at once (smoke runs only: timings interfere)")
    ap.add_argument("--no-stages", action="store_true", help="skip our per-stage timings")
    ap.add_argument("--list", action="store_true", help="print the cases (tier, suite, workload, simulator, limit) "
                                                         "and exit")
    ap.add_argument("--no-report", action="store_true", help="all: do not regenerate figures and README block")
    ap.add_argument("--results", type=Path, default=harness.RESULTS_DIR, help="JSON lines directory")
    ap.add_argument("--cache-dir", type=Path, default=None, help="built circuits (default: a temp folder)")
    ap.add_argument("--figures", type=Path, default=None, help="report: figures directory (default docs/benchmarks)")
    ap.add_argument("--readme", type=Path, default=None, help="report: README to update (default README.md)")
    ap.add_argument("--doc", type=Path, default=None, help="report: doc to update (default docs/benchmarks.md)")
    ap.add_argument("--check", action="store_true", help="report: only check that the README block is up to date")
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_case"]:  # inside a case's own process
        from .measure import child_main

        return child_main(argv[1])
    if argv[:1] == ["_warmup"]:  # the engine's warm-up process
        from .measure import warm_up_main

        return warm_up_main(argv[1])
    args = parser().parse_args(argv)
    from . import report

    outputs = report.Outputs.default(figures=args.figures, readme=args.readme, doc=args.doc)
    if args.command == "report":
        if args.check:
            return report.check(args.results, outputs)
        report.generate(args.results, outputs)
        return 0
    profile = args.profile or ("gpu" if args.quick_gpu else "quick" if args.quick else "full")
    engine = args.engine or ("cuda" if args.quick_gpu or harness.cuda_usable() else "numpy")
    from .suites import SUITES, cases

    suites = list(SUITES) if args.command == "all" else [args.command]
    plan = [case for suite in suites for case in cases(suite, profile, engine)]
    if args.list:
        for case in sorted(plan, key=lambda c: c.tier):
            print(f"tier {case.tier}  {case.suite:<5} {case.workload:<32} {case.sim:<12} limit {case.timeout_s:.0f} s")
        return 0
    if engine == "cuda" and not harness.cuda_usable():
        print("benchmarks: --engine cuda needs PyCUDA and a usable CUDA GPU (none found)", file=sys.stderr)
        return 2
    budget = args.budget_s if args.budget_s is not None else (GPU_BUDGET_S if args.quick_gpu else None)
    opts = harness.Options(engine=engine, profile=profile, peers=args.peers, budget_s=budget, results_dir=args.results,
                           jobs=max(1, args.jobs), stages=not args.no_stages,
                           command="python -m benchmarks " + " ".join(argv))
    if args.cache_dir is not None:
        opts.cache_dir = args.cache_dir
    harness.run_cases(plan, opts, suites)
    if args.command == "all" and not args.no_report:
        report.generate(args.results, outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
