"""bench/host.py: the CPU a benchmark summary records (machines of one kind differ)."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

from bert_tf import cpu_setup

SPEC = importlib.util.spec_from_file_location(
    "bench_host", pathlib.Path(__file__).resolve().parents[1] / "bench" / "host.py")
host = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(host)

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni sha_ni

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Other
flags\t\t: avx2 amx_tile
"""


def test_cpu_description_reads_the_first_processor(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    info = host.cpu_description(str(path))
    assert {k: info[k] for k in ("vendor", "family", "model", "stepping", "model_name")} == {
        "vendor": "AuthenticAMD", "family": "26", "model": "2", "stepping": "1",
        "model_name": "AMD EPYC"}
    assert info["matmul_isa"] == ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"]
    assert info["cpu_count"] >= 1 and info["machine"]


def test_cpu_description_without_cpuinfo(tmp_path):
    info = host.cpu_description(str(tmp_path / "missing"))
    assert set(info) == {"cpu_count", "machine"}


def test_onednn_setting_forced_default_and_auto(monkeypatch):
    assert host.onednn_env("1") == ({"TF_ENABLE_ONEDNN_OPTS": "1"},
                                    {"choice": "1", "TF_ENABLE_ONEDNN_OPTS": "1"})
    assert host.onednn_setting("0") == "0"
    assert host.onednn_env("tf_default")[0] == {}
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    # auto: what `import bert_tf` would choose for this CPU in a fresh process
    assert host.onednn_setting("auto") == cpu_setup.onednn_choice(environ={},
                                                                   tensorflow_loaded=False)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # the caller's value wins, as for bert_tf
    assert host.onednn_setting("auto") == "0"
    with pytest.raises(ValueError, match="--onednn='eigen'"):
        host.onednn_setting("eigen")
