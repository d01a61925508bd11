"""The CPU threads a command computes with (issue 38): the cores a cgroup quota and the affinity allow, the passive
waiting policy, and what the user sets (--threads, OMP_NUM_THREADS, OMP_WAIT_POLICY) respected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from retromae.cli import _chosen_command, _threads, build_parser
from retromae.runtime.threads import cgroup_cpu_quota, configure_threads, usable_cores

ROOT = Path(__file__).resolve().parents[1]
AFFINITY = len(os.sched_getaffinity(0))


def cgroup_tree(tmp_path: Path, files: dict[str, str], own: str = "0::/\n") -> tuple[Path, Path]:
    """A fake /sys/fs/cgroup holding `files` (path → content) and a fake /proc/self/cgroup reading `own`."""
    root = tmp_path / "cgroup"
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(content + "\n")
    root.mkdir(exist_ok=True)
    (tmp_path / "proc-cgroup").write_text(own)
    return root, tmp_path / "proc-cgroup"


@pytest.mark.parametrize(("files", "own", "quota"), [
    ({"cpu.max": "150000 100000"}, "0::/\n", 1.5),  # v2, a container's --cpus 1.5
    ({"cpu.max": "max 100000"}, "0::/\n", None),  # v2 without a quota
    ({"jobs/a/cpu.max": "100000 100000", "cpu.max": "max 100000"}, "0::/jobs/a\n", 1.0),  # v2, the process's own
    ({"cpu/cpu.cfs_quota_us": "200000", "cpu/cpu.cfs_period_us": "100000"}, "2:cpu,cpuacct:/\n", 2.0),  # v1
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, "", 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, "1:cpu:/\n", None),  # v1 without
    ({}, "", None),  # no cgroup files at all (not Linux's layout)
])
def test_the_cgroup_quota_is_read_from_v1_and_v2(tmp_path, files, own, quota):
    root, proc = cgroup_tree(tmp_path, files, own)
    assert cgroup_cpu_quota(root, proc) == quota
    expected = AFFINITY if quota is None else max(1, min(AFFINITY, int(quota)))
    assert usable_cores(root, proc) == expected


def test_a_quota_below_the_affinity_bounds_the_cores(tmp_path):
    root, proc = cgroup_tree(tmp_path, {"cpu.max": "100000 100000"})
    assert usable_cores(root, proc) == 1 <= AFFINITY


def test_threads_default_to_the_usable_cores_and_wait_passively():
    env: dict[str, str] = {}
    previous = torch.get_num_threads()
    try:
        assert configure_threads(env=env, cores=3) == 3
        assert env == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"}
        assert torch.get_num_threads() == 3  # torch already imported: set directly
        assert configure_threads(2, env=env) == 2 and env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    finally:
        torch.set_num_threads(previous)


def test_the_users_choices_are_respected():
    env = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"}
    assert configure_threads(env=env, cores=8) is None
    assert env == {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"}
    env = {"MKL_NUM_THREADS": "4"}
    assert configure_threads(env=env, cores=8) is None and "OMP_NUM_THREADS" not in env


def run_python(code: str, **variables: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update(PYTHONPATH=str(ROOT / "src"), **variables)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_a_fresh_process_computes_with_the_usable_cores_unless_told():
    """Set before torch is imported, the variables reach its OpenMP runtime."""
    code = ("import os; from retromae.runtime.threads import configure_threads; configure_threads(); import torch; "
            "print(torch.get_num_threads(), os.environ['OMP_WAIT_POLICY'])")
    assert run_python(code) == f"{usable_cores()} PASSIVE"
    assert run_python(code, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="ACTIVE") == "1 ACTIVE"


def test_threads_is_a_global_option_before_or_after_the_command():
    assert _chosen_command(["--threads", "2", "evaluate", "--run", "r"]) == "evaluate"
    for argv in (["--threads", "2", "bm25", "--data", "d", "--output", "o"],
                 ["bm25", "--data", "d", "--output", "o", "--threads", "2"]):
        assert _threads(build_parser(argv).parse_args(argv)) == 2
    with pytest.raises(SystemExit):
        build_parser(["--threads", "0", "bm25"]).parse_args(["--threads", "0", "bm25"])
