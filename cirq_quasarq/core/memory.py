"""Host memory available to the package: the tightest of the limits that apply to this process
(MemAvailable, its cgroup's memory limit, RLIMIT_AS and RLIMIT_DATA). Memory estimates are
checked against it before work, so that a call the limit cannot hold is refused with the numbers
instead of being killed by the OS (a container's OOM killer) or failing half-way.

Each reader takes the paths it reads, so tests point it at fake files."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import List, NamedTuple, Optional

try:
    import resource
except ImportError:  # Windows: no rlimits
    resource = None

from ..errors import OutOfMemoryError

# cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit number (its exact value
# depends on the page size); nothing at or above this is a limit a host can have.
_V1_UNLIMITED = 1 << 60
_UNKNOWN = 1 << 62  # where no limit can be read


class Headroom(NamedTuple):
    """Bytes a limit leaves to this process, the limit's name ("MemAvailable", "cgroup
    memory.max", "RLIMIT_AS", ...) and how the figure was made, for messages."""
    bytes: int
    limit: str
    detail: str = ""

    def describe(self) -> str:
        return self.limit + (f" ({self.detail})" if self.detail else "")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _read(path) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _field_kib(text: Optional[str], field: str) -> Optional[int]:
    """Bytes of a "Field:   123 kB" line of /proc/meminfo or /proc/self/status."""
    for line in (text or "").splitlines():
        if line.startswith(field + ":"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def meminfo_headroom(meminfo="/proc/meminfo") -> Optional[Headroom]:
    """MemAvailable (the kernel's estimate of what can be allocated without swapping)."""
    avail = _field_kib(_read(meminfo), "MemAvailable")
    if avail is not None:
        return Headroom(avail, "MemAvailable")
    try:  # no /proc (macOS): free physical pages
        return Headroom(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free physical memory")
    except (ValueError, OSError, AttributeError):
        return None


def _stat_value(text: Optional[str], name: str) -> int:
    """The value of a "name 123" line of a cgroup's memory.stat (0 where absent)."""
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name and parts[1].isdigit():
            return int(parts[1])
    return 0


def _ancestors(base: Path, path: str):
    """base/path and each of its parents up to base itself. A cgroup path can name a directory
    that this mount namespace does not show (a container without its own cgroup namespace mounts
    its cgroup as the root): those are skipped, the mount's root still counts."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    for k in range(len(parts), -1, -1):
        yield base.joinpath(*parts[:k])


_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


@functools.lru_cache(maxsize=8)
def _cgroup_dirs(listing: str, root: str):
    """[(directory, its file names)] of the memory controllers of a /proc/self/cgroup listing:
    the cgroup and its ancestors that exist under `root` (v2 at root or root/unified on hybrid
    hosts, v1 at root/<controllers>). Kept per listing: looking costs more than reading."""
    base = Path(root)
    out = []
    for line in listing.splitlines():
        ident, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not (sep and sep2):
            continue
        if ident == "0" and controllers == "":
            bases, names = [base, base / "unified"], _V2
        elif "memory" in controllers.split(","):
            bases, names = [base / controllers, base / "memory"], _V1
        else:
            continue
        for b in dict.fromkeys(bases):  # the same directory once
            out += [(d, names) for d in _ancestors(b, path) if (d / names[0]).is_file()]
    return tuple(out)


def cgroup_headroom(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup") -> List[Headroom]:
    """What the memory limits of this process's cgroup and of each of its ancestors leave: limit
    minus usage, the usage less its inactive file cache (page cache the kernel reclaims before it
    kills anything). cgroup v2: memory.max ("max": none) and memory.current; v1:
    memory.limit_in_bytes (huge: none) and memory.usage_in_bytes."""
    listing = _read(proc_cgroup)
    if listing is None:
        return []
    out = []
    for d, (limit_file, usage_file, cache) in _cgroup_dirs(listing, str(root)):
        limit = (_read(d / limit_file) or "").strip()
        if not limit.isdigit() or int(limit) >= _V1_UNLIMITED:  # "max" (v2) or v1's huge number
            continue
        usage = (_read(d / usage_file) or "").strip()
        if not usage.isdigit():
            continue
        used = max(0, int(usage) - _stat_value(_read(d / "memory.stat"), cache))
        out.append(Headroom(max(0, int(limit) - used), f"cgroup {limit_file}",
                            f"{_gib(int(limit))} at {d}, {_gib(used)} of it in use"))
    return out


def rlimit_headroom(status="/proc/self/status") -> List[Headroom]:
    """RLIMIT_AS less the process's address space (VmSize) and RLIMIT_DATA less its data
    segments (VmData): a larger allocation fails, whatever the host has free."""
    if resource is None:
        return []
    text = _read(status)
    out = []
    for name, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        number = getattr(resource, name, None)
        if number is None:
            continue
        soft, _ = resource.getrlimit(number)
        if soft == resource.RLIM_INFINITY:
            continue
        used = _field_kib(text, field)
        if used is None:  # no /proc: the limit itself is the most there can be
            out.append(Headroom(soft, name, f"{_gib(soft)}; the process's {field} unknown"))
        else:
            out.append(Headroom(max(0, soft - used), name, f"{_gib(soft)}, less the {_gib(used)} of {field} in use"))
    return out


def host_headroom() -> Headroom:
    """The tightest of every limit that applies to this process (a huge number where none can be
    read)."""
    limits = cgroup_headroom() + rlimit_headroom()
    physical = meminfo_headroom()
    if physical is not None:
        limits.append(physical)
    return min(limits, key=lambda h: h.bytes, default=Headroom(_UNKNOWN, "no limit known"))


# Reading the limits costs 0.1-0.5 ms (several /proc and cgroup files), more than a small sampling
# call's whole work (a decoder's batch of a thousand shots): requests up to this many bytes are
# not checked up front.
SMALL_REQUEST = 16 << 20
# A reading stands for REUSE_S seconds for requests of at most 1 / REUSE_FRACTION of what it has
# left, each request taken off it as if its memory stayed held, so that what passes on it stays
# under the headroom it found: a loop of mid-sized calls had read the limits every call (an H100
# host: a d = 3 surface code's 1M shots of records 0.73 -> 0.54 ms a call, detection events, under
# SMALL_REQUEST, 0.51 ms).
REUSE_S = 0.5
REUSE_FRACTION = 16
_reading: Optional[tuple] = None  # (time.monotonic() of the last reading, bytes it has left)


def forget_reading() -> None:
    """The next checked request reads the limits again (tests that fake them)."""
    global _reading
    _reading = None


def require_host_memory(what: str, nbytes: float, advice: str = "") -> None:
    """Refuse up front what host memory cannot hold, naming the need and the limit
    (errors.OutOfMemoryError); requests of SMALL_REQUEST bytes or less pass unchecked, and a
    recent reading stands for requests far below what it found (REUSE_S, REUSE_FRACTION)."""
    global _reading
    if nbytes <= SMALL_REQUEST:
        return
    now, last = time.monotonic(), _reading
    if last is not None and now - last[0] < REUSE_S and nbytes * REUSE_FRACTION <= last[1]:
        _reading = (last[0], last[1] - nbytes)
        return
    free = host_headroom()
    if nbytes > free.bytes:
        _reading = None
        raise OutOfMemoryError(
            f"{what} needs about {_gib(nbytes)} of host memory; {_gib(free.bytes)} is available under "
            f"{free.describe()}" + (f". {advice}" if advice else ""))
    _reading = (now, free.bytes - nbytes)
