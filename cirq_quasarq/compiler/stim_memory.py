"""Step 1 for Stim circuits, read where Stim keeps them (cuda_src/host_stim_memory.cpp, in threads and
without the interpreter lock): a whole compile's instructions of plain targets with no text at all
(`plain_instructions`), and any circuit's text, `str(circuit[lo:hi])` byte for byte (`circuit_text`,
`circuit_bytes`).

Why: Stim gives no bulk view of a circuit's targets (iterating a circuit copies every target into an
object of its own), and its printing, the way the compiler takes a circuit in, holds the interpreter
lock at about 80 MB/s: 22-35 ms of a 5k-qubit first call on an H200 host, whose bar is 30 ms.

How it stays right: the layout read (`LAYOUT`: where Stim keeps a circuit's instructions, their
targets, arguments and tag, and its REPEAT bodies) is checked once a process (`_probe`) on a probe
circuit of every gate Stim has (under its canonical name), every kind of target, arguments, tags
that need escaping and nested REPEAT blocks: its structure read through ``/proc/self/mem`` (a read
there fails where a pointer is wrong, where one through the pointer would crash) against Stim's own
objects (the instruction count, each one's spans readable, REPEAT blocks where their targets say),
then its text printed here, whole and in slices, against Stim's, which checks every name, argument,
target, tag and block. The gate types' names come from that probe. A Stim whose layout differs, a
system without ``/proc/self/mem``, no compiled path (`core.native`) or ``CIRQ_QUASARQ_STIM_MEMORY=0``:
Stim prints. A circuit the compiled path cannot read (a gate type the probe did not name; an
instruction count that does not match) is printed by Stim too, and a small circuit before the check
(PROBE_SIZE).
"""

from __future__ import annotations

import functools
import os
import struct
import threading
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from ..core import native

# Stim's layout (its src/stim/circuit/circuit.h, circuit_instruction.h, mem/monotonic_buffer.h and
# pybind11's instance), as offsets in bytes, in the order host_stim_memory.cpp's `Layout` takes them:
LAYOUT = (
    16,   # value_at: in the Python object, the pointer to its stim::Circuit (past PyObject_HEAD)
    168,  # ops_at: in a Circuit, its instructions' std::vector (begin, end), after three MonotonicBuffers
    192,  # blocks_at: its REPEAT bodies' std::vector<Circuit> (begin, end)
    216,  # circuit_bytes: a Circuit's size (the bodies' stride)
    56,   # inst_bytes: a CircuitInstruction's size
    0,    # gate_at: its GateType (one byte)
    8,    # args_at: its arguments' span of doubles (begin, end)
    24,   # targets_at: its targets' span of uint32 GateTarget data (begin, end)
    40,   # tag_len_at: its tag's std::string_view: length,
    48,   # tag_ptr_at: and characters
)
# False: Stim prints every circuit (a setting to compare with; a user's is CIRQ_QUASARQ_STIM_MEMORY=0)
PRINT_HERE = True
# The layout is checked (2.5-3 ms, once a process) at the first circuit whose qubits times top-level
# instructions reach PROBE_SIZE, or whose caller does not say; a smaller one before is printed by Stim,
# which prints it in about that time or less (a surface code of d = 11: 0.5 ms, d = 25: 1.3 ms; a sinter
# worker's circuits, d <= 9: under 50k), so its first call does not pay for the check. Once checked,
# every circuit is read here. An engine whose device does the work has it made on a thread at its
# first Stim circuit (`check_soon`).
PROBE_SIZE = 2_000_000
# Threads that count a circuit's text: one for each _THREAD_INSTRUCTIONS top-level instructions; that
# write it: one for each _THREAD_BYTES of it; at most _THREADS and the processors this process may run on
_THREADS = 4
_THREAD_INSTRUCTIONS = 128
_THREAD_BYTES = 512 << 10
# Targets `plain_instructions` makes room for at first (all of them where they do not fit), and one
# thread for each _THREAD_TARGETS of them
_PLAIN_ROOM = 1 << 20
_THREAD_TARGETS = 256 << 10


@functools.lru_cache(maxsize=None)
def _bytes_api():
    """Python's PyBytes_FromStringAndSize and PyBytes_AsString, typed for ctypes (looked up once)."""
    import ctypes

    new, at = ctypes.pythonapi.PyBytes_FromStringAndSize, ctypes.pythonapi.PyBytes_AsString
    new.argtypes, new.restype = [ctypes.c_void_p, ctypes.c_ssize_t], ctypes.py_object
    at.argtypes, at.restype = [ctypes.py_object], ctypes.c_void_p
    return new, at


class _Reader(NamedTuple):
    lib: object
    layout: np.ndarray  # int64 LAYOUT
    blob: bytes  # the gate types' names, one after another
    name_at: np.ndarray  # int64 [257]: gate type g's name is blob[name_at[g]:name_at[g + 1]]
    repeat: int  # REPEAT's gate type
    names: Tuple[str, ...]  # [256]: each gate type's name ('' where the probe named none)


class PlainInstructions(NamedTuple):
    """A circuit's instructions of bare names and plain targets, read as host_rows.cpp's
    `qq_host_read_piece` reads their text (`plain_instructions`)."""

    gates: np.ndarray  # int64 per instruction: its gate type
    gate_names: Tuple[str, ...]  # [256]: each gate type's name (its line's first word; '' where none)
    parsed: np.ndarray  # int64 per instruction: its number among those with targets, or -1
    qubits: np.ndarray  # int64: their targets
    inverted: np.ndarray  # uint8 per target: 1 where inverted ('!')
    starts: np.ndarray  # int64: each instruction with targets' first target, and the end
    bangs: int  # inverted targets


def enabled() -> bool:
    """Whether circuits may be printed here (``CIRQ_QUASARQ_STIM_MEMORY=0`` turns it off)."""
    return os.environ.get("CIRQ_QUASARQ_STIM_MEMORY", "1").strip() not in ("", "0")


def reads_in_place() -> bool:
    """Whether circuits are read here (`circuit_text`, `plain_instructions`), not printed by Stim."""
    return _active() is not None


def _active(circuit=None, num_qubits: Optional[int] = None) -> Optional[_Reader]:
    """The reader, where circuits are read here now (this module's setting, the environment's and the
    compiled path's: `core.native.compiled`), and this one, of `num_qubits` (None: not said), is read
    here (PROBE_SIZE)."""
    if not (PRINT_HERE and enabled() and native.enabled()):
        return None
    if num_qubits is not None and num_qubits * len(circuit) < PROBE_SIZE and not _reader.cache_info().currsize:
        return None
    return _reader()


_CHECK_STARTED: List[bool] = []  # (not empty once `check_soon` started the check)


def check_soon() -> None:
    """Start the layout's check (`_reader`) on a thread of its own, once a process, where circuits may
    be read here and it is not made yet: an engine whose device does the work calls this at its first
    Stim circuit, so that a later large circuit does not wait for the check (2-3 ms of a 5k-qubit
    first call otherwise). A compile that needs the reader meanwhile makes it too (`functools.lru_cache`:
    the same reader either way)."""
    if _CHECK_STARTED or not (PRINT_HERE and enabled() and native.enabled()) or _reader.cache_info().currsize:
        return
    _CHECK_STARTED.append(True)
    threading.Thread(target=_reader, name="cirq_quasarq: Stim layout check", daemon=True).start()


def circuit_text(circuit, lo: int = 0, hi: Optional[int] = None, num_qubits: Optional[int] = None) -> str:
    """`str(circuit[lo:hi])` (`str(circuit)` for the whole), printed by the compiled path where the
    layout checked out (`_reader`) and the circuit is read here (`num_qubits`: its qubits, where the
    caller knows them: PROBE_SIZE), else by Stim."""
    return circuit_bytes(circuit, lo, hi, num_qubits).decode()


def circuit_bytes(circuit, lo: int = 0, hi: Optional[int] = None, num_qubits: Optional[int] = None) -> bytes:
    """`circuit_text` encoded (UTF-8), with no copy where the compiled path printed it (a reader of
    bytes, `stim_rows.compiled_runs`, saves two copies of the text: 4.9 MB each at 10k qubits)."""
    count = len(circuit)
    hi = count if hi is None else min(hi, count)
    reader = _active(circuit, num_qubits)
    if reader is not None and 0 <= lo <= hi:
        text = _printed(reader, circuit, count, lo, hi)
        if text is not None:
            return text
    return str(circuit if lo == 0 and hi == count else circuit[lo:hi]).encode()


def plain_instructions(circuit, num_qubits: Optional[int] = None) -> Tuple[bool, Optional[PlainInstructions]]:
    """The circuit's instructions read where Stim keeps them, where each is a bare name (no argument,
    no tag, not REPEAT) and plain qubit targets, maybe inverted: (True, `PlainInstructions`); (True,
    None) where one is not; (False, None) where it is not read here (`circuit_text`'s conditions). No
    text is made: in turn on an H200 host the 5k compile took 7.7 ms so, 13.9 ms with the text printed
    here and read, 29.2 ms printed by Stim (docs/benchmarks-first-call.md, session 34)."""
    count = len(circuit)
    reader = _active(circuit, num_qubits)
    if reader is None:
        return False, None
    address = native.address
    gate, parsed = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    starts, counts = np.empty(count + 1, dtype=np.int64), np.empty(2, dtype=np.int64)
    room = _PLAIN_ROOM
    while True:
        qubits, inverted = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.uint8)
        total = reader.lib.qq_stim_read_plain(id(circuit), count, 0, count, address(reader.layout), reader.repeat,
                                              room, address(gate), address(parsed), address(qubits),
                                              address(inverted), address(starts), address(counts),
                                              min(_THREADS, native.processors()), _THREAD_TARGETS)
        if total != -2:
            break
        room = int(counts[0])  # (its count of the targets)
    if total == -3:
        return False, None
    if total < 0:
        return True, None
    such = int(counts[0])
    return True, PlainInstructions(gate, reader.names, parsed, qubits[:total], inverted[:total], starts[:such + 1],
                                   int(counts[1]))


def _printed(reader: _Reader, circuit, count: int, lo: int, hi: int) -> Optional[bytes]:
    """The text counted (`qq_stim_text_sizes`), then written by threads (`qq_stim_text_write`) into a
    new bytes object (its memory touched once); None where the compiled path refuses the circuit."""
    if hi == lo:
        return b""
    address = native.address
    lib, layout, name_at = reader.lib, address(reader.layout), address(reader.name_at)
    sizes = np.empty(hi - lo, dtype=np.int64)
    threads = max(1, min(_THREADS, native.processors(), (hi - lo) // _THREAD_INSTRUCTIONS))
    total = lib.qq_stim_text_sizes(id(circuit), count, lo, hi, layout, reader.blob, name_at, reader.repeat,
                                   address(sizes), threads)
    if total < 0:
        return None
    threads = max(1, min(_THREADS, native.processors(), total // _THREAD_BYTES))
    # A bytes object made by Python's C API with its contents to be written, as its own C code does
    new_bytes, bytes_at = _bytes_api()
    out = new_bytes(None, total)
    if lib.qq_stim_text_write(id(circuit), lo, hi, layout, reader.blob, name_at, reader.repeat, address(sizes),
                              bytes_at(out), total, threads) != total:
        return None
    return out


@functools.lru_cache(maxsize=None)
def _reader() -> Optional[_Reader]:
    """The compiled printer with Stim's layout and gate names, once `_probe` found them right; None
    where it did not, or there is no compiled library or Stim."""
    lib = native.library()
    if lib is None:
        return None
    try:
        import stim
    except ImportError:
        return None
    try:
        return _probe(lib, stim)
    except (OSError, ValueError, struct.error, OverflowError, MemoryError):
        return None


def _probe_circuit(stim):
    """A circuit with an instruction of every gate Stim has (each under its canonical name, with the
    first of a few target forms and arguments Stim accepts for it, tried in an order its flags
    suggest), of every kind of target, arguments Stim prints in each way, tags that need escaping,
    and nested REPEAT blocks."""
    head = "M 0 1 2 3\n"
    plain, pauli, records = ("0 1", "!0 1", "0", ""), ("X0*Y1 !Z2", "X0 !Y1"), ("rec[-2] rec[-1]", "rec[-1] 0")
    lines = [head.strip()]
    for name, data in sorted(stim.gate_data().items()):
        if name != data.name or name == "REPEAT":
            continue
        if data.takes_pauli_targets:
            target_forms = pauli + records + plain
        elif data.takes_measurement_record_targets and not data.is_unitary:
            target_forms = records + plain
        elif not (data.is_single_qubit_gate or data.is_two_qubit_gate):
            target_forms = ("",) + plain + records
        else:
            target_forms = plain + records + pauli
        least = min(data.num_parens_arguments_range)
        width = max(least, min(2, max(data.num_parens_arguments_range)))
        arg_forms = [""] if not width else [f"({', '.join(['0.0625'] * width)})", f"({', '.join(['1'] * width)})"]
        line = next((f"{name}{args} {targets}".strip() for args in arg_forms for targets in target_forms
                     if _accepted(stim, head + f"{name}{args} {targets}")), None)
        if line is not None:
            lines.append(line)
    lines += [
        "H[a tag] 0 16777215", "X_ERROR[\\B\\C\\n\\r](0.001000001) 1", "DETECTOR(1.5, -2, 1e-07, 123456789, 0.1, "
        "-0, 1e+30, 4611686018427387904) rec[-1]", "SHIFT_COORDS(-1.25, 3)", "CX sweep[5] 1 rec[-3] 2",
        "MPP !X0*Y1*Z2 Z3", "OBSERVABLE_INCLUDE(7) rec[-2] X1",
        "REPEAT[loop] 3 {\n    H 0\n    REPEAT 12345678901 {\n        M !4\n        TICK\n    }\n}",
        "REPEAT 2 {\n}", "TICK",
    ]
    return stim.Circuit("\n".join(lines))


def _accepted(stim, text: str) -> bool:
    try:
        stim.Circuit(text)
    except ValueError:
        return False
    return True


def _probe(lib, stim) -> Optional[_Reader]:
    """The reader, where `_probe_circuit` read at LAYOUT through /proc/self/mem holds its instructions
    (their count, each one's spans of arguments, targets and tag readable, REPEAT blocks where their
    targets say) and its text printed here is Stim's, whole and in slices (which checks every name,
    argument, target, tag and block); else None. The gate types' names are the probe's."""
    probe = _probe_circuit(stim)
    value_at, ops_at, blocks_at, circuit_bytes, inst_bytes, gate_at, args_at, targets_at, tag_len_at, \
        tag_ptr_at = LAYOUT
    if max(gate_at + 1, args_at + 16, targets_at + 16, tag_len_at + 8, tag_ptr_at + 8) > inst_bytes:
        return None  # (a field past the instruction's end)
    names = {}
    fd = os.open("/proc/self/mem", os.O_RDONLY)
    try:
        def read(addr: int, n: int) -> bytes:  # (a wrong pointer fails here, not in the printer)
            if not 0 <= n <= 1 << 16:  # (the probe's parts are short: a length read at a wrong offset)
                raise ValueError("not a length")
            got = os.pread(fd, n, addr) if n else b""
            if len(got) != n:
                raise ValueError("short read")
            return got

        def words(addr: int, n: int = 2) -> tuple:
            return struct.unpack(f"<{n}Q", read(addr, 8 * n))

        def check(circuit, at: int) -> bool:  # the Circuit at `at` holds `circuit`'s instructions
            ops, ops_end = words(at + ops_at)
            blocks, blocks_end = words(at + blocks_at)
            if ops_end - ops != len(circuit) * inst_bytes or blocks_end < blocks or \
                    (blocks_end - blocks) % circuit_bytes:
                return False
            table = read(ops, ops_end - ops)
            for k, inst in enumerate(circuit):
                record = table[k * inst_bytes:(k + 1) * inst_bytes]
                gate = record[gate_at]
                (args, args_end), (targets, targets_end) = (struct.unpack_from("<2Q", record, at_)
                                                            for at_ in (args_at, targets_at))
                tag_len, = struct.unpack_from("<Q", record, tag_len_at)
                tag_ptr, = struct.unpack_from("<Q", record, tag_ptr_at)
                if args_end < args or (args_end - args) % 8 or targets_end < targets or (targets_end - targets) % 4:
                    return False
                read(args, args_end - args), read(tag_ptr, tag_len)
                spans = read(targets, targets_end - targets)
                if isinstance(inst, stim.CircuitRepeatBlock):
                    if len(spans) != 12:
                        return False
                    block, low, high = struct.unpack("<3I", spans)
                    if low | high << 32 != inst.repeat_count or block >= (blocks_end - blocks) // circuit_bytes or \
                            names.setdefault(gate, "REPEAT") != "REPEAT" or \
                            not check(inst.body_copy(), blocks + block * circuit_bytes):
                        return False
                elif names.setdefault(gate, inst.name) != inst.name:
                    return False
            return True

        if not check(probe, words(id(probe) + value_at, 1)[0]):
            return None
    finally:
        os.close(fd)
    if "REPEAT" not in names.values():
        return None
    blob, name_at = b"", np.zeros(257, dtype=np.int64)
    for g in range(256):
        blob += names.get(g, "").encode()
        name_at[g + 1] = len(blob)
    repeat = next(g for g, name in names.items() if name == "REPEAT")
    reader = _Reader(lib, np.array(LAYOUT, dtype=np.int64), blob, name_at, repeat,
                     tuple(names.get(g, "") for g in range(256)))
    for lo, hi in ((0, len(probe)), (1, len(probe) - 1), (len(probe) - 3, len(probe))):
        if _printed(reader, probe, len(probe), lo, hi) != str(probe[lo:hi]).encode():
            return None
    return reader
