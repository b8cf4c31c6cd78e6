"""The benchmark harness: every case in its own process, one JSON line per case.

A *case* is one simulator on one workload (`Case`); the suites (`benchmarks/suites/`) list them.
`run_cases` runs each in a new Python process (`python -m benchmarks _case SPEC`) with a time limit,
so a peer that crashes (an illegal memory access) or hangs cannot poison the others, and appends
one line per case to `docs/benchmarks/results/<run id>.jsonl`, after a header line that carries
what the numbers depend on: git revision, device and driver, host, the version of every installed
package, the command, the profile and its time limits. A case's process reports as it goes (see
`measure.py`), so a case cut by its time limit keeps what it measured before.

Ordering and limits: cases run by tier (0 first), in suite order within a tier. `budget_s` bounds
the whole run: no case starts once less than MIN_START_S is left, a case's limit is cut to what
is left, and a case "only if time allows" starts only with its `min_budget_s` left. A simulator
that hits its time limit on a workload is not run on workloads of the same family (the light and
heavy suites share their random circuits) that are at least as large in every dimension
(`Case.size`), as the paper's cactus plots count it: not completed; those cases are recorded as
skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import circuit_cache
from .measure import PREFIX

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "docs" / "benchmarks" / "results"
MIN_START_S = 10.0
PEERS = ("stim", "stimcirq", "cirq", "quasarq", "custabilizer")
GPU_PEERS = ("quasarq", "custabilizer")

# timing policy of each profile (measure.Context.repeat)
TIMING = {
    "tiny": {"repeats": 2, "repeat_budget_s": 1.0, "max_repeat_s": 2.0},
    "quick": {"repeats": 3, "repeat_budget_s": 5.0, "max_repeat_s": 10.0},
    "gpu": {"repeats": 3, "repeat_budget_s": 3.0, "max_repeat_s": 8.0},
    "full": {"repeats": 5, "repeat_budget_s": 30.0, "max_repeat_s": 120.0},
}


@dataclasses.dataclass
class Case:
    """One simulator on one workload, run in its own process."""

    suite: str  # light | heavy | qec | cirq
    module: str  # benchmarks.suites.<module> holds RUNNERS[sim]
    workload: str  # a label with the sizes: "n=1000 depth=100"
    sim: str  # ours | stim | stimcirq | cirq | quasarq | custabilizer
    params: Dict[str, Any]
    timeout_s: float
    tier: int = 1
    size: Tuple[float, ...] = ()  # for the skip-after-timeout rule (compared componentwise)
    circuit: Optional[Dict[str, Any]] = None  # circuit_cache spec, loaded by ctx.circuit()
    gpu_tool: bool = False  # measure energy
    min_budget_s: float = 0.0  # "only if time allows": start only with this much budget left
    family: str = ""  # workloads comparable by size across suites (default: the suite)

    def label(self) -> str:
        return f"{self.suite} {self.workload} {self.sim}"


@dataclasses.dataclass
class Options:
    engine: str  # numpy | cuda
    profile: str  # tiny | quick | gpu | full
    peers: Sequence[str] = PEERS
    budget_s: Optional[float] = None
    results_dir: Path = RESULTS_DIR
    cache_dir: Path = dataclasses.field(default_factory=circuit_cache.default_dir)
    jobs: int = 1
    stages: bool = True
    command: str = ""

    def child_opts(self) -> Dict[str, Any]:
        return {"engine": self.engine, "profile": self.profile, "stages": self.stages, **TIMING[self.profile]}


# ----------------------------------------------------------------------------- environment
def _run(cmd: List[str], timeout: float = 20) -> Optional[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def code_digest(root: Path = ROOT) -> str:
    """SHA-256 over the package's and the kernels' sources (relative paths and bytes, in path order):
    names the code a run ran even where the copy it ran in carries git metadata of other files."""
    digest = hashlib.sha256()
    files = sorted(p for folder in ("cirq_quasarq", "cuda_src") for p in (root / folder).rglob("*")
                   if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".h"))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_info() -> Dict[str, Any]:
    """HEAD's revision, whether tracked files differ from it (read-only: no index refresh), and the
    digest of the code itself (`code_digest`)."""
    rev = _run(["git", "rev-parse", "HEAD"])
    if rev is None:
        return {"rev": None, "note": "not a git checkout (or git missing)", "code_sha256": code_digest()}
    status = _run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]) or ""
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    return {"rev": rev, "dirty": bool(changed), "changed_files": len(changed), "code_sha256": code_digest()}


def gpu_info() -> Optional[Dict[str, Any]]:
    """The first GPU's name, driver, memory and CUDA version (nvidia-smi, else PyCUDA), or None."""
    if shutil.which("nvidia-smi"):
        line = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,pci.bus_id",
                     "--format=csv,noheader"])
        if line:
            name, driver, memory, power, bus = (f.strip() for f in line.splitlines()[0].split(","))
            header = _run(["nvidia-smi"]) or ""
            cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
            return {"name": name, "driver": driver, "memory": memory, "power_limit": power, "pci_bus_id": bus,
                    "cuda": cuda.group(1) if cuda else None, "source": "nvidia-smi"}
    try:
        import pycuda.driver as cuda

        cuda.init()
        dev = cuda.Device(0)
        return {"name": dev.name(), "driver": None, "memory": f"{dev.total_memory() // 2**20} MiB",
                "cuda_driver_api": cuda.get_driver_version(), "source": "pycuda"}
    except Exception:  # noqa: BLE001 - no GPU
        return None


def host_info() -> Dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        memory = round(kb / 2**20, 1)
    except (OSError, AttributeError):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "memory_gib": memory, "os": platform.platform(),
            "python": platform.python_version()}


def package_versions() -> Dict[str, str]:
    """Every installed distribution on this interpreter's path: {name: version}."""
    from importlib import metadata

    out = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            out.setdefault(name, dist.version)
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def device_label(engine: str, host: Dict[str, Any], gpu: Optional[Dict[str, Any]]) -> Tuple[str, str]:
    """(label, slug): "cpu, 2 cores" / the GPU's name, and a file-name form of it."""
    if engine == "cuda" and gpu:
        label = gpu["name"]
    else:
        label = f"cpu, {host['cores']} cores"
    return label, re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def cuda_usable() -> bool:
    try:
        from cirq_quasarq.engines import cuda_available

        return cuda_available()
    except Exception:  # noqa: BLE001
        return False


def peer_missing(sim: str) -> Optional[str]:
    """Why a peer cannot run here (its package is not installed), or None."""
    needs = {"stim": ["stim"], "stimcirq": ["stimcirq"], "cirq": ["cirq"], "quasarq": ["quasarq"],
             "custabilizer": ["cuquantum", "cupy"]}.get(sim, [])
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def metadata(opts: Options) -> Dict[str, Any]:
    host = host_info()
    gpu = gpu_info()
    label, slug = device_label(opts.engine, host, gpu)
    return {"git": git_info(), "device": {"label": label, "slug": slug, "engine": opts.engine, "gpu": gpu},
            "host": host, "packages": package_versions()}


# ----------------------------------------------------------------------------- one case
def _merge(into: Dict[str, Any], fragment: Dict[str, Any]) -> None:
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def warm_up(engine: str, timeout: float) -> Dict[str, Any]:
    """Runs `python -m benchmarks _warmup ENGINE` (compiles the CUDA kernels once, into the disk
    caches every case's process then loads, so no case's limit pays for it)."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks", "_warmup", engine], cwd=ROOT, env=_child_env(),
                              capture_output=True, text=True, timeout=timeout)
        status = "ok" if proc.returncode == 0 else "error"
        reason = None if status == "ok" else (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    except subprocess.TimeoutExpired:
        status, reason = "timeout", f"time limit {timeout:.0f} s reached"
    return {"kind": "setup", "what": f"warm-up of the {engine} engine (kernel compile)", "status": status,
            "reason": reason, "wall_s": round(time.perf_counter() - t0, 1)}


def run_child(case: Case, opts: Options, timeout: float, circuit_path: Optional[Path]) -> Dict[str, Any]:
    """Runs one case in a new process; returns {status, reason, results, wall_s}."""
    spec = {"case": {**dataclasses.asdict(case), "circuit_path": str(circuit_path) if circuit_path else None},
            "opts": opts.child_opts(), "limit_s": timeout}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", "_case", json.dumps(spec)], cwd=ROOT, env=_child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    wall = time.perf_counter() - t0
    results: Dict[str, Any] = {}
    for line in (out or "").splitlines():
        if line.startswith(PREFIX):
            try:
                _merge(results, json.loads(line[len(PREFIX):]))
            except json.JSONDecodeError:
                pass
    tail = [ln for ln in (err or "").strip().splitlines() if ln.strip()][-3:]
    if timed_out:
        status, reason = "timeout", f"time limit {timeout:.0f} s reached"
    elif "error" in results:
        status, reason = "error", results["error"]
    elif proc.returncode != 0:
        how = _signal_name(proc.returncode) if proc.returncode < 0 else f"exit status {proc.returncode}"
        status, reason = "crashed", f"process died ({how}): " + (" | ".join(tail)[-400:] or "no output")
    else:
        status, reason = "ok", None
    return {"status": status, "reason": reason, "results": results, "wall_s": round(wall, 2)}


# ----------------------------------------------------------------------------- the run
def _summary(record: Dict[str, Any]) -> str:
    """A few words for the progress line: the case's headline seconds, where it has one."""
    res = record.get("results") or {}
    for mode in ("single", "sampling", "run", "simulate"):
        part = res.get(mode)
        if isinstance(part, dict):
            rep = part.get("repeat") or {}
            if "best_s" in rep:
                return f"{mode} {rep['best_s']:.4g} s (first {part.get('first_s', float('nan')):.4g} s)"
            if "first_s" in part:
                return f"{mode} first {part['first_s']:.4g} s"
    shots = res.get("shots")
    if isinstance(shots, dict) and shots:
        last = shots[max(shots, key=int)]
        rep = (last.get("measurements") or {}).get("repeat") or {}
        if "best_s" in rep:
            return f"{max(shots, key=int)} shots {rep['best_s']:.4g} s"
    return ""


class Progress:
    def __init__(self, total: int, t_start: float, budget: Optional[float]):
        self.total, self.t_start, self.budget, self.done = total, t_start, budget, 0

    def line(self, record: Dict[str, Any]) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.t_start
        left = f" left {self.budget - elapsed:4.0f}s" if self.budget else ""
        reason = f" ({record['reason'][:90]})" if record.get("reason") and record["status"] != "ok" else ""
        print(f"[{self.done:>3}/{self.total}] {elapsed:5.0f}s{left}  {record['suite']:<5} {record['workload']:<28} "
              f"{record['sim']:<12} {record['status']:<8} {record.get('wall_s', 0):6.1f}s  {_summary(record)}{reason}",
              file=sys.stderr, flush=True)


def run_cases(cases: List[Case], opts: Options, suites: Sequence[str]) -> Path:
    """Runs `cases` and writes the run's JSON lines; returns the file."""
    meta = metadata(opts)
    started = _dt.datetime.now(_dt.timezone.utc)
    run_id = f"{started:%Y%m%dT%H%M%SZ}-{meta['device']['slug']}-{opts.profile}"
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    path = opts.results_dir / f"{run_id}.jsonl"
    header = {"kind": "run", "run_id": run_id, "started_at": started.isoformat(timespec="seconds"),
              "command": opts.command, "suites": list(suites), "profile": opts.profile, "engine": opts.engine,
              "peers": list(opts.peers), "budget_s": opts.budget_s, "jobs": opts.jobs,
              "timing": TIMING[opts.profile], **meta}
    common = {"run_id": run_id, "git_rev": meta["git"].get("rev"), "device": meta["device"]["label"]}
    t_start = time.perf_counter()
    order = [c for _, c in sorted(enumerate(cases), key=lambda ic: (ic[1].tier, ic[0]))]
    progress = Progress(len(order), t_start, opts.budget_s)
    print(f"benchmarks: {len(order)} cases, profile {opts.profile}, engine {opts.engine}, device "
          f"{meta['device']['label']}, budget {opts.budget_s or 'none'} s -> {path}", file=sys.stderr, flush=True)
    with open(path, "w") as out:
        out.write(json.dumps(header) + "\n")
        out.flush()
        if opts.engine == "cuda":
            setup = warm_up(opts.engine, 600 if opts.budget_s is None else max(30.0, opts.budget_s / 2))
            out.write(json.dumps({**setup, "run_id": run_id}) + "\n")
            out.flush()
            print(f"warm-up: {setup['status']} in {setup['wall_s']} s" + (f" ({setup['reason']})" if setup["reason"]
                  else ""), file=sys.stderr, flush=True)
        state = _RunState(opts, t_start)

        def finish(index: int, case: Case, outcome: Dict[str, Any]) -> None:
            record = {"kind": "case", "index": index, "suite": case.suite, "workload": case.workload,
                      "sim": case.sim, "engine": opts.engine if case.sim == "ours" else None,
                      "params": case.params, "circuit": case.circuit, "timeout_s": outcome.pop("timeout_s", None),
                      "tier": case.tier, **outcome, **common}
            out.write(json.dumps(record) + "\n")
            out.flush()
            progress.line(record)
            if record["status"] == "timeout" and not record.get("budget_cut"):
                state.timed_out.append(case)

        if opts.jobs <= 1:
            for index, case in enumerate(order):
                finish(index, case, state.execute(case))
        else:  # smoke runs only: timings of concurrent cases are not comparable, no skip rule
            with ThreadPoolExecutor(opts.jobs) as pool:
                futures = [(i, c, pool.submit(state.execute, c)) for i, c in enumerate(order)]
                for index, case, fut in futures:
                    finish(index, case, fut.result())
        out.write(json.dumps({"kind": "run_end", "run_id": run_id, "wall_s": round(time.perf_counter() - t_start, 1),
                              "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
                  + "\n")
    print(f"benchmarks: done in {time.perf_counter() - t_start:.0f} s -> {path}", file=sys.stderr, flush=True)
    return path


class _RunState:
    def __init__(self, opts: Options, t_start: float):
        self.opts, self.t_start = opts, t_start
        self.timed_out: List[Case] = []

    def skip_reason(self, case: Case, remaining: Optional[float]) -> Optional[Tuple[str, str]]:
        if case.sim in PEERS:
            if case.sim not in self.opts.peers:
                return "skipped", "peer not selected (--peers)"
            missing = peer_missing(case.sim)
            if missing:
                return "unavailable", missing
        for bad in self.timed_out:
            if (bad.family or bad.suite, bad.sim) == (case.family or case.suite, case.sim) and \
                    len(bad.size) == len(case.size) and all(c >= b for c, b in zip(case.size, bad.size)):
                return "skipped", f"over its {bad.timeout_s:.0f} s limit on the smaller {bad.suite} {bad.workload}"
        if remaining is not None:
            if remaining < MIN_START_S:
                return "skipped", "run budget spent"
            if remaining < case.min_budget_s:
                return "skipped", f"run budget: needs {case.min_budget_s:.0f} s left, {remaining:.0f} s left"
        return None

    def execute(self, case: Case) -> Dict[str, Any]:
        remaining = None
        if self.opts.budget_s is not None:
            remaining = self.opts.budget_s - (time.perf_counter() - self.t_start)
        skip = self.skip_reason(case, remaining)
        if skip:
            return {"status": skip[0], "reason": skip[1], "results": {}, "wall_s": 0.0, "timeout_s": case.timeout_s}
        path = None
        if case.circuit is not None:
            try:
                path = circuit_cache.ensure(case.circuit, self.opts.cache_dir)
            except Exception as exc:  # noqa: BLE001
                return {"status": "error", "reason": f"building the circuit: {type(exc).__name__}: {exc}",
                        "results": {}, "wall_s": 0.0, "timeout_s": case.timeout_s}
            if self.opts.budget_s is not None:  # the build counts against the run's budget
                remaining = self.opts.budget_s - (time.perf_counter() - self.t_start)
                if remaining < MIN_START_S:
                    return {"status": "skipped", "reason": "run budget spent", "results": {}, "wall_s": 0.0,
                            "timeout_s": case.timeout_s}
        timeout = case.timeout_s if remaining is None else min(case.timeout_s, remaining)
        outcome = run_child(case, self.opts, timeout, path)
        outcome["timeout_s"] = round(timeout, 1)
        if timeout < case.timeout_s:
            outcome["budget_cut"] = True
            if outcome["status"] == "timeout":
                outcome["reason"] = f"run budget ran out after {timeout:.0f} s (case limit {case.timeout_s:.0f} s)"
        return outcome
