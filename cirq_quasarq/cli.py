"""The `quasarq` command line, in Stim's dialect: sample, detect, m2d; and simulate.

    quasarq sample   [--in FILE] [--out FILE] [--out_format F] [--shots N] [--seed S]
                     [--skip_reference_sample] [--device auto|gpu|cpu] [--quiet]
    quasarq detect   [--in FILE] [--out FILE] [--out_format F] [--obs_out FILE] [--obs_out_format F]
                     [--append_observables] [--shots N] [--seed S] [--device ...] [--quiet]
    quasarq m2d      --circuit FILE [--in FILE] [--in_format F] [--out FILE] [--out_format F]
                     [--obs_out FILE] [--obs_out_format F] [--append_observables] [--skip_reference_sample]
    quasarq simulate [--in FILE] [--seed S] [--device ...]

F is one of Stim's formats 01, b8, r8, ptb64, hits, dets (byte for byte Stim's), or npz. The
circuit is a Stim circuit (.stim), OpenQASM 2 or 3 (.qasm, through Cirq's importer: the `qasm`
extra) or a Cirq circuit as JSON (.json, stimcirq's objects included); given as `--in FILE`, as
the first argument, or on stdin (`-` or nothing). Shots are sampled and written in batches, so
memory stays bounded for any number of shots; for a seed, the bits are those of
`QuasarqSimulator(seed=S).sample_measurements(...)` / `sample_detectors(...)`. The earlier
spelling (`quasarq sample FILE --format F --detectors --append-observables`) still works. Bad
input is one line on stderr and exit code 2 before any sampling; a closed output pipe ends the
command quietly with exit code 0, as Stim's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import sys
import time
import zipfile
from typing import Any, BinaryIO, List, Optional, Tuple

import numpy as np

from . import formats

# Shots per engine call: 64 * k, k chosen so that a batch holds about BATCH_BITS bits of frames or
# output (bounded memory), at most MAX_BATCH shots.
BATCH_BITS = 1 << 26
MAX_BATCH = 1 << 18
MAX_SHOTS = 10**18  # Stim's bound
FORMATS = formats.FORMATS + ("npz",)


class Failure(Exception):
    """A user-facing error: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, add_help=False, **kwargs)
        self.add_argument("-h", "--help", action="help", help="Shows this help and exits.")

    def error(self, message: str):  # one line, not argparse's usage block
        raise Failure(f"{message} (see `{self.prog} --help`)")


# ------------------------------------------------------------------------------------- circuits
def _sniff(text: str) -> str:
    """The format of a circuit read from stdin: OpenQASM, Cirq JSON, else Stim."""
    head = text.lstrip()[:16]
    if head.startswith("OPENQASM"):
        return ".qasm"
    return ".json" if head[:1] in "{[" and head else ".stim"


def read_circuit(name: Optional[str]) -> Tuple[Any, str, str]:
    """(a stim.Circuit or a cirq.Circuit, its text, its label for messages) from a file or stdin."""
    if name in (None, "-"):
        label = "<stdin>"
        text = sys.stdin.read()
        suffix = _sniff(text)
    else:
        path = pathlib.Path(name)
        label = str(path)
        if not path.is_file():
            raise Failure(f"{path}: no such file")
        suffix = path.suffix.lower()
        if suffix not in (".stim", ".qasm", ".json"):
            raise Failure(f"{path}: unknown circuit format {suffix!r} (use .stim, .qasm or .json)")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise Failure(f"{path}: cannot read it ({_one_line(error)})") from None
    return _parse(text, suffix, label), text, label


def _parse(text: str, suffix: str, label: str) -> Any:
    if suffix == ".stim":
        try:
            import stim
        except ImportError:
            raise Failure(f"{label}: reading Stim circuits needs stim (the qec extra: pip install '.[qec]' in the cirq-quasarq checkout)") from None
        try:
            return stim.Circuit(text)
        except ValueError as error:
            raise Failure(f"{label}: {_stim_parse_line(text)}{_one_line(error)}") from None
    if suffix == ".qasm":
        try:
            from cirq.contrib.qasm_import import QasmException, circuit_from_qasm
        except ImportError:
            raise Failure(f"{label}: reading OpenQASM needs ply (the qasm extra: pip install '.[qasm]' in the cirq-quasarq checkout)") from None
        try:
            return circuit_from_qasm(text)
        except QasmException as error:
            raise Failure(f"{label}: line {getattr(error, 'lineno', '?')}: {_one_line(error)}") from None
    import cirq

    resolvers = list(cirq.DEFAULT_RESOLVERS)
    try:  # stimcirq's gates and annotations (DetAnnotation, MeasureAndOrResetGate, ...)
        import stimcirq

        resolvers.insert(0, stimcirq.JSON_RESOLVER)
    except ImportError:
        pass
    try:
        circuit = cirq.read_json(json_text=text, resolvers=resolvers)
    except Exception as error:  # noqa: BLE001 - any unreadable JSON is the user's input
        raise Failure(f"{label}: not a Cirq JSON circuit ({_one_line(error)})") from None
    if not isinstance(circuit, cirq.AbstractCircuit):
        raise Failure(f"{label}: the JSON holds a {type(circuit).__name__}, not a circuit")
    return circuit


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _is_stim(circuit: Any) -> bool:
    return type(circuit).__module__.split(".")[0] == "stim"


# Where an instruction of a stim.Circuit is in its text. Stim keeps no line numbers, and it fuses
# consecutive lines of one gate ("H 0" then "H 1" is one instruction "H 0 1"), so the text is
# parsed again line by line with Stim, noting which instruction each line went into.
class _LineError(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def _stim_lines(text: str) -> list:
    """[first line, last line, body or None] per instruction of stim.Circuit(text) (1-based; the
    body of a REPEAT block nested the same way). Raises _LineError at the line Stim stops at."""
    import stim

    lines = text.splitlines()

    def block(i: int, opener: Optional[int]) -> Tuple[list, int]:
        entries: list = []
        current = stim.Circuit()  # the instructions since the last REPEAT block: what may fuse
        while i < len(lines):
            code = lines[i].split("#", 1)[0].strip()
            if not code:
                i += 1
                continue
            if code == "}":
                if opener is None:
                    raise _LineError(i + 1, "a '}' without a REPEAT block")
                return entries, i + 1
            if code.endswith("{"):
                body, after = block(i + 1, i + 1)
                try:
                    stim.Circuit("\n".join(lines[i:after]))
                except ValueError as error:  # the body parsed: the header is at fault
                    raise _LineError(i + 1, str(error)) from None
                entries.append([i + 1, after, body])
                current = stim.Circuit()
                i = after
                continue
            before = len(current)
            try:
                current.append_from_stim_program_text(code)
            except ValueError as error:
                raise _LineError(i + 1, str(error)) from None
            if len(current) > before or not entries:
                entries.append([i + 1, i + 1, None])
            else:  # fused into the instruction of an earlier line
                entries[-1][1] = i + 1
            i += 1
        if opener is not None:
            raise _LineError(opener, "a REPEAT block without its '}'")
        return entries, i

    return block(0, None)[0]


def _stim_parse_line(text: str) -> str:
    """'line L: ' of the line Stim's parser refuses, if one line alone is at fault."""
    try:
        _stim_lines(text)
    except _LineError as error:
        return f"line {error.line}: "
    return ""


def _stim_compile_line(text: str, error: BaseException) -> str:
    """'line L: ' (or 'lines L-M: ' for an instruction Stim fused from several lines) of the
    instruction a compile error names by its position (`instruction_path`)."""
    path = getattr(error, "instruction_path", None)
    if not path:
        return ""
    try:
        entries = _stim_lines(text)
        for depth, index in enumerate(path):
            first, last, body = entries[index]
            if depth + 1 < len(path):
                entries = body
    except (_LineError, IndexError, TypeError):
        return ""
    return f"line {first}: " if first == last else f"lines {first}-{last}: "


def compile_program(circuit: Any, text: str, label: str):
    """The engines' Program of the circuit; compile errors as one line naming where they are."""
    from .errors import QuasarqError

    try:
        if _is_stim(circuit):
            from .compiler.stim_circuit import compile_stim

            return compile_stim(circuit)
        from .compiler import compile_circuit

        return compile_circuit(circuit)
    except (QuasarqError, ValueError, TypeError) as error:
        where = _stim_compile_line(text, error) if _is_stim(circuit) else ""
        raise Failure(f"{label}: {where}{_one_line(error)}") from None


def _engine(device: str):
    from .engines import select_engine
    from .errors import QuasarqError

    try:
        return select_engine(device)
    except QuasarqError as error:
        raise Failure(_one_line(error)) from None


# ------------------------------------------------------------------------------------- outputs
def _check_writable(name: Optional[str], option: str) -> None:
    """Before any work: the folder of an output file exists."""
    if name in (None, "-"):
        return
    parent = pathlib.Path(name).resolve().parent
    if not parent.is_dir():
        raise Failure(f"{option} {name}: the folder {parent} does not exist")


@contextlib.contextmanager
def _opened(name: Optional[str], option: str):
    if name in (None, "-"):
        yield sys.stdout.buffer
        return
    try:
        out = open(name, "wb")
    except OSError as error:
        raise Failure(f"{option} {name}: cannot write it ({error.strerror or _one_line(error)})") from None
    with out:
        yield out


class _Npz:
    """An .npz archive written as it is sampled: each array uint8 [shots, ceil(bits / 8)] in Stim's
    b8 layout (np.unpackbits(a, axis=1, count=bits, bitorder="little") gives the bits), with its
    bit count as `num_<name>`. The first array streams into the archive; the others wait in a
    temporary file (an archive's members are written one after the other)."""

    def __init__(self, out: BinaryIO, shots: int, arrays: List[Tuple[str, int]]):
        import tempfile

        self.zip = zipfile.ZipFile(out, "w")
        self.shots, self.arrays = shots, arrays
        self.spools = [tempfile.TemporaryFile() for _ in arrays[1:]]
        self.first = self._member(*arrays[0])

    def _member(self, name: str, bits: int):
        member = self.zip.open(f"{name}.npy", "w", force_zip64=True)
        np.lib.format.write_array_header_1_0(
            member, {"descr": "|u1", "fortran_order": False, "shape": (self.shots, (bits + 7) // 8)})
        return member

    def write(self, parts: Tuple[np.ndarray, ...]) -> None:
        self.first.write(np.ascontiguousarray(parts[0]).data)
        for spool, part in zip(self.spools, parts[1:]):
            spool.write(np.ascontiguousarray(part).data)

    def close(self) -> None:
        self.first.close()
        for spool, (name, bits) in zip(self.spools, self.arrays[1:]):
            member = self._member(name, bits)
            spool.seek(0)
            while chunk := spool.read(1 << 24):
                member.write(chunk)
            member.close()
            spool.close()
        for name, bits in self.arrays:
            with self.zip.open(f"num_{name}.npy", "w") as member:
                np.lib.format.write_array(member, np.array(bits, dtype=np.int64))
        self.zip.close()


class _Progress:
    """Shots done and rate on stderr, when stderr is a terminal (never in pipelines or with --quiet)."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.start = total, time.perf_counter()
        self.on = not quiet and total > 0 and sys.stderr.isatty()

    def __call__(self, done: int) -> None:
        if self.on:
            rate = done / max(time.perf_counter() - self.start, 1e-9)
            sys.stderr.write(f"\r{done:,}/{self.total:,} shots  {rate:,.0f} shots/s" + ("\n" if done == self.total else ""))
            sys.stderr.flush()


def _batch(program, columns: int) -> int:
    bits = max(1, columns, program.num_qubits, program.num_records)
    return max(64, min(MAX_BATCH, BATCH_BITS // bits // 64 * 64))


# ------------------------------------------------------------------------------------- commands
def _validate_outputs(args: argparse.Namespace, detections: bool) -> None:
    """The output options' rules (before any work); `args.append` set to whether the observables are
    written with the detection events, `args.prepend` to whether before them."""
    if not detections:
        if args.append_observables or args.obs_out:
            given = "--append_observables" if args.append_observables else "--obs_out"
            raise Failure(f"{given} applies to detection events: use `quasarq detect` (or `sample --detectors`)")
        return
    if args.out_format == "npz" and (args.append_observables or args.obs_out):
        raise Failure("npz output holds the observables as its own `observables` array; "
                      "drop --append_observables / --obs_out")
    if args.obs_out and args.append_observables:
        raise Failure("--obs_out and --append_observables exclude each other (as in Stim)")
    if args.obs_out and args.out_format == "dets" and args.command != "m2d":
        raise Failure("--obs_out cannot go with --out_format dets, which already lists the observables as "
                      "L0, L1, ... (as in Stim)")
    # Stim's `detect` writes the observables into dets output unasked, before the detectors (after
    # them with --append_observables); its m2d does not
    args.prepend = not args.append_observables and args.out_format == "dets" and args.command != "m2d"
    args.append = args.append_observables or args.prepend


def _note_dropped_observables(args: argparse.Namespace, observables: int) -> None:
    """After a run (errors stay one line): the observables the output left out, if any."""
    if observables and not (args.append or args.obs_out or args.out_format == "npz") and not args.quiet:
        sys.stderr.write(f"quasarq: note: the circuit's {observables} observable(s) are not written "
                         "(--obs_out FILE or --append_observables writes them)\n")


def _seed(args: argparse.Namespace):
    from .contract import seed

    return seed(args.seed)


def sample(args: argparse.Namespace) -> None:
    """`sample` (records; with --detectors as `detect`) and `detect`."""
    from .shots import Shots, draw_key

    detections = args.command == "detect" or args.detectors
    _validate_outputs(args, detections)
    if args.skip_reference_sample and detections:
        raise Failure("--skip_reference_sample applies to `sample` and `m2d` (detection events need none)")
    if args.out_format == "ptb64" and args.shots % 64:
        raise Failure(f"--out_format ptb64 needs a multiple of 64 shots, got --shots {args.shots} (as in Stim)")
    if args.obs_out and args.obs_out_format == "ptb64" and args.shots % 64:
        raise Failure(f"--obs_out_format ptb64 needs a multiple of 64 shots, got --shots {args.shots}")
    _check_writable(args.out, "--out")
    _check_writable(args.obs_out, "--obs_out")
    circuit, text, label = read_circuit(args.input)
    program = compile_program(circuit, text, label)
    d, o = len(program.detectors), len(program.observables)
    if detections and not d and not o:
        raise Failure(f"{label}: the circuit declares no detectors or observables")
    engine = _engine(args.device)
    if detections:
        shots = Shots(engine, program, "detectors", append_observables=args.append and not args.prepend)
    else:
        shots = Shots(engine, program, "measurements", skip_reference=args.skip_reference_sample)
    key = draw_key(_seed(args))  # one key, drawn as the simulator's call draws it: the same bits
    step, total = _batch(program, sum(shots.columns)), args.shots
    batches = (shots.sample(key, lo, min(step, total - lo)) for lo in range(0, total, step))
    if detections:
        _write(args, "detections", d, o, batches, total)
    else:
        _write(args, "records", program.num_records, 0, batches, total)
    if detections:
        _note_dropped_observables(args, o)


def m2d(args: argparse.Namespace) -> None:
    from .shots import Converter

    _validate_outputs(args, True)
    if args.input in (None, "-") and args.circuit == "-":
        raise Failure("--circuit and the measurements (--in) cannot both be read from stdin")
    if args.input not in (None, "-") and not pathlib.Path(args.input).is_file():
        raise Failure(f"--in {args.input}: no such file")
    _check_writable(args.out, "--out")
    _check_writable(args.obs_out, "--obs_out")
    circuit, text, label = read_circuit(args.circuit)
    program = compile_program(circuit, text, label)
    d, o = len(program.detectors), len(program.observables)
    converter = Converter(_engine(args.device), program, append_observables=args.append,
                          skip_reference=args.skip_reference_sample)
    batch = _batch(program, program.num_records)
    with contextlib.ExitStack() as stack:
        inp = sys.stdin.buffer if args.input in (None, "-") else stack.enter_context(open(args.input, "rb"))
        reader = formats.Reader(inp, args.in_format, program.num_records, batch)

        def batches():
            try:
                for records in reader:
                    yield converter.convert(records)
            except formats.FormatError as error:
                raise Failure(f"--in {args.input or '<stdin>'}: {error}") from None

        _write(args, "detections", d, o, batches())
    _note_dropped_observables(args, o)


def _write(args: argparse.Namespace, kind: str, columns: int, observables: int, batches,
           total: Optional[int] = None) -> None:
    """Writes the `batches` (as Shots.sample returns them) of `kind` "records" (`columns` of them)
    or "detections" (`columns` detectors, `observables` observables) where the options say;
    `total`: the number of shots, when it is known before (npz and progress need it)."""
    records = kind == "records"
    prepend = not records and args.prepend
    names = formats.Names([("M", columns)] if records else [("L", observables), ("D", columns)] if prepend else
                          [("D", columns)] + ([("L", observables)] if args.append else []))
    npz_arrays = [("records", columns)] if records else [("detectors", columns), ("observables", observables)]
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(_opened(args.out, "--out"))
        obs_writer = None
        if args.obs_out:
            obs = stack.enter_context(_opened(args.obs_out, "--obs_out"))
            obs_writer = formats.Writer(obs, args.obs_out_format, observables, formats.Names([("L", observables)]))
        if args.out_format == "npz":
            npz = _Npz(out, total, npz_arrays)
            write = npz.write
        else:
            main = formats.Writer(out, args.out_format, names.count, names)

            def write(parts):
                main.write(formats.joined((parts[1], observables), (parts[0], columns)) if prepend else parts[0])
                if obs_writer is not None:
                    obs_writer.write(parts[1])

        progress = _Progress(total or 0, args.quiet)
        done = 0
        for parts in batches:
            write(parts)
            done += parts[0].shape[0]
            progress(done)
        if args.out_format == "npz":
            npz.close()
        out.flush()


def simulate(args: argparse.Namespace) -> None:
    from . import QuasarqSimulator
    from .errors import QuasarqError

    circuit, text, label = read_circuit(args.input)
    compile_program(circuit, text, label)  # errors named with their line
    try:
        trial = QuasarqSimulator(seed=args.seed, device=args.device).simulate(circuit)
    except QuasarqError as error:
        raise Failure(f"{label}: {_one_line(error)}") from None
    for key, bits in sorted(trial.measurements.items()):
        print(f"{key}={''.join(str(int(b)) for b in bits)}")
    for stabilizer in trial.final_state.stabilizers():
        print(stabilizer)


# ------------------------------------------------------------------------------------- options
def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= MAX_SHOTS:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 10^18")
    return value


def _seed_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value} is not a non-negative 64-bit signed integer (as in Stim)")
    return value


def _circuit_in(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("file", nargs="?", default=None, metavar="FILE",
                   help=f"The circuit {what} (.stim, .qasm or .json), the same as --in FILE.")
    p.add_argument("--in", dest="input_option", metavar="FILE", default=None,
                   help="The circuit file. Without it (and without FILE), or with '-', the circuit is read "
                        "from stdin as Stim's text (or OpenQASM / Cirq JSON, recognised by how it starts).")


def _common(p: argparse.ArgumentParser, shots: bool = True) -> None:
    if shots:
        p.add_argument("--shots", type=_count, default=1, metavar="N",
                       help="How many shots to sample (default 1, as in Stim).")
    p.add_argument("--seed", type=_seed_value, default=None, metavar="S",
                   help="A non-negative integer that makes the output reproducible: the same seed gives the "
                        "bits of QuasarqSimulator(seed=S) on the same circuit, whichever engine samples them. "
                        "Without it the seed is fresh entropy.")
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto",
                   help="Where to sample: 'gpu' (PyCUDA and an NVIDIA GPU), 'cpu' (the NumPy engine) or "
                        "'auto' (the GPU when one is usable, else the CPU; the default). Both give the same bits.")


def _outputs(p: argparse.ArgumentParser, detections: bool, legacy: bool = False, npz: bool = True) -> None:
    p.add_argument("--out", default=None, metavar="FILE",
                   help="The file to write the shots to (default stdout, also with '-').")
    names = ["--out_format", "--format"] if legacy else ["--out_format"]
    npz_help = ("; npz: a NumPy archive of bit-packed arrays (records, or detectors and observables) with their "
                "bit counts" if npz else "")
    p.add_argument(*names, dest="out_format", choices=FORMATS if npz else formats.FORMATS, default="01",
                   help=f"The format of --out: {formats.HELP}{npz_help}. The default is 01.")
    if detections:
        p.add_argument("--obs_out", default=None, metavar="FILE",
                       help="A file to write the observable flips to, one row per shot, apart from the "
                            "detection events.")
        p.add_argument("--obs_out_format", choices=formats.FORMATS, default="01",
                       help="The format of --obs_out (default 01).")
        names = ["--append_observables", "--append-observables"] if legacy else ["--append_observables"]
        p.add_argument(*names, dest="append_observables", action="store_true",
                       help="Writes the observable flips after the detection events, as extra columns of each "
                            "shot (dets names them L0, L1, ...).")
    p.add_argument("--quiet", action="store_true",
                   help="Prints nothing on stderr but errors: no progress (shown only on a terminal) and no "
                        "note about observables left out.")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="quasarq", description=__doc__.splitlines()[0],
                  epilog="`quasarq COMMAND --help` describes each command's options.")
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    s = commands.add_parser("sample", help="Samples measurement records (or, with --detectors, detection events).",
                            description="Samples the measurement records of a circuit, in the order they are made, "
                                        "as Stim's `sample` does.")
    _circuit_in(s, "to sample")
    _common(s)
    _outputs(s, detections=True, legacy=True)
    s.add_argument("--detectors", action="store_true",
                   help="Writes detection events instead of records, as `quasarq detect` does.")
    s.add_argument("--skip_reference_sample", action="store_true",
                   help="Takes all zeros as the noiseless reference instead of simulating it (as in Stim: the "
                        "records are then flips, and right only when all zeros is a noiseless outcome).")
    s.add_argument("--skip_loop_folding", action="store_true",
                   help="Accepted for Stim's scripts; it changes nothing here (loops are never unrolled).")
    s.set_defaults(run=sample)

    d = commands.add_parser("detect", help="Samples detection events and observable flips.",
                            description="Samples detection events and observable flips (relative to the noiseless "
                                        "run) of a circuit's DETECTORs and OBSERVABLE_INCLUDEs, as Stim's `detect`.")
    _circuit_in(d, "to sample")
    _common(d)
    _outputs(d, detections=True)
    d.set_defaults(run=sample, detectors=True, skip_reference_sample=False)

    m = commands.add_parser("m2d", help="Converts measurement records into detection events.",
                            description="Converts measurement records (as `sample` writes them) into detection "
                                        "events and observable flips of the circuit, as Stim's `m2d`.")
    m.add_argument("--circuit", required=True, metavar="FILE",
                   help="The circuit that made the measurements (.stim, .qasm or .json; '-' for stdin).")
    m.add_argument("--in", dest="input_option", metavar="FILE", default=None,
                   help="The file of measurement records (default stdin, also with '-').")
    m.add_argument("--in_format", choices=formats.FORMATS, default="01",
                   help="The format of --in (default 01).")
    _outputs(m, detections=True, npz=False)  # an archive needs the number of shots before the input is read
    m.add_argument("--skip_reference_sample", action="store_true",
                   help="Takes all zeros as the noiseless reference instead of simulating it (as in Stim).")
    m.add_argument("--device", choices=("auto", "gpu", "cpu"), default="cpu",
                   help="Where the reference sample is simulated (default cpu).")
    m.set_defaults(run=m2d, file=None)

    t = commands.add_parser("simulate", help="Simulates one shot: its measurements and final stabilizers.",
                            description="Simulates one shot of the circuit and prints each measurement key's bits "
                                        "and the final state's stabilizers (needs Cirq).")
    _circuit_in(t, "to simulate")
    _common(t, shots=False)
    t.set_defaults(run=simulate)
    return top


def main(argv: Optional[List[str]] = None) -> int:
    from .errors import QuasarqError

    try:
        args = parser().parse_args(argv)
        if args.file is not None and args.input_option is not None:
            raise Failure("give the circuit once: as FILE or as --in FILE")
        args.input = args.input_option if args.command == "m2d" else (args.file or args.input_option)
        args.run(args)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Stim does
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (Failure, QuasarqError, OSError) as error:  # OSError: a full disk, a file gone while writing
        print(f"quasarq: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
