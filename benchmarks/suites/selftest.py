"""Runners that exercise the harness itself (tests/test_benchmarks_suite.py): a case that reports
and then outlives its time limit, one whose process dies, one that raises. No suite lists them."""

from __future__ import annotations

import os
import time


def sleeper(ctx) -> None:
    ctx.emit(single={"first_s": 0.5})
    time.sleep(float(ctx.params.get("sleep_s", 60)))


def crasher(ctx) -> None:
    ctx.emit(single={"first_s": 0.25})
    os.abort()


def failer(ctx) -> None:
    raise RuntimeError("a runner that fails")


def quick(ctx) -> None:
    ctx.emit(single={"first_s": 0.1, "repeat": ctx.repeat(lambda: None, first_s=0.1)})


RUNNERS = {"sleep": sleeper, "crash": crasher, "fail": failer, "ok": quick}
