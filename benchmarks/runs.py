"""The benchmark runs as data, for the text (report.py) and the figures (figures.py): the JSON
lines of `docs/benchmarks/results/` loaded, each device's latest run per suite selected, and the
rows and numbers both show."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .harness import RESULTS_DIR

NAMES = {"ours": "cirq-quasarq", "stim": "stim", "quasarq": "quasarq", "custabilizer": "cuStabilizer",
         "stimcirq": "stimcirq", "cirq": "cirq.CliffordSimulator"}
PEERS = ("stim", "quasarq", "custabilizer", "stimcirq", "cirq")
SIM_ORDER = ("ours",) + PEERS
SUITE_ORDER = ("qec", "light", "heavy", "cirq")


# ----------------------------------------------------------------------------- loading
@dataclasses.dataclass(eq=False)
class Run:
    header: Dict[str, Any]
    cases: List[Dict[str, Any]]
    end: Optional[Dict[str, Any]]
    path: Path

    @property
    def slug(self) -> str:
        return self.header["device"]["slug"]

    @property
    def label(self) -> str:
        return self.header["device"]["label"]

    def suite(self, name: str) -> List[Dict[str, Any]]:
        return [c for c in self.cases if c["suite"] == name]


def load_runs(results_dir: Path = RESULTS_DIR) -> List[Run]:
    runs = []
    for path in sorted(Path(results_dir).glob("*.jsonl")):
        header, cases, end = None, [], None
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("kind") == "run":
                header = rec
            elif rec.get("kind") == "case":
                cases.append(rec)
            elif rec.get("kind") == "run_end":
                end = rec
        if header is not None:
            runs.append(Run(header, cases, end, path))
    return sorted(runs, key=lambda r: (r.header["started_at"], r.header["run_id"]))


def select(runs: List[Run]) -> Dict[str, Dict[str, Run]]:
    """{device slug: {suite: the latest run with results of that suite}}; GPU devices first."""
    out: Dict[str, Dict[str, Run]] = {}
    for run in runs:
        for suite in run.header.get("suites", []):
            if any(c["status"] in ("ok", "timeout", "error") and c.get("results") for c in run.suite(suite)):
                out.setdefault(run.slug, {})[suite] = run
    gpu_first = sorted(out, key=lambda s: (next(iter(out[s].values())).header["engine"] != "cuda", s))
    return {slug: {s: out[slug][s] for s in SUITE_ORDER if s in out[slug]} for slug in gpu_first}


# ----------------------------------------------------------------------------- numbers
def get(record: Optional[Dict[str, Any]], *keys) -> Any:
    node: Any = record.get("results") if record else None
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def repeat_s(part: Any) -> Optional[float]:
    rep = part.get("repeat") if isinstance(part, dict) else None
    return rep.get("best_s") if isinstance(rep, dict) else None


def first_s(part: Any) -> Optional[float]:
    return part.get("first_s") if isinstance(part, dict) else None


def fmt_shots(shots: int) -> str:
    for unit, name in ((10**6, "M"), (10**3, "k")):
        if shots >= unit and shots % unit == 0:
            return f"{shots // unit}{name}"
    return str(shots)


def index(cases: List[Dict[str, Any]]) -> Dict[Tuple[str, str], Dict[str, Any]]:
    return {(c["workload"], c["sim"]): c for c in cases}


# ----------------------------------------------------------------------------- rows of each suite
@dataclasses.dataclass
class Row:
    """One workload and mode: each simulator's record and the key path of the measured part."""

    suite: str
    label: str
    records: Dict[str, Dict[str, Any]]
    keys: Tuple[str, ...]

    def part(self, sim: str) -> Any:
        return get(self.records.get(sim), *self.keys)


def random_rows(suite: str, cases) -> List[Row]:
    by = index(cases)
    rows = []
    for workload in dict.fromkeys(c["workload"] for c in cases):
        recs = {sim: by[(workload, sim)] for sim in SIM_ORDER if (workload, sim) in by}
        p = next(iter(recs.values()))["params"]
        rows.append(Row(suite, f"random Clifford n={p['n']:,}, depth {p['depth']}, single shot", recs, ("single",)))
        if p.get("shots"):
            rows.append(Row(suite, f"random Clifford n={p['n']:,}, depth {p['depth']}, {p['shots']:,} shots", recs,
                            ("sampling",)))
    return rows


def qec_rows(cases) -> List[Row]:
    by = index(cases)
    rows = []
    for workload in dict.fromkeys(c["workload"] for c in cases):
        recs = {sim: by[(workload, sim)] for sim in SIM_ORDER if (workload, sim) in by}
        p = next(iter(recs.values()))["params"]
        for shots in p["shots"]:
            for mode, what in (("measurements", "records"), ("detectors", "detection events")):
                rows.append(Row("qec", f"surface d={p['d']}, {fmt_shots(shots)} shots, {what}", recs,
                                ("shots", str(shots), mode)))
    return rows


def cirq_rows(cases) -> List[Row]:
    by = index(cases)
    rows = []
    for workload in dict.fromkeys(c["workload"] for c in cases):
        recs = {sim: by[(workload, sim)] for sim in SIM_ORDER if (workload, sim) in by}
        p = next(iter(recs.values()))["params"]
        if p["workload"] == "simulate":
            label, key = f"Cirq `simulate()`, random Clifford n={p['n']}, depth {p['depth']}", "simulate"
        else:
            noise = "noiseless, no annotations" if p["workload"] == "run_noiseless" else f"p={p['p']:g}"
            label, key = f"Cirq `run()`, surface d={p['d']} ({noise}), {fmt_shots(p['shots'])} shots", "run"
        rows.append(Row("cirq", label, recs, (key,)))
    return rows


def rows_of(suite: str, cases) -> List[Row]:
    if suite == "qec":
        return qec_rows(cases)
    if suite == "cirq":
        return cirq_rows(cases)
    return random_rows(suite, cases)


def speedups(suites: Dict[str, Run]) -> Dict[str, List[Tuple[str, float]]]:
    """{peer: [(row label, peer time / ours)]} over every row where both have a repeat-call time."""
    out: Dict[str, List[Tuple[str, float]]] = {}
    for suite, run in suites.items():
        for r in rows_of(suite, run.suite(suite)):
            ours = repeat_s(r.part("ours"))
            if not ours:
                continue
            for peer in PEERS:
                t = repeat_s(r.part(peer))
                if t:
                    out.setdefault(peer, []).append((r.label, t / ours))
    return out


def energies(suites: Dict[str, Run]) -> List[Tuple[str, str, float]]:
    out = []
    for suite, run in suites.items():
        for r in rows_of(suite, run.suite(suite)):
            for sim in r.records:
                part = r.part(sim)
                rep = part.get("repeat") if isinstance(part, dict) else None
                if isinstance(rep, dict) and rep.get("energy_j") is not None:
                    out.append((r.label, sim, rep["energy_j"]))
    return out
