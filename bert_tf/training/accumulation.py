"""Gradient accumulation for both training loops, and the two memory-saving options.

`--gradient_accumulation_steps=k` keeps the meaning of `--train_batch_size` (the global batch of
one optimizer update, as the original) and computes each update's gradient in k sequential
micro-batches of `train_batch_size / k` examples (per replica: `per_replica_batch / k`), so the
activations held at once are those of one micro-batch. The update is mathematically the one of
the whole batch:

- the loss keeps its global-batch normaliser: a mean over the batch's examples becomes
  Σ_i mean_i / (k · replicas); a (sum, weight) loss (`finetuning.LossFn`), and the pretraining
  losses (masked-LM weights, NSP and GPT-1 token counts), divide the summed micro-batch sums by
  the whole global batch's weight, computed from the batch before the micro-steps;
- the micro-batches' gradients are summed, all-reduced over the replicas once, and then clipped
  by global norm (the original optimizer's clip of the accumulated gradient) and applied once;
- the optimizer's step counter, hence the learning-rate schedule, counts updates, not
  micro-steps; the input position, the checkpoints and `global_step` count updates too.

Checkpoints happen only on update boundaries (the micro-steps run inside one update, the
accumulators are tensors of that update and never outlive it), so a run killed between
micro-steps resumes from its last checkpoint and repeats the interrupted update from its first
micro-batch: bit-identical to an uninterrupted run on one device.

What differs from k = 1: float rounding (sums in another order), and the dropout masks (each
micro-batch draws its own, from the same checkpointed streams). k = 1 runs the loops' original
step, unchanged.

The micro-steps run in one `tf.while_loop` (parallel_iterations=1: one micro-batch's
activations alive at a time), whose body holds no cross-replica synchronisation (tf.distribute
does not allow one inside control flow): the all-reduces run before and after it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.options import option

__all__ = ["MemoryOptions", "MicroBatchContext", "accumulate_gradients", "check_accumulation",
           "micro_batch_totals", "split_micro_batches"]


@dataclasses.dataclass(kw_only=True)
class MemoryOptions:
    """The memory savers every training run shares (declared once: the fine-tuning and
    pretraining runs' option dataclasses and the loops' options inherit them)."""

    gradient_accumulation_steps: int = option(
        1, "Compute each update's gradient in this many sequential micro-batches of "
        "train_batch_size / k examples, summed before clipping and applying: the same update as "
        "the whole batch, with one micro-batch's activation memory. The learning-rate schedule "
        "and checkpoints count updates. 1: the original step.")
    recompute_activations: bool = option(
        False, "Recompute each transformer block's activations in the backward pass instead of "
        "keeping them (tf.recompute_grad per block): the same gradients, less memory, about one "
        "more forward pass of compute.")

    def __post_init__(self) -> None:
        """k < 1 fails when the options are made (right after the flags are parsed); the batch
        split is checked by the loops, which know the number of replicas."""
        check_accumulation(self.gradient_accumulation_steps)

    def check_memory_options(self, train_batch_size: int | None = None,
                             replicas: int = 1) -> None:
        """UserInputError (one line naming the flag) for k < 1 or a batch k cannot split."""
        check_accumulation(self.gradient_accumulation_steps, train_batch_size, replicas)


def check_accumulation(steps, train_batch_size: int | None = None, replicas: int = 1) -> int:
    """Checks `--gradient_accumulation_steps` (an integer >= 1 that splits every replica's share
    of `train_batch_size` evenly); returns it."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UserInputError(f"--gradient_accumulation_steps={steps!r}: expected an integer >= 1")
    if train_batch_size is not None and steps > 1 and train_batch_size % (steps * replicas):
        raise UserInputError(
            f"--gradient_accumulation_steps={steps}: --train_batch_size={train_batch_size} is not "
            f"divisible by {steps} micro-batches x {replicas} replica(s); expected a batch that "
            f"is a multiple of {steps * replicas}")
    return steps


def split_micro_batches(batch: Mapping[str, tf.Tensor], steps: int) -> dict[str, tf.Tensor]:
    """Each feature [b, ...] as [steps, b / steps, ...] (micro-batch i = rows [i·m, (i+1)·m))."""
    out = {}
    for key, value in batch.items():
        value = tf.convert_to_tensor(value)
        rows = value.shape[0]
        micro = rows // steps if rows is not None else tf.shape(value)[0] // steps
        out[key] = tf.reshape(value, tf.concat([[steps, micro], tf.shape(value)[1:]], 0))
    return out


class MicroBatchContext:
    """Stands for the replica context inside a micro-step: `totals` are the global-batch
    normalisers (already summed over the replicas, computed from the whole batch before the
    micro-steps) that a loss hook uses instead of all-reducing its micro-batch's own."""

    def __init__(self, ctx: tf.distribute.ReplicaContext, totals: Mapping[str, tf.Tensor]):
        self._ctx = ctx
        self.totals = dict(totals)
        self.num_replicas_in_sync = ctx.num_replicas_in_sync
        self.replica_id_in_sync_group = ctx.replica_id_in_sync_group

    def all_reduce(self, *args, **kwargs):
        raise UserInputError(
            "--gradient_accumulation_steps > 1: a loss hook all-reduces inside a micro-step; "
            "read the global-batch normalisers from ctx.totals (override `loss_totals`)")


def micro_batch_totals(ctx) -> dict[str, tf.Tensor] | None:
    """The global-batch normalisers when `ctx` is a `MicroBatchContext`, else None."""
    return ctx.totals if isinstance(ctx, MicroBatchContext) else None


MicroStep = Callable[[dict], tuple[tf.Tensor, Sequence[tf.Tensor]]]


def accumulate_gradients(batch: Mapping[str, tf.Tensor], steps: int, variables: Sequence,
                         micro_step: MicroStep, num_values: int
                         ) -> tuple[list[tf.Tensor | None], list[tf.Tensor]]:
    """Sums the gradients of `micro_step`'s objective over `steps` micro-batches of `batch`.

    Args:
      batch: this replica's features, each [b, ...] with b divisible by `steps`.
      steps: k, the number of micro-batches.
      variables: the variables to differentiate (e.g. `model.trainable_variables`).
      micro_step: micro_batch (each feature [b / k, ...]) -> (objective: float scalar whose
        gradients are summed, values: `num_values` float scalars summed too). It must not
        all-reduce across replicas (it runs inside a `tf.while_loop`).
      num_values: how many values `micro_step` returns.

    Returns:
      (gradients: one per variable, dense float, summed over the micro-batches, or None where the
       objective does not depend on the variable; values: the summed values, float32 scalars).
    """
    micro = split_micro_batches(batch, steps)
    no_gradient: list[bool] = [False] * len(variables)

    def body(i, accumulators, sums):
        with tf.GradientTape() as tape:
            objective, values = micro_step({k: v[i] for k, v in micro.items()})
        grads = tape.gradient(objective, variables)
        for j, g in enumerate(grads):  # at trace time (the same in every iteration)
            no_gradient[j] = g is None
        accumulators = [a if g is None else a + tf.cast(tf.convert_to_tensor(g), a.dtype)
                        for a, g in zip(accumulators, grads)]
        sums = [s + tf.cast(x, tf.float32) for s, x in zip(sums, values)]
        return i + 1, accumulators, sums

    zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
    _, grads, sums = tf.while_loop(
        lambda i, *_: i < steps, body,
        (tf.constant(0), zeros, [tf.zeros([], tf.float32)] * num_values),
        parallel_iterations=1)
    return [None if none else g for g, none in zip(grads, no_gradient)], list(sums)
