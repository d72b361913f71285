"""Multi-head self-attention with the original BERT's additive key mask."""
from __future__ import annotations

import math

import keras
import tensorflow as tf

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling import lora
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.embeddings import truncated_normal
from bert_tf.modeling.fused import attention_softmax_dropout
from bert_tf.modeling.serialization import init_kwargs_from_saved, register

# The original adds (1 - mask) * -10000 to the attention logits of masked keys.
MASK_ADDER = -10000.0

# Inference (training false or None) in float32 scales the scores after the q·k matmul, as the
# original does, instead of folding 1/sqrt(D) into the query kernel: matmul → Mul → AddV2 (the
# key mask) is the pattern oneDNN's grappler remapper fuses into one `_MklFusedBatchMatMulV2`,
# which drops the [B, N, S, S] mask add and the kernel scaling from the graph. False: the
# folded form there too (read when a function is traced; bench/profile_finetune.py
# --inference_fusion 0,1).
FUSED_INFERENCE_SCORES = True


def attention_mask_adder(input_mask: tf.Tensor, dtype: tf.DType = tf.float32) -> tf.Tensor:
    """Turns a [batch, seq_len] 0/1 `input_mask` into the additive bias on keys.

    Args:
      input_mask: int or float [batch, seq_len]; 1 = real token, 0 = padding. Only this mask is
        used; token ids play no part (id 0 under a 1 is attended to).
      dtype: dtype of the result.

    Returns:
      [batch, 1, 1, seq_len]: 0 for kept keys, -10000 for masked ones; broadcasts over heads and
      queries (every query row gets the same key mask, as in the original's 3-D mask).
    """
    mask = tf.cast(input_mask, dtype)
    # expand_dims, not [:, tf.newaxis, tf.newaxis, :]: TFLite has no StridedSlice with new axes.
    return tf.expand_dims(tf.expand_dims((1.0 - mask) * MASK_ADDER, 1), 1)


@register
class BertSelfAttention(keras.layers.Layer):
    """Scaled dot-product self-attention over `num_attention_heads` heads.

    Variables (original names under `.../attention/self/`): `query`, `key`, `value`, each a Dense
    with kernel [H, H] and bias [H].
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        init = truncated_normal(config)
        self.query = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="query")
        self.key = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="key")
        self.value = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="value")
        self.dropout = BertDropout(config.attention_probs_dropout_prob)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape) -> None:
        for dense in (self.query, self.key, self.value):
            dense.build(input_shape)
        self.built = True

    def _heads(self, x: tf.Tensor, denses: tuple[keras.layers.Dense, ...],
               scale_first: bool, training: bool | None = None) -> tuple[tf.Tensor, ...]:
        """x [B, S, H] through the kernels of `denses` side by side (one matmul [H, k·H]), split
        into k tensors [B, N, S, D]; with `scale_first` the first one is scaled by 1/√D.

        One matmul instead of k: the same dot products, a larger (faster) matmul, and one
        input-gradient matmul in the backward pass instead of k summed. The 1/√D score scale is
        folded into the query kernel and bias (exact when D is a power of 4, e.g. 64; otherwise a
        rounding-level difference from scaling the scores).

        LoRA (`bert_tf.modeling.lora`): `d.kernel` is the adapted kernel; with adapter dropout
        while training, the base kernels are multiplied here and each adapter's
        `lora.adapter_term` (on the dropped-out input) is added to its columns.
        """
        dtype = x.dtype
        kernels = [tf.cast(lora.layer_kernel(d, training), dtype) for d in denses]
        biases = [tf.cast(d.bias, dtype) for d in denses]
        if scale_first:
            scale = tf.cast(1.0 / math.sqrt(float(self.head_size)), dtype)
            kernels[0], biases[0] = kernels[0] * scale, biases[0] * scale
        kernel = kernels[0] if len(denses) == 1 else tf.concat(kernels, axis=1)
        bias = biases[0] if len(denses) == 1 else tf.concat(biases, axis=0)
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        flat = tf.reshape(x, [-1, tf.shape(x)[-1]])
        out = tf.nn.bias_add(tf.matmul(flat, kernel), bias)  # [B*S, k*H]
        adapters = [lora.adapter_term(flat, d, training) for d in denses]
        if any(a is not None for a in adapters):
            if scale_first and adapters[0] is not None:
                adapters[0] = adapters[0] * scale
            out = out + tf.concat([tf.zeros([tf.shape(flat)[0], d.units], dtype) if a is None
                                   else a for a, d in zip(adapters, denses)], axis=1)
        out = tf.reshape(out, [batch, seq, len(denses), self.num_heads, self.head_size])
        out = tf.transpose(out, [2, 0, 3, 1, 4])  # [k, B, N, S, D]
        shape = tf.shape(out)[1:]
        return tuple(tf.reshape(t, shape) for t in tf.split(out, len(denses), axis=0))

    def call(self, hidden_states: tf.Tensor, mask_adder: tf.Tensor, training: bool | None = None,
             return_probs: bool = False, queries: tf.Tensor | None = None, fused: bool = False):
        """Attends every position (or only the rows `queries`) to every unmasked position.

        Args:
          hidden_states: float [batch, seq_len, H].
          mask_adder: [batch, 1, 1, seq_len] from `attention_mask_adder`.
          training: enables dropout on the attention probabilities.
          return_probs: also return the probabilities.
          queries: optional float [batch, Q, H], rows of `hidden_states` (e.g. gathered at some
            positions): compute the output only for them (keys and values still cover the whole
            sequence). Each output row equals the full computation's row at that position.

        Returns:
          context float [batch, seq_len or Q, H]; with `return_probs`, also probs
          [batch, N, seq_len or Q, seq_len].
        """
        # Folded: 1/sqrt(D) in the query kernel (training, 16-bit inference); else the scores
        # scaled after the matmul, fused with the mask add by oneDNN (FUSED_INFERENCE_SCORES).
        fold = bool(training) or not FUSED_INFERENCE_SCORES or hidden_states.dtype != tf.float32
        if queries is None:
            q, k, v = self._heads(hidden_states, (self.query, self.key, self.value), fold,
                                  training)
        else:
            k, v = self._heads(hidden_states, (self.key, self.value), False, training)
            (q,) = self._heads(queries, (self.query,), fold, training)
        scores = tf.matmul(q, k, transpose_b=True)  # [B, N, S, S], scaled when folded
        if not fold:
            scale = tf.constant(1.0 / math.sqrt(float(self.head_size)), scores.dtype)
            probs = tf.nn.softmax(scores * scale + tf.cast(mask_adder, scores.dtype), axis=-1)
            dropped = self.dropout(probs, training=training)
        elif fused and training:
            dropped, probs = attention_softmax_dropout(
                scores, mask_adder, self.dropout.keep_mask(scores, training),
                self.dropout.keep_scale, return_probs=True)
        else:
            scores = scores + tf.cast(mask_adder, scores.dtype)
            probs = tf.nn.softmax(scores, axis=-1)
            dropped = self.dropout(probs, training=training)
        context = tf.matmul(dropped, v)  # [B, N, S, D]
        context = tf.transpose(context, [0, 2, 1, 3])
        batch, seq = tf.shape(context)[0], tf.shape(context)[1]
        context = tf.reshape(context, [batch, seq, self.num_heads * self.head_size])
        if return_probs:
            return context, probs
        return context
