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

    Under a strategy with n replicas, each holding one 1/n slice of the global batch (rows
    [r·b, (r+1)·b) on replica r), replica r draws its slice of the mask one device would draw for
    the whole global batch (Philox is counter-based: the replica starts the same stream at its
    offset). So the replicas' masks differ, and training with dropout gives the one-device losses
    at the same global batch. The stream's state (one `[seed, counter]` per layer, mirrored) is
    checkpointed by `bert_tf.training.random_state.training_random_state`.
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
        size = tf.size(inputs)
        replica = tf.distribute.get_replica_context()
        if replica is not None and replica.num_replicas_in_sync > 1:
            halves = _replica_slice_of_stream(seed, size, replica.replica_id_in_sync_group)
        else:
            bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None,
                                               maxval=None, dtype=tf.uint32)
            halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
        keep = tf.reshape(halves >= tf.constant(self.threshold, tf.uint16), tf.shape(inputs))
        scale = _LEVELS / (_LEVELS - self.threshold)
        mask = tf.where(keep, tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype))
        return inputs * mask


def _replica_slice_of_stream(seed, size, replica_id):
    """uint16 elements [r·size, (r+1)·size) of the stream `stateless_uniform(seed)` draws
    (as uint32 pairs) for one device, drawn from Philox counter block ⌊r·size / 8⌋ on.

    Args: seed int32 [2]; size: elements per replica (int32 scalar); replica_id: r (scalar).
    Returns: uint16 [size].
    """
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    start = tf.cast(replica_id, tf.int64) * tf.cast(size, tf.int64)  # first uint16 element
    block = start // 8  # a Philox block gives 4 uint32 = 8 uint16
    skip = start - block * 8
    low = counter[0] + tf.cast(block, tf.uint64)
    carry = tf.cast(low < counter[0], tf.uint64)  # the counter is 128 bits
    counter = tf.stack([low, counter[1] + carry])
    words = (skip + tf.cast(size, tf.int64) + 1) // 2
    bits = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=tf.reshape(words, [1]), key=key, counter=counter, alg=1, dtype=tf.uint32)  # Philox
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])
    return halves[skip:skip + tf.cast(size, tf.int64)]
