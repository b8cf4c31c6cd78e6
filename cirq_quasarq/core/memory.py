"""Host memory available to the package (memory estimates are checked against it before work)."""

from __future__ import annotations

import os

from ..errors import OutOfMemoryError


def available_memory() -> int:
    """Bytes the host can still give (MemAvailable), or a large number where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def require_host_memory(what: str, nbytes: float, advice: str = "") -> None:
    """Refuse up front what host memory cannot hold, with the number (errors.OutOfMemoryError)."""
    free = available_memory()
    if nbytes > free:
        raise OutOfMemoryError(
            f"{what} needs about {nbytes / 2**30:.2f} GiB of host memory; {free / 2**30:.2f} GiB is available"
            + (f". {advice}" if advice else ""))

