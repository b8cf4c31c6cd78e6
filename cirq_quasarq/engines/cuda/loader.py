"""The one kernel loader of the CUDA engine: cuda_src/*.cu -> prepared PyCUDA functions.

Sources are read from ``<package>/cuda_src`` (an installed wheel ships them as package data) or,
in a checkout, from ``<repo>/cuda_src``. Our own ``#include "x.cuh"`` lines are inlined here, in
Python, together with two generated headers: ``opcodes.cuh`` from ``opcodes.cuda_header()`` (never
stored; CI writes it too) and ``program.cuh`` from program.py / rng.py (instruction fields, run
fields, random streams). ``cuda_src/program.cuh`` is a generated copy kept only so that plain
``nvcc -I cuda_src -I <dir with opcodes.cuh>`` compiles every file (CI); the loader always inlines
the freshly generated text and `check_program_header()` says whether the copy is stale
(regenerate it with ``python -m cirq_quasarq.engines.cuda.loader``). PyCUDA then only
preprocesses sources that still include system headers (CUB). One compiled module is
kept per (source hash, options, device); each function is ``prepare()``-d once.

Importing this module never imports PyCUDA: that happens on the first `load_module` call.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
import threading
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from ... import opcodes, program, rng

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")
BASE_OPTIONS: Tuple[str, ...] = ("-std=c++17",)


class KernelCompileError(RuntimeError):
    """nvcc rejected a kernel source; the message carries file, options and numbered source."""


def source_dir() -> Path:
    """Where cuda_src lives: inside the installed package first, then beside the package."""
    try:
        packaged = importlib.resources.files("cirq_quasarq") / "cuda_src"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - odd loaders
        pass
    repo = Path(__file__).resolve().parents[3] / "cuda_src"
    if repo.is_dir():
        return repo
    raise FileNotFoundError("cuda_src not found in the cirq_quasarq package nor beside it")


def program_header() -> str:
    """Instruction fields, run fields, flags and random streams for the kernels (generated)."""
    lines = ["// Generated from cirq_quasarq/program.py and rng.py by loader.program_header(); do not edit.",
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
    return {"opcodes.cuh": opcodes.cuda_header(), "program.cuh": program_header()}


def check_program_header() -> bool:
    """True when cuda_src/program.cuh equals what program.py / rng.py generate now."""
    path = source_dir() / "program.cuh"
    return path.is_file() and path.read_text() == program_header()


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


def source_define(filename: str, name: str) -> int:
    """The integer value of `#define name value` in cuda_src/<filename> (launch contracts such as
    block sizes live in the kernel source only; the engine reads them from there)."""
    text = (source_dir() / filename).read_text()
    m = re.search(rf"^\s*#\s*define\s+{re.escape(name)}\s+\(?\s*(\d+)\s*\)?\s*$", text, re.MULTILINE)
    if m is None:
        raise KeyError(f"#define {name} not found in cuda_src/{filename}")
    return int(m.group(1))


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


def device_arch(device) -> str:
    major, minor = device.compute_capability()
    return f"sm_{major}{minor}"


def load_module(filename: str, options: Sequence[str] = ()) -> KernelModule:
    """Compile (or fetch) cuda_src/<filename> for the current context's device."""
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    source = inline_source(filename)
    opts = tuple(BASE_OPTIONS) + tuple(options)
    device = cuda.Context.get_device()
    arch = device_arch(device)
    key = (hashlib.sha256(source.encode()).hexdigest(), opts, f"{device.pci_bus_id()}/{arch}")
    with _LOCK:
        module = _MODULES.get(key)
        if module is None:
            try:
                compiled = SourceModule(source, no_extern_c=True, options=list(opts), arch=arch)
            except cuda.CompileError as exc:
                raise KernelCompileError(
                    f"nvcc failed on cuda_src/{filename} (arch {arch}, options {' '.join(opts)}):\n"
                    f"{exc}\n--- source as compiled ---\n{_numbered(source)}") from exc
            module = KernelModule(compiled, filename)
            _MODULES[key] = module
        return module


def write_generated_headers(directory: Path) -> None:
    """Write the generated headers (for compiling cuda_src with plain nvcc)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in generated_headers().items():
        (directory / name).write_text(text)


if __name__ == "__main__":  # python -m cirq_quasarq.engines.cuda.loader: refresh cuda_src/program.cuh
    (source_dir() / "program.cuh").write_text(program_header())
