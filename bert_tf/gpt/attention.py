"""Causal multi-head self-attention as train.py's `attn` / `_attn` / `mask_attn_weights`."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout
from bert_tf.gpt.layers import GptConv1D
from bert_tf.modeling.fused import attention_softmax_dropout

# train.py's `mask_attn_weights`: w * b - 1e9 * (1 - b), not an additive -inf.
MASKED_SCORE = -1e9


def cached_causal_mask_scores(w: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """`causal_mask_scores` for queries at positions index..index+T-1 against the C slots of a
    KV cache (slot s holds position s): scores w [..., T, C] -> w·b − 1e9·(1 − b), b = 1 where
    s ≤ the query's position. Slots past the query (stale or not yet written) get exactly zero
    probability, as later positions do in the original."""
    t, c = tf.shape(w)[-2], tf.shape(w)[-1]
    query_pos = tf.cast(index, tf.int32) + tf.range(t)
    b = tf.cast(tf.range(c)[tf.newaxis, :] <= query_pos[:, tf.newaxis], w.dtype)
    return w * b + MASKED_SCORE * (1.0 - b)


def select_cache_write(cache: tf.Tensor, new: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """cache float [..., C, D] with new [..., T, D] written at slots index..index+T-1 (the slot
    axis is the second last: `GptModel.empty_cache`'s [N·n_head, C, head_size], or any leading
    axes), by TF core ops only (a pad and a select over the C slots): what a SavedModel's
    generation loop uses, since servers without XLA cannot run `XlaDynamicUpdateSlice`."""
    cache, new = tf.convert_to_tensor(cache), tf.convert_to_tensor(new)
    index = tf.cast(index, tf.int32)
    slots, t = tf.shape(cache)[-2], tf.shape(new)[-2]
    rank = new.shape.rank
    paddings = [[0, 0]] * (rank - 2) + [[index, slots - index - t], [0, 0]]
    padded = tf.pad(new, paddings)
    s = tf.range(slots)
    inside = tf.logical_and(s >= index, s < index + t)
    return tf.where(inside[:, tf.newaxis], padded, cache)


def causal_mask_scores(w: tf.Tensor) -> tf.Tensor:
    """train.py's `mask_attn_weights`: scores w [..., S, S] -> w·b − 1e9·(1 − b), b the lower
    triangle (key ≤ query). There is no padding mask."""
    n = tf.shape(w)[-1]
    b = tf.linalg.band_part(tf.ones([n, n], w.dtype), -1, 0)
    return w * b + MASKED_SCORE * (1.0 - b)


@keras.saving.register_keras_serializable(package="bert_tf")
class GptAttention(keras.layers.Layer):
    """train.py's `attn` (with `scale=True`, as `block` calls it).

    Variables (original names under `h<l>/attn/`): `c_attn/w` [1, n_embd, 3·n_embd] and
    `c_attn/b` (q, k, v in that order along the last axis; heads are contiguous blocks of
    n_embd / n_head features), `c_proj/w` [1, n_embd, n_embd], `c_proj/b`.
    Dropouts: `attn_pdrop` on the probabilities, `resid_pdrop` on the output after `c_proj`.

    `cache_write` (not saved): how `call_cached` writes new keys and values into the cache:
    "dynamic_update_slice" (one XLA op, in place under XLA: the Python generation loop) or
    "select" (`select_cache_write`, core ops only: SavedModel exports;
    `bert_tf.gpt.generation.core_ops_cache_writes(model)` switches every block).
    """

    cache_write = "dynamic_update_slice"
    # `project(fused=True)` computes the scale + causal mask + softmax + dropout as
    # `fused.attention_softmax_dropout` only when this is set (not saved). Off: on CPU, XLA's
    # softmax measured slower than oneDNN's (docs/performance.md).
    fused_attention_softmax = False

    def __init__(self, config: GptConfig | dict, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        c = self.config
        self.c_attn = GptConv1D(3 * c.n_embd, c.n_embd, name="c_attn")
        self.c_proj = GptConv1D(c.n_embd, c.n_embd, name="c_proj")
        self.probs_dropout = GptDropout(c.attn_pdrop, name="attn_probs_dropout")
        self.resid_dropout = GptDropout(c.resid_pdrop, name="attn_resid_dropout")

    def build(self, input_shape=None) -> None:
        self.c_attn.build()
        self.c_proj.build()
        self.built = True

    def _split_heads(self, x: tf.Tensor) -> tf.Tensor:
        """[N, S, n_embd] -> [N, n_head, S, head_size]."""
        c = self.config
        x = tf.reshape(x, tf.concat([tf.shape(x)[:-1], [c.n_head, c.head_size]], axis=0))
        return tf.transpose(x, [0, 2, 1, 3])

    def call(self, x: tf.Tensor, training: bool | None = None,
             return_probs: bool = False):
        """Args: x float [N, S, n_embd].

        Returns: a float [N, S, n_embd] (after c_proj and residual dropout; the residual sum is
        the block's), and with `return_probs` the softmax output [N, n_head, S, S] before
        attention dropout.
        """
        a = self.project(x, training=training, return_probs=return_probs)
        if return_probs:
            a, probs = a
        a = self.resid_dropout(a, training=training)
        return (a, probs) if return_probs else a

    def project(self, x: tf.Tensor, training: bool | None = None, return_probs: bool = False,
                fused: bool = False, with_bias: bool = True):
        """`call` without the residual dropout: c_proj's output float [N, S, n_embd] (and the
        probabilities with `return_probs`); `GptBlock` applies `resid_dropout`'s mask itself in
        its fused training path.

        `fused` (training, no injected probability mask, `fused_attention_softmax` set): the
        scale, causal mask, softmax and dropout run as the XLA kernels of
        `bert_tf.modeling.fused.attention_softmax_dropout` (the dropout layer's own keep mask;
        the same values up to float rounding).
        `with_bias=False`: c_proj's output without its bias [N·S, n_embd] (flattened), for a
        fused kernel that adds it."""
        q, k, v = tf.split(self.c_attn(x), 3, axis=-1)
        q, v = self._split_heads(q), self._split_heads(v)
        k = tf.transpose(self._split_heads(k), [0, 1, 3, 2])  # [N, H, D, S], as the original
        if fused and training and self.fused_attention_softmax and \
                not self.probs_dropout.has_injected_mask:
            w = tf.matmul(q, k)
            dropped, probs = attention_softmax_dropout(
                w, None, self.probs_dropout.keep_mask(w, training),
                self.probs_dropout.keep_scale, head_size=self.config.head_size, causal=True,
                return_probs=True)
        else:
            w = tf.matmul(q, k) * tf.math.rsqrt(tf.cast(self.config.head_size, x.dtype))
            probs = tf.nn.softmax(causal_mask_scores(w))
            dropped = self.probs_dropout(probs, training=training)
        a = tf.matmul(dropped, v)  # [N, H, S, D]
        a = tf.transpose(a, [0, 2, 1, 3])
        if not with_bias:
            a = self.c_proj.matmul_2d(tf.reshape(a, [-1, self.config.n_embd]), with_bias=False)
            return (a, probs) if return_probs else a
        a = tf.reshape(a, tf.concat([tf.shape(a)[:-2], [self.config.n_embd]], axis=0))
        a = self.c_proj(a)
        return (a, probs) if return_probs else a

    def call_cached(self, x: tf.Tensor, cache: tuple[tf.Tensor, tf.Tensor],
                    index: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """Inference with a key/value cache: the new positions index..index+T-1 attend to the
        cached ones and to themselves (eval mode: no dropout).

        Args: x float [N, T, n_embd] (the inputs at positions index..index+T-1); cache (keys,
        values), each float [N·n_head, C, head_size] (row n·n_head + h: example n, head h; slot
        s = position s; slots < index hold the earlier positions, later ones are ignored);
        index int32 [] (the first new position; index + T <= C).

        Returns: (a float [N, T, n_embd], as `call` gives at those positions for the whole
        prefix; the cache with the new keys and values written at slots index..index+T-1).

        The cache is 3-D, heads folded into the batch axis, so that the attention's batched
        matmuls take it as it is: with [N, n_head, C, head_size], XLA fed the matmul and the
        loop's output from two copies of the updated cache and copied each cache tensor twice
        per decode step (4 cache copies per layer per token; none now, optimized HLO).
        """
        c = self.config
        n, t = tf.shape(x)[0], tf.shape(x)[1]

        def heads(y):  # [N, T, n_embd] -> [N·n_head, T, head_size]
            y = tf.reshape(y, [n, t, c.n_head, c.head_size])
            return tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [n * c.n_head, t, c.head_size])

        q, k, v = tf.split(self.c_attn(x), 3, axis=-1)
        keys, values = cache
        new_k, new_v = tf.cast(heads(k), keys.dtype), tf.cast(heads(v), values.dtype)
        index = tf.cast(index, tf.int32)
        if self.cache_write == "select":
            keys = select_cache_write(keys, new_k, index)
            values = select_cache_write(values, new_v, index)
        else:
            zero = tf.zeros([], tf.int32)
            keys = keras.ops.slice_update(keys, [zero, index, zero], new_k)
            values = keras.ops.slice_update(values, [zero, index, zero], new_v)
        w = tf.matmul(heads(q), keys, transpose_b=True)  # [N·H, T, C]
        w = w * tf.math.rsqrt(tf.cast(c.head_size, x.dtype))
        probs = tf.nn.softmax(cached_causal_mask_scores(w, index))
        a = tf.reshape(tf.matmul(probs, values), [n, c.n_head, t, c.head_size])
        a = tf.reshape(tf.transpose(a, [0, 2, 1, 3]), [n, t, c.n_embd])
        return self.c_proj(a), (keys, values)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}
