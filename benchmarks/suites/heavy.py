"""The heavy suite: the paper's random Clifford circuits from 10k qubits up (the paper: 1k to 180k
in steps of 1k, depths 100 / 500 / 1000), single shot and 1,024-shot sampling, ours against stim
(one thread) and quasarq, each case with a time limit (`timeout_s` in the JSON; the GPU profile:
150 s for GPU tools, 30 s for stim). The GPU profile runs n = 20k, 50k, 100k at depth 100, then,
only if the run's budget still allows, n = 180k at depth 100 and n = 20k at depth 1000.
Runners: `random_circuits.py`.
"""

from __future__ import annotations

from typing import List

from .light import random_cases
from ..harness import Case

SIMS = ("ours", "quasarq", "stim")

PLAN = {
    "tiny": {"depths": {5: [100]}, "shots": 256, "timeout_s": 90, "cpu_peer_timeout_s": 60, "extra": []},
    "quick": {"depths": {100: [5000, 10000]}, "shots": 1024, "timeout_s": 300, "cpu_peer_timeout_s": 150,
              "extra": []},
    "gpu": {"depths": {100: [20000, 50000, 100000]}, "shots": 1024, "timeout_s": 150, "cpu_peer_timeout_s": 30,
            "extra": [(180000, 100), (20000, 1000)]},
    "full": {"depths": {d: list(range(10000, 180001, 10000)) for d in (100, 500, 1000)}, "shots": 1024,
             "timeout_s": 7200, "cpu_peer_timeout_s": 7200, "extra": []},
}


def cases(profile: str, engine: str) -> List[Case]:
    """Tier 2, simulator by simulator (ours first: a run short of budget loses peers' cases first);
    the extras tier 4, each needing its whole limit and a minute to build its circuit."""
    plan = PLAN[profile]
    out = []
    for sim in SIMS:
        out += random_cases("heavy", plan, (sim,), tier_of=lambda n, depth: 2)
    for n, depth in plan["extra"]:
        extra = random_cases("heavy", {**plan, "depths": {depth: [n]}}, ("ours", "quasarq"), tier_of=lambda n, d: 4)
        for case in extra:
            case.min_budget_s = case.timeout_s + 60
        out += extra
    return out
