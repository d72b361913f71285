"""Multi-head self-attention with the original BERT's additive key mask."""
from __future__ import annotations

import math

import keras
import tensorflow as tf

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.embeddings import truncated_normal

# The original adds (1 - mask) * -10000 to the attention logits of masked keys.
MASK_ADDER = -10000.0


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
    return ((1.0 - mask) * MASK_ADDER)[:, tf.newaxis, tf.newaxis, :]


class BertSelfAttention(keras.layers.Layer):
    """Scaled dot-product self-attention over `num_attention_heads` heads.

    Variables (original names under `.../attention/self/`): `query`, `key`, `value`, each a Dense
    with kernel [H, H] and bias [H].
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        init = truncated_normal(config)
        self.query = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="query")
        self.key = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="key")
        self.value = keras.layers.Dense(config.hidden_size, kernel_initializer=init, name="value")
        self.dropout = BertDropout(config.attention_probs_dropout_prob)

    def build(self, input_shape) -> None:
        for dense in (self.query, self.key, self.value):
            dense.build(input_shape)
        self.built = True

    def _projected_heads(self, hidden_states: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Query (already scaled by 1/√head_size), key and value, each [B, N, S, D].

        One matmul with the three kernels side by side ([H, 3H]) instead of three [H, H] ones:
        the same dot products, a larger (faster) matmul, and one input-gradient matmul in the
        backward pass instead of three summed. The 1/√D score scale is folded into the query
        kernel and bias (exact when D is a power of 4, e.g. 64; otherwise a rounding-level
        difference from scaling the scores).
        """
        dtype = hidden_states.dtype
        scale = 1.0 / math.sqrt(float(self.head_size))
        kernel = tf.concat([tf.cast(self.query.kernel, dtype) * tf.cast(scale, dtype),
                            tf.cast(self.key.kernel, dtype), tf.cast(self.value.kernel, dtype)],
                           axis=1)
        bias = tf.concat([tf.cast(self.query.bias, dtype) * tf.cast(scale, dtype),
                          tf.cast(self.key.bias, dtype), tf.cast(self.value.bias, dtype)], axis=0)
        batch, seq = tf.shape(hidden_states)[0], tf.shape(hidden_states)[1]
        flat = tf.reshape(hidden_states, [-1, tf.shape(hidden_states)[-1]])
        qkv = tf.nn.bias_add(tf.matmul(flat, kernel), bias)  # [B*S, 3H]
        qkv = tf.reshape(qkv, [batch, seq, 3, self.num_heads, self.head_size])
        qkv = tf.transpose(qkv, [2, 0, 3, 1, 4])  # [3, B, N, S, D]
        shape = tf.shape(qkv)[1:]
        q, k, v = (tf.reshape(t, shape) for t in tf.split(qkv, 3, axis=0))
        return q, k, v

    def _projected_heads_at(self, hidden_states: tf.Tensor, queries: tf.Tensor
                            ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Like `_projected_heads`, with queries only for the rows `queries` [B, Q, H] (already
        gathered): returns q [B, N, Q, D] (scaled) and k, v [B, N, S, D] for every position."""
        dtype = hidden_states.dtype
        scale = 1.0 / math.sqrt(float(self.head_size))
        kernel = tf.concat([tf.cast(self.key.kernel, dtype), tf.cast(self.value.kernel, dtype)],
                           axis=1)
        bias = tf.concat([tf.cast(self.key.bias, dtype), tf.cast(self.value.bias, dtype)], axis=0)
        batch, seq = tf.shape(hidden_states)[0], tf.shape(hidden_states)[1]
        width = tf.shape(hidden_states)[-1]
        kv = tf.nn.bias_add(tf.matmul(tf.reshape(hidden_states, [-1, width]), kernel), bias)
        kv = tf.transpose(tf.reshape(kv, [batch, seq, 2, self.num_heads, self.head_size]),
                          [2, 0, 3, 1, 4])  # [2, B, N, S, D]
        shape = tf.shape(kv)[1:]
        k, v = (tf.reshape(t, shape) for t in tf.split(kv, 2, axis=0))
        num_queries = tf.shape(queries)[1]
        q = tf.nn.bias_add(tf.matmul(tf.reshape(queries, [-1, width]),
                                     tf.cast(self.query.kernel, dtype) * tf.cast(scale, dtype)),
                           tf.cast(self.query.bias, dtype) * tf.cast(scale, dtype))
        q = tf.transpose(tf.reshape(q, [batch, num_queries, self.num_heads, self.head_size]),
                         [0, 2, 1, 3])
        return q, k, v

    def call(self, hidden_states: tf.Tensor, mask_adder: tf.Tensor, training: bool | None = None,
             return_probs: bool = False, query_positions: tf.Tensor | None = None):
        """Attends every position (or only `query_positions`) to every unmasked position.

        Args:
          hidden_states: float [batch, seq_len, H].
          mask_adder: [batch, 1, 1, seq_len] from `attention_mask_adder`.
          training: enables dropout on the attention probabilities.
          return_probs: also return the probabilities.
          query_positions: optional int [batch, Q]: compute the output only for these positions
            (keys and values still cover the whole sequence). Each output row equals the full
            computation's row at that position.

        Returns:
          context float [batch, seq_len or Q, H]; with `return_probs`, also probs
          [batch, N, seq_len or Q, seq_len].
        """
        if query_positions is None:
            q, k, v = self._projected_heads(hidden_states)
        else:
            queries = tf.gather(hidden_states, tf.cast(query_positions, tf.int32), batch_dims=1)
            q, k, v = self._projected_heads_at(hidden_states, queries)
        scores = tf.matmul(q, k, transpose_b=True)  # [B, N, S, S], already scaled
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
