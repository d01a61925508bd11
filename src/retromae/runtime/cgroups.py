"""This process's control groups, as Linux lists them in /proc/self/cgroup.

Owns `own_groups` (the group of each controller, v1, or of the unified hierarchy, v2) and `read_setting` (a group
file's text, None where it cannot be read). Holds no policy: the thread count (`retromae.runtime.threads`) reads the CPU
quota, fine-tuning's memory plan (`retromae.finetuning.memory`) the memory limit.
"""

from __future__ import annotations

from pathlib import Path

UNIFIED = ""  # the key of the v2 hierarchy, which names no controller


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
