"""The warning for mixed_bfloat16 on a CPU without bfloat16 instructions (read from a cpuinfo
file written here, so the test does not depend on the machine that runs it)."""
from bert_tf.training.precision import cpu_has_native_bfloat16, slow_bfloat16_warning

NO_BF16 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
BF16 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx512f amx_tile amx_bf16 amx_int8\n"


def _cpuinfo(tmp_path, text):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return str(path)


def test_flags_read_from_cpuinfo(tmp_path):
    assert cpu_has_native_bfloat16(_cpuinfo(tmp_path, NO_BF16)) is False
    assert cpu_has_native_bfloat16(_cpuinfo(tmp_path, BF16)) is True
    assert cpu_has_native_bfloat16(_cpuinfo(tmp_path, AMX)) is True
    assert cpu_has_native_bfloat16(str(tmp_path / "absent")) is None
    assert cpu_has_native_bfloat16(_cpuinfo(tmp_path, "processor\t: 0\n")) is None


def test_warns_only_for_bfloat16_on_a_cpu_without_it_and_no_accelerator(tmp_path):
    slow = _cpuinfo(tmp_path, NO_BF16)
    message = slow_bfloat16_warning("mixed_bfloat16", accelerators=0, cpuinfo_path=slow)
    assert message.startswith("--mixed_precision=mixed_bfloat16: this CPU has no bfloat16")
    assert "--mixed_precision=float32" in message and slow in message
    assert slow_bfloat16_warning("float32", accelerators=0, cpuinfo_path=slow) is None
    assert slow_bfloat16_warning("mixed_float16", accelerators=0, cpuinfo_path=slow) is None
    assert slow_bfloat16_warning("mixed_bfloat16", accelerators=1, cpuinfo_path=slow) is None
    for text in (BF16, AMX):
        assert slow_bfloat16_warning("mixed_bfloat16", accelerators=0,
                                     cpuinfo_path=_cpuinfo(tmp_path, text)) is None
    assert slow_bfloat16_warning("mixed_bfloat16", accelerators=0,
                                 cpuinfo_path=str(tmp_path / "absent")) is None
