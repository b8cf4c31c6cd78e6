"""Where a repeat call's time goes, host and device (GPU): a timeline of one call.

    python -m benchmarks.bench_frame_timeline [--codes 51 11]

Surface codes d = 51 (10k shots) and d = 11 (1M), records then detection events, each after twelve
calls alternating the two with the previous result kept (a sampling loop). For the timed call: host
marks, relative to the call's start, where `FrameMode.sample` and its helpers enter and leave, each
kernel launch with the device's start of that kernel (a CUDA event recorded before it on its
stream), when the device finished each band's copy, and the end of the call. A launch whose device start lags its host time by the whole
kernel before it ran behind another piece; a host gap between launches is the calling thread
held up (for example by the staging slots' copies)."""
import argparse
import sys
import time

from cirq_quasarq.engines import select_engine
from cirq_quasarq.engines.cuda import frames as frame_mode

from .bench_repeat_calls import call
from .circuits import surface_code_stim

SHOTS = {51: 10_000, 25: 100_000, 11: 1_000_000}
TRACED = ("sample", "_host_records", "_parities_on_device", "_stream_pool", "spread_pays", "fits_shared",
          "dynamic_room", "_scratch", "_band_plan", "_transpose", "_copy_band")


def traced(engine, marks: list) -> None:
    """Wrap the engine's launcher and FrameMode's helpers so that each appends (what, host seconds or
    CUDA event) to `marks`."""
    launcher, real_launch = engine.launcher, engine.launcher.launch

    def launch(stage, name, grid, block, *args, shared_size=0, timed=False, stream=None):
        marks.append(("launch " + name, time.perf_counter()))
        events = real_launch(stage, name, grid, block, *args, shared_size=shared_size, timed=True, stream=stream)
        marks.append(("  (device start)", events[0]))
        return events if timed or launcher.profile else None

    launcher.launch = launch
    for name in TRACED:
        real = getattr(frame_mode.FrameMode, name)

        def wrapped(self, *args, _real=real, _name=name, **kwargs):
            marks.append(("enter " + _name, time.perf_counter()))
            out = _real(self, *args, **kwargs)
            marks.append(("leave " + _name, time.perf_counter()))
            if _name == "_copy_band":  # and when the device is done with it (its stream: the last argument)
                done = engine.cuda.Event()
                done.record(args[-1])
                marks.append(("  (band copied)", done))
            return out

        setattr(frame_mode.FrameMode, name, wrapped)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--codes", type=int, nargs="+", default=[51, 11], choices=sorted(SHOTS))
    args = ap.parse_args(argv)
    engine = select_engine("gpu")
    cuda = engine.cuda
    marks: list = []
    traced(engine, marks)
    for d in args.codes:
        circuit, shots = surface_code_stim(d, d, 1e-3), SHOTS[d]
        kept = None
        for i in range(12):  # (past the misses that make each mode's page-locked buffer)
            kept = call(circuit, shots, i % 2 == 1)
        for det in (False, True):
            cuda.Context.synchronize()
            marks.clear()
            start = cuda.Event()
            start.record()
            host0 = time.perf_counter()
            kept = call(circuit, shots, det)
            cuda.Context.synchronize()
            print(f"== d={d} shots={shots} {'detection events' if det else 'records'}: "
                  f"{(time.perf_counter() - host0) * 1e3:.2f} ms", flush=True)
            for what, at in marks:
                if isinstance(at, float):
                    print(f"   host {(at - host0) * 1e3:8.3f} ms  {what}")
                else:
                    print(f"   dev  {at.time_since(start):8.3f} ms  {what}")
        del kept


if __name__ == "__main__":
    sys.exit(main())
