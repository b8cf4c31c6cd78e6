"""The staging slots' bookkeeping (engines/cuda/frames._Staging) on the CPU, with a stand-in for the
driver: each device copy lands in its slot at once, but its event reports it done only after a
number of queries, so that copies end out of step with the calls. The GPU tests
(test_results_through_page_locked_staging_slots) run the same code on a device."""

from __future__ import annotations

import contextlib
import gc
import random
import threading
import time

import numpy as np
import pytest

from cirq_quasarq.engines.cuda import frames


class _Event:
    def __init__(self, rng: random.Random):
        self.left = rng.choice([0, 0, 1, 3])  # queries before it reports done

    def record(self, stream) -> None:
        stream.recorded.append(self)

    def query(self) -> bool:
        if self.left > 0:
            self.left -= 1
            return False
        return True

    def synchronize(self) -> None:  # the copy landed when it was enqueued
        self.left = 0


class _Stream:
    def __init__(self):
        self.recorded = []


class _Driver:
    """memcpy_dtoh_async and Memcpy2D from a bytes array standing for device memory."""

    def __init__(self, device: np.ndarray, seed: int):
        self.device = device
        self.rng = random.Random(seed)

    def Event(self):  # noqa: N802 (the driver's name)
        return _Event(self.rng)

    def memcpy_dtoh_async(self, dest, src: int, stream) -> None:
        dest[...] = self.device[src:src + dest.nbytes].view(dest.dtype).reshape(dest.shape)

    def Memcpy2D(self):  # noqa: N802
        driver = self

        class Copy:
            def set_src_device(self, at):
                self.src = at

            def set_dst_host(self, host):
                self.dst = host

            def __call__(self, stream):
                dst = self.dst.reshape(-1).view(np.uint8)
                for r in range(self.height):
                    row = driver.device[self.src + r * self.src_pitch:self.src + r * self.src_pitch + self.width_in_bytes]
                    dst[r * self.dst_pitch:r * self.dst_pitch + self.width_in_bytes] = row

        return Copy()


class _Engine:
    def __init__(self, driver):
        self.cuda = driver


def _staging(driver, slot: int, monkeypatch) -> frames._Staging:
    monkeypatch.setattr(frames, "_STAGING_SLOT", slot)
    staging = frames._Staging.__new__(frames._Staging)
    staging.engine = _Engine(driver)
    staging._locking = None
    staging._slots = [np.zeros(slot, dtype=np.uint8) for _ in range(frames._STAGING_SLOTS)]
    staging._state = [None] * frames._STAGING_SLOTS
    staging._order = []
    staging._next = 0
    return staging


@pytest.mark.parametrize("async_drains", [True, False])
@pytest.mark.parametrize("lines_as_one", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_every_row_reaches_its_destination(monkeypatch, async_drains, lines_as_one, seed):
    """Calls of rows 5 to 300 bytes wide (back to back on the device, or a pitch apart), in pieces
    of any size, through six slots of a few rows each, drains slowed down: after `finish` every
    destination holds its device rows, so no slot was filled again while it was being emptied, and
    the next call reuses the slots; a discarded call leaves nothing behind."""
    monkeypatch.setattr(frames._Staging, "async_drains", async_drains)
    monkeypatch.setattr(frames._Staging, "lines_as_one", lines_as_one)
    rng = np.random.default_rng(seed)
    device = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    staging = _staging(_Driver(device, seed), 1024 + 37 * seed, monkeypatch)
    real_copyto = np.copyto

    def slow_copyto(dest, src):  # a drain still running when its slot is filled again reads new bytes
        time.sleep(0.0003)
        real_copyto(dest, src)

    monkeypatch.setattr(frames.np, "copyto", slow_copyto)
    for call in range(3):
        width = int(rng.integers(5, 300))
        pitch = width + int(rng.choice([0, 0, 3, 64]))
        rows = int(rng.integers(1, 40 * (4000 // width)))
        out = np.zeros((rows, width), dtype=np.uint8)
        want = np.zeros_like(out)
        at = 0
        while at < rows:
            part = int(rng.integers(1, rows - at + 1))
            src = int(rng.integers(0, len(device) - part * pitch))
            assert staging.rows(_Stream(), out[at:at + part], src, pitch)
            want[at:at + part] = np.lib.stride_tricks.as_strided(device[src:], (part, width), (pitch, 1))
            at += part
        staging.finish()
        assert np.array_equal(out, want), (call, width, pitch, rows)
        assert all(state is None for state in staging._state) and staging._order == []
    out = np.zeros((50, 7), dtype=np.uint8)  # an interrupted call: slots filled, then forgotten
    staging.rows(_Stream(), out, 0, 7)
    staging.discard()
    assert all(state is None for state in staging._state) and staging._order == []
    again = np.zeros((50, 7), dtype=np.uint8)
    staging.rows(_Stream(), again, 700, 7)
    staging.finish()
    assert np.array_equal(again, device[700:1050].reshape(50, 7))


class _Lane:
    """A stream of the upload's stand-in driver: its copies land when an event recorded after them,
    or the stream, is synchronized, reading their page-locked source then (as a device does), so a
    source filled again before its copy was waited for lands the wrong bytes. When freed it tells
    the driver whether every copy had landed and whether the engine's context was current (PyCUDA
    cannot free a stream or an event out of its context)."""

    def __init__(self, driver):
        self.driver = driver
        self.pending = []  # (device offset, source view)
        self.landed = 0

    def land(self, upto: int) -> None:
        for at, src in self.pending[self.landed:upto]:
            self.driver.device[at:at + src.nbytes] = src
        self.landed = max(self.landed, upto)

    def synchronize(self) -> None:
        self.land(len(self.pending))

    def __del__(self):
        self.driver.freed.append(("stream", self.landed == len(self.pending), self.driver.in_context()))


class _Sent:
    def __init__(self, driver):
        self.driver = driver

    def record(self, stream: _Lane) -> None:
        self.stream, self.upto = stream, len(stream.pending)

    def synchronize(self) -> None:
        self.stream.land(self.upto)

    def __del__(self):
        self.driver.freed.append(("event", True, self.driver.in_context()))


class _UploadDriver:
    def __init__(self, size: int, fail_at: int = -1):
        self.device = np.zeros(size, dtype=np.uint8)
        self.streams = 0
        self.freed = []  # (what, its copies all landed, in the context)
        self.copies, self.fail_at = 0, fail_at
        self.lock = threading.Lock()
        self.context = threading.local()

    def in_context(self) -> bool:
        return getattr(self.context, "depth", 0) > 0

    def mem_alloc(self, nbytes: int) -> int:
        return 0  # the one allocation of each test, at offset 0

    def Stream(self):  # noqa: N802 (the driver's name)
        with self.lock:
            self.streams += 1
        return _Lane(self)

    def Event(self):  # noqa: N802
        return _Sent(self)

    def memcpy_htod_async(self, dest: int, src: np.ndarray, stream: _Lane) -> None:
        with self.lock:
            self.copies += 1
            if self.copies == self.fail_at:  # (the traceback keeps no stream: PyCUDA's copy is not Python)
                del stream, src
                raise RuntimeError("copy refused")
        stream.pending.append((dest, src))

    def lanes_ended_well(self) -> bool:
        """Every stream freed with its copies landed, and every stream and event freed in the context."""
        gc.collect()
        streams = [f for f in self.freed if f[0] == "stream"]
        return len(streams) == self.streams > 0 and all(landed and current for _, landed, current in self.freed)


class _UploadEngine:
    def __init__(self, driver):
        self.cuda = driver

    @contextlib.contextmanager
    def context_current(self):
        context = self.cuda.context
        context.depth = getattr(context, "depth", 0) + 1
        try:
            yield
        finally:
            context.depth -= 1


def _upload_staging(driver, slot: int, monkeypatch) -> frames._Staging:
    staging = _staging(driver, slot, monkeypatch)
    staging.engine = _UploadEngine(driver)
    return staging


@pytest.mark.parametrize("slot", [64, 4096 + 8])
def test_uploads_through_the_slots_land_whole(monkeypatch, slot):
    """`_Staging.upload` (a program's large arrays going up): sizes at and around the edges of the
    half-slots it copies and of rounds of all six lanes, from one byte to many rounds, an int32 array
    as bytes. Copies land only when waited for and read their half-slot then, so a half filled again
    before its copy was done, or a return before the last copy, lands wrong bytes; after each upload
    the device holds the array, every lane's copies have landed and its stream and events were
    freed while the context was current. A slot left filling by an
    interrupted call is waited for first."""
    rng = np.random.default_rng(slot)
    half, lanes = slot // 2, frames._STAGING_SLOTS
    sizes = sorted({1, half - 1, half, half + 1, lanes * half - 1, lanes * half, lanes * half + 1,
                    2 * lanes * half + 3, 7 * lanes * half + half // 2, 31 * half + 5})
    for size in sizes:
        driver = _UploadDriver(size)
        staging = _upload_staging(driver, slot, monkeypatch)
        a = rng.integers(0, 256, size, dtype=np.uint8)
        assert staging.upload(a) == 0
        assert np.array_equal(driver.device, a), size
        assert driver.lanes_ended_well()
    words = rng.integers(-(1 << 31), 1 << 31, (1000, 9), dtype=np.int64).astype(np.int32)
    driver = _UploadDriver(words.nbytes)
    staging = _upload_staging(driver, slot, monkeypatch)
    left = _Event(random.Random(0))
    left.left = 5
    staging._state[2] = ("filling", left, None)  # an interrupted call's copy into slot 2
    staging._order = [2]
    staging.upload(words)
    assert left.left == 0 and staging._state == [None] * lanes and staging._order == []
    assert np.array_equal(driver.device.view(np.int32).reshape(words.shape), words)


def test_an_upload_that_fails_raises_with_every_lane_stopped(monkeypatch):
    """A copy the driver refuses raises from `upload`, after every lane has stopped and its copies
    have landed (none still reads a slot that a later call fills), its stream freed in the context."""
    driver = _UploadDriver(64 * 40, fail_at=9)
    staging = _upload_staging(driver, 64, monkeypatch)
    with pytest.raises(RuntimeError, match="copy refused"):
        staging.upload(np.ones(64 * 40, dtype=np.uint8))
    assert driver.lanes_ended_well()


@pytest.mark.parametrize("workers", [1, 3, 6])
def test_the_touch_pools_threads_all_start_ahead(monkeypatch, workers):
    """`start_touch_threads` (a CUDA engine's start) leaves the touch pool with every one of its
    threads running, not the one or two that quick tasks would have started, and starts them once
    a pool (mutation checked: quick tasks in place of the barrier fail every count but 1)."""
    monkeypatch.setattr(frames, "_TOUCH_POOL", None)
    monkeypatch.setattr(frames, "_TOUCH_STARTED", [])
    monkeypatch.setattr(frames.native, "processors", lambda: workers)
    frames.start_touch_threads()
    pool, count = frames._touch_pool()
    try:
        assert count == min(workers, frames._TOUCH_THREADS)
        assert len(pool._threads) == count
        frames.start_touch_threads()  # (once a pool)
        assert len(pool._threads) == count and frames._TOUCH_STARTED == [pool]
        deadline = time.monotonic() + 5.0  # the waits end once all have started
        while pool._work_queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.submit(int).result(timeout=5.0) == 0
    finally:
        pool.shutdown(wait=True)
