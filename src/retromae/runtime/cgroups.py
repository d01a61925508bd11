"""This process's control groups, as Linux lists them in /proc/self/cgroup.

Owns `own_groups` (the group of each controller, v1, or of the unified hierarchy, v2) and `read_setting` (a group
file's text, None where it cannot be read). Holds no policy: the thread count (`retromae.runtime.threads`) reads the CPU
quota, fine-tuning's memory plan (`retromae.finetuning.memory`) the memory limit. Also owns what memory the machine
and the cgroup still give (`available_memory`), read without torch.
"""

from __future__ import annotations

import re
from pathlib import Path

UNIFIED = ""  # the key of the v2 hierarchy, which names no controller
UNLIMITED = 1 << 60  # a cgroup limit this large means no limit


def own_groups(proc_cgroup: Path = Path("/proc/self/cgroup")) -> dict[str, str]:
    """Controller ("cpu", "memory", ...; `UNIFIED` for v2) → this process's group path; empty when unknown."""
    groups: dict[str, str] = {}
    for line in (read_setting(proc_cgroup) or "").splitlines():
        fields = line.split(":", 2)  # hierarchy-ID:controllers:path
        if len(fields) == 3:
            for controller in fields[1].split(","):
                groups.setdefault(controller, fields[2])
    return groups


def read_setting(path: Path) -> str | None:
    """The stripped text of `path`, or None where it cannot be read."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def meminfo_available() -> int | None:
    """The kernel's estimate of the memory available to new work (MemAvailable), None where there is no /proc."""
    found = re.search(r"^MemAvailable:\s+([0-9]+) kB", read_setting(Path("/proc/meminfo")) or "", re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def cgroup_headroom(cgroups: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What this process's memory cgroup (listed in `cgroups`, mounted at `mount`) still allows: its limit less its
    usage, page cache it can drop not counted, under cgroup v2 or v1; None without a limit."""
    groups = own_groups(cgroups)
    candidates = []
    if UNIFIED in groups:  # v2
        candidates.append((mount / groups[UNIFIED].lstrip("/"), ("memory.max", "memory.current", "inactive_file")))
    if "memory" in groups:  # v1
        candidates.append((mount / "memory" / groups["memory"].lstrip("/"),
                           ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")))
    for folder, files in candidates:
        limit, usage = read_setting(folder / files[0]), read_setting(folder / files[1])
        if limit is None or usage is None or not limit.isdigit() or int(limit) >= UNLIMITED:
            continue
        dropped = re.search(rf"^{files[2]} ([0-9]+)$", read_setting(folder / "memory.stat") or "", re.MULTILINE)
        return max(0, int(limit) - int(usage) + (int(dropped.group(1)) if dropped else 0))
    return None


def available_memory() -> int | None:
    """Bytes this machine can still give a process: the smaller of MemAvailable and the memory cgroup's headroom;
    None where neither can be read. Torch-free: sizes are weighed against it before anything is allocated
    (`init-model`'s parameters, a faiss index's codebooks)."""
    known = [value for value in (meminfo_available(), cgroup_headroom()) if value is not None]
    return min(known) if known else None
