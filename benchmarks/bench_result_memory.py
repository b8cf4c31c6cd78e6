"""Large results in ordinary memory: through the staging slots or copied straight, and into a kept
page-locked buffer.

    python -m benchmarks.bench_result_memory

GPU only. `sample_measurements(..., bit_packed=True)` of surface codes (d = 51 10k shots, d = 25
100k, d = 11 1M: 169, 203 and 180 MB of records) on the shared engine, results kept so that every
call takes fresh ordinary memory (page-locked result buffers switched off), with the staging slots
(`frames._Staging`) and without, alternating in one process, four calls each, three rounds; then
one profiled call of each; then d = 51 with page-locked result buffers made at the first miss.

    python -m benchmarks.bench_result_memory --lines

instead times how the staging slots take rows that lie back to back: 8 MiB from the device into a
page-locked slot as one line against a 2-D copy of lines a row long (5 to 16,900 bytes: the rows
of d = 3, 5, 11, 25 and 51 surface codes' records), then repeat calls into fresh ordinary memory
(records, and detection events with the observables appended) of d = 3 (10M and 1M shots), d = 11
(1M), d = 25 (100k) and d = 51 (10k), `_Staging.lines_as_one` on and off in turn, four calls each,
three rounds.

    python -m benchmarks.bench_result_memory --drains

the same repeat calls with the slots emptied on the touch pool as their copies end, in two or four
tasks a slot (`_Staging.async_drains`, `drain_parts`), against each slot emptied on the calling
thread when it is taken again (the code before), in turn.

    python -m benchmarks.bench_result_memory --bands

the same repeat calls with a one-wave call's bands going through the slots while the frame kernel
runs (d = 51's rows), against its rows copied after the kernel, in turn.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import time

from .circuits import surface_code_stim


@contextlib.contextmanager
def fresh_memory_simulator():
    """A GPU simulator whose results all go to ordinary memory (no page-locked result buffers), its
    staging slots locked; the setting restored after."""
    import stim

    import cirq_quasarq
    from cirq_quasarq.engines.cuda import frames

    pinned_after = frames._PINNED_AFTER
    frames._PINNED_AFTER = 10 ** 9  # results in ordinary memory only
    try:
        sim = cirq_quasarq.QuasarqSimulator(seed=1, device="gpu")
        sim.sample_measurements(stim.Circuit("H 0\nM 0"), 64, bit_packed=True)  # the slots start locking
        staging = sim.engine._frames._staging
        while not staging.ready():
            time.sleep(0.01)
        yield sim
    finally:
        frames._PINNED_AFTER = pinned_after


def main() -> None:
    from cirq_quasarq.engines.cuda import frames

    staging_min = frames._STAGING_MIN_BYTES
    with fresh_memory_simulator() as sim:
        try:
            for d, shots in ((51, 10_000), (25, 100_000), (11, 1_000_000)):
                circuit = surface_code_stim(d, d, 1e-3)
                sim.sample_measurements(circuit, shots, bit_packed=True)  # compile, reference
                for variant in ("staged", "direct") * 3:
                    frames._STAGING_MIN_BYTES = staging_min if variant == "staged" else 1 << 62
                    kept, times = [], []
                    for _ in range(4):
                        t0 = time.perf_counter()
                        kept.append(sim.sample_measurements(circuit, shots, bit_packed=True))
                        times.append(time.perf_counter() - t0)
                    print(f"d={d} {shots} shots {variant}: calls ms", ["%.1f" % (1e3 * t) for t in times], flush=True)
                for variant in ("staged", "direct"):
                    frames._STAGING_MIN_BYTES = staging_min if variant == "staged" else 1 << 62
                    profile = cProfile.Profile()
                    profile.enable()
                    sim.sample_measurements(circuit, shots, bit_packed=True)
                    profile.disable()
                    out = io.StringIO()
                    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(6)
                    print(variant, "\n".join(out.getvalue().splitlines()[6:16]))
                frames._STAGING_MIN_BYTES = staging_min
            frames._PINNED_AFTER = 0  # a page-locked buffer at the first miss
            circuit, times, result = surface_code_stim(51, 51, 1e-3), [], None
            for _ in range(6):
                t0 = time.perf_counter()
                result = sim.sample_measurements(circuit, 10_000, bit_packed=True)
                times.append(time.perf_counter() - t0)
            print("d=51 10000 shots, page-locked results (the previous one kept): calls ms",
                  ["%.1f" % (1e3 * t) for t in times], flush=True)
            del result
        finally:
            frames._STAGING_MIN_BYTES = staging_min


def lines() -> None:
    from cirq_quasarq.engines.cuda import frames

    with fresh_memory_simulator() as sim:
        slot_copies(sim, frames)
        in_turn(sim, {"one line": {"lines_as_one": True}, "lines a row long": {"lines_as_one": False}})


def slot_copies(sim, frames) -> None:
    """8 MiB from the device into a staging slot as one line and in lines a row long."""
    cuda = sim.engine.cuda
    staging = sim.engine._frames._staging
    size = frames._STAGING_SLOT
    device = cuda.mem_alloc(size)
    slot = staging._slots[0]
    stream = cuda.Stream()
    start, end = cuda.Event(), cuda.Event()
    for width in (5, 40, 346, 1250, 16900):
        height = size // width
        times = {"one line": [], "lines a row long": []}
        for _ in range(5):
            for variant in times:
                start.record(stream)
                if variant == "one line":
                    cuda.memcpy_dtoh_async(slot[:width * height], device, stream)
                else:
                    copy = cuda.Memcpy2D()
                    copy.set_src_device(int(device))
                    copy.src_pitch = copy.dst_pitch = copy.width_in_bytes = width
                    copy.set_dst_host(slot)
                    copy.height = height
                    copy(stream)
                end.record(stream)
                end.synchronize()
                times[variant].append(end.time_since(start))
        print(f"8 MiB device -> page-locked slot, rows of {width} bytes: "
              + ", ".join(f"{k} {min(v):.3f} ms ({width * height / min(v) / 1e6:.1f} GB/s)" for k, v in times.items()),
              flush=True)


def bands() -> None:
    from cirq_quasarq.engines.cuda import frames

    with fresh_memory_simulator() as sim:
        in_turn(sim, {"bands through the slots": {"_STAGED_BAND_MIN_BYTES": frames._STAGED_BAND_MIN_BYTES},
                      "copies after the kernel": {"_STAGED_BAND_MIN_BYTES": 1 << 62}})


def drains() -> None:
    with fresh_memory_simulator() as sim:
        in_turn(sim, {"drains on the pool, 2 tasks a slot": {"async_drains": True, "drain_parts": 2},
                      "drains on the pool, 4 tasks a slot": {"async_drains": True, "drain_parts": 4},
                      "each slot emptied when taken again": {"async_drains": False}})


def in_turn(sim, variants) -> None:
    """Repeat calls into fresh memory, each variant's `_Staging` settings in turn, three rounds of
    four calls: each variant's median and best."""
    from cirq_quasarq.engines.cuda import frames

    calls = {"records": lambda c, shots: sim.sample_measurements(c, shots, bit_packed=True),
             "detection events": lambda c, shots: sim.sample_detectors(c, shots, append_observables=True,
                                                                       bit_packed=True)}
    def owner(key):  # module settings start with an underscore, the slots' own do not
        return frames if key.startswith("_") else frames._Staging

    kept_settings = {k: getattr(owner(k), k) for v in variants.values() for k in v}
    try:
        for d, shots in ((3, 10_000_000), (3, 1_000_000), (11, 1_000_000), (25, 100_000), (51, 10_000)):
            circuit = surface_code_stim(d, d, 1e-3)
            for mode, call in calls.items():
                call(circuit, shots)  # compile, reference
                times = {name: [] for name in variants}
                for _ in range(3):
                    for name, settings in variants.items():
                        for key, value in settings.items():
                            setattr(owner(key), key, value)
                        kept = []
                        for _ in range(4):
                            t0 = time.perf_counter()
                            kept.append(call(circuit, shots))
                            times[name].append(1e3 * (time.perf_counter() - t0))
                        first = kept[0]
                        del kept
                print(f"d={d} {shots} shots, {mode} into fresh memory ({first.nbytes / 1e6:.0f} MB, rows of "
                      f"{first.shape[1]} bytes): " + "; ".join(
                          f"{name} median {statistics.median(v):.2f} ms, best {min(v):.2f}"
                          for name, v in times.items()), flush=True)
    finally:
        for key, value in kept_settings.items():
            setattr(owner(key), key, value)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", action="store_true", help="rows back to back as one line against lines a row long")
    ap.add_argument("--drains", action="store_true", help="slots emptied on the pool against on the calling thread")
    ap.add_argument("--bands", action="store_true", help="a one-wave call's bands through the slots, or not")
    args = ap.parse_args()
    if args.lines:
        lines()
    elif args.drains:
        drains()
    elif args.bands:
        bands()
    else:
        main()
