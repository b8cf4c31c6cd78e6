"""Host memory available to the package (memory estimates are checked against it before work)."""

from __future__ import annotations

import os


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
