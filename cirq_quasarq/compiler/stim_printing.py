"""Step 1 for Stim circuits in forked processes: the text of a circuit's pieces, printed by processes
of their own while this one compiles the pieces before (`PrintedPieces`), and a streamed compile run
whole in a process of its own (`ForkedCompile`).

Stim prints a circuit (`str`) without letting go of the interpreter lock, and at 100k-180k qubits
that printing was a third of a streamed compile (1.1-1.2 s at 180k on the H100's host). A thread
cannot overlap it with anything; a forked process can, as it holds a copy of the circuit already.

`PrintedPieces(circuit, bounds, printers, digest)` forks one child when it is made, the head, which
forks the printers in a process group of its own and reaps them (this process pays one fork, not
one a printer). Each printer takes the next piece from a queue as it is free and prints it into an
in-memory file of its own (`memfd`): `digest(text)` gives a text that stands for the piece's (a
shorter one: the compile's `stim_text._read_lines` cuts the lines whose targets it read) and the
digest, written after it (pickled). The printer tells this process the sizes on a pipe the printers
share; this process prints piece 0 itself (a short one: the engine starts sooner) and reads each later
piece from its file. A printer does nothing but print, digest, write and exit: no CUDA, no lock
another thread could hold. What it cannot print or digest, or a printer that ended early or never
started, is printed here, whole and with no digest: the caller then does that work itself, so
nothing it makes depends on the printers. Where this process would wait for a printer it first does
the caller's `idle` work.
`printers=0`, and any system without `fork` and `memfd_create`, prints every piece here.
`$CIRQ_QUASARQ_FORK=0` keeps all of this in this process.

`ForkedCompile` forks once, at a streamed first call's start: that process runs `stim_pieces` (with
printers of its own) and hands each piece's rows over in an in-memory file, which this process maps.
Only the schedule and the engine's launches then hold this process's interpreter lock.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import gc
import mmap
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .. import errors
from ..core import native
from ..core.program import LAYERED_FROM, NUM_FIELDS, RowBlocks, row_blocks
from .stim_memory import circuit_text

PRINTERS = 4  # forked by default: each fork costs 5-20 ms in a large process (H100 host, 10k-100k qubits)
# A forked child that forks or compiles (a printers' head, a forked compile) first gives its C heap's
# free pages back (`_free_heap_trim`). After a fork every page is shared copy on write, and the compile
# here writes mostly into memory the allocator recycles (free at the fork): a page it or a writer
# thread wrote was copied where a child still mapped it. A page the child has given back is this
# process's alone, and a write to it copies nothing. H200 host, first calls in turn, ten each (medians): 10k
# 107.6 -> 95.6 ms (its compile 78.6 -> 69.8), 10k x 1,024 shots 91.9 -> 85.3, 100k 424 -> 418 (compile
# 314 -> 286); streamed (the compile's own process, six each), 30k 205 -> 184 ms (docs/benchmarks-first-call.md).
TRIM_IN_CHILD = True
_NOTE = struct.Struct("<qqq")  # (piece, bytes of its text or -1: print it yourself, bytes of its digest)
_PIECE_NUMBER = np.dtype("<i4")  # a piece waiting in the printers' queue


def printers_available() -> int:
    """How many printers this process may fork: none without fork and memfd (not Linux) or where
    `$CIRQ_QUASARQ_FORK` is 0, else one fewer than the processors it may run on."""
    allowed = os.environ.get("CIRQ_QUASARQ_FORK", "1").strip()
    if allowed not in ("0", "1"):
        raise errors.InvalidInputError(
            f"CIRQ_QUASARQ_FORK={allowed!r}: 1 (the default) lets a large compile fork processes of its own, "
            f"0 keeps it in this process")
    if allowed == "0" or not (sys.platform.startswith("linux") and hasattr(os, "fork")
                              and hasattr(os, "memfd_create")):
        return 0
    return max(0, native.processors() - 1)


class PrintedPieces:
    """The texts of `circuit[lo:hi]` for each (lo, hi) of `bounds`, in order, each with its digest
    where a printer made it (`piece(i)`, asked for i = 0, 1, ... in turn); `close()` ends the
    printers (also when not every piece was read; their head is reaped then or later:
    `reap_ended`). `digest(text)`: (the text that stands for it with its digest, the digest or
    None); `idle`: work for this process to do while it first waits for a printer (`idle()` does it
    where it never waited)."""

    def __init__(self, circuit, bounds: Sequence[Tuple[int, int]], printers: Optional[int] = None,
                 digest: Optional[Callable[[str], Tuple[str, Any]]] = None,
                 idle: Optional[Callable[[], None]] = None):
        self.circuit = circuit
        self.bounds = list(bounds)
        self.digest = digest
        self._idle = idle
        wanted = PRINTERS if printers is None else printers
        self.printers = max(0, min(wanted, printers_available(), len(self.bounds) - 1))
        self._head: Optional[int] = None  # the pid of the process that forks the printers: their group
        self._notes = -1  # the read end of the printers' pipe of notes
        self._told: dict = {}  # piece: (bytes of its text, of its digest), told and not yet asked for
        self._ended = False  # every printer has ended: the pieces not told are printed here
        self._files: List[int] = []  # piece i's memfd at index i - 1
        if self.printers:
            try:
                self._files = [os.memfd_create(f"quasarq-piece-{i}", os.MFD_CLOEXEC)
                               for i in range(1, len(self.bounds))]
                self._start()
            except OSError:  # no fork or memfd here after all: print here
                self.close()
                self.printers = 0

    def _start(self) -> None:
        """The printers started. This process forks one, the head, which forks them in a process
        group of its own and reaps them: each fork is 5-20 ms of a large process (at 100k qubits six
        had taken 55 ms of this one's before piece 0, H200 host). The pieces wait in a pipe in order,
        and each printer takes the next as it is free, so that the first forked print the first
        pieces while the head forks the rest. A printer tells of each piece on a pipe all share
        (a note is one write, which a pipe keeps whole)."""
        reap_ended()
        queue = notes = None
        try:
            queue, notes = os.pipe(), os.pipe()
            os.set_blocking(queue[1], False)  # (a queue the pipe cannot hold: OSError, printed here)
            _write(queue[1], np.arange(1, len(self.bounds), dtype=_PIECE_NUMBER).tobytes())
            self._head = _fork_child(lambda: self._fork_printers(queue[0], notes[1]),
                                     close=[queue[1], notes[0]], head=True)
            self._notes = notes[0]
        finally:
            for fd in (queue or ()) + (notes[1:] if notes else ()):
                os.close(fd)
            if notes and self._notes < 0:
                os.close(notes[0])

    def _fork_printers(self, queue: int, notes: int) -> None:
        """The head's work: the printers forked, then reaped. SIGTERM (`close`) ends the printers; the
        head lives on to reap them."""
        printers = []
        for j in range(self.printers):
            try:
                printers.append(_fork_child(lambda: self._print(j, queue, notes), terminate=True))
            except OSError:  # the others take its pieces
                break
        os.close(queue), os.close(notes)  # (the pipe of notes ends with the last printer)
        for pid in printers:
            _wait(pid)

    def _print(self, j: int, queue: int, notes: int) -> None:
        """Printer j's work: the next piece from the queue printed and digested, into its file as the
        text that stands for it and the digest, and the sizes told; until the queue is empty."""
        while True:
            taken = _read_exactly(queue, _PIECE_NUMBER.itemsize)
            if len(taken) < _PIECE_NUMBER.itemsize:
                return
            i = int(np.frombuffer(taken, dtype=_PIECE_NUMBER)[0])
            lo, hi = self.bounds[i]
            size = digested = 0
            try:
                text, parts = circuit_text(self.circuit, lo, hi), None
                if self.digest is not None:
                    try:
                        shorter, digest = self.digest(text)
                        if digest is not None:
                            text, parts = shorter, _digest_parts(digest)
                    except Exception:
                        parts = None  # the text whole, no digest: the caller digests it
                fd, data = self._files[i - 1], text.encode()
                size = len(data)
                _write(fd, data)
                if parts is not None:
                    digested = _write_parts(fd, size, parts)
            except Exception:
                size = -1
            os.write(notes, _NOTE.pack(i, size, digested))

    def piece(self, i: int) -> Tuple[str, Any]:
        """Piece i's text and its digest: the text `digest` gave for it and the digest, or where this
        process printed it, `str(circuit[lo:hi])` (as `stim_memory.circuit_text` prints it) and None.
        Pieces before it that were not asked for are passed over."""
        lo, hi = self.bounds[i]
        if i == 0 or not self.printers:
            return circuit_text(self.circuit, lo, hi), None
        for passed in [k for k in self._told if k < i]:
            del self._told[passed]
            self._release(passed)
        while i not in self._told and not self._ended:
            if self._idle is not None and not select.select([self._notes], [], [], 0)[0]:
                self.idle()  # no printer is done: this process's own work first
            note = _read_exactly(self._notes, _NOTE.size)
            if len(note) < _NOTE.size:  # every printer has ended
                self._ended = True
                break
            piece, size, digested = _NOTE.unpack(note)
            if piece < i:
                self._release(piece)
            else:
                self._told[piece] = (size, digested)
        size, digested = self._told.pop(i, (-1, -1))
        text, digest = None, None
        if size == 0 and digested == 0:
            text = ""
        elif size >= 0:
            # The digest's arrays are views of this mapping (none is copied): it lasts while they do.
            # Private and writable: a reader that writes into them copies the pages it writes.
            view = mmap.mmap(self._files[i - 1], size + digested, flags=mmap.MAP_PRIVATE,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
            _map_pages(view)
            if digested:
                digest = _read_digest(view, size)
            if digest is not None or not digested:  # (a text that stands for one needs its digest)
                with memoryview(view) as data:
                    text = str(data[:size], "utf-8")
            if digest is None:
                view.close()
        if text is None:
            text = circuit_text(self.circuit, lo, hi)
        self._release(i)
        return text, digest

    def _release(self, i: int) -> None:
        """Piece i's file closed: its memory goes back."""
        if self._files[i - 1] >= 0:
            os.close(self._files[i - 1])
            self._files[i - 1] = -1

    def idle(self) -> None:
        """The idle work done, where it is not done yet."""
        work, self._idle = self._idle, None
        if work is not None:
            work()

    def close(self) -> None:
        if self._head is not None:
            _end_child(self._head)
            self._head = None
        for fd in [self._notes] + self._files:
            if fd >= 0:
                os.close(fd)
        self._notes, self._files = -1, []


_ALIGN = 64  # each of a digest's parts starts at a multiple of it


def _digest_parts(digest) -> List[Any]:
    """`digest` pickled with its arrays' raw buffers apart (pickle's out-of-band buffers)."""
    buffers: list = []
    parts = [pickle.dumps(digest, protocol=5, buffer_callback=buffers.append)]
    return parts + [buffer.raw() for buffer in buffers]


def _write_parts(fd: int, at: int, parts: List[Any]) -> int:
    """A digest's parts (`_digest_parts`) written into file `fd` from byte `at` on: a count of parts
    and their sizes, then each part at a multiple of _ALIGN. Returns the bytes written."""
    head = struct.pack(f"<{len(parts) + 1}q", len(parts), *(len(part) for part in parts))
    written = 0
    for part in [head] + parts:
        pad = -(at + written) % _ALIGN
        _write(fd, bytes(pad))
        _write(fd, part)
        written += pad + len(part)
    return written


def _read_digest(view: mmap.mmap, at: int):
    """The digest `_write_digest` wrote from byte `at` on, its arrays views of `view`; None where it
    cannot be read (never from a printer's own writing: the caller then digests)."""
    try:
        at += -at % _ALIGN
        (count,) = struct.unpack_from("<q", view, at)
        sizes = struct.unpack_from(f"<{count}q", view, at + 8)
        at += 8 * (count + 1)
        parts = []
        for size in sizes:
            at += -at % _ALIGN
            parts.append(memoryview(view)[at:at + size])
            at += size
        return pickle.loads(parts[0], buffers=parts[1:])
    except Exception:
        return None


# madvise(MADV_POPULATE_READ) (Linux 5.14 on): a mapping's pages mapped in one call, read only, where
# reading them mapped each in a fault of its own (a piece's rows at 100k qubits are 10 MB).
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None)


def _map_pages(view: mmap.mmap) -> None:
    if _POPULATE_READ is not None and len(view):
        try:
            view.madvise(_POPULATE_READ)
        except OSError:  # an older kernel: the pages fault in as they are read
            pass


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, n: int) -> bytes:
    """n bytes from a pipe, fewer where it ended."""
    out = b""
    while len(out) < n:
        part = os.read(fd, n - len(out))
        if not part:
            break
        out += part
    return out


# (the piece's first byte in the file, or -1: the Program, -2: an error; bytes; whether the piece has
# a layered word, or the Program's or error's first byte; the word)
_PIECE = struct.Struct("<qqqq")


def forked_compile_available() -> bool:
    """Whether a streamed compile may run in a process of its own (`ForkedCompile`): where this
    process, that one and one printer each have a processor."""
    return printers_available() >= 2


class ForkedCompile:
    """A streamed compile (`compiling()`: `stim_circuit.stim_pieces(...)`, a generator) run in a
    forked process of its own: `next` gives its items in order, each piece's (rows, the compile's
    layered word or None), then raises StopIteration with its Program, or the error it raised (an
    error that cannot cross, or a process that ended early: errors.NotStreamable, and the caller
    compiles whole).

    In a thread the compile and the calling thread's schedule and launches shared the interpreter
    lock (the 100k-qubit first call: 0.74 s of compile alone, 1.1 s beside them). The process appends
    each piece's rows to an in-memory file, each at a multiple of the page size; here they are mapped,
    copy on write, and never copied. The Program comes back pickled without its rows, which are the
    pieces' here. The process prints its pieces by printers of its own (`PrintedPieces`); `close()`
    ends it."""

    def __init__(self, compiling: Callable[[], Any]):
        self._file = os.memfd_create("quasarq-rows", os.MFD_CLOEXEC)
        self._blocks: List[Any] = []
        self._ended: Optional[BaseException] = None
        self._delivered = False  # its Program or error read: it has nothing left to do but end
        try:
            self._pid, self._pipe = _forked(lambda pipe: self._compile(compiling, pipe))
        except OSError:
            os.close(self._file)
            raise

    def _compile(self, compiling: Callable[[], Any], pipe: int) -> None:
        """The child's work."""
        at = 0  # bytes written to the file
        try:
            pieces = compiling()
            while True:
                try:
                    rows, layered = next(pieces)
                except StopIteration as done:
                    program = done.value
                    break
                size = 0
                for block in row_blocks(rows):
                    if len(block):  # (a view of no rows cannot be cast to bytes)
                        block = np.ascontiguousarray(block, dtype=np.int32)
                        _write(self._file, memoryview(block).cast("B"))
                        size += block.nbytes
                os.write(pipe, _PIECE.pack(at, size, layered is not None, layered or 0))
                at = _pad(self._file, at + size)
            word = program.derived.get(LAYERED_FROM)
            program.instructions = np.zeros((0, NUM_FIELDS), dtype=np.int32)  # the pieces' rows, there
            program.derived.clear()
            data = pickle.dumps((program, None if word is None else word[0]), protocol=pickle.HIGHEST_PROTOCOL)
            kind = -1
        except BaseException as exc:  # handed over as itself where it pickles
            try:
                data = pickle.dumps(exc)
            except Exception:
                data = pickle.dumps(errors.NotStreamable(f"the compile's process: {exc!r}"))
            kind = -2
        _write(self._file, data)
        os.write(pipe, _PIECE.pack(kind, len(data), at, 0))

    def __iter__(self):
        return self

    def __next__(self):
        if self._ended is not None:
            raise self._ended
        note = _read_exactly(self._pipe, _PIECE.size)
        if len(note) < _PIECE.size:
            self._ended = errors.NotStreamable("the compile's process ended early")
            raise self._ended
        kind, size, flag, word = _PIECE.unpack(note)
        if kind >= 0:  # a piece's rows from byte `kind` on
            rows = self._rows(kind, size)
            self._blocks.append(rows)
            return rows, (word if flag else None)
        at = flag  # the Program (kind -1) or the error (-2), after the last piece
        self._delivered = True
        with mmap.mmap(self._file, at + size, prot=mmap.PROT_READ) as view, memoryview(view) as data:
            made = pickle.loads(data[at:])
        if kind == -2 or not isinstance(made, tuple):
            self._ended = made if isinstance(made, BaseException) else errors.NotStreamable("the compile's process")
            raise self._ended
        program, word = made
        program.instructions = RowBlocks(self._blocks)
        if word is not None:
            program.derived[LAYERED_FROM] = (word, program.rows)
        self._ended = StopIteration(program)
        raise StopIteration(program)

    def _rows(self, at: int, size: int) -> np.ndarray:
        if not size:
            return np.zeros((0, NUM_FIELDS), dtype=np.int32)
        # private: a reader that writes into the rows changes its copy, not the file
        view = mmap.mmap(self._file, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=at)
        return np.frombuffer(view, dtype=np.int32).reshape(-1, NUM_FIELDS)

    def close(self) -> None:
        """End the process and reap it; the rows given stay. A process that has handed over its
        Program or error ends by itself once its printers' head is reaped, and is reaped then or
        later (`reap_ended`); one that has not is killed."""
        if getattr(self, "_pid", None) is None:
            return
        if self._delivered:
            _end_child(self._pid, group=False)
            os.close(self._pipe)
        else:
            _reap(self._pid, self._pipe)
        os.close(self._file)  # the mapped rows keep their pages
        self._pid = None


def _forked(work: Callable[[int], None]) -> Tuple[int, int]:
    """(pid, the read end of its pipe) of a forked child that runs `work(the pipe's write end)`, then
    exits (`_fork_child`)."""
    read, write = os.pipe()
    try:
        pid = _fork_child(lambda: work(write), close=[read])
    finally:
        os.close(write)
    return pid, read


def _fork_child(work: Callable[[], None], close: Sequence[int] = (), head: bool = False,
                terminate: bool = False) -> int:
    """The pid of a forked child that closes the descriptors `close`, runs `work()` and exits. Its
    garbage collector stays off (a cycle it found could hold an object whose finalizer calls CUDA)
    and Ctrl-C ends it at once. With `head`, it ignores SIGTERM and leads a process group of its
    own (`_end_child`); with `terminate`, SIGTERM ends it (its parent, a head, ignores it). Any but
    a printer (`terminate`: forked by a head that has done it) first gives back its heap's free pages
    (TRIM_IN_CHILD)."""
    trim = _free_heap_trim() if TRIM_IN_CHILD and not terminate else None  # (looked up here: no dlsym in a child)
    with warnings.catch_warnings():
        # Python warns of fork in a process with threads (the compile's, CUDA's own): the child
        # runs only Stim, NumPy and os calls, and takes no lock another thread may hold.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            gc.disable()
            del _ENDING[:]  # (its parent's heads, not its own; the lock may be held by a thread not here)
            actions = [(signal.SIGINT, signal.SIG_DFL)]
            if head or terminate:  # (before it leads a group: a SIGTERM to the group never finds it unready)
                actions.append((signal.SIGTERM, signal.SIG_IGN if head else signal.SIG_DFL))
            for sig, action in actions:
                try:
                    signal.signal(sig, action)
                except ValueError:
                    pass
            if head:
                try:
                    os.setpgid(0, 0)
                except OSError:  # no group: its printers end when their work is done
                    pass
            for fd in close:
                os.close(fd)
            if trim is not None:
                trim(0)
            work()
        finally:
            try:
                reap_ended(wait=True)  # the heads of printers it started (a forked compile's)
            finally:
                os._exit(0)
    return pid


@functools.lru_cache(maxsize=None)
def _free_heap_trim():
    """glibc's `malloc_trim` (it gives a heap's free pages back to the system), or None where the C
    library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def _wait(pid: int) -> None:
    """Child `pid` reaped (no error where it is not this process's)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# Children told to end and not yet reaped, (pid, whether it heads a group of printers: `_end_child`):
# each is reaped by the next printers' start, or at exit. A head reaps its printers first, and a
# printer's exit (its copy of a large process's mappings undone) had kept `close` waiting 10 ms after
# a 10k-qubit compile (H200 host); a forked compile reaps its printers' head.
_ENDING: List[Tuple[int, bool]] = []
_ENDING_LOCK = threading.Lock()


def _end_child(head: int, wait: bool = False, group: bool = True) -> None:
    """Child `head` reaped now where it has ended, else later (`_ENDING`). With `group`, it heads a
    process group of printers (`PrintedPieces._start`), which is told to end first: SIGTERM to the
    group (the head ignores it and reaps the printers, so that none outlives it). With `wait`, SIGTERM
    again until the head has ended (a printer it forked after a SIGTERM gets the next), and reaped,
    for up to a minute. The group is signalled only while its head is this process's child and
    alive: the pid, and so the group, cannot be another's then. Without `group`, a child that ends by
    itself (a forked compile that has handed over its Program): no signal."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if os.waitpid(head, os.WNOHANG)[0]:
                return
        except ChildProcessError:  # reaped by another (a caller that waits for any child)
            return
        try:
            if group:
                os.killpg(head, signal.SIGTERM)
        except OSError:  # no such group (the head could not lead one): it ends with its printers
            pass
        if not wait or time.monotonic() > deadline:
            with _ENDING_LOCK:
                _ENDING.append((head, group))
            return
        time.sleep(0.0005)


def reap_ended(wait: bool = False) -> None:
    """The heads told to end that have ended reaped (with `wait`: all, once they end)."""
    with _ENDING_LOCK:
        children = _ENDING[:]
        del _ENDING[:]
    for pid, group in children:
        _end_child(pid, wait, group)


atexit.register(reap_ended, True)


def _reap(pid: int, pipe: int) -> None:
    """A child killed (one that has ended is a zombie until reaped: no error) and reaped; its pipe closed."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _wait(pid)
    os.close(pipe)


def _pad(fd: int, at: int) -> int:
    """Zeros written up to the next multiple of the mapping granularity (a piece's rows start there)."""
    pad = -at % mmap.ALLOCATIONGRANULARITY
    if pad:
        _write(fd, bytes(pad))
    return at + pad
