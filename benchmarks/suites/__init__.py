"""The benchmark suites: each module lists its cases per profile (`cases(profile, engine)`); the
runners (one function per simulator, `RUNNERS[sim](ctx)`) run inside a case's own process.

- light (`light.py`): the paper's light suite shape, random Clifford circuits up to 10k qubits;
- heavy (`heavy.py`): the same circuits from 10k qubits up, as memory and time allow;
- qec (`qec.py`): rotated surface-code memory experiments, many shots, records and detection events;
- cirq (`cirq_e2e.py`): Cirq's own entry points end to end, compile time split out.

Profiles: tiny (the tests' smoke run), quick (a CPU run of minutes), gpu (one GPU run of under
nine minutes, `--quick-gpu`), full (the issue's sizes: hours).
"""

from __future__ import annotations

import importlib
from typing import List

from ..harness import Case

SUITES = {"light": "light", "heavy": "heavy", "qec": "qec", "cirq": "cirq_e2e"}
PROFILES = ("tiny", "quick", "gpu", "full")


def cases(suite: str, profile: str, engine: str) -> List[Case]:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    module = importlib.import_module(f"{__name__}.{SUITES[suite]}")
    out = module.cases(profile, engine)
    for case in out:
        case.gpu_tool = case.sim in ("quasarq", "custabilizer") or (case.sim == "ours" and engine == "cuda")
    return out
