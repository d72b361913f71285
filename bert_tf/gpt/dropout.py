"""Dropout as the original applies it, with a hook that replays recorded keep masks.

The original calls `tf.nn.dropout(x, keep_prob[, noise_shape])` only when `train` is true and the
rate is positive. `GptDropout` is `keras.layers.Dropout` (same seed generator, same inference
behaviour, exact rate, `noise_shape` supported; 16-bit inputs are compared with float32 draws,
where Keras' layer would drop 10.16% for a rate of 0.1 in bfloat16) plus one testing hook:
`injected_keep_masks` makes chosen layers use given boolean keep masks instead of drawing their
own, so a train-mode forward pass can be compared with a recording of the original's (whose
random stream no other implementation can reproduce).

In a length-cut training step (`bert_tf.modeling.dropout.dropout_masks_at_padded_length`) the mask
is drawn for the input padded to the full sequence length and cut, so the kept elements are the
padded batch's.

Under a strategy with n replicas, each holding one 1/n slice of the global batch, replica r uses
its slice of the mask one device draws for the global batch (`keras.random.dropout`'s stream of
float draws, started at the replica's offset; as `bert_tf.modeling.dropout.BertDropout` does for
its 16-bit draws), so training with dropout gives the one-device run. Keras' own layer would
draw the same mask on every replica. The embedding table's dropout (`replica_sliced=False`) is
the exception: every replica holds the whole table and applies the one mask one device draws.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import keras
import numpy as np
import tensorflow as tf

from bert_tf.modeling.dropout import padded_batch_mask, padding_active, philox_position


@keras.saving.register_keras_serializable(package="bert_tf")
class GptDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose keep mask can be replaced for a test and whose replicas
    draw their slices of one stream (see module docstring).

    Kept values are scaled as TF's dropout does: `x * (1 / (1 - rate)) * keep`. Any shape; with
    replicas, the first axis (of the input, and of `noise_shape`) is the batch axis unless
    `replica_sliced` is False.
    """

    def __init__(self, rate: float, noise_shape=None, seed=None, replica_sliced: bool = True,
                 **kwargs):
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)
        self.replica_sliced = bool(replica_sliced)
        self._injected_keep_mask: np.ndarray | None = None

    def get_config(self) -> dict:
        return {**super().get_config(), "replica_sliced": self.replica_sliced}

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if self._injected_keep_mask is not None:
            keep = tf.cast(tf.convert_to_tensor(self._injected_keep_mask), inputs.dtype)
            scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
            return inputs * scale * keep
        replica = self._replica() if self.replica_sliced else None
        # 16-bit inputs (mixed precision) are compared with float32 draws: a bfloat16 uniform has
        # 1/128 steps, so `rate` 0.1 would drop 13/128 = 10.16% of the elements.
        draw_dtype = tf.float32 if inputs.dtype in (tf.bfloat16, tf.float16) else inputs.dtype
        if not padding_active() and replica is None and draw_dtype == inputs.dtype:
            return super().call(inputs, training=training)
        # The seed draw and stream of keras.random.dropout; the padded batch's mask cut to this
        # batch's length; this replica's part of the global batch's mask.
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)

        def draw(shape):
            noise_shape = shape if self.noise_shape is None else tf.stack(
                [shape[i] if n is None else n for i, n in enumerate(self.noise_shape)])
            if replica is None:  # the stream keras.random.dropout draws
                uniform = tf.random.stateless_uniform(noise_shape, seed=seed, dtype=draw_dtype)
            else:
                uniform = _replica_slice_of_uniform(seed, noise_shape, draw_dtype, replica)
            scale = tf.constant(1.0 / (1.0 - self.rate), inputs.dtype)
            keep = tf.where(uniform >= tf.constant(self.rate, draw_dtype), scale,
                            tf.constant(0, inputs.dtype))
            return tf.broadcast_to(keep, shape)

        if padding_active():
            return inputs * padded_batch_mask(inputs, draw)
        return inputs * draw(tf.shape(inputs))

    @staticmethod
    def _replica() -> tf.Tensor | None:
        """This replica's index when there are several in sync (else None)."""
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync <= 1:
            return None
        return context.replica_id_in_sync_group


def _replica_slice_of_uniform(seed: tf.Tensor, shape: tf.Tensor, dtype: tf.DType,
                              replica_id) -> tf.Tensor:
    """Elements [r·size, (r+1)·size) of `tf.random.stateless_uniform([n·size], seed, dtype)`
    (one Philox uint32 per element for 16- and 32-bit floats), shaped `shape` [size elements].

    Args: seed int32 [2]; shape int32 [rank] (this replica's); replica_id: r (scalar).
    Returns: `dtype` `shape`, uniform in [0, 1).
    """
    size = tf.reduce_prod(tf.cast(shape, tf.int64))
    per_block = 2 if dtype == tf.float64 else 4
    key, counter, skip = philox_position(seed, tf.cast(replica_id, tf.int64) * size, per_block)
    uniform = tf.raw_ops.StatelessRandomUniformV2(
        shape=tf.reshape(skip + size, [1]), key=key, counter=counter, alg=1, dtype=dtype)
    return tf.reshape(uniform[skip:skip + size], shape)


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
