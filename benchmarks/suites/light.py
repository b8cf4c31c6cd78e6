"""The light suite: the QuaSARQ paper's light-suite shape (random Clifford circuits, 100 to 10k
qubits, depths 100 / 500 / 1000), single shot and 1,024-shot sampling, against stim (one thread),
quasarq (the paper's own tool), stimcirq, and cirq.CliffordSimulator (small n only: it takes
seconds per shot at 100 qubits). Runners: `random_circuits.py`.

Time limits per case (`timeout_s` in the JSON): GPU tools / CPU peers, by profile; a simulator that
hits its limit is not run on larger circuits of at least that depth (harness.py). Tiers: depth 100
is tier 1, the deeper circuits tier 3 (after the heavy suite's tier 2).
"""

from __future__ import annotations

from typing import List

from ..harness import Case

SIMS = ("ours", "stim", "quasarq", "stimcirq", "cirq")
SEED = 0

PLAN = {
    "tiny": {"depths": {10: [30]}, "shots": 256, "cirq_max": (30, 10), "stimcirq_max_n": 30,
             "timeout_s": 90, "cpu_peer_timeout_s": 60},
    "quick": {"depths": {100: [100, 300, 1000, 2000], 500: [100, 300, 1000], 1000: [100, 300, 1000]},
              "shots": 1024, "cirq_max": (100, 100), "stimcirq_max_n": 1000,
              "timeout_s": 180, "cpu_peer_timeout_s": 90},
    "gpu": {"depths": {100: [100, 1000, 5000, 10000], 500: [1000, 10000], 1000: [1000, 10000]},
            "shots": 1024, "cirq_max": (100, 100), "stimcirq_max_n": 1000,
            "timeout_s": 60, "cpu_peer_timeout_s": 25},
    "full": {"depths": {d: [100, 500] + list(range(1000, 10001, 1000)) for d in (100, 500, 1000)},
             "shots": 1024, "cirq_max": (500, 1000), "stimcirq_max_n": 2000,
             "timeout_s": 1800, "cpu_peer_timeout_s": 1800},
}


def random_cases(suite: str, plan: dict, sims=SIMS, tier_of=lambda n, depth: 1) -> List[Case]:
    out = []
    for depth, sizes in plan["depths"].items():
        for n in sizes:
            params = {"n": n, "depth": depth, "seed": SEED, "single": True, "shots": plan["shots"]}
            circuit = {"kind": "random_clifford", "n": n, "depth": depth, "seed": SEED}
            for sim in sims:
                if sim == "cirq" and (n > plan["cirq_max"][0] or depth > plan["cirq_max"][1]):
                    continue
                if sim == "stimcirq" and n > plan["stimcirq_max_n"]:
                    continue
                gpu = sim in ("ours", "quasarq")
                out.append(Case(suite=suite, module="random_circuits", workload=f"n={n} depth={depth}", sim=sim,
                                params=dict(params), timeout_s=plan["timeout_s" if gpu else "cpu_peer_timeout_s"],
                                tier=tier_of(n, depth), size=(n, depth), circuit=dict(circuit),
                                family="random_clifford"))
    return out


def cases(profile: str, engine: str) -> List[Case]:
    plan = PLAN[profile]
    return random_cases("light", plan, tier_of=lambda n, depth: 1 if depth == min(plan["depths"]) else 3)
