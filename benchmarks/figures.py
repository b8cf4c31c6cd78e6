"""The figures of docs/benchmarks.md (matplotlib, Agg backend), drawn from the selected runs.

Per device: runtime vs qubits per depth and cactus plots (light, heavy: the paper's figures),
sampling time vs shots per code distance (qec), our time per stage (the paper's Table 1 analogue),
speed-up over each peer, and energy per call where NVML measured it. `figure_names` says which
figures a device gets; `draw` writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

from .runs import NAMES, PEERS, SIM_ORDER, Run, energies, first_s, fmt_shots, get, repeat_s, speedups

COLORS = {"ours": "tab:red", "stim": "tab:blue", "quasarq": "tab:green", "custabilizer": "tab:purple",
          "stimcirq": "tab:orange", "cirq": "tab:gray"}


def figure_names(selection: Dict[str, Dict[str, Run]]) -> Dict[str, List[str]]:
    """The figures each device gets (those with data), in a fixed order."""
    out = {}
    for slug, suites in selection.items():
        names = []
        for suite in ("light", "heavy"):
            if suite in suites:
                names += [f"{slug}-{suite}-runtime.png", f"{slug}-{suite}-cactus.png"]
        if "qec" in suites:
            names.append(f"{slug}-qec-sampling.png")
        if any(rec["sim"] == "ours" and (rec.get("results") or {}).get("stages", {}).get("compile_s") is not None
               for run in suites.values() for rec in run.cases):
            names.append(f"{slug}-stages.png")
        if speedups(suites):
            names.append(f"{slug}-speedup.png")
        if energies(suites):
            names.append(f"{slug}-energy.png")
        out[slug] = names
    return out


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _random_series(cases, key: str, mode: str):
    """{depth: {sim: [(n, seconds)]}} of `key` ("repeat" or "first") for `mode`."""
    out: Dict[int, Dict[str, List[Tuple[int, float]]]] = {}
    for rec in cases:
        part = get(rec, mode)
        t = repeat_s(part) if key == "repeat" else first_s(part)
        if t is None:
            continue
        p = rec["params"]
        out.setdefault(p["depth"], {}).setdefault(rec["sim"], []).append((p["n"], t))
    return out


# Device-copy bandwidth (read + write counted) measured on a device kind, for the tableau-mode
# floor: each layer of a depth-D circuit reads and writes the 2n x 2n-bit tableau once at least.
COPY_BYTES_PER_S = {"nvidia-h100-80gb-hbm3": 2.97e12}  # docs/benchmarks-gpu.md, 2026-11-22 run


def tableau_floor_s(n: int, depth: int, bytes_per_s: float) -> float:
    """Seconds to read and write an n-qubit tableau (n^2 / 2 bytes) once per layer."""
    return depth * 2 * (n * n / 2) / bytes_per_s


def _timed_depths(cases, modes) -> List[int]:
    """The depths with at least one time in some mode (a depth whose cases were all skipped gets
    no panel), or every depth when none has a time."""
    timed = {depth for mode in modes for key in ("repeat", "first")
             for depth, sims in _random_series(cases, key, mode).items() if any(sims.values())}
    return sorted(timed or {c["params"]["depth"] for c in cases})


def plot_random_runtime(plt, run: Run, suite: str, path: Path) -> None:
    from matplotlib.ticker import NullFormatter

    cases = run.suite(suite)
    shots = next((c["params"].get("shots") for c in cases if c["params"].get("shots")), 0)
    modes = [("single", "single shot")] + ([("sampling", f"{shots:,} shots")] if shots else [])
    depths = _timed_depths(cases, [mode for mode, _ in modes])
    fig, axes = plt.subplots(len(modes), len(depths), figsize=(max(6.4, 4.2 * len(depths)), 3.4 * len(modes)),
                             squeeze=False)
    for i, (mode, title) in enumerate(modes):
        rep, first = _random_series(cases, "repeat", mode), _random_series(cases, "first", mode)
        for j, depth in enumerate(depths):
            ax = axes[i][j]
            for sim in SIM_ORDER:
                for series, style in ((rep, "-o"), (first, ":x")):
                    pts = sorted(series.get(depth, {}).get(sim, []))
                    # first calls where they differ: ours and quasarq; stim's sampler (its compile)
                    if pts and (style == "-o" or sim in ("ours", "quasarq") or (sim, mode) == ("stim", "sampling")):
                        ax.plot(*zip(*pts), style, color=COLORS[sim], ms=4,
                                label=NAMES[sim] + (" (first call)" if style == ":x" else ""))
            sizes = sorted({p[0] for sims in (rep.get(depth, {}), first.get(depth, {})) for pts in sims.values()
                            for p in pts})
            bandwidth = COPY_BYTES_PER_S.get(run.slug)
            if mode == "single" and bandwidth and sizes:
                ax.plot(sizes, [tableau_floor_s(n, depth, bandwidth) for n in sizes], "--", color="0.5", lw=1,
                        label=f"floor: the tableau read and written once a layer at {bandwidth / 1e12:.2f} TB/s")
            ax.set(xscale="log", yscale="log", title=f"{title}, depth {depth}", xlabel="qubits", ylabel="seconds")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
    fig.suptitle(f"{suite} suite: random Clifford circuits — {run.label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cactus(plt, run: Run, suite: str, path: Path) -> None:
    from matplotlib.ticker import MaxNLocator

    cases = run.suite(suite)
    modes = [("single", "single shot"), ("sampling", "sampling")]
    depths = _timed_depths(cases, [mode for mode, _ in modes])
    fig, axes = plt.subplots(len(modes), len(depths), figsize=(max(6.4, 4.2 * len(depths)), 3.2 * len(modes)),
                             squeeze=False)
    for i, (mode, title) in enumerate(modes):
        first = _random_series(cases, "first", mode)
        for j, depth in enumerate(depths):
            ax = axes[i][j]
            for sim in SIM_ORDER:
                times = sorted(t for _, t in first.get(depth, {}).get(sim, []))
                if times:
                    ax.plot(range(1, len(times) + 1), times, "-o", color=COLORS[sim], ms=4, label=NAMES[sim])
            ax.set(yscale="log", title=f"{title}, depth {depth}", xlabel="circuits completed",
                   ylabel="seconds (first call)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, which="both", alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
    fig.suptitle(f"{suite} suite cactus — {run.label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_qec(plt, run: Run, path: Path) -> None:
    cases = run.suite("qec")
    ds = sorted({c["params"]["d"] for c in cases})
    fig, axes = plt.subplots(1, len(ds), figsize=(4.2 * len(ds), 3.6), squeeze=False)
    for j, d in enumerate(ds):
        ax = axes[0][j]
        for rec in sorted((c for c in cases if c["params"]["d"] == d), key=lambda c: SIM_ORDER.index(c["sim"])):
            for mode, style in (("measurements", "-o"), ("detectors", "--s")):
                pts = [(s, repeat_s(get(rec, "shots", str(s), mode))) for s in rec["params"]["shots"]]
                pts = [(s, t) for s, t in pts if t is not None]
                if pts:
                    ax.plot(*zip(*pts), style, color=COLORS[rec["sim"]], ms=4,
                            label=f"{NAMES[rec['sim']]} {'records' if mode == 'measurements' else 'detectors'}")
            gpu = [(s, (get(rec, "shots", str(s), "measurements", "on_gpu") or {}).get("best_s"))
                   for s in rec["params"]["shots"]]
            gpu = [(s, t) for s, t in gpu if t is not None]
            if gpu:
                ax.plot(*zip(*gpu), ":^", color=COLORS[rec["sim"]], ms=4, label=f"{NAMES[rec['sim']]} flips, on GPU")
        ax.set(xscale="log", yscale="log", title=f"surface code d={d}, rounds={d}", xlabel="shots",
               ylabel="seconds (repeat call)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6)
    fig.suptitle(f"qec suite: sampling to host memory — {run.label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _stage_bars(suites: Dict[str, Run]):
    """[(panel title, [(label, {stage: seconds})])] for the random suites and qec."""
    panels = []
    tableau = []
    for suite in ("light", "heavy"):
        for rec in suites[suite].suite(suite) if suite in suites else []:
            st = (rec.get("results") or {}).get("stages") or {}
            if rec["sim"] != "ours" or st.get("compile_s") is None:
                continue
            bars = {"compile": st["compile_s"], "schedule": st["schedule_s"]}
            dev = st.get("device_stages_s") or {}
            if dev:
                bars.update({f"device: {k}": v for k, v in dev.items()})
                bars["host / launch"] = max(0.0, st["tableau_s"] - sum(dev.values()))
            else:
                bars["tableau run"] = st["tableau_s"]
            tableau.append((rec["workload"], bars))
    if tableau:
        panels.append(("single shot (random Clifford)", tableau))
    frames = []
    for rec in suites["qec"].suite("qec") if "qec" in suites else []:
        st = (rec.get("results") or {}).get("stages") or {}
        if rec["sim"] != "ours" or st.get("compile_s") is None or not st.get("frames"):
            continue
        shots = max(st["frames"], key=int)
        fr = st["frames"][shots]
        bars = {"compile": st["compile_s"], "schedule": st["schedule_s"], "reference": st["reference_s"]}
        if fr.get("frame_kernel_s") is not None:
            bars["frames (kernels)"] = fr["frame_kernel_s"]
            bars["copy to host + layout"] = max(0.0, fr["frames_s"] - fr["frame_kernel_s"])
        else:
            bars["frames + layout"] = fr["frames_s"]
        frames.append((f"{rec['workload']}, {fmt_shots(int(shots))} shots", bars))
    if frames:
        panels.append(("sampling (qec)", frames))
    return panels


def plot_stages(plt, suites: Dict[str, Run], label: str, path: Path) -> None:
    panels = _stage_bars(suites)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for j, (title, bars) in enumerate(panels):
        ax = axes[0][j]
        stages = list(dict.fromkeys(k for _, b in bars for k in b))
        bottom = [0.0] * len(bars)
        for k, stage in enumerate(stages):
            vals = [b.get(stage, 0.0) for _, b in bars]
            ax.bar(range(len(bars)), vals, bottom=bottom, color=cmap(k % 20), label=stage)
            bottom = [x + v for x, v in zip(bottom, vals)]
        ax.set_xticks(range(len(bars)), [name for name, _ in bars], rotation=45, ha="right", fontsize=7)
        ax.set(title=title, ylabel="seconds")
        ax.legend(fontsize=7)
    fig.suptitle(f"cirq-quasarq per stage — {label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def short(label: str) -> str:
    """A row label short enough for a plot's axis."""
    for long, brief in (("random Clifford ", "random "), ("Cirq `run()`, ", "Cirq run(), "),
                        ("Cirq `simulate()`, ", "Cirq simulate(), "), (", no annotations", ""),
                        ("detection events", "detectors")):
        label = label.replace(long, brief)
    return label


def plot_speedup(plt, suites: Dict[str, Run], label: str, path: Path) -> None:
    """One panel per peer; each bar grows from 1 to peer time / ours (right: ours faster)."""
    data = speedups(suites)
    peers = [p for p in PEERS if p in data]
    heights = [0.24 * len(data[p]) + 0.9 for p in peers]
    fig, axes = plt.subplots(len(peers), 1, figsize=(9, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for j, peer in enumerate(peers):
        ax = axes[j][0]
        names, ratios = zip(*data[peer])
        lo = [min(r, 1.0) for r in ratios]
        ax.barh(range(len(ratios)), [max(r, 1.0) - m for r, m in zip(ratios, lo)], left=lo,
                color=["tab:green" if r >= 1 else "tab:red" for r in ratios])
        for y, r in enumerate(ratios):
            ax.text(r, y, f" {r:.3g}x " if r >= 1 else f" 1/{1 / r:.3g}x ", va="center", fontsize=6,
                    ha="left" if r >= 1 else "right")
        ax.set_yticks(range(len(ratios)), [short(n) for n in names], fontsize=6)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", lw=0.8)
        span = max(max(ratios), 1 / min(ratios), 2.0) * 3
        ax.set(xscale="log", xlim=(1 / span, span), title=f"vs {NAMES[peer]}")
        ax.grid(True, axis="x", which="major", alpha=0.3)
    axes[-1][0].set_xlabel("peer time / ours (right of 1: ours faster)")
    fig.suptitle(f"speed-up of cirq-quasarq (repeat calls, same run) — {label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_energy(plt, suites: Dict[str, Run], label: str, path: Path) -> None:
    data = energies(suites)
    rows = list(dict.fromkeys(name for name, _, _ in data))
    sims = [s for s in SIM_ORDER if any(sim == s for _, sim, _ in data)]
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.25 * len(rows) + 1.2)))
    width = 0.8 / max(1, len(sims))
    for k, sim in enumerate(sims):
        vals = {name: e for name, s, e in data if s == sim}
        ys = [i + k * width for i, name in enumerate(rows) if name in vals]
        ax.barh(ys, [vals[name] for name in rows if name in vals], height=width, color=COLORS[sim], label=NAMES[sim])
    ax.set_yticks([i + 0.4 - width / 2 for i in range(len(rows))], [short(r) for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="joules per call (board power x time)", title=f"energy per call — {label}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(selection: Dict[str, Dict[str, Run]], figures_dir: Path) -> Dict[str, List[str]]:
    names = figure_names(selection)
    if not any(names.values()):
        return names
    plt = _plt()
    figures_dir.mkdir(parents=True, exist_ok=True)
    for slug, suites in selection.items():
        any_run = next(iter(suites.values()))
        for name in names[slug]:
            key = name[len(slug) + 1:-4]
            path = figures_dir / name
            if key.endswith("-runtime"):
                suite = key[:-len("-runtime")]
                plot_random_runtime(plt, suites[suite], suite, path)
            elif key.endswith("-cactus"):
                suite = key[:-len("-cactus")]
                plot_cactus(plt, suites[suite], suite, path)
            elif key == "qec-sampling":
                plot_qec(plt, suites["qec"], path)
            elif key == "stages":
                plot_stages(plt, suites, any_run.label, path)
            elif key == "speedup":
                plot_speedup(plt, suites, any_run.label, path)
            elif key == "energy":
                plot_energy(plt, suites, any_run.label, path)
    return names
