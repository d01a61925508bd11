"""What this machine's processor offers, read from /proc/cpuinfo without importing torch: its model name, its vector
extensions (AVX2, AVX-512, AMX and their kin) and whether it multiplies bf16 matrices natively (AMX or AVX-512 bf16).

Owns reading the processor's description. Does not own what is done with it: the vocabulary loss measured per CPU
model (`retromae.training.vocabulary_choice`), the precision a training run picks (`retromae.training.loop`), the
benchmarks' headers.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
VECTOR_PREFIXES = ("avx2", "avx_vnni", "avx512", "amx")  # the extensions worth naming beside a figure
BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # bf16 matrix products in hardware: AMX tiles, or AVX-512 dot products


@functools.cache
def _cpuinfo_fields() -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo; empty where there is none (macOS, Windows)."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    """The processor's model name, else what the platform says."""
    return _cpuinfo_fields().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def vector_extensions() -> list[str]:
    """The processor's vector-extension flags (avx2, avx512*, amx*, avx_vnni), in /proc/cpuinfo's order."""
    return [flag for flag in _cpuinfo_fields().get("flags", "").split() if flag.startswith(VECTOR_PREFIXES)]


def has_bf16_matrix_units() -> bool:
    """Whether the processor multiplies bf16 matrices in hardware (AMX bf16 or AVX-512 bf16)."""
    return any(flag in BF16_FLAGS for flag in vector_extensions())
