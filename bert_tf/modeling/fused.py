"""A training step's elementwise chains as XLA kernels: dropout + residual + LayerNorm, bias +
GELU, and the attention's scale + mask + softmax + dropout (training only; both model families).

Op by op, TensorFlow runs each of these chains as 10-25 forward and backward kernels over
[rows, width] tensors (the mask multiplies, the adds, the moments, the normalisation, the tanh
polynomial, the softmax and their gradients' reductions, the bias and gamma/beta sums) and, in
mixed precision, the casts around the float32 statistics. Here each chain is one XLA-compiled
forward kernel and one backward kernel (closed-form gradients), joined by a custom gradient:

- `dropout_residual_layer_norm`: LayerNorm(dropout(x [+ bias]) + residual), whose backward also
  gives the gamma/beta sums and, with `bias`, the preceding dense layer's bias gradient (no
  BiasAddGrad pass over the [rows, H] gradient);
- `bias_gelu`: gelu(x + bias) (the tanh form), whose backward also gives the bias gradient;
- `attention_softmax_dropout`: dropout(softmax(scores · scale + mask)), BERT's additive key mask
  or GPT-1's causal `w·b − 1e9·(1 − b)`;
- `widened_bias_add`: float32(x) + bias, the masked-LM head's 16-bit logits widened and biased
  under a mixed policy, whose backward gives the 16-bit gradient and the bias gradient from one
  read of the float32 gradient (used by `MaskedLMHead` with `xla_in_training`).

Numbers: the dropout masks are the callers' (drawn by the dropout layers as before, passed as the
layer's scale-or-zero mask or as its boolean keep mask with the scale: the same random streams
and kept elements, the same products), each sum is rounded to the input dtype where the op-by-op
path rounds it (the BiasAdd, the masked residual sum), and statistics are float32 as Keras'
LayerNormalization, GPT-1's `norm` and TensorFlow's softmax compute them. What differs is float
rounding only: XLA's order of the reductions (mean, variance, softmax sums, the gradients' row
and column sums) and its exp/tanh. Used only while training, when `xla_gelu_in_training` is on
(BERT; the pretraining trainer's default) and for GPT-1's blocks (always, as its GELU);
inference keeps the plain op pattern, which needs no XLA. `attention_softmax_dropout` is used
only where `BertTransformerBlock.fused_attention_softmax` / `GptAttention.fused_attention_softmax`
is set (off: on CPU XLA's softmax over [B, N, S, S] measured slower than oneDNN's).
"""
from __future__ import annotations

import math

import tensorflow as tf

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715
# GPT-1's `mask_attn_weights` score for a later key (train.py: w·b − 1e9·(1 − b)).
_CAUSAL_MASKED_SCORE = -1e9


def _apply_mask(x, mask, keep_scale):
    """x · mask in x's dtype; `mask` a scale-or-zero float mask, or a bool keep mask whose kept
    elements are scaled by `keep_scale` (the same product: x · where(keep, scale, 0))."""
    if mask.dtype == tf.bool:  # keep_scale: a constant of x's dtype (as the layer's mask has it)
        mask = tf.where(mask, keep_scale, tf.zeros([], x.dtype))
    return x * tf.cast(mask, x.dtype)


# --- dropout + residual + LayerNorm -------------------------------------------------------------

@tf.function(jit_compile=True, autograph=False)
def _forward(x, mask, residual, gamma, beta, epsilon, bias, keep_scale):
    if bias is not None:
        x = x + bias  # the BiasAdd, rounded to x's dtype as before
    summed = tf.cast(_apply_mask(x, mask, keep_scale) + residual, tf.float32)  # rounded first
    mean = tf.reduce_mean(summed, axis=-1, keepdims=True)
    centered = summed - mean
    variance = tf.reduce_mean(centered * centered, axis=-1, keepdims=True)
    rstd = tf.math.rsqrt(variance + epsilon)
    normalized = centered * rstd
    return tf.cast(normalized * gamma + beta, x.dtype), normalized, rstd


@tf.function(jit_compile=True, autograph=False)
def _backward(dy, mask, normalized, rstd, gamma, keep_scale, with_bias):
    dtype = dy.dtype
    dy = tf.cast(dy, tf.float32)
    dgamma = tf.reduce_sum(dy * normalized, axis=0)
    dbeta = tf.reduce_sum(dy, axis=0)
    g = dy * gamma
    dsum = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                   - normalized * tf.reduce_mean(g * normalized, axis=-1, keepdims=True))
    dsum = tf.cast(dsum, dtype)
    dx = _apply_mask(dsum, mask, keep_scale)
    # The bias gradient: the sum over rows BiasAddGrad would compute (of the x-dtype gradient).
    dbias = tf.cast(tf.reduce_sum(tf.cast(dx, tf.float32), axis=0), dtype) if with_bias else None
    return dx, dsum, dgamma, dbeta, dbias


def dropout_residual_layer_norm(x: tf.Tensor, mask: tf.Tensor | None, residual: tf.Tensor,
                                gamma: tf.Tensor, beta: tf.Tensor, epsilon: float,
                                bias: tf.Tensor | None = None,
                                keep_scale: float | None = None) -> tf.Tensor:
    """LayerNorm((x [+ bias]) · mask + residual) over the last axis, in two XLA kernels.

    Args:
      x: float [..., H] (bfloat16/float16 under a mixed policy), the sublayer's output (any
        leading axes: computed on [rows, H]); without its bias when `bias` is given.
      mask: the dropout layer's scale-or-zero mask, x's dtype and shape (kept elements
        1 / keep_probability, dropped 0); or its bool keep mask with `keep_scale`; or None (no
        dropout). Either of x's number of elements, in row-major order.
      residual: float [..., H], x's number of elements (e.g. [batch, seq, H] for x [rows, H]).
      gamma, beta: float32 [H], the LayerNorm's scale and offset.
      epsilon: added to the biased variance.
      bias: optional float [H], the dense layer's bias (any float dtype; added in x's dtype, as
        BiasAdd does): its gradient comes from the backward kernel (no separate BiasAddGrad).
      keep_scale: the scale of kept elements, with a bool `mask` (the layer's 1 / keep
        probability; rounded to x's dtype, as the layer's float mask is).

    Returns:
      x's dtype and shape: (s - mean(s)) · rsqrt(var(s) + epsilon) · gamma + beta for
      s = (x + bias) · mask + residual (each sum rounded to x's dtype), statistics in float32.
    """
    x = tf.convert_to_tensor(x)
    if mask is not None and mask.dtype == tf.bool and keep_scale is None:
        raise ValueError("dropout_residual_layer_norm: a bool keep mask needs keep_scale")
    with tf.name_scope("fused_ln"):
        shape = tf.shape(x)
        width = x.shape[-1] if x.shape[-1] is not None else shape[-1]
        def rows(t):  # [..., H] -> [rows, H]
            return t if t.shape.rank == 2 else tf.reshape(t, [-1, width])

        if mask is None:
            mask = tf.ones([], x.dtype)
        elif mask.dtype != tf.bool:
            mask = tf.cast(mask, x.dtype)
        mask = rows(mask) if mask.shape.rank else mask
        scale = tf.constant(1.0 if keep_scale is None else keep_scale, x.dtype)
        args = (rows(x), mask, rows(tf.cast(residual, x.dtype)), tf.cast(gamma, tf.float32),
                tf.cast(beta, tf.float32), tf.constant(epsilon, tf.float32), scale)
        if bias is None:
            y = _layer_norm(*args)
        else:
            y = _bias_layer_norm(*args, tf.cast(bias, x.dtype))
        return y if x.shape.rank == 2 else tf.reshape(y, shape)


@tf.custom_gradient
def _layer_norm(x, mask, residual, gamma, beta, epsilon, keep_scale):
    y, normalized, rstd = _forward(x, mask, residual, gamma, beta, epsilon, None, keep_scale)

    def grad(dy):
        with tf.name_scope("fused_ln_grad"):
            dx, dresidual, dgamma, dbeta, _ = _backward(dy, mask, normalized, rstd, gamma,
                                                        keep_scale, False)
        # The mask and epsilon are constants of the step (the mask is the dropout draw's).
        return dx, None, dresidual, dgamma, dbeta, None, None

    return y, grad


@tf.custom_gradient
def _bias_layer_norm(x, mask, residual, gamma, beta, epsilon, keep_scale, bias):
    y, normalized, rstd = _forward(x, mask, residual, gamma, beta, epsilon, bias, keep_scale)

    def grad(dy):
        with tf.name_scope("fused_ln_grad"):
            dx, dresidual, dgamma, dbeta, dbias = _backward(dy, mask, normalized, rstd, gamma,
                                                            keep_scale, True)
        return dx, None, dresidual, dgamma, dbeta, None, None, dbias

    return y, grad


# --- bias + GELU ----------------------------------------------------------------------------------

@tf.function(jit_compile=True, autograph=False)
def _bias_gelu_forward(h, bias):
    x = tf.cast(h + bias, tf.float32)  # the BiasAdd in h's dtype, then the GELU in float32
    t = tf.tanh(_SQRT_2_OVER_PI * (x + _CUBIC * x * x * x))
    return tf.cast(0.5 * x * (1.0 + t), h.dtype), x, t


@tf.function(jit_compile=True, autograph=False)
def _bias_gelu_backward(dy, x, t):
    # d/dx 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), as `activations.gelu_xla`.
    du_dx = _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * x * x)
    dx = tf.cast(tf.cast(dy, tf.float32) * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx),
                 dy.dtype)
    return dx, tf.cast(tf.reduce_sum(tf.cast(dx, tf.float32), axis=0), dy.dtype)


def bias_gelu(h: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """gelu(h + bias) (the tanh form of `bert_tf.modeling.activations.gelu`) for training: one
    XLA kernel forward, one backward that also gives the bias gradient (so neither the BiasAdd
    nor its BiasAddGrad is a separate pass over the [rows, I] tensor).

    Args:
      h: float [rows, I] (bfloat16/float16 under a mixed policy): the dense layer's matmul output
        without its bias.
      bias: float [I], the bias (added in h's dtype, as BiasAdd does; a float32 variable under a
        mixed policy is cast to h's dtype first, as the layer's own read casts it).

    Returns:
      h's dtype [rows, I]: the GELU of the rounded sum, computed in float32 and rounded once (as
      `gelu_xla`); equal to BiasAdd + `gelu_xla` up to float rounding of the bias gradient's sum.
    """
    h = tf.convert_to_tensor(h)
    with tf.name_scope("gelu_xla"):  # names the XLA call ops (bench/profile_train_step.py)
        return _bias_gelu(h, tf.cast(bias, h.dtype))


@tf.custom_gradient
def _bias_gelu(h, bias):
    y, x, t = _bias_gelu_forward(h, bias)

    def grad(dy):
        with tf.name_scope("gelu_xla_grad"):
            return _bias_gelu_backward(dy, x, t)

    return y, grad


def xla_kernels() -> dict:
    """The XLA-compiled functions behind `dropout_residual_layer_norm` and `bias_gelu`, by name,
    for benchmarks that time or inspect one kernel alone (`bench/bench_fused_kernels.py`):

    - "layer_norm_forward"(x, mask, residual, gamma, beta, epsilon, bias, keep_scale) ->
      (y, normalized, rstd); "layer_norm_backward"(dy, mask, normalized, rstd, gamma,
      keep_scale, with_bias) -> (dx, dsum, dgamma, dbeta, dbias);
    - "bias_gelu_forward"(h, bias) -> (y, x, t); "bias_gelu_backward"(dy, x, t) -> (dx, dbias).
    """
    return {"layer_norm_forward": _forward, "layer_norm_backward": _backward,
            "bias_gelu_forward": _bias_gelu_forward, "bias_gelu_backward": _bias_gelu_backward}


# --- a 16-bit product widened to float32, plus a float32 bias --------------------------------------

@tf.function(jit_compile=True, autograph=False)
def _widened_bias_add_forward(x, bias):
    return tf.cast(x, tf.float32) + bias


@tf.function(jit_compile=True, autograph=False)
def _widened_bias_add_backward(dy, x_dtype):
    return tf.cast(dy, x_dtype), tf.reduce_sum(dy, axis=0)


def widened_bias_add(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """float32(x) + bias for training under a mixed policy: the masked-LM head's 16-bit logits
    product widened and its float32 output bias added in one XLA kernel, and in the backward
    the 16-bit gradient of the product and the bias gradient from one read of the float32
    gradient (op by op: a Cast and a BiasAdd forward, a BiasAddGrad and a Cast backward, each a
    pass over [rows, vocab] float32).

    Args:
      x: bfloat16/float16 [rows, V], the product without its bias.
      bias: float32 [V].

    Returns:
      float32 [rows, V]: equal to `tf.nn.bias_add(tf.cast(x, tf.float32), bias)` bit for bit
      (one float32 addition per element); the bias gradient (the column sums of the incoming
      gradient) equals BiasAddGrad's up to the order of its float32 sums.
    """
    x = tf.convert_to_tensor(x)
    if x.shape.rank != 2:
        raise ValueError(f"widened_bias_add: x must be [rows, V], got shape {x.shape}")
    with tf.name_scope("widened_bias_add_xla"):
        return _widened_bias_add(x, tf.cast(bias, tf.float32))


@tf.custom_gradient
def _widened_bias_add(x, bias):
    def grad(dy):
        with tf.name_scope("widened_bias_add_xla_grad"):
            return _widened_bias_add_backward(dy, x.dtype)

    return _widened_bias_add_forward(x, bias), grad


# --- scale + mask + softmax + dropout -------------------------------------------------------------

def _masked_scores(scores, adder, scale, causal):
    """The attention logits as the layers compute them, in the scores' dtype."""
    if scale is not None:
        scores = scores * tf.math.rsqrt(tf.cast(scale, scores.dtype))
    if adder is not None:
        scores = scores + tf.cast(adder, scores.dtype)
    if causal:
        n = tf.shape(scores)[-1]
        b = tf.linalg.band_part(tf.ones([n, n], scores.dtype), -1, 0)
        scores = scores * b + _CAUSAL_MASKED_SCORE * (1.0 - b)
    return scores


def _attention_kernels(causal: bool, scaled: bool, with_adder: bool):
    """The forward and backward XLA kernels of one variant of `attention_softmax_dropout`."""

    @tf.function(jit_compile=True, autograph=False)
    def forward(scores, adder, head_size, mask, keep_scale):
        logits = _masked_scores(scores, adder if with_adder else None,
                                head_size if scaled else None, causal)
        probs = tf.cast(tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1), scores.dtype)
        return _apply_mask(probs, mask, keep_scale), probs

    @tf.function(jit_compile=True, autograph=False)
    def backward(dy, probs, head_size, mask, keep_scale):
        dprobs = tf.cast(_apply_mask(dy, mask, keep_scale), tf.float32)
        p = tf.cast(probs, tf.float32)
        dlogits = (dprobs - tf.reduce_sum(dprobs * p, axis=-1, keepdims=True)) * p  # SoftmaxGrad
        dlogits = tf.cast(dlogits, dy.dtype)
        if causal:
            n = tf.shape(dlogits)[-1]
            dlogits = dlogits * tf.linalg.band_part(tf.ones([n, n], dy.dtype), -1, 0)
        if scaled:
            dlogits = dlogits * tf.math.rsqrt(tf.cast(head_size, dy.dtype))
        return dlogits

    return forward, backward


_ATTENTION_KERNELS = {(c, s, a): _attention_kernels(c, s, a)
                      for c in (False, True) for s in (False, True) for a in (False, True)}


def attention_softmax_dropout(scores: tf.Tensor, mask_adder: tf.Tensor | None = None,
                              dropout_mask: tf.Tensor | None = None,
                              keep_scale: float | None = None, head_size: int | None = None,
                              causal: bool = False, return_probs: bool = False):
    """dropout(softmax(scores [· rsqrt(head_size)] [+ mask_adder] [causal mask])) over the last
    axis, in one XLA kernel forward and one backward (softmax's gradient, the mask and scale's).

    Args:
      scores: float [..., Q, K] (e.g. [batch, heads, S, S]), the query-key products.
      mask_adder: optional float, broadcastable to scores (BERT's [batch, 1, 1, S] additive key
        mask, `attention_mask_adder`); added in the scores' dtype.
      dropout_mask: the dropout layer's scale-or-zero mask (scores' shape and dtype) or its bool
        keep mask with `keep_scale`; None: no dropout.
      keep_scale: the kept elements' scale with a bool `dropout_mask`.
      head_size: optional: the scores are first multiplied by rsqrt(head_size) in their dtype
        (GPT-1's `w * rsqrt(head_size)`; BERT folds the scale into its query kernel).
      causal: GPT-1's `mask_attn_weights`: w·b − 1e9·(1 − b), b the lower triangle (Q == K).
      return_probs: also return the probabilities before dropout.

    Returns:
      scores' dtype and shape: the dropped-out probabilities (and the probabilities). The
      softmax is computed in float32 from the logits rounded to the scores' dtype, and rounded
      once (16-bit policies); the same values as the op-by-op path up to float rounding.
    """
    scores = tf.convert_to_tensor(scores)
    if dropout_mask is not None and dropout_mask.dtype == tf.bool and keep_scale is None:
        raise ValueError("attention_softmax_dropout: a bool keep mask needs keep_scale")
    with tf.name_scope("fused_softmax"):
        forward, backward = _ATTENTION_KERNELS[(bool(causal), head_size is not None,
                                                mask_adder is not None)]
        adder = tf.zeros([], scores.dtype) if mask_adder is None else tf.cast(mask_adder,
                                                                               scores.dtype)
        if dropout_mask is None:
            dropout_mask = tf.ones([], scores.dtype)
        elif dropout_mask.dtype != tf.bool:
            dropout_mask = tf.cast(dropout_mask, scores.dtype)
        size = tf.constant(1.0 if head_size is None else float(head_size), tf.float32)
        scale = tf.constant(1.0 if keep_scale is None else keep_scale, scores.dtype)

        @tf.custom_gradient
        def fused(scores, adder):
            dropped, probs = forward(scores, adder, size, dropout_mask, scale)

            def grad(dy, dprobs=None):
                # The probabilities are returned for inspection only (no gradient through them).
                with tf.name_scope("fused_softmax_grad"):
                    return backward(dy, probs, size, dropout_mask, scale), None

            return (dropped, probs), grad

        dropped, probs = fused(scores, adder)
        return (dropped, probs) if return_probs else dropped
