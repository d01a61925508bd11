"""How many CPU threads a command computes with, and how they wait between parallel regions.

Owns `usable_cores` (the cores this process may really use: its CPU affinity, bounded by a cgroup CPU quota, v2
`cpu.max` or v1 `cpu.cfs_quota_us`, as a container's `--cpus` sets it) and `configure_threads`, which the CLI calls
before any command imports torch. PyTorch's OpenMP runtime otherwise starts one thread per core it can see, and the
quota is not among what it sees: a container limited to 2 CPUs of a 64-core host would run 64 threads, each parallel
region then waiting for threads the quota has throttled. Its threads also spin (busy-wait) between parallel
regions; where other processes want the same cores, that spinning takes their time, and a thread that has lost
its core holds up the others at every barrier. So, unless the user chose (`--threads N`, or OMP_NUM_THREADS,
MKL_NUM_THREADS, OMP_WAIT_POLICY in the environment, all respected as given):

- OMP_NUM_THREADS and MKL_NUM_THREADS are the usable cores (a quota of 1.5 CPUs gives 1 thread: a thread beyond the
  quota is throttled within each period while the others wait for it);
- OMP_WAIT_POLICY is PASSIVE: a thread with no work sleeps at once instead of spinning, so two jobs on one machine
  share its cores rather than spin against each other (docs/scaling.md, "Two jobs on one machine"; measured in
  docs/benchmarks.md).

When torch is already imported (the Python API), the environment no longer reaches its runtime: the thread count
is then set through `torch.set_num_threads`, and the waiting policy stays what the process started with. Nothing
here imports torch.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

from retromae.runtime.cgroups import UNIFIED, own_groups, read_setting

CGROUP_ROOT = Path("/sys/fs/cgroup")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
WAIT_POLICY = "OMP_WAIT_POLICY"


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPUs a cgroup quota grants this process (quota / period), or None without a quota. Both the process's own
    cgroup and the root of the mount are read (inside a container the latter is the container's)."""
    groups = own_groups(proc_cgroup)
    unified, cpu = groups.get(UNIFIED, "/"), groups.get("cpu", "/")
    quotas = []
    for folder in {root / unified.lstrip("/"), root}:  # v2: "max 100000" or "200000 100000"
        fields = (read_setting(folder / "cpu.max") or "").split()
        if len(fields) == 2 and fields[0] != "max":
            quotas.append((fields[0], fields[1]))
    for base in (root / "cpu", root / "cpu,cpuacct"):  # v1: a quota of -1 is none
        for folder in {base / cpu.lstrip("/"), base}:
            quota, period = read_setting(folder / "cpu.cfs_quota_us"), read_setting(folder / "cpu.cfs_period_us")
            if quota and period and quota != "-1":
                quotas.append((quota, period))
    granted = [int(q) / int(p) for q, p in quotas if q.isdigit() and p.isdigit() and int(p) > 0 and int(q) > 0]
    return min(granted) if granted else None


def usable_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The cores this process may run on at once: its affinity, at most the cgroup quota (rounded down, at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(root, proc_cgroup)
    return cores if quota is None else max(1, min(cores, math.floor(quota)))


def configure_threads(requested: int | None = None, env: MutableMapping[str, str] = os.environ,
                      cores: int | None = None) -> int | None:
    """Set the thread count (`requested`, else the usable cores unless the user's OMP_NUM_THREADS or
    MKL_NUM_THREADS says otherwise) and the passive waiting policy (unless the user's OMP_WAIT_POLICY says
    otherwise) in `env`, and in torch when it is already imported; returns the thread count set, or None when the
    user's environment decides it."""
    env.setdefault(WAIT_POLICY, "PASSIVE")
    if requested is None and any(name in env for name in THREAD_VARIABLES):
        return None
    threads = requested or cores or usable_cores()
    for name in THREAD_VARIABLES:
        env[name] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads
