"""`import bert_tf` turns TensorFlow's oneDNN kernels on (TF_ENABLE_ONEDNN_OPTS=1) on x86-64
CPUs with AVX2 and FMA, before TensorFlow loads, unless the variable is set. The cpuinfo files
are written here, so the checks do not depend on this machine's CPU."""
from __future__ import annotations

import os
import subprocess
import sys

from bert_tf import cpu_setup

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n"
NO_FMA = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n"


def _choice(tmp_path, text, environ=None, machine="x86_64", loaded=False):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return cpu_setup.onednn_choice({} if environ is None else environ, str(path), machine,
                                   tensorflow_loaded=loaded)


def test_on_for_avx2_cpus_only_and_never_over_the_users_setting(tmp_path):
    assert _choice(tmp_path, AVX2) == "1"
    assert _choice(tmp_path, NO_FMA) is None
    assert _choice(tmp_path, AVX2, machine="aarch64") is None
    assert _choice(tmp_path, AVX2, environ={"TF_ENABLE_ONEDNN_OPTS": "0"}) is None
    assert _choice(tmp_path, AVX2, loaded=True) is None  # too late: TF read it already
    assert cpu_setup.onednn_choice({}, str(tmp_path / "missing"), "x86_64", False) is None
    env = {}
    path = tmp_path / "cpuinfo"
    path.write_text(AVX2)
    assert cpu_setup.use_onednn_kernels(env, cpuinfo_path=str(path), machine="x86_64",
                                        tensorflow_loaded=False)
    assert env == {"TF_ENABLE_ONEDNN_OPTS": "1"}


def test_import_bert_tf_before_tensorflow_sets_it_and_zero_keeps_tensorflows_choice():
    """In a real process: what TensorFlow then reports (oneDNN on where the CPU has AVX2 and
    FMA), and TF_ENABLE_ONEDNN_OPTS=0 left as the user set it."""
    code = ("import os, bert_tf; v = os.environ.get('TF_ENABLE_ONEDNN_OPTS');"
            "from tensorflow.python.util import _pywrap_util_port as p;"
            "print(v, p.IsMklEnabled())")
    expected = cpu_setup.onednn_choice({}, tensorflow_loaded=False)
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    value, enabled = out.stdout.split()
    if expected == "1":
        assert (value, enabled) == ("1", "True")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "TF_ENABLE_ONEDNN_OPTS": "0"}, timeout=300)
    assert out.stdout.split() == ["0", "False"], out.stderr[-2000:]
