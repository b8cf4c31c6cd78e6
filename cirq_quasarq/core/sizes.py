"""Memory sizes as people write them ("512M", "2G") and as the engines count them (bytes)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(value) -> int:
    """A memory size as bytes: a non-negative int, or a string of a number with an optional binary
    suffix: "1000000", "512M", "2G", "1.5GiB", "64KB" (K, M, G, T are powers of 1024, with or
    without a trailing "iB" / "B"; case does not matter). ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"a memory size must be a number of bytes, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a memory size must be >= 0 bytes, got {value}")
        return value
    m = _SIZE.match(str(value))
    if m is None:
        raise ValueError(f"a memory size must be a number of bytes with an optional suffix K, M, G or T "
                         f"(e.g. 512M, 2G), not {value!r}")
    number, unit = m.group(1), m.group(2).upper()
    if "." in number or "e" in number.lower():
        return int(float(number) * _UNITS[unit])
    return int(number) * _UNITS[unit]
