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


ONEDNN_CHOICES = ("auto", "tf_default", "1", "0")
ONEDNN_HELP = (
    "TensorFlow's oneDNN kernels (TF_ENABLE_ONEDNN_OPTS) in every TF worker, so that all "
    "implementations run on the same CPU kernels: auto (default) = what `import bert_tf` picks "
    "for this CPU (bert_tf.cpu_setup: 1 on x86-64 with avx2+fma where TF would leave oneDNN "
    "off), tf_default = TensorFlow's own choice (what a process that imports TensorFlow first "
    "gets), 1 or 0 = forced")


def onednn_setting(choice: str) -> str | None:
    """The TF_ENABLE_ONEDNN_OPTS value the bench's TF workers get for `choice` (of ONEDNN_CHOICES),
    or None to leave the variable as the caller's environment has it (tf_default, or auto where
    bert_tf would not set it). A value in the caller's environment wins over auto, as it does
    for `import bert_tf`."""
    if choice in ("0", "1"):
        return choice
    if choice == "tf_default":
        return None
    if choice != "auto":
        raise ValueError(f"--onednn={choice!r}: expected one of {ONEDNN_CHOICES}")
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from bert_tf import cpu_setup  # imports nothing heavy (no TensorFlow)
    if cpu_setup.ONEDNN_ENV in os.environ:
        return os.environ[cpu_setup.ONEDNN_ENV]
    return cpu_setup.onednn_choice(environ={}, tensorflow_loaded=False)


def onednn_env(choice: str) -> tuple[dict, dict]:
    """(environment entries for the TF workers, the record for the JSON summary)."""
    value = onednn_setting(choice)
    env = {} if value is None else {"TF_ENABLE_ONEDNN_OPTS": value}
    return env, {"choice": choice, "TF_ENABLE_ONEDNN_OPTS": value or "unset (TF's default)"}
