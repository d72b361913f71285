"""Dropout with 16-bit random draws: the Keras layer's behaviour at half the random-number cost.

BERT drops 10% of every hidden state and of every attention probability while training; on a CPU,
generating those random numbers is one of the largest costs of a training step after the matmuls.
`BertDropout` draws 16 random bits per element (two per 32-bit Philox output) and compares them
with an integer threshold, instead of a float in [0, 1) per element.
"""
from __future__ import annotations

import keras
import tensorflow as tf

_LEVELS = 1 << 16


@keras.saving.register_keras_serializable(package="bert_tf")
class BertDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, seed handling and inference behaviour) whose mask
    comes from 16-bit random integers.

    An element is dropped with probability `round(rate · 65536) / 65536` (0.1 → 0.10000610) and
    kept ones are scaled by the inverse of the exact keep probability, so the expectation is
    unchanged. The mask does not depend on the input, so the backward pass is one multiply.

    Under a strategy with several replicas each replica draws its own mask (the replica id is
    folded into the seed); the stream's state is checkpointed by
    `bert_tf.training.random_state.training_random_state`.
    """

    def __init__(self, rate: float, noise_shape=None, seed=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("BertDropout does not support noise_shape; use keras.layers.Dropout")
        super().__init__(rate, seed=seed, **kwargs)
        self.threshold = int(round(float(rate) * _LEVELS))

    def call(self, inputs, training=False):
        if not training or self.threshold == 0:
            return inputs
        if self.threshold >= _LEVELS:
            return tf.zeros_like(inputs)
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # Keras keeps int64 seed state; stateless ops want int32
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        replica = tf.distribute.get_replica_context()
        if replica is not None and replica.num_replicas_in_sync > 1:
            # The (mirrored, checkpointed) state is the same on every replica: fold the replica
            # id in so that replicas draw different masks, reproducibly after a restore.
            seed = tf.random.experimental.stateless_fold_in(
                seed, tf.cast(replica.replica_id_in_sync_group, tf.int32))
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None,
                                           dtype=tf.uint32)
        halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
        keep = tf.reshape(halves >= tf.constant(self.threshold, tf.uint16), tf.shape(inputs))
        scale = _LEVELS / (_LEVELS - self.threshold)
        mask = tf.where(keep, tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype))
        return inputs * mask
