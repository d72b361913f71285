"""Activation recomputation per transformer block (`--recompute_activations`), both families.

A block run through `recompute_block` keeps only its inputs for the backward pass and computes
its activations again there (`tf.recompute_grad`): the same gradients, the activation memory of
one block instead of all of them, about one more forward pass of compute.

Dropout inside a block draws its masks from stateful seed generators (`BertDropout`,
`GptDropout`), which a second forward pass would advance again and draw other masks from. So the
block's generator states are read before the forward pass and passed in as inputs: the
recomputed pass first puts them back, draws exactly the forward pass's masks and leaves the
streams where the forward pass left them (the checkpointed random state is the one without
recomputation).

`enable_recompute(model)` switches it on for every `BertEncoder` / `GptModel` inside a model
(a training-time setting, not saved with the model); blocks recompute only when training and
when no per-block extra output (attention probabilities, cached keys) is asked for.
"""
from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf

__all__ = ["enable_recompute", "recompute_block", "seed_generators_of"]


def seed_generators_of(layer: keras.layers.Layer) -> list:
    """The `keras.random.SeedGenerator`s of `layer` and its sublayers (its dropout streams)."""
    found, seen = [], set()
    for sub in [layer, *layer._flatten_layers(include_self=False)]:  # noqa: SLF001 (Keras' walk)
        generator = getattr(sub, "seed_generator", None)
        if generator is not None and id(generator) not in seen:
            seen.add(id(generator))
            found.append(generator)
    return found


def recompute_block(block: keras.layers.Layer, call: Callable[..., tf.Tensor],
                    *inputs: tf.Tensor) -> tf.Tensor:
    """`call(*inputs)` (the block's training forward pass, one float output) with its
    activations recomputed in the backward pass (see the module docstring).

    Args:
      block: the layer whose variables and dropout streams `call` uses.
      call: inputs -> output tensor, e.g. `lambda h, m: block(h, m, training=True)`.
      *inputs: the tensors `call` takes (e.g. hidden states [batch, seq, H] and the attention
        mask adder [batch, 1, 1, seq]).
    Returns: `call(*inputs)`.
    """
    generators = seed_generators_of(block)
    states = [tf.identity(g.state.value) for g in generators]

    def forward(*args):
        tensors, saved = args[:len(inputs)], args[len(inputs):]
        # The streams back to their pre-forward states (a no-op in the forward pass); TF's
        # automatic control dependencies order these writes before the dropout layers' reads.
        for generator, state in zip(generators, saved):
            generator.state.assign(state)
        return call(*tensors)

    return tf.recompute_grad(forward)(*inputs, *states)


def enable_recompute(model: keras.layers.Layer, enabled: bool = True) -> int:
    """Sets `recompute_activations` on every layer of `model` that has it (`BertEncoder`,
    `GptModel`); returns how many. Call before the training step is traced."""
    count = 0
    for layer in [model, *model._flatten_layers(include_self=False)]:  # noqa: SLF001
        if hasattr(layer, "recompute_activations"):
            layer.recompute_activations = bool(enabled)
            count += 1
    return count
