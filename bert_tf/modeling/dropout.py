"""Dropout with 16-bit random draws: the Keras layer's behaviour at half the random-number cost.

BERT drops 10% of every hidden state and of every attention probability while training; on a CPU,
generating those random numbers is one of the largest costs of a training step after the matmuls.
`BertDropout` draws 16 random bits per element (two per 32-bit Philox output) and compares them
with an integer threshold, instead of a float in [0, 1) per element. GPT-1's
`bert_tf.gpt.dropout.GptDropout` draws its masks with the same function (`keep_mask_16bit`).

Length-aware training (`bert_tf.training.finetuning` cuts each batch's sequence axis to its
longest example) keeps the padded path's masks: inside `dropout_masks_at_padded_length(S, L)`,
a dropout layer draws the mask for its input as the S-padded batch has it and uses the part of
this batch (`padded_batch_mask`: sequence axes sliced to [:L], flattened [R·L, ...] tokens taken
from [R, S, ...]), so every kept element is the one the padded batch would keep (Philox draws in
row-major order). Both `BertDropout` and `bert_tf.gpt.dropout.GptDropout` follow it.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

import keras
import tensorflow as tf

LEVELS = 1 << 16  # a 16-bit draw's values: a rate is rounded to a multiple of 1/LEVELS
# (padded length S, this batch's length L) while tracing a length-cut training step; a context
# variable read at trace time, like a name scope (set only by `dropout_masks_at_padded_length`).
_PADDED_LENGTH: contextvars.ContextVar = contextvars.ContextVar("bert_tf_dropout_padded_length",
                                                                default=None)


@contextlib.contextmanager
def dropout_masks_at_padded_length(padded_length: int, length: tf.Tensor,
                                   rows: tf.Tensor) -> Iterator[None]:
    """Within the block (at trace time), dropout masks are drawn as for sequences of
    `padded_length` and cut to the inputs' `length` (see the module docstring).

    Args:
      padded_length: S, the sequence length of the padded batches (e.g. max_seq_length).
      length: int scalar tensor L <= S, the sequence length of this (cut) batch.
      rows: int scalar tensor R, the number of sequences in the batch (e.g. B, or B·C for
        B examples of C choices).
    """
    token = _PADDED_LENGTH.set((int(padded_length), length, rows))
    try:
        yield
    finally:
        _PADDED_LENGTH.reset(token)


def padding_active() -> bool:
    """True inside `dropout_masks_at_padded_length` (while tracing a length-cut step)."""
    return _PADDED_LENGTH.get() is not None


def padded_batch_mask(inputs: tf.Tensor, draw: Callable[[tf.Tensor], tf.Tensor]) -> tf.Tensor:
    """The dropout mask for `inputs` that the S-padded batch would draw, cut to this batch.

    Args:
      inputs: a dropout layer's input, in one of the layouts of a cut batch of R sequences of
        length L: sequence axes (not the first, static size unknown, size L at run time; e.g.
        hidden states [R, L, H], attention probabilities [R, N, L, L]), flattened tokens (first
        axis R·L, e.g. [R·L, H] before a dense layer), or neither (e.g. pooled [R, H]).
      draw: shape int32 [rank] -> the layer's mask of that shape (one random draw).

    Returns:
      `draw(padded shape)` cut to the shape of `inputs` (sequence axes sliced to [:L]; flattened
      tokens drawn as [R, S, ...] and sliced to [:, :L]); `draw(shape)` when nothing is cut.
    """
    padding = _PADDED_LENGTH.get()
    shape = tf.shape(inputs)
    rank = inputs.shape.rank
    if padding is None or rank is None:
        return draw(shape)
    padded_length, length, rows = padding
    padded_length = tf.constant(padded_length, shape.dtype)
    length, rows = tf.cast(length, shape.dtype), tf.cast(rows, shape.dtype)
    dims = [shape[a] for a in range(rank)]
    axes = [a for a in range(1, rank) if inputs.shape[a] is None]
    if axes:  # sequence axes
        for a in axes:
            dims[a] = tf.where(tf.equal(dims[a], length), padded_length, dims[a])
        padded = tf.stack(dims)
        return tf.slice(draw(padded), tf.zeros_like(padded), shape)
    if rank < 2 or inputs.shape[0] is not None:
        return draw(shape)

    def flattened_tokens():
        grid = tf.stack([rows, padded_length] + dims[1:])  # [R, S, ...]
        mask = tf.reshape(draw(tf.stack([rows * padded_length] + dims[1:])), grid)
        mask = tf.slice(mask, tf.zeros_like(grid), tf.stack([rows, length] + dims[1:]))
        return tf.reshape(mask, shape)

    is_tokens = tf.logical_and(tf.equal(dims[0], rows * length), length > 1)
    return tf.cond(is_tokens, flattened_tokens, lambda: draw(shape))


class ScaledKeepMask:
    """The scale-or-zero mask of a dropout layer that draws bool keep masks (`BertDropout`,
    `bert_tf.gpt.dropout.GptDropout`): the layer gives `keep_mask(inputs, training)` and
    `threshold` (the 16-bit drop threshold)."""

    threshold: int

    def keep_mask(self, inputs: tf.Tensor, training=False) -> tf.Tensor | None:
        raise NotImplementedError

    @property
    def keep_scale(self) -> float:
        """The factor of kept elements, 65536 / (65536 - threshold) (0 when all are dropped)."""
        return LEVELS / (LEVELS - self.threshold) if self.threshold < LEVELS else 0.0

    def scale_mask(self, inputs: tf.Tensor, training=False) -> tf.Tensor | None:
        """The mask `call` multiplies `inputs` by (the layer's own draw): inputs' dtype and
        shape, kept elements `keep_scale`, dropped ones 0; None when nothing is dropped
        (inference, rate 0). One draw from the layer's stream, as `call` makes, so a caller that
        applies the mask itself (e.g. `bert_tf.modeling.fused`) keeps the same masks."""
        keep = self.keep_mask(inputs, training)
        if keep is None:
            return None
        return tf.where(keep, tf.constant(self.keep_scale, inputs.dtype),
                        tf.constant(0, inputs.dtype))


@keras.saving.register_keras_serializable(package="bert_tf")
class BertDropout(ScaledKeepMask, keras.layers.Dropout):
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
            raise ValueError("BertDropout does not support noise_shape; "
                             "bert_tf.gpt.dropout.GptDropout draws the same masks with one")
        super().__init__(rate, seed=seed, **kwargs)
        self.threshold = dropout_threshold(rate)

    def call(self, inputs, training=False):
        mask = self.scale_mask(inputs, training)
        return inputs if mask is None else inputs * mask

    def keep_mask(self, inputs: tf.Tensor, training=False) -> tf.Tensor | None:
        """bool, inputs' shape: the elements `call` keeps (`scale_mask` is `keep_scale` there,
        0 elsewhere), from one draw of the layer's stream, as `call` makes; None when nothing
        is dropped. For fused kernels that apply the mask themselves (`bert_tf.modeling.fused`:
        1 byte per element read instead of the float mask)."""
        if not training or self.threshold == 0:
            return None
        if self.threshold >= LEVELS:
            return tf.zeros_like(inputs, tf.bool)
        seed = next_stateless_seed(self.seed_generator)
        if padding_active():  # the padded batch's mask, cut to this batch's length
            return padded_batch_mask(inputs, lambda shape: self._keep(seed, shape))
        return self._keep(seed, tf.shape(inputs), tf.size(inputs))

    def _keep(self, seed: tf.Tensor, shape: tf.Tensor, size: tf.Tensor | None = None) -> tf.Tensor:
        """bool `shape`: the elements kept by the stream of `seed` (this replica's slice)."""
        return keep_mask_16bit(seed, shape, self.threshold, replica_index(), size)


def replica_index() -> tf.Tensor | None:
    """This replica's index in its group when several run in sync (else None: one device)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context.replica_id_in_sync_group


def dropout_threshold(rate: float) -> int:
    """A rate's 16-bit threshold: round(rate · 65536) (0.1 -> 6554, a drop probability of
    0.10000610); 0 drops nothing, 65536 everything."""
    return int(round(float(rate) * LEVELS))


def next_stateless_seed(seed_generator: keras.random.SeedGenerator) -> tf.Tensor:
    """The generator's next seed as the int32 [2] that stateless ops take (Keras keeps int64
    state)."""
    seed = seed_generator.next()
    if seed.dtype != tf.int32:
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return seed


def keep_mask_16bit(seed: tf.Tensor, shape: tf.Tensor, threshold: int, replica_id=None,
                    size: tf.Tensor | None = None) -> tf.Tensor:
    """The keep mask of one 16-bit dropout draw: element i is kept when the i-th uint16 of the
    stateless Philox stream of `seed` (`stateless_uniform` uint32 words, split in halves) is
    >= `threshold` (a drop probability of threshold / 65536).

    Args:
      seed: int32 [2].
      shape: int32 [rank], the mask's shape (this replica's part of the global one).
      threshold: int in (0, 65536) (callers handle rates 0 and 1 without a draw).
      replica_id: r (scalar) when replica r of several draws elements [r·size, (r+1)·size) of the
        stream one device draws for the n-times-larger global shape; None for one device.
      size: the number of elements of `shape`, when already at hand.

    Returns:
      bool `shape`.
    """
    size = tf.reduce_prod(shape) if size is None else size
    if replica_id is not None:
        halves = _replica_slice_of_stream(seed, size, replica_id)
    else:
        bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None,
                                           maxval=None, dtype=tf.uint32)
        halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    return tf.reshape(halves >= tf.constant(threshold, tf.uint16), shape)


def _replica_slice_of_stream(seed, size, replica_id):
    """uint16 elements [r·size, (r+1)·size) of the stream `stateless_uniform(seed)` draws
    (as uint32 pairs) for one device, drawn from Philox counter block ⌊r·size / 8⌋ on.

    Args: seed int32 [2]; size: elements per replica (int32 scalar); replica_id: r (scalar).
    Returns: uint16 [size].
    """
    start = tf.cast(replica_id, tf.int64) * tf.cast(size, tf.int64)  # first uint16 element
    key, counter, skip = philox_position(seed, start, 8)  # a Philox block: 4 uint32 = 8 uint16
    words = (skip + tf.cast(size, tf.int64) + 1) // 2
    bits = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=tf.reshape(words, [1]), key=key, counter=counter, alg=1, dtype=tf.uint32)  # Philox
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])
    return halves[skip:skip + tf.cast(size, tf.int64)]


def philox_position(seed: tf.Tensor, first: tf.Tensor, per_block: int
                    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Where element `first` of the stateless stream of `seed` lies (Philox, TF's CPU/GPU
    algorithm for `alg="auto_select"`): the (key, counter) of the Philox block that holds it and
    how many of that block's elements to skip. `per_block`: elements one block (4 uint32) gives
    (4 floats of 16 or 32 bits, 8 uint16 halves).

    Args: seed int32 [2]; first int64 scalar.
    Returns: key uint64 [1], counter uint64 [2] (128-bit, the carry propagated), skip int64.
    """
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    block = first // per_block
    skip = first - block * per_block
    low = counter[0] + tf.cast(block, tf.uint64)
    carry = tf.cast(low < counter[0], tf.uint64)  # the counter is 128 bits
    return key, tf.stack([low, counter[1] + carry]), skip
