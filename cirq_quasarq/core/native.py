"""The host's compiled path (the NumPy engine's hot loops and the Stim compiler's rows):
cuda_src/host_*.cpp, built on first use with the machine's C++ compiler into one library and loaded
with ctypes.

- host_draws.cpp: the noise draws (`rng.words`, `rng.bernoulli_sparse`, `draws.ChannelDraw`), the
  CUDA kernels' own per-word functions of philox.cuh compiled for the CPU, so its bits are the
  GPU's by construction;
- host_tableau.cpp: tableau mode's row operations (a layer of gates as products of old rows, a
  collapse's CX fan: engines/numpy/tableau.py) and the measured rows' backward sweep
  (engines/numpy/measured_rows.py);
- host_stim_memory.cpp: a stim.Circuit read where Stim keeps it: its text printed, Stim's own text
  byte for byte, and a whole compile's plain targets read with no text (compiler/stim_memory.py,
  which checks Stim's layout first);
- host_parts.cuh: `qq_parts`, a compiled pass split over threads (host_rows.cpp, host_stim_memory.cpp);
- host_rows.cpp: the Stim compiler's whole instructions (their target text read, their rows made,
  placed and sorted: compiler/stim_circuit.py's segments), the schedule (schedule/windows.py: of rows
  in layers already, and the layers and counting sort of the rest), and the qubits each of the GPU
  engine's gate windows leaves idle
  (engines/cuda/device_program.py).

The NumPy code stays the definition and the oracle (tests/test_native_draws.py,
tests/test_native_tableau.py and tests/test_native_rows.py compare them bit for bit) and the
fallback: without a compiler, or with ``CIRQ_QUASARQ_NATIVE=0``, everything runs in NumPy. The
built library is kept on disk beside the compiled kernels (`cache_root`), one per source hash,
flags, compiler and machine, so only the first process on a machine pays the compile (about half a
second).
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the build's modules are imported when it is first asked for (start-up stays short)
    import ctypes

SOURCES = ("host_draws.cpp", "host_tableau.cpp", "host_rows.cpp", "host_frames.cpp", "host_stim_memory.cpp")
HEADERS = ("philox.cuh", "host_parts.cuh")
FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-pthread", "-Wno-unknown-pragmas")
# A compiled pass that writes memory new to the process runs in a thread per THREAD_BYTES of it (its
# pages fault in on first write, in parallel across threads), at most MOST_THREADS and the processors
# this process may run on (`threads_for`).
THREAD_BYTES = 4 << 20
MOST_THREADS = 8

_LOCK = threading.Lock()
_LOADED: dict = {}  # "lib": the CDLL or None once tried; "why": why there is none


def source_dir() -> Path:
    """Where cuda_src lives: inside the installed package first, then beside the package (looked
    for as files first: importlib.resources' import is 5 ms of a sinter worker's first compile)."""
    package = Path(__file__).resolve().parents[1]
    for found in (package / "cuda_src", package.parent / "cuda_src"):
        if found.is_dir():
            return found
    import importlib.resources  # a package not installed as files

    try:
        packaged = importlib.resources.files("cirq_quasarq") / "cuda_src"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - odd loaders
        pass
    raise FileNotFoundError("cuda_src not found in the cirq_quasarq package nor beside it")


def cache_root() -> Optional[Path]:
    """Where compiled code is kept across processes: ``$CIRQ_QUASARQ_KERNEL_CACHE`` if set (an empty
    value or ``0`` turns the disk cache off), else the user's cache folder."""
    value = os.environ.get("CIRQ_QUASARQ_KERNEL_CACHE")
    if value is not None:
        return None if value.strip() in ("", "0") else Path(value).expanduser()
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "cirq-quasarq" / "kernels"


def enabled() -> bool:
    """Whether the compiled path may be used (``CIRQ_QUASARQ_NATIVE=0`` turns it off)."""
    return os.environ.get("CIRQ_QUASARQ_NATIVE", "1").strip() not in ("", "0")


def compiler() -> Optional[str]:
    """The C++ compiler: ``$CXX``, else the first of c++, g++ and clang++ on the path."""
    import shutil

    named = os.environ.get("CXX")
    if named:
        return shutil.which(named) or named
    return next((found for found in map(shutil.which, ("c++", "g++", "clang++")) if found), None)


def library() -> Optional[ctypes.CDLL]:
    """The compiled library, built or loaded once a process; None where it cannot be (see `why_not`)."""
    if "lib" in _LOADED:
        return _LOADED["lib"]
    import ctypes
    import shutil

    with _LOCK:
        if "lib" not in _LOADED:
            lib, why = None, None
            try:
                path, temporary = _built()
                lib = _bind(ctypes.CDLL(str(path)))
                if temporary:  # loaded: the file is no longer needed (where the system lets it go)
                    shutil.rmtree(path.parent, ignore_errors=True)
            except (OSError, RuntimeError) as exc:
                why = str(exc)
            _LOADED["why"], _LOADED["lib"] = why, lib
    return _LOADED["lib"]


def compiled() -> Optional[ctypes.CDLL]:
    """The library where the compiled path is on and available, else None (the NumPy code)."""
    return library() if enabled() else None


@functools.lru_cache(maxsize=None)
def processors() -> int:
    """The processors this process may run on (counted once)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for(nbytes: int) -> int:
    """Threads for a compiled pass that writes `nbytes` of memory (THREAD_BYTES a thread, at most
    MOST_THREADS and `processors()`). What a pass writes does not depend on it."""
    return max(1, min(MOST_THREADS, processors(), nbytes // THREAD_BYTES))


def why_not() -> Optional[str]:
    """Why `library()` gave None (the compiler's message, or no compiler), once it has been asked."""
    return _LOADED.get("why")


def _built() -> "tuple[Path, bool]":
    """(the library's file, whether it is this process's alone): from the cache, or compiled now into
    the cache, or, where there is none or it cannot be written, into a temporary folder."""
    import hashlib
    import platform

    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (c++, g++ or clang++; or set CXX)")
    directory = source_dir()
    texts = [(directory / name).read_text() for name in (*SOURCES, *HEADERS)]
    st = os.stat(cxx)
    identity = f"{os.path.realpath(cxx)}:{st.st_size}:{st.st_mtime_ns}:{platform.machine()}:{platform.system()}"
    digest = hashlib.sha256("\0".join((*texts, *FLAGS, identity)).encode()).hexdigest()[:32]
    root = cache_root()
    if root is not None:
        path = root / f"host-{digest}.so"
        if path.is_file():
            return path, False
        try:
            return _compile(cxx, directory, root, path.name), False
        except OSError:  # a cache folder that cannot be written: a build of this process's own
            pass
    import tempfile  # (here and in `_compile` alone: a process that loads the cached library imports
    # neither it nor subprocess, 10 ms beside NumPy and Stim on the 2-core machine)

    scratch = Path(tempfile.mkdtemp(prefix="cirq-quasarq-"))
    return _compile(cxx, directory, scratch, f"host-{digest}.so"), True


def _compile(cxx: str, directory: Path, out_dir: Path, name: str) -> Path:
    """Compile the sources into out_dir / name: under a temporary name, then renamed, so that
    processes building at once never load half a file."""
    import subprocess
    import tempfile

    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".part")
    os.close(fd)
    try:
        sources = [str(directory / source) for source in SOURCES]
        try:
            done = subprocess.run([cxx, *FLAGS, "-I", str(directory), "-o", tmp, *sources], capture_output=True,
                                  text=True, timeout=120)
        except subprocess.SubprocessError as exc:  # (a compiler that hangs: TimeoutExpired)
            raise RuntimeError(f"{cxx} failed on cuda_src/{', '.join(SOURCES)}: {exc}") from exc
        if done.returncode:
            raise RuntimeError(f"{cxx} failed on cuda_src/{', '.join(SOURCES)}:\n{done.stderr[-4000:]}")
        os.replace(tmp, out_dir / name)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return out_dir / name


_char = _addressof = None  # ctypes.c_char and ctypes.addressof, set with the library (`_bind`)


def address(array) -> int:
    """The address of a C-contiguous array's first element, as the library's pointers take it (through
    ctypes' view of a writable array's buffer: a quarter of the time of NumPy's interface dict, which
    serves read-only and empty arrays)."""
    try:
        return _addressof(_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.__array_interface__["data"][0]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Argument and result types of the library's functions (pointers pass as integer addresses)."""
    import ctypes

    global _char, _addressof
    _char, _addressof = ctypes.c_char, ctypes.addressof
    p, i64, u32 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_uint
    lib.qq_host_bernoulli_sparse.argtypes = [u32, u32, u32, p, p, p, p, p, p, i64, i64, i64, p, p, p, i64]
    lib.qq_host_bernoulli_sparse.restype = i64
    lib.qq_host_words.argtypes = [u32, u32, u32, p, p, p, i64, p]
    lib.qq_host_words.restype = None
    lib.qq_host_paulis.argtypes = [u32, u32, u32, i64, p, p, p, i64, p, p, p, p, p, p, p, p, p, ctypes.c_int, p]
    lib.qq_host_paulis.restype = None
    lib.qq_host_noise_outputs.argtypes = [u32, u32, u32, i64, p, p, p, i64, p, p, p, p, p, p, ctypes.c_int, p, p, p, p,
                                          i64]
    lib.qq_host_noise_outputs.restype = None
    lib.qq_host_products.argtypes = [p, p, i64, i64, p, i64, ctypes.c_int, p, p, p, p]
    lib.qq_host_products.restype = None
    lib.qq_host_cx_fan.argtypes = [p, p, p, i64, i64, i64, i64, i64, p]
    lib.qq_host_cx_fan.restype = None
    lib.qq_host_pullback.argtypes = [p, i64, p, i64, p, p, p, p, p, p, p, p, p, i64, p, p]
    lib.qq_host_pullback.restype = None
    lib.qq_stim_text_sizes.argtypes = [p, i64, i64, i64, p, ctypes.c_char_p, p, i64, p, ctypes.c_int]
    lib.qq_stim_text_sizes.restype = i64
    lib.qq_stim_text_write.argtypes = [p, i64, i64, p, ctypes.c_char_p, p, i64, p, p, i64, ctypes.c_int]
    lib.qq_stim_text_write.restype = i64
    lib.qq_stim_read_plain.argtypes = [p, i64, i64, i64, p, i64, i64, p, p, p, p, p, p, ctypes.c_int, i64]
    lib.qq_stim_read_plain.restype = i64
    lib.qq_host_parse_targets.argtypes = [ctypes.c_char_p, i64, p, p, p, p]
    lib.qq_host_parse_targets.restype = i64
    lib.qq_host_read_piece.argtypes = [ctypes.c_char_p, i64, i64, p, p, p, p, p, p, p]
    lib.qq_host_read_piece.restype = i64
    lib.qq_host_read_piece_parts.argtypes = [ctypes.c_char_p, i64, i64, p, p, p, p, p, p, p, i64]
    lib.qq_host_read_piece_parts.restype = i64
    lib.qq_host_place_segment.argtypes = [p, i64, p, p, p, i64, p, i64, p, p, p, i64, p]
    lib.qq_host_place_segment.restype = ctypes.c_int
    lib.qq_host_check_segment.argtypes = [p, i64, p, p, p, i64, p, i64]
    lib.qq_host_check_segment.restype = ctypes.c_int
    lib.qq_host_write_segment.argtypes = [p, i64, p, p, p, p, i64, i64, i64, i64, i64, ctypes.c_int, i64, p, p, p]
    lib.qq_host_write_segment.restype = None
    lib.qq_host_write_segment_later.argtypes = lib.qq_host_write_segment.argtypes
    lib.qq_host_write_segment_later.restype = i64
    lib.qq_host_segments_written.argtypes = [i64]
    lib.qq_host_segments_written.restype = None
    lib.qq_host_segments_done.argtypes = []
    lib.qq_host_segments_done.restype = i64
    lib.qq_host_segment_writers.argtypes = [ctypes.c_int]
    lib.qq_host_segment_writers.restype = None
    lib.qq_host_idle_lists.argtypes = [p, p, p, i64, i64, p, i64, p, p, p]
    lib.qq_host_idle_lists.restype = ctypes.c_int
    lib.qq_host_layer_stretches.argtypes = [p, p, i64, i64, i64, p, i64, i64, i64, p, p, p, p, p, i64]
    lib.qq_host_layer_stretches.restype = i64
    lib.qq_host_move_stretches.argtypes = [p, i64, p, p, p, p, p, p, p, p, p, p, i64]
    lib.qq_host_move_stretches.restype = i64
    lib.qq_host_sort_rows.argtypes = [p, p, i64, p, p, i64, i64, p, p, p, p, p, p, p]
    lib.qq_host_sort_rows.restype = i64
    lib.qq_host_layer_rows.argtypes = [p, p, i64, p, p, i64, i64, p, i64, p, i64, p, p, p, ctypes.c_int]
    lib.qq_host_layer_rows.restype = i64
    lib.qq_host_frame_gates.argtypes = [p, p, i64, p, p, i64, ctypes.c_int, p]
    lib.qq_host_frame_gates.restype = None
    return lib
