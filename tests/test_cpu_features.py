"""The processor's description read from /proc/cpuinfo (`retromae.runtime.cpu_features`), on a written stand-in."""

from __future__ import annotations

import pytest

from retromae.runtime import cpu_features
from retromae.runtime.options import ConfigError

XEON = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse2 avx2 avx512f avx512bw "
        "avx_vnni avx512_bf16 amx_bf16 amx_tile amx_int8 sha_ni\n\nprocessor\t: 1\nmodel name\t: other\n")
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n"


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    def write(text: str) -> None:
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        monkeypatch.setattr(cpu_features, "CPUINFO", path)
        cpu_features._cpuinfo_fields.cache_clear()
    yield write
    cpu_features._cpuinfo_fields.cache_clear()


def test_an_intel_xeon_with_amx(cpuinfo):
    cpuinfo(XEON)
    assert cpu_features.cpu_model() == "Intel(R) Xeon(R) Processor"  # the first processor's
    assert cpu_features.vector_extensions() == ["avx2", "avx512f", "avx512bw", "avx_vnni", "avx512_bf16", "amx_bf16",
                                                "amx_tile", "amx_int8"]


def test_auto_precision_is_bf16_where_the_cpu_has_amx_unless_the_variable_says(cpuinfo, monkeypatch):
    monkeypatch.delenv(cpu_features.AUTO_BF16_VARIABLE, raising=False)
    cpuinfo(XEON)
    assert cpu_features.auto_bf16()
    cpuinfo(EPYC.replace("avx512_vnni", "avx512_vnni avx512_bf16"))  # AVX-512 bf16 without AMX: not measured
    assert not cpu_features.auto_bf16()
    for value, expected in (("1", True), ("0", False), (" 1 ", True)):
        monkeypatch.setenv(cpu_features.AUTO_BF16_VARIABLE, value)
        assert cpu_features.auto_bf16() is expected
    monkeypatch.setenv(cpu_features.AUTO_BF16_VARIABLE, "yes")
    with pytest.raises(ConfigError, match=r"^\$RETROMAE_CPU_BF16: must be 0 .* or 1 .* got 'yes'$"):
        cpu_features.auto_bf16()


def test_an_epyc_and_a_machine_without_cpuinfo(cpuinfo, tmp_path, monkeypatch):
    cpuinfo(EPYC)
    assert cpu_features.cpu_model() == "AMD EPYC 9B14"
    monkeypatch.setattr(cpu_features, "CPUINFO", tmp_path / "absent")
    cpu_features._cpuinfo_fields.cache_clear()
    assert cpu_features.vector_extensions() == [] and cpu_features.cpu_model()  # the platform's name
