"""Dropout as the original applies it, with a hook that replays recorded keep masks.

The original calls `tf.nn.dropout(x, keep_prob[, noise_shape])` only when `train` is true and the
rate is positive. `GptDropout` is `keras.layers.Dropout` (same arguments, seed generator and
inference behaviour, `noise_shape` supported) whose masks come from 16-bit random draws, as
`bert_tf.modeling.dropout.BertDropout`'s do: 16 random bits per element (two per 32-bit Philox
output) compared with an integer threshold, so an element is dropped with probability
`round(rate · 65536) / 65536` (0.1 → 0.10000610; a float32 uniform draw gives 0.10000002) and kept
ones are scaled by the inverse of that keep probability. The draws cost half of a float draw per
element (the dropout of GPT-1's [40,737, 256] embedding table: 25.5 → 17.9 ms on 2 CPU cores), and
the mask does not depend on the input's dtype (a bfloat16 uniform would drop 10.16% for 0.1).
One testing hook: `injected_keep_masks` makes chosen layers use given boolean keep masks (scaled
by 1 / (1 − rate), as the original) instead of drawing their own, so a train-mode forward pass can
be compared with a recording of the original's (whose random stream no other implementation can
reproduce).

In a length-cut training step (`bert_tf.modeling.dropout.dropout_masks_at_padded_length`) the mask
is drawn for the input padded to the full sequence length and cut, so the kept elements are the
padded batch's.

Under a strategy with n replicas, each holding one 1/n slice of the global batch, replica r uses
its slice of the mask one device draws for the global batch (the Philox stream started at the
replica's offset, as `BertDropout` does), so training with dropout gives the one-device run.
Keras' own layer would draw the same mask on every replica. The embedding table's dropout
(`replica_sliced=False`) is the exception: every replica holds the whole table and applies the
one mask one device draws.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import keras
import numpy as np
import tensorflow as tf

from bert_tf.modeling.dropout import (LEVELS, ScaledKeepMask, dropout_threshold,
                                      keep_mask_16bit, next_stateless_seed, padded_batch_mask,
                                      padding_active, replica_index)


@keras.saving.register_keras_serializable(package="bert_tf")
class GptDropout(ScaledKeepMask, keras.layers.Dropout):
    """`keras.layers.Dropout` with 16-bit draws, whose keep mask can be replaced for a test and
    whose replicas draw their slices of one stream (see module docstring).

    Kept values are scaled by 65536 / (65536 − threshold), threshold = round(rate · 65536)
    (1 / (1 − rate) with injected masks). Any shape; with replicas, the first axis (of the input,
    and of `noise_shape`) is the batch axis unless `replica_sliced` is False.
    """

    def __init__(self, rate: float, noise_shape=None, seed=None, replica_sliced: bool = True,
                 **kwargs):
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)
        self.replica_sliced = bool(replica_sliced)
        self.threshold = dropout_threshold(rate)
        self._injected_keep_mask: np.ndarray | None = None

    def get_config(self) -> dict:
        return {**super().get_config(), "replica_sliced": self.replica_sliced}

    @property
    def has_injected_mask(self) -> bool:
        """True within `injected_keep_masks` for this layer (then only `call` applies it)."""
        return self._injected_keep_mask is not None

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if self._injected_keep_mask is not None:
            keep = tf.cast(tf.convert_to_tensor(self._injected_keep_mask), inputs.dtype)
            scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
            return inputs * scale * keep
        mask = self.scale_mask(inputs, training)
        return inputs if mask is None else inputs * mask

    def keep_mask(self, inputs: tf.Tensor, training=False) -> tf.Tensor | None:
        """bool, inputs' shape: the elements `call` keeps with its own draw (`scale_mask` is
        `keep_scale` there, 0 elsewhere; broadcast over `noise_shape`), one draw of the layer's
        stream as `call` makes; None when nothing is dropped. For fused kernels that apply the
        mask themselves (`bert_tf.modeling.fused`)."""
        if not training or self.rate <= 0 or self.threshold == 0:
            return None
        if self.threshold >= LEVELS:
            return tf.zeros_like(inputs, tf.bool)
        replica = replica_index() if self.replica_sliced else None
        seed = next_stateless_seed(self.seed_generator)

        def draw(shape):  # int32 [rank] -> the keep mask of that shape
            mask_shape = shape if self.noise_shape is None else tf.stack(
                [shape[i] if n is None else n for i, n in enumerate(self.noise_shape)])
            keep = keep_mask_16bit(seed, mask_shape, self.threshold, replica)
            return keep if self.noise_shape is None else tf.broadcast_to(keep, shape)

        if padding_active():  # the padded batch's mask, cut to this batch's length
            return padded_batch_mask(inputs, draw)
        return draw(tf.shape(inputs))


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
