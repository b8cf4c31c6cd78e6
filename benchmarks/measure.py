"""What runs inside a case's own process: timing, energy, and the line protocol to the parent.

A case's runner (one function per simulator in `benchmarks/suites/`) gets a `Context` and reports
results as it goes with `ctx.emit(...)`: each call prints one `@@bench {json}` line that the parent
deep-merges into the case's `results`, so a case that times out or crashes keeps what it measured
before. Timing conventions (docs/benchmarks.md):

- `first_s`: the first call on this circuit in this process, after the tool was warmed up on a tiny
  other circuit (CUDA context, kernels): what a user pays the first time they run a circuit.
- `repeat`: further calls on the same prepared object (same circuit object; for ours a new
  simulator per call unless said otherwise), best and median of up to `repeats` calls, stopped
  early once `repeat_budget_s` is spent; after a first call over `max_repeat_s`, one repeat if the
  first call took under a quarter of the case's time limit (two if the repeat is known to reuse the
  first call's slow part: ours sampling a compiled program again, whose second call may still make
  the frame plan), else none.
  For tools without any first-call effect (stim) the first call counts as one of the repeats.
- energy (GPU tools only): the board's power sampled through NVML every 20 ms while the repeats
  run; `energy_j` = mean power x time of one call (runtime x average power, as the QuaSARQ paper
  does, idle power included); `energy_counter_j`: the board's energy counter over the repeats, per
  call, where the board has one (its updates are coarse for calls of milliseconds).
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

PREFIX = "@@bench "

# top-level modules whose versions a case reports when it imported them
TRACKED_MODULES = ("numpy", "cirq", "stim", "stimcirq", "cirq_quasarq", "pycuda", "cupy", "quasarq", "cuquantum",
                   "nvmath", "pynvml")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


# ----------------------------------------------------------------------------- energy
class _NvmlCtypes:
    """The four NVML calls the meter needs, straight from libnvidia-ml (shipped with the driver),
    for machines without the nvidia-ml-py package."""

    def __init__(self, index: int):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self.handle)) != 0:
            raise OSError(f"no NVML device {index}")

    def power_w(self) -> float:
        mw = ctypes.c_uint()
        if self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw)) != 0:
            raise OSError("nvmlDeviceGetPowerUsage failed")
        return mw.value / 1e3

    def energy_j(self) -> Optional[float]:
        mj = ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(mj)) != 0:
            return None
        return mj.value / 1e3


class _NvmlPy:
    """The same through the nvidia-ml-py package (`import pynvml`)."""

    def __init__(self, index: int):
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def power_w(self) -> float:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3

    def energy_j(self) -> Optional[float]:
        try:
            return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3
        except Exception:  # noqa: BLE001 - boards without the counter
            return None


def integrate(samples: List[tuple], t0: float, t1: float) -> Optional[float]:
    """Joules between t0 and t1 from (time, watts) samples: the mean sampled power times the
    duration (the samples are NVML's own running averages, so their mean is the estimate)."""
    inside = [w for t, w in samples if t0 <= t <= t1]
    if not inside:  # a region shorter than one sampling period: the nearest sample
        if not samples:
            return None
        inside = [min(samples, key=lambda s: abs(s[0] - (t0 + t1) / 2))[1]]
    return statistics.fmean(inside) * (t1 - t0)


class EnergyMeter:
    """Samples the GPU's power in a background thread while `measuring`. `EnergyMeter.open()` gives
    None (and `EnergyMeter.why` says why) where there is no NVML."""

    why = ""
    PERIOD_S = 0.02

    def __init__(self, nvml, source: str):
        self.nvml = nvml
        self.source = source
        self.samples: List[tuple] = []
        self.counter: List[Optional[float]] = [None, None]
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @classmethod
    def open(cls) -> Optional["EnergyMeter"]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        index = int(visible) if visible.isdigit() else 0
        errors = []
        for make, source in ((_NvmlPy, "nvidia-ml-py"), (_NvmlCtypes, "libnvidia-ml")):
            try:
                nvml = make(index)
                nvml.power_w()
                return cls(nvml, source)
            except Exception as exc:  # noqa: BLE001 - record why and try the next
                errors.append(f"{source}: {type(exc).__name__}: {exc}")
        cls.why = "no NVML (" + "; ".join(errors) + ")"
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter(), self.nvml.power_w()))
            except Exception:  # noqa: BLE001 - a failed read is a missing sample
                pass
            self._stop.wait(self.PERIOD_S)

    def start(self) -> None:
        self.samples = []
        self.counter = [self._counter(), None]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.counter[1] = self._counter()

    def _counter(self) -> Optional[float]:
        try:
            return self.nvml.energy_j()
        except Exception:  # noqa: BLE001 - boards without the counter
            return None

    def counter_j(self) -> Optional[float]:
        """Joules by the board's energy counter between start and stop (None without one)."""
        c0, c1 = self.counter
        return c1 - c0 if c0 is not None and c1 is not None and c1 > c0 else None


# ----------------------------------------------------------------------------- the context
class Context:
    """Everything a runner needs: its case (`params`), the options of the run, the circuit, timers."""

    def __init__(self, spec: Dict[str, Any]):
        self.case = spec["case"]
        self.params: Dict[str, Any] = self.case["params"]
        self.opts: Dict[str, Any] = spec["opts"]
        self.engine: str = self.opts["engine"]  # "numpy" | "cuda"
        self.device: str = "gpu" if self.engine == "cuda" else "cpu"  # QuasarqSimulator(device=...)
        self.limit_s: float = float(spec.get("limit_s") or self.case.get("timeout_s") or 600)  # this case's limit
        self.meter: Optional[EnergyMeter] = None
        if self.case.get("gpu_tool"):
            self.meter = EnergyMeter.open()
            if self.meter is None:
                self.emit(energy_note=EnergyMeter.why)
            else:
                self.emit(energy_source=self.meter.source)
        else:
            self.emit(energy_note="not a GPU tool: energy is measured for GPU tools only")

    # ------------------------------------------------------------------ output
    def emit(self, **fragment: Any) -> None:
        """Sends results to the parent now (deep-merged into the case's results)."""
        print(PREFIX + json.dumps(fragment, default=_jsonable), flush=True)

    # ------------------------------------------------------------------ circuits
    def circuit(self):
        """A new stim.Circuit object of the case's cached circuit (each call a fresh object)."""
        import stim

        return stim.Circuit.from_file(self.case["circuit_path"])

    # ------------------------------------------------------------------ timing
    @staticmethod
    def call(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    @staticmethod
    def timed(fn: Callable[[], Any]) -> tuple:
        """(fn(), seconds it took)."""
        t0 = time.perf_counter()
        value = fn()
        return value, time.perf_counter() - t0

    def first(self, fn: Callable[[], Any]) -> Dict[str, Any]:
        """{"first_s": seconds of one call of `fn`} (and its energy for GPU tools)."""
        if self.meter is None:
            return {"first_s": self.call(fn)}
        self.meter.start()
        try:
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
        finally:
            self.meter.stop()
        return {"first_s": t1 - t0, "first_energy_j": integrate(self.meter.samples, t0, t1),
                "first_energy_counter_j": self.meter.counter_j()}

    def repeat(self, fn: Callable[[], Any], *, first_s: Optional[float] = None, include_first: bool = False,
               calls: Optional[int] = None, secondary: bool = False, cached: bool = False) -> Dict[str, Any]:
        """Times further calls of `fn` (see the module docstring). `include_first`: the first call
        (`first_s`) is one of the samples (tools without a first-call effect). After a slow first
        call (over `max_repeat_s`) a single repeat is timed if the first call took under a quarter of
        the case's time limit, two if `cached` (ours, where the first call's slow part is kept: the
        compiled program with its schedule and reference sample; the frame plan comes with the second
        call), none for a `secondary` one."""
        times: List[float] = [first_s] if include_first and first_s is not None else []
        wanted = calls or self.opts["repeats"]
        if first_s is not None and first_s > self.opts["max_repeat_s"]:
            if include_first:
                wanted = len(times)
            elif secondary or (first_s > 0.25 * self.limit_s and not cached):
                return {"skipped": f"first call took {first_s:.1f} s: not repeated"}
            else:
                # ours: the second call may still build what later calls reuse (the NumPy frame plan
                # is made on a program's second call), so the best of two is the repeat call
                wanted = 2 if cached else 1
        meter = self.meter if len(times) < wanted else None
        regions = []
        t_start = time.perf_counter()
        if meter is not None:
            meter.start()
        try:
            while len(times) < wanted and (not times or time.perf_counter() - t_start < self.opts["repeat_budget_s"]):
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                regions.append((t0, t1))
                times.append(t1 - t0)
        finally:
            if meter is not None:
                meter.stop()
        out: Dict[str, Any] = {"best_s": min(times), "median_s": statistics.median(times), "calls": len(times),
                               "times_s": [round(t, 6) for t in times]}
        if meter is not None and regions:
            joules = [integrate(meter.samples, t0, t1) for t0, t1 in regions]
            joules = [j for j in joules if j is not None]
            out["energy_j"] = statistics.median(joules) if joules else None
            out["power_w"] = statistics.fmean(w for _, w in meter.samples) if meter.samples else None
            out["power_samples"] = len(meter.samples)
            counted = meter.counter_j()
            out["energy_counter_j"] = counted / len(regions) if counted is not None else None
        return out


def versions() -> Dict[str, str]:
    """Versions of the tracked packages this process imported."""
    from importlib import metadata

    try:
        owners = metadata.packages_distributions()
    except Exception:  # noqa: BLE001
        owners = {}
    out = {}
    for module in TRACKED_MODULES:
        if module not in sys.modules:
            continue
        version = None
        for dist in owners.get(module, []):
            try:
                version = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
        if version is None:
            version = getattr(sys.modules[module], "__version__", None)
        if module == "quasarq":
            try:
                version = str(sys.modules[module].version())
            except Exception:  # noqa: BLE001
                pass
        out[module] = str(version) if version is not None else "unknown"
    return out


def warm_up_main(engine: str) -> int:
    """Before the cases of a run: one process that builds our engine (compiling the CUDA kernels
    into the disk caches that every later process loads) and runs each mode once."""
    import stim

    from cirq_quasarq import QuasarqSimulator

    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=2,
                                     after_clifford_depolarization=1e-3)
    sim = QuasarqSimulator(seed=0, device="gpu" if engine == "cuda" else "cpu")
    sim.sample_measurements(circuit, 1000, bit_packed=True)
    sim.sample_detectors(circuit, 1000, append_observables=True, bit_packed=True)
    sim.simulate(circuit)
    return 0


def child_main(spec_text: str) -> int:
    """Entry point of a case's process: runs the runner, reports versions and peak memory."""
    import importlib
    import resource
    import traceback

    spec = json.loads(spec_text)
    ctx = Context(spec)
    module = importlib.import_module(f"benchmarks.suites.{spec['case']['module']}")
    runner = module.RUNNERS[spec["case"]["sim"]]
    status = 0
    try:
        runner(ctx)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        ctx.emit(error=f"{type(exc).__name__}: {str(exc)[:400]}",
                 traceback=traceback.format_exc().splitlines()[-6:])
        status = 1
    ctx.emit(versions=versions(), peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    return status
