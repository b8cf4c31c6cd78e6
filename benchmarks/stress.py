"""Stress run of the GPU engine at scale (issue 13): sizes run, memory before and after, in a JSON
lines log. Fits in about 8 minutes of wall time on an H100 80GB (`--budget-s`, default 450 s).

    python -m benchmarks.stress --out DIR                 # the GPU run (device="gpu")
    python -m benchmarks.stress --out DIR --quick         # tiny sizes on the NumPy engine (a smoke test)
    python -m benchmarks.stress --out DIR --only largest_n --budget-s 1200   # one stage, more time

Stages (in this order; each logs one or more records to DIR/stress.jsonl, a failure is logged and
the next stage runs):

- tableau_100k: single-shot tableau mode on the paper's random Clifford circuit
  (benchmarks/random_clifford.py's `layers`, built here with NumPy: the same circuit, op for op),
  n = 100,000, depth 100, max(1, n // 1400) Z measurements per layer; build, schedule and run
  times, per-stage device times (profile), records back on the host.
- surface_d51: `QuasarqSimulator.sample_detectors` on Stim's rotated surface-code memory experiment
  (benchmarks/circuits.py `surface_code_stim(d=51, rounds=51, p=1e-3)`), 10M shots asked in calls
  of `--chunk` shots with bit_packed=True and append_observables=True: the host holds one call's
  packed bytes at a time and keeps only counts (detection events, observable flips).
- runs_1000: 1000 consecutive runs, each by a new QuasarqSimulator on a small circuit (noisy GHZ
  `run`s of new circuits, `simulate` of random Clifford circuits, `sample_detectors` of a d=3
  surface code); device free memory (pycuda mem_get_info), process RSS and the engine's held
  device / page-locked bytes after the first 10 runs, every 100 runs and at the end.
- largest_n: the largest n whose tableau fits in device memory at depth 100, computed from the
  engine's own estimate, not by trial: the largest n with
  `tableau._Workspace.bytes_needed(n, records, scratch, collapses) <= memory_fraction * (free +
  the workspace the engine holds - the program's tables)`, tables = the bytes per qubit of the
  uploaded depth-100 program (measured on the 100k program: linear in n at a fixed depth), solved
  by bisection (the need is monotone in n); `scratch` (a second tableau for the transposed path) is
  needed only where a row does not fit shared memory for the window-batched path. The run uses
  depth 100 when the time left allows it (predicted from tableau_100k's per-stage times: gates
  scale as n^2, collapse windows as n^3), else the deepest depth that fits, which is logged.

Every record has the stage, the wall time, the device and the memory snapshot (device free / total,
RSS, peak RSS, the engine's held bytes).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.core.memory import host_headroom
from cirq_quasarq.schedule import schedule

from .random_clifford import random_clifford_program

STAGES = ("tableau_100k", "surface_d51", "runs_1000", "largest_n")


# ------------------------------------------------------------------------------ circuits
def _ghz(n: int, p: float, seed: int):
    import cirq

    r = np.random.default_rng(seed)
    qs = cirq.LineQubit.range(n)
    ops = [cirq.H(qs[0])] + [cirq.CNOT(qs[i], qs[i + 1]) for i in range(n - 1)]
    ops += [cirq.depolarize(p).on_each(*qs), cirq.X(qs[int(r.integers(n))])]
    return cirq.Circuit(ops + [cirq.measure(*qs, key="m")])


def _random_clifford_cirq(n: int, depth: int, seed: int):
    from .circuits import random_clifford_circuit

    return random_clifford_circuit(n, depth, seed)


# ------------------------------------------------------------------------------ measurements
def _proc_status(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def memory(engine) -> dict:
    gc.collect()
    out = {"rss_bytes": _proc_status("VmRSS"), "rss_peak_bytes": _proc_status("VmHWM"),
           "host_available_bytes": host_headroom().bytes}
    if engine.name == "cuda":
        free, total = engine.cuda.mem_get_info()
        out.update(device_free_bytes=int(free), device_total_bytes=int(total))
        out.update({f"engine_held_{k}": int(v) for k, v in engine.held_bytes().items()})
    return out


def _popcount(a: np.ndarray) -> int:
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    cut = len(flat) - len(flat) % 8
    return int(np.bitwise_count(flat[:cut].view(np.uint64)).sum()) + int(np.bitwise_count(flat[cut:]).sum())


class Log:
    """JSON lines in DIR/stress.jsonl, and one short line per record on stdout."""

    def __init__(self, out: Path, context: dict):
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "stress.jsonl"
        self.start = time.perf_counter()
        self.context = context

    def write(self, stage: str, **fields) -> dict:
        record = {"stage": stage, "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "elapsed_s": round(time.perf_counter() - self.start, 3), **self.context, **fields}
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=_jsonable) + "\n")
        brief = {k: v for k, v in fields.items() if not isinstance(v, (dict, list)) and k != "traceback"}
        print(f"[{record['elapsed_s']:8.1f} s] {stage}: {json.dumps(brief, default=_jsonable)}", flush=True)
        return record


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return repr(v)


# ------------------------------------------------------------------------------ stages
def _tableau_need(engine, n: int, depth: int, tables_per_qubit: float) -> int:
    """Device bytes of a tableau run of the random Clifford circuit on n qubits (the engine's own
    estimate of its workspace, plus the uploaded program's tables)."""
    k = max(1, n // 1400)
    if engine.name != "cuda":
        return 3 * 2 * (2 * n) * max(1, (n + 63) // 64) * 8  # NumpyEngine.run_tableau's estimate
    from cirq_quasarq.engines.cuda import measure
    from cirq_quasarq.engines.cuda.tableau import _Workspace

    W = max(1, (n + 63) // 64)
    block = engine.block_windows and W <= measure.BLOCK_MAX_W
    rows = engine.batch_windows and k <= max(64, n // 64) and measure.rows_per_block(engine.smem_optin, W) >= 1
    scratch = not (block or rows)
    return _Workspace.bytes_needed(n, depth * k, scratch, k) + int(tables_per_qubit * n)


def _tableau_available(engine) -> int:
    """Bytes a new tableau workspace may take: what the engine's check allows once it has freed
    the workspace it holds."""
    if engine.name != "cuda":
        return engine._budget()[0]
    held = engine._tableau.ws
    ws = 0 if held is None else held.bytes_needed(held.n, held.num_records, held.scratch, held.max_collapses)
    free, _ = engine.cuda.mem_get_info()
    return int((free + ws) * engine.memory_fraction)


def _tables_per_qubit(engine, depth: int, n: int = 10_000) -> float:
    if engine.name != "cuda":
        return 0.0
    program = random_clifford_program(n, depth, seed=1)
    return engine.device_program(program, schedule(program)).nbytes / n


def stage_tableau(engine, log: Log, args, state: dict) -> None:
    n, depth = (300, 10) if args.quick else (args.tableau_n, 100)
    warm = random_clifford_program(200, 3)
    engine.run_tableau(warm, schedule(warm), rng.make_key(0))  # compiles / loads the kernels
    before = memory(engine)
    t0 = time.perf_counter()
    program = random_clifford_program(n, depth, seed=0)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sched = schedule(program)
    schedule_s = time.perf_counter() - t0
    if engine.name == "cuda":
        engine.profile = True
    t0 = time.perf_counter()
    run = engine.run_tableau(program, sched, rng.make_key(1))
    run_s = time.perf_counter() - t0
    stages = dict(getattr(engine, "stage_seconds", {}))
    if engine.name == "cuda":
        engine.profile = False
        state["tables_per_qubit"] = engine.device_program(program, sched).nbytes / n
    ones = int(run.records.sum())
    del run  # the final tableau stays on the device, never downloaded
    gates = int(np.sum(opcodes.KIND[program.instructions[:, 0]] == opcodes.Kind.UNITARY))
    state["tableau_fit"] = (n, depth, stages, run_s, build_s + schedule_s)
    log.write("tableau_100k", status="ok", n=n, depth=depth, gates=gates, measurements=program.num_records,
              ones_measured=ones, build_s=round(build_s, 3), schedule_s=round(schedule_s, 3), run_s=round(run_s, 4),
              device_stage_s={k: round(v, 4) for k, v in stages.items()},
              estimated_device_bytes=_tableau_need(engine, n, depth, state.get("tables_per_qubit", 0.0)),
              memory_before=before, memory_after=memory(engine))


def stage_surface(engine, log: Log, args, state: dict) -> None:
    from cirq_quasarq import QuasarqSimulator

    from .circuits import surface_code_stim

    d, shots = (3, 20_000) if args.quick else (args.d, args.shots)
    rounds = args.rounds or d
    deadline = time.perf_counter() + args.surface_budget_s
    circuit = surface_code_stim(d, rounds, args.p)
    sim = QuasarqSimulator(seed=2024, device=state["device"])
    t0 = time.perf_counter()
    program = sim.compile(circuit)
    compile_s = time.perf_counter() - t0
    dets, obs = len(program.detectors), len(program.observables)
    row_bytes = (dets + obs + 7) // 8
    chunk = args.chunk or max(64, (int(args.host_bytes // row_bytes) // 64) * 64)
    if args.quick:
        chunk = 4096
    before = memory(engine)
    det_events = 0
    obs_flips = np.zeros(obs, dtype=np.int64)
    done = calls = 0
    kernel_s = 0.0
    t0 = time.perf_counter()
    while done < shots and time.perf_counter() < deadline:
        c = min(chunk, shots - done)
        packed = sim.sample_detectors(program, c, append_observables=True, bit_packed=True)
        flips = [int(np.count_nonzero(packed[:, col // 8] & np.uint8(1 << (col % 8))))
                 for col in range(dets, dets + obs)]
        obs_flips += flips
        det_events += _popcount(packed) - sum(flips)  # the bits past the last column are 0
        kernel_s += getattr(engine, "last_frame_kernel_s", 0.0)
        del packed  # the page-locked buffer is reused by the next call only when nobody holds it
        done += c
        calls += 1
        if calls == 1:
            first_mem = memory(engine)
    wall = time.perf_counter() - t0
    log.write("surface_d51", status="ok" if done >= shots else "stopped at the stage's time budget", d=d,
              rounds=rounds, p=args.p, qubits=program.num_qubits, records=program.num_records, detectors=dets,
              observables=obs, shots_asked=shots, shots_done=done, calls=calls, shots_per_call=chunk,
              compile_s=round(compile_s, 3), sample_wall_s=round(wall, 3), frame_kernel_s=round(kernel_s, 3),
              shots_per_s=round(done / wall, 1) if wall else None, detection_events=det_events,
              detection_fraction=det_events / max(1, done * dets), observable_flips=obs_flips.tolist(),
              memory_before=before, memory_after_first_call=first_mem if calls else None,
              memory_after=memory(engine))


def stage_runs(engine, log: Log, args, state: dict) -> None:
    import stim

    from cirq_quasarq import QuasarqSimulator

    count = 50 if args.quick else args.runs
    deadline = time.perf_counter() + args.runs_budget_s
    surface = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                     after_clifford_depolarization=0.01, before_measure_flip_probability=0.01)
    snapshots = [dict(after_runs=0, **memory(engine))]
    t0 = time.perf_counter()
    done = 0
    for i in range(count):
        if time.perf_counter() > deadline:
            break
        sim = QuasarqSimulator(seed=i, device=state["device"])
        kind = i % 3
        if kind == 0:
            result = sim.run(_ghz(8 + i % 17, 0.01, i), repetitions=1000)
            assert result.records["m"].shape == (1000, 1, 8 + i % 17)
        elif kind == 1:
            sim.simulate(_random_clifford_cirq(6 + i % 11, 12, i))
        else:
            sim.sample_detectors(surface, 2000, bit_packed=True)
        del sim
        done = i + 1
        if done in (10, count) or done % 100 == 0:
            snapshots.append(dict(after_runs=done, **memory(engine)))
    wall = time.perf_counter() - t0
    base = next((s for s in snapshots if s["after_runs"] == 10), snapshots[0])
    last = snapshots[-1]
    deltas = {k: last[k] - base[k] for k in last if k != "after_runs" and isinstance(last.get(k), int)
              and isinstance(base.get(k), int)}
    log.write("runs_1000", status="ok" if done == count else "stopped at the stage's time budget", runs_asked=count,
              runs_done=done, wall_s=round(wall, 2), per_run_ms=round(1000 * wall / max(1, done), 2),
              change_since_run_10=deltas, snapshots=snapshots)


def stage_largest(engine, log: Log, args, state: dict, deadline: float) -> None:
    depth_asked = 10 if args.quick else 100
    tables = state.get("tables_per_qubit")
    if tables is None:
        tables = state["tables_per_qubit"] = _tables_per_qubit(engine, depth_asked)
    gc.collect()
    avail = _tableau_available(engine)
    if args.quick:
        avail = min(avail, 64 << 20)  # a tiny "device" for the smoke test
    host = host_headroom().bytes
    lo, hi = 64, 1 << 22
    while lo < hi:  # the largest n whose estimate fits
        mid = (lo + hi + 1) // 2
        ok = _tableau_need(engine, mid, depth_asked, tables) <= avail and 100 * depth_asked * mid <= host
        lo, hi = (mid, hi) if ok else (lo, mid - 1)
    n = lo
    need = _tableau_need(engine, n, depth_asked, tables)
    # Time: scale the 100k run's stages (gates ~ n^2 per layer, everything else ~ n^3 per layer).
    depth = depth_asked
    predicted = None
    fit = state.get("tableau_fit")
    if fit is not None:
        n0, d0, stages, run0, host0 = fit
        gates0 = stages.get("gates", 0.0) if stages else 0.0
        rest0 = max(0.0, run0 - gates0)
        per_layer = (gates0 * (n / n0) ** 2 + rest0 * (n / n0) ** 3) / d0
        host_per_layer = host0 * (n / n0) / d0
        left = deadline - time.perf_counter() - 15.0
        depth = max(0, min(depth_asked, int(left / max(per_layer + host_per_layer, 1e-9))))
        predicted = round(depth * (per_layer + host_per_layer), 1)
    record = dict(n_max_depth100=n, estimated_device_bytes=need, available_device_bytes=avail,
                  tables_bytes_per_qubit=round(tables, 1), depth_asked=depth_asked, depth=depth,
                  predicted_s=predicted, how=("largest n with tableau._Workspace.bytes_needed(n, records, scratch, "
                                              "collapses) + tables(n) <= memory_fraction * (free + held "
                                              "workspace), by bisection"))
    if depth < 1:
        log.write("largest_n", status="skipped: no time left in the budget (run it alone: --only largest_n "
                                      "--budget-s 1200)", **record)
        return
    before = memory(engine)
    for attempt in range(2):
        t0 = time.perf_counter()
        program = random_clifford_program(n, depth, seed=3)
        sched = schedule(program)
        measurements = program.num_records
        host_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            run = engine.run_tableau(program, sched, rng.make_key(3))
            run_s = time.perf_counter() - t0
        except MemoryError as exc:  # OutOfMemoryError (the estimate was wrong): logged, then 3% less
            log.write("largest_n", status="out of memory at the estimated n", n=n, error=str(exc)[:2000], **record)
            del program, sched
            n = int(n * 0.97) // 64 * 64
            record["n_retry"] = n
            continue
        ones = int(run.records.sum())
        del run
        log.write("largest_n", status="ok" if depth == depth_asked else f"ok at depth {depth} (time budget)", n=n,
                  measurements=measurements, ones_measured=ones, build_and_schedule_s=round(host_s, 2),
                  run_s=round(run_s, 3), memory_before=before, memory_after=memory(engine), **record)
        return


# ------------------------------------------------------------------------------ main
def _context(engine, args) -> dict:
    info = {"engine": engine.name, "quick": bool(args.quick), "python": platform.python_version()}
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["commit"] = None
    if engine.name == "cuda":
        info["device"] = engine.device.name()
        info["driver"] = engine.cuda.get_driver_version()
    else:
        info["device"] = platform.processor() or platform.machine()
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for stress.jsonl")
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the NumPy engine (smoke test, no GPU)")
    ap.add_argument("--only", nargs="+", choices=STAGES, help="run these stages only")
    ap.add_argument("--budget-s", type=float, default=450.0, help="wall-time budget of the whole run (s)")
    ap.add_argument("--tableau-n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=51)
    ap.add_argument("--rounds", type=int, default=0, help="surface-code rounds (0: d)")
    ap.add_argument("--p", type=float, default=1e-3)
    ap.add_argument("--shots", type=int, default=10_000_000)
    ap.add_argument("--chunk", type=int, default=0, help="shots per sample_detectors call (0: from --host-bytes)")
    ap.add_argument("--host-bytes", type=float, default=2e9, help="packed bytes the host holds per call")
    ap.add_argument("--surface-budget-s", type=float, default=170.0)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--runs-budget-s", type=float, default=90.0)
    args = ap.parse_args(argv)
    deadline = time.perf_counter() + args.budget_s
    warnings.simplefilter("once")

    from cirq_quasarq.engines import select_engine

    device = "cpu" if args.quick else "gpu"
    engine = select_engine(device)
    log = Log(args.out, _context(engine, args))
    log.write("start", argv=sys.argv[1:] if argv is None else list(argv), host_cpus=os.cpu_count(),
              memory=memory(engine))
    state = {"device": device}
    stages = args.only or STAGES
    for name in STAGES:
        if name not in stages:
            continue
        if time.perf_counter() > deadline:
            log.write(name, status="skipped: the run's time budget is spent")
            continue
        try:
            if name == "tableau_100k":
                stage_tableau(engine, log, args, state)
            elif name == "surface_d51":
                stage_surface(engine, log, args, state)
            elif name == "runs_1000":
                stage_runs(engine, log, args, state)
            else:
                stage_largest(engine, log, args, state, deadline)
        except Exception as exc:  # noqa: BLE001 - logged; a dead GPU context ends the run
            log.write(name, status="error", error=f"{type(exc).__name__}: {exc}"[:4000],
                      traceback=traceback.format_exc()[-8000:])
            if getattr(exc, "context_ok", True) is False:
                log.write("end", status="the CUDA context died; later stages not run")
                return 1
    log.write("end", status="done", memory=memory(engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
