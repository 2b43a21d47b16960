"""CPU feature detection from faked /proc/cpuinfo text, and dtype auto built on it."""

import pytest
import torch

from decoding_adapters.lm import models
from decoding_adapters.lm.cpu_features import CpuFeatures, cap_flags, cpu_features, parse_cpuinfo

AVX2_ONLY = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 avx avx2 fma

processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 avx avx2 fma
"""
AVX512_BF16 = "model name\t: AMD EPYC 9B14\nflags\t\t: avx2 avx512f avx512bw avx512_bf16\n"
AMX = "model name\t: Intel Xeon Platinum 8480C\nflags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n"


@pytest.mark.parametrize(
    "text, model, native, dtypes",
    [(AVX2_ONLY, "AMD EPYC 7B13", False, ("fp32",)), (AVX512_BF16, "AMD EPYC 9B14", True, ("fp32", "bf16")),
     (AMX, "Intel Xeon Platinum 8480C", True, ("fp32", "bf16"))],
)
def test_native_bf16_needs_avx512_bf16_or_amx(text, model, native, dtypes):
    cpu = parse_cpuinfo(text)
    assert cpu.model == model
    assert cpu.native_bf16 is native
    assert cpu.fast_dtypes == dtypes
    assert cpu.relevant()["avx2"] and cpu.relevant()["avx512f"] is ("avx512f" in text)
    assert ("+avx512_bf16" in cpu.describe()) is ("avx512_bf16" in text)


def test_avx512bw_alone_is_not_bf16():
    cpu = parse_cpuinfo("model name: X\nflags: avx512f avx512bw avx512_vnni\n")
    assert not cpu.native_bf16 and cpu.relevant() == {
        "avx2": False, "avx512f": True, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}


def test_unreadable_cpuinfo_means_no_flags(tmp_path):
    cpu = cpu_features(tmp_path / "missing")
    assert cpu == CpuFeatures(model="unknown", flags=frozenset()) and not cpu.native_bf16
    assert parse_cpuinfo("garbage without colons").model == "unknown"
    with pytest.raises(ValueError):
        CpuFeatures(model="", flags=frozenset())


def test_dtype_auto_follows_the_detected_flags(monkeypatch):
    for text, expected in ((AVX2_ONLY, torch.float32), (AVX512_BF16, torch.bfloat16), (AMX, torch.bfloat16)):
        monkeypatch.setattr(models, "cpu_features", lambda text=text: parse_cpuinfo(text))
        assert models.cpu_has_native_bf16() is (expected == torch.bfloat16)
        assert models.resolve_dtype("auto", torch.device("cpu")) == expected
        assert models.resolve_dtype("float32", torch.device("cpu")) == torch.float32


@pytest.mark.parametrize("isa, native, avx512", [
    ("AVX2", False, False), ("avx512_core_vnni", False, True), ("AVX512_CORE_BF16", True, True),
    ("ALL", True, True), (None, True, True)])
def test_onednn_isa_cap_drops_the_flags_above_it(isa, native, avx512):
    sapphire_rapids = "model name: Intel Xeon\nflags: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
    cpu = cap_flags(parse_cpuinfo(sapphire_rapids), isa)
    assert ("amx_bf16" in cpu.flags) is (isa in (None, "ALL"))
    assert cpu.native_bf16 is native and ("avx512f" in cpu.flags) is avx512 and "avx2" in cpu.flags
    assert ("capped" in cpu.model) is (isa not in (None, "ALL"))
    assert not cap_flags(parse_cpuinfo(AVX512_BF16), "AVX512_CORE_BF16").flags ^ parse_cpuinfo(AVX512_BF16).flags


def test_a_capped_run_picks_float32(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(AVX512_BF16)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not cpu_features(info).native_bf16
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert cpu_features(info).native_bf16
