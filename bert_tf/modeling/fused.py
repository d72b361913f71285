"""Dropout + residual + LayerNorm of a post-LN transformer block as two XLA kernels (training).

A post-LN block ends each half with `LayerNorm(dropout(x) + residual)`. Op by op, TensorFlow
runs that as ~10 forward and ~25 backward kernels over [rows, H] tensors (the mask multiply, the
add, the moments, the normalisation, its gradient's reductions and the gamma/beta sums) and, in
mixed precision, the casts around the float32 statistics. `dropout_residual_layer_norm` computes
the same function as one XLA-compiled forward kernel and one backward kernel (a closed-form
LayerNorm gradient), with a custom gradient.

Numbers: the dropout mask is the caller's (drawn by the dropout layer as before, so the random
streams and the kept elements are unchanged), the masked sum `x · mask + residual` is rounded to
the input dtype as before, and the statistics are float32 as Keras' LayerNormalization and
GPT-1's `norm` compute them. What differs is float rounding only: the order of the reductions
(mean, variance, the gradient's row sums) is XLA's. Used only while training, when
`xla_gelu_in_training` is on (BERT; the pretraining trainer's default) and for GPT-1's blocks
(always, as its GELU); inference keeps Keras' LayerNorm op pattern, which needs no XLA.
"""
from __future__ import annotations

import tensorflow as tf


@tf.function(jit_compile=True, autograph=False)
def _forward(x, mask, residual, gamma, beta, epsilon):
    summed = tf.cast(x * mask + residual, tf.float32)  # rounded to x's dtype first, as before
    mean = tf.reduce_mean(summed, axis=-1, keepdims=True)
    centered = summed - mean
    variance = tf.reduce_mean(centered * centered, axis=-1, keepdims=True)
    rstd = tf.math.rsqrt(variance + epsilon)
    normalized = centered * rstd
    return tf.cast(normalized * gamma + beta, x.dtype), normalized, rstd


@tf.function(jit_compile=True, autograph=False)
def _backward(dy, mask, normalized, rstd, gamma):
    dy = tf.cast(dy, tf.float32)
    dgamma = tf.reduce_sum(dy * normalized, axis=0)
    dbeta = tf.reduce_sum(dy, axis=0)
    g = dy * gamma
    dsum = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                   - normalized * tf.reduce_mean(g * normalized, axis=-1, keepdims=True))
    dsum = tf.cast(dsum, mask.dtype)
    return dsum * mask, dsum, dgamma, dbeta


def dropout_residual_layer_norm(x: tf.Tensor, mask: tf.Tensor | None, residual: tf.Tensor,
                                gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """LayerNorm(x · mask + residual) over the last axis, in two XLA kernels (see module doc).

    Args:
      x: float [..., H] (bfloat16/float16 under a mixed policy), the sublayer's output (any
        leading axes: computed on [rows, H]).
      mask: the dropout layer's scale-or-zero mask, x's dtype and shape (kept elements
        1 / keep_probability, dropped 0), or None (no dropout).
      residual: float [..., H], x's shape.
      gamma, beta: float32 [H], the LayerNorm's scale and offset.
      epsilon: added to the biased variance.

    Returns:
      x's dtype and shape: (s - mean(s)) · rsqrt(var(s) + epsilon) · gamma + beta for
      s = x · mask + residual (rounded to x's dtype), statistics in float32.
    """
    x = tf.convert_to_tensor(x)
    with tf.name_scope("fused_ln"):
        shape = tf.shape(x)
        width = x.shape[-1] if x.shape[-1] is not None else shape[-1]
        rows = (lambda t: t) if x.shape.rank == 2 else (lambda t: tf.reshape(t, [-1, width]))
        mask = tf.ones([], x.dtype) if mask is None else rows(tf.cast(mask, x.dtype))
        y = _layer_norm(rows(x), mask, rows(tf.cast(residual, x.dtype)),
                        tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32),
                        tf.constant(epsilon, tf.float32))
        return y if x.shape.rank == 2 else tf.reshape(y, shape)


@tf.custom_gradient
def _layer_norm(x, mask, residual, gamma, beta, epsilon):
    y, normalized, rstd = _forward(x, mask, residual, gamma, beta, epsilon)

    def grad(dy):
        with tf.name_scope("fused_ln_grad"):
            dx, dresidual, dgamma, dbeta = _backward(dy, mask, normalized, rstd, gamma)
        # The mask and epsilon are constants of the step (the mask is the dropout draw's).
        return dx, None, dresidual, dgamma, dbeta, None

    return y, grad
