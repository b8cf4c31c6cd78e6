"""The `quasarq` command line: sample or simulate a circuit file.

    quasarq sample FILE --shots N [--seed S] [--out OUT] [--format 01|b8|npz] [--detectors]
                   [--append-observables] [--device auto|gpu|cpu] [--quiet]
    quasarq simulate FILE [--seed S] [--device ...]

FILE is a Stim circuit (.stim), OpenQASM 2 or 3 (.qasm, through Cirq's importer: install the
`qasm` extra), or a Cirq circuit as JSON (.json). `sample` writes one row per shot: the measurement
records (in the order they are made), or with --detectors the detection events (observables
appended with --append-observables), in Stim's formats: `01` (a line of '0'/'1' per shot) and
`b8` (ceil(columns/8) bytes per shot, bit b of byte k is column 8k + b), or `npz` (NumPy arrays
`records` or `detectors` and `observables`, bool [shots, columns]). Progress goes to stderr.
Bad input is one line on stderr and exit code 2, no traceback.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from typing import Any, List, Optional

import numpy as np

BATCH = 1 << 18  # shots per engine call: bounds memory, and fixes the bits for a seed


class Failure(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def read_circuit(path: pathlib.Path) -> Any:
    """A stim.Circuit (.stim) or a cirq.Circuit (.qasm, .json)."""
    if not path.is_file():
        raise Failure(f"{path}: no such file")
    text = path.read_text()
    suffix = path.suffix.lower()
    if suffix == ".stim":
        try:
            import stim
        except ImportError:
            raise Failure(f"{path}: reading .stim files needs stim (the qec extra: pip install '.[qec]' in "
                          "the cirq-quasarq checkout)") from None
        try:
            return stim.Circuit(text)
        except ValueError as error:
            raise Failure(f"{path}: {_line_of(path, str(error))}{_one_line(error)}") from None
    if suffix == ".qasm":
        try:
            from cirq.contrib.qasm_import import QasmException, circuit_from_qasm
        except ImportError:
            raise Failure(f"{path}: reading OpenQASM needs ply (the qasm extra: pip install '.[qasm]' in "
                          "the cirq-quasarq checkout)") from None
        try:
            return circuit_from_qasm(text)
        except QasmException as error:
            raise Failure(f"{path}: line {getattr(error, 'lineno', '?')}: {_one_line(error)}") from None
    if suffix == ".json":
        import cirq

        try:
            circuit = cirq.read_json(json_text=text)
        except Exception as error:  # noqa: BLE001 - any unreadable JSON is the user's input
            raise Failure(f"{path}: not a Cirq JSON circuit ({_one_line(error)})") from None
        if not isinstance(circuit, cirq.AbstractCircuit):
            raise Failure(f"{path}: the JSON holds a {type(circuit).__name__}, not a circuit")
        return circuit
    raise Failure(f"{path}: unknown circuit format {suffix!r} (use .stim, .qasm or .json)")


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _line_of(path: pathlib.Path, message: str) -> str:
    """'line L: ' of the first line of the file naming the instruction an error names, if any."""
    words = [w.strip("'\"`,:;()") for w in message.split()]
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        head = line.strip().split("(")[0].split(" ")[0]
        if head and head.upper() == head and head in words:
            return f"line {number}: "
    return ""


def _write(rows: np.ndarray, fmt: str, out) -> None:
    if fmt == "01":
        chars = np.where(rows, ord("1"), ord("0")).astype(np.uint8)
        out.write(np.concatenate([chars, np.full((len(rows), 1), ord("\n"), np.uint8)], axis=1).tobytes())
    elif fmt == "b8":
        out.write(np.packbits(rows, axis=1, bitorder="little").tobytes())


def _progress(done: int, total: int, start: float, quiet: bool) -> None:
    if quiet:
        return
    rate = done / max(time.perf_counter() - start, 1e-9)
    sys.stderr.write(f"\r{done:,}/{total:,} shots  {rate:,.0f} shots/s")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def sample(args: argparse.Namespace) -> None:
    from . import QuasarqSimulator
    from .results import shot_major

    path = pathlib.Path(args.file)
    circuit = read_circuit(path)
    sim = QuasarqSimulator(seed=args.seed, device=args.device)
    try:
        program = sim.compile(circuit)
    except (ValueError, TypeError) as error:
        raise Failure(f"{path}: {_line_of(path, str(error))}{_one_line(error)}") from None
    if args.detectors and not program.detectors and not program.observables:
        raise Failure(f"{path}: the circuit declares no detectors or observables")
    out = sys.stdout.buffer if args.out in (None, "-") else open(args.out, "wb")
    parts: dict = {}
    start = time.perf_counter()
    try:
        for lo in range(0, args.shots, BATCH):
            shots = min(BATCH, args.shots - lo)
            if args.detectors:
                if args.format == "npz":
                    dets, obs = sim.sample_detectors(program, shots, separate_observables=True)
                    parts.setdefault("detectors", []).append(dets)
                    parts.setdefault("observables", []).append(obs)
                else:
                    _write(sim.sample_detectors(program, shots, append_observables=args.append_observables),
                           args.format, out)
            else:
                rows = shot_major(sim.sample_packed(program, shots), shots)
                if args.format == "npz":
                    parts.setdefault("records", []).append(rows)
                else:
                    _write(rows, args.format, out)
            _progress(lo + shots, args.shots, start, args.quiet)
        if args.format == "npz":
            np.savez(out, **{k: np.concatenate(v) for k, v in parts.items()})
    finally:
        if out is not sys.stdout.buffer:
            out.close()


def simulate(args: argparse.Namespace) -> None:
    from . import QuasarqSimulator

    path = pathlib.Path(args.file)
    circuit = read_circuit(path)
    try:
        trial = QuasarqSimulator(seed=args.seed, device=args.device).simulate(circuit)
    except (ValueError, TypeError) as error:
        raise Failure(f"{path}: {_line_of(path, str(error))}{_one_line(error)}") from None
    for key, bits in sorted(trial.measurements.items()):
        print(f"{key}={''.join(str(int(b)) for b in bits)}")
    for stabilizer in trial.final_state.stabilizers():
        print(stabilizer)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="quasarq", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True)
    s = commands.add_parser("sample", help="sample measurement records or detection events")
    s.add_argument("file")
    s.add_argument("--shots", type=int, required=True)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--out", default=None, help="output file (default: stdout)")
    s.add_argument("--format", choices=("01", "b8", "npz"), default="01")
    s.add_argument("--detectors", action="store_true", help="detection events instead of records")
    s.add_argument("--append-observables", action="store_true", help="with --detectors: observable flips last")
    s.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto")
    s.add_argument("--quiet", action="store_true", help="no progress on stderr")
    s.set_defaults(run=sample)
    m = commands.add_parser("simulate", help="one shot: measurement results and final stabilizers")
    m.add_argument("file")
    m.add_argument("--seed", type=int, default=None)
    m.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto")
    m.set_defaults(run=simulate)
    return top


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "shots", 1) < 0:
        print("quasarq: --shots must be a non-negative integer", file=sys.stderr)
        return 2
    try:
        args.run(args)
    except Failure as error:
        print(f"quasarq: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
