"""Softmax cross-entropy against integer labels over a large vocabulary, as two XLA kernels.

A language-model loss reads and writes every logit: at GPT-1's default bench size that is
[1016, 40609] float32 (165 MB) per step. TensorFlow's `SparseSoftmaxCrossEntropyWithLogits` CPU
kernel computes the loss and its gradient in 72.7 ms there; the same math as one XLA kernel for
the loss (max, sum of exponentials, the label's logit) and one for the gradient (softmax - one-hot)
takes 22.4 ms on the same 2-core CPU (`bench/bench_gpt_lm_head.py`). The kernels work in float32:
16-bit logits are widened first by TensorFlow's Cast (XLA's CPU code reads bfloat16 about 2x
slower). Values equal TensorFlow's kernel up to float rounding (the loss is
`log Σ exp(x - max) - (x_label - max)`, as that kernel computes it).
"""
from __future__ import annotations

import tensorflow as tf


@tf.function(jit_compile=True, autograph=False)
def _forward(x: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    max_logit = tf.reduce_max(x, axis=-1, keepdims=True)
    log_sum = tf.math.log(tf.reduce_sum(tf.exp(x - max_logit), axis=-1, keepdims=True))
    picked = tf.gather(x, labels[:, None], axis=1, batch_dims=1)  # [N, 1]
    return (log_sum - (picked - max_logit))[:, 0], log_sum + max_logit


@tf.function(jit_compile=True, autograph=False)
def _forward_and_argmax(logits: tf.Tensor, labels: tf.Tensor
                        ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    losses, log_normalizer = _forward.python_function(logits, labels)
    return losses, log_normalizer, tf.argmax(logits, axis=-1, output_type=tf.int32)


@tf.function(jit_compile=True, autograph=False)
def _backward(dloss: tf.Tensor, x: tf.Tensor, labels: tf.Tensor,
              log_normalizer: tf.Tensor) -> tf.Tensor:
    one_hot = tf.one_hot(labels, tf.shape(x)[-1], dtype=x.dtype)
    return (tf.exp(x - log_normalizer) - one_hot) * dloss[:, None]


@tf.custom_gradient
def _rows(logits: tf.Tensor, labels: tf.Tensor):
    losses, log_normalizer = _forward(logits, labels)

    def grad(dloss):
        return _backward(dloss, logits, labels, log_normalizer), None

    return losses, grad


@tf.custom_gradient
def _rows_and_predictions(logits: tf.Tensor, labels: tf.Tensor):
    losses, log_normalizer, predictions = _forward_and_argmax(logits, labels)

    def grad(dloss, dpredictions=None):
        return _backward(dloss, logits, labels, log_normalizer), None

    return (losses, predictions), grad


def sparse_softmax_cross_entropy(labels: tf.Tensor, logits: tf.Tensor,
                                 return_predictions: bool = False
                                 ) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
    """`tf.nn.sparse_softmax_cross_entropy_with_logits` as XLA kernels, always in float32.

    Args:
      labels: int [...], each in [0, V).
      logits: float [..., V] (float32 or 16-bit; the math is float32 either way).
      return_predictions: also return the arg-max class of each row (the same as the arg-max of
        the log-probabilities), for an accuracy metric.

    Returns: float32 [...], the per-position losses (and int32 [...] predictions). The gradient
    reaches `logits` in their dtype. A label outside [0, V) raises InvalidArgumentError (the
    one-hot would silently give a wrong loss).
    """
    logits = tf.convert_to_tensor(logits)
    labels = tf.cast(labels, tf.int32)
    vocab = tf.shape(logits)[-1]
    message = "label outside [0, number of classes) for the softmax cross-entropy"
    checks = [tf.debugging.assert_less(labels, vocab, message=message),
              tf.debugging.assert_non_negative(labels, message=message)]
    with tf.control_dependencies(checks):
        flat_labels = tf.reshape(labels, [-1])
    # 16-bit logits are widened by TensorFlow's Cast (its gradient narrows the result back):
    # XLA's CPU kernels read and write bfloat16 element by element, about 2x slower here.
    flat_logits = tf.cast(tf.reshape(logits, [-1, vocab]), tf.float32)
    if not return_predictions:
        return tf.reshape(_rows(flat_logits, flat_labels), tf.shape(labels))
    losses, predictions = _rows_and_predictions(flat_logits, flat_labels)
    return tf.reshape(losses, tf.shape(labels)), tf.reshape(predictions, tf.shape(labels))
