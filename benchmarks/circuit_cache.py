"""Benchmark circuits built once per machine and kept as .stim files.

Building the paper's random circuits in Python takes seconds to minutes at 10^5 qubits, and the
builders import Cirq: the parent builds each circuit once (outside every timed region and every
case's time limit) and each case's process loads it with `stim.Circuit.from_file`, so peers that
only need stim never import Cirq. A file's name carries the builder's parameters and a hash of the
builder's source and of stim's version, so a changed builder never serves a stale circuit.

Specs (plain dicts, stored in the JSON):
- {"kind": "random_clifford", "n", "depth", "seed"}: `random_clifford.paper_random_circuit_stim`;
- {"kind": "surface", "d", "rounds", "p"}: `circuits.surface_code_stim` (stim's
  surface_code:rotated_memory_z, every noise knob p).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict

_BUILDERS = {"random_clifford": "random_clifford.py", "surface": "circuits.py"}


def default_dir() -> Path:
    return Path(os.environ.get("CIRQ_QUASARQ_BENCH_CACHE") or Path(tempfile.gettempdir()) / "cirq_quasarq_bench")


def _fingerprint(kind: str) -> str:
    import stim

    source = (Path(__file__).parent / _BUILDERS[kind]).read_bytes()
    return hashlib.sha256(source + stim.__version__.encode()).hexdigest()[:10]


def path_for(spec: Dict[str, Any], cache_dir: Path) -> Path:
    kind = spec["kind"]
    fields = "-".join(f"{k}{spec[k]}" for k in sorted(spec) if k != "kind")
    return Path(cache_dir) / f"{kind}-{fields}-{_fingerprint(kind)}.stim"


def build(spec: Dict[str, Any]):
    """The stim.Circuit of a spec (slow for large random circuits)."""
    if spec["kind"] == "random_clifford":
        from .random_clifford import paper_random_circuit_stim

        return paper_random_circuit_stim(spec["n"], spec["depth"], spec["seed"])
    if spec["kind"] == "surface":
        from .circuits import surface_code_stim

        return surface_code_stim(spec["d"], spec["rounds"], spec["p"])
    raise ValueError(f"unknown circuit kind {spec['kind']!r}")


def ensure(spec: Dict[str, Any], cache_dir: Path) -> Path:
    """The file of `spec`, built and written (atomically) when missing."""
    path = path_for(spec, cache_dir)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        circuit = build(spec)
        tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
        circuit.to_file(str(tmp))
        os.replace(tmp, path)
    return path
