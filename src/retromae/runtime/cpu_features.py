"""What this machine's processor offers, read from /proc/cpuinfo without importing torch: its model name, its vector
extensions (AVX2, AVX-512, AMX and their kin), and whether `auto` precision computes in bf16 on it (`auto_bf16`: one
rule for training and encoding).

Owns reading the processor's description and that rule. Does not own what is done with them: the vocabulary loss
measured per CPU model (`retromae.losses.vocabulary_choice`), the precision a training run or an encoder resolves
(`retromae.runtime.precision`), the benchmarks' headers.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

from retromae.runtime.options import ConfigError

CPUINFO = Path("/proc/cpuinfo")
VECTOR_PREFIXES = ("avx2", "avx_vnni", "avx512", "amx")  # the extensions worth naming beside a figure
# Where bf16 autocast was measured to pay, at equal losses and NDCG: AMX (an Intel Xeon: pre-training and fine-tuning
# steps 0.72-0.73x float32's time, encoding 3.5x the documents a second; docs/performance.md). AVX-512 bf16 without
# AMX (AMD Zen 4/5, Intel Cooper Lake) was not measured on such a CPU (oneDNN capped at its instructions on the Xeon:
# encoding 1.15x, training steps 1.18-1.38x slower), so float32 there.
AUTO_BF16_FLAGS = ("amx_bf16",)
AUTO_BF16_VARIABLE = "RETROMAE_CPU_BF16"  # 1: bf16 on any CPU under auto, 0: float32 (e.g. for bit-stable results)


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


def bf16_override() -> bool | None:
    """What $RETROMAE_CPU_BF16 says: True (1), False (0) or None (unset); ConfigError naming the variable for any
    other value (`retromae.cli` asks before a command imports anything heavy)."""
    chosen = os.environ.get(AUTO_BF16_VARIABLE, "").strip()
    if chosen not in ("", "0", "1"):
        raise ConfigError(f"${AUTO_BF16_VARIABLE}: must be 0 (float32) or 1 (bf16 autocast) or unset (bf16 where "
                          f"the CPU has {' or '.join(AUTO_BF16_FLAGS)}), got {chosen!r}")
    return None if not chosen else chosen == "1"


def auto_bf16() -> bool:
    """Whether `auto` precision (--mixed-precision, --dtype) computes in bf16 autocast on this CPU: where it was
    measured to pay (`AUTO_BF16_FLAGS`), unless $RETROMAE_CPU_BF16 says 1 (always) or 0 (never)."""
    chosen = bf16_override()
    if chosen is not None:
        return chosen
    return any(flag in AUTO_BF16_FLAGS for flag in vector_extensions())
