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


def set_mixed_precision(policy: str) -> None:
    """Sets Keras' global policy to `policy`, one of PRECISION_POLICIES."""
    _check_policy(policy, PRECISION_POLICIES)
    import keras

    keras.mixed_precision.set_global_policy(policy)


@contextlib.contextmanager
def precision_policy(policy: str, allowed: tuple[str, ...] = PRECISION_POLICIES
                     ) -> Iterator[None]:
    """Computes under `policy` inside the block and restores the previous global policy after
    it (models built inside keep the policy they were built with)."""
    _check_policy(policy, allowed)
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
