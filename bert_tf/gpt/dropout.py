"""Dropout as the original applies it, with a hook that replays recorded keep masks.

The original calls `tf.nn.dropout(x, keep_prob[, noise_shape])` only when `train` is true and the
rate is positive. `GptDropout` is `keras.layers.Dropout` (same seed generator, same inference
behaviour, exact rate, `noise_shape` supported) plus one testing hook: `injected_keep_masks`
makes chosen layers use given boolean keep masks instead of drawing their own, so a train-mode
forward pass can be compared with a recording of the original's (whose random stream no other
implementation can reproduce).

In a length-cut training step (`bert_tf.modeling.dropout.dropout_masks_at_padded_length`) the mask
is drawn for the input padded to the full sequence length and cut, so the kept elements are the
padded batch's.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import keras
import numpy as np
import tensorflow as tf

from bert_tf.modeling.dropout import padded_batch_mask, padding_active


@keras.saving.register_keras_serializable(package="bert_tf")
class GptDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose keep mask can be replaced for a test (see module docstring).

    Kept values are scaled as TF's dropout does: `x * (1 / (1 - rate)) * keep`. Any shape.
    """

    def __init__(self, rate: float, noise_shape=None, seed=None, **kwargs):
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)
        self._injected_keep_mask: np.ndarray | None = None

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if self._injected_keep_mask is not None:
            keep = tf.cast(tf.convert_to_tensor(self._injected_keep_mask), inputs.dtype)
            scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
            return inputs * scale * keep
        if not padding_active():
            return super().call(inputs, training=training)
        # The padded batch's mask (the same seed draw and stream as keras.random.dropout's),
        # cut to this batch's length.
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)

        def draw(shape):
            noise_shape = None if self.noise_shape is None else tf.stack(
                [shape[i] if n is None else n for i, n in enumerate(self.noise_shape)])
            return tf.nn.experimental.stateless_dropout(
                tf.ones(shape, inputs.dtype), rate=self.rate, seed=seed, noise_shape=noise_shape)

        return inputs * padded_batch_mask(inputs, draw)


@contextlib.contextmanager
def injected_keep_masks(layers: Mapping[str, GptDropout],
                        masks: Mapping[str, np.ndarray]) -> Iterator[None]:
    """Within the block, each `layers[name]` uses `masks[name]` (bool, True = kept; broadcastable
    to its input, e.g. its noise shape) in training mode instead of a random mask.

    Every name in `masks` must name a layer. For eager calls (a traced function keeps the masks it
    saw when traced). The layers are restored on exit.
    """
    unknown = sorted(set(masks) - set(layers))
    if unknown:
        raise KeyError(f"no dropout layer named {unknown}; known: {sorted(layers)}")
    try:
        for name, mask in masks.items():
            layers[name]._injected_keep_mask = np.asarray(mask, dtype=bool)
        yield
    finally:
        for name in masks:
            layers[name]._injected_keep_mask = None
