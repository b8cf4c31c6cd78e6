"""Figures, the README's benchmark block and the generated part of docs/benchmarks.md, from the JSON.

    python -m benchmarks report [--results DIR] [--check]

Reads every `docs/benchmarks/results/*.jsonl` and takes, for each device (the run header's
`device.slug`) and each suite, the latest run that has results of that suite: every number in one
table row then comes from one run, and every ratio from one run on one machine. Writes:
- docs/benchmarks/<device>-<figure>.png (matplotlib, Agg): runtime vs qubits per depth and cactus
  plots (light, heavy), sampling time vs shots (qec), our per-stage times, speed-up over each peer,
  energy per call where NVML measured it;
- the block between BLOCK_START / BLOCK_END in README.md (headline table per device);
- the block between DOC_START / DOC_END in docs/benchmarks.md (every case, per device).
The text blocks depend on the JSON only (tests/test_benchmarks_suite.py keeps README == JSON).
Imports go one way: report -> figures -> runs (the runs as data, which both show).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .figures import draw
from .harness import ROOT, RESULTS_DIR
from .runs import NAMES, PEERS, Row, Run, first_s, fmt_shots, load_runs, repeat_s, rows_of, select

BLOCK_START = "<!-- benchmarks:headline:start -->"
BLOCK_END = "<!-- benchmarks:headline:end -->"
DOC_START = "<!-- benchmarks:runs:start -->"
DOC_END = "<!-- benchmarks:runs:end -->"


@dataclasses.dataclass
class Outputs:
    figures: Path
    readme: Path
    doc: Path

    @classmethod
    def default(cls, figures=None, readme=None, doc=None) -> "Outputs":
        return cls(Path(figures) if figures else ROOT / "docs" / "benchmarks",
                   Path(readme) if readme else ROOT / "README.md",
                   Path(doc) if doc else ROOT / "docs" / "benchmarks.md")


def headline_s(part: Any) -> Tuple[Optional[float], bool]:
    """(seconds, is_first_call): the repeat call where measured, else the first call."""
    rep = repeat_s(part)
    if rep is not None:
        return rep, False
    return first_s(part), True


def fmt_s(x: Optional[float]) -> str:
    if x is None:
        return ""
    if x < 1e-3:
        return f"{x * 1e6:.3g} µs"
    if x < 1:
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g} s"


def fmt_ratio(r: float) -> str:
    """peer time / ours, in words."""
    x = r if r >= 1 else 1 / r
    text = f"{x:,.0f}×" if x >= 100 else f"{x:.3g}×"
    return f"ours {text} faster" if r >= 1 else f"ours {text} slower"


def status_text(record: Optional[Dict[str, Any]]) -> str:
    if record is None:
        return ""
    status = record["status"]
    if status == "timeout":
        return "budget ran out" if record.get("budget_cut") else f"over {record.get('timeout_s', 0):.0f} s limit"
    words = {"crashed": "crashed", "error": "error", "skipped": "skipped", "unavailable": "not installed"}
    return words.get(status, "")


def headline_rows(suite: str, cases) -> List[Row]:
    """The README's pick: per suite the largest workloads our simulator completed."""
    rows = [r for r in rows_of(suite, cases) if headline_s(r.part("ours"))[0] is not None]
    if suite == "qec":  # per distance, the most shots
        best: Dict[Tuple[str, str], Row] = {}
        for r in rows:
            p = r.records["ours"]["params"]
            best[(p["d"], r.keys[-1])] = r
        return sorted(best.values(), key=lambda r: (r.records["ours"]["params"]["d"], r.keys[-1] != "measurements"))
    if suite in ("light", "heavy"):
        picked = []
        depths = sorted({r.records["ours"]["params"]["depth"] for r in rows})
        for depth in depths[:1] + depths[-1:] if len(depths) > 1 else depths:
            at = [r for r in rows if r.records["ours"]["params"]["depth"] == depth]
            for mode in (("single",), ("sampling",)):
                of_mode = [r for r in at if r.keys == mode]
                if of_mode and (depth == depths[0] or mode == ("single",)):
                    picked.append(max(of_mode, key=lambda r: r.records["ours"]["params"]["n"]))
        return picked
    by_kind: Dict[str, Row] = {}  # cirq: the largest of each workload kind
    for r in rows:
        by_kind[r.records["ours"]["params"]["workload"]] = r
    return list(by_kind.values())


# ----------------------------------------------------------------------------- text
def peer_cell(row: Row, sim: str, ours: Optional[Tuple[float, bool]]) -> str:
    """A peer's time, and how ours compares: repeat call with repeat call, or, where ours has
    only a first call, first call with first call."""
    part = row.part(sim)
    rep, first = repeat_s(part), first_s(part)
    if rep is None and first is None:
        if isinstance(part, dict) and part.get("not_available"):
            return "no output"
        return status_text(row.records.get(sim))
    text = fmt_s(rep) if rep is not None else fmt_s(first) + " (first call)"
    if rep is not None and first is not None and (sim == "quasarq" or first > 1.5 * rep):
        text += f", first {fmt_s(first)}"
    if ours is not None:
        t, ours_first = ours
        if not ours_first and rep is not None:
            text += f" · {fmt_ratio(rep / t)}"
        elif ours_first and first is not None:
            text += f" · {fmt_ratio(first / t)} (first calls)"
    return text


def ours_cell(row: Row) -> Tuple[str, Optional[Tuple[float, bool]]]:
    part = row.part("ours")
    t, is_first = headline_s(part)
    if t is None:
        return status_text(row.records.get("ours")), None
    text = fmt_s(t) + (" (first call)" if is_first else "")
    f = first_s(part)
    if not is_first and f is not None:
        text += f" (first {fmt_s(f)})"
    return text, (t, is_first)


def run_line(run: Run) -> str:
    h = run.header
    git = h["git"].get("rev") or "unknown"
    dirty = ", uncommitted changes" if h["git"].get("dirty") else ""
    return f"run `{h['run_id']}` (git `{git[:10]}`{dirty}): `{h['command']}`"


def readme_block(selection: Dict[str, Dict[str, Run]]) -> str:
    lines = [BLOCK_START,
             "### Benchmark suite (generated by `python -m benchmarks report` from `docs/benchmarks/results/`)",
             "",
             "Each time is the best repeat call: ours with a new `QuasarqSimulator` per call on a circuit "
             "already compiled in the process, each peer on the same prepared object (quasarq's `simulate()` on "
             "the same circuit object, a compiled sampler); *first* is the first call on that circuit in a "
             "warmed-up process, marked *(first call)* where no repeat was timed. \"ours N× faster / slower\" "
             "compares the repeat calls of one run on one machine (the first calls where ours has no repeat). "
             "Records and detection events are bit-packed in host memory. How each number is measured, every "
             "case and the figures: [docs/benchmarks.md](docs/benchmarks.md).",
             ""]
    if not selection:
        lines += ["No results yet: run `python -m benchmarks all --quick-gpu` (GPU) or "
                  "`python -m benchmarks all --quick` (CPU).", ""]
    for slug, suites in selection.items():
        runs = list(dict.fromkeys(suites.values()))
        first = runs[0]
        engine = "CUDA engine" if first.header["engine"] == "cuda" else "NumPy engine"
        lines.append(f"**{first.label}** ({engine}; " + "; ".join(run_line(r) for r in runs) + ")")
        lines.append("")
        rows = [r for suite, run in suites.items() for r in headline_rows(suite, run.suite(suite))]
        peers = [p for p in PEERS if any(peer_cell(r, p, None) not in ("", "not installed") for r in rows)]
        missing = [p for p in PEERS if p not in peers and any(
            (r.records.get(p) or {}).get("status") == "unavailable" for r in rows)]
        lines.append("| workload | cirq-quasarq | " + " | ".join(NAMES[p] for p in peers) + " |")
        lines.append("|---" * (2 + len(peers)) + "|")
        for r in rows:
            text, ours = ours_cell(r)
            lines.append(f"| {r.label} | {text} | " + " | ".join(peer_cell(r, p, ours) for p in peers) + " |")
        if missing:
            lines.append("")
            lines.append("Not installed on this machine: " + ", ".join(NAMES[p] for p in missing) + ".")
        lines.append("")
    lines.append(BLOCK_END)
    return "\n".join(lines)


def _versions(run: Run) -> str:
    found: Dict[str, str] = {}
    for c in run.cases:
        for k, v in ((c.get("results") or {}).get("versions") or {}).items():
            found.setdefault(k, v)
    return ", ".join(f"{k} {v}" for k, v in sorted(found.items()))


def _energy(part: Any) -> str:
    rep = part.get("repeat") if isinstance(part, dict) else None
    e = rep.get("energy_j") if isinstance(rep, dict) else None
    return f"{e:.3g} J" if e is not None else ""


def suite_table(suite: str, run: Run) -> List[str]:
    rows = rows_of(suite, run.suite(suite))
    energy = any(_energy(r.part(s)) for r in rows for s in r.records)
    head = "| workload | simulator | first call | repeat (best) | median | calls | compile |" + \
           (" energy / call |" if energy else "") + " status |"
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    absent = {}
    for r in rows:
        for sim, rec in r.records.items():
            unselected = rec["status"] == "skipped" and "--peers" in (rec.get("reason") or "")
            if rec["status"] == "unavailable" or unselected:
                absent.setdefault(sim, rec["reason"])
                continue
            part = r.part(sim)
            if not isinstance(part, dict) and rec["status"] == "ok":
                continue
            part = part if isinstance(part, dict) else {}
            rep = part.get("repeat") if isinstance(part.get("repeat"), dict) else {}
            status = rec["status"] if rec["status"] != "ok" else ""
            if rec.get("reason") and rec["status"] != "ok":
                status += f": {rec['reason'][:80]}"
            if rep.get("skipped"):
                status = (status + "; " if status else "") + "not repeated (slow first call)"
            if part.get("not_run") or part.get("not_available"):
                status = (status + "; " if status else "") + (part.get("not_run") or part.get("not_available"))
            compile_s = part.get("compile_s")
            out.append(f"| {r.label} | {NAMES[sim]} | {fmt_s(part.get('first_s'))} | {fmt_s(rep.get('best_s'))} | "
                       f"{fmt_s(rep.get('median_s'))} | {rep.get('calls', '')} | {fmt_s(compile_s)} |" +
                       (f" {_energy(part)} |" if energy else "") + f" {status} |")
    if absent:
        out += ["", "Not run: " + "; ".join(f"{NAMES[s]} ({why})" for s, why in absent.items()) + "."]
    return out


def stage_table(suite: str, run: Run) -> List[str]:
    out = []
    for rec in run.suite(suite):
        if rec["sim"] != "ours":
            continue
        st = (rec.get("results") or {}).get("stages") or {}
        if not st or st.get("skipped"):
            continue
        dev = st.get("device_stages_s") or {}
        dev_text = ", ".join(f"{k} {fmt_s(v)}" for k, v in dev.items())
        frames = st.get("frames") or {}
        if frames:
            shots = max(frames, key=int)
            fr = frames[shots]
            kernel = fr.get("frame_kernel_s")
            frame_text = f"{fmt_s(fr.get('frames_s'))} at {fmt_shots(int(shots))} shots" + \
                (f" (kernels {fmt_s(kernel)})" if kernel is not None else "")
        else:
            kernel = st.get("frame_kernel_s")
            frame_text = fmt_s(st.get("frames_s")) + (f" (kernels {fmt_s(kernel)})" if kernel is not None else "")
        out.append(f"| {rec['workload']} | {fmt_s(st.get('compile_s'))} | {fmt_s(st.get('schedule_s'))} | "
                   f"{fmt_s(st.get('tableau_s'))}{' (' + dev_text + ')' if dev_text else ''} | "
                   f"{fmt_s(st.get('reference_s'))} | {frame_text} |")
    if not out:
        return []
    return ["| workload | compile | schedule | tableau run (device stages) | reference sample | frames to host |",
            "|---|---|---|---|---|---|"] + out


FIGURE_TEXT = {
    "light-runtime": "runtime vs qubits per depth (light suite); solid: repeat call, dotted: first call",
    "light-cactus": "cactus plot (light suite): circuits completed within a time, first calls",
    "heavy-runtime": "runtime vs qubits (heavy suite)",
    "heavy-cactus": "cactus plot (heavy suite)",
    "qec-sampling": "sampling time vs shots per code distance (qec suite)",
    "stages": "our time per stage (the paper's Table 1 analogue)",
    "speedup": "speed-up over each peer (peer time / ours, repeat calls, same run)",
    "energy": "energy per call of the GPU tools (NVML)",
}


def doc_block(selection: Dict[str, Dict[str, Run]], figures: Dict[str, List[str]]) -> str:
    lines = [DOC_START, ""]
    if not selection:
        lines += ["No results yet.", ""]
    for slug, suites in selection.items():
        runs = list(dict.fromkeys(suites.values()))
        h = runs[0].header
        lines += [f"### {h['device']['label']}", ""]
        gpu = h["device"].get("gpu")
        host = h["host"]
        lines.append(f"- Device: {h['device']['label']}" +
                     (f" (driver {gpu.get('driver')}, CUDA {gpu.get('cuda')}, {gpu.get('memory')})"
                      if gpu and h["engine"] == "cuda" else "") +
                     f"; host {host['cpu']}, {host['cores']} cores, {host.get('memory_gib')} GiB, Python "
                     f"{host['python']}; our engine: {h['engine']}.")
        for run in runs:
            rh = run.header
            wall = f", {run.end['wall_s']:.0f} s" if run.end else " (did not finish)"
            lines.append(f"- Suites {', '.join(s for s, r in suites.items() if r is run)}: {run_line(run)}; "
                         f"profile `{rh['profile']}`, budget {rh.get('budget_s') or 'none'}, started "
                         f"{rh['started_at']}{wall}. Versions: {_versions(run)}.")
        lines.append("")
        for name in figures.get(slug, []):
            key = name[len(slug) + 1:-4]
            lines.append(f"![{FIGURE_TEXT.get(key, key)}](benchmarks/{name})")
            lines.append("")
        for suite, run in suites.items():
            lines += [f"#### {suite}", ""] + suite_table(suite, run) + [""]
            stages = stage_table(suite, run)
            if stages:
                lines += [f"Our stages ({suite}, one run each, after the timed calls):", ""] + stages + [""]
    lines.append(DOC_END)
    return "\n".join(lines)


# ----------------------------------------------------------------------------- entry points
def replace_block(text: str, start: str, end: str, block: str) -> str:
    """`text` with the block between `start` and `end` (markers included) replaced by `block`."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"markers {start} / {end} not found")
    return text[:i] + block + text[j + len(end):]


def current_block(text: str, start: str = BLOCK_START, end: str = BLOCK_END) -> Optional[str]:
    i, j = text.find(start), text.find(end)
    return text[i:j + len(end)] if 0 <= i < j else None


def expected_readme_block(results_dir: Path = RESULTS_DIR) -> str:
    return readme_block(select(load_runs(results_dir)))


def generate(results_dir: Path, outputs: Outputs) -> None:
    selection = select(load_runs(results_dir))
    names = draw(selection, outputs.figures)
    block = readme_block(selection)
    text = outputs.readme.read_text() if outputs.readme.exists() else ""
    if current_block(text) is None:
        anchor = "## Known limitations"
        if anchor in text:  # right after the performance section
            text = text.replace(anchor, block + "\n\n" + anchor, 1)
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        text = replace_block(text, BLOCK_START, BLOCK_END, block)
    outputs.readme.write_text(text)
    doc = doc_block(selection, names)
    if outputs.doc.exists() and current_block(outputs.doc.read_text(), DOC_START, DOC_END) is not None:
        outputs.doc.write_text(replace_block(outputs.doc.read_text(), DOC_START, DOC_END, doc))
    else:
        prefix = outputs.doc.read_text().rstrip("\n") + "\n\n" if outputs.doc.exists() else "# Benchmarks\n\n"
        outputs.doc.parent.mkdir(parents=True, exist_ok=True)
        outputs.doc.write_text(prefix + doc + "\n")
    shown = sum(len(v) for v in names.values())
    print(f"report: {shown} figures in {outputs.figures}, README block in {outputs.readme}, runs in {outputs.doc}")


def check(results_dir: Path, outputs: Outputs) -> int:
    want = expected_readme_block(results_dir)
    have = current_block(outputs.readme.read_text()) if outputs.readme.exists() else None
    if have != want:
        print("README benchmark block differs from the JSON: run `python -m benchmarks report`")
        return 1
    print("README benchmark block matches the JSON")
    return 0
