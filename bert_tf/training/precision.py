"""Mixed precision: the Keras dtype policy a run computes under (`--mixed_precision`).

Every policy keeps the variables (and so the checkpoints) in float32; "mixed_bfloat16" and
"mixed_float16" compute the layers in 16 bits. Losses are computed in float32 and the task models
return float32 logits. "mixed_float16" needs loss scaling, which the pretraining trainers add
(`PretrainingTrainer`: Keras' dynamic `LossScaleOptimizer`); the fine-tuning step has none, so
fine-tuning takes "float32" or "mixed_bfloat16" (bfloat16 has float32's exponent range).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator, TypeVar

from bert_tf.errors import UserInputError

PRECISION_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
FINETUNING_PRECISION_POLICIES = ("float32", "mixed_bfloat16")

_Run = TypeVar("_Run", bound=Callable)


def _check_policy(policy: str, allowed: tuple[str, ...]) -> None:
    if policy not in allowed:
        extra = (" (mixed_float16 needs loss scaling, which only pretraining adds)"
                 if policy == "mixed_float16" else "")
        raise UserInputError(f"--mixed_precision={policy!r}: expected one of "
                             f"{', '.join(allowed)}{extra}")


NATIVE_BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of x86 CPUs with bfloat16 dot-product instructions. Without them oneDNN
emulates bfloat16 matmuls through float32 and `mixed_bfloat16` runs slower than float32 (on an
Intel Xeon with AVX-512 but neither flag, 2026-11-28: GPT-1's LM train step 2.5x float32's time,
keras-hub's GPT-2 1.3x; BERT config-S pretraining 2.4-2.9x)."""


def cpu_has_native_bfloat16(cpuinfo_path: str = "/proc/cpuinfo") -> bool | None:
    """Whether this machine's CPU has bfloat16 dot-product instructions (NATIVE_BFLOAT16_CPU_FLAGS):
    True or False on Linux, None where `cpuinfo_path` cannot be read (not known)."""
    from bert_tf.cpu_setup import cpu_flags

    flags = cpu_flags(cpuinfo_path)
    return None if flags is None else any(flag in flags for flag in NATIVE_BFLOAT16_CPU_FLAGS)


def slow_bfloat16_warning(policy: str, accelerators: int | None = None,
                          cpuinfo_path: str = "/proc/cpuinfo") -> str | None:
    """The warning for `policy` on this machine, or None: "mixed_bfloat16" with no GPU or TPU
    (`accelerators`: how many; default, the ones TensorFlow sees) on a CPU known to lack
    bfloat16 instructions computes slower than float32."""
    if policy != "mixed_bfloat16" or cpu_has_native_bfloat16(cpuinfo_path) is not False:
        return None
    if accelerators is None:
        import tensorflow as tf

        accelerators = sum(len(tf.config.list_physical_devices(kind)) for kind in ("GPU", "TPU"))
    if accelerators:
        return None
    return ("--mixed_precision=mixed_bfloat16: this CPU has no bfloat16 instructions "
            f"({' / '.join(NATIVE_BFLOAT16_CPU_FLAGS)} not in {cpuinfo_path}), so bfloat16 matmuls "
            "are emulated and the run will be slower than with --mixed_precision=float32 "
            "(measured: 2.5x slower for a GPT-1 LM step on such a CPU)")


def _warn_if_slow(policy: str) -> None:
    message = slow_bfloat16_warning(policy)
    if message:
        from absl import logging

        logging.warning(message)


def set_mixed_precision(policy: str) -> None:
    """Sets Keras' global policy to `policy`, one of PRECISION_POLICIES (and warns when
    `slow_bfloat16_warning` applies)."""
    _check_policy(policy, PRECISION_POLICIES)
    _warn_if_slow(policy)
    import keras

    keras.mixed_precision.set_global_policy(policy)


@contextlib.contextmanager
def precision_policy(policy: str, allowed: tuple[str, ...] = PRECISION_POLICIES
                     ) -> Iterator[None]:
    """Computes under `policy` inside the block and restores the previous global policy after
    it (models built inside keep the policy they were built with)."""
    _check_policy(policy, allowed)
    _warn_if_slow(policy)
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def runs_under_precision_policy(allowed: tuple[str, ...] = PRECISION_POLICIES
                                ) -> Callable[[_Run], _Run]:
    """Decorates a run function `run(opts, ...)`: the run builds, trains and predicts under
    `opts.mixed_precision` (one of `allowed`), and Keras' global policy is restored when it
    returns or raises."""

    def decorate(run: _Run) -> _Run:
        @functools.wraps(run)
        def wrapper(opts, *args, **kwargs):
            with precision_policy(opts.mixed_precision, allowed):
                return run(opts, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
