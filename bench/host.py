"""The machine a benchmark ran on, for its JSON summary.

Machines of one kind are not all the same CPU (2026-11-25/26: "AMD EPYC" hosts whose fp32
matmul peaks differ by 2x), and /proc/cpuinfo's model name alone does not tell them apart, so the
summary records the vendor, family, model and stepping as well. Imported by the bench scripts
that sit beside it (`python bench/<script>.py` puts this folder on sys.path).
"""
from __future__ import annotations

import os
import platform

# The instruction sets TensorFlow's and PyTorch's matrix kernels choose between on x86-64.
MATMUL_ISA = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni"}
_CPUINFO_KEYS = {"model name": "model_name", "vendor_id": "vendor", "cpu family": "family",
                 "model": "model", "stepping": "stepping"}


def cpu_description(cpuinfo_path: str = "/proc/cpuinfo") -> dict:
    """The CPU of this machine: {"cpu_count", "machine", and from `cpuinfo_path` (first processor
    only) "model_name", "vendor", "family", "model", "stepping", "matmul_isa" (sorted list)};
    the cpuinfo fields are absent where the file cannot be read (not Linux)."""
    info: dict = {"cpu_count": os.cpu_count(), "machine": platform.machine()}
    try:
        with open(cpuinfo_path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return info
    first_processor = text.split("\n\n", 1)[0]
    for line in first_processor.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in _CPUINFO_KEYS:
            info[_CPUINFO_KEYS[key]] = value.strip()
        elif key == "flags":
            info["matmul_isa"] = sorted(set(value.split()) & MATMUL_ISA)
    return info
