"""The staging slots' bookkeeping (engines/cuda/frames._Staging) on the CPU, with a stand-in for the
driver: each device copy lands in its slot at once, but its event reports it done only after a
number of queries, so that copies end out of step with the calls. The GPU tests
(test_results_through_page_locked_staging_slots) run the same code on a device."""

from __future__ import annotations

import random
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
