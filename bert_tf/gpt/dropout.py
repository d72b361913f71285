"""Dropout as the original applies it, with a hook that replays recorded keep masks.

The original calls `tf.nn.dropout(x, keep_prob[, noise_shape])` only when `train` is true and the
rate is positive. `GptDropout` is `keras.layers.Dropout` (same seed generator, same inference
behaviour, exact rate, `noise_shape` supported) plus one testing hook: `injected_keep_masks`
makes chosen layers use given boolean keep masks instead of drawing their own, so a train-mode
forward pass can be compared with a recording of the original's (whose random stream no other
implementation can reproduce).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import keras
import numpy as np
import tensorflow as tf


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
        return super().call(inputs, training=training)


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
