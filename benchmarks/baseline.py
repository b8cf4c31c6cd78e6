"""Run a benchmark of this checkout with the cirq_quasarq package of another: the code before a change.

    python -m benchmarks.baseline DIR benchmarks.bench_gpu_tableau --sizes 100000 --repeat 3

DIR holds the other version's `cirq_quasarq/` (and `cuda_src/` beside it), e.g. a `git worktree add DIR
REV` or `git archive REV cirq_quasarq cuda_src | tar -x -C DIR`. The benchmark module and its harness
are this checkout's, so both versions are measured the same way; the first line printed names the
package that was imported.
"""

from __future__ import annotations

import runpy
import sys


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit(__doc__)
    directory, module, rest = argv[0], argv[1], argv[2:]
    sys.path.insert(0, directory)
    import cirq_quasarq  # noqa: F401  (the other version's, before anything imports this checkout's)

    sys.path.remove(directory)
    print("cirq_quasarq from", cirq_quasarq.__file__, flush=True)
    sys.argv = [module] + rest
    runpy.run_module(module, run_name="__main__")


if __name__ == "__main__":
    main()
