"""The one kernel loader of the CUDA engine: cuda_src/*.cu -> prepared PyCUDA functions, launched
through one `Launcher`.

Sources are read from ``<package>/cuda_src`` (an installed wheel ships them as package data) or,
in a checkout, from ``<repo>/cuda_src``. Our own ``#include "x.cuh"`` lines are inlined here, in
Python, together with the generated headers (`generated_headers()`: ``opcodes.cuh`` from
``core.opcodes.cuda_header()`` and ``program.cuh`` from core/program.py, core/rng.py and
schedule/windows.py). Generated headers are never stored in cuda_src; `write_generated_headers()`
is the one way to put them on disk (``python -m cirq_quasarq.engines.cuda.loader --write-headers
DIR``), after which plain ``nvcc -I cuda_src -I DIR`` compiles every .cu (CI does). PyCUDA then
only preprocesses sources that still include system headers (CUB). One compiled module is kept
per (source hash, options, device); each function is ``prepare()``-d once.

The .cu sources are the single source of every launch contract the host needs: `kernel_table()`
parses each ``extern "C" __global__`` prototype into PyCUDA's argument string (`KERNEL_ARG_TYPES`;
an unknown C type fails loudly), and `source_define()` reads block sizes and tile shapes from the
sources' ``#define`` lines.

Compiled modules are kept on disk across processes (`kernel_cache_dir`, one cubin per source hash,
options, architecture and compiler), so only the first process on a machine pays for nvcc: PyCUDA's
own cache would preprocess the CUB sources with nvcc on every load just to key them.

Importing this module never imports PyCUDA: that happens on the first `load_module` call.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ...core import native, opcodes, program, rng
from . import faults

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?'
                     r"([A-Za-z_]\w*)\s*\(([^)]*)\)")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?!\()[ \t]+([^\n]*?)[ \t]*$", re.MULTILINE)
BASE_OPTIONS: Tuple[str, ...] = ("-std=c++17",)

# C parameter type (qualifiers removed) -> PyCUDA prepare() character; every pointer is "P".
KERNEL_ARG_TYPES: Dict[str, str] = {
    "int": "i",
    "unsigned int": "I",
    "unsigned": "I",
    "qq_u32": "I",
    "long long": "q",
    "long long int": "q",
    "unsigned long long": "Q",
    "unsigned long long int": "Q",
    "qq_u64": "Q",
    "float": "f",
    "double": "d",
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "struct"}


class KernelCompileError(RuntimeError):
    """nvcc rejected a kernel source; the message carries file, options and numbered source."""


def source_dir() -> Path:
    """Where cuda_src lives: inside the installed package first, then beside the package."""
    return native.source_dir()


# ---------------------------------------------------------------------------- generated headers
def program_header() -> str:
    """Instruction fields, run fields, flags and random streams for the kernels (generated)."""
    lines = ["// Generated from cirq_quasarq/core/program.py, core/rng.py and schedule/windows.py by "
             "loader.program_header(); do not edit.",
             "#pragma once", f"#define QQ_NF {program.NUM_FIELDS}"]
    for name in ("OP", "A", "B", "REC", "RAND", "AUX", "COND", "FLAGS", "STEP"):
        lines.append(f"#define QQ_F_{name} {getattr(program, name)}")
    lines.append(f"#define QQ_FLAG_INVERT {program.FLAG_INVERT}")
    from ...schedule import windows

    for name in ("RUN_START", "RUN_END", "RUN_OP", "RUN_WINDOW"):
        lines.append(f"#define QQ_{name} {getattr(windows, name)}")
    for stream in rng.Stream:
        lines.append(f"#define QQ_STREAM_{stream.name} {int(stream)}u")
    return "\n".join(lines) + "\n"


def generated_headers() -> Dict[str, str]:
    """Every generated header by file name (never stored in cuda_src)."""
    return {"opcodes.cuh": opcodes.cuda_header(), "program.cuh": program_header()}


def write_generated_headers(directory: Path) -> List[Path]:
    """Write the generated headers into `directory` (for compiling cuda_src with plain nvcc)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generated_headers().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def inline_source(filename: str, directory: Optional[Path] = None) -> str:
    """The source of cuda_src/<filename> with our own headers inlined (each once)."""
    directory = directory or source_dir()
    generated = generated_headers()
    seen = set()

    def expand(name: str, text: str) -> str:
        out = [f'#line 1 "{name}"']
        for number, line in enumerate(text.splitlines(), start=1):
            m = _INCLUDE.match(line)
            if m:
                inc = m.group(1)
                if inc not in seen:
                    seen.add(inc)
                    if inc in generated:
                        body = generated[inc]
                    else:
                        path = directory / inc
                        if not path.is_file():
                            raise FileNotFoundError(f"{name}:{number}: included file {inc!r} not in {directory}")
                        body = path.read_text()
                    out.append(expand(inc, body))
                    out.append(f'#line {number + 1} "{name}"')
                else:
                    out.append("")
                continue
            out.append("" if _PRAGMA_ONCE.match(line) else line)
        return "\n".join(out)

    seen.add(filename)
    return expand(filename, (directory / filename).read_text()) + "\n"


# ---------------------------------------------------------------------------- launch contracts
def kernel_signature(params: str, where: str = "kernel") -> str:
    """PyCUDA's prepare() string for a C parameter list ("const int* a, qq_u32 k" -> "PI")."""
    out = []
    for param in (p.strip() for p in params.split(",")):
        if not param or param == "void":
            continue
        if "*" in param or "[" in param:
            out.append("P")
            continue
        words = [w for w in param.split() if w not in _QUALIFIERS]
        ctype = " ".join(words[:-1])  # the last word is the parameter's name
        if ctype not in KERNEL_ARG_TYPES:
            raise ValueError(f"{where}: parameter {param!r} has a C type ({ctype!r}) with no PyCUDA argument "
                             f"character; add it to loader.KERNEL_ARG_TYPES")
        out.append(KERNEL_ARG_TYPES[ctype])
    return "".join(out)


def kernel_signatures(source: str, where: str = "source") -> Dict[str, str]:
    """Every ``extern "C" __global__`` kernel of a source text: name -> prepare() string."""
    table: Dict[str, str] = {}
    for m in _KERNEL.finditer(_COMMENT.sub(" ", source)):
        name = m.group(1)
        if name in table:
            raise ValueError(f"{where}: kernel {name} defined twice")
        table[name] = kernel_signature(m.group(2), f"{where}: {name}")
    return table


@functools.lru_cache(maxsize=None)
def kernel_table() -> Dict[str, Dict[str, str]]:
    """cuda_src/*.cu -> {kernel name -> prepare() string}, parsed from the sources' prototypes."""
    table: Dict[str, Dict[str, str]] = {}
    owner: Dict[str, str] = {}
    for path in sorted(source_dir().glob("*.cu")):
        kernels = kernel_signatures(path.read_text(), f"cuda_src/{path.name}")
        if not kernels:
            raise ValueError(f'cuda_src/{path.name} has no extern "C" __global__ kernel')
        for name in kernels:
            if name in owner:
                raise ValueError(f"kernel {name} is defined in cuda_src/{owner[name]} and cuda_src/{path.name}")
            owner[name] = path.name
        table[path.name] = kernels
    return table


_EVAL_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
             ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b, ast.BitAnd: lambda a, b: a & b,
             ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
             ast.Div: lambda a, b: abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)}  # C: toward zero


@functools.lru_cache(maxsize=None)
def _defines(filename: str) -> Dict[str, str]:
    text = _COMMENT.sub(" ", inline_source(filename))
    return {m.group(1): m.group(2).strip() for m in _DEFINE.finditer(text)}


def source_define(filename: str, name: str) -> int:
    """The integer value of ``#define name value`` as cuda_src/<filename> sees it (its own lines and
    those of the headers it includes; the value may be an integer expression of other defines).
    Launch contracts such as block sizes live in the kernel sources only; the engine reads them here."""
    defines = _defines(filename)

    def value(macro: str, depth: int = 0) -> int:
        if macro not in defines:
            raise KeyError(f"#define {macro} not found in cuda_src/{filename} nor its headers")
        if depth > 16:
            raise ValueError(f"#define {macro} in cuda_src/{filename}: too deeply nested")
        text = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", defines[macro])
        return evaluate(ast.parse(text, mode="eval").body, depth)

    def evaluate(node, depth: int) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return value(node.id, depth + 1)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand, depth)
        if isinstance(node, ast.BinOp) and type(node.op) in _EVAL_OPS:
            return _EVAL_OPS[type(node.op)](evaluate(node.left, depth), evaluate(node.right, depth))
        raise ValueError(f"#define {name} in cuda_src/{filename}: not an integer expression")

    try:
        return value(name)
    except SyntaxError as exc:
        raise ValueError(f"#define {name} in cuda_src/{filename}: not an integer expression") from exc


# ---------------------------------------------------------------------------- compile and launch
def _numbered(source: str) -> str:
    return "\n".join(f"{i:5d}  {line}" for i, line in enumerate(source.splitlines(), start=1))


class KernelModule:
    """A compiled module; `function(name, arg_types)` prepares each kernel once."""

    def __init__(self, module, filename: str):
        self._module = module
        self.filename = filename
        self._functions: Dict[str, object] = {}

    def function(self, name: str, arg_types: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = self._module.get_function(name)
            fn.prepare(arg_types)
            self._functions[name] = fn
        return fn


_MODULES: Dict[Tuple[str, Tuple[str, ...], str], KernelModule] = {}
_LOCK = threading.Lock()
# Dynamic shared memory each prepared function may take: id -> (the function, kept alive so that its id
# is never reused, bytes).
_SHARED_ALLOWED: Dict[int, Tuple[object, int]] = {}


def device_arch(device) -> str:
    major, minor = device.compute_capability()
    return f"sm_{major}{minor}"


def kernel_cache_dir() -> Optional[Path]:
    """Where compiled kernels are kept across processes: ``$CIRQ_QUASARQ_KERNEL_CACHE`` if set (an
    empty value or ``0`` turns the disk cache off), else the user's cache folder."""
    return native.cache_root()


@functools.lru_cache(maxsize=None)
def _compiler_identity() -> str:
    """The nvcc in use, by path, size and time (cheaper than running it for its version, and it
    changes whenever the toolkit, and so CUB's headers, change)."""
    nvcc = shutil.which("nvcc") or "nvcc"
    try:
        st = os.stat(nvcc)
        return f"{os.path.realpath(nvcc)}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return nvcc


def _compile_cubin(filename: str, source: str, opts: Tuple[str, ...], arch: str) -> bytes:
    """The cubin of a source: from the disk cache, or compiled by nvcc and then stored there."""
    from pycuda.compiler import compile as nvcc_compile
    import pycuda.driver as cuda

    root = kernel_cache_dir()
    path = None
    if root is not None:
        digest = hashlib.sha256("\0".join((source, *opts, arch, _compiler_identity())).encode()).hexdigest()
        path = root / f"{Path(filename).stem}-{arch}-{digest[:32]}.cubin"
        try:
            return path.read_bytes()
        except OSError:
            pass
    try:
        cubin = nvcc_compile(source, no_extern_c=True, options=list(opts), arch=arch, cache_dir=False)
    except cuda.CompileError as exc:
        raise KernelCompileError(
            f"nvcc failed on cuda_src/{filename} (arch {arch}, options {' '.join(opts)}):\n"
            f"{exc}\n--- source as compiled ---\n{_numbered(source)}") from exc
    if path is not None:
        try:  # written whole under a temporary name, then renamed: a reader never sees half a file
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(cubin)
                os.replace(tmp, path)
            except BaseException:  # an error or Ctrl-C: no half-written .part file is left behind
                _remove(tmp)
                raise
        except OSError:
            pass  # a read-only cache folder only costs the next process a compile
    return cubin


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def load_module(filename: str, options: Sequence[str] = ()) -> KernelModule:
    """Compile (or fetch, from this process or the disk cache) cuda_src/<filename> for the
    current context's device."""
    import pycuda.driver as cuda

    source = inline_source(filename)
    opts = tuple(BASE_OPTIONS) + tuple(options)
    device = cuda.Context.get_device()
    arch = device_arch(device)
    key = (hashlib.sha256(source.encode()).hexdigest(), opts, f"{device.pci_bus_id()}/{arch}")
    with _LOCK:
        module = _MODULES.get(key)
        if module is None:
            module = KernelModule(cuda.module_from_buffer(_compile_cubin(filename, source, opts, arch)), filename)
            _MODULES[key] = module
        return module


def checked_launch(function, stage: str, name: str, grid, block, *args, shared_size: int = 0, stream=None) -> None:
    """Launch a prepared PyCUDA function (on `stream`, else the default stream); a CUDA error of
    the launch itself (an invalid launch configuration, too many resources, a dead context) becomes
    `errors.GpuFaultError` naming the kernel, its stage and launch shape, with `context_ok` (faults.py)."""
    try:
        if stream is not None:
            function.prepared_async_call(grid, block, stream, *args, shared_size=shared_size)
        elif shared_size:
            function.prepared_call(grid, block, *args, shared_size=shared_size)
        else:
            function.prepared_call(grid, block, *args)
    except Exception as exc:
        import pycuda.driver as cuda

        if not isinstance(exc, cuda.Error):
            raise
        raise faults.fault(cuda, exc, where=f"launch of {name}", launch=(stage, name, grid, block, shared_size),
                           at_launch=True) from exc


class Launcher:
    """Every kernel of `kernel_table()`, compiled for the current context and prepared from its own
    prototype; every launch of the engine goes through `launch` (`checked_launch`: a CUDA error
    names the kernel and its launch shape), which remembers the last launch (`last_launch`) so that
    a fault found at a later synchronisation point can name it too (`synchronize`, `fault`). With
    `profile` set, each launch is bracketed by CUDA events and `collect()` sums their times per stage
    (and into `kernel_totals`, per kernel, for benchmarks)."""

    def __init__(self):
        import pycuda.driver as cuda

        self._cuda = cuda
        self.functions: Dict[str, object] = {}
        for filename, kernels in kernel_table().items():
            module = load_module(filename)
            for name, arg_types in kernels.items():
                self.functions[name] = module.function(name, arg_types)
        self.profile = False
        self._events: List[Tuple[str, str, object, object]] = []  # (stage, kernel, start, end)
        # every profiled launch collected since this was last cleared: kernel -> [launches, seconds]
        self.kernel_totals: Dict[str, List] = {}
        self.last_launch: Optional[faults.Launch] = None  # (stage, name, grid, block, shared bytes)

    def register(self, name: str, function) -> None:
        """Add a prepared PyCUDA function (one not in cuda_src: tests, tools) to launch by `name`."""
        self.functions[name] = function

    def launch(self, stage: str, name: str, grid, block, *args, shared_size: int = 0, timed: bool = False,
               stream=None):
        """Launch kernel `name` (on `stream`, else the default stream). Returns its (start, end)
        events when profiling or `timed`, else None."""
        fn = self.functions[name]
        self.last_launch = (stage, name, grid, block, shared_size)
        if shared_size:
            self._allow_shared(fn, name, shared_size)
        if not (self.profile or timed):
            checked_launch(fn, stage, name, grid, block, *args, shared_size=shared_size, stream=stream)
            return None
        start, end = self._cuda.Event(), self._cuda.Event()
        start.record(stream)
        checked_launch(fn, stage, name, grid, block, *args, shared_size=shared_size, stream=stream)
        end.record(stream)
        if self.profile:
            self._events.append((stage, name, start, end))
        return start, end

    def _allow_shared(self, fn, name: str, shared_size: int) -> None:
        """Opt `fn` in to `shared_size` bytes of dynamic shared memory (past 48 KiB of static and
        dynamic together a kernel must). The allowance belongs to the function, which every Launcher
        of the process shares, so it only ever grows: lowering it would fail another engine's launch."""
        with _LOCK:
            if shared_size <= _SHARED_ALLOWED.get(id(fn), (fn, 0))[1]:
                return
            try:
                fn.set_attribute(self._cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_size)
            except self._cuda.Error as exc:
                raise faults.fault(self._cuda, exc, where=f"shared memory opt-in of {name}",
                                   launch=self.last_launch, at_launch=True) from exc
            _SHARED_ALLOWED[id(fn)] = (fn, shared_size)

    def fault(self, exc: BaseException, where: str):
        """The GpuFaultError of a driver error `exc` found at synchronisation point `where`, naming
        the last kernel launched before it."""
        return faults.fault(self._cuda, exc, where=where, launch=self.last_launch, at_launch=False)

    def synchronize(self, where: str = "synchronize") -> None:
        """Wait for the device; a CUDA error found there becomes a GpuFaultError (`fault`)."""
        try:
            self._cuda.Context.synchronize()
        except self._cuda.Error as exc:
            raise self.fault(exc, where) from exc

    def discard_events(self) -> None:
        """Forget the profiling events of an interrupted call (collect() would count them)."""
        self._events = []

    def collect(self) -> Dict[str, float]:
        """Seconds of device time per stage since the last collect (waits for the device); the
        same launches are added to `kernel_totals`, per kernel."""
        self.synchronize("collecting the profile's events")
        seconds: Dict[str, float] = {}
        for stage, name, start, end in self._events:
            took = end.time_since(start) / 1e3
            seconds[stage] = seconds.get(stage, 0.0) + took
            total = self.kernel_totals.setdefault(name, [0, 0.0])
            total[0] += 1
            total[1] += took
        self._events = []
        return seconds


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m cirq_quasarq.engines.cuda.loader",
                                     description="Tools for the CUDA engine's kernel sources.")
    parser.add_argument("--write-headers", metavar="DIR", required=True, type=Path,
                        help="write the generated headers (opcodes.cuh, program.cuh) into DIR, so that "
                             "nvcc -I cuda_src -I DIR compiles every cuda_src/*.cu")
    args = parser.parse_args(argv)
    for path in write_generated_headers(args.write_headers):
        print(path)


if __name__ == "__main__":
    main()
