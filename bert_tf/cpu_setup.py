"""TensorFlow's oneDNN kernels on every x86-64 CPU that can run them, set before TensorFlow loads.

TensorFlow's Linux x86-64 wheels turn their oneDNN (MKL) CPU kernels on by default only on CPUs
with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX; elsewhere (an AVX2 CPU such as AMD EPYC Zen 3,
or an AVX-512 one without VNNI) they run Eigen's kernels, and none of the fusions bert_tf's
graphs are shaped for (bias + GELU in one matmul kernel, LayerNorm as one `_MklLayerNorm`,
attention scores with their scale and mask in one batch matmul) happen. On an AMD EPYC family
25 (AVX2, no AVX-512) host, oneDNN made a MiniLM fine-tuning step 1.9x and a prediction call
1.56x faster (docs/performance.md, "The AVX2 host"). oneDNN's kernels run on any CPU with AVX2
and FMA.

`import bert_tf` therefore sets TF_ENABLE_ONEDNN_OPTS=1 when all of these hold: the variable is
not set (TF_ENABLE_ONEDNN_OPTS=0 keeps TensorFlow's own default choice: Eigen on such CPUs),
TensorFlow is not imported yet (the variable is read once, when it loads), the machine is
x86-64 and /proc/cpuinfo lists avx2 and fma. On CPUs where TensorFlow turns oneDNN on anyway
this changes nothing. This module imports nothing heavy.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import MutableMapping

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
ONEDNN_CPU_FLAGS = ("avx2", "fma")


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> set[str] | None:
    """The first processor's flags in `cpuinfo_path`; None where it cannot be read."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def onednn_choice(environ: MutableMapping[str, str] | None = None,
                  cpuinfo_path: str = "/proc/cpuinfo", machine: str | None = None,
                  tensorflow_loaded: bool | None = None) -> str | None:
    """The TF_ENABLE_ONEDNN_OPTS value bert_tf sets ("1"), or None when it leaves it alone
    (already set; TensorFlow already loaded; not x86-64; no avx2 or fma, or no cpuinfo)."""
    environ = os.environ if environ is None else environ
    machine = platform.machine() if machine is None else machine
    if tensorflow_loaded is None:
        tensorflow_loaded = "tensorflow" in sys.modules
    if ONEDNN_ENV in environ or tensorflow_loaded:
        return None
    if machine.lower() not in ("x86_64", "amd64"):
        return None
    flags = cpu_flags(cpuinfo_path)
    if flags is None or not set(ONEDNN_CPU_FLAGS) <= flags:
        return None
    return "1"


def use_onednn_kernels(environ: MutableMapping[str, str] | None = None, **kwargs) -> bool:
    """Sets TF_ENABLE_ONEDNN_OPTS=1 where `onednn_choice` says so; True when it did."""
    environ = os.environ if environ is None else environ
    value = onednn_choice(environ, **kwargs)
    if value is None:
        return False
    environ[ONEDNN_ENV] = value
    return True
